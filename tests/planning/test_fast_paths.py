"""The planner's fast paths against the straightforward code they stand for — to the bit.

At 10^6 partitions the scorer, the balancer's accept loop and the finish were rewritten for
speed (issue 22) without changing the plan: each rewrite here is compared with the plain
computation on random inputs, so a difference in a single choice fails.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pandas as pd
import pytest

from controller_core.planning.balancer import EPS, Balancer, Candidate, round_order
from controller_core.planning.local_table import _rack_shared_rows
from controller_core.planning.objective import compute_targets
from controller_core.planning.render import chunk
from controller_core.planning.scoring import (
    CANDIDATE_COLUMNS,
    _padded,
    _race,
    _shares_a_rack,
    best_per_source,
    uniform,
)
from controller_core.planning.snapshot import Broker


def test_candidate_fields_are_the_scorers_columns_in_order() -> None:
    # to_candidates builds the tuples from the columns by position
    assert Candidate._fields == CANDIDATE_COLUMNS


def test_padded_rows_of_any_length() -> None:
    lists = [[3, 1, 2], [5], [], [7, 8], [9, 9, 9]]
    assert _padded(lists, 3).tolist() == [[3, 1, 2], [5, -1, -1], [-1, -1, -1], [7, 8, -1],
                                          [9, 9, 9]]
    assert _padded(lists, 4)[0].tolist() == [3, 1, 2, -1]
    assert _padded([[1, 2], [3, 4]], 2).tolist() == [[1, 2], [3, 4]]
    assert _padded([np.array([4, 5]), np.array([6])], 2).tolist() == [[4, 5], [6, -1]]
    assert _padded([], 3).shape == (0, 3)


def test_rack_shared_rows_is_the_per_cell_lookup() -> None:
    rng = random.Random(4)
    brokers = [Broker(b, None if b % 7 == 6 else f"r{b % 3}", 10**9, 1e6, 1e6)
               for b in range(20)]
    loads = {b.id: [0, 0, 0, 0, 0] for b in brokers}
    t = compute_targets(brokers, set(loads), [1.0] * 5)
    bal = Balancer(brokers, loads, t, dest_ids=set(loads), removed=set())
    # broker 25 is unknown: no rack, as the per-cell lookup had it
    replicas = [rng.sample([*range(20), 25], rng.randint(1, 4)) for _ in range(3000)]
    names = sorted({r for r in bal.rack_of.values() if r is not None})
    rack_of = {b: (-1 if r is None else names.index(r)) for b, r in bal.rack_of.items()}
    ids = _padded(replicas, 4)
    racks = np.array([[rack_of.get(int(b), -1) if b >= 0 else -2 for b in row]
                      for row in ids.tolist()], dtype=np.int64)
    want = _shares_a_rack(racks, (ids >= 0).sum(axis=1), len(bal.racks))
    got = _rack_shared_rows(replicas, bal)
    assert want.any() and not want.all()
    assert got.tolist() == want.tolist()


def dense_race(weights: Any, feasible: Any, pid: Any, dest_ids: Any, seed: int,
               choices: int) -> tuple[Any, Any]:
    """The race over the whole (rows x destinations) matrix, as it was computed."""
    u = uniform(pid[:, None], dest_ids[None, :], seed)
    with np.errstate(divide="ignore", invalid="ignore"):
        key = np.where(feasible & (weights > 0), -np.log(u) / weights, np.inf)
    c = min(choices, key.shape[1])
    part = np.argpartition(key, c - 1, axis=1)[:, :c] if c < key.shape[1] else \
        np.tile(np.arange(key.shape[1]), (key.shape[0], 1))
    pkeys = np.take_along_axis(key, part, axis=1)
    order = np.argsort(pkeys, axis=1, kind="stable")
    idx = np.take_along_axis(part, order, axis=1)
    return idx, np.isfinite(np.take_along_axis(key, idx, axis=1))


@pytest.mark.parametrize(("rows", "cols", "choices"), [(300, 50, 4), (40, 3, 4), (10, 0, 4),
                                                       (200, 9, 1)])
def test_the_sparse_race_draws_what_the_dense_one_drew(rows: int, cols: int,
                                                        choices: int) -> None:
    rng = np.random.default_rng(rows + cols)
    for seed in (0, 1_000_003, 2**63 + 5):
        weights = rng.normal(size=(rows, cols)) * 10.0 ** rng.integers(-12, 3, size=(rows, 1))
        feasible = rng.random((rows, cols)) < 0.3
        pid = rng.integers(-2**62, 2**62, size=rows)
        dest_ids = rng.permutation(5000)[:cols]
        want_idx, want_fin = dense_race(weights, feasible, pid, dest_ids, seed, choices)
        idx, fin = _race(weights, feasible, pid, dest_ids, seed, choices)
        assert (fin == want_fin).all()
        assert (np.where(fin, idx, -1) == np.where(want_fin, want_idx, -1)).all()
        # the finite keys are a prefix of each row
        assert (np.sort(~fin, axis=1, kind="stable") == ~fin).all()
        positive = feasible & (weights > 0)
        idx, fin = _race(weights, positive, pid, dest_ids, seed, choices, positive=True)
        want_idx, want_fin = dense_race(weights, positive, pid, dest_ids, seed, choices)
        assert (np.where(fin, idx, -1) == np.where(want_fin, want_idx, -1)).all()
        # every cell drawn (a group of rows over the columns it may take): hashed whole
        every = np.ones((rows, cols), dtype=bool)
        weights = np.abs(weights) + 1e-300
        want_idx, want_fin = dense_race(weights, every, pid, dest_ids, seed, choices)
        assert want_fin.all()
        for positive_flag in (True, False):
            idx, fin = _race(weights, every, pid, dest_ids, seed, choices,
                             positive=positive_flag)
            assert fin.all() and (idx == want_idx).all()


def slow_soft_dest(bal: Balancer, c: Candidate, replicas: tuple[int, ...], leader: int
                   ) -> int | None:
    """try_replica_move's choice for a move that need not happen, as it was written: every
    destination through _feasible and replica_move_delta."""
    best: tuple[float, int] | None = None
    for dst in c.dests:
        if not bal._feasible(c, replicas, dst, True):
            continue
        d = bal.replica_move_delta(c, replicas, leader, dst)
        if d >= -EPS:
            continue
        if best is None or d < best[0] - EPS or (abs(d - best[0]) <= EPS and dst < best[1]):
            best = (d, dst)
    return None if best is None else best[1]


def random_loads(rng: random.Random, brokers: list[Broker]) -> tuple[dict[int, list[int]], Any]:
    """Random loads of ``brokers`` (ids 0..n-1) and the targets they give."""
    loads = {b.id: [rng.randint(0, 60), rng.randint(0, 30), rng.randint(0, 40) * 10**8,
                    rng.randint(0, 10**6), rng.randint(0, 10**6)] for b in brokers}
    totals = [float(sum(v[m] for v in loads.values())) for m in range(5)]
    return loads, compute_targets(brokers, set(loads), totals)


@pytest.mark.parametrize("racks", [3, 4, 0])
def test_the_soft_destination_is_the_one_feasible_and_delta_pick(racks: int) -> None:
    rng = random.Random(racks)
    n = 12
    brokers = [Broker(b, f"r{b % racks}" if racks else None, rng.randint(5, 60) * 10**8, 1e6,
                      1e6) for b in range(n)]
    picked = 0
    for trial in range(300):
        loads, t = random_loads(rng, brokers)
        bal = Balancer(brokers, loads, t, dest_ids=set(range(n)) - {n - 1}, removed=set())
        bal.relaxed = trial % 3 == 0
        bal.receivers = set(rng.sample(range(n), 6)) if trial % 5 == 0 else None
        for _ in range(20):
            reps = tuple(rng.sample(range(n), rng.randint(1, 4)))
            pos = rng.randrange(len(reps))
            leader = reps[0] if rng.random() < 0.8 else rng.randrange(n)
            c = Candidate(pid=1, pos=pos, src=reps[pos], mandatory=False,
                          dests=tuple(rng.sample(range(n), rng.randint(1, 6))), priority=0.0,
                          replicas=reps, leader=leader,
                          size=rng.choice([0, rng.randint(1, 20) * 10**8]),
                          bin=rng.choice([0, rng.randint(1, 10**5)]),
                          bout=rng.choice([0, rng.randint(1, 10**5)]))
            want = slow_soft_dest(bal, c, reps, leader)
            assert bal._soft_chooser()(c, reps, leader) == want
            picked += want is not None
    assert picked > 100


def test_a_round_accepts_what_try_replica_move_accepts_one_by_one() -> None:
    """run_round binds the chooser once per round and tries mandatory moves the general
    way: the same moves, in the same order, as try_replica_move over the sorted list."""
    rng = random.Random(7)
    n = 12
    brokers = [Broker(b, f"r{b % 3}", rng.randint(20, 60) * 10**8, 1e6, 1e6) for b in range(n)]
    total = 0
    for trial in range(40):
        loads, t = random_loads(rng, brokers)
        cands = []
        for pid in range(60):
            reps = tuple(rng.sample(range(n), 3))
            pos = rng.randrange(3)
            cands.append(Candidate(
                pid=pid % 45, pos=pos, src=reps[pos], mandatory=rng.random() < 0.1,
                dests=tuple(rng.sample(range(n), 4)), priority=rng.random(), replicas=reps,
                leader=reps[0], size=rng.randint(1, 20) * 10**8, bin=rng.randint(0, 10**5),
                bout=rng.randint(0, 10**5)))
        one = Balancer(brokers, {b: list(v) for b, v in loads.items()}, t,
                       dest_ids=set(range(n)), removed=set())
        other = Balancer(brokers, {b: list(v) for b, v in loads.items()}, t,
                         dest_ids=set(range(n)), removed=set())
        one.relaxed = other.relaxed = trial % 4 == 0
        accepted = one.run_round(cands)
        ordered = round_order(cands, other.relaxed)
        assert accepted == sum(other.try_replica_move(c) for c in ordered)
        assert one.changed == other.changed and one.loads == other.loads
        assert one.unplaced == other.unplaced
        total += accepted
    assert total > 100


def slow_best_per_source(frame: Any, caps: dict[int, int]) -> Any:
    """best_per_source as it was written: pandas' sort, cumcount and mask."""
    frame = frame.sort_values(["priority", "pid", "pos"], kind="stable")
    rank = frame.groupby("src", sort=False).cumcount().to_numpy()
    cap = frame["src"].map(caps).fillna(0).to_numpy(np.int64)
    return frame[frame["mandatory"].to_numpy(bool) | (rank < cap)]


def test_the_cut_keeps_what_pandas_sort_and_mask_kept() -> None:
    rng = np.random.default_rng(11)
    for trial in range(30):
        n = int(rng.integers(1, 400))
        mand = rng.random(n) < 0.1
        # ties on priority (a few distinct values) and on pid (positions of one partition)
        prio = np.where(mand, -np.inf, rng.integers(0, 5, size=n) / 4.0)
        pid = rng.integers(-50, 50, size=n)
        frame = pd.DataFrame({
            "pid": pid, "pos": rng.integers(0, 3, size=n).astype(np.int32),
            "src": rng.integers(0, 8, size=n), "mandatory": mand,
            "dests": [[int(d)] for d in rng.integers(0, 8, size=n)], "priority": prio,
            "replicas": [[1, 2, 3]] * n, "leader": np.ones(n, dtype=np.int64),
            "size": np.arange(n), "bin": np.zeros(n, dtype=np.int64),
            "bout": np.zeros(n, dtype=np.int64)},
            index=rng.permutation(n) + 100 * trial)
        caps = {b: int(rng.integers(0, 12)) for b in range(7)}  # source 7 has no cap: 0
        want = slow_best_per_source(frame, caps)
        got = best_per_source(frame, caps)
        assert 0 < len(want) < n or trial < 3
        pd.testing.assert_frame_equal(got, want)


def slow_chunk(entries: list[str], max_partitions: int, budget: int) -> list[list[str]]:
    """The resources' runs of entries as chunk() made them, a list per run."""
    chunks: list[list[str]] = []
    cur: list[str] = []
    used = 0
    for e in entries:
        size = len(f"  - {e}\n".encode())
        if cur and (len(cur) >= max_partitions or used + size > budget):
            chunks.append(cur)
            cur, used = [], 0
        cur.append(e)
        used += size
    if cur:
        chunks.append(cur)
    return chunks


def test_chunk_ranges_are_the_runs_of_entries() -> None:
    rng = random.Random(5)
    for _ in range(200):
        entries = ["é" * rng.randint(0, 60) for _ in range(rng.randint(0, 80))]
        max_partitions, budget = rng.randint(1, 12), rng.randint(1, 400)
        got = [entries[r.start:r.stop] for r in chunk(entries, max_partitions, budget)]
        assert got == slow_chunk(entries, max_partitions, budget)
        assert all(len(r) > 0 for r in chunk(entries, max_partitions, budget))
