"""kraftsman controller core: algorithms of the Kafka proposals, the embedded cluster, ports."""
