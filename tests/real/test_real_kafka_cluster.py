"""The real Kafka the other tests rely on is the cluster the README describes: a dynamic
quorum of three controllers (kraft.version 1), four brokers with racks, PLAINTEXT and
SASL_SSL/SCRAM-SHA-512 listeners — checked with Kafka's own tools, not kraftsman's."""

from __future__ import annotations

import json
import socket
from datetime import datetime
from itertools import count
from pathlib import Path

import pytest

from tests.real import kafka
from tests.real.fixtures import Session
from tests.real.kafka import BROKERS, CONTROLLERS, RACKS, RealKafka, RealKafkaError, run_tool


def test_the_quorum_is_dynamic_with_three_voters(real_kafka: Session) -> None:
    c = real_kafka.cluster
    out = run_tool("kafka-metadata-quorum", "--bootstrap-server", c.bootstrap(),
                   "describe", "--status").stdout
    voters = json.loads(next(line.split(":", 1)[1] for line in out.splitlines()
                             if line.startswith("CurrentVoters")))
    assert sorted(v["id"] for v in voters) == list(CONTROLLERS)
    # kraft.version 1: voters carry their directory ids and endpoints (KIP-853)
    assert all(v["directoryId"] and v["endpoints"] for v in voters)
    features = run_tool("kafka-features", "--bootstrap-server", c.bootstrap(),
                        "describe").stdout
    kraft = next(line for line in features.splitlines() if "Feature: kraft.version" in line)
    assert "FinalizedVersionLevel: 1" in kraft, kraft


def test_four_brokers_with_racks_on_both_listeners(real_kafka: Session) -> None:
    c = real_kafka.cluster
    for listener, extra in (("PLAINTEXT", []),
                            ("SASL_SSL", ["--command-config", str(c.client_properties)])):
        out = run_tool("kafka-broker-api-versions", "--bootstrap-server",
                       c.bootstrap(listener), *extra).stdout
        hosts = [line for line in out.splitlines() if line.startswith("127.0.0.1:")]
        assert len(hosts) == len(BROKERS), out
    with c.admin() as a:
        d = a.describe_cluster()
    assert {(b.id, b.rack, b.fenced) for b in d.brokers} == {
        (b, RACKS[b], False) for b in BROKERS}
    assert d.cluster_id == c.cluster_id


def _stamp(line: str) -> datetime:
    return datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f")


def test_brokers_start_only_after_the_quorum_committed_its_voters(real_kafka: Session) -> None:
    """Kafka 4.4 loses a broker's voter set when the broker truncates the first, uncommitted
    VotersRecord of a leader that then lost its epoch, and that broker never registers (CI,
    broker 2, three minutes). ``up`` therefore starts the brokers only once a leader's high
    watermark is set: every broker's first log line comes after that. Read from the logs of
    the session's cluster as ``up`` left them (the nodes' logs are appended to, never cut)."""
    c = real_kafka.cluster
    committed = min(_stamp(line) for node in CONTROLLERS for line in
                    c.log(node).read_text().splitlines()
                    if "High watermark set to" in line and "for the first time" in line)
    for broker in BROKERS:
        first = c.log(broker).read_text().splitlines()[0]
        assert _stamp(first) > committed, (
            f"broker {broker} started at {first[1:24]}, before the quorum committed at "
            f"{committed}")


@pytest.mark.slow  # half a minute: formatting and starting a second cluster (run with --soak)
def test_a_node_that_cannot_start_stops_every_node_started(real_kafka: Session, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Broker 0's port is taken (as a client connection once took one the kernel had handed
    out): the start fails naming the node and its log, and no JVM of the cluster is left
    running — before, the controllers and the other brokers ran on after the failure."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        calls = count()
        real_pick = kafka.free_port
        # five controllers (100-104) pick first, then broker 0's PLAINTEXT listener
        monkeypatch.setattr(kafka, "free_port", lambda: taken.getsockname()[1]
                            if next(calls) == len(CONTROLLERS) + 2 else real_pick())
        c = RealKafka(tmp_path / "cluster")
        with pytest.raises(RealKafkaError, match=r"node 0 exited while starting"):
            c.up(timeout=120)
    running = [n for n in (*CONTROLLERS, *BROKERS) if c.running(n)]
    c.down()  # (were the test to fail: not left running either)
    assert running == [], f"still running after the failed start: {running}"
