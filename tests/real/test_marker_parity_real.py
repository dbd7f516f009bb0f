"""The embedded twin (``cluster serve``) answers what a real Kafka 4.4 answers to the requests
kraftsman's throttle bookkeeping makes — the same requests sent to both, every observable
compared.

What Kafka does, and the twin now does too: a broker takes a config name it does not know
(kraftsman's old ``kraftsman.throttle`` marker) and describes it as sensitive — value null,
read-only, of unknown type — while a topic refuses such a name ("Unknown topic config name");
the marker topic is created compacted, takes keyed records only, and only on its leader.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from controller_core.backends.kafka_admin import RetryPolicy, open_kafka_admin
from tests.helpers import cluster
from tests.real.fixtures import Session
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


@pytest.fixture
def twin(tmp_path: Path) -> Iterator[Callable[[str], dict[str, Any]]]:
    with served(cluster(tmp_path / "twin"), time_scale=0) as s:
        yield lambda scratch: observe(s.bootstrap, scratch)


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
