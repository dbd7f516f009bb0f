"""The driver-side table (local_table) gives Spark's plan: same ids, loads, rounds, moves.

Every case plans one snapshot twice — on the Spark session of conftest and in this
process — and compares everything the result says except the timings. The cases cover
each goal, rack repair, a demotion that leaves partitions on demoted brokers, a drain that
does not fit (placement and drain violations), brokers without racks and a mix of topics
with long, short and non-ASCII names.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from controller_core.planning.goals import parse_goal
from controller_core.planning.local_table import LocalTable, run_plan_on_driver
from controller_core.planning.pid import partition_ids, topic_hash
from controller_core.planning.result import PlanResult
from controller_core.planning.snapshot import Broker, PartitionTable, Snapshot, read_snapshot
from controller_core.planning.spark_job import PlanOptions, run_plan, spark_loads
from controller_core.planning.synthetic import make_snapshot, with_log_dirs

from .conftest import save

pytestmark = pytest.mark.spark


def comparable(res: PlanResult) -> PlanResult:
    """The result without what depends on the clock."""
    rounds = [replace(r, seconds=0.0, driver_seconds=0.0) for r in res.rounds]
    return replace(res, rounds=rounds, seconds=0.0, timings={})


def both(spark: Any, d: Path, goal: str, seed: int = 3) -> tuple[PlanResult, PlanResult]:
    words = goal.split()
    balance = "--balance" in words
    words = [w for w in words if w != "--balance"]
    snap = read_snapshot(d)
    g = parse_goal(words, balance)
    on_spark = run_plan(spark, d, snap, g, PlanOptions(seed=seed))
    on_driver = run_plan_on_driver(d, snap, g, PlanOptions(seed=seed))
    return on_spark, on_driver


def renamed(snap: Snapshot) -> Snapshot:
    """Topics whose names exercise every path of the hash: 1-3, 4-7, 8-31, 32+ bytes and
    multi-byte UTF-8."""
    names = ["a", "abcde", "ordersX-", "payments-ledger-events-v2", "x" * 32,
             "ünïcødé-tøpic", "clickstream.raw.events.europe-west-4.partitioned"]
    t = snap.partitions
    t.topic = [names[i % len(names)] + f"-{i // len(names) % 3}" for i in range(len(t.topic))]
    t.partition = [i // (3 * len(names)) for i in range(len(t.topic))]
    return snap


CASES = [
    ("skewed", "rebalance"),
    ("skewed", "leader-balance"),
    ("skewed", "remove-brokers 1"),
    ("skewed", "remove-brokers 1 --balance"),
    ("added", "add-brokers 6,7,8"),
    ("added", "add-brokers 6,7,8 --balance"),
    ("skewed", "demote-brokers 0,4"),
]


@pytest.mark.parametrize(("which", "goal"), CASES)
def test_the_driver_plans_what_spark_plans(spark: Any, skewed_dir: Path, added_dir: Path,
                                           which: str, goal: str) -> None:
    d = skewed_dir if which == "skewed" else added_dir
    on_spark, on_driver = both(spark, d, goal)
    assert on_spark.replicas_moved > 0 or goal in ("leader-balance", "demote-brokers 0,4")
    assert len(on_spark.moves) > 0
    assert comparable(on_driver) == comparable(on_spark)


def test_the_same_with_rack_repair_mixed_topics_and_other_seeds(spark: Any, tmp_path: Path
                                                                ) -> None:
    snap = renamed(make_snapshot(brokers=12, partitions=700, seed=8, skew=1.5))
    for i in range(0, 60, 6):  # brokers 0 and 3 share rack-a: repaired
        snap.partitions.replicas[i] = [0, 3, 1]
        snap.partitions.leader[i] = 3
    d = save(snap, tmp_path / "mixed")
    for seed in (0, 11):
        on_spark, on_driver = both(spark, d, "rebalance", seed)
        assert on_spark.moves and comparable(on_driver) == comparable(on_spark)


def test_the_same_violations_when_a_drain_does_not_fit_and_brokers_have_no_rack(
        spark: Any, tmp_path: Path) -> None:
    t = PartitionTable()
    for i in range(4):
        t.append("t", i, [i % 3, 3], 3, 400, 0.0, 0.0)
    brokers = [Broker(b, None, 1000 if b < 3 else 5000, 1e6, 1e6) for b in range(4)]
    d = save(Snapshot(brokers, t, "demo"), tmp_path / "full")
    on_spark, on_driver = both(spark, d, "remove-brokers 3")
    kinds = sorted(v.constraint for v in on_spark.violations)
    assert kinds == ["drain", "drain", "placement", "placement"]
    assert comparable(on_driver) == comparable(on_spark)


def test_the_same_demotion_when_some_partitions_have_only_demoted_replicas(
        spark: Any, tmp_path: Path) -> None:
    """The partitions a demotion cannot change are named from Spark's table as from the
    driver's; the others get the same new preferred leaders."""
    snap = renamed(make_snapshot(brokers=6, partitions=200, seed=9, replication_factor=2))
    for i in range(0, 40, 5):
        snap.partitions.replicas[i] = [1, 2]
        snap.partitions.leader[i] = 1
    d = save(snap, tmp_path / "stuck")
    on_spark, on_driver = both(spark, d, "demote-brokers 1,2")
    stuck = sum(1 for r in snap.partitions.replicas if set(r) <= {1, 2})
    assert stuck >= 8
    assert on_spark.shortfalls[0].startswith(
        f"demote-brokers: {stuck} partition(s) keep a demoted")
    assert on_spark.moves and comparable(on_driver) == comparable(on_spark)


def test_the_same_log_dirs_on_a_jbod_snapshot(spark: Any, tmp_path: Path) -> None:
    """Log dirs are chosen after the rounds from the moves: a rebalance and a remove-disks on
    a snapshot with three dirs per broker give Spark's plan, dirs and disk table included."""
    snap = with_log_dirs(renamed(make_snapshot(brokers=9, partitions=300, seed=5, skew=1.0)),
                         dirs=3, first_share=0.6, seed=4)
    d = save(snap, tmp_path / "jbod")
    for goal in ("rebalance", "remove-disks 0:/data/d0,5:/data/d2"):
        on_spark, on_driver = both(spark, d, goal)
        assert on_spark.disks is not None and on_spark.moves
        assert all(m.dirs_after is not None for m in on_spark.moves)
        assert comparable(on_driver) == comparable(on_spark)
    assert on_spark.dir_bytes_moved > 0 and on_spark.bytes_moved == 0


def test_partition_ids_and_loads_are_sparks(spark: Any, tmp_path: Path) -> None:
    """Spark's xxhash64(topic, partition) for long and int partition columns, and
    spark_loads, computed in numpy."""
    import numpy as np
    from pyspark.sql import functions as F

    snap = renamed(make_snapshot(brokers=9, partitions=300, seed=2))
    d = save(snap, tmp_path / "ids")
    table = LocalTable(d, batch_rows=64)
    rows = list(zip(snap.partitions.topic, snap.partitions.partition, strict=True))
    for kind, width in (("long", 8), ("int", 4)):
        df = spark.createDataFrame(rows, f"topic string, partition {kind}")
        want = [int(r[0]) for r in df.select(F.xxhash64("topic", "partition")).collect()]
        seeds = np.array([topic_hash(t) for t, _ in rows], dtype=np.int64)
        got = partition_ids(seeds, np.array([p for _, p in rows]), width).tolist()
        assert got == want, kind
    assert table.pid.tolist() == want_long(spark, rows)
    base = spark.createDataFrame(
        [(r, ld, s, int(bi + 0.5), int(bo + 0.5)) for r, ld, s, bi, bo in zip(
            snap.partitions.replicas, snap.partitions.leader, snap.partitions.size_bytes,
            snap.partitions.bytes_in_per_second, snap.partitions.bytes_out_per_second,
            strict=True)],
        "replicas array<int>, leader long, size long, bin long, bout long")
    ids = [*snap.broker_ids(), 99]  # a broker no replica names: zeros
    assert table.loads(ids) == spark_loads(base, ids)
    assert table.loads(ids)[99] == [0, 0, 0, 0, 0]


def want_long(spark: Any, rows: list[tuple[str, int]]) -> list[int]:
    from pyspark.sql import functions as F

    df = spark.createDataFrame(rows, "topic string, partition long")
    return [int(r[0]) for r in df.select(F.xxhash64("topic", "partition")).collect()]
