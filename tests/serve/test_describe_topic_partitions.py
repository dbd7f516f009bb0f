"""DescribeTopicPartitions (KIP-966, key 75) as ``cluster serve`` answers it, and the
``kafka`` backend's paged ``describe_partitions`` over it: pages of a set size from the lowest
wanted partition of each topic, none after the highest, every field equal to the Metadata
path's; the Metadata path when the brokers do not offer key 75. The same requests against a
real Kafka: tests/real/test_describe_topic_partitions_real.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import DescribeLogDirsRequest, DescribeTopicPartitionsRequest
from kafka.protocol.metadata import MetadataRequest

from controller_core import errors
from controller_core.admin import PartitionCounts
from controller_core.backends import kafka_admin
from controller_core.backends.kafka_admin import KafkaAdmin, RetryPolicy, open_kafka_admin
from controller_core.errors import KafkaApiError
from controller_core.model import TopicPartition
from controller_core.wire.auth import load_auth_file
from tests.helpers import cluster
from tests.serve.harness import ServedCluster, served
from tests.serve.raw_wire import Wire, bits

_Topic = DescribeTopicPartitionsRequest.TopicRequest
_Cursor = DescribeTopicPartitionsRequest.Cursor
TOPICS = [{"name": "big", "partitions": 50, "replicationFactor": 3},
          {"name": "a", "partitions": 7, "replicationFactor": 2},
          {"name": "orders", "partitions": 6, "replicationFactor": 3}]


@pytest.fixture
def twin(tmp_path: Path) -> Iterator[ServedCluster]:
    with served(cluster(tmp_path / "c", topics=TOPICS), time_scale=0) as s:
        yield s


@pytest.fixture
def wire(twin: ServedCluster) -> Iterator[Wire]:
    w = Wire(twin.bootstrap)
    yield w
    w.close()


class Recording:
    """The kafka backend with every request it sends recorded."""

    def __init__(self, bootstrap: str, page: int) -> None:
        self.admin = open_kafka_admin(bootstrap, retry=RetryPolicy(total_seconds=10))
        self.admin.partition_page = page
        self.sent: list[Any] = []
        send = self.admin._send

        def spy(request: Any, node_id: int | None = None) -> Any:
            self.sent.append(request)
            return send(request, node_id)
        self.admin._send = spy  # type: ignore[method-assign]

    def cursors(self) -> list[tuple[str, int] | None]:
        return [None if r.cursor is None else (r.cursor.topic_name, r.cursor.partition_index)
                for r in self.sent if isinstance(r, DescribeTopicPartitionsRequest)]

    def metadata_sent(self) -> int:
        return sum(isinstance(r, MetadataRequest) for r in self.sent)


@pytest.fixture
def recording(twin: ServedCluster) -> Iterator[Recording]:
    r = Recording(twin.bootstrap, page=10)
    yield r
    r.admin.close()


def page(w: Wire, topics: list[str], limit: int, cursor: tuple[str, int] | None = None
         ) -> tuple[list[tuple[int, str, list[int]]], tuple[str, int] | None]:
    r = w.send(DescribeTopicPartitionsRequest(
        topics=[_Topic(name=t) for t in topics], response_partition_limit=limit,
        cursor=None if cursor is None else _Cursor(topic_name=cursor[0],
                                                   partition_index=cursor[1])))
    nc = r.next_cursor
    return ([(t.error_code, t.name, [p.partition_index for p in t.partitions])
             for t in r.topics],
            None if nc is None else (nc.topic_name, nc.partition_index))


def test_the_served_api_is_advertised(wire: Wire) -> None:
    assert wire.client._manager.broker_version_data.api_versions[75] == (0, 0)


def test_pages_run_in_name_order_and_the_cursor_names_the_first_left_out(wire: Wire) -> None:
    # a (7) comes before big (50), orders after: the limit ends the page inside big
    assert page(wire, ["orders", "big", "a"], 10) == (
        [(0, "a", list(range(7))), (0, "big", [0, 1, 2])], ("big", 3))
    assert page(wire, ["orders", "big", "a"], 10, ("big", 3)) == (
        [(0, "big", list(range(3, 13)))], ("big", 13))
    # the last page of big leaves room for orders, from its partition 0
    assert page(wire, ["orders", "big", "a"], 10, ("big", 45)) == (
        [(0, "big", list(range(45, 50))), (0, "orders", list(range(5)))], ("orders", 5))
    assert page(wire, ["orders", "big", "a"], 10, ("orders", 5)) == (
        [(0, "orders", [5])], None)
    # a limit spent exactly at a topic's end points at the next topic's partition 0
    assert page(wire, ["a", "big"], 7) == ([(0, "a", list(range(7)))], ("big", 0))
    # Kafka never pages by more than its max.request.partition.size.limit (2,000)
    assert page(wire, ["big"], 50_000)[1] is None


def test_no_page_is_larger_than_kafkas_limit(tmp_path: Path) -> None:
    with served(cluster(tmp_path / "c", topics=[
            {"name": "huge", "partitions": 2100, "replicationFactor": 1}]), time_scale=0) as s:
        w = Wire(s.bootstrap)
        try:
            got, cursor = page(w, ["huge"], 5000)
            assert [len(ps) for _, _, ps in got] == [2000] and cursor == ("huge", 2000)
        finally:
            w.close()


def test_cursor_topics_unknown_topics_and_odd_limits(wire: Wire) -> None:
    assert page(wire, ["a"], 10, ("a", 9)) == ([(0, "a", [])], None)  # past a's end
    assert page(wire, ["a", "big"], 3, ("big", 48)) == ([(0, "big", [48, 49])], None)
    unknown = errors.UNKNOWN_TOPIC_OR_PARTITION.code
    assert page(wire, ["nope", "a", "bad/name"], 2000) == (
        [(0, "a", list(range(7))), (17, "bad/name", []), (unknown, "nope", [])], None)
    assert page(wire, ["a"], 0) == ([(0, "a", [0])], ("a", 1))  # at least one, as Kafka
    assert page(wire, ["a"], -5) == ([(0, "a", [0])], ("a", 1))
    invalid = errors.INVALID_REQUEST.code
    assert page(wire, ["big"], 10, ("a", 0)) == ([(invalid, "big", [])], None)
    assert page(wire, ["big"], 10, ("big", -1)) == ([(invalid, "big", [])], None)
    # no topics named: every topic, the unknown cursor topic left out
    assert page(wire, [], 60, ("aa", 0)) == (
        [(0, "big", list(range(50))), (0, "orders", list(range(6)))], None)


def test_paged_describe_is_the_metadata_describe(recording: Recording) -> None:
    admin = recording.admin
    wanted = [TopicPartition("big", i) for i in (11, 12, 30, 31, 34)] + [
        TopicPartition("a", 5), TopicPartition("orders", 1), TopicPartition("gone", 0)]
    paged = admin.describe_partitions(partitions=wanted)
    assert [d.tp for d in paged] == sorted(tp for tp in wanted if tp.topic != "gone")
    # a from its partition 5, big from 11 once past a, none after the page of big-34:
    # the unknown "gone" next (and orders from 0 behind it, on the same page)
    assert recording.cursors() == [("a", 5), ("big", 11), ("big", 21), ("big", 31),
                                   ("gone", 0)]
    assert recording.metadata_sent() == 0
    admin._offers = lambda key: False  # type: ignore[method-assign]
    assert admin.describe_partitions(partitions=wanted) == paged


def test_whole_topics_and_every_topic_page_to_the_end(recording: Recording) -> None:
    admin = recording.admin
    by_topic = admin.describe_partitions(topics=["orders", "big", "nope"])
    every = admin.describe_partitions()
    assert len(recording.cursors()) == 6 + 7  # 56 and 63 partitions by pages of 10
    admin._offers = lambda key: False  # type: ignore[method-assign]
    assert by_topic == admin.describe_partitions(topics=["orders", "big", "nope"])
    assert every == admin.describe_partitions()
    assert {d.tp.topic for d in every} == {"a", "big", "orders"}


def test_moves_and_fenced_brokers_are_described_as_by_metadata(twin: ServedCluster,
                                                               recording: Recording) -> None:
    def fence() -> None:
        twin.cluster.fail_broker(5)
        twin.cluster.advance(60)
    twin.call(fence)
    parts = twin.call(lambda: [p.replicas for p in twin.cluster.image.topics["big"].partitions])
    on_5 = TopicPartition("big", next(i for i, rs in enumerate(parts) if 5 in rs and i > 20))
    tp = TopicPartition("big", 17)
    target = [*[b for b in range(5) if b not in parts[17]][:2], parts[17][0]]
    assert recording.admin.alter_partition_reassignments({tp: target})[tp].error.ok
    wanted = [tp, on_5, TopicPartition("big", 3)]
    paged = recording.admin.describe_partitions(partitions=wanted)
    assert [d.tp for d in paged] == sorted(wanted)
    [moving] = [d for d in paged if d.tp == tp]
    assert moving.adding and moving.removing, moving
    [offline] = [d for d in paged if d.tp == on_5]
    assert offline.offline == (5,), offline
    recording.admin._offers = lambda key: False  # type: ignore[method-assign]
    assert recording.admin.describe_partitions(partitions=wanted) == paged


def test_without_key_75_the_backend_asks_metadata(tmp_path: Path) -> None:
    with served(cluster(tmp_path / "c", topics=TOPICS), time_scale=0) as s:
        assert s.server.handlers is not None
        del s.server.handlers.served[75]  # a Kafka before 3.8
        r = Recording(s.bootstrap, page=10)
        try:
            assert 75 not in r.admin.client._manager.broker_version_data.api_versions
            got = r.admin.describe_partitions(partitions=[TopicPartition("big", 40)])
            assert [d.tp for d in got] == [TopicPartition("big", 40)]
            assert r.cursors() == [] and r.metadata_sent() == 1
        finally:
            r.admin.close()


def test_a_topic_the_principal_may_not_describe_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "auth.yaml"
    f.write_text("users:\n  - {name: mover, password: m-secret}\n"
                 "acls:\n  - {principal: 'User:mover', operations: [CREATE]}\n")
    with served(cluster(tmp_path / "c", topics=TOPICS), load_auth_file(f), time_scale=0) as s:
        admin = open_kafka_admin(s.bootstrap, {"sasl.mechanism": "PLAIN",
                                               "sasl.username": "mover",
                                               "sasl.password": "m-secret"},
                                 retry=RetryPolicy(total_seconds=10))
        try:
            assert admin._offers(75)
            with pytest.raises(KafkaApiError) as e:
                admin.describe_partitions(partitions=[TopicPartition("a", 1)])
            assert e.value.error.name == "TOPIC_AUTHORIZATION_FAILED"
            assert "not authorized to describe topic 'a'" in str(e.value)
        finally:
            admin.close()


def test_a_retriable_topic_error_is_asked_again() -> None:
    class Answer:
        def __init__(self, code: int) -> None:
            self.next_cursor = None
            self.topics = [type("T", (), {"error_code": code, "name": "a", "partitions": []})]

    class Client:
        def __init__(self) -> None:
            self.answers: list[Any] = [Answer(errors.NOT_CONTROLLER.code), Answer(0)]
            self._manager = self
            self.broker_version_data = type("V", (), {"api_versions": {75: (0, 0)}})
            self._controller_id = None

        def run(self, fn: Any, *args: Any) -> Any:
            if isinstance(args[0], DescribeTopicPartitionsRequest):
                return self.answers.pop(0)
            return type("L", (), {"error_code": 0, "error_message": None, "topics": []})

        def send(self, *args: Any) -> Any:  # pragma: no cover - run() intercepts
            raise AssertionError

    client = Client()
    admin = KafkaAdmin(client, "x:9092", sleep=lambda s: None)
    assert admin.describe_partitions(partitions=[TopicPartition("a", 0)]) == []
    assert client.answers == []


def test_authorized_operations_are_those_the_principal_holds(tmp_path: Path) -> None:
    """A principal allowed ALTER and ALTER_CONFIGS (each implying its DESCRIBE) is told those
    four, on topics and on the cluster, in every answer that carries the bits; the ones the
    twin's ACLs cannot name (DELETE, CLUSTER_ACTION, IDEMPOTENT_WRITE) come with ALL only
    (``tests/real/test_authorized_operations_real.py`` compares ALL with Kafka's)."""
    from kafka.admin import KafkaAdminClient
    from kafka.protocol.admin import DescribeClusterRequest

    f = tmp_path / "auth.yaml"
    f.write_text("users:\n  - {name: op, password: op-secret}\n"
                 "acls:\n  - {principal: 'User:op', operations: [ALTER, ALTER_CONFIGS]}\n")
    with served(cluster(tmp_path / "c", topics=TOPICS), load_auth_file(f), time_scale=0) as s:
        client = KafkaAdminClient(bootstrap_servers=s.bootstrap, security_protocol="SASL_PLAINTEXT",
                                  sasl_mechanism="PLAIN", sasl_plain_username="op",
                                  sasl_plain_password="op-secret")
        try:
            m = client._manager

            def send(request: Any) -> Any:
                return m.run(m.send, request, None, 10_000)

            meta = send(MetadataRequest(
                version=10, topics=[MetadataRequest.MetadataRequestTopic(name="big")],
                allow_auto_topic_creation=False, include_topic_authorized_operations=True,
                include_cluster_authorized_operations=True))
            dtp = send(DescribeTopicPartitionsRequest(
                topics=[DescribeTopicPartitionsRequest.TopicRequest(name="big")],
                response_partition_limit=1, cursor=None))
            dc = send(DescribeClusterRequest(include_cluster_authorized_operations=True))
        finally:
            client.close()
    mine = [7, 8, 10, 11]  # ALTER DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS
    assert [bits(t.authorized_operations) for t in meta.topics] == [mine]
    assert bits(meta.authorized_operations) == mine
    assert [bits(t.topic_authorized_operations) for t in dtp.topics] == [mine]
    assert bits(dc.authorized_operations) == mine


def counted(parts: list[Any]) -> PartitionCounts:
    return PartitionCounts(len({d.tp.topic for d in parts}), len(parts),
                           sum(1 for d in parts if d.under_replicated),
                           sum(1 for d in parts if d.leader < 0))


def test_partition_counts_are_the_described_partitions_counted(twin: ServedCluster,
                                                               recording: Recording) -> None:
    """A KafkaCluster's figures: counted page by page as describing every partition would
    count them (a move in flight is not under-replicated by its added replicas, KIP-352; a
    partition whose replicas are all fenced is offline), on both paths and on the embedded
    cluster itself — and no log size asked for (DescribeLogDirs of every partition, and a
    description of each held at once, were ~100 MiB a pass at 100,000 partitions)."""
    def fence() -> None:
        for b in (3, 4, 5):
            twin.cluster.fail_broker(b)
        twin.cluster.advance(60)
    twin.call(fence)
    # a move onto a live broker in flight: a replica on 0-2 replaces one on a fenced broker
    d = next(d for d in recording.admin.describe_partitions()
             if len(set(d.replicas) & {0, 1, 2}) == 2 and d.leader >= 0)
    tp = d.tp
    live = [r for r in d.replicas if r < 3]
    target = [*live, *({0, 1, 2} - set(live))]
    assert recording.admin.alter_partition_reassignments({tp: target})[tp].error.ok
    every = recording.admin.describe_partitions()
    expected = counted(every)
    assert next(d for d in every if d.tp == tp).adding
    assert expected.offline > 0 and expected.under_replicated > 0
    recording.sent.clear()
    assert recording.admin.partition_counts() == expected
    assert not any(isinstance(r, DescribeLogDirsRequest) for r in recording.sent)
    assert recording.metadata_sent() == 0
    recording.admin._offers = lambda key: False  # type: ignore[method-assign]
    assert recording.admin.partition_counts() == expected
    assert recording.metadata_sent() == 1
    assert twin.call(twin.cluster.partition_counts) == counted(
        twin.call(twin.cluster.describe_partitions))


def test_partition_counts_ask_for_the_moves_of_short_partitions_a_slice_at_a_time(
        twin: ServedCluster, recording: Recording, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the partitions with fewer in-sync replicas than replicas are looked up among the
    moves, a slice at a time, and a move in any slice still keeps its partition from counting
    as under-replicated."""
    def fence() -> None:
        twin.cluster.fail_broker(5)
        twin.cluster.advance(60)
    twin.call(fence)
    every = recording.admin.describe_partitions()
    moved = [d for d in every if 5 not in d.replicas and len(d.isr) == len(d.replicas)][:3]
    assert len(moved) == 3
    for d in moved:  # a move in flight: an added replica not in sync yet (broker 5 is down)
        target = [*d.replicas[1:], 5]
        assert recording.admin.alter_partition_reassignments({d.tp: target})[d.tp].error.ok
    every = recording.admin.describe_partitions()
    expected = counted(every)
    short = [d for d in every if len(d.isr) < len(d.replicas)]
    assert len(short) > expected.under_replicated > 0  # the moves' partitions are not under
    monkeypatch.setattr(kafka_admin, "REASSIGNMENT_SLICE", 2)
    asked: list[list[TopicPartition] | None] = []
    listing = recording.admin._list_reassignments

    def counted_listing(partitions: list[TopicPartition] | None) -> Any:
        asked.append(None if partitions is None else list(partitions))
        return listing(partitions)
    monkeypatch.setattr(recording.admin, "_list_reassignments", counted_listing)
    assert recording.admin.partition_counts() == expected
    assert all(a is not None and 0 < len(a) <= 2 for a in asked)
    assert sorted(tp for a in asked for tp in a or ()) == sorted(d.tp for d in short)
