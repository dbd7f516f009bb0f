"""The authorized-operations bits as Kafka 4.4 computes them (``AclEntry.supportedOperations``
per resource type: DELETE exists on topics, CLUSTER_ACTION and IDEMPOTENT_WRITE on the
cluster, READ and WRITE on topics only), asked the same way of a real cluster and of the
twin: Metadata v10 (topic and cluster bits), Metadata v12 (topic bits) and DescribeCluster."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kafka.protocol.admin import CreateTopicsRequest, DescribeClusterRequest
from kafka.protocol.metadata import MetadataRequest

from tests.real.fixtures import Session, twin_fixture
from tests.serve.raw_wire import Wire, bits

_Create = CreateTopicsRequest.CreatableTopic


def observe(bootstrap: str, topic: str) -> dict[str, Any]:
    w = Wire(bootstrap)
    try:
        r = w.send(CreateTopicsRequest(topics=[_Create(
            name=topic, num_partitions=1, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=10_000, validate_only=False))
        assert [t.error_code for t in r.topics] in ([0], [36]), r  # 36: it exists already
        out: dict[str, Any] = {}
        for version in (10, 12):
            m = w.send(MetadataRequest(
                version=version, topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                allow_auto_topic_creation=False, include_topic_authorized_operations=True,
                **({"include_cluster_authorized_operations": True} if version < 11 else {})))
            out[f"metadata v{version} topic"] = [bits(t.authorized_operations) for t in m.topics]
            if version < 11:
                out[f"metadata v{version} cluster"] = bits(m.authorized_operations)
        d = w.send(DescribeClusterRequest(include_cluster_authorized_operations=True))
        out["describe cluster"] = bits(d.authorized_operations)
        return out
    finally:
        w.close()


twin = twin_fixture(observe, brokers=4, topics=[])


def test_authorized_operations_are_kafkas(real_kafka: Session,
                                          twin: Callable[[str], dict[str, Any]]) -> None:
    topic = real_kafka.topic("ops")
    real = observe(real_kafka.cluster.bootstrap(), topic)
    # READ WRITE CREATE DELETE ALTER DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS on a topic
    assert real["metadata v12 topic"] == [[3, 4, 5, 6, 7, 8, 10, 11]], real
    # CREATE ALTER DESCRIBE CLUSTER_ACTION DESCRIBE_CONFIGS ALTER_CONFIGS IDEMPOTENT_WRITE
    assert real["describe cluster"] == [5, 7, 8, 9, 10, 11, 12], real
    assert twin(topic) == real
