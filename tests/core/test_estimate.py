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
