"""The embedded cluster: a durable in-process Kafka cluster on a simulated clock."""
