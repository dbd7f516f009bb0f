"""Issue 11's scenarios where kraftsman differed from Apache Kafka's controller: each test is
named after its scenario and follows the Kafka class its docstring cites."""

from __future__ import annotations

from pathlib import Path
from random import Random

import pytest
from kafka import KafkaAdminClient

from controller_core import admin as words
from controller_core import errors
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.errors import ApiResult
from controller_core.metadata import partition_change as pc
from controller_core.metadata.controller import Controller
from controller_core.metadata.image import MetadataImage
from controller_core.metadata.records import BrokerFencingRecord, PartitionChangeRecord, Record
from controller_core.model import NO_LEADER, ElectionType, PartitionRegistration, TopicPartition
from kraftsman.cli import main
from tests.helpers import cluster, run_until, tp
from tests.serve.harness import served

TP = TopicPartition("orders", 0)
T0 = tp("orders", 0)  # replicas [0, 1, 2], 10 MB, brokers fetch at 1 MB/s


def _after(p: PartitionRegistration, c: PartitionChangeRecord | ApiResult | None
           ) -> PartitionRegistration:
    assert isinstance(c, PartitionChangeRecord), c
    return pc.after(p, c)


def test_target_replica_dies_while_the_adding_one_catches_up_the_move_waits(
        tmp_path: Path) -> None:
    """Row 1. R[0,1,2] -> TR[0,1,3]; broker 1 dies; 3 catches up. Kafka's
    PartitionReassignmentReplicas.maybeCompleteReassignment completes only when
    ``newTargetIsr.containsAll(newTargetReplicas)``: the move waits with R=[0,1,3,2] and the
    in-sync 2 kept, instead of finishing on an under-replicated [0,1,3] without 2."""
    c = cluster(tmp_path)
    c.fail_broker(1)
    assert c.alter_partition_reassignments({T0: [0, 1, 3]})[T0].ok
    c.advance(30)  # 1 is fenced, 3 has copied the 10 MB
    p = c.image.partition(T0)
    assert p is not None
    assert p.replicas == (0, 1, 3, 2) and set(p.isr) == {0, 2, 3}
    assert p.adding == (3,) and p.removing == (2,)
    assert T0 in c.list_partition_reassignments()
    c.restore_broker(1)  # the target replica comes back and catches up: now it completes
    run_until(c, lambda: T0 not in c.list_partition_reassignments())
    p = c.image.partition(T0)
    assert p is not None and p.replicas == (0, 1, 3) and set(p.isr) == {0, 1, 3}


def test_adding_leader_only_in_sync_with_originals_dead_retarget_keeping_it_is_accepted() -> None:
    """Row 2. The adding replica 4 leads and is the only in-sync replica; the originals are
    dead. ReplicationControlManager.changePartitionReassignment starts from the partition's
    ISR and leader, so a re-target that keeps 4 goes through (it is not stuck for good);
    only a target that drops the adding leader with nothing to replace it is refused
    (KAFKA-14808)."""
    p = PartitionRegistration((4, 5, 6, 1, 2, 3), (4,), 4, 7, 9, (4, 5, 6), (1, 2, 3))
    live = frozenset({4, 5, 7})
    kept = _after(p, pc.start_reassignment(TP, p, [4, 5, 7], live))
    assert (kept.leader, kept.isr) == (4, (4,))
    assert (kept.replicas, kept.adding, kept.removing) == ((4, 5, 7, 1, 2, 3), (4, 5, 7),
                                                           (1, 2, 3))
    dropped = pc.start_reassignment(TP, p, [5, 7, 1], live)
    assert isinstance(dropped, ApiResult)
    assert dropped.error == errors.ELIGIBLE_LEADERS_NOT_AVAILABLE and "4" in dropped.message
    # and the accepted move finishes once its target is in sync
    for r in (5, 7):
        kept = _after(kept, pc.expand_isr(TP, kept, r, live))
    done = _after(kept, pc.maybe_complete_reassignment(TP, kept, live))
    assert (done.replicas, done.leader, done.adding, done.removing) == ((4, 5, 7), 4, (), ())


def test_retarget_of_a_moving_partition_keeps_caught_up_replicas_and_the_leader() -> None:
    """Row 3. [1,2,3] -> [4,5,3] with 4 caught up and leading, then re-targeted to [4,6,3].
    As ReplicationControlManager/PartitionChangeBuilder (targetIsr and the leader start from
    the partition's), 4 stays in the ISR and keeps leading; the dropped 5 is fenced by an
    epoch bump; the same target again changes nothing, not even the epoch."""
    p = PartitionRegistration((4, 5, 3, 1, 2), (1, 2, 3, 4), 4, 5, 8, (4, 5), (1, 2))
    live = frozenset(range(10))
    out = pc.start_reassignment(TP, p, [4, 6, 3], live)
    q = _after(p, out)
    assert q.isr == (1, 2, 3, 4) and q.leader == 4
    assert (q.replicas, q.adding, q.removing) == ((4, 6, 3, 1, 2), (4, 6), (1, 2))
    assert q.leader_epoch == p.leader_epoch + 1
    assert pc.start_reassignment(TP, q, [4, 6, 3], live) is None


def test_identical_resubmit_on_the_cluster_does_not_bump_the_epoch(tmp_path: Path) -> None:
    """Row 3, through the controller (ReplicationControlManager emits no record when the
    builder finds nothing to change): resubmitting the target in flight is a no-op."""
    c = cluster(tmp_path)
    assert c.alter_partition_reassignments({T0: [3, 1, 2]})[T0].ok
    c.advance(2)
    before = c.image.partition(T0)
    offset = c.image.next_offset
    assert c.alter_partition_reassignments({T0: [3, 1, 2]})[T0].ok
    assert c.image.partition(T0) == before and c.image.next_offset == offset


def test_elect_leaders_without_partitions_on_a_balanced_cluster_answers_nothing(
        tmp_path: Path) -> None:
    """Row 7. ReplicationControlManager.electLeaders, with no partition set, leaves out the
    partitions that already have the desired leader; an election that happens is listed."""
    c = cluster(tmp_path)
    assert c.elect_leaders(ElectionType.PREFERRED, None).results == {}
    c.fail_broker(0)
    c.advance(10)
    c.restore_broker(0)
    c.advance(30)
    out = c.elect_leaders(ElectionType.PREFERRED, None)
    assert out.results and all(r.ok for r in out.results.values())
    assert {t.partition for t in out.results} == {0, 3}  # the partitions 0 prefers
    assert c.elect_leaders(ElectionType.PREFERRED, None).results == {}


def test_replica_on_a_dead_fenced_broker_out_of_the_isr_is_not_in_sync(tmp_path: Path) -> None:
    """Row 8. KIP-179's "in sync" for a replica on a dead, fenced broker that left the ISR was
    earned by a lag of 0 on a partition with no producer. Kafka's ISR (maintained by
    ReplicationControlManager on fencing) is what "in sync" means: it is offline."""
    c = cluster(tmp_path)
    c.fail_broker(1)
    c.advance(10)
    p = c.image.partition(T0)
    assert p is not None and 1 not in p.isr
    [status] = c.replica_status([(T0, 1)])
    assert status.status == words.OFFLINE and status.status != words.IN_SYNC
    [healthy] = c.replica_status([(T0, 0)])
    assert healthy.status == words.IN_SYNC


# -- leader and partition epochs (PartitionChangeBuilder.build, current metadata version) --------
def _epochs(c: EmbeddedCluster) -> tuple[int, int]:
    p = c.image.partition(T0)
    assert p is not None
    return p.leader_epoch, p.partition_epoch


def test_add_only_move_start_keeps_the_leader_epoch(tmp_path: Path) -> None:
    """[0,1,2] -> [0,1,2,3]: R grows to [0,1,2,3] and keeps every replica, so
    PartitionChangeBuilder.triggerLeaderEpochBumpForReplicaReassignmentIfNeeded leaves the
    leader field unset: the leader epoch stays, the partition epoch bumps (every
    PartitionChangeRecord bumps it: PartitionRegistration.merge)."""
    c = cluster(tmp_path)
    leader_epoch, partition_epoch = _epochs(c)
    assert c.alter_partition_reassignments({T0: [0, 1, 2, 3]})[T0].ok
    p = c.image.partition(T0)
    assert p is not None and (p.replicas, p.adding, p.removing) == ((0, 1, 2, 3), (3,), ())
    assert _epochs(c) == (leader_epoch, partition_epoch + 1)


def test_add_only_move_completion_keeps_the_leader_epoch(tmp_path: Path) -> None:
    """The add-only move completes when 3 joins the ISR, in the same record as that ISR
    expansion (PartitionChangeBuilder.build runs completeReassignmentIfNeeded): no replica
    leaves and the leader stays, so the leader epoch never bumps; two records in all."""
    c = cluster(tmp_path)
    leader_epoch, partition_epoch = _epochs(c)
    assert c.alter_partition_reassignments({T0: [0, 1, 2, 3]})[T0].ok
    run_until(c, lambda: T0 not in c.list_partition_reassignments())
    p = c.image.partition(T0)
    assert p is not None and p.replicas == (0, 1, 2, 3) and set(p.isr) == {0, 1, 2, 3}
    assert _epochs(c) == (leader_epoch, partition_epoch + 2)


def test_move_removing_a_replica_bumps_the_leader_epoch_at_completion_not_at_start(
        tmp_path: Path) -> None:
    """[0,1,2] -> [0,1,3]: the start writes R = [0,1,3,2] (TR + RR, nothing leaves: no
    bump); completion writes R = [0,1,3] without 2, and
    PartitionChangeBuilder.triggerLeaderEpochBumpForReplicaReassignmentIfNeeded bumps the
    leader epoch once to fence 2, though the leader 0 stays."""
    c = cluster(tmp_path)
    leader_epoch, partition_epoch = _epochs(c)
    assert c.alter_partition_reassignments({T0: [0, 1, 3]})[T0].ok
    p = c.image.partition(T0)
    assert p is not None and (p.replicas, p.removing) == ((0, 1, 3, 2), (2,))
    assert _epochs(c) == (leader_epoch, partition_epoch + 1)
    run_until(c, lambda: T0 not in c.list_partition_reassignments())
    p = c.image.partition(T0)
    assert p is not None and (p.replicas, p.leader) == ((0, 1, 3), 0)
    assert _epochs(c) == (leader_epoch + 1, partition_epoch + 2)


def test_cancel_that_drops_adding_replicas_bumps_the_leader_epoch(tmp_path: Path) -> None:
    """Cancelling [0,1,2] -> [0,1,3]: PartitionReassignmentRevert's replicas [0,1,2] lack the
    adding 3, so PartitionChangeBuilder bumps the leader epoch to fence it."""
    c = cluster(tmp_path)
    leader_epoch, partition_epoch = _epochs(c)
    assert c.alter_partition_reassignments({T0: [0, 1, 3]})[T0].ok
    assert c.alter_partition_reassignments({T0: None})[T0].ok
    p = c.image.partition(T0)
    assert p is not None and (p.replicas, p.leader, p.is_reassigning) == ((0, 1, 2), 0, False)
    assert _epochs(c) == (leader_epoch + 1, partition_epoch + 2)


def test_cancel_of_a_remove_only_move_keeps_the_leader_epoch(tmp_path: Path) -> None:
    """[0,1,2] -> [0,1] waits while 1 is out of the ISR; its cancel (PartitionReassignmentRevert
    of a move with no adding replicas) keeps R = [0,1,2]: no replica leaves, the leader 0
    stays, so PartitionChangeBuilder does not bump the leader epoch."""
    c = cluster(tmp_path)
    c.fail_broker(1)
    c.advance(10)  # 1 is fenced: out of the ISR
    leader_epoch, partition_epoch = _epochs(c)
    assert c.alter_partition_reassignments({T0: [0, 1]})[T0].ok
    p = c.image.partition(T0)
    assert p is not None and (p.replicas, p.removing, p.isr) == ((0, 1, 2), (2,), (0, 2))
    assert c.alter_partition_reassignments({T0: None})[T0].ok
    p = c.image.partition(T0)
    assert p is not None and (p.replicas, p.is_reassigning) == ((0, 1, 2), False)
    assert _epochs(c) == (leader_epoch, partition_epoch + 2)


def test_isr_shrink_and_expand_keep_the_leader_epoch(tmp_path: Path) -> None:
    """Follower 1 is fenced (out of the ISR) and comes back (into it): two records, each
    bumping the partition epoch only. PartitionChangeBuilder.triggerLeaderEpochBumpForIsr-
    ShrinkIfNeeded bumps on a shrink only below metadata version 3.6 (KAFKA-15021); an
    expansion never did."""
    c = cluster(tmp_path)
    leader_epoch, partition_epoch = _epochs(c)
    c.fail_broker(1)
    c.advance(10)
    p = c.image.partition(T0)
    assert p is not None and p.isr == (0, 2) and p.leader == 0
    assert _epochs(c) == (leader_epoch, partition_epoch + 1)
    c.restore_broker(1)
    run_until(c, lambda: 1 in c.image.partition(T0).isr)  # type: ignore[union-attr]
    assert _epochs(c) == (leader_epoch, partition_epoch + 2)


def test_leader_change_bumps_both_epochs_once(tmp_path: Path) -> None:
    """The leader 0 is fenced: one record moves leadership and shrinks the ISR, and bumps the
    leader epoch once (PartitionChangeBuilder.tryElection sets the leader; merge adds one);
    the preferred election back bumps it again."""
    c = cluster(tmp_path)
    leader_epoch, partition_epoch = _epochs(c)
    c.fail_broker(0)
    c.advance(10)
    p = c.image.partition(T0)
    assert p is not None and p.leader == 1 and 0 not in p.isr
    assert _epochs(c) == (leader_epoch + 1, partition_epoch + 1)
    c.restore_broker(0)
    run_until(c, lambda: 0 in c.image.partition(T0).isr)  # type: ignore[union-attr]
    assert c.elect_leaders(ElectionType.PREFERRED, [T0]).results[T0].ok
    assert _epochs(c) == (leader_epoch + 2, partition_epoch + 3)


# -- completion without a live in-sync target replica (PartitionChangeBuilder.tryElection) -------
def test_move_of_an_offline_partition_onto_its_in_sync_replica_completes_leaderless(
        tmp_path: Path) -> None:
    """Brokers 1, 2 then 0 fail: orders-0 is offline with ISR [0] (the last member stays, no
    leader). A move to [0] has its whole target in sync, so
    PartitionChangeBuilder.completeReassignmentIfNeeded completes it at once and tryElection
    finds no acceptable leader: R = [0], no leader, the leader epoch bumped for the removed
    1 and 2. Waiting instead would not have kept the partition any more available; it leads
    again as soon as 0 is back."""
    c = cluster(tmp_path)
    for b in (1, 2):
        c.fail_broker(b)
    c.advance(10)
    c.fail_broker(0)
    c.advance(10)
    offline = c.image.partition(T0)
    assert offline is not None and (offline.isr, offline.leader) == ((0,), NO_LEADER)
    assert c.alter_partition_reassignments({T0: [0]})[T0].ok
    p = c.image.partition(T0)
    assert p is not None
    assert (p.replicas, p.isr, p.leader, p.is_reassigning) == ((0,), (0,), NO_LEADER, False)
    assert p.leader_epoch == offline.leader_epoch + 1
    assert T0 not in c.list_partition_reassignments()
    c.restore_broker(0)
    c.advance(1)
    p = c.image.partition(T0)
    assert p is not None and p.leader == 0


# -- manual assignments (ReplicationControlManager.validateManualPartitionAssignment) ------------
class _Controller:
    """A controller over an image of brokers 0-2 (2 fenced); ``log`` holds what it wrote."""

    def __init__(self) -> None:
        self.image = MetadataImage()
        self.log: list[Record] = []
        self.controller = Controller(self.image, self._emit)
        for b in range(3):
            self.controller.register_broker(b, None)
        self.controller.fence_broker(2)

    def _emit(self, record: Record) -> None:
        self.image.apply(record)
        self.log.append(record)

    def create(self, assignment: list[list[int]], validate_only: bool = False) -> ApiResult:
        return self.controller.create_topic("t", len(assignment), 0, rng=Random(0),
                                            assignment=assignment, validate_only=validate_only)


def test_manual_assignment_with_inconsistent_replica_counts_is_refused() -> None:
    """ReplicationControlManager.createTopic checks each partition against the previous
    one's replica count (validateManualPartitionAssignment): INVALID_REPLICA_ASSIGNMENT with
    Kafka's words, naming the partition; nothing is written, not even in validate-only."""
    h = _Controller()
    for validate_only in (True, False):
        out = h.create([[0, 1], [1, 0], [0]], validate_only)
        assert out == ApiResult(
            errors.INVALID_REPLICA_ASSIGNMENT,
            "topic 't', partition 2: the manual partition assignment includes a partition with "
            "1 replica(s), but this is not consistent with previous partitions, which have 2 "
            "replica(s); give every partition the same number of replicas")
    assert h.log[-1] == BrokerFencingRecord(2, True) and "t" not in h.image.topics
    written = len(h.log)
    assert h.create([[0, 1], [1, 2]], validate_only=True).ok and len(h.log) == written
    assert h.create([[0, 1], [1, 2]]).ok
    assert [p.replicas for p in h.image.topics["t"].partitions] == [(0, 1), (1, 2)]


def test_manual_assignment_empty_unknown_or_repeated_broker_is_refused() -> None:
    """validateManualPartitionAssignment's other refusals, in its order: an empty list; then,
    over the ids in ascending order, the first not registered (a negative id is one) or seen
    twice. Each is INVALID_REPLICA_ASSIGNMENT naming the partition and the broker."""
    h = _Controller()
    cases = {
        "partition 1: the manual partition assignment includes an empty replica list; give "
        "every partition at least one broker": [[0], []],
        "partition 0: the manual partition assignment includes broker -1, but no such broker "
        "is registered; the cluster has [0, 1, 2]": [[1, -1]],
        "partition 0: the manual partition assignment includes the broker 1 more than once; "
        "list each broker once": [[9, 1, 1]],
        "partition 0: the manual partition assignment includes broker 9, but no such broker "
        "is registered; the cluster has [0, 1, 2]": [[9, 9, 1]],
        "all brokers specified in the manual partition assignment for partition 1 are fenced "
        "[2]; assign live brokers": [[0], [2]],
    }
    for message, assignment in cases.items():
        out = h.create(assignment)
        assert out.error == errors.INVALID_REPLICA_ASSIGNMENT, (assignment, out)
        assert out.message.endswith(message), (assignment, out.message)
    assert "t" not in h.image.topics



def test_validate_only_create_topic_checks_placement_and_writes_nothing() -> None:
    """CreateTopics with validateOnly runs ReplicationControlManager.createTopic's checks and
    drops the records: a replication factor above the live brokers is refused as usual, a
    valid one answers OK, and neither writes a record nor draws from the cluster's seeded
    RNG (a later placement is the one it would have been without the dry run)."""
    h = _Controller()
    rng = Random(7)
    state, written = rng.getstate(), len(h.log)
    too_many = h.controller.create_topic("auto", 2, 3, rng=rng, validate_only=True)
    assert too_many.error == errors.INVALID_REPLICATION_FACTOR
    assert h.controller.create_topic("auto", 2, 2, rng=rng, validate_only=True).ok
    assert rng.getstate() == state and len(h.log) == written and "auto" not in h.image.topics

class _Pairs:
    """Assignments as (partition, replicas) pairs, so one partition can be given twice."""

    def __init__(self, *pairs: tuple[int, list[int]]) -> None:
        self.pairs = pairs

    def items(self) -> tuple[tuple[int, list[int]], ...]:
        return self.pairs


def test_create_topics_over_the_wire_refuses_inconsistent_manual_assignments(
        tmp_path: Path) -> None:
    """`cluster serve`'s CreateTopics, driven by kafka-python, answers as a KRaft controller:
    INVALID_REPLICA_ASSIGNMENT (39) for replica lists of different lengths, for a partition
    given twice ("Found multiple manual partition assignments for partition 0"), for indexes
    that are not 0..n-1, and for an empty list (not INVALID_REPLICATION_FACTOR); a consistent
    one is created. validate_only refuses the same and creates nothing."""
    with served(cluster(tmp_path), time_scale=0) as server:
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=5000)
        try:
            def create(assignments: object, validate_only: bool = False) -> tuple[int, str]:
                out = admin.create_topics({"t": {"assignments": assignments}},
                                          validate_only=validate_only, raise_errors=False)
                [topic] = out["topics"]
                return topic["error_code"], topic["error_message"] or ""

            for validate_only in (True, False):
                code, message = create({0: [0, 1, 2], 1: [1, 2]}, validate_only)
                assert code == 39 and "includes a partition with 2 replica(s), but this is not " \
                    "consistent with previous partitions, which have 3 replica(s)" in message
            assert create(_Pairs((0, [0, 1]), (0, [1, 2]))) == (
                39, "Found multiple manual partition assignments for partition 0")
            assert create({0: [0, 1], 2: [1, 2]}) == (
                39, "partitions should be a consecutive 0-based integer sequence")
            code, message = create({0: []})
            assert code == 39 and "empty replica list" in message
            assert "t" not in server.call(lambda: set(server.cluster.image.topics))
            assert create({0: [0, 1], 1: [1, 2]}, validate_only=True) == (0, "")
            assert "t" not in server.call(lambda: set(server.cluster.image.topics))
            assert create({0: [0, 1], 1: [1, 2]}) == (0, "")
            assert server.call(lambda: [p.replicas for p in server.cluster.image.topics[
                "t"].partitions]) == [(0, 1), (1, 2)]
        finally:
            admin.close()


def test_kafka_cluster_topic_with_inconsistent_manual_assignment_is_refused_by_apply(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`kraftsman apply` of a KafkaCluster whose topic assignment has lists of different
    lengths (ReplicationControlManager.validateManualPartitionAssignment refuses those):
    exit 2, one line naming the file, resource and field; no cluster is created."""
    f = tmp_path / "c.yaml"
    f.write_text("""
apiVersion: kraftsman.io/v1alpha1
kind: KafkaCluster
metadata: {name: demo}
spec:
  embedded:
    brokers: [{id: 0}, {id: 1}, {id: 2}]
    topics: [{name: orders, partitions: 2, replicationFactor: 2, assignment: [[0, 1], [1]]}]
""")
    state = tmp_path / "state"
    assert main(["apply", "-f", str(f), "--state-dir", str(state)]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: {f}: KafkaCluster/demo: spec.embedded.topics[0]: assignment[1] "
                   "must list 2 distinct brokers\n")
    assert main(["describe", "cluster", "--state-dir", str(state)]) == 2
    assert capsys.readouterr().err.startswith(f"error: no cluster in {state}")
