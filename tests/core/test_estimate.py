"""The duration estimate of a reassignment (controller_core.orchestration.estimate) against
hand-worked cases and against the embedded cluster actually running the plan.

The throttle model is Kafka's ReplicationQuotaManager: ``*.replication.throttled.rate`` is a
per-broker budget shared by the throttled replicas fetching into (follower) or out of
(leader) that broker.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from controller_core.orchestration.estimate import estimate_seconds, move_cost
from controller_core.orchestration.reassignment import (
    Limits,
    ReassignmentExecutor,
    ReassignmentPlan,
    dry_run,
)
from tests.helpers import cluster, tp

MB = 1_000_000


def test_batches_and_shared_throttles_by_hand() -> None:
    # four 10 MB moves from broker i onto broker 10+i: independent brokers
    apart = [move_cost(i, [i], [10 + i], 10 * MB, (i,)) for i in range(4)]
    assert estimate_seconds(apart, throttle=MB, max_concurrent_moves=4) == pytest.approx(10)
    assert estimate_seconds(apart, throttle=MB, max_concurrent_moves=2) == pytest.approx(20)
    assert estimate_seconds(apart, throttle=MB, max_concurrent_moves=1) == pytest.approx(40)
    # all from broker 0 onto broker 2: the leader's and the follower's budget are shared
    shared = [move_cost(0, [0, 1], [2, 1], 10 * MB, (i,)) for i in range(4)]
    assert estimate_seconds(shared, throttle=MB, max_concurrent_moves=4) == pytest.approx(40)
    # the per-broker limit serialises moves that touch one broker
    assert estimate_seconds(apart, throttle=MB, max_concurrent_moves=4,
                            max_concurrent_moves_per_broker=1) == pytest.approx(10)
    assert estimate_seconds(shared, throttle=MB, max_concurrent_moves=4,
                            max_concurrent_moves_per_broker=1) == pytest.approx(40)
    # unthrottled: the receiving broker's bandwidth bounds it; nothing bounds: no estimate
    assert estimate_seconds(apart, throttle=None, max_concurrent_moves=4,
                            bandwidth=lambda b: MB / 2) == pytest.approx(20)
    assert estimate_seconds(apart, throttle=None, max_concurrent_moves=4) is None
    # a freed slot is filled at the executor's next pass
    uneven = [move_cost(0, [0], [5], int(2.5 * MB), (0,)), move_cost(1, [1], [6], 5 * MB, (1,))]
    assert estimate_seconds(uneven, throttle=MB, max_concurrent_moves=1,
                            poll_seconds=1.0) == pytest.approx(8.0)  # 2.5 -> 3, then 5


@pytest.mark.parametrize(("limits", "sizes"), [
    (Limits(500_000, 2, 1), [4, 9, 2, 7, 5, 3, 8, 6]),
    (Limits(700_000, 3, None), [10, 1, 1, 1, 10, 1, 1, 1]),
    (Limits(2_000_000, 1, None), [3, 3, 3, 3, 3, 3, 3, 3]),  # bandwidth-bound (1 MB/s)
])
def test_dry_run_estimate_matches_the_embedded_run(
        tmp_path: Path, limits: Limits, sizes: list[int]) -> None:
    """Before, the dry run divided each broker's bytes by the throttle as if every move ran at
    once: 2:43 for a run of 4:53. Now it is within 10% of the simulated run."""
    c = cluster(tmp_path, topics=[
        {"name": f"t{i}", "partitions": 1, "replicationFactor": 2,
         "sizeBytesPerPartition": s * MB, "assignment": [[i % 3, (i + 1) % 3]]}
        for i, s in enumerate(sizes)])
    moves = [(tp(f"t{i}", 0), [3 + i % 3, (i + 1) % 3]) for i in range(len(sizes))]
    plan, problems = ReassignmentPlan.from_moves(moves, limits=limits)
    assert not problems
    bandwidth = {b.id: c.spec.replication_bytes_per_second for b in c.spec.brokers}
    report = dry_run(c, plan, bandwidth=bandwidth.__getitem__, poll_seconds=1.0)
    assert report.estimated_seconds is not None
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    p = ex.step()
    while not p.phase.terminal:
        c.advance(1.0)
        p = ex.step()
    assert p.phase.value == "Completed"
    assert ex.state.finished_ms is not None and ex.state.started_ms is not None
    actual = (ex.state.finished_ms - ex.state.started_ms) / 1000
    assert report.estimated_seconds == pytest.approx(actual, rel=0.10)
    # the old figure: the busiest receiving broker's bytes / the throttle
    old = max(report.per_broker_in_bytes.values()) / (limits.throttle_bytes_per_second or 1)
    assert abs(report.estimated_seconds - actual) < abs(old - actual)


def test_the_plan_report_uses_the_same_estimate() -> None:
    """Before, a plan said 0:12 for a run of 6:44: it ignored maxConcurrentMoves."""
    from controller_core.planning.render import RenderedResource
    from controller_core.planning.report import estimate_seconds as plan_estimate
    from controller_core.planning.result import PartitionMove

    moves = tuple(PartitionMove("t", i, (i, 10), (20 + i, 10), 10 * MB, i) for i in range(6))

    def resource(concurrent: int) -> RenderedResource:
        return RenderedResource(1, "r", "001-r.yaml", "", moves, False, concurrent)

    costs = [move_cost(i, [i, 10], [20 + i, 10], 10 * MB, ("t", i)) for i in range(6)]
    for concurrent in (1, 2, 6):
        assert plan_estimate([resource(concurrent)], MB) == pytest.approx(
            estimate_seconds(costs, throttle=MB, max_concurrent_moves=concurrent))
    assert plan_estimate([resource(1)], MB) == pytest.approx(60)
    assert plan_estimate([resource(6)], MB) == pytest.approx(10)
    assert plan_estimate([resource(2), resource(2)], MB) == pytest.approx(60)  # in sequence


def test_a_move_that_copies_nothing_frees_its_slot_at_the_next_pass(tmp_path: Path) -> None:
    """A reorder (or a shrink) completes in the executor's pass that starts it; the next move
    starts at the next pass. Before, with maxConcurrentMoves 1 the dry run said "never"
    (infinite) for such a plan; now it matches the embedded run."""
    reorder = move_cost(0, [0, 1], [1, 0], 5 * MB, ("a", 0))
    copy = move_cost(0, [0], [3], int(2.5 * MB), ("b", 0))
    assert estimate_seconds([reorder, copy], throttle=MB, max_concurrent_moves=1) == \
        pytest.approx(2.5)
    assert estimate_seconds([reorder, copy], throttle=MB, max_concurrent_moves=1,
                            poll_seconds=1.0) == pytest.approx(3.5)
    c = cluster(tmp_path, topics=[
        {"name": "a", "partitions": 1, "replicationFactor": 2, "sizeBytesPerPartition": 5 * MB,
         "assignment": [[0, 1]]},
        {"name": "b", "partitions": 1, "replicationFactor": 1, "sizeBytesPerPartition": 3 * MB,
         "assignment": [[2]]}])
    plan, _ = ReassignmentPlan.from_moves([(tp("a", 0), [1, 0]), (tp("b", 0), [4])],
                                          limits=Limits(MB, 1))
    report = dry_run(c, plan, poll_seconds=1.0)
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    p = ex.step()
    while not p.phase.terminal:
        c.advance(1.0)
        p = ex.step()
    assert ex.state.finished_ms is not None and ex.state.started_ms is not None
    actual = (ex.state.finished_ms - ex.state.started_ms) / 1000
    assert report.estimated_seconds == pytest.approx(actual, rel=0.10)


def test_moves_start_smallest_copy_first_counting_every_adding_replica() -> None:
    """The executor starts the moves that copy the fewest bytes first (KIP-236 batches):
    a partition copied to two new replicas weighs twice its size."""
    two_copies = move_cost(0, [0], [3, 4], int(4.5 * MB), ("a", 0))  # 9 MB at 0.5 MB/s each
    one_copy = move_cost(1, [1], [5], int(5.5 * MB), ("b", 0))  # 5.5 MB
    # one_copy first: 5.5 s, rounded up to the next pass at 6, then 9 s
    assert estimate_seconds([two_copies, one_copy], throttle=MB, max_concurrent_moves=1,
                            poll_seconds=1.0) == pytest.approx(15.0)
    assert estimate_seconds([one_copy, two_copies], throttle=MB,
                            max_concurrent_moves=1) == pytest.approx(14.5)  # no pass rounding


def test_a_freed_slot_takes_one_more_move_not_more_than_the_limit() -> None:
    """maxConcurrentMoves bounds the moves in flight at every pass, not only the first."""
    sizes = [1, 3, 3, 3]
    moves = [move_cost(i, [i], [10 + i], s * MB, (i,)) for i, s in enumerate(sizes)]
    # 0 s: 1 MB and 3 MB; 1 s: the next 3 MB; 3 s: the last 3 MB, done at 6 s
    assert estimate_seconds(moves, throttle=MB, max_concurrent_moves=2) == pytest.approx(6.0)


def test_a_move_blocked_by_the_per_broker_limit_does_not_block_the_moves_behind_it() -> None:
    first = move_cost(0, [0], [3], 1 * MB, ("a", 0))
    blocked = move_cost(0, [0], [4], 2 * MB, ("b", 0))  # shares broker 0 with `first`
    free = move_cost(1, [1], [5], 3 * MB, ("c", 0))
    # 0 s: first and free; 1 s: blocked, until 3 s; free ends at 3 s as well
    assert estimate_seconds([first, blocked, free], throttle=None, max_concurrent_moves=2,
                            max_concurrent_moves_per_broker=1,
                            bandwidth=lambda b: MB) == pytest.approx(3.0)


def test_the_per_broker_limit_counts_every_move_touching_the_broker() -> None:
    """With at most two moves per broker, three moves out of broker 0 run two, then one; a
    broker is touched by a move when it receives or gives up a replica, not when it keeps
    one (ReassignPartitionsCommand's moving replicas)."""
    out_of_0 = [move_cost(0, [0], [3 + i], MB, (i,)) for i in range(3)]
    assert estimate_seconds(out_of_0, throttle=None, max_concurrent_moves=3,
                            max_concurrent_moves_per_broker=2,
                            bandwidth=lambda b: MB) == pytest.approx(2.0)
    keeps_0 = [move_cost(0, [0, 1 + 2 * i], [0, 2 + 2 * i], MB, (i,)) for i in range(2)]
    assert estimate_seconds(keeps_0, throttle=None, max_concurrent_moves=2,
                            max_concurrent_moves_per_broker=1,
                            bandwidth=lambda b: MB) == pytest.approx(1.0)


def test_the_estimate_looks_past_blocked_moves_as_far_as_the_executor() -> None:
    """The executor looks at most max(100, 20 x free slots) blocked candidates per pass
    (reassignment.py's scan limit); the estimate looks exactly as far."""
    chain = [move_cost(0, [0], [1], MB, ("a", i)) for i in range(101)]  # all on brokers 0, 1
    big = move_cost(2, [2], [3], 200 * MB, ("b", 0))  # independent, sorted last
    kw = {"throttle": None, "bandwidth": lambda b: MB, "max_concurrent_moves_per_broker": 1}
    # one slot: no scanning at all, `big` runs after the chain
    assert estimate_seconds([*chain, big], max_concurrent_moves=1,
                            **kw) == pytest.approx(301.0)  # type: ignore[arg-type]
    # two slots: the first pass stops after 100 blocked candidates, before `big`; the
    # second pass (at 1 s) meets 99 blocked ones and then `big`
    assert estimate_seconds([*chain, big], max_concurrent_moves=2,
                            **kw) == pytest.approx(201.0)  # type: ignore[arg-type]
    # ten free slots: the executor looks 200 deep, `big` starts at once
    assert estimate_seconds([*chain, big], max_concurrent_moves=10,
                            **kw) == pytest.approx(200.0)  # type: ignore[arg-type]


def test_a_one_byte_copy_takes_time_and_an_empty_one_none() -> None:
    one = move_cost(0, [0], [1], 1, ("a", 0))
    assert estimate_seconds([one], throttle=1, max_concurrent_moves=1) == pytest.approx(1.0)
    empty = move_cost(0, [0], [1], 0, ("a", 0))
    assert estimate_seconds([empty], throttle=1, max_concurrent_moves=1) == 0.0


def test_copies_into_one_broker_share_its_follower_rate_and_its_bandwidth() -> None:
    """ReplicationQuotaManager: the follower throttle is one budget per receiving broker,
    shared by every throttled copy into it, from whichever leaders; so is its bandwidth."""
    into_2 = [move_cost(0, [0], [2], MB, ("a", 0)), move_cost(1, [1], [2], MB, ("b", 0))]
    assert estimate_seconds(into_2, throttle=MB, max_concurrent_moves=2) == pytest.approx(2.0)
    assert estimate_seconds(into_2, throttle=None, max_concurrent_moves=2,
                            bandwidth=lambda b: MB) == pytest.approx(2.0)


def test_a_copy_ends_when_its_bytes_are_copied_not_a_second_early() -> None:
    short = move_cost(0, [0], [3], MB, ("a", 0))
    longer = move_cost(1, [1], [4], int(1.5 * MB), ("b", 0))  # 0.5 MB left when `short` ends
    assert estimate_seconds([short, longer], throttle=MB,
                            max_concurrent_moves=2) == pytest.approx(1.5)


def test_a_freed_slot_waits_for_the_next_pass_of_any_poll_interval() -> None:
    uneven = [move_cost(0, [0], [5], int(2.5 * MB), (0,)), move_cost(1, [1], [6], 5 * MB, (1,))]
    # 2.5 s -> the pass at 4 s (every 2 s), then 5 s
    assert estimate_seconds(uneven, throttle=MB, max_concurrent_moves=1,
                            poll_seconds=2.0) == pytest.approx(9.0)


def test_an_empty_partition_moved_and_a_reorder_leave_room_for_other_moves_in_their_pass() -> None:
    """Moving an empty partition copies nothing, like a reorder: its slot frees at the next
    pass; a second slot in the same pass starts the next move at once."""
    empty = move_cost(0, [0], [4], 0, ("a", 0))
    reorder = move_cost(0, [0, 1], [1, 0], 5 * MB, ("a", 1))
    copy = move_cost(0, [0], [3], int(2.5 * MB), ("b", 0))
    assert estimate_seconds([empty, copy], throttle=MB, max_concurrent_moves=1,
                            poll_seconds=1.0) == pytest.approx(3.5)
    assert estimate_seconds([reorder, copy], throttle=MB, max_concurrent_moves=2,
                            poll_seconds=1.0) == pytest.approx(2.5)


def test_copies_between_log_directories_take_their_own_rate_per_broker() -> None:
    """KIP-113: a replica copied into another directory of its broker runs at that broker's
    replica.alter.log.dirs.io.max.bytes.per.second, shared by its copies between directories,
    beside (not against) the replication throttles. Before, the estimate skipped them:
    "estimated duration 0:00" for a plan that only moves replicas between disks."""
    two_on_0 = [move_cost(0, [0, 1], [0, 1], 4 * MB, ("a", i), between=[0]) for i in range(2)]
    assert estimate_seconds(two_on_0, throttle=MB, max_concurrent_moves=2,
                            dir_throttle=MB / 2) == pytest.approx(16)  # 8 MB at 0.5 MB/s
    assert estimate_seconds(two_on_0, throttle=MB, max_concurrent_moves=1,
                            dir_throttle=MB / 2) == pytest.approx(16)  # one after the other
    # on two brokers: in parallel, each at its own rate
    apart = [move_cost(0, [0, 1], [0, 1], 4 * MB, ("a", 0), between=[0]),
             move_cost(1, [1, 2], [1, 2], 4 * MB, ("b", 0), between=[1])]
    assert estimate_seconds(apart, throttle=MB, max_concurrent_moves=2,
                            dir_throttle=MB / 2) == pytest.approx(8)
    # beside a network copy into the same broker: neither slows the other
    mixed = [move_cost(1, [1], [0], 3 * MB, ("a", 0)),
             move_cost(0, [0, 1], [0, 1], 4 * MB, ("b", 0), between=[0])]
    assert estimate_seconds(mixed, throttle=MB, max_concurrent_moves=2,
                            dir_throttle=MB / 2) == pytest.approx(8)
    # one move that adds a replica and copies another between directories ends with both
    both = [move_cost(1, [0, 1], [0, 2], 3 * MB, ("a", 0), between=[0])]
    assert estimate_seconds(both, throttle=MB, max_concurrent_moves=1,
                            dir_throttle=MB / 2) == pytest.approx(6)
    # the bandwidth bounds them too; nothing bounds them: at once
    assert estimate_seconds(two_on_0, throttle=None, max_concurrent_moves=2,
                            bandwidth=lambda b: MB) == pytest.approx(8)
    assert estimate_seconds(two_on_0, throttle=MB, max_concurrent_moves=2) == 0.0
    assert estimate_seconds(two_on_0, throttle=None, max_concurrent_moves=2,
                            dir_throttle=MB) == pytest.approx(8)


def test_the_executor_orders_by_every_copy_between_directories_included() -> None:
    """The executor starts the fewest bytes to copy first, the copies between directories
    counted (``move_bytes``): a 3 MB partition copied twice goes after a 5 MB one copied once."""
    twice = move_cost(0, [0, 1], [0, 2], 3 * MB, ("a", 0), between=[0])  # 6 MB
    once = move_cost(1, [1], [3], 5 * MB, ("b", 0))  # 5 MB
    # one at a time, with a pass every 10 s: once (5 s -> next pass at 10) then twice (3 s)
    assert estimate_seconds([twice, once], throttle=MB, max_concurrent_moves=1,
                            poll_seconds=10.0, dir_throttle=MB) == pytest.approx(13)


def test_the_plan_report_counts_the_copies_between_directories() -> None:
    from controller_core.planning.render import RenderedResource
    from controller_core.planning.report import estimate_seconds as plan_estimate
    from controller_core.planning.result import PartitionMove

    # remove-disks: two replicas of broker 0 leave /d1 for /d2, 4 MB each
    moves = tuple(PartitionMove("t", i, (0, 1), (0, 1), 4 * MB, 0, ("/d1", "/d"), ("/d2", "/d"))
                  for i in range(2))

    def resource(dir_throttle: int | None) -> RenderedResource:
        return RenderedResource(1, "r", "001-r.yaml", "", moves, False, 2, None, dir_throttle)

    assert plan_estimate([resource(None)], MB) == pytest.approx(8)  # the throttle caps them
    assert plan_estimate([resource(MB // 4)], MB) == pytest.approx(32)  # their own rate


def test_the_estimate_to_the_last_bit_on_a_mixed_plan() -> None:
    """The figures of 400 random moves (copies between directories, the per-broker limit,
    passes, bandwidth) exactly as the estimator gave them when it recounted every broker's
    copies each step: the counts now follow the copies as they start and end, the
    arithmetic of each step is unchanged, and so is the number (the report shows it)."""
    import random

    rng = random.Random(22)
    moves = []
    for i in range(400):
        orig = rng.sample(range(12), 3)
        tgt = list(orig)
        for _ in range(rng.randint(0, 2)):
            k, b = rng.randrange(3), rng.randrange(12)
            if b not in tgt:
                tgt[k] = b
        between = [tgt[1]] if i % 7 == 0 else []
        moves.append(move_cost(orig[0], orig, tgt, rng.randint(1, 10**9), ("t", i), between))
    assert estimate_seconds(moves, throttle=50e6, max_concurrent_moves=10) == 622.6815678305188
    assert estimate_seconds(moves, throttle=50e6, max_concurrent_moves=10,
                            max_concurrent_moves_per_broker=2, poll_seconds=1.0,
                            dir_throttle=20e6) == 768.69125672
    assert estimate_seconds(moves, throttle=None, max_concurrent_moves=5,
                            bandwidth=lambda b: 1e8 + 1e6 * b) == 324.11309854878056


def test_move_cost_is_the_set_definition() -> None:
    """move_cost builds its fields the fast way (a plan of 10^6 partitions makes 290,000):
    the same as the plain set computation, in target order, on random moves."""
    import random

    rng = random.Random(3)
    for _ in range(2000):
        original = rng.sample(range(9), rng.randint(1, 4))
        target = rng.sample(range(9), rng.randint(1, 4))
        between = rng.sample(range(9), rng.randint(0, 2))
        size = rng.randint(0, 99)
        m = move_cost(original[0], original, target, size, ("t", 1), between)
        assert m.adding == tuple(r for r in target if r not in set(original))
        assert m.touched == frozenset(set(target) ^ set(original))
        assert isinstance(m.touched, frozenset) and m.between == tuple(between)
        assert m.copies == len(m.adding) + len(between)
        assert (m.bytes_per_replica, m.leader, m.order) == (size, original[0], ("t", 1))
