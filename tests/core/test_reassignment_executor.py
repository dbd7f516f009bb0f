"""The reassignment executor over the ClusterAdmin port, against the embedded cluster."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from controller_core import errors
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.errors import ApiResult, KafkaApiError
from controller_core.metadata import partition_change as pc
from controller_core.model import TopicPartition
from controller_core.orchestration.reassignment import (
    ExecutorState,
    Limits,
    Phase,
    ReassignmentExecutor,
    ReassignmentPlan,
    dry_run,
    validate_plan,
)
from tests.helpers import PassThrough, cluster, drive, tp

FOLLOWER = "follower.replication.throttled.replicas"
LEADER = "leader.replication.throttled.replicas"
RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


class CountingAdmin(PassThrough):
    """The embedded cluster, counting how often each partition was told to move, and to
    cancel its move."""

    def __init__(self, c: EmbeddedCluster) -> None:
        self.c = c
        self.starts: Counter[TopicPartition] = Counter()
        self.cancels: Counter[TopicPartition] = Counter()
        self.sent: list[dict[TopicPartition, tuple[int, ...] | None]] = []  # every request

    def alter_partition_reassignments(
            self, changes: Mapping[TopicPartition, Sequence[int] | None]
    ) -> dict[TopicPartition, ApiResult]:
        self.sent.append({t: None if r is None else tuple(r) for t, r in changes.items()})
        for t, target in changes.items():
            if target is not None:
                self.starts[t] += 1
            else:
                self.cancels[t] += 1
        return self.c.alter_partition_reassignments(changes)


def spread_plan(c: EmbeddedCluster, limits: Limits, **kw: bool) -> ReassignmentPlan:
    """Move every partition of `orders` from brokers 0-2 onto 3-5, keeping its shape."""
    moves = [(d.tp, [r + 3 for r in d.replicas]) for d in c.describe_partitions()]
    plan, problems = ReassignmentPlan.from_moves(moves, limits=limits, **kw)
    assert not problems
    return plan


def throttles(c: EmbeddedCluster) -> dict[tuple[str, str], dict[str, str]]:
    resources = [("BROKER", str(b)) for b in range(6)] + [("TOPIC", "orders")]
    return {r: v for r, v in c.describe_configs(resources).items() if v}


def test_runs_within_the_concurrency_limits_and_cleans_up(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    ex = ReassignmentExecutor(c, spread_plan(c, Limits(2_000_000, 3, 2)))
    assert ex.start() == []
    peak = 0
    while True:
        p = ex.step()
        peak = max(peak, p.moving)
        assert p.moving <= 3
        per_broker = Counter(b for t in ex.moving for b in ex._touched(t))
        assert all(n <= 2 for n in per_broker.values()), per_broker
        if ex.moving:  # throttles sit on exactly the replicas that move
            cfg = c.describe_configs([("TOPIC", "orders")])[("TOPIC", "orders")]
            want = {f"{t.partition}:{r}" for t in ex.moving for r in ex.moving[t]}
            assert set(cfg[FOLLOWER].split(",")) == want
        if p.phase.terminal:
            break
        c.advance(1)
    assert p.phase == Phase.COMPLETED and p.done == 6 and peak >= 2
    assert p.bytes_moved == p.bytes_total == 6 * 3 * 10_000_000
    for d in c.describe_partitions():
        assert set(d.replicas) <= {3, 4, 5} and not d.adding
    assert throttles(c) == {}


def test_throttles_placed_by_others_are_left_alone(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    c.incremental_alter_configs({("BROKER", "0"): {RATE_KEYS[0]: "777"},
                                 ("TOPIC", "orders"): {LEADER: "5:1"}})
    ex = ReassignmentExecutor(c, spread_plan(c, Limits(5_000_000, 6)))
    ex.start()
    ex.step()  # the moves start, throttled
    assert c.describe_configs([("BROKER", "0")])[("BROKER", "0")][RATE_KEYS[0]] == "5000000"
    drive(c, ex)
    assert throttles(c) == {("BROKER", "0"): {RATE_KEYS[0]: "777"},
                            ("TOPIC", "orders"): {LEADER: "5:1"}}


def test_cancel_rolls_back_in_flight_and_keeps_finished(tmp_path: Path) -> None:
    c = cluster(tmp_path, topics=[{
        "name": "orders", "partitions": 4, "replicationFactor": 3,
        "sizeBytesPerPartition": 10_000_000, "assignment": [[0, 1, 2]] * 4}])
    original = {d.tp: set(d.replicas) for d in c.describe_partitions()}
    ex = ReassignmentExecutor(c, spread_plan(c, Limits(None, 1)))
    ex.start()
    while len(ex.done) < 1:
        ex.step()
        c.advance(1)
    ex.step()
    assert len(ex.moving) == 1
    in_flight = next(iter(ex.moving))
    ex.cancel()
    p = ex.step()
    assert p.phase == Phase.CANCELLED
    after = {d.tp: d for d in c.describe_partitions()}
    assert set(after[in_flight].replicas) == original[in_flight] and not after[in_flight].adding
    for t in ex.done:
        assert set(after[t].replicas) == {3, 4, 5}
    assert p.cancelled == 4 - len(ex.done) and not c.list_partition_reassignments()
    assert throttles(c) == {}


def test_dry_run_reports_and_moves_nothing(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    plan = spread_plan(c, Limits(1_000_000, 10), elect_preferred_leaders=True)
    r = dry_run(c, plan)
    assert r.problems == () and r.partitions_moving == 6
    assert r.replica_moves == 18 and r.replicas_removed == 18 and r.leader_moves == 6
    assert r.bytes_to_move == 18 * 10_000_000
    assert r.estimated_seconds == pytest.approx(6 * 10_000_000 / 1_000_000)
    assert not c.list_partition_reassignments()
    assert dry_run(c, spread_plan(c, Limits(None))).estimated_seconds is None


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    plan, dup = ReassignmentPlan.from_moves([
        (tp("orders", 0), [3, 4, 5]), (tp("orders", 0), [3, 4]), (tp("orders", 1), [3, 9]),
        (tp("orders", 77), [3]), (tp("ghost", 0), [1]), (tp("orders", 2), [])])
    assert [p.error for p in dup] == [errors.INVALID_REQUEST]
    problems = {p.tp: p for p in validate_plan(c, plan)}
    assert problems[tp("orders", 1)].error == errors.INVALID_REPLICA_ASSIGNMENT
    assert "9" in problems[tp("orders", 1)].message
    assert problems[tp("orders", 77)].error == errors.UNKNOWN_TOPIC_OR_PARTITION
    assert problems[tp("ghost", 0)].error == errors.UNKNOWN_TOPIC_OR_PARTITION
    assert problems[tp("orders", 2)].error == errors.INVALID_REPLICA_ASSIGNMENT
    ex = ReassignmentExecutor(c, plan)
    assert len(ex.start()) == 4
    assert ex.state.phase == Phase.PENDING and not c.list_partition_reassignments()


def test_overlapping_plan_is_refused_unless_additional(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    first = ReassignmentExecutor(c, spread_plan(c, Limits(None, 6)))
    first.start()
    first.step()
    other, _ = ReassignmentPlan.from_moves([(tp("orders", 0), [5, 4, 3])])
    problems = ReassignmentExecutor(c, other).start()
    assert [p.error for p in problems] == [errors.REASSIGNMENT_IN_PROGRESS]
    assert "additional" in problems[0].message
    extra, _ = ReassignmentPlan.from_moves([(tp("orders", 0), [5, 4, 3])], additional=True)
    assert ReassignmentExecutor(c, extra).start() == []


def test_a_move_retargeted_by_another_tool_is_not_fought(tmp_path: Path) -> None:
    """Another tool re-targets orders-0 ([0,1,2] -> [3,4,5]) to [0,1,5] mid-move. The
    executor fails that partition and leaves the other tool's move exactly as Kafka 4.4 made
    it — here stranded (differential scenario retarget: nothing added, so the stale adding
    [3,4,5] stays while 3 and 4 are removing too) — sending it neither its own target nor a
    cancel; the rest of the plan completes."""
    c = cluster(tmp_path)
    admin = CountingAdmin(c)
    ex = ReassignmentExecutor(admin, spread_plan(c, Limits(None, 6)))  # type: ignore[arg-type]
    ex.start()
    ex.step()
    c.alter_partition_reassignments({tp("orders", 0): [0, 1, 5]})  # someone else
    p = drive(c, ex)
    assert p.phase == Phase.FAILED and (p.failed, p.done) == (1, 5)
    assert "re-targeted to [0, 1, 5] by another tool" in ex.state.failed["orders-0"]
    left = c.list_partition_reassignments()
    assert set(left) == {tp("orders", 0)}
    assert (left[tp("orders", 0)].replicas, left[tp("orders", 0)].adding,
            left[tp("orders", 0)].removing) == ((0, 1, 5, 2, 3, 4), (3, 4, 5), (2, 3, 4))
    assert admin.starts[tp("orders", 0)] == 1 and admin.cancels[tp("orders", 0)] == 0


@pytest.mark.parametrize(("earlier", "target", "stranded"), [
    # nothing added: the adding 4 and 5 would stay adding while removing, for ever
    ((3, 4, 5), (3, 1, 2), ((3, 1, 2, 0, 4, 5), (3, 4, 5), (0, 4, 5))),
    # nothing added or removed: the stale removing [0] would drop the 0 the target keeps
    ((3, 1, 2), (3, 1, 2, 0), ((3, 1, 2, 0), (3,), (0,))),
])
def test_a_target_kafka_would_strand_is_sent_after_a_cancel(
        tmp_path: Path, earlier: tuple[int, ...], target: tuple[int, ...],
        stranded: tuple[tuple[int, ...], ...]) -> None:
    """Kafka 4.4 computes a re-target against the current replica list and sets adding and
    removing only when non-empty (differential scenarios retarget and retarget-regrow), so
    some new targets strand a move in flight: it never completes, or completes elsewhere.
    The executor taking over such a move (an additional plan) cancels it first — in the
    same pass, one request before the target — so the target starts from the replicas the
    partition really holds, and the move completes on it. ``stranded`` is what Kafka makes
    of the target sent directly (R, adding, removing)."""
    c = cluster(tmp_path)
    t0 = tp("orders", 0)
    assert c.alter_partition_reassignments({t0: list(earlier)})[t0].ok  # an earlier run
    c.advance(2)
    o = c.list_partition_reassignments()[t0]
    assert pc.would_strand(o.replicas, o.adding, o.removing, target)
    plan, _ = ReassignmentPlan.from_moves([(t0, target)], limits=Limits(None, 1),
                                          additional=True)
    admin = CountingAdmin(c)
    ex = ReassignmentExecutor(admin, plan)  # type: ignore[arg-type]
    assert ex.start() == [] and ex.retarget == [t0]
    ex.step()
    assert admin.sent == [{t0: None}, {t0: target}]
    moving = c.list_partition_reassignments()[t0]
    assert moving.target == target and not set(moving.adding) & set(moving.removing)
    assert (moving.replicas, moving.adding, moving.removing) != stranded
    p = drive(c, ex, limit=300)
    assert p.phase is Phase.COMPLETED and p.done == 1 and p.failed == 0
    assert c.image.partition(t0).replicas == target  # type: ignore[union-attr]
    assert not c.list_partition_reassignments()
    # What the cancel avoided: the same target sent straight to the earlier move.
    again = cluster(tmp_path / "direct")
    assert again.alter_partition_reassignments({t0: list(earlier)})[t0].ok
    again.advance(2)
    assert again.alter_partition_reassignments({t0: list(target)})[t0].ok
    o = again.list_partition_reassignments()[t0]
    assert (o.replicas, o.adding, o.removing) == stranded


def test_limits_change_mid_flight_take_effect_at_once(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    ex = ReassignmentExecutor(c, spread_plan(c, Limits(1_000_000, 1)))
    ex.start()
    assert ex.step().moving == 1
    ex.set_limits(Limits(3_000_000, 4))
    cfg = c.describe_configs([("BROKER", "3")])[("BROKER", "3")]
    assert cfg["follower.replication.throttled.rate"] == "3000000"
    assert ex.step().moving == 4
    ex.set_limits(Limits(None, 4))
    assert c.describe_configs([("BROKER", "3")])[("BROKER", "3")] == {}
    assert drive(c, ex).phase == Phase.COMPLETED
    assert throttles(c) == {}


def test_pause_finishes_the_batch_and_starts_nothing(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    ex = ReassignmentExecutor(c, spread_plan(c, Limits(None, 2)))
    ex.start()
    ex.step()
    ex.set_paused(True)
    for _ in range(40):
        c.advance(1)
        p = ex.step()
    assert p.phase == Phase.PAUSED and p.done == 2 and p.moving == 0 and p.pending == 4
    ex.set_paused(False)
    assert drive(c, ex).phase == Phase.COMPLETED


def test_resume_after_restart_finishes_once(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    admin = CountingAdmin(c)
    plan = spread_plan(c, Limits(2_000_000, 2))
    ex = ReassignmentExecutor(admin, plan)  # type: ignore[arg-type]
    ex.start()
    for _ in range(12):
        ex.step()
        c.advance(1)
    saved = ex.state.model_dump_json()
    c.close()  # the operator restarts
    c2 = EmbeddedCluster.open(tmp_path, c.spec, fsync=False)
    admin.c = c2
    ex2 = ReassignmentExecutor(admin, plan, ExecutorState.model_validate_json(saved))  # type: ignore[arg-type]
    assert ex2.start() == []
    p = drive(c2, ex2)
    assert p.phase == Phase.COMPLETED and p.done == 6
    assert set(admin.starts.values()) == {1}
    assert throttles(c2) == {}


def test_preferred_leaders_elected_at_the_end(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    moves = [(d.tp, [d.replicas[1] + 3, d.replicas[0], d.replicas[2]])
             for d in c.describe_partitions()]
    plan, _ = ReassignmentPlan.from_moves(moves, elect_preferred_leaders=True)
    ex = ReassignmentExecutor(c, plan)
    ex.start()
    drive(c, ex)
    assert ex.state.elected is not None
    for d in c.describe_partitions():
        assert d.leader == d.replicas[0]


def test_controller_timeouts_propagate_and_the_next_step_goes_on(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    ex = ReassignmentExecutor(c, spread_plan(c, Limits(None, 6)))
    ex.start()
    ex.step()
    c.controller_available = False
    with pytest.raises(KafkaApiError):
        ex.step()
    c.controller_available = True
    assert drive(c, ex).phase == Phase.COMPLETED


def test_eta_comes_from_the_observed_rate(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    ex = ReassignmentExecutor(c, spread_plan(c, Limits(None, 6)))
    ex.start()
    ex.step()
    for _ in range(4):
        c.advance(1)
        p = ex.step()
    assert p.rate_bytes_per_second == pytest.approx(3_000_000, rel=0.1)
    assert p.eta_seconds is not None and 54 <= p.eta_seconds <= 58  # 168 MB left at 3 MB/s
    assert 0 < p.percent < 100


def test_fail_removes_throttles(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    ex = ReassignmentExecutor(c, spread_plan(c, Limits(1_000_000, 2)))
    ex.start()
    ex.step()
    assert throttles(c)
    ex.fail("the resource was deleted")
    assert throttles(c) == {} and ex.state.phase == Phase.FAILED


def test_moves_that_finish_while_the_executor_is_down_count_as_copied(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    plan = spread_plan(c, Limits(None, 6))
    ex = ReassignmentExecutor(c, plan)
    ex.start()
    ex.step()
    saved = ex.state.model_dump_json()
    c.advance(120)  # every move completes while no executor runs
    assert not c.list_partition_reassignments()
    resumed = ReassignmentExecutor(c, plan, ExecutorState.model_validate_json(saved))
    resumed.start()
    p = resumed.step()
    assert p.phase == Phase.COMPLETED and p.done == 6
    assert resumed.state.bytes_done == resumed.state.bytes_total == 18 * 10_000_000


def test_progress_holds_while_an_adding_broker_is_down(tmp_path: Path) -> None:
    """A dead broker answers no DescribeLogDirs, but its partial copy survives (Kafka goes on
    from the log's end when it is back): bytes moved keep their last figure instead of
    falling to zero, and the rate never turns negative; back up, the move completes."""
    c = cluster(tmp_path)
    moves = [(tp("orders", 0), [3, 1, 2])]
    plan, _ = ReassignmentPlan.from_moves(moves, limits=Limits(1_000_000, 1))
    ex = ReassignmentExecutor(c, plan)
    ex.start()
    ex.step()
    for _ in range(3):
        c.advance(1)
        before = ex.step()
    assert before.bytes_moved > 0
    c.fail_broker(3)
    for _ in range(3):
        c.advance(1)
        p = ex.step()
        assert p.bytes_moved == before.bytes_moved, p
        assert p.rate_bytes_per_second is None or p.rate_bytes_per_second >= 0, p
    c.restore_broker(3)
    for _ in range(60):
        c.advance(1)
        p = ex.step()
        if p.phase is Phase.COMPLETED:
            break
    assert p.phase is Phase.COMPLETED and p.bytes_moved == p.bytes_total
