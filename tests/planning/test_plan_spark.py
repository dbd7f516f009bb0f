"""The Spark planning job on small synthetic clusters (one shared local[2] session)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from controller_core.planning.goals import parse_goal
from controller_core.planning.objective import (
    DISK,
    LEADERS,
    REPLICAS,
    check_assignment,
    compute_loads,
    objective,
    rate,
)
from controller_core.planning.report import lower_bound_bytes, max_over_mean
from controller_core.planning.result import PlanResult
from controller_core.planning.snapshot import Snapshot, read_snapshot
from controller_core.planning.spark_job import PlanOptions, run_plan
from controller_core.planning.synthetic import make_snapshot
from tests.planning.conftest import save

pytestmark = pytest.mark.spark

_cache: dict[tuple[str, str, int], tuple[Snapshot, PlanResult]] = {}


def plan(spark: Any, d: Path, goal: str, seed: int = 1) -> tuple[Snapshot, PlanResult]:
    key = (str(d), goal, seed)
    if key not in _cache:
        snap = read_snapshot(d)
        words = goal.split()
        balance = "+balance" in words
        words = [w for w in words if w != "+balance"]
        _cache[key] = (snap, run_plan(spark, d, snap, parse_goal(words, balance),
                                      PlanOptions(seed=seed)))
    return _cache[key]


def final_assignment(snap: Snapshot, res: PlanResult) -> list[list[int]]:
    moved = {(m.topic, m.partition): list(m.after) for m in res.moves}
    return [moved.get((t, p), list(r)) for t, p, r in zip(
        snap.partitions.topic, snap.partitions.partition, snap.partitions.replicas, strict=True)]


def assert_valid(snap: Snapshot, res: PlanResult, removed: set[int] = frozenset()) -> None:  # type: ignore[assignment]
    pt = snap.partitions
    after = final_assignment(snap, res)
    violations = check_assignment(snap.brokers, pt.topic, pt.partition, pt.replicas, after,
                                  pt.size_bytes, set(removed))
    assert violations == [], violations[:5]
    assert res.violations == []
    # the loads the report shows are the loads of this assignment (leaders: preferred for
    # the partitions in the plan, unchanged for the others)
    moved = {(m.topic, m.partition) for m in res.moves}
    leaders = [a[0] if (t, p) in moved else ld
               for t, p, a, ld in zip(pt.topic, pt.partition, after, pt.leader, strict=True)]
    loads = compute_loads(snap.broker_ids(), after, leaders, pt.size_bytes,
                          [rate(x) for x in pt.bytes_in_per_second],
                          [rate(x) for x in pt.bytes_out_per_second])
    assert loads == res.loads_after


def test_rebalance_is_valid_balanced_and_moves_little(spark: Any, skewed_dir: Path) -> None:
    snap, res = plan(spark, skewed_dir, "rebalance")
    assert_valid(snap, res)
    ids = sorted(res.eligible)
    # ~100 replicas per broker with sizes spread 1:20: replica counts cannot be evened out
    # without swaps once disk is balanced (bench/ shows <= 1.02 at 3000 replicas per broker)
    for metric, tolerance in ((DISK, 1.05), (REPLICAS, 1.25), (LEADERS, 1.05)):
        before = max_over_mean(res.loads_before, ids, metric)
        after = max_over_mean(res.loads_after, ids, metric)
        assert before > 1.4, (metric, before)
        assert after <= tolerance, (metric, after)
    assert res.bytes_moved <= 1.3 * lower_bound_bytes(res)
    # every replica round but the last lowered the imbalance by at least 0.2% of where it
    # started (PlanOptions.min_round_gain); the last one ended the phase
    prev = start = objective(res.targets, res.loads_before)
    rounds = [r for r in res.rounds if r.phase == "replicas"]
    for r in rounds[:-1]:
        assert prev - r.objective >= 0.002 * start, (prev, r)
        prev = r.objective
    assert len(rounds) < PlanOptions().max_rounds
    # replicas that need not move stay: far fewer than all partitions are in the plan
    assert 0 < len(res.moves) < len(snap.partitions) / 2
    # plan order: small partitions first
    sizes = [m.size_bytes for m in res.moves]
    assert sizes == sorted(sizes)


def test_a_fixed_seed_gives_the_same_plan(spark: Any, skewed_dir: Path) -> None:
    _, first = plan(spark, skewed_dir, "rebalance", seed=1)
    snap = read_snapshot(skewed_dir)
    again = run_plan(spark, skewed_dir, snap, parse_goal(["rebalance"]), PlanOptions(seed=1))
    assert again.moves == first.moves
    assert again.loads_after == first.loads_after


def test_added_brokers_receive_load_and_old_ones_only_give(spark: Any, added_dir: Path
                                                           ) -> None:
    snap, res = plan(spark, added_dir, "add-brokers 6,7,8")
    assert_valid(snap, res)
    new = {6, 7, 8}
    assert all(res.loads_before[b][REPLICAS] == 0 for b in new)
    for b in new:
        target = res.targets.target[b]
        assert res.loads_after[b][REPLICAS] >= 0.85 * target[REPLICAS]
        assert res.loads_after[b][DISK] >= 0.85 * target[DISK]
        assert res.loads_after[b][LEADERS] > 0
    for m in res.moves:
        assert set(m.added) <= new, m
    assert max_over_mean(res.loads_after, range(9), DISK) <= 1.10


def test_removed_brokers_hold_nothing_afterwards(spark: Any, skewed_dir: Path) -> None:
    snap, res = plan(spark, skewed_dir, "remove-brokers 4")
    assert_valid(snap, res, removed={4})
    assert res.loads_after[4] == [0, 0, 0, 0, 0]
    # only replicas of broker 4 moved; the rest stayed where they were
    for m in res.moves:
        assert set(m.removed) <= {4}, m
    held = sum(1 for r in snap.partitions.replicas if 4 in r)
    assert res.replicas_moved == held


def test_leader_balance_moves_no_data(spark: Any, skewed_dir: Path) -> None:
    snap, res = plan(spark, skewed_dir, "leader-balance")
    assert_valid(snap, res)
    assert res.bytes_moved == 0 and res.replicas_moved == 0
    assert all(set(m.before) == set(m.after) for m in res.moves)
    ids = sorted(res.eligible)
    assert max_over_mean(res.loads_before, ids, LEADERS) > 1.4
    # leaders can only go to brokers that hold a replica; the skew limits how far it gets
    assert max_over_mean(res.loads_after, ids, LEADERS) <= 1.15


def test_replicas_sharing_a_rack_are_repaired(spark: Any, tmp_path: Path) -> None:
    snap = make_snapshot(brokers=6, partitions=30, seed=3)  # racks a,b,c,a,b,c
    for i in range(5):  # brokers 0 and 3 are both in rack-a
        snap.partitions.replicas[i] = [0, 3, 1]
        snap.partitions.leader[i] = 0
    d = save(snap, tmp_path / "dup")
    snap, res = plan(spark, d, "rebalance")
    assert_valid(snap, res)  # includes: distinct racks wherever 3 racks allow it
    fixed = {(m.topic, m.partition) for m in res.moves}
    assert all((snap.partitions.topic[i], snap.partitions.partition[i]) in fixed
               for i in range(5))


def test_a_drain_that_does_not_fit_is_reported_with_the_reason(spark: Any, tmp_path: Path
                                                               ) -> None:
    from controller_core.planning.snapshot import Broker, PartitionTable

    t = PartitionTable()
    for i in range(4):
        t.append("t", i, [i % 3, 3], 3, 400, 0.0, 0.0)
    brokers = [Broker(b, None, 1000 if b < 3 else 5000, 1e6, 1e6) for b in range(4)]
    d = save(Snapshot(brokers, t, "demo"), tmp_path / "full")
    _, res = plan(spark, d, "remove-brokers 3")
    # 4 replicas of 400 bytes must leave broker 3; broker 0 holds 800 of its 1000 bytes, 1 and
    # 2 hold 400: only 1 and 2 can take one more each — two fit, two cannot
    assert res.replicas_moved == 2
    kinds = [v.constraint for v in res.violations]
    assert kinds.count("placement") == 2 and kinds.count("drain") == 2
    text = "\n".join(str(v) for v in res.violations)
    assert "no broker that may receive it has 400 bytes of free disk" in text
    assert all(res.loads_after[b][DISK] <= 1000 for b in range(3))


def test_new_brokers_fill_on_a_cluster_whose_old_brokers_are_all_within_tolerance(
        spark: Any, tmp_path: Path) -> None:
    """Issue 13: 1,000 brokers with five empty new ones gave an empty plan. Each old broker
    was only 0.5% above its new target — inside the ±2% band — so no broker was a source.
    60 evenly loaded brokers and one new one (1.7% above) reproduce it. (No racks here: with
    racks, one new broker in a rack of 20 moves that rack's targets beyond the band.)"""
    snap = make_snapshot(brokers=61, partitions=1200, seed=4, empty=(60,), round_robin=True,
                         size_sigma=0.0, racks=0)
    d = save(snap, tmp_path / "even")
    snap, res = plan(spark, d, "add-brokers 60")
    assert_valid(snap, res)
    assert all(set(m.added) <= {60} for m in res.moves)
    before, t = res.loads_before, res.targets
    for m in (REPLICAS, DISK, LEADERS):
        assert all(0 < before[b][m] - t.target[b][m] <= t.band[b][m] for b in range(60)), m
    # 3,600 replicas on 61 brokers: 59 each, within one replica of the target
    assert res.loads_after[60][REPLICAS] >= 58
    assert res.loads_after[60][DISK] >= 58 * 100_000_000
    assert res.loads_after[60][LEADERS] >= 18
    for m in (REPLICAS, DISK, LEADERS):
        assert max_over_mean(res.loads_after, range(61), m) <= 1.03, m


def test_five_new_brokers_of_a_thousand_fill_at_a_hundred_thousand_partitions(
        spark: Any, tmp_path: Path) -> None:
    """Issue 13 at its own size: 1,000 brokers on 3 racks, 100,000 evenly placed partitions
    of 100 MB, brokers 995-999 new and empty. The plan was empty; each new broker must now
    take its share (300 replicas, 30 GB) and nothing else may move."""
    new = (995, 996, 997, 998, 999)
    snap = make_snapshot(brokers=1000, partitions=100_000, seed=9, empty=new,
                         round_robin=True, size_sigma=0.0, topics=100)
    d = save(snap, tmp_path / "thousand")
    snap, res = plan(spark, d, "add-brokers 995,996,997,998,999")
    assert res.violations == []
    copied = [m for m in res.moves if set(m.after) != set(m.before)]
    assert copied and all(set(m.after) - set(m.before) <= set(new) for m in copied)
    for b in new:
        assert 294 <= res.loads_after[b][REPLICAS] <= 306, (b, res.loads_after[b])
        assert res.loads_after[b][LEADERS] >= 90, (b, res.loads_after[b])
    assert max_over_mean(res.loads_after, range(1000), REPLICAS) <= 1.03
    assert lower_bound_bytes(res) > 0
    assert res.bytes_moved <= 1.05 * lower_bound_bytes(res)


def test_add_or_remove_with_balance_also_balances_the_other_brokers(
        spark: Any, skewed_dir: Path, added_dir: Path) -> None:
    # one broker of each rack leaves (removing one of a rack's three brokers would force its
    # other two to hold the rack's whole share)
    snap, res = plan(spark, skewed_dir, "remove-brokers 3,4,5 +balance")
    assert_valid(snap, res, removed={3, 4, 5})
    assert all(res.loads_after[b] == [0, 0, 0, 0, 0] for b in (3, 4, 5))
    ids = sorted(res.eligible)
    assert max_over_mean(res.loads_before, ids, DISK) > 1.3
    for metric in (DISK, REPLICAS, LEADERS):
        assert max_over_mean(res.loads_after, ids, metric) <= 1.05, metric
    assert res.bytes_moved <= 1.1 * lower_bound_bytes(res)
    # without --balance only broker 4's replicas move; the report says why the hot brokers
    # stay hot and how to balance them too
    _, drain = plan(spark, skewed_dir, "remove-brokers 4")
    assert any("stay above target: only the replicas of the removed brokers [4] move "
               "(remove-brokers without --balance); pass --balance" in n
               for n in drain.shortfalls), drain.shortfalls

    snap, res = plan(spark, added_dir, "add-brokers 6,7,8 +balance")
    assert_valid(snap, res)
    for metric in (DISK, REPLICAS, LEADERS):
        assert max_over_mean(res.loads_after, range(9), metric) <= 1.05, metric
    assert res.bytes_moved <= 1.1 * lower_bound_bytes(res)


def test_a_rack_left_shared_names_the_goal_not_the_disk(spark: Any, tmp_path: Path) -> None:
    """Replicas sharing a rack under add-brokers: the only broker that may receive is in
    the shared rack, and disk has plenty of room — the messages say so."""
    snap = make_snapshot(brokers=7, partitions=30, seed=3, empty=(6,))  # 6 is in rack-a
    for i in range(3):
        snap.partitions.replicas[i] = [0, 3, 2]  # 0 and 3 are both in rack-a
        snap.partitions.leader[i] = 0
    d = save(snap, tmp_path / "shared")
    _, res = plan(spark, d, "add-brokers 6")
    racks = [v for v in res.violations if v.constraint == "rack awareness"]
    assert racks, res.violations
    for v in racks:
        assert "only moves onto the new brokers [6] are allowed" in v.reason, v
        assert "none of them is in rack(s) ['rack-b']" in v.reason, v
    placement = [v for v in res.violations if v.constraint == "placement"]
    assert placement and all("only moves onto the new brokers [6]" in v.reason and
                             "would put two replicas in one rack" in v.reason
                             for v in placement), placement
    assert not any("disk" in v.reason for v in res.violations), res.violations


def test_a_drain_moves_only_the_drained_replicas_even_where_racks_are_shared(
        spark: Any, tmp_path: Path) -> None:
    """remove-brokers without --balance promises that only the removed brokers' replicas
    move: a partition whose replicas share a rack elsewhere is left as it is (and reported),
    not repaired by the drain."""
    snap = make_snapshot(brokers=7, partitions=40, seed=4)  # racks a,b,c,a,b,c,a
    for i in range(3):
        snap.partitions.replicas[i] = [1, 4, 2]  # 1 and 4 are both in rack-b
        snap.partitions.leader[i] = 1
    d = save(snap, tmp_path / "drain-shared")
    _, res = plan(spark, d, "remove-brokers 6")
    copied = [m for m in res.moves if set(m.after) != set(m.before)]  # not a mere reorder
    shared = {(snap.partitions.topic[i], snap.partitions.partition[i]) for i in range(3)}
    assert copied and not {(m.topic, m.partition) for m in copied} & shared
    assert all(set(m.before) - set(m.after) == {6} for m in copied)
    assert {v.subject for v in res.violations if v.constraint == "rack awareness"} == {
        f"{t}-{p}" for t, p in shared}


def test_the_round_filter_in_the_scorer_matches_spark_rack_check(spark: Any) -> None:
    """Rounds score the snapshot's table with the plan's changes applied batch by batch;
    the numpy check of replicas sharing a rack (a broker without a rack counting as the rack
    "none") must pick exactly the rows of Spark's check it replaced, `_rack_dup_filter`."""
    import random

    import numpy as np
    import pandas as pd

    from controller_core.planning.balancer import Balancer
    from controller_core.planning.objective import compute_targets
    from controller_core.planning.scoring import _padded, _shares_a_rack, with_changes
    from controller_core.planning.snapshot import Broker
    from controller_core.planning.spark_job import _rack_dup_filter

    rng = random.Random(11)
    racks = ["a", "b", "c", None]
    brokers = [Broker(b, racks[b % 4], 10**12, 1e8, 1e8) for b in range(12)]
    rows = []
    for pid in range(400):
        rf = rng.choice([1, 2, 3, 3, 4])
        reps = rng.sample(range(12), rf)
        rows.append((pid, reps, reps[0]))
    frame = pd.DataFrame({"pid": [r[0] for r in rows], "replicas": [r[1] for r in rows],
                          "leader": [r[2] for r in rows]})
    loads = {b.id: [1, 1, 1, 1, 1] for b in brokers}
    targets = compute_targets(brokers, set(loads), [12.0] * 5)
    bal = Balancer(brokers, loads, targets, dest_ids=set(loads), removed=set())
    df = spark.createDataFrame(frame, "pid long, replicas array<int>, leader long")
    expected = {int(r[0]) for r in df.filter(_rack_dup_filter(bal)).select("pid").collect()}

    slot = {b.id: i for i, b in enumerate(brokers)}
    rack_idx = {"a": 0, "b": 1, "c": 2}
    rack_of_slot = np.array([rack_idx.get(b.rack or "", -1) for b in brokers])
    ids = _padded(list(frame["replicas"]), 4)
    slots = np.where(ids >= 0, np.array([slot.get(int(x), -1) for x in ids.ravel()])
                     .reshape(ids.shape), -1)
    rack_m = np.where(slots >= 0, rack_of_slot[np.clip(slots, 0, None)], -2)
    got = _shares_a_rack(rack_m, (ids >= 0).sum(axis=1), len(bal.racks))
    assert {int(p) for p in frame["pid"][got]} == expected
    assert 0 < len(expected) < len(rows)

    changed = with_changes(frame, {3: ((7, 8), 8), 9: ((1,), 1)})
    assert list(changed.loc[3, "replicas"]) == [7, 8] and changed.loc[3, "leader"] == 8
    assert list(changed.loc[9, "replicas"]) == [1] and changed.loc[9, "leader"] == 1
    assert list(changed.loc[4, "replicas"]) == rows[4][1]  # unchanged rows stay
    assert list(frame.loc[3, "replicas"]) == rows[3][1]  # the batch itself is not modified
