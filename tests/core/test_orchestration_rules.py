"""The orchestration rules a user sees, each pinned against what Kafka and its tools do.

Elections follow ``LeaderElectionCommand`` (succeeded / "valid replica already elected" /
failed) over ``ReplicationControlManager.electLeaders``; voter changes follow KIP-853
(AddRaftVoter / RemoveRaftVoter, one voter at a time); the executor and its throttles follow
``ReassignPartitionsCommand``. Everything runs against the embedded cluster.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from controller_core import errors
from controller_core.admin import OngoingReassignment, PartitionDescription
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.errors import ApiResult, KafkaApiError
from controller_core.model import ElectionType, TopicPartition
from controller_core.orchestration import throttles
from controller_core.orchestration.election import (
    ElectionReport,
    leader_imbalance,
    run_election,
)
from controller_core.orchestration.reassignment import (
    FULL_CHECK_MS,
    METADATA_PROPAGATION_MS,
    ExecutorState,
    Limits,
    MoveDetail,
    Phase,
    ReassignmentExecutor,
    ReassignmentPlan,
    dry_run,
    validate_plan,
)
from controller_core.orchestration.voters import (
    VoterChangeWalker,
    WalkPhase,
    WalkProgress,
    voter_set_problems,
)
from controller_core.raft.describe import QuorumStatus
from tests.helpers import PassThrough, cluster, configs_in, drive, run_until, tp

TOPICS = [
    {"name": "orders", "partitions": 6, "replicationFactor": 3,
     "sizeBytesPerPartition": 1_000_000, "assignment": [[0, 1, 2], [1, 2, 0], [2, 0, 1]] * 2},
    {"name": "payments", "partitions": 2, "replicationFactor": 3,
     "sizeBytesPerPartition": 1_000_000, "assignment": [[2, 0, 1], [0, 1, 2]]},
]


def _preferred_2_led_elsewhere(tmp_path: Path) -> EmbeddedCluster:
    """Broker 2 fails and comes back in sync: orders-2, orders-5 and payments-0 (preferred
    replica 2) stay led by another replica until a preferred election."""
    c = cluster(tmp_path, topics=TOPICS)
    c.fail_broker(2)
    run_until(c, lambda: all(d.leader != 2 for d in c.describe_partitions()))
    c.restore_broker(2)
    run_until(c, lambda: all(2 in d.isr for d in c.describe_partitions()))
    return c


OFF_PREFERRED = {tp("orders", 2), tp("orders", 5), tp("payments", 0)}


# -- elections (LeaderElectionCommand over ReplicationControlManager.electLeaders) ----------------
def test_a_preferred_election_for_named_partitions_elects_only_those(tmp_path: Path) -> None:
    """LeaderElectionCommand --path-to-json-file: the request names the partitions; the answer
    has a row for each and only those, and the other off-preferred partitions keep their
    leader."""
    c = _preferred_2_led_elsewhere(tmp_path)
    report = run_election(c, ElectionType.PREFERRED, partitions=[tp("orders", 2)])
    assert report.election_type is ElectionType.PREFERRED and not report.attempted_all
    assert set(report.results) == {tp("orders", 2)} and report.elected == 1
    leaders = {d.tp: d.leader for d in c.describe_partitions()}
    assert leaders[tp("orders", 2)] == 2
    assert leaders[tp("orders", 5)] != 2 and leaders[tp("payments", 0)] != 2


def test_a_preferred_election_for_a_topic_elects_its_partitions_and_names_unknown_topics(
        tmp_path: Path) -> None:
    """LeaderElectionCommand --topic: every partition of the named topic, nothing of the
    others; a topic that does not exist is a failure of its own."""
    c = _preferred_2_led_elsewhere(tmp_path)
    report = run_election(c, ElectionType.PREFERRED, topics=["orders", "ghost", "orders"])
    assert report.election_type is ElectionType.PREFERRED
    assert set(report.results) == {tp("orders", i) for i in range(6)}
    assert report.elected == 2 and report.not_needed == 4
    assert report.unknown_topics == ("ghost",) and report.failed == 1
    leaders = {d.tp: d.leader for d in c.describe_partitions()}
    assert leaders[tp("orders", 2)] == leaders[tp("orders", 5)] == 2
    assert leaders[tp("payments", 0)] != 2


def test_a_preferred_election_of_everything_reports_only_what_it_elected(
        tmp_path: Path) -> None:
    """ElectLeaders with no partition set (--all-topic-partitions): ReplicationControlManager
    leaves ELECTION_NOT_NEEDED out of the answer, so only the elected partitions appear."""
    c = _preferred_2_led_elsewhere(tmp_path)
    report = run_election(c, ElectionType.PREFERRED)
    assert report.election_type is ElectionType.PREFERRED and report.attempted_all
    assert set(report.results) == OFF_PREFERRED and report.elected == 3
    assert all(d.leader == d.replicas[0] for d in c.describe_partitions())


def test_an_unclean_election_is_not_needed_where_a_leader_lives(tmp_path: Path) -> None:
    """An unclean election only elects where there is no leader (LeaderElectionCommand's
    --election-type unclean): with every partition led, each row says ELECTION_NOT_NEEDED."""
    c = _preferred_2_led_elsewhere(tmp_path)
    report = run_election(c, ElectionType.UNCLEAN, topics=["payments"])
    assert report.election_type is ElectionType.UNCLEAN
    assert {t: r.error for t, r in report.results.items()} == {
        tp("payments", 0): errors.ELECTION_NOT_NEEDED, tp("payments", 1):
        errors.ELECTION_NOT_NEEDED}
    assert report.failed == 0 and report.failures() == []


def test_election_failures_exclude_not_needed_and_are_sorted() -> None:
    """LeaderElectionCommand sorts rows into succeeded, "valid replica already elected"
    (ElectionNotNeededException) and failed; only the last make the command fail."""
    down = ApiResult(errors.PREFERRED_LEADER_NOT_AVAILABLE, "broker 2 is down")
    report = ElectionReport(ElectionType.PREFERRED, {
        tp("b", 1): down, tp("a", 3): down, tp("a", 0): ApiResult(),
        tp("a", 1): ApiResult(errors.ELECTION_NOT_NEEDED)}, ("ghost",))
    assert report.failures() == [(tp("a", 3), down), (tp("b", 1), down)]
    assert (report.elected, report.not_needed, report.failed) == (1, 1, 3)


def test_leader_imbalance_counts_partitions_off_their_preferred_leader(tmp_path: Path) -> None:
    """A partition is imbalanced when its leader is not its preferred (first) replica, as
    ReplicationControlManager's imbalanced-partition set; leaders are counted per broker."""
    c = _preferred_2_led_elsewhere(tmp_path)
    before = leader_imbalance(c)
    assert before.partitions == 8 and before.off_preferred == 3
    assert before.percent == pytest.approx(37.5)
    assert sum(before.per_broker.values()) == 8 and 2 not in before.per_broker
    orders = leader_imbalance(c, ["orders"])
    assert orders.partitions == 6 and orders.off_preferred == 2
    assert orders.per_broker == {b: n for b, n in orders.per_broker.items() if n} and \
        sum(orders.per_broker.values()) == 6
    run_election(c, ElectionType.PREFERRED)
    after = leader_imbalance(c)
    assert after.off_preferred == 0 and after.percent == 0.0
    assert after.per_broker == {0: 3, 1: 2, 2: 3}
    assert leader_imbalance(c, []).percent == 0.0  # no partition: nothing imbalanced


def test_a_partition_without_a_leader_is_imbalanced_and_counts_for_no_broker(
        tmp_path: Path) -> None:
    """With every replica of a partition down the leader is -1 (NO_LEADER): the partition
    is off its preferred leader, and no broker is counted as leading it."""
    c = cluster(tmp_path, topics=[{"name": "solo", "partitions": 1, "replicationFactor": 1,
                                   "sizeBytesPerPartition": 1000, "assignment": [[4]]}])
    c.fail_broker(4)
    run_until(c, lambda: next(iter(c.describe_partitions())).leader < 0)
    imbalance = leader_imbalance(c)
    assert imbalance.partitions == 1 and imbalance.off_preferred == 1
    assert imbalance.per_broker == {}


# -- voters (KIP-853 AddRaftVoter / RemoveRaftVoter) ------------------------------------------
def test_voter_set_problems_name_the_field_and_the_fix() -> None:
    """Each refusal names ``voters`` and what to change (the CR status shows it as is)."""
    known, live = {0, 1, 2, 3}, {0, 1, 2, 3}
    assert voter_set_problems([], known, live) == [
        "voters: the voter set is empty; name at least one node id"]
    assert voter_set_problems([0, 0, 1], known, live) == [
        "voters: [0, 0, 1] lists a node id twice"]
    assert voter_set_problems([0, 9], known, live) == [
        "voters: unknown node id(s) [9]; nodes are [0, 1, 2, 3] (a new controller must be "
        "running and fetching the metadata log first)"]
    assert voter_set_problems([0, 1, 2], known, live) == []


def test_a_new_voter_set_needs_a_live_majority_of_its_own() -> None:
    """Raft needs floor(n/2)+1 voters to elect a leader (KafkaRaftClient's majority): three
    voters with two live may be set; four voters with two live may not."""
    known = {0, 1, 2, 3, 4}
    assert voter_set_problems([0, 1, 2], known, {0, 1}) == []
    assert voter_set_problems([0, 1, 2, 3], known, {0, 1, 2}) == []
    assert voter_set_problems([0, 1, 2, 3], known, {0, 1}) == [
        "voters: only 2 of [0, 1, 2, 3] are live, fewer than the majority of 3 the new "
        "quorum needs to elect a leader"]
    assert voter_set_problems([0, 1, 2, 3, 4], known, {0, 1}) == [
        "voters: only 2 of [0, 1, 2, 3, 4] are live, fewer than the majority of 3 the new "
        "quorum needs to elect a leader"]


def _matches(p: WalkProgress, q: QuorumStatus) -> bool:
    """The progress shows the quorum as DescribeQuorum answered it."""
    return (p.current == tuple(sorted(q.current_voters)) and p.leader_id == q.leader_id
            and p.leader_epoch == q.leader_epoch and p.high_watermark == q.high_watermark)


def test_the_walker_waits_for_a_voter_change_someone_else_started(tmp_path: Path) -> None:
    """KIP-853: one voter change at a time. While another change is in flight (its target is
    not the committed set) the walker adds and removes nothing and says why."""
    c = cluster(tmp_path)
    assert c.alter_quorum([0, 1, 2, 3]).ok  # another tool's change, not committed yet
    q = c.describe_quorum()
    assert q.target_voters is not None and set(q.target_voters) != set(q.current_voters)
    p = VoterChangeWalker(c, [3, 1, 0]).step()
    assert p.phase is WalkPhase.RUNNING
    assert p.action == "waiting for the voter change in flight to commit"
    assert p.target == (0, 1, 3) and _matches(p, q)
    assert c.describe_quorum().target_voters == q.target_voters  # nothing changed


def test_the_walker_reports_the_quorum_it_saw_and_completes_when_voters_match(
        tmp_path: Path) -> None:
    c = cluster(tmp_path)
    walker = VoterChangeWalker(c, [0, 1, 2, 3])
    q = c.describe_quorum()
    p = walker.step()
    assert (p.phase, p.action) == (WalkPhase.RUNNING, "adding voter 3")
    assert _matches(p, q) and p.target == (0, 1, 2, 3)
    assert p.acted  # AddRaftVoter answered once committed: the next look needs no wait
    done = walker.step()
    assert not done.acted
    assert (done.phase, done.action) == (WalkPhase.COMPLETED, "voters are as desired")
    assert done.current == (0, 1, 2, 3) and _matches(done, c.describe_quorum())


def test_the_walker_waits_for_a_node_that_is_not_fetching_yet(tmp_path: Path) -> None:
    """KIP-853: the leader promotes only a caught-up observer, so the walker asks nothing
    while the new node is not fetching, and says what to start."""
    c = cluster(tmp_path)
    p = VoterChangeWalker(c, [0, 1, 2, 42]).step()
    assert p.phase is WalkPhase.RUNNING
    assert p.action == ("waiting for node 42 to fetch the metadata log as an observer (start "
                        "it as a controller formatted with --no-initial-controllers)")
    assert c.describe_quorum().current_voters == p.current


class _Refusing(PassThrough):
    """The embedded cluster, but AddRaftVoter is refused as a controller refuses it."""

    def add_raft_voter(self, node_id: int, endpoints: Sequence[str] = ()) -> ApiResult:
        return ApiResult(errors.INVALID_REQUEST, "Cluster doesn't support adding voter "
                         "because the kraft.version feature is 0")


def test_the_walker_raises_a_refused_voter_change_with_the_controllers_reason(
        tmp_path: Path) -> None:
    """A non-retriable AddRaftVoter error is the user's to fix: raised with its code and the
    controller's message, prefixed by the step."""
    c = cluster(tmp_path)
    with pytest.raises(KafkaApiError) as e:
        VoterChangeWalker(_Refusing(c), [0, 1, 2, 3]).step()
    assert e.value.error == errors.INVALID_REQUEST
    assert "adding voter 3: Cluster doesn't support adding voter" in str(e.value)


class _ResponseLostOnce(PassThrough):
    """The embedded cluster, but the first AddRaftVoter answer is lost on the way back and
    the client sees REQUEST_TIMED_OUT (the change itself goes on, as in KIP-853)."""

    def __init__(self, c: EmbeddedCluster) -> None:
        self.c = c
        self.lost = False

    def add_raft_voter(self, node_id: int, endpoints: Sequence[str] = ()) -> ApiResult:
        result = self.c.add_raft_voter(node_id, endpoints)
        if self.lost:
            return result
        self.lost = True
        return ApiResult(errors.REQUEST_TIMED_OUT, "no answer within 30000 ms")


def test_the_walker_retries_a_retriable_error_and_goes_on(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    walker = VoterChangeWalker(_ResponseLostOnce(c), [0, 1, 2, 3])
    q = c.describe_quorum()
    p = walker.step()
    assert p.phase is WalkPhase.RUNNING and _matches(p, q)
    assert p.action == "adding voter 3: REQUEST_TIMED_OUT, retrying"
    assert walker.step().phase is WalkPhase.COMPLETED


# -- throttles and the executor's end ---------------------------------------------------------
def test_the_throttle_markers_are_listed_per_broker_with_their_entries(tmp_path: Path) -> None:
    """ReassignPartitionsCommand throttles the replicas that hold the data as leaders and the
    replicas being added as followers; the markers say which entries kraftsman placed."""
    c = cluster(tmp_path)
    plan, _ = ReassignmentPlan.from_moves([(tp("orders", 0), [3, 1, 2])],
                                          limits=Limits(1_000_000, 1))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    ex.step()
    every = throttles.placed(c)
    assert set(every) == {0, 1, 2, 3}
    assert every[3].entries == {throttles.Entry("orders", 0, 3, "F")}
    assert every[0].entries == {throttles.Entry("orders", 0, 0, "L")}
    assert every[3].rate == "1000000"
    some = throttles.placed(c, [3, 4])
    assert set(some) == {3} and some[3].entries == every[3].entries


def test_failing_a_run_reports_the_reason_and_removes_its_throttles(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    plan, _ = ReassignmentPlan.from_moves([(tp("orders", 0), [3, 4, 5])],
                                          limits=Limits(1_000_000, 1))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    ex.step()
    assert throttles.placed(c)
    ex.fail("spec.plan: the plan names topic 'orders' that was deleted")
    p = ex.progress()
    assert p.phase is Phase.FAILED
    assert p.message == "spec.plan: the plan names topic 'orders' that was deleted"
    assert throttles.placed(c) == {}


# -- the dry run (ReassignPartitionsCommand --execute without executing) -----------------------
MB = 1_000_000


def test_the_dry_run_counts_each_kind_of_move_and_skips_refused_partitions(
        tmp_path: Path) -> None:
    """A reorder moves no data but is a move; a shrink removes a replica and adds none; an
    identical target is unchanged; a refused partition (unknown broker, unknown topic) counts
    nowhere. Leaders move when the leader leaves the replica set, or, with preferred
    election, when it is not the new first replica (ReassignPartitionsCommand)."""
    c = cluster(tmp_path, topics=[
        {"name": "orders", "partitions": 6, "replicationFactor": 3,
         "sizeBytesPerPartition": 10 * MB, "assignment": [[0, 1, 2], [1, 2, 0], [2, 0, 1]] * 2},
        {"name": "empty", "partitions": 2, "replicationFactor": 1, "sizeBytesPerPartition": 0,
         "assignment": [[0], [0]]}])
    moves = [
        (tp("orders", 5), [0, 9, 1]),  # unknown broker 9: refused
        (tp("orders", 0), [0, 1, 2]),  # unchanged
        (tp("orders", 1), [2, 1, 0]),  # reorder
        (tp("orders", 2), [3, 0, 1]),  # 2 -> 3, the leader (2) leaves
        (tp("orders", 3), [0, 1, 2, 3]),  # grows onto 3
        (tp("orders", 4), [1, 2]),  # shrinks off 0
        (tp("empty", 0), [5]),  # nothing to copy, the leader (0) leaves
        (tp("empty", 1), [0]),  # unchanged
        (tp("ghost", 0), [1]),  # unknown topic: refused
    ]
    for elect, leader_moves in ((True, 3), (False, 2)):
        plan, _ = ReassignmentPlan.from_moves(moves, limits=Limits(MB, 1),
                                              elect_preferred_leaders=elect)
        r = dry_run(c, plan)
        assert {p.tp for p in r.problems} == {tp("orders", 5), tp("ghost", 0)}
        assert (r.partitions_unchanged, r.partitions_moving) == (2, 5)
        assert (r.replica_moves, r.replicas_removed, r.leader_moves) == (3, 3, leader_moves)
        assert r.bytes_to_move == 20 * MB
        assert r.per_broker_in_bytes == {3: 20 * MB, 5: 0}
        # one at a time: the three moves that copy nothing pass at once, then 10 s + 10 s
        assert r.estimated_seconds == 20.0
    assert not c.list_partition_reassignments()


def test_the_dry_run_breaks_ties_between_equal_moves_by_partition_like_the_executor(
        tmp_path: Path) -> None:
    """The executor starts equal-sized moves in partition order, whatever the plan's order;
    the estimate follows it (here the slower copy first, then the faster after a pass)."""
    c = cluster(tmp_path, topics=[
        {"name": n, "partitions": 1, "replicationFactor": 1, "sizeBytesPerPartition": 3 * MB,
         "assignment": [[i]]} for i, n in enumerate(("a", "b"))])
    plan, _ = ReassignmentPlan.from_moves([(tp("b", 0), [4]), (tp("a", 0), [3])],
                                          limits=Limits(None, 1))
    speeds = {3: 2 * MB, 4: 3 * MB}  # a-0 copies in 1.5 s, b-0 in 1 s
    r = dry_run(c, plan, bandwidth=speeds.__getitem__, poll_seconds=1.0)
    assert r.estimated_seconds == pytest.approx(3.0)  # a-0 until 1.5, next pass at 2, +1


# -- the executor: cancel, failures, limits after the end -------------------------------------
def test_a_rollback_the_controller_refuses_is_said_and_retried_until_it_succeeds(
        tmp_path: Path) -> None:
    """Kafka 4.4's ReplicationControlManager.cancelPartitionReassignment refuses a rollback
    that would need an unclean election (INVALID_REPLICA_ASSIGNMENT): here broker 0, the
    only original replica of every solo partition, died before the adding replica caught
    up, so with ELR each ISR is empty (differential scenario cancel-offline). The executor
    keeps cancelling, says which moves wait and why in Kafka's words (the first five), rolls
    back the others at once, and ends Cancelled once the last rollback is accepted — after
    0 restarts and is elected again as the last known leader."""
    c = cluster(tmp_path, topics=[
        {"name": "solo", "partitions": 6, "replicationFactor": 1,
         "sizeBytesPerPartition": 50 * MB, "assignment": [[0]] * 6},
        {"name": "other", "partitions": 1, "replicationFactor": 1,
         "sizeBytesPerPartition": 50 * MB, "assignment": [[1]]}])
    solo = {tp("solo", i) for i in range(6)}
    plan, _ = ReassignmentPlan.from_moves([(t, [3]) for t in sorted(solo)]
                                          + [(tp("other", 0), [4])], limits=Limits(MB, 7))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    ex.step()
    c.advance(2)
    c.fail_broker(0)  # the only original replica of every solo partition
    run_until(c, lambda: all(d.leader < 0 for d in c.describe_partitions()
                             if d.tp.topic == "solo"))
    ex.cancel()
    p = ex.step()
    assert p.phase is Phase.CANCELLING
    assert p.message.startswith("6 move(s) cannot be rolled back yet; retrying: solo-0: ")
    assert ("solo-0: Unable to revert partition assignment for solo:0 because it would "
            "require an unclean leader election.; solo-1: ") in p.message
    assert p.message.count("; solo-") == 4 and "solo-5" not in p.message  # the first five
    assert set(ex.moving) == solo and ex.cancelled == {tp("other", 0)}
    assert set(c.list_partition_reassignments()) == solo
    c.restore_broker(0)
    run_until(c, lambda: all(d.leader == 0 for d in c.describe_partitions()
                             if d.tp.topic == "solo"))
    c.alter_partition_reassignments({tp("solo", 0): None})  # another tool is quicker
    p = ex.step()
    assert p.phase is Phase.CANCELLED and p.cancelled == 7 and p.message == ""
    assert ex.cancelled == solo | {tp("other", 0)}
    assert ex.state.cancelled == 7  # persisted: a restarted operator reports it too
    assert not c.list_partition_reassignments() and throttles.placed(c) == {}


class _MoveCompletesBeforeTheRollback(PassThrough):
    """A real cluster's race: a move completes after the pass looked at its replicas' sizes
    and before its rollback request reaches the controller. The embedded cluster's clock
    runs on (in cluster time) until ``racing`` has completed, then the request goes on."""

    def __init__(self, c: EmbeddedCluster, racing: TopicPartition) -> None:
        self.c, self.racing = c, racing

    def alter_partition_reassignments(self, changes: Mapping[TopicPartition, Sequence[int] | None]
                                      ) -> dict[TopicPartition, ApiResult]:
        if self.racing in changes and changes[self.racing] is None:
            run_until(self.c, lambda: self.racing not in self.c.list_partition_reassignments(),
                      step=0.1)
        return self.c.alter_partition_reassignments(changes)


def test_a_move_that_completes_before_its_rollback_does_not_hold_up_the_other_rollbacks(
        tmp_path: Path) -> None:
    """ReplicationControlManager answers the cancellation of a move that has just completed
    with NO_REASSIGNMENT_IN_PROGRESS (ReassignPartitionsCommand --cancel skips such a
    partition). The executor takes the rollbacks of the other moves of the same request at
    once, and records the completed move as done at its next pass."""
    c = cluster(tmp_path, topics=[{"name": n, "partitions": 1, "replicationFactor": 1,
                                   "sizeBytesPerPartition": s * MB, "assignment": [[0]]}
                                  for n, s in (("small", 1), ("mid", 20), ("big", 50))])
    small, mid, big = tp("small", 0), tp("mid", 0), tp("big", 0)
    plan, _ = ReassignmentPlan.from_moves([(small, [3]), (mid, [4]), (big, [5])],
                                          limits=Limits(None, 3))
    ex = ReassignmentExecutor(_MoveCompletesBeforeTheRollback(c, small), plan)  # type: ignore[arg-type]
    assert ex.start() == []
    ex.step()
    assert list(ex.moving) == [small, mid, big]  # small's result comes first
    c.advance(0.5)  # nothing has copied everything yet
    ex.cancel()
    p = ex.step()
    assert (p.phase, p.moving, p.cancelled) == (Phase.CANCELLING, 1, 2)
    assert set(ex.moving) == {small} and ex.cancelled == {mid, big} and p.message == ""
    assert c.list_partition_reassignments() == {}
    p = ex.step()
    assert (p.phase, p.done, p.cancelled, p.moving) == (Phase.CANCELLED, 1, 2, 0)
    assert ex.done == {small} and throttles.placed(c) == {}


def test_new_limits_after_the_run_ended_place_no_throttle(tmp_path: Path) -> None:
    """A run that failed (or completed) owns no throttle any more: changing its limits later
    must not put rates back on the brokers its abandoned moves touch."""
    c = cluster(tmp_path)
    plan, _ = ReassignmentPlan.from_moves([(tp("orders", 0), [3, 4, 5])],
                                          limits=Limits(MB, 1))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    ex.step()
    ex.fail("spec.plan: invalid now")
    assert ex.moving and throttles.placed(c) == {}
    ex.set_limits(Limits(2 * MB, 1))
    assert throttles.placed(c) == {}
    pending = ReassignmentExecutor(c, plan)
    pending.set_limits(Limits(2 * MB, 1))  # not started: nothing to throttle either
    assert throttles.placed(c) == {} and pending.state.phase is Phase.PENDING


def test_moves_another_tool_retargets_are_failed_and_counted(tmp_path: Path) -> None:
    """A move another tool re-targets is not fought over (ReassignPartitionsCommand would
    need --additional): each is a failure of its own, counted in the persisted state. Kafka
    4.4 keeps the replicas a re-target drops in R (as removing ones), so their copies still
    look in progress: the executor notices at its next full listing, FULL_CHECK_MS later."""
    c = cluster(tmp_path)
    plan, _ = ReassignmentPlan.from_moves(
        [(tp("orders", i), [3, 4, 5]) for i in range(3)], limits=Limits(MB, 3))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    ex.step()
    c.alter_partition_reassignments({tp("orders", 0): [3, 4, 0], tp("orders", 1): [1, 4, 5]})
    c.advance(FULL_CHECK_MS / 1000)
    p = ex.step()
    assert ex.state.failed_count == 2 and p.failed == 2
    assert set(ex.state.failed) == {"orders-0", "orders-1"}
    assert "re-targeted to [3, 4, 0] by another tool" in ex.state.failed["orders-0"]


def test_the_final_preferred_election_covers_the_plan_and_counts_each_outcome(
        tmp_path: Path) -> None:
    """At the end the executor elects preferred leaders for the partitions it finished, and
    only those (LeaderElectionCommand with the plan's partitions): succeeded, not needed and
    failed are counted apart, as the tool prints them."""
    c = cluster(tmp_path)
    plan, _ = ReassignmentPlan.from_moves([
        (tp("orders", 0), [1, 0, 2]), (tp("orders", 1), [0, 1, 2]),  # reorders: elected
        (tp("orders", 3), [2, 0, 1]),  # its preferred replica 2 fails: not electable
        (tp("orders", 4), [1, 2, 0]),  # unchanged, led by 1 already: not needed
        (tp("orders", 5), [3, 4, 5])], limits=Limits(None, 10), elect_preferred_leaders=True)
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    p = ex.step()
    c.fail_broker(2)  # orders-2, outside the plan, is led by 0 from now on
    run_until(c, lambda: all(d.leader != 2 for d in c.describe_partitions()))
    while not p.phase.terminal:
        c.advance(1)
        p = ex.step()
    assert p.phase is Phase.COMPLETED
    assert (ex.state.elected, ex.state.election_failed) == (2, 1)
    leaders = {d.tp.partition: d.leader for d in c.describe_partitions()}
    assert leaders == {0: 1, 1: 0, 2: 0, 3: 0, 4: 1, 5: 3}


def test_without_preferred_election_the_executor_elects_nothing(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    plan, _ = ReassignmentPlan.from_moves([(tp("orders", 0), [1, 0, 2])],
                                          limits=Limits(None, 1))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    assert ex.step().phase is Phase.COMPLETED
    assert ex.state.elected is None and ex.state.election_failed is None
    assert next(iter(c.describe_partitions(partitions=[tp("orders", 0)]))).leader == 0


def test_throttles_the_cluster_refuses_are_reported_per_broker(tmp_path: Path) -> None:
    """A broker refuses a throttle rate that is not a whole number of bytes/second (Kafka's
    ``leader.replication.throttled.rate`` is a LONG at least 0): the run says which broker
    refused what, in the controller's words, and tries again at the next pass."""
    c = cluster(tmp_path)
    plan, _ = ReassignmentPlan.from_moves([(tp("orders", 0), [3, 4, 5])],
                                          limits=Limits(-1, 1))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    p = ex.step()
    assert p.message.startswith(
        "could not set throttles: broker 0: leader.replication.throttled.rate='-1': must be "
        "a whole number of bytes/second; broker 1: ")
    assert p.message.count("; broker ") == 4  # the first five problems


def test_a_marker_keeps_the_entries_it_can_read_and_skips_foreign_ones() -> None:
    """A throttle marker may hold items another tool or an older version wrote: an item
    that is not SIDE:PARTITION:TOPIC with a known side is not ours."""
    doc = ('{"rate": "5", "previous": {"follower.replication.throttled.rate": null}, '
           '"replicas": ["L:0:orders", "F:12:t.x", "X:0:orders", "L:x:orders", "F:1:", '
           '"F:-1:orders", "F:\u00b2:orders"]}')  # '²': str.isdigit, but int() raises
    m = throttles.Marker.decode(doc, 3)
    assert m is not None and m.rate == "5"
    assert m.previous == {"follower.replication.throttled.rate": None}
    assert m.entries == {throttles.Entry("orders", 0, 3, "L"), throttles.Entry("t.x", 12, 3, "F")}
    assert throttles.Marker.decode(m.encode(), 3) == m


# -- plan problems: each names the partition, the field and the fix ---------------------------
def test_each_bad_target_is_refused_with_what_is_wrong(tmp_path: Path) -> None:
    """ReassignPartitionsCommand refuses an empty, negative, duplicated or unknown-broker
    replica list (INVALID_REPLICA_ASSIGNMENT) and a partition it cannot find; kraftsman says
    which, for every partition at once."""
    c = cluster(tmp_path)
    plan, dup = ReassignmentPlan.from_moves([
        (tp("orders", 0), []), (tp("orders", 1), [0, -1, -2]),
        (tp("orders", 2), [3, 4, 3, 5, 4]),
        (tp("orders", 3), [3, 9, 7]), (tp("orders", 4), [3, 4, 5]), (tp("orders", 4), [5]),
        (tp("orders", 9), [1]), (tp("orders", 5), [5, 4, 3])])
    assert [(p.tp, p.error, p.message) for p in dup] == [
        (tp("orders", 4), errors.INVALID_REQUEST,
         "orders-4 is listed more than once in the plan")]
    assert plan.moves[tp("orders", 4)] == (5,)  # the last listing is the one kept
    problems = {p.tp: (p.error, p.message) for p in validate_plan(c, plan)}
    bad = errors.INVALID_REPLICA_ASSIGNMENT
    assert problems == {
        tp("orders", 0): (bad, "orders-0: the target replica list is empty"),
        tp("orders", 1): (bad, "orders-1: negative broker id(s) [-2, -1]"),
        tp("orders", 2): (bad, "orders-2: broker id(s) [3, 4] listed more than once"),
        tp("orders", 3): (bad, "orders-3: unknown broker id(s) [7, 9]; the cluster has "
                               "[0, 1, 2, 3, 4, 5]"),
        tp("orders", 9): (errors.UNKNOWN_TOPIC_OR_PARTITION,
                          "orders-9: unknown topic or partition"),
    }


def test_a_plan_is_refused_while_other_reassignments_are_in_progress_naming_five(
        tmp_path: Path) -> None:
    """ReassignPartitionsCommand: "Cannot execute because there is an existing partition
    assignment" unless --additional. The refusal names the first five, counts the rest, and
    says the three ways out; moves already heading to this plan's targets are its own."""
    c = cluster(tmp_path, topics=[{"name": "t", "partitions": 8, "replicationFactor": 1,
                                   "sizeBytesPerPartition": 10 * MB, "assignment": [[0]] * 8}])
    c.alter_partition_reassignments({tp("t", i): [1] for i in range(7)})
    plan, _ = ReassignmentPlan.from_moves([(tp("t", 0), [1]), (tp("t", 7), [2])])
    problems = validate_plan(c, plan)
    assert [(p.tp, p.error) for p in problems] == [(tp("t", 1), errors.REASSIGNMENT_IN_PROGRESS)]
    assert problems[0].message == (
        "cannot start: 6 partition reassignment(s) already in progress (t-1, t-2, t-3, t-4, "
        "t-5 and 1 more); wait for them, cancel them, or mark this plan additional to move "
        "on top of them")
    c.alter_partition_reassignments({tp("t", 6): None})
    five = validate_plan(c, plan)[0].message
    assert "(t-1, t-2, t-3, t-4, t-5);" in five and "more" not in five
    extra = ReassignmentPlan(plan.moves, additional=True)
    assert validate_plan(c, extra) == []


# -- progress (what kraftsman shows where kafka-reassign-partitions --verify prints) ------------
def test_progress_samples_copied_bytes_once_per_instant_and_keeps_the_last_thirty(
        tmp_path: Path) -> None:
    """Rate and ETA come from the bytes the adding replicas hold over time; the persisted
    samples stay small (30) however long the run, and a second pass at the same instant adds
    no sample (it would divide by zero time)."""
    c = cluster(tmp_path, topics=[{"name": "big", "partitions": 1, "replicationFactor": 1,
                                   "sizeBytesPerPartition": 50 * MB, "assignment": [[0]]}])
    plan, _ = ReassignmentPlan.from_moves([(tp("big", 0), [3])], limits=Limits(None, 1))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    p = ex.step()
    assert (p.bytes_moved, p.bytes_total, p.rate_bytes_per_second, p.eta_seconds) == (
        0, 50 * MB, None, None)
    ex.step()
    assert len(ex.state.samples) == 1
    c.advance(1)
    p = ex.step()
    assert p.bytes_moved == 1 * MB and p.percent == pytest.approx(2.0)
    assert p.rate_bytes_per_second == pytest.approx(MB) and p.eta_seconds == pytest.approx(49)
    for _ in range(34):
        c.advance(1)
        p = ex.step()
    assert p.bytes_moved == 35 * MB and p.eta_seconds == pytest.approx(15)
    samples = ex.state.samples
    assert len(samples) == 30 and samples[-1][0] - samples[0][0] == 29_000
    while not p.phase.terminal:
        c.advance(1)
        p = ex.step()
    assert p.bytes_moved == p.bytes_total == 50 * MB and p.percent == 100.0
    assert len(ex.state.samples) == 30 and ex.step().phase is Phase.COMPLETED


def test_a_move_copying_one_byte_a_second_still_has_an_eta(tmp_path: Path) -> None:
    """The ETA is the bytes left over the rate seen, whatever the rate (here a throttle of
    1 byte/s, as --throttle 1 would set); only no progress at all leaves it unknown."""
    c = cluster(tmp_path, topics=[{"name": "slow", "partitions": 1, "replicationFactor": 1,
                                   "sizeBytesPerPartition": 1000, "assignment": [[0]]}])
    plan, _ = ReassignmentPlan.from_moves([(tp("slow", 0), [3])], limits=Limits(1, 1))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    ex.step()
    c.advance(10)
    p = ex.step()
    rate = p.rate_bytes_per_second
    assert rate is not None and 0 < rate <= 1 and p.bytes_moved > 0
    assert p.eta_seconds == pytest.approx((1000 - p.bytes_moved) / rate)


def test_reading_progress_between_passes_records_no_sample(tmp_path: Path) -> None:
    """Views (kraftsman reassignments status, the operator's status) read progress without
    changing the persisted state: only a reconcile pass records a rate sample."""
    c = cluster(tmp_path)
    plan, _ = ReassignmentPlan.from_moves([(tp("orders", 0), [3, 1, 2])], limits=Limits(None, 1))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    ex.step()
    c.advance(2)
    p = ex.progress()
    assert p.bytes_moved == 2 * MB and len(ex.state.samples) == 1
    ex.step()
    assert len(ex.state.samples) == 2


def test_a_clock_that_went_back_gives_no_rate_rather_than_a_wrong_one(tmp_path: Path) -> None:
    """The samples persist with the run; resumed where the clock is behind the one that took
    them (a real cluster's time is the operator host's wall clock), the newest sample is older
    than the oldest: no rate and no ETA — not a negative rate, not a division by zero."""
    c = cluster(tmp_path)
    plan, _ = ReassignmentPlan.from_moves([(tp("orders", 0), [3, 1, 2])], limits=Limits(None, 1))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    ex.step()
    c.advance(5)
    assert ex.step().rate_bytes_per_second == pytest.approx(MB)
    now = c.now_ms()
    for ahead in (60_000, 0):  # the oldest sample a minute ahead of the clock / exactly now
        state = ex.state.model_copy(deep=True)
        first = state.samples[0][0]
        state.samples = [(t - first + now + ahead, b) for t, b in state.samples]
        p = ReassignmentExecutor(c, plan, state).step()
        assert p.bytes_moved > 4 * MB and p.moving == 1
        assert (p.rate_bytes_per_second, p.eta_seconds) == (None, None), ahead


def test_bytes_moved_are_the_finished_moves_plus_the_copies_in_flight_up_to_the_total(
        tmp_path: Path) -> None:
    """Progress in bytes, as kafka-reassign-partitions --verify and KIP-179 see it: what the
    finished moves copied plus what the adding replicas hold. A partition producers keep
    writing to grows during its move, and its new replica ends up holding more than the
    partition did at the start: the figure stops at the plan's total (100 %)."""
    c = cluster(tmp_path, topics=[
        {"name": "s", "partitions": 1, "replicationFactor": 1, "sizeBytesPerPartition": MB,
         "assignment": [[0]]},
        {"name": "live", "partitions": 1, "replicationFactor": 1,
         "sizeBytesPerPartition": 4 * MB, "produceBytesPerSecond": MB / 2, "assignment": [[1]]}])
    s, live = tp("s", 0), tp("live", 0)
    plan, _ = ReassignmentPlan.from_moves([(s, [3]), (live, [4])], limits=Limits(None, 2))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == [] and ex.state.bytes_total == pytest.approx(5 * MB, rel=1e-3)
    ex.step()
    c.advance(2)
    p = ex.step()
    assert ex.done == {s} and p.moving == 1
    assert p.bytes_moved == pytest.approx(3 * MB, rel=1e-2)  # s's 1 MB + 2 MB of live
    c.advance(4)
    p = ex.step()
    assert p.moving == 1 and c.replica_log_sizes([(live, 4)])[(live, 4)] > 5 * MB
    assert p.bytes_moved == p.bytes_total and p.percent == 100.0


def test_a_run_resumed_without_its_state_reports_the_bytes_its_moves_in_flight_copied(
        tmp_path: Path) -> None:
    """State lost (a new operator without the old status): the plan's total is unknown, the
    moves in flight are re-derived from the cluster, and progress still counts what their
    new replicas hold."""
    c = cluster(tmp_path)
    t = tp("orders", 0)
    plan, _ = ReassignmentPlan.from_moves([(t, [3, 1, 2])], limits=Limits(None, 1))
    first = ReassignmentExecutor(c, plan)
    assert first.start() == []
    first.step()
    c.advance(3)
    ex = ReassignmentExecutor(c, plan, ExecutorState(phase=Phase.RUNNING, started_ms=0))
    assert ex.start() == [] and ex.state.bytes_total == 0
    p = ex.step()
    assert p.moving == 1 and p.bytes_moved == pytest.approx(3 * MB, rel=1e-2)


def test_a_failed_run_reports_the_bytes_it_finished_and_asks_no_sizes(tmp_path: Path) -> None:
    """Once a run has ended its abandoned moves are not its progress: the figure is what its
    finished moves copied, and reading it asks the cluster nothing."""
    c = cluster(tmp_path, topics=[{"name": n, "partitions": 1, "replicationFactor": 1,
                                   "sizeBytesPerPartition": s * MB, "assignment": [[0]]}
                                  for n, s in (("small", 1), ("big", 20))])
    plan, _ = ReassignmentPlan.from_moves([(tp("small", 0), [3]), (tp("big", 0), [4])],
                                          limits=Limits(None, 2))
    log = _Requests(c)
    ex = ReassignmentExecutor(log, plan)  # type: ignore[arg-type]
    assert ex.start() == []
    ex.step()
    c.advance(2)
    assert ex.step().done == 1
    ex.fail("stopped by the user")
    c.advance(5)
    log.take()
    p = ex.progress()
    assert (p.phase, p.moving, p.bytes_moved) == (Phase.FAILED, 1, MB)
    assert log.take() == ([], [])


def test_progress_details_list_failures_first_then_moves_in_flight_up_to_a_hundred(
        tmp_path: Path) -> None:
    c = cluster(tmp_path, topics=[{"name": "t", "partitions": 102, "replicationFactor": 1,
                                   "sizeBytesPerPartition": 10 * MB, "assignment": [[0]] * 102}])
    plan, _ = ReassignmentPlan.from_moves([(tp("t", i), [1]) for i in range(102)],
                                          limits=Limits(None, 102))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    p = ex.step()
    assert p.moving == 102 and len(p.details) == 100
    assert [d.tp for d in p.details] == sorted(tp("t", i) for i in range(102))[:100]
    assert {(d.state, d.target, d.message) for d in p.details} == {("moving", (1,), "")}
    c.alter_partition_reassignments({tp("t", 50): [2], tp("t", 7): [2]})  # another tool
    c.advance(FULL_CHECK_MS / 1000)  # noticed at the next full listing (1 is still in R)
    p = ex.step()
    assert (p.failed, p.moving, len(p.details)) == (2, 100, 100)
    assert [(d.tp, d.state) for d in p.details[:3]] == [
        (tp("t", 7), "failed"), (tp("t", 50), "failed"), (tp("t", 0), "moving")]
    assert p.details[0].message == ex.state.failed["t-7"] and "another tool" in \
        p.details[0].message
    assert p.details[0].target == (1,)
    c.alter_partition_reassignments({tp("t", i): [2] for i in range(100) if i not in (7, 50)})
    c.advance(FULL_CHECK_MS / 1000)
    p = ex.step()  # a hundred failures fill the list: no move in flight is shown
    assert (p.failed, p.moving, len(p.details)) == (100, 2, 100)
    assert {d.state for d in p.details} == {"failed"}


# -- throttles around an operator's own configs ------------------------------------------------
RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"


def _configs(c: EmbeddedCluster) -> dict[tuple[str, str], dict[str, Any]]:
    return configs_in(c)


def test_a_rate_an_operator_set_before_the_run_is_restored_after_it(tmp_path: Path) -> None:
    """ReassignPartitionsCommand overwrites ``*.replication.throttled.rate`` on the brokers a
    move touches; kraftsman remembers the value it replaced and puts it back at the end (a
    key that was unset is unset again)."""
    c = cluster(tmp_path)
    c.incremental_alter_configs({("BROKER", "3"): {RATE_KEYS[1]: "500"}})
    plan, _ = ReassignmentPlan.from_moves([(tp("orders", 0), [3, 1, 2])],
                                          limits=Limits(MB, 1))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    ex.step()
    during = _configs(c)[("BROKER", "3")]
    assert {k: during[k] for k in RATE_KEYS} == dict.fromkeys(RATE_KEYS, str(MB))
    assert throttles.placed(c, [3])[3].previous == {RATE_KEYS[0]: None, RATE_KEYS[1]: "500"}
    while not ex.step().phase.terminal:
        c.advance(1)
    assert _configs(c) == {("BROKER", "3"): {RATE_KEYS[1]: "500"}}


def test_a_topic_throttled_with_a_wildcard_is_left_as_the_operator_set_it(
        tmp_path: Path) -> None:
    """``*`` throttles every replica of the topic already (Kafka's
    ``*.replication.throttled.replicas`` wildcard): kraftsman adds no entry to it and removes
    nothing from it, but still sets and later removes its rates."""
    c = cluster(tmp_path)
    c.incremental_alter_configs({("TOPIC", "orders"): {LEADER_REPLICAS: "*"}})
    plan, _ = ReassignmentPlan.from_moves([(tp("orders", 0), [3, 1, 2])],
                                          limits=Limits(MB, 1))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    ex.step()
    topic = _configs(c)[("TOPIC", "orders")]
    assert topic == {LEADER_REPLICAS: "*", FOLLOWER_REPLICAS: "0:3"}
    assert throttles.placed(c, [0])[0].entries == set()  # the wildcard is not kraftsman's
    assert _configs(c)[("BROKER", "0")][RATE_KEYS[0]] == str(MB)
    while not ex.step().phase.terminal:
        c.advance(1)
    assert _configs(c) == {("TOPIC", "orders"): {LEADER_REPLICAS: "*"}}


def test_replicas_the_operator_listed_already_stay_theirs_and_the_rates_still_go(
        tmp_path: Path) -> None:
    """ReassignPartitionsCommand appends the moving replicas to ``*.replication.throttled.
    replicas``; when the operator listed them all before, kraftsman adds no entry of its own
    — its markers hold only the rates it wrote — and at the end it still removes those rates
    while the operator's entries stay."""
    c = cluster(tmp_path)
    operator = {LEADER_REPLICAS: "0:0,0:1,0:2", FOLLOWER_REPLICAS: "0:3"}
    c.incremental_alter_configs({("TOPIC", "orders"): operator})
    plan, _ = ReassignmentPlan.from_moves([(tp("orders", 0), [3, 1, 2])],
                                          limits=Limits(MB, 1))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    ex.step()
    markers = throttles.placed(c)
    assert set(markers) == {0, 1, 2, 3} and all(not m.entries for m in markers.values())
    assert _configs(c)[("BROKER", "3")][RATE_KEYS[1]] == str(MB)
    assert drive(c, ex, limit=100).phase is Phase.COMPLETED
    assert _configs(c) == {("TOPIC", "orders"): operator}


def test_a_run_removes_the_throttles_a_vanished_run_left_once_their_move_ends(
        tmp_path: Path) -> None:
    """A replica entry stays while its partition moves, in this plan or in any reassignment
    the cluster lists (ListPartitionReassignments for those partitions only): the throttles
    of a run that vanished (its operator gone with its state) are kept while its move goes
    on and removed by the next run's pass once the cluster finished it."""
    c = cluster(tmp_path)
    gone_plan, _ = ReassignmentPlan.from_moves([(tp("orders", 5), [2, 0, 3])],
                                               limits=Limits(MB, 1))
    gone = ReassignmentExecutor(c, gone_plan)
    assert gone.start() == []
    gone.step()  # then nobody steps it again
    plan, _ = ReassignmentPlan.from_moves([(tp("orders", 0), [4, 1, 2])],
                                          limits=Limits(MB // 4, 1), additional=True)
    log = _Requests(c)
    ex = ReassignmentExecutor(log, plan)  # type: ignore[arg-type]
    assert ex.start() == []
    ex.step()
    assert [tp("orders", 5)] in log.listed and None not in log.listed
    assert throttles.Entry("orders", 5, 3, "F") in throttles.placed(c, [3])[3].entries
    run_until(c, lambda: not c.list_partition_reassignments([tp("orders", 5)]))
    ex.step()
    assert 3 not in throttles.placed(c)  # the vanished run's only entry on broker 3
    assert RATE_KEYS[1] not in _configs(c).get(("BROKER", "3"), {})
    assert drive(c, ex, limit=100).phase is Phase.COMPLETED
    assert throttles.placed(c) == {} and _configs(c) == {}


def test_removing_one_topics_entries_leaves_the_same_replica_of_another_topic_alone(
        tmp_path: Path) -> None:
    """``*.replication.throttled.replicas`` is a per-topic config of ``partition:broker``
    items (ReassignPartitionsCommand edits each topic's own list): when orders-0's move ends,
    its entry 0:3 goes from orders only — payments' own 0:3, the operator's, stays."""
    c = cluster(tmp_path, topics=[
        {"name": "orders", "partitions": 1, "replicationFactor": 3, "sizeBytesPerPartition": MB,
         "assignment": [[0, 1, 2]]},
        {"name": "payments", "partitions": 2, "replicationFactor": 3,
         "sizeBytesPerPartition": 20 * MB, "assignment": [[0, 1, 2], [0, 1, 2]]}])
    c.incremental_alter_configs({("TOPIC", "payments"): {FOLLOWER_REPLICAS: "0:3"}})
    plan, _ = ReassignmentPlan.from_moves([(tp("orders", 0), [3, 1, 2]),
                                           (tp("payments", 1), [4, 1, 2])], limits=Limits(MB, 2))
    admin = _Writes(c)
    ex = ReassignmentExecutor(admin, plan)  # type: ignore[arg-type]
    assert ex.start() == []
    ex.step()
    writes = [set(ch) for kind, ch in admin.log if kind == "configs"]
    assert writes[:2] == [{("BROKER", str(b)) for b in range(5)},  # broker 5 takes no part
                          {("TOPIC", "orders"), ("TOPIC", "payments")}]  # markers first
    assert _configs(c)[("TOPIC", "payments")][FOLLOWER_REPLICAS] == "0:3,1:4"
    run_until(c, lambda: tp("orders", 0) not in c.list_partition_reassignments())
    ex.step()
    assert ex.done == {tp("orders", 0)} and ("TOPIC", "orders") not in _configs(c)
    assert _configs(c)[("TOPIC", "payments")][FOLLOWER_REPLICAS] == "0:3,1:4"
    assert drive(c, ex, limit=200).phase is Phase.COMPLETED
    assert _configs(c) == {("TOPIC", "payments"): {FOLLOWER_REPLICAS: "0:3"}}


def test_a_pass_that_changes_neither_moves_nor_rate_asks_for_no_config(
        tmp_path: Path) -> None:
    """Throttles follow the moves in flight and the rate: a pass where neither changed sends
    no DescribeConfigs (at a thousand brokers each is a large request); a new rate or a new
    move in flight does."""
    c = cluster(tmp_path)
    plan, _ = ReassignmentPlan.from_moves([(tp("orders", 0), [3, 1, 2]),
                                           (tp("orders", 1), [4, 2, 0])], limits=Limits(MB, 1))
    log = _Requests(c)
    ex = ReassignmentExecutor(log, plan)  # type: ignore[arg-type]
    assert ex.start() == []
    ex.step()
    assert log.described
    log.described.clear()
    c.advance(1)
    ex.step()
    assert log.described == []
    ex.set_limits(Limits(2 * MB, 1))
    assert log.described and _configs(c)[("BROKER", "3")][RATE_KEYS[1]] == str(2 * MB)


def test_an_unthrottled_plan_places_no_throttle_at_all(tmp_path: Path) -> None:
    """``--throttle`` not given: ReassignPartitionsCommand sets no rate and lists no replica."""
    c = cluster(tmp_path)
    plan, _ = ReassignmentPlan.from_moves([(tp("orders", 0), [3, 1, 2])],
                                          limits=Limits(None, 1))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    ex.step()
    assert ex.moving and _configs(c) == {}


def test_a_marker_that_is_not_kraftsmans_json_is_ignored() -> None:
    """A marker record kraftsman cannot read is someone else's: no marker, so nothing of it
    is removed or restored."""
    for junk in ("", "not json", "[1, 2]", '{"replicas": 5}', '{"previous": [1]}'):
        assert throttles.Marker.decode(junk, 1) is None, junk
    bare = throttles.Marker.decode('{"previous": {"k": 5}, "rate": null}', 1)
    assert bare == throttles.Marker(None, {"k": "5"}, set())
    assert throttles.Marker.decode('{"rate": 7}', 1) == throttles.Marker("7", {}, set())


def test_a_resumed_run_fails_a_partition_deleted_while_it_was_down(tmp_path: Path) -> None:
    """The executor re-derives its moves from the cluster on resume; a partition of the plan
    that is gone is a failure with a reason, the rest goes on."""
    c = cluster(tmp_path)
    plan, _ = ReassignmentPlan.from_moves([(tp("orders", 0), [3, 1, 2]), (tp("gone", 0), [1])],
                                          limits=Limits(None, 2))
    state = ExecutorState(phase=Phase.RUNNING, started_ms=0)
    ex = ReassignmentExecutor(c, plan, state)
    assert ex.start() == []
    assert ex.state.failed == {"gone-0": "gone-0: the partition no longer exists"}
    assert ex.state.failed_count == 1 and ex.pending == deque([tp("orders", 0)])
    while not (p := ex.step()).phase.terminal:
        c.advance(1)
    assert p.phase is Phase.FAILED and (p.done, p.failed) == (1, 1)
    assert p.message == "1 partition(s) failed; 1 moved"
    again = ReassignmentExecutor(c, plan, ExecutorState(phase=Phase.RUNNING, started_ms=0,
                                                        failed=dict(ex.state.failed),
                                                        failed_count=1))
    again.start()
    assert again.failed == {tp("gone", 0)} and again.state.failed_count == 1  # not twice


def test_pending_moves_start_smallest_first_and_finished_ones_count_as_copied(
        tmp_path: Path) -> None:
    """KIP-236: a batch is as slow as its slowest move, so moves start smallest first (by the
    bytes they copy: size x replicas added). A resumed run counts moves that finished while
    it was down as copied."""
    c = cluster(tmp_path, topics=[
        {"name": "t", "partitions": 3, "replicationFactor": 1, "sizeBytesPerPartition": 4 * MB,
         "assignment": [[0], [1], [2]]},
        {"name": "s", "partitions": 1, "replicationFactor": 1, "sizeBytesPerPartition": 3 * MB,
         "assignment": [[0]]}])
    plan, _ = ReassignmentPlan.from_moves([
        (tp("t", 0), [3, 4]),  # 8 MB
        (tp("t", 1), [4]),  # 4 MB
        (tp("s", 0), [5]),  # 3 MB
        (tp("t", 2), [2])], limits=Limits(None, 1))  # already there
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    assert list(ex.pending) == [tp("s", 0), tp("t", 1), tp("t", 0)]
    assert ex.done == {tp("t", 2)} and ex.state.bytes_total == 15 * MB
    ex.step()
    assert set(ex.moving) == {tp("s", 0)}
    c.advance(10)  # s-0 finishes while nobody watches
    resumed = ReassignmentExecutor(c, plan, ExecutorState.model_validate_json(
        ex.state.model_dump_json()))
    assert resumed.start() == []
    assert resumed.done == {tp("t", 2), tp("s", 0)} and list(resumed.pending) == [
        tp("t", 1), tp("t", 0)]
    assert resumed.state.bytes_done == 3 * MB and resumed.progress().bytes_moved == 3 * MB


def test_the_finish_time_is_set_once_when_the_run_ends(tmp_path: Path) -> None:
    """cleanup() also runs from the operator's finalizer: on a running executor it removes
    the throttles without ending the run's clock, and a second cleanup after the end keeps
    the first finish time."""
    c = cluster(tmp_path)
    plan, _ = ReassignmentPlan.from_moves([(tp("orders", 0), [3, 1, 2])],
                                          limits=Limits(MB, 1))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    ex.step()
    ex.cleanup()
    assert ex.state.finished_ms is None and throttles.placed(c) == {}
    while not ex.step().phase.terminal:
        c.advance(1)
    finished = ex.state.finished_ms
    assert finished is not None
    c.advance(30)
    ex.cleanup()
    assert ex.state.finished_ms == finished


def test_a_move_another_tool_cancels_is_a_failure_that_names_where_it_ended(
        tmp_path: Path) -> None:
    """kafka-reassign-partitions --cancel on one of kraftsman's moves: the partition is back
    on its original replicas (ReplicationControlManager's PartitionReassignmentRevert takes
    the adding replicas out of R = TR + RR, so [3, 1, 2, 0] becomes [1, 2, 0]), which is not
    the plan's target; kraftsman does not start it again but reports where it ended — once
    METADATA_PROPAGATION_MS has passed, as a broker trailing the controller could show the
    same replicas for a while."""
    c = cluster(tmp_path)
    plan, _ = ReassignmentPlan.from_moves([(tp("orders", 0), [3, 1, 2]),
                                           (tp("orders", 1), [4, 2, 0])],
                                          limits=Limits(MB // 10, 2))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    ex.step()
    assert c.alter_partition_reassignments({tp("orders", 0): None})[tp("orders", 0)].ok
    p = ex.step()
    assert ex.state.failed == {} and set(ex.moving) == {tp("orders", 0), tp("orders", 1)}
    c.advance(METADATA_PROPAGATION_MS / 1000)
    p = ex.step()
    assert ex.state.failed == {"orders-0": "orders-0: the move ended outside kraftsman with "
                                           "replicas [1, 2, 0], not [3, 1, 2]"}
    assert p.failed == 1 and set(ex.moving) == {tp("orders", 1)}
    while not (p := ex.step()).phase.terminal:
        c.advance(1)
    assert p.phase is Phase.FAILED and p.done == 1
    assert c.list_partition_reassignments() == {} and throttles.placed(c) == {}


class _TopicDeleted(PassThrough):
    """A real cluster where someone deletes a topic while kraftsman moves one of its
    partitions (the embedded cluster cannot delete topics): from ``deleted`` on, the
    partition and its reassignment are gone from every answer."""

    def __init__(self, c: EmbeddedCluster, topic: str) -> None:
        self.c, self.topic, self.deleted = c, topic, False

    def _gone(self, t: TopicPartition) -> bool:
        return self.deleted and t.topic == self.topic

    def describe_partitions(self, topics: Iterable[str] | None = None,
                            partitions: Iterable[TopicPartition] | None = None
                            ) -> list[PartitionDescription]:
        return [d for d in self.c.describe_partitions(topics, partitions) if not self._gone(d.tp)]

    def list_partition_reassignments(self, partitions: Iterable[TopicPartition] | None = None
                                     ) -> dict[TopicPartition, OngoingReassignment]:
        return {t: o for t, o in self.c.list_partition_reassignments(partitions).items()
                if not self._gone(t)}

    def replica_log_sizes(self, replicas: Iterable[tuple[TopicPartition, int]]
                          ) -> dict[tuple[TopicPartition, int], int]:
        return {k: v for k, v in self.c.replica_log_sizes(replicas).items()
                if not self._gone(k[0])}

    def alter_partition_reassignments(self, changes: Mapping[TopicPartition, Sequence[int] | None]
                                      ) -> dict[TopicPartition, ApiResult]:
        """ReplicationControlManager answers a deleted topic's partition per partition with
        UNKNOWN_TOPIC_OR_PARTITION; the others are altered. The answer keeps the request's order."""
        done = self.c.alter_partition_reassignments(
            {t: r for t, r in changes.items() if not self._gone(t)})
        return {t: ApiResult(errors.UNKNOWN_TOPIC_OR_PARTITION, f"{t}: unknown topic")
                if self._gone(t) else done[t] for t in changes}


def test_a_move_whose_topic_is_deleted_meanwhile_fails_saying_so(tmp_path: Path) -> None:
    """ReplicationControlManager.deleteTopic drops a topic's partitions together with their
    reassignments: the move has ended, nowhere. It is a failure that says the partition was
    deleted; the plan's other moves go on."""
    c = cluster(tmp_path, topics=TOPICS)
    admin = _TopicDeleted(c, "payments")
    plan, _ = ReassignmentPlan.from_moves([(tp("orders", 0), [3, 1, 2]),
                                           (tp("payments", 0), [4, 0, 1])],
                                          limits=Limits(None, 2))
    ex = ReassignmentExecutor(admin, plan)  # type: ignore[arg-type]
    assert ex.start() == []
    ex.step()
    admin.deleted = True
    p = ex.step()
    assert ex.state.failed == {"payments-0": "payments-0: the move ended outside kraftsman "
                                             "with replicas nowhere (deleted), not [4, 0, 1]"}
    assert (p.failed, p.moving) == (1, 1)
    while not (p := ex.step()).phase.terminal:
        c.advance(1)
    assert p.phase is Phase.FAILED and (p.done, p.failed) == (1, 1)


def test_a_move_the_controller_refuses_to_start_fails_with_its_reason_and_the_batch_goes_on(
        tmp_path: Path) -> None:
    """The controller answers AlterPartitionReassignments per partition
    (ReplicationControlManager.alterPartitionReassignments): a topic deleted after the plan
    was validated is UNKNOWN_TOPIC_OR_PARTITION. That partition fails with the controller's
    reason, and the moves after it in the same batch start."""
    c = cluster(tmp_path, topics=TOPICS)
    admin = _TopicDeleted(c, "payments")
    small, big = tp("payments", 0), tp("orders", 0)
    plan, _ = ReassignmentPlan.from_moves([(big, [3, 4, 2]), (small, [4, 0, 1])],
                                          limits=Limits(None, 2))
    ex = ReassignmentExecutor(admin, plan)  # type: ignore[arg-type]
    assert ex.start() == [] and list(ex.pending) == [small, big]  # the refused one first
    admin.deleted = True
    p = ex.step()
    assert ex.state.failed == {"payments-0": "payments-0: unknown topic"}
    assert (p.failed, p.moving, set(ex.moving)) == (1, 1, {big})
    p = drive(c, ex, limit=200)
    assert p.phase is Phase.FAILED and (p.done, p.failed) == (1, 1)


def test_a_partition_another_tool_moves_after_validation_is_failed_and_the_batch_goes_on(
        tmp_path: Path) -> None:
    """ReassignPartitionsCommand without --additional does not start over another
    reassignment. One that another tool starts after the plan was validated is found when
    the move is due: that partition fails, its move is left to the other tool, and the moves
    after it in the same batch start."""
    c = cluster(tmp_path, topics=TOPICS)
    small, big = tp("payments", 0), tp("orders", 0)
    plan, _ = ReassignmentPlan.from_moves([(big, [3, 4, 2]), (small, [4, 0, 1])],
                                          limits=Limits(None, 2))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == [] and list(ex.pending) == [small, big]  # the foreign one first
    assert c.alter_partition_reassignments({small: [5, 0, 1]})[small].ok
    p = ex.step()
    assert ex.state.failed == {"payments-0": "payments-0 is being reassigned by another tool "
                                             "to [5, 0, 1]; not fought over"}
    assert (p.failed, p.moving, set(ex.moving)) == (1, 1, {big})
    assert c.list_partition_reassignments()[small].target == (5, 0, 1)


def test_a_pass_whose_due_moves_all_fail_does_not_say_the_throttle_is_missing(
        tmp_path: Path) -> None:
    """A raised concurrency limit frees a slot with nothing else changed: the pass finds the
    move due there taken over by another tool and fails it. The throttle on the move in
    flight is in place and nothing waits for one, so the status says nothing about it."""
    c = cluster(tmp_path, topics=TOPICS)
    first, second = tp("orders", 0), tp("payments", 0)
    plan, _ = ReassignmentPlan.from_moves([(first, [3, 1, 2]), (second, [4, 5, 1])],
                                          limits=Limits(MB, 1))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == [] and list(ex.pending) == [first, second]
    ex.step()
    assert set(ex.moving) == {first}
    assert c.alter_partition_reassignments({second: [5, 0, 1]})[second].ok
    ex.set_limits(Limits(MB, 2))
    p = ex.step()  # no time has passed: the first move still copies
    assert (p.failed, p.moving, p.pending) == (1, 1, 0)
    assert ex.state.message == ""
    assert set(throttles.placed(c)) == {0, 1, 2, 3}  # the first move's replicas, old and new


@pytest.mark.parametrize(("chain", "slots", "big_starts"), [
    (101, 2, False), (100, 2, True),  # 100 blocked moves deep (20 x 2 is less)
    (121, 6, False), (120, 6, True),  # 20 x 6 = 120 blocked moves deep
])
def test_the_executor_looks_past_blocked_moves_a_bounded_distance(
        tmp_path: Path, chain: int, slots: int, big_starts: bool) -> None:
    """With a per-broker limit, a pass skips moves whose brokers are busy and starts later
    ones, but looks at most max(100, 20 x free slots) blocked moves deep (the estimate's
    SCAN_FACTOR is the same). One chain move starts, the others wait for broker 0; the big
    move behind them starts only when the pass looks far enough."""
    topics = [{"name": "chain", "partitions": chain, "replicationFactor": 1,
               "sizeBytesPerPartition": MB, "assignment": [[0]] * chain},
              {"name": "big", "partitions": 1, "replicationFactor": 1,
               "sizeBytesPerPartition": 200 * MB, "assignment": [[2]]}]
    moves = [(tp("chain", i), [1]) for i in range(chain)] + [(tp("big", 0), [3])]
    c = cluster(tmp_path, topics=topics)
    plan, _ = ReassignmentPlan.from_moves(moves, limits=Limits(None, slots, 1))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    ex.step()
    assert len([t for t in ex.moving if t.topic == "chain"]) == 1
    assert (tp("big", 0) in ex.moving) is big_starts
    assert len(ex.pending) == chain - 1 + (not big_starts)  # the skipped ones kept, in order
    assert list(ex.pending)[:2] == [tp("chain", 1), tp("chain", 2)]


def test_the_per_broker_limit_counts_each_move_through_a_broker_once(tmp_path: Path) -> None:
    """maxConcurrentMovesPerBroker (kraftsman's own limit, as Cruise Control's per-broker
    movement concurrency): a broker giving up or receiving a replica takes part in at most
    that many moves at once — counting the moves in flight and those the pass starts, one
    each. Broker 0 gives up every replica here; the limit is 2."""
    c = cluster(tmp_path, topics=[{"name": n, "partitions": 1, "replicationFactor": 1,
                                   "sizeBytesPerPartition": s * MB, "assignment": [[0]]}
                                  for n, s in (("a", 1), ("b", 50), ("c", 10), ("d", 20))])
    a, b, c_, d = tp("a", 0), tp("b", 0), tp("c", 0), tp("d", 0)
    plan, _ = ReassignmentPlan.from_moves([(a, [1]), (b, [2]), (c_, [3]), (d, [4])],
                                          limits=Limits(None, 10, 2))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    ex.step()
    assert set(ex.moving) == {a, c_} and list(ex.pending) == [d, b]  # smallest first
    run_until(c, lambda: a not in c.list_partition_reassignments())
    ex.step()
    assert ex.done == {a} and set(ex.moving) == {c_, d} and list(ex.pending) == [b]


def test_failures_beyond_a_thousand_are_counted_but_not_recorded(tmp_path: Path) -> None:
    """The persisted state stays small at any plan size: reasons for the first 1,000
    failures, a count for all of them; a failure without a recorded reason is listed in the
    progress details as just "failed"."""
    n = 1001
    c = cluster(tmp_path, topics=[{"name": "t", "partitions": n, "replicationFactor": 1,
                                   "sizeBytesPerPartition": MB, "assignment": [[0]] * n},
                                  {"name": "a", "partitions": 1, "replicationFactor": 1,
                                   "sizeBytesPerPartition": 50 * MB, "assignment": [[0]]}])
    plan, _ = ReassignmentPlan.from_moves([(tp("t", i), [1]) for i in range(n)]
                                          + [(tp("a", 0), [1])], limits=Limits(None, n + 1))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    ex.step()
    c.alter_partition_reassignments({tp("t", i): [2] for i in range(n)})  # another tool
    c.advance(FULL_CHECK_MS / 1000)  # noticed at the next full listing (1 is still in R)
    p = ex.step()
    assert ex.state.failed_count == n and len(ex.state.failed) == 1000
    assert p.failed == n and "t-1000" not in ex.state.failed
    c.alter_partition_reassignments({tp("a", 0): [2]})
    c.advance(FULL_CHECK_MS / 1000)
    p = ex.step()
    assert p.failed == n + 1 and "a-0" not in ex.state.failed
    assert p.details[0] == MoveDetail(tp("a", 0), "failed", (1,), "failed")  # sorts first


def test_a_resumed_run_takes_moves_heading_to_its_targets_as_its_own(tmp_path: Path) -> None:
    """On resume the cluster is the truth: a move already heading to the plan's target (here
    a grow, whose R already equals the target while it copies) is in flight, not done; the
    plan's other partitions are still pending whatever comes before them in the plan."""
    c = cluster(tmp_path, topics=[
        {"name": "orders", "partitions": 2, "replicationFactor": 3,
         "sizeBytesPerPartition": 10 * MB, "assignment": [[0, 1, 2], [1, 2, 0]]},
        {"name": "empty", "partitions": 1, "replicationFactor": 1, "sizeBytesPerPartition": 0,
         "assignment": [[0]]}])
    moves = [(tp("gone", 0), [1]), (tp("orders", 0), [0, 1, 2, 3]),
             (tp("orders", 1), [4, 2, 0]), (tp("empty", 0), [5])]
    plan, _ = ReassignmentPlan.from_moves(moves, limits=Limits(None, 1))
    assert c.alter_partition_reassignments({tp("orders", 0): [0, 1, 2, 3]})[tp("orders", 0)].ok
    ex = ReassignmentExecutor(c, plan, ExecutorState(phase=Phase.RUNNING, started_ms=0))
    assert ex.start() == []
    assert set(ex.failed) == {tp("gone", 0)} and ex.done == set()
    assert ex.moving == {tp("orders", 0): (0, 1, 2, 3)}
    assert list(ex.pending) == [tp("empty", 0), tp("orders", 1)]
    elsewhere, _ = ReassignmentPlan.from_moves(
        [(tp("orders", 0), [3, 1, 2]), (tp("orders", 1), [4, 2, 0])], limits=Limits(None, 1),
        additional=True)  # on top of the move in flight: re-target it, keep the rest pending
    other = ReassignmentExecutor(c, elsewhere, ExecutorState(phase=Phase.RUNNING, started_ms=0))
    assert other.start() == []
    assert other.retarget == [tp("orders", 0)] and list(other.pending) == [tp("orders", 1)]
    fresh, _ = ReassignmentPlan.from_moves(moves[2:], limits=Limits(None, 1), additional=True)
    first = ReassignmentExecutor(c, fresh)
    assert first.start() == [] and first.state.bytes_total == 10 * MB  # the empty one adds 0


def test_a_run_that_ended_or_never_started_does_nothing_when_stepped(tmp_path: Path) -> None:
    """A reconcile pass on a run that is not running changes nothing in the cluster: before
    start() the plan is not validated yet; after the end the run must not come back."""
    c = cluster(tmp_path)
    plan, _ = ReassignmentPlan.from_moves([(tp("orders", 0), [3, 4, 5])],
                                          limits=Limits(MB, 1))
    unstarted = ReassignmentExecutor(c, plan)
    assert unstarted.step().phase is Phase.PENDING
    assert c.list_partition_reassignments() == {} and throttles.placed(c) == {}
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    ex.step()
    ex.fail("stopped by the user")
    c.advance(100)  # the abandoned move completes meanwhile
    p = ex.step()
    assert p.phase is Phase.FAILED and p.message == "stopped by the user"
    assert throttles.placed(c) == {}


class _Requests(PassThrough):
    """The embedded cluster, logging what each ListPartitionReassignments and each replica
    size request (DescribeLogDirs on Kafka) asks for."""

    def __init__(self, c: EmbeddedCluster) -> None:
        self.c = c
        self.listed: list[list[TopicPartition] | None] = []
        self.sized: list[list[tuple[TopicPartition, int]]] = []
        self.described: list[list[tuple[str, str]]] = []  # DescribeConfigs, not in take()
        self.partitions_described: list[list[TopicPartition] | None] = []  # nor this

    def list_partition_reassignments(self, partitions: Iterable[TopicPartition] | None = None
                                     ) -> dict[TopicPartition, OngoingReassignment]:
        asked = None if partitions is None else sorted(partitions)
        self.listed.append(asked)
        return self.c.list_partition_reassignments(asked)

    def replica_log_sizes(self, replicas: Iterable[tuple[TopicPartition, int]]
                          ) -> dict[tuple[TopicPartition, int], int]:
        asked = sorted(replicas)
        self.sized.append(asked)
        return self.c.replica_log_sizes(asked)

    def describe_partitions(self, topics: Iterable[str] | None = None,
                            partitions: Iterable[TopicPartition] | None = None
                            ) -> list[PartitionDescription]:
        asked = None if partitions is None else sorted(partitions)
        self.partitions_described.append(asked)
        return self.c.describe_partitions(topics, asked)

    def describe_configs(self, resources: Iterable[tuple[str, str]]
                         ) -> dict[tuple[str, str], dict[str, str]]:
        asked = list(resources)
        self.described.append(asked)
        return self.c.describe_configs(asked)

    def take(self) -> tuple[list[list[TopicPartition] | None],
                            list[list[tuple[TopicPartition, int]]]]:
        out = (self.listed, self.sized)
        self.listed, self.sized = [], []
        return out


def test_a_pass_asks_only_about_moves_whose_copies_look_complete(tmp_path: Path) -> None:
    """At a million partitions a pass cannot list every move: it asks for the adding
    replicas' sizes once, and lists (KIP-455 ListPartitionReassignments with a partition set)
    only the moves whose every adding replica holds what the partition held at the start —
    and every move once FULL_CHECK_MS of cluster time have passed since the last full list.
    The clock does not start at zero (a real cluster's is the wall clock)."""
    c = cluster(tmp_path, topics=[{"name": n, "partitions": 1, "replicationFactor": 1,
                                   "sizeBytesPerPartition": s * MB, "assignment": [[0]]}
                                  for n, s in (("small", 1), ("big", 12))])
    small, big = tp("small", 0), tp("big", 0)
    plan, _ = ReassignmentPlan.from_moves([(small, [3]), (big, [4])], limits=Limits(None, 2))
    log = _Requests(c)
    ex = ReassignmentExecutor(log, plan)  # type: ignore[arg-type]
    c.advance(100)
    t0 = c.now
    assert ex.start() == []
    log.take()
    ex.step()  # the first pass lists every move
    assert log.take() == ([[big, small]], [])  # not fought over: nobody else moves them
    c.advance(1)
    ex.step()  # small has copied its 1 MB, big 1 of 12
    assert log.take() == ([[small]], [[(big, 4), (small, 3)]])
    for seconds in (5, 9, FULL_CHECK_MS / 1000 - 0.5):  # big holds 9 of 12 MB at 9 s:
        c.advance(t0 + seconds - c.now)                   # more than half is not all
        ex.step()
        assert log.take() == ([], [[(big, 4)]]), seconds
    c.advance(t0 + FULL_CHECK_MS / 1000 - c.now)
    ex.step()  # ... and every move FULL_CHECK_MS after the last full list
    assert log.take() == ([[big]], [[(big, 4)]])
    c.advance(1)
    ex.step()  # which starts the count again
    assert log.take() == ([], [[(big, 4)]])


def test_the_executor_describes_only_the_partitions_of_its_plan(tmp_path: Path) -> None:
    """Like ReassignPartitionsCommand, which describes the topics of its plan only: at a
    million partitions the executor cannot describe the whole cluster — on start it asks for
    the plan's partitions, and at a pass for the moves that ended."""
    c = cluster(tmp_path, topics=TOPICS)
    t = tp("orders", 0)
    plan, _ = ReassignmentPlan.from_moves([(t, [3, 1, 2])], limits=Limits(None, 1))
    log = _Requests(c)
    ex = ReassignmentExecutor(log, plan)  # type: ignore[arg-type]
    assert ex.start() == []
    assert drive(c, ex, limit=100).phase is Phase.COMPLETED
    assert log.partitions_described == [[t], [t]]  # on start; when the move ended


class _Retention(_Requests):
    """A real cluster whose retention deleted most of the partition during the move: its
    replicas report a tenth of what the partition held when the move started."""

    def replica_log_sizes(self, replicas: Iterable[tuple[TopicPartition, int]]
                          ) -> dict[tuple[TopicPartition, int], int]:
        return {k: v // 10 for k, v in super().replica_log_sizes(replicas).items()}


def test_a_move_finished_after_retention_shrank_the_partition_still_ends(
        tmp_path: Path) -> None:
    """ReassignPartitionsCommand --verify asks the controller (ListPartitionReassignments),
    not the log sizes: a move whose new replica holds less than the partition did at the start
    (retention or compaction ran meanwhile) has still finished once the controller says so, and
    must free its slot instead of holding the run in Running for ever."""
    c = cluster(tmp_path, topics=[{"name": "logs", "partitions": 1, "replicationFactor": 1,
                                   "sizeBytesPerPartition": 5 * MB, "assignment": [[0]]}])
    t = tp("logs", 0)
    plan, _ = ReassignmentPlan.from_moves([(t, [3])], limits=Limits(None, 1))
    ex = ReassignmentExecutor(_Retention(c), plan)  # type: ignore[arg-type]
    assert ex.start() == []
    ex.step()
    run_until(c, lambda: t not in c.list_partition_reassignments())  # the controller is done
    p = ex.step()
    while not p.phase.terminal and c.now < 60:
        c.advance(1)
        p = ex.step()
    assert p.phase is Phase.COMPLETED and p.done == 1, (p.phase, c.now)
    assert c.now <= FULL_CHECK_MS / 1000 + 1


def test_a_shrinking_move_held_by_a_target_replica_out_of_the_isr_stays_in_flight(
        tmp_path: Path) -> None:
    """Kafka 4.4 completes a reassignment with fewer adding than removing replicas only when
    its whole target is in the ISR (PartitionReassignmentReplicas.maybeCompleteReassignment:
    ``adding.size() < removing.size() && !newTargetIsr.containsAll(newTargetReplicas)``).
    [0,1,2] -> [3,1] while 1 is down: the new replica has copied everything but the kept 1
    is out of the ISR, so the move is still the executor's, in flight, not failed, and
    completes once 1 is back. (A move adding as many replicas as it removes completes
    without 1: test_kafka_parity, row 1.)"""
    c = cluster(tmp_path)
    t = tp("orders", 0)
    plan, _ = ReassignmentPlan.from_moves([(t, [3, 1])], limits=Limits(None, 1))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []  # (a plan naming a fenced broker is refused, as Kafka's tool does)
    ex.step()
    c.fail_broker(1)
    run_until(c, lambda: 1 not in next(iter(c.describe_partitions(partitions=[t]))).isr)
    c.advance(15)  # 10 MB at 1 MB/s: replica 3 holds it all
    p = ex.step()
    assert (p.phase, p.moving, p.failed) == (Phase.RUNNING, 1, 0)
    assert p.bytes_moved == p.bytes_total and p.eta_seconds == 0  # nothing left to copy
    assert 3 in c.describe_partitions(partitions=[t])[0].isr
    assert c.list_partition_reassignments()[t].target == (3, 1)
    c.restore_broker(1)
    while not (p := ex.step()).phase.terminal:
        c.advance(1)
    assert p.phase is Phase.COMPLETED and p.done == 1
    assert c.describe_partitions(partitions=[t])[0].replicas == (3, 1)


class _Writes(PassThrough):
    """The embedded cluster, logging every reassignment and config change requested, in
    order: ("alter", {partition: target or None}) and ("configs", {resource: {key: value}})."""

    def __init__(self, c: EmbeddedCluster) -> None:
        self.c = c
        self.log: list[tuple[str, dict[object, object]]] = []

    def alter_partition_reassignments(self, changes: Mapping[TopicPartition, Sequence[int] | None]
                                      ) -> dict[TopicPartition, ApiResult]:
        self.log.append(("alter", {t: None if r is None else tuple(r)
                                   for t, r in changes.items()}))
        return self.c.alter_partition_reassignments(changes)

    def incremental_alter_configs(self, changes: Mapping[tuple[str, str],
                                                         Mapping[str, str | None]]
                                  ) -> dict[tuple[str, str], ApiResult]:
        self.log.append(("configs", {r: dict(kv) for r, kv in changes.items()}))
        return self.c.incremental_alter_configs(changes)

    def targets_sent(self, t: TopicPartition) -> list[tuple[int, ...] | None]:
        return [ch[t] for kind, ch in self.log  # type: ignore[misc]
                if kind == "alter" and t in ch]


def test_moves_in_flight_elsewhere_are_retargeted_throttled_first_and_a_refusal_fails_once(
        tmp_path: Path) -> None:
    """kafka-reassign-partitions --execute --additional sends a new target for a move in
    flight (KIP-455: it replaces the current one), throttling the new replicas first. A new
    target Kafka 4.4 would strand (partition_change.would_strand) is preceded by a cancel:
    here solo's target [3] adds nothing to its move [0] -> [3,4] and drops the adding 4, and
    its only in-sync replica is 3, an adding replica that took over when broker 0 died (a
    plan naming the fenced 0 would be refused outright), so the controller
    refuses the cancel (an unclean revert: INVALID_REPLICA_ASSIGNMENT). That partition fails
    with the controller's reason, its target is never sent, it is not asked again, and the
    plan's other move goes on."""
    c = cluster(tmp_path, topics=[{"name": n, "partitions": 1, "replicationFactor": 1,
                                   "sizeBytesPerPartition": s * MB, "assignment": [[b]]}
                                  for n, s, b in (("solo", 5, 0), ("other", 50, 1))])
    solo, other = tp("solo", 0), tp("other", 0)
    c.fail_broker(4)  # the earlier move's second new replica never catches up
    started = c.alter_partition_reassignments({solo: [3, 4], other: [5]})  # an earlier run
    assert all(r.ok for r in started.values())
    run_until(c, lambda: 3 in c.describe_partitions(partitions=[solo])[0].isr)
    c.fail_broker(0)
    run_until(c, lambda: c.describe_partitions(partitions=[solo])[0].isr == (3,))
    plan, _ = ReassignmentPlan.from_moves([(solo, [3]), (other, [2])],
                                          limits=Limits(MB, 2), additional=True)
    admin = _Writes(c)
    ex = ReassignmentExecutor(admin, plan)  # type: ignore[arg-type]
    assert ex.start() == [] and ex.retarget == [solo, other]
    p = ex.step()
    assert ex.state.failed == {"solo-0": "Unable to revert partition assignment for solo:0 "
                               "because it would require an unclean leader election."}
    assert (p.failed, p.moving, set(ex.moving)) == (1, 1, {other})
    assert [kind for kind, _ in admin.log][:4] == ["configs", "configs", "alter", "alter"]
    follower = admin.log[1][1][("TOPIC", "other")]["follower.replication.throttled.replicas"]
    assert follower == "0:2"  # throttled before the move
    assert admin.log[2:4] == [("alter", {solo: None}), ("alter", {other: (2,)})]
    p = drive(c, ex, limit=200)
    assert p.phase is Phase.FAILED and (p.done, p.failed) == (1, 1)
    assert admin.targets_sent(solo) == [None]  # asked once, and only to cancel
    assert c.list_partition_reassignments()[solo].target == (3, 4)  # left as it was
    assert throttles.placed(c) == {}


def test_a_cancelled_run_rolls_back_the_moves_it_takes_over_without_throttling_them(
        tmp_path: Path) -> None:
    """Cancelled before its first pass, a run that takes over a move in flight elsewhere
    (additional) rolls it back like ReassignPartitionsCommand --cancel. Throttles exist only
    while a movement needs them: this run writes none."""
    c = cluster(tmp_path)
    t0 = tp("orders", 0)
    assert c.alter_partition_reassignments({t0: [3, 1, 2]})[t0].ok
    plan, _ = ReassignmentPlan.from_moves([(t0, [4, 1, 2])], limits=Limits(MB, 1),
                                          additional=True)
    admin = _Writes(c)
    ex = ReassignmentExecutor(admin, plan)  # type: ignore[arg-type]
    assert ex.start() == []
    ex.cancel()
    p = ex.step()
    assert (p.phase, p.cancelled, p.moving) == (Phase.CANCELLED, 1, 0)
    assert [kind for kind, _ in admin.log] == ["alter", "alter"]  # re-target, roll back
    assert admin.targets_sent(t0) == [(4, 1, 2), None]
    assert c.list_partition_reassignments() == {}


def test_a_retarget_that_copies_nothing_is_done_in_the_same_pass(tmp_path: Path) -> None:
    """A new target that needs no copy — here the replicas the partition had before the move
    in flight — would strand the move in Kafka 4.4 (nothing added: the adding 3 would stay
    adding while removing), so the executor cancels it first (the replicas minus the adding
    ones: [1,2,0]) and then sends the target, a reorder that completes at once. The pass
    lists the re-targeted moves once to spot such targets, then asks about the move that
    copies nothing alone and counts it done; the other re-targeted move copies on."""
    c = cluster(tmp_path)
    t0, t1 = tp("orders", 0), tp("orders", 1)
    started = c.alter_partition_reassignments({t0: [3, 1, 2], t1: [4, 2, 0]})  # an earlier run
    assert all(r.ok for r in started.values())
    plan, _ = ReassignmentPlan.from_moves([(t0, [0, 1, 2]), (t1, [5, 2, 0])],
                                          limits=Limits(None, 2), additional=True)
    log = _Requests(c)
    ex = ReassignmentExecutor(log, plan)  # type: ignore[arg-type]
    assert ex.start() == [] and ex.retarget == [t0, t1]
    log.take()
    p = ex.step()
    assert log.take()[0] == [[t0, t1], [t0]]
    assert (p.done, p.moving, ex.done) == (1, 1, {t0})
    assert c.describe_partitions(partitions=[t0])[0].replicas == (0, 1, 2)


class _TrailingBroker(PassThrough):
    """The embedded cluster, but partitions are described as a broker whose metadata trails
    the controller: for ``lag_s`` simulated seconds after a move leaves the controller's list
    of reassignments, the broker still describes its replicas in flight — or, ``before``,
    the replicas from before the move (a broker still creating the new replicas)."""

    def __init__(self, c: EmbeddedCluster, lag_s: float, before: bool = False) -> None:
        self.c, self.lag_s = c, lag_s
        self.in_flight: dict[TopicPartition, tuple[int, ...]] = {}
        self.ended_at: dict[TopicPartition, float] = {}
        self.before = before

    def alter_partition_reassignments(self, changes: Mapping[TopicPartition, Sequence[int] | None]
                                      ) -> dict[TopicPartition, ApiResult]:
        earlier = {d.tp: d.replicas for d in self.c.describe_partitions(partitions=list(changes))}
        results = self.c.alter_partition_reassignments(changes)
        listing = self.c.list_partition_reassignments(list(changes))
        self.in_flight.update({t: earlier[t] if self.before else o.replicas
                               for t, o in listing.items()})
        return results

    def describe_partitions(self, *args: Any, **kw: Any) -> list[PartitionDescription]:
        out = []
        for d in self.c.describe_partitions(*args, **kw):
            if d.tp in self.in_flight and not (d.adding or d.removing):
                ended = self.ended_at.setdefault(d.tp, self.c.now)
                if self.c.now - ended < self.lag_s:
                    d = d._replace(replicas=self.in_flight[d.tp])
            out.append(d)
        return out


@pytest.mark.parametrize("before", [False, True], ids=["in-flight", "before-the-move"])
@pytest.mark.parametrize("lag_s, completes", [(5.0, True), (120.0, False)])
def test_a_broker_trailing_the_controller_delays_a_completion_but_never_fails_it(
        tmp_path: Path, lag_s: float, completes: bool, before: bool) -> None:
    """On a real cluster the controller lists a move as ended a moment before the brokers'
    metadata shows its final replicas (1,000 moves completing at once on Kafka 4.4: 643 were
    failed as "ended outside kraftsman" with the in-flight replicas [2, 3, 1, 0]). A
    description that still holds more replicas than the target is asked again, for up to
    METADATA_PROPAGATION_MS; a move that stays so is another tool's doing."""
    c = cluster(tmp_path)
    t0 = tp("orders", 0)
    plan, _ = ReassignmentPlan.from_moves([(t0, [3, 1, 2])], limits=Limits(None, 1))
    ex = ReassignmentExecutor(_TrailingBroker(c, lag_s, before), plan)  # type: ignore[arg-type]
    assert ex.start() == []
    p = drive(c, ex, limit=400)
    if completes:
        assert (p.phase, p.done, p.failed) == (Phase.COMPLETED, 1, 0)
    else:
        shown = "[0, 1, 2]" if before else "[3, 1, 2, 0]"
        assert (p.phase, p.failed) == (Phase.FAILED, 1)
        assert ex.state.failed == {"orders-0": "orders-0: the move ended outside kraftsman with "
                                   f"replicas {shown}, not [3, 1, 2]"}
