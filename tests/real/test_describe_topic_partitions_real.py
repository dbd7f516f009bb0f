"""DescribeTopicPartitions (KIP-966) as the twin serves it and as a real Kafka 4.4 answers
it: the same raw requests to both — pages smaller than a topic, the cursor followed to the
end, a limit spent exactly at a topic's end, a cursor past a topic's end or into a later
topic, unknown topics, a cursor topic the request does not name — every field compared; then
kraftsman's paged ``describe_partitions`` on each, equal to its Metadata one."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kafka.protocol.admin import CreateTopicsRequest, DescribeTopicPartitionsRequest

from controller_core.backends.kafka_admin import RetryPolicy, open_kafka_admin
from controller_core.model import TopicPartition
from tests.real.fixtures import Session, twin_fixture
from tests.serve.raw_wire import Wire

_Topic = DescribeTopicPartitionsRequest.TopicRequest
_Cursor = DescribeTopicPartitionsRequest.Cursor
_Create = CreateTopicsRequest.CreatableTopic
# two topics over brokers 0-3 (both clusters have them), leaders spread, no leader on 3
ASSIGN = {"a": [[0, 1], [1, 2], [2, 0]],
          "b": [[1, 2, 0], [2, 0, 1], [0, 1, 2], [1, 0, 2], [2, 1, 0], [0, 2, 1], [1, 2, 3]]}


def page(w: Wire, topics: list[str], limit: int, cursor: tuple[str, int] | None) -> Any:
    """One DescribeTopicPartitions answer, every field but the (random) topic ids."""
    r = w.send(DescribeTopicPartitionsRequest(
        topics=[_Topic(name=t) for t in topics], response_partition_limit=limit,
        cursor=None if cursor is None else _Cursor(topic_name=cursor[0],
                                                   partition_index=cursor[1])))
    nc = r.next_cursor
    return {"next_cursor": None if nc is None else (nc.topic_name, nc.partition_index),
            "topics": [(t.error_code, t.name, str(t.topic_id) == "0" * 8 + "-0000-0000-0000-"
                        + "0" * 12, t.is_internal, t.topic_authorized_operations,
                        [(p.error_code, p.partition_index, p.leader_id, p.leader_epoch,
                          list(p.replica_nodes), list(p.isr_nodes),
                          p.eligible_leader_replicas, p.last_known_elr,
                          list(p.offline_replicas)) for p in t.partitions])
                       for t in r.topics]}


def settled(w: Wire, names: list[str]) -> None:
    """Every partition led by its first replica with every replica in sync (a real broker
    elects and fills the ISR a moment after CreateTopics answered)."""
    deadline = time.monotonic() + 60
    while True:
        r = page(w, names, 2000, None)
        ok = [(p[2], p[5]) == (ASSIGN[name[-1]][p[1]][0], ASSIGN[name[-1]][p[1]])
              for t in r["topics"] for name in [t[1]] for p in t[5]]
        if len(ok) == sum(len(v) for v in ASSIGN.values()) and all(ok):
            return
        assert time.monotonic() < deadline, f"not settled: {r}"
        time.sleep(0.2)


def observe(bootstrap: str, stem: str) -> dict[str, Any]:
    a, b = f"{stem}-a", f"{stem}-b"
    out: dict[str, Any] = {}
    w = Wire(bootstrap)
    try:
        r = w.send(CreateTopicsRequest(topics=[_Create(
            name=name, num_partitions=-1, replication_factor=-1, configs=[],
            assignments=[_Create.CreatableReplicaAssignment(partition_index=i, broker_ids=rs)
                         for i, rs in enumerate(ASSIGN[name[-1]])]) for name in (b, a)],
            timeout_ms=10_000, validate_only=False))
        assert [t.error_code for t in r.topics] == [0, 0], r
        settled(w, [a, b])
        # a limit smaller than the topics, the cursor followed to the end
        cursor: tuple[str, int] | None = None
        pages = []
        while True:
            got = page(w, [b, a], 4, cursor)
            pages.append(got)
            if got["next_cursor"] is None or len(pages) > 10:
                break
            cursor = got["next_cursor"]
        out["pages of 4"] = pages
        out["limit spent at a's end"] = page(w, [a, b], 3, None)
        out["cursor inside b"] = page(w, [a, b], 2, (b, 5))
        out["cursor past b's end"] = page(w, [b], 10, (b, 9))
        out["cursor at a, the later topic starts at 0"] = page(w, [a, b], 5, (a, 2))
        out["unknown topics"] = page(w, [f"{stem}-none", a, "bad/name"], 2000, None)
        out["limit 0"] = page(w, [a], 0, None)
        out["limit -1"] = page(w, [b], -1, (b, 2))
        out["negative cursor index"] = page(w, [b], 10, (b, -1))
        out["cursor topic not named"] = page(w, [b], 10, (a, 0))
        # kraftsman's describe: pages of 2 from the lowest wanted partition, equal to the
        # Metadata one; unknown topics omitted
        admin = open_kafka_admin(bootstrap, retry=RetryPolicy(total_seconds=30))
        try:
            admin.partition_page = 2
            wanted = [TopicPartition(b, i) for i in (1, 4)] + [TopicPartition(a, 2),
                                                                  TopicPartition(stem, 0)]
            sent: list[Any] = []
            send = admin._send

            def spy(request: Any, node_id: int | None = None) -> Any:
                if isinstance(request, DescribeTopicPartitionsRequest):
                    sent.append((request.cursor.topic_name, request.cursor.partition_index))
                return send(request, node_id)
            admin._send = spy  # type: ignore[method-assign]
            out["describe, paged"] = admin.describe_partitions(partitions=wanted)
            out["cursors sent"] = sent
            admin._offers = lambda key: False  # type: ignore[method-assign]
            out["describe, by Metadata"] = admin.describe_partitions(partitions=wanted)
        finally:
            admin.close()
    finally:
        w.close()
    return out


twin = twin_fixture(observe, brokers=4, topics=[])


def test_the_twin_pages_partitions_as_kafka_does(
        real_kafka: Session, twin: Callable[[str], dict[str, Any]]) -> None:
    stem = real_kafka.topic("dtp")
    real = observe(real_kafka.cluster.bootstrap(), stem)
    # what kraftsman relies on, as Kafka answers it
    assert [p["next_cursor"] for p in real["pages of 4"]] == [
        (f"{stem}-b", 1), (f"{stem}-b", 5), None], real
    assert real["describe, paged"] == real["describe, by Metadata"], real
    assert [d.tp.partition for d in real["describe, paged"]] == [2, 1, 4], real
    # from the lowest wanted partition of each topic; none after b-4's page
    assert real["cursors sent"] == [(stem, 0), (f"{stem}-a", 2), (f"{stem}-b", 1),
                                    (f"{stem}-b", 3)], real
    embedded = twin(stem)
    for what, answer in real.items():
        assert embedded[what] == answer, (what, embedded[what], answer)


def test_partition_counts_on_real_kafka_are_the_described_partitions_counted(
        real_kafka: Session) -> None:
    """What a KafkaCluster's status shows of a real cluster, counted page by page, equals
    the count of every partition described (the twin's side:
    ``tests/serve/test_describe_topic_partitions.py``)."""
    from tests.serve.test_describe_topic_partitions import counted

    w = Wire(real_kafka.cluster.bootstrap())
    try:
        stem = real_kafka.topic("count")
        r = w.send(CreateTopicsRequest(topics=[_Create(
            name=stem, num_partitions=-1, replication_factor=-1, configs=[],
            assignments=[_Create.CreatableReplicaAssignment(partition_index=i, broker_ids=rs)
                         for i, rs in enumerate(ASSIGN["b"])])],
            timeout_ms=10_000, validate_only=False))
        assert [t.error_code for t in r.topics] == [0], r
    finally:
        w.close()
    with real_kafka.cluster.admin() as admin:
        admin.partition_page = 3  # several pages per topic
        counts = admin.partition_counts()
        assert counts == counted(admin.describe_partitions())
    assert counts.partitions >= len(ASSIGN["b"]) and counts.topics >= 1
