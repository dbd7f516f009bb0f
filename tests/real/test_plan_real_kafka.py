"""snapshot → plan → apply on a real Apache Kafka 4.4, each step the console script as a user
runs it: the snapshot reads partition sizes from DescribeLogDirs, the Spark planner drains
a broker, and `apply` of the generated directory moves the data there."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from controller_core.planning.snapshot import read_manifest, read_snapshot
from tests.real.fixtures import Session
from tests.real.test_cli_real_kafka import BIN, Cli, describe, kafka_topics, topic


def test_snapshot_plan_and_apply_drain_a_broker(real_kafka: Session, tmp_path: Path) -> None:
    name = topic(real_kafka, [[3, 0, 1], [1, 3, 2], [2, 0, 3], [0, 1, 2]], mb=1)
    cli = Cli(real_kafka, tmp_path / "state")
    snap, out = tmp_path / "snap", tmp_path / "plan"
    cli.ok("snapshot", "--out", str(snap))
    sources = read_manifest(snap)["sources"]
    assert "DescribeLogDirs" in sources["sizeBytes"], sources
    sized = read_snapshot(snap)  # the partition sizes a real broker reported
    assert any(size > 0 for size in sized.partitions.size_bytes), "no partition size read"
    # the plan is offline: Spark reads the snapshot only
    done = subprocess.run(
        [str(BIN), "plan", "--snapshot", str(snap), "--goal", "remove-brokers", "3", "--out",
         str(out), "--cluster-name", "prod", "--seed", "1"],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    docs = [d for f in sorted((out / "reassignments").glob("*.yaml"))
            for d in yaml.safe_load_all(f.read_text()) if d]
    moves = [m for d in docs if d.get("kind") == "PartitionReassignment"
             for m in d["spec"]["partitions"]]
    ours = {m["partition"]: m["replicas"] for m in moves if m["topic"] == name}
    assert set(ours) == {0, 1, 2}, moves  # the partitions with a replica on broker 3
    assert all(3 not in r for r in ours.values())
    applied = cli.ok("apply", "-f", str(out / "reassignments"))
    assert "completed" in applied, applied
    rows = kafka_topics(real_kafka, name)  # Kafka's own tool says where the replicas are
    assert all(3 not in replicas for replicas, _, _ in rows.values()), rows
    assert {p: rows[p][0] for p in ours} == ours
    assert all(set(d.isr) == set(d.replicas) for d in describe(real_kafka, name))
