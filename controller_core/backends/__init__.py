"""ClusterAdmin implementations beyond the embedded cluster: ``kafka`` (a real Apache Kafka
cluster, or ``kraftsman cluster serve``, through kafka-python's admin client)."""

from controller_core.backends.kafka_admin import KafkaAdmin, RetryPolicy, open_kafka_admin
from controller_core.backends.security import SecretError, connection_settings

__all__ = ["KafkaAdmin", "RetryPolicy", "SecretError", "connection_settings", "open_kafka_admin"]
