"""A plan is checked against the cluster before a replica moves, as kafka-reassign-partitions
checks it: a broker that DescribeCluster would not list (fenced) is refused."""

from __future__ import annotations

from pathlib import Path

from controller_core import errors
from controller_core.orchestration.reassignment import ReassignmentPlan, validate_plan
from tests.helpers import cluster, tp


def test_a_fenced_broker_is_refused_unless_a_move_already_heads_there(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    c.fail_broker(4)
    c.advance(10)  # broker.session.timeout.ms: 4 is fenced
    plan, _ = ReassignmentPlan.from_moves([(tp("orders", 0), [4, 1, 2]),
                                           (tp("orders", 1), [3, 2, 0])])
    problems = validate_plan(c, plan)
    assert [(p.tp, p.error) for p in problems] == [
        (tp("orders", 0), errors.INVALID_REPLICA_ASSIGNMENT)]
    assert problems[0].message == (
        "orders-0: broker(s) [4] are fenced (offline); a replica there cannot catch up — bring "
        "them back or choose from the live brokers [0, 1, 2, 3, 5]")
    # A move that started before 4 went down is this plan's own: resumed, not refused.
    c.restore_broker(4)
    assert c.alter_partition_reassignments({tp("orders", 0): [4, 1, 2]})[tp("orders", 0)].ok
    c.fail_broker(4)
    c.advance(10)
    assert validate_plan(c, plan) == []
