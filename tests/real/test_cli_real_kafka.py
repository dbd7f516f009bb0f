"""The `kraftsman` console script against a real Apache Kafka 4.4 cluster, started as users
start it — `--bootstrap-server` on the SASL_SSL listener and `--command-config` with the
Kafka tools' client properties — and checked with Kafka's own tools where they can say the
same thing. Faults: a wrong password, a TLS certificate the client does not trust, a broker
and the active controller killed with -9 in the middle of a move."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from controller_core.backends import RetryPolicy, open_kafka_admin
from controller_core.backends.client_properties import load_command_config
from controller_core.errors import KafkaApiError
from tests.helpers import SlowClient
from tests.real.fixtures import Session
from tests.real.kafka import run_tool

BIN = Path(sys.executable).parent / "kraftsman"


class Cli:
    def __init__(self, session: Session, state: Path) -> None:
        self.c = session.cluster
        self.state = state

    def run(self, *args: str, config: Path | None = None, plaintext: bool = False,
            timeout: float = 180) -> subprocess.CompletedProcess[str]:
        conn = (["--bootstrap-server", self.c.bootstrap()] if plaintext else
                ["--bootstrap-server", self.c.bootstrap("SASL_SSL"), "--command-config",
                 str(config or self.c.client_properties)])
        return subprocess.run([str(BIN), *args, *conn, "--state-dir", str(self.state)],
                              capture_output=True, text=True, timeout=timeout)

    def ok(self, *args: str, **kw: object) -> str:
        done = self.run(*args, **kw)  # type: ignore[arg-type]
        assert done.returncode == 0, f"kraftsman {' '.join(args)}:\n{done.stdout}{done.stderr}"
        return done.stdout


def topic(session: Session, assignment: list[list[int]], mb: int = 0) -> str:
    name = session.topic("cli")
    bootstrap = session.cluster.bootstrap()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, -1, -1, replica_assignments=dict(
            enumerate(assignment)))], timeout_ms=30_000)
    finally:
        admin.close()
    if mb:
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", batch_size=32 * 1024,
                                 linger_ms=5)
        value = os.urandom(10_000)
        for p in range(len(assignment)):
            for _ in range(mb * 100):
                producer.send(name, value, partition=p)
        producer.flush(60)
        producer.close(10)
    wait_for(lambda: all(set(d.isr) == set(d.replicas) for d in describe(session, name)),
             "the new topic's replicas in sync")
    return name


def describe(session: Session, name: str) -> list[object]:
    with session.cluster.admin() as a:
        return list(a.describe_partitions(topics=[name]))


def wait_for(done: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.3)


def plan(path: Path, name: str, moves: dict[int, list[int]], throttle: int | None = None) -> Path:
    lines = ["apiVersion: kraftsman.io/v1alpha1", "kind: PartitionReassignment",
             "metadata: {name: move}", "spec:", "  clusterRef: {name: prod}",
             "  maxConcurrentMoves: 10"]
    if throttle:
        lines.append(f"  throttleBytesPerSecond: {throttle}")
    lines.append("  partitions:")
    lines += [f"    - {{topic: {name}, partition: {p}, replicas: {r}}}" for p, r in moves.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def kafka_topics(session: Session, name: str) -> dict[int, tuple[list[int], list[int], int]]:
    """kafka-topics --describe: partition -> (replicas, isr, leader)."""
    out = run_tool("kafka-topics", "--bootstrap-server", session.cluster.bootstrap(),
                   "--describe", "--topic", name).stdout
    rows = {}
    for line in out.splitlines():
        fields = dict(f.split(": ", 1) for f in line.strip().split("\t") if ": " in f)
        if "Partition" in fields:
            rows[int(fields["Partition"])] = (
                [int(x) for x in fields["Replicas"].split(",")],
                [int(x) for x in fields["Isr"].split(",") if x],
                int(fields["Leader"]))
    return rows


def test_describe_and_quorum_agree_with_kafkas_own_tools(real_kafka: Session,
                                                         tmp_path: Path) -> None:
    name = topic(real_kafka, [[0, 1, 2], [1, 2, 3], [3, 0, 1]])
    cli = Cli(real_kafka, tmp_path / "state")
    ours = json.loads(cli.ok("describe", "topics", "--topic", name, "-o", "json"))
    rows = {p["partition"]: (p["replicas"], p["isr"], p["leader"]) for p in ours}
    assert rows == kafka_topics(real_kafka, name)
    q = json.loads(cli.ok("quorum", "describe", "-o", "json"))
    theirs = run_tool("kafka-metadata-quorum", "--bootstrap-server", real_kafka.cluster.bootstrap(),
                      "describe", "--status").stdout
    fields = dict(line.split(":", 1) for line in theirs.splitlines() if ":" in line)
    assert q["leaderId"] == int(fields["LeaderId"].strip())
    assert sorted(q["currentVoters"]) == sorted(
        v["id"] for v in json.loads(fields["CurrentVoters"]))
    assert q["clusterId"] == real_kafka.cluster.cluster_id


def test_reassign_and_elect_through_the_console_script(real_kafka: Session,
                                                       tmp_path: Path) -> None:
    name = topic(real_kafka, [[0, 1, 2], [1, 2, 3]], mb=1)
    cli = Cli(real_kafka, tmp_path / "state")
    out = cli.ok("apply", "-f", str(plan(tmp_path / "p.yaml", name, {0: [3, 1, 2],
                                                                       1: [2, 3, 0]})))
    assert "completed: 2 moved" in out, out
    after = kafka_topics(real_kafka, name)
    assert after[0][0] == [3, 1, 2] and after[1][0] == [2, 3, 0]
    assert "No partition reassignments found." in cli.ok("reassignments", "list")
    # Leadership off the preferred replica (a clean restart of broker 3), then elected back.
    real_kafka.cluster.kill(3)
    wait_for(lambda: kafka_topics(real_kafka, name)[0][2] != 3, "leadership off broker 3")
    real_kafka.cluster.start(3)
    wait_for(lambda: 3 in kafka_topics(real_kafka, name)[0][1], "broker 3 back in sync", 180)
    elected = json.loads(cli.ok("elect", "--all-topic-partitions", "-o", "json"))
    assert elected["results"].get(f"{name}-0", {}).get("error") in ("NONE", "NO_ERROR"), elected
    assert kafka_topics(real_kafka, name)[0][2] == 3
    again = cli.ok("elect", "--all-topic-partitions")
    assert name not in again  # nothing needed: Kafka answers only for elected partitions


def test_a_controller_is_added_then_a_voter_removed(real_kafka: Session, tmp_path: Path) -> None:
    c = real_kafka.cluster
    cli = Cli(real_kafka, tmp_path / "state")
    early = cli.run("quorum", "alter", "--voters", "100,101,102,103")
    assert early.returncode == 2 and "unknown node id(s) [103]" in early.stderr, early.stderr
    assert "must be running" in early.stderr
    c.start(103)
    c.wait_observing(103)  # (failing, it says why: the JVM's state and log)
    wait_for(lambda: 103 in json.loads(cli.ok("quorum", "describe", "-o", "json"))[
        "currentObservers"], "controller 103 fetching as an observer")
    missing = cli.run("quorum", "alter", "--voters", "100,101,102,103")
    assert missing.returncode == 2, missing
    assert "--controller 103=CONTROLLER://" in missing.stderr, missing.stderr
    cli.ok("quorum", "alter", "--voters", "100,101,102,103", "--controller",
           f"103={c.controller_endpoint(103)}")
    theirs = run_tool("kafka-metadata-quorum", "--bootstrap-server", c.bootstrap(), "describe",
                      "--status").stdout
    voters = json.loads(next(line.split(":", 1)[1] for line in theirs.splitlines()
                             if line.startswith("CurrentVoters")))
    assert sorted(v["id"] for v in voters) == [100, 101, 102, 103]
    leader = json.loads(cli.ok("quorum", "describe", "-o", "json"))["leaderId"]
    keep = [*[n for n in (100, 101, 102, 103) if n != leader][:2], leader]
    cli.ok("quorum", "alter", "--voters", ",".join(map(str, sorted(keep))))
    q = json.loads(cli.ok("quorum", "describe", "-o", "json"))
    assert sorted(q["currentVoters"]) == sorted(keep) and q["leaderId"] == leader


def test_a_wrong_password_is_one_clear_error_and_changes_nothing(real_kafka: Session,
                                                                  tmp_path: Path) -> None:
    name = topic(real_kafka, [[0, 1, 2]])
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(real_kafka.cluster.client_properties.read_text().replace(
        'password="admin-secret"', 'password="not-the-password"'))
    cli = Cli(real_kafka, tmp_path / "state")
    done = cli.run("apply", "-f", str(plan(tmp_path / "p.yaml", name, {0: [3, 1, 2]})),
                   config=wrong, timeout=120)
    assert done.returncode == 2, done  # bad credentials are bad input, like a wrong flag
    assert done.stderr.count("error:") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "authentication" in done.stderr and "not-the-password" not in done.stderr
    assert kafka_topics(real_kafka, name)[0][0] == [0, 1, 2]


def test_a_refusal_read_with_the_close_is_still_the_refusal(real_kafka: Session,
                                                            tmp_path: Path) -> None:
    """Kafka holds a refused login's answer for connection.failed.authentication.delay.ms and
    closes right after sending it; a client slow to read gets both at once. The twin does the
    same (tests/serve/test_tls_scram.py); here the real broker, with the same slow client."""
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(real_kafka.cluster.client_properties.read_text().replace(
        'password="admin-secret"', 'password="not-the-password"'))
    slow = SlowClient().on()
    try:
        with pytest.raises(KafkaApiError) as e:
            open_kafka_admin(real_kafka.cluster.bootstrap("SASL_SSL"),
                             load_command_config(wrong), retry=RetryPolicy(total_seconds=10))
    finally:
        slow.off()
    assert e.value.error.name == "SASL_AUTHENTICATION_FAILED", e.value
    assert "invalid credentials" in str(e.value) and "not-the-password" not in str(e.value)


def test_a_certificate_from_another_ca_is_refused_clearly(real_kafka: Session,
                                                          tmp_path: Path) -> None:
    c = real_kafka.cluster
    other = tmp_path / "other.properties"
    other.write_text(c.client_properties.read_text().replace(
        str(c.ca), str(c.layout.extra["other_ca"] if c.layout else "")))
    done = Cli(real_kafka, tmp_path / "state").run("describe", "cluster", config=other,
                                                   timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done
    assert "certificate was not accepted" in done.stderr, done.stderr


def _moving(cli: Cli) -> bool:
    return "No partition reassignments found." not in cli.ok("reassignments", "list")


def test_a_broker_killed_mid_move_loses_nothing_and_the_move_completes(real_kafka: Session,
                                                                       tmp_path: Path) -> None:
    name = topic(real_kafka, [[0, 1, 2]], mb=2)
    cli = Cli(real_kafka, tmp_path / "state")
    p = plan(tmp_path / "p.yaml", name, {0: [3, 1, 2]}, throttle=20_000)
    cli.ok("apply", "-f", str(p), "--no-wait")
    assert _moving(cli)
    real_kafka.cluster.kill(1)  # an in-sync follower of the move
    wait_for(lambda: 1 not in kafka_topics(real_kafka, name)[0][1], "broker 1 out of the ISR")
    resumed = cli.run("apply", "-f", str(p), "--no-wait")
    assert resumed.returncode == 0 and "Traceback" not in resumed.stderr, resumed.stderr
    # the dead broker's rate waits until it is back: before, each pass wrote it and was
    # retried against the dead broker for 30 s ("could not set throttles: NETWORK_EXCEPTION")
    assert "could not set throttles" not in resumed.stdout + resumed.stderr, resumed.stdout
    real_kafka.cluster.start(1)
    raised = plan(tmp_path / "p.yaml", name, {0: [3, 1, 2]}, throttle=50_000_000)
    out = cli.ok("apply", "-f", str(raised))
    assert "completed: 1 moved" in out, out
    assert kafka_topics(real_kafka, name)[0][0] == [3, 1, 2]


def test_a_move_whose_adding_broker_died_is_reported_stalled(real_kafka: Session,
                                                           tmp_path: Path) -> None:
    """The stall watch on a real cluster: the adding replica's broker is killed, so its
    copy stands still (and DescribeLogDirs cannot reach it); `apply` says so once, naming
    the partition and the broker, and the move completes once the broker is back."""
    name = topic(real_kafka, [[0, 1, 2]], mb=2)
    cli = Cli(real_kafka, tmp_path / "state")
    p = plan(tmp_path / "p.yaml", name, {0: [3, 1, 2]}, throttle=20_000)
    watched = p.read_text().replace("  maxConcurrentMoves: 10\n",
                                    "  maxConcurrentMoves: 10\n  stalledAfterSeconds: 3\n")
    p.write_text(watched)
    cli.ok("apply", "-f", str(p), "--no-wait")
    real_kafka.cluster.kill(3)
    try:
        waited = cli.run("apply", "-f", str(p), "--for", "10")
        text = waited.stdout + waited.stderr
        assert waited.returncode == 0 and "Traceback" not in text, text
        assert text.count(f"stalled — no byte progress: {name}-0 (adding on broker 3; ") == 1, text
        assert _moving(cli)
    finally:
        real_kafka.cluster.start(3)
    out = cli.ok("apply", "-f", str(plan(tmp_path / "p.yaml", name, {0: [3, 1, 2]},
                                         throttle=50_000_000)))
    assert "completed: 1 moved" in out, out
    assert kafka_topics(real_kafka, name)[0][0] == [3, 1, 2]


def test_the_active_controller_killed_mid_move(real_kafka: Session, tmp_path: Path) -> None:
    name = topic(real_kafka, [[0, 1, 2]], mb=2)
    cli = Cli(real_kafka, tmp_path / "state")
    p = plan(tmp_path / "p.yaml", name, {0: [3, 1, 2]}, throttle=20_000)
    cli.ok("apply", "-f", str(p), "--no-wait")
    leader = json.loads(cli.ok("quorum", "describe", "-o", "json"))["leaderId"]
    real_kafka.cluster.kill(leader)
    wait_for(lambda: json.loads(cli.ok("quorum", "describe", "-o", "json"))["leaderId"]
             not in (leader, -1), "a new quorum leader")
    assert _moving(cli)  # the move survived the controller's crash
    out = cli.ok("apply", "-f", str(plan(tmp_path / "p.yaml", name, {0: [3, 1, 2]},
                                         throttle=50_000_000)))
    assert "completed: 1 moved" in out, out
    assert kafka_topics(real_kafka, name)[0][0] == [3, 1, 2]
