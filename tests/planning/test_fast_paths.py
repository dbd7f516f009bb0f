"""The planner's fast paths against the straightforward code they stand for — to the bit.

At 10^6 partitions the scorer, the balancer's accept loop and the finish were rewritten for
speed (issue 22) without changing the plan: each rewrite here is compared with the plain
computation on random inputs, so a difference in a single choice fails.
"""

from __future__ import annotations

import random

import pytest

from controller_core.planning.balancer import EPS, Balancer, Candidate
from controller_core.planning.objective import compute_targets
from controller_core.planning.scoring import CANDIDATE_COLUMNS
from controller_core.planning.snapshot import Broker


def test_candidate_fields_are_the_scorers_columns_in_order() -> None:
    # to_candidates builds the tuples from the columns by position
    assert Candidate._fields == CANDIDATE_COLUMNS


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


@pytest.mark.parametrize("racks", [3, 4, 0])
def test_the_soft_destination_is_the_one_feasible_and_delta_pick(racks: int) -> None:
    rng = random.Random(racks)
    n = 12
    brokers = [Broker(b, f"r{b % racks}" if racks else None, rng.randint(5, 60) * 10**8, 1e6,
                      1e6) for b in range(n)]
    picked = 0
    for trial in range(300):
        loads = {b: [rng.randint(0, 60), rng.randint(0, 30), rng.randint(0, 40) * 10**8,
                     rng.randint(0, 10**6), rng.randint(0, 10**6)] for b in range(n)}
        totals = [float(sum(v[m] for v in loads.values())) for m in range(5)]
        t = compute_targets(brokers, set(range(n)), totals)
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
            assert bal._best_soft_dest(c, reps, leader) == want
            picked += want is not None
    assert picked > 100
