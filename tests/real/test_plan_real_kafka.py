"""snapshot → plan → apply on a real Apache Kafka 4.4, each step the console script as a user
runs it: the snapshot reads partition sizes from DescribeLogDirs, the Spark planner drains
a broker, and `apply` of the generated directory moves the data there; a demotion moves a
broker's leadership away (and a later leader-balance gives it back) with no data moved."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from controller_core.planning.snapshot import read_manifest, read_snapshot
from tests.real.fixtures import Session
from tests.real.test_cli_real_kafka import BIN, Cli, describe, kafka_topics, topic


def plan_of(snap: Path, out: Path, *goal: str) -> list[dict[str, Any]]:
    """`kraftsman plan` of ``goal`` (no data moves) on the snapshot: its resources."""
    done = subprocess.run([str(BIN), "plan", "--snapshot", str(snap), "--goal", *goal, "--out",
                           str(out), "--cluster-name", "prod"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "replicas to copy: 0" in done.stdout, done.stdout
    docs = [d for f in sorted((out / "reassignments").glob("*.yaml"))
            for d in yaml.safe_load_all(f.read_text()) if d]
    assert docs and all(d["spec"]["electPreferredLeaders"] for d in docs)
    return docs


def led_by(session: Session, broker: int) -> list[tuple[str, int]]:
    """Partitions of the whole cluster (Kafka's Metadata) that ``broker`` leads although
    another in-sync replica could."""
    with session.cluster.admin() as a:
        return [(d.tp.topic, d.tp.partition) for d in a.describe_partitions()
                if d.leader == broker and set(d.isr) - {broker}]


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


def test_demote_a_broker_then_leader_balance_gives_its_share_back(real_kafka: Session,
                                                                   tmp_path: Path) -> None:
    """demote-brokers 1 planned from a real snapshot and applied: Kafka's own tool then shows
    broker 1 leading nothing (it goes last in the replica lists), no replica moved; a
    leader-balance plan afterwards gives broker 1 its share of the leaders back."""
    # 16 partitions, each broker the preferred leader of 4: once broker 1 is demoted, 2 and 3
    # lead 6 each, out of their band, so leader-balance has leaders to give back
    name = topic(real_kafka, [[i % 4, (i + 1) % 4, (i + 2) % 4] for i in range(16)])
    cli = Cli(real_kafka, tmp_path / "state")
    before = kafka_topics(real_kafka, name)
    demoted = sorted(p for p, (r, _, _) in before.items() if r[0] == 1)
    assert len(demoted) == 4 and all(before[p][2] == 1 for p in demoted)
    cli.ok("snapshot", "--out", str(tmp_path / "s1"))
    docs = plan_of(tmp_path / "s1", tmp_path / "demote", "demote-brokers", "1")
    ours = {m["partition"]: m["replicas"] for d in docs for m in d["spec"]["partitions"]
            if m["topic"] == name}
    assert sorted(ours) == demoted  # the partitions broker 1 prefers to lead, only those
    assert all(r[-1] == 1 and sorted(r) == sorted(before[p][0]) for p, r in ours.items())

    applied = cli.ok("apply", "-f", str(tmp_path / "demote" / "reassignments"))
    assert "completed" in applied, applied
    rows = kafka_topics(real_kafka, name)  # Kafka's own tool
    assert {p: sorted(r) for p, (r, _, _) in rows.items()} == \
        {p: sorted(r) for p, (r, _, _) in before.items()}  # no replica moved
    assert {p: r for p, (r, _, _) in rows.items() if p in ours} == ours
    assert [p for p, (_, _, leader) in rows.items() if leader == 1] == []
    # Nor anywhere else in the cluster, but where the report says a failover left broker 1
    # leading against the preferred order (the plan does not reorder those; earlier tests
    # restart brokers) and in partitions made after the snapshot (the throttled apply's
    # marker topic, when it is new).
    pt = read_snapshot(tmp_path / "s1").partitions
    known = set(zip(pt.topic, pt.partition, strict=True))
    misled = {(t, p) for t, p, r, ld in zip(pt.topic, pt.partition, pt.replicas, pt.leader,
                                            strict=True) if ld == 1 and r[0] != 1}
    assert {tp for tp in led_by(real_kafka, 1) if tp in known} <= misled
    notes = json.loads((tmp_path / "demote" / "report.json").read_text())["summary"][
        "targetsNotReached"]
    assert any(f"{len(misled)} partition(s) are led by a demoted broker" in n
               for n in notes) == bool(misled), notes
    assert all(set(d.isr) == set(d.replicas) for d in describe(real_kafka, name))

    cli.ok("snapshot", "--out", str(tmp_path / "s2"))
    plan_of(tmp_path / "s2", tmp_path / "back", "leader-balance")
    cli.ok("apply", "-f", str(tmp_path / "back" / "reassignments"))
    leaders = [leader for _, _, leader in kafka_topics(real_kafka, name).values()]
    assert 3 <= leaders.count(1) <= 5, leaders  # its share of 16 over 4 brokers, ±1
