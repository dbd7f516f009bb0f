"""Removing a broker from a real Apache Kafka 4.4 with the console script, as a user does it:
a remove-brokers plan step applied (cordon first, then the move, then Drained or what the
broker still holds), the broker's process stopped, `kraftsman cluster unregister-broker`
(refused while it runs), and describe cluster without it. The fixture starts the broker
again, which registers anew, and deletes its cordon."""

from __future__ import annotations

import json
from pathlib import Path

from tests.real.fixtures import Session
from tests.real.test_cli_real_kafka import Cli, topic, wait_for


def step_file(path: Path, moves: list[tuple[str, int, list[int]]], broker: int) -> Path:
    lines = "".join(f"    - {{topic: {t}, partition: {p}, replicas: {r}}}\n" for t, p, r in moves)
    path.write_text(f"""\
apiVersion: kraftsman.io/v1alpha1
kind: PartitionReassignment
metadata:
  name: drain
  annotations: {{kraftsman.io/plan-step: "1/1", kraftsman.io/plan-goal: "remove-brokers {broker}"}}
spec:
  clusterRef: {{name: prod}}
  partitions:
{lines}""")
    return path


def off(replicas: tuple[int, ...], broker: int, brokers: list[int]) -> list[int]:
    """``replicas`` with ``broker`` replaced by the first broker not among them."""
    spare = next(b for b in brokers if b not in replicas and b != broker)
    return [spare if r == broker else r for r in replicas]


def test_a_broker_is_cordoned_drained_stopped_and_unregistered(real_kafka: Session,
                                                               tmp_path: Path) -> None:
    c = real_kafka.cluster
    name = topic(real_kafka, [[3, 1]])
    with c.admin() as a:  # earlier tests' topics (and kraftsman's marker topic) go too
        held = [d for d in a.describe_partitions() if 3 in d.replicas]
    moves = [(d.tp.topic, d.tp.partition, off(d.replicas, 3, [0, 1, 2])) for d in held]
    assert (name, 0, [0, 1]) in moves
    cli = Cli(real_kafka, tmp_path / "state")
    done = cli.run("apply", "-f", str(step_file(tmp_path / "drain.yaml", moves, 3)),
                   plaintext=True)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "broker 3: Cordoned (no new replica is placed on it)" in out
    assert "broker 3: Drained (no replica, leads nothing)" in out
    brokers = {b["id"]: b for b in json.loads(cli.ok("describe", "cluster", "-o", "json",
                                                     plaintext=True))["brokers"]}
    assert brokers[3]["cordonedLogDirs"] == "*"
    refused = cli.run("cluster", "unregister-broker", "3", plaintext=True)
    assert refused.returncode == 2
    assert "broker 3 is running (registered and unfenced): stop its process" in refused.stderr
    c.kill(3)
    with c.admin() as a:
        wait_for(lambda: any(b.id == 3 and b.fenced for b in a.describe_cluster().brokers),
                 "broker 3 fenced")
    assert "broker 3: unregistered" in cli.ok("cluster", "unregister-broker", "3",
                                              plaintext=True)
    listed = [b["id"] for b in json.loads(cli.ok("describe", "cluster", "-o", "json",
                                                 plaintext=True))["brokers"]]
    assert listed == [0, 1, 2]
    again = cli.run("cluster", "unregister-broker", "3", plaintext=True)
    assert again.returncode == 2
    assert "Broker ID 3 is not currently registered (BROKER_ID_NOT_REGISTERED)" in again.stderr
