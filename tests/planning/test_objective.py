"""The objective, its incremental form, and the constraint checks — pure Python."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from controller_core.planning.balancer import Balancer, Candidate
from controller_core.planning.objective import (
    DISK,
    LEADERS,
    REPLICAS,
    check_assignment,
    compute_loads,
    compute_targets,
    objective,
    transfer_delta,
)
from controller_core.planning.snapshot import Broker

BROKERS = [Broker(i, f"r{i % 3}", 10_000, 1000.0, 1000.0) for i in range(6)]


@settings(max_examples=200, deadline=None)
@given(loads=st.lists(st.tuples(*[st.integers(0, 5000)] * 5), min_size=6, max_size=6),
       metric=st.integers(0, 4), src=st.integers(0, 5), dst=st.integers(0, 5),
       amount=st.integers(1, 500))
def test_transfer_delta_is_the_exact_change_of_the_objective(
        loads: list[tuple[int, ...]], metric: int, src: int, dst: int, amount: int) -> None:
    table = {i: list(v) for i, v in enumerate(loads)}
    totals = [float(sum(v[m] for v in loads)) or 1.0 for m in range(5)]
    t = compute_targets(BROKERS, {b.id for b in BROKERS}, totals)
    before = objective(t, table)
    delta = transfer_delta(t, table, metric, src, dst, amount)
    after_table = copy.deepcopy(table)
    after_table[src][metric] -= amount
    after_table[dst][metric] += amount
    if src == dst:
        assert delta == 0
    else:
        assert abs(objective(t, after_table) - before - delta) <= 1e-9 * max(1.0, abs(before))


def test_compute_loads() -> None:
    loads = compute_loads(range(3), [[0, 1], [1, 2]], [0, 2], [100, 50], [10, 4], [7, 1])
    assert loads[0] == [1, 1, 100, 10, 7 + 10]
    assert loads[1] == [2, 0, 150, 14, 0]
    assert loads[2] == [1, 1, 50, 4, 1 + 4]


def test_check_assignment_names_each_broken_rule() -> None:
    brokers = [Broker(0, "a", 100, 1.0, 1.0), Broker(1, "b", 100, 1.0, 1.0),
               Broker(2, "a", 100, 1.0, 1.0), Broker(3, "b", 50, 1.0, 1.0)]
    v = check_assignment(
        brokers, ["t"] * 5, [0, 1, 2, 3, 4],
        before=[[0, 1], [0, 1], [0, 1], [0, 1], [0, 1]],
        after=[[0, 0], [0, 2], [0, 1, 3], [9, 1], [3, 1]],
        sizes=[1, 1, 1, 1, 60], removed={3})
    kinds = {(x.constraint, x.subject) for x in v}
    assert ("distinct brokers", "t-0") in kinds
    assert ("rack awareness", "t-1") in kinds
    assert ("replication factor", "t-2") in kinds
    assert ("known brokers", "t-3") in kinds
    assert ("drain", "t-4") in kinds
    assert ("disk capacity", "broker 3") in kinds
    assert check_assignment(brokers, ["t"], [0], [[0, 1]], [[2, 3]], [10]) == []


def balancer(loads: dict[int, list[int]], capacity: int = 10_000) -> Balancer:
    brokers = [Broker(i, f"r{i % 3}", capacity, 1000.0, 1000.0) for i in range(6)]
    totals = [float(sum(v[m] for v in loads.values())) for m in range(5)]
    t = compute_targets(brokers, set(range(6)), totals)
    return Balancer(brokers, loads, t, dest_ids=set(range(6)), removed=set())


def test_driver_keeps_racks_distinct_and_respects_capacity() -> None:
    # broker 0 (rack r0) is heavy; 1 is r1, 3 is r0, 4 is r1, 2/5 are r2
    loads = {0: [10, 5, 5000, 0, 0], 1: [2, 1, 1000, 0, 0], 2: [2, 1, 1000, 0, 0],
             3: [2, 1, 1000, 0, 0], 4: [2, 1, 1000, 0, 0], 5: [2, 1, 1000, 0, 0]}
    bal = balancer(loads)
    c = Candidate(pid=1, pos=1, src=0, mandatory=False, dests=(3, 4, 5), priority=0.0,
                  replicas=(1, 0), leader=1, size=400, bin=0, bout=0)
    assert bal.try_replica_move(c)
    # 3 shares rack r0 with... nobody else here (1 is r1), 4 shares r1 with broker 1: skipped
    assert bal.changed[1][0][0] == 1 and bal.changed[1][0][1] in (3, 5)
    assert bal.loads[0][DISK] == 4600 and bal.loads[0][REPLICAS] == 9
    full = balancer({b: list(v) for b, v in loads.items()}, capacity=1200)
    c2 = Candidate(pid=2, pos=0, src=0, mandatory=False, dests=(2, 5), priority=0.0,
                   replicas=(0, 1), leader=0, size=400, bin=0, bout=0)
    assert not full.try_replica_move(c2)  # no room within capacity on 2 or 5


def test_driver_moves_leadership_to_an_underloaded_replica() -> None:
    loads = {0: [3, 6, 0, 0, 0], 1: [3, 0, 0, 0, 0], 2: [3, 0, 0, 0, 0],
             3: [3, 0, 0, 0, 0], 4: [3, 0, 0, 0, 0], 5: [3, 0, 0, 0, 0]}
    bal = balancer(loads)
    c = Candidate(pid=7, pos=0, src=0, mandatory=False, dests=(2,), priority=-1.0,
                  replicas=(0, 1, 2), leader=0, size=0, bin=0, bout=0)
    assert bal.run_round([c], leaders=True) == 1
    assert bal.changed[7] == ((2, 0, 1), 2)
    assert bal.loads[0][LEADERS] == 5 and bal.loads[2][LEADERS] == 1
