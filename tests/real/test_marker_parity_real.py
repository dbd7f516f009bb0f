"""The embedded twin (``cluster serve``) answers what a real Kafka 4.4 answers to the requests
kraftsman's throttle bookkeeping makes — the same requests sent to both, every observable
compared.

What Kafka does, and the twin now does too: a broker takes a config name it does not know
(kraftsman's old ``kraftsman.throttle`` marker) and describes it as sensitive — value null,
read-only, of unknown type — while a topic refuses such a name ("Unknown topic config name");
the marker topic is created compacted, takes keyed records only, and only on its leader.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from controller_core.backends.kafka_admin import RetryPolicy, open_kafka_admin
from tests.helpers import cluster
from tests.real.fixtures import Session, twin_fixture
from tests.serve.harness import served
from tests.serve.raw_wire import Wire


def observe(bootstrap: str, scratch: str) -> dict[str, Any]:
    """Everything the marker bookkeeping relies on, as one cluster answers it."""
    out: dict[str, Any] = {}
    w = Wire(bootstrap)
    try:
        out["set unknown broker config"] = w.alter(4, "0", "kraftsman.throttle", '{"rate": "1"}')
        out["describe it"] = w.described_once("0", bool)
        out["describe an unset one by name"] = w.described("1", ["kraftsman.unset"])
        out["delete it"] = w.alter(4, "0", "kraftsman.throttle", None)
        out["described after"] = w.described_once("0", lambda got: not got)
        out["create with an unknown config"] = w.create(scratch + "-x", {"kraftsman.x": "1"})
        out["create with a bad cleanup.policy"] = w.create(scratch + "-y",
                                                           {"cleanup.policy": "bogus"})
        out["create"] = w.create(scratch, {"cleanup.policy": "compact"})
        out["set unknown topic config"] = w.alter(2, scratch, "kraftsman.throttle", "x")
        out["delete unknown topic config"] = w.alter(2, scratch, "kraftsman.throttle", None)
        # the marker topic, as kraftsman's kafka backend creates and writes it
        admin = open_kafka_admin(bootstrap, retry=RetryPolicy(total_seconds=30))
        try:
            out["tombstone a marker"] = admin.write_throttle_markers({9: None})
            leader, topic_id, brokers = w.marker_partition()
            follower = next(b for b in brokers if b != leader)
            out["keyless record"] = w.produce(leader, topic_id, [(b"1", b"{}"), (None, b"x")])
            out["on a follower"] = w.produce(follower, topic_id, [(b"1", b"{}")])[0]
            out["above max.message.bytes"] = w.produce(
                leader, topic_id, [(b"1", b"x" * 1_100_000)])[0]
            out["two markers written"] = admin.write_throttle_markers(
                {0: '{"rate": "5"}', 1: '{"rate": "6"}'})
            out["one removed"] = admin.write_throttle_markers({1: None})
            out["read back"] = admin.read_throttle_markers()
            out["all removed"] = admin.write_throttle_markers({0: None})
            out["read at last"] = admin.read_throttle_markers()
        finally:
            admin.close()
    finally:
        w.close()
    return out


twin = twin_fixture(observe)


def test_the_twin_answers_the_marker_requests_as_kafka_does(
        real_kafka: Session, twin: Callable[[str], dict[str, Any]]) -> None:
    scratch = real_kafka.topic("parity")
    real = observe(real_kafka.cluster.bootstrap(), scratch)
    assert real["describe it"] == {"kraftsman.throttle": (None, True, 2, True, 0)}, real
    assert real["set unknown topic config"] == (
        40, "Unknown topic config name: kraftsman.throttle"), real
    assert real["read back"] == {0: '{"rate": "5"}'} and real["read at last"] == {}, real
    embedded = twin(scratch)
    for what, answer in real.items():
        assert embedded[what] == answer, f"{what}: the twin says {embedded[what]!r}, " \
                                         f"Kafka {answer!r}"


def observe_list_edits(bootstrap: str, topic: str) -> dict[str, Any]:
    """IncrementalAlterConfigs APPEND and SUBTRACT on a topic's throttled-replica lists (which
    kraftsman does not use, but another tool may send to ``cluster serve``): each answer, and
    the value and config source every broker then describes."""
    follower = "follower.replication.throttled.replicas"
    leader = "leader.replication.throttled.replicas"
    steps: list[tuple[str, int, str, str | None, int]] = [
        ("set", 2, follower, "1:2,0:1", 0),
        ("append one new, one present", 2, follower, "0:0,1:2", 2),
        ("subtract one", 2, follower, "0:1", 3),
        ("subtract one absent", 2, follower, "5:5", 3),
        ("subtract the rest", 2, follower, "1:2,0:0", 3),
        ("append onto the empty value", 2, follower, "0:1", 2),
        ("subtract from an unset list", 2, leader, "0:1", 3),
        ("set every replica", 2, follower, "*", 0),
        ("append onto *", 2, follower, "0:1", 2),
        ("append a malformed entry", 2, leader, "x", 2),
        ("set a malformed list", 2, leader, "0:1, x", 0),
        ("append to cleanup.policy", 2, "cleanup.policy", "compact", 2),
        ("subtract from cleanup.policy", 2, "cleanup.policy", "delete", 3),
        ("append to a non-list topic config", 2, "retention.ms", "5", 2),
        ("subtract from a non-list broker config", 4, "leader.replication.throttled.rate",
         "5", 3),
        ("delete", 2, follower, None, 1),
    ]
    out: dict[str, Any] = {}
    w = Wire(bootstrap)
    try:
        assert w.create(topic, {}) == (0, None)
        for what, rtype, key, value, op in steps:
            name = topic if rtype == 2 else "0"
            answer = w.alter(rtype, name, key, value, op)
            # the twin describes only the topic configs it models (retention.ms is not one)
            shown = (w.topic_config_settled(topic, key)
                     if rtype == 2 and key != "retention.ms" else None)
            out[what] = (answer, shown)
    finally:
        w.close()
    return out


def test_the_twin_appends_and_subtracts_list_configs_as_kafka_does(
        real_kafka: Session, tmp_path: Path) -> None:
    topic = real_kafka.topic("list-edits")
    real = observe_list_edits(real_kafka.cluster.bootstrap(), topic)
    with served(cluster(tmp_path / "twin"), time_scale=0) as s:
        embedded = observe_list_edits(s.bootstrap, topic)
    for what, answer in real.items():
        assert embedded[what] == answer, f"{what}: the twin says {embedded[what]!r}, " \
                                         f"Kafka {answer!r}"
