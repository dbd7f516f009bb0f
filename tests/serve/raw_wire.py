"""Raw Kafka requests to one cluster — a real one or ``cluster serve`` — through
kafka-python's connection manager, answered as the broker sent them: what the differential
and wire tests compare, below any client library's interpretation."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import (
    CreateTopicsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest
from kafka.record import MemoryRecordsBuilder

from controller_core.admin import THROTTLE_MARKER_TOPIC

_Res = IncrementalAlterConfigsRequest.AlterConfigsResource
_Desc = DescribeConfigsRequest.DescribeConfigsResource
_Topic = CreateTopicsRequest.CreatableTopic
_Produce = ProduceRequest.TopicProduceData


class Wire:
    """Raw requests to one cluster, through kafka-python's connection manager."""

    def __init__(self, bootstrap: str) -> None:
        self.client = KafkaAdminClient(bootstrap_servers=bootstrap)

    def send(self, request: Any, node: int | None = None) -> Any:
        m = self.client._manager
        return m.run(m.send, request, node, 10_000)

    def close(self) -> None:
        self.client.close()

    def alter(self, rtype: int, name: str, key: str, value: str | None,
              op: int | None = None) -> tuple[int, str | None]:
        """One IncrementalAlterConfigs entry; ``op`` (0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT)
        defaults to SET, or DELETE for a None value."""
        r = self.send(IncrementalAlterConfigsRequest(resources=[_Res(
            resource_type=rtype, resource_name=name, configs=[_Res.AlterableConfig(
                name=key, config_operation=(0 if value is not None else 1) if op is None else op,
                value=value)])],
            validate_only=False), node=int(name) if rtype == 4 else None)
        res = r.responses[0]
        return res.error_code, res.error_message

    def topic_config(self, topic: str, key: str, node: int | None = None) -> tuple[Any, int]:
        """(value, config source) of one topic config, as ``node`` (any broker) describes it."""
        r = self.send(DescribeConfigsRequest(resources=[_Desc(
            resource_type=2, resource_name=topic, configuration_keys=[key])],
            include_synonyms=False), node=node)
        found = [(c.value, c.config_source) for c in r.results[0].configs if c.name == key]
        return found[0] if found else (None, -1)

    def brokers(self) -> list[int]:
        return sorted(b.node_id for b in self.metadata("__no_such_topic__").brokers)

    def topic_config_settled(self, topic: str, key: str, stable_s: float = 0.6
                             ) -> tuple[Any, int]:
        """What every broker describes once they agree and keep agreeing for ``stable_s`` (a
        broker applies a change when its copy of the metadata log reaches it)."""
        deadline = time.monotonic() + 30
        since, last = time.monotonic(), None
        while True:
            seen = {self.topic_config(topic, key, b) for b in self.brokers()}
            now = time.monotonic()
            if len(seen) != 1 or seen != last:
                since, last = now, seen
            elif now - since >= stable_s:
                return next(iter(seen))
            assert now < deadline, f"the brokers describe {topic} {key} as {seen}"
            time.sleep(0.1)

    def described(self, broker: str, keys: list[str] | None) -> dict[str, tuple[Any, ...]]:
        r = self.send(DescribeConfigsRequest(resources=[_Desc(
            resource_type=4, resource_name=broker, configuration_keys=keys)],
            include_synonyms=False), node=int(broker))
        return {c.name: (c.value, c.read_only, c.config_source, c.is_sensitive, c.config_type)
                for c in r.results[0].configs if c.name.startswith("kraftsman")}

    def described_once(self, broker: str, settled: Callable[[dict[str, Any]], bool]
                       ) -> dict[str, tuple[Any, ...]]:
        """A broker applies a config change when the metadata log reaches it, a moment after
        IncrementalAlterConfigs answered: poll (with a deadline) until ``settled``."""
        deadline = time.monotonic() + 30
        while not settled(got := self.described(broker, None)):
            assert time.monotonic() < deadline, f"broker {broker} still describes {got}"
            time.sleep(0.1)
        return got

    def create(self, name: str, configs: dict[str, str]) -> tuple[int, str | None]:
        r = self.send(CreateTopicsRequest(topics=[_Topic(
            name=name, num_partitions=1, replication_factor=1, assignments=[],
            configs=[_Topic.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()])],
            timeout_ms=10_000, validate_only=False))
        return r.topics[0].error_code, r.topics[0].error_message

    def metadata(self, topic: str) -> Any:
        return self.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            name=topic)], allow_auto_topic_creation=False))

    def marker_partition(self) -> tuple[int, Any, list[int]]:
        deadline = time.monotonic() + 30
        while True:
            r = self.metadata(THROTTLE_MARKER_TOPIC)
            t = r.topics[0]
            if t.error_code == 0 and t.partitions and t.partitions[0].leader_id >= 0:
                p = t.partitions[0]
                return p.leader_id, t.topic_id, sorted(b.node_id for b in r.brokers)
            assert time.monotonic() < deadline, f"no leader for {THROTTLE_MARKER_TOPIC}: {r}"
            time.sleep(0.2)

    def produce(self, node: int, topic_id: Any, records: list[tuple[bytes | None, bytes | None]],
                topic: str = THROTTLE_MARKER_TOPIC, raw: bytes | None = None, acks: int = -1,
                version: int | None = None) -> tuple[int, list[tuple[int, str]], str | None]:
        """One Produce of one batch of ``records`` (or of the ``raw`` bytes given)."""
        r = self.send(ProduceRequest(
            transactional_id=None, acks=acks, timeout_ms=10_000,
            topic_data=[_Produce(name=topic, topic_id=topic_id, partition_data=[
                _Produce.PartitionProduceData(index=0, records=raw if raw is not None
                                              else batch(records))])],
            **({"max_version": version, "min_version": version} if version else {})),
            node=node)
        if acks == 0:
            return 0, [], None
        p = r.responses[0].partition_responses[0]
        return (p.error_code, [(e.batch_index, e.batch_index_error_message)
                               for e in p.record_errors or ()], p.error_message)

    def list_offset(self, node: int, spec: int, topic: str = THROTTLE_MARKER_TOPIC
                    ) -> tuple[int, int]:
        _T = ListOffsetsRequest.ListOffsetsTopic
        r = self.send(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[_T(
            name=topic, partitions=[_T.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=spec)])],
            timeout_ms=10_000), node=node)
        p = r.topics[0].partitions[0]
        return p.error_code, p.offset

    def fetch(self, node: int, topic_id: Any, offset: int, topic: str = THROTTLE_MARKER_TOPIC,
              session_id: int = 0, version: int | None = None) -> Any:
        _T = FetchRequest.FetchTopic
        return self.send(FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 24, isolation_level=0,
            session_id=session_id, session_epoch=-1, topics=[_T(
                topic=topic, topic_id=topic_id, partitions=[_T.FetchPartition(
                    partition=0, current_leader_epoch=-1, fetch_offset=offset,
                    log_start_offset=-1, partition_max_bytes=1 << 24)])],
            forgotten_topics_data=[], rack_id="",
            **({"max_version": version, "min_version": version} if version else {})),
            node=node)


def batch(records: list[tuple[bytes | None, bytes | None]], compression: int = 0) -> bytes:
    b = MemoryRecordsBuilder(magic=2, compression_type=compression, batch_size=2**31 - 1)
    for key, value in records:
        b.append(0, key, value)
    b.close()
    return bytes(b.buffer())


def bits(ops: Any) -> list[int]:
    """The operations as bit numbers, whatever form the decoder gives (a set or an int)."""
    if ops is None:
        return []
    if isinstance(ops, int):
        return [b for b in range(32) if ops & (1 << b)] if ops >= 0 else [ops]
    return sorted(ops)
