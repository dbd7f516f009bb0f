"""Issue 11's scenarios where kraftsman differed from Apache Kafka's controller: each test is
named after its scenario and follows the Kafka 4.4 class its docstring cites (and, where one
exists, the differential scenario of tests/diff/scenarios.py that saw it on a real cluster)."""

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
RULES = pc.Rules()  # Kafka 4.4's defaults: min.insync.replicas 1, ELR on, no unclean


def _alive(*ids: int) -> pc.Acceptable:
    return lambda r: r in ids


ALL = _alive(*range(10))


def _after(p: PartitionRegistration, c: PartitionChangeRecord | ApiResult | None
           ) -> PartitionRegistration:
    assert isinstance(c, PartitionChangeRecord), c
    return pc.after(p, c)


def test_target_replica_dies_while_the_adding_one_catches_up_the_move_completes(
        tmp_path: Path) -> None:
    """Row 1, as Kafka 4.4 does it (differential scenario broker-failure). R[0,1,2] ->
    TR[0,1,3]; broker 1 dies; 3 catches up. PartitionReassignmentReplicas.
    maybeCompleteReassignment waits only for the adding replicas (here one adding, one
    removing: ``adding.size() < removing.size()`` is false, so the whole target need not be
    in sync): the move completes on [0,1,3] with 1 out of the ISR, fencing the removed 2 by
    one leader-epoch bump; 1 rejoins the ISR when it is back."""
    c = cluster(tmp_path)
    c.fail_broker(1)
    assert c.alter_partition_reassignments({T0: [0, 1, 3]})[T0].ok
    p = c.image.partition(T0)
    assert p is not None and (p.replicas, p.adding, p.removing) == ((0, 1, 3, 2), (3,), (2,))
    c.advance(30)  # 1 is fenced, 3 has copied the 10 MB
    p = c.image.partition(T0)
    assert p is not None and T0 not in c.list_partition_reassignments()
    assert (p.replicas, p.isr, p.leader, p.leader_epoch) == ((0, 1, 3), (0, 3), 0, 1)
    c.restore_broker(1)  # the target replica comes back and catches up
    run_until(c, lambda: 1 in c.image.partition(T0).isr)  # type: ignore[union-attr]
    p = c.image.partition(T0)
    assert p is not None and (p.replicas, p.isr) == ((0, 1, 3), (0, 1, 3))


def test_retarget_while_the_adding_leader_is_the_only_in_sync_replica_is_accepted() -> None:
    """Row 2. The adding replica 4 leads and is the only in-sync replica; the originals are
    dead. ReplicationControlManager.changePartitionReassignment (Kafka 4.4) refuses no new
    target for dropping the leader or every in-sync replica (the KAFKA-14808 refusals are
    gone): both re-targets are accepted, and 4 keeps leading — as an adding replica of the
    one, as a removing replica of the other (a dropped replica stays in R until the move
    completes). The one that keeps 4 completes once its whole target is in sync (one
    adding replica, four removing: ``adding.size() < removing.size()``)."""
    p = PartitionRegistration((4, 5, 6, 1, 2, 3), (4,), 4, 7, 9, (4, 5, 6), (1, 2, 3))
    live = _alive(4, 5, 7)
    kept = _after(p, pc.change_reassignment(TP, p, [4, 5, 7], live, RULES))
    assert (kept.leader, kept.leader_epoch, kept.isr) == (4, 7, (4,))
    assert (kept.replicas, kept.adding, kept.removing) == ((4, 5, 7, 1, 2, 3, 6), (7,),
                                                           (1, 2, 3, 6))
    dropped = _after(p, pc.change_reassignment(TP, p, [5, 7, 1], live, RULES))
    assert (dropped.leader, dropped.leader_epoch, dropped.isr) == (4, 7, (4,))
    assert (dropped.replicas, dropped.adding, dropped.removing) == ((5, 7, 1, 2, 3, 4, 6), (7,),
                                                                    (2, 3, 4, 6))
    kept = _after(kept, pc.alter_isr(TP, kept, [4, 7], live, RULES))
    assert kept.is_reassigning  # 5 of the target is not in sync yet
    done = _after(kept, pc.alter_isr(TP, kept, [4, 5, 7], live, RULES))
    assert (done.replicas, done.isr, done.leader, done.adding, done.removing) == (
        (4, 5, 7), (4, 5, 7), 4, (), ())
    assert done.leader_epoch == 8  # 1, 2, 3 and 6 left the replica set


def test_retarget_of_a_moving_partition_keeps_caught_up_replicas_and_the_leader() -> None:
    """Row 3, Kafka 4.4 (differential scenario retarget). [1,2,3] -> [4,5,3] with 4 caught
    up and leading, then re-targeted to [4,6,3]. changePartitionReassignment computes the
    new lists against the current R [4,5,3,1,2]: adding [6], removing [1,2,5] (sorted), so
    the dropped 5 stays in R as a removing replica and nothing leaves R yet — the ISR, the
    leader and the leader epoch stay; the same target again changes nothing. The move
    completes once 6 is in sync (fewer adding than removing: the whole target), and only
    then are 1, 2 and 5 fenced by one leader-epoch bump."""
    p = PartitionRegistration((4, 5, 3, 1, 2), (1, 2, 3, 4), 4, 5, 8, (4, 5), (1, 2))
    q = _after(p, pc.change_reassignment(TP, p, [4, 6, 3], ALL, RULES))
    assert (q.isr, q.leader, q.leader_epoch, q.partition_epoch) == ((1, 2, 3, 4), 4, 5, 9)
    assert (q.replicas, q.adding, q.removing) == ((4, 6, 3, 1, 2, 5), (6,), (1, 2, 5))
    assert pc.change_reassignment(TP, q, [4, 6, 3], ALL, RULES) is None
    done = _after(q, pc.alter_isr(TP, q, pc.hash_order([*q.isr, 6]), ALL, RULES))
    assert (done.replicas, done.isr, done.leader, done.leader_epoch) == ((4, 6, 3), (3, 4, 6),
                                                                         4, 6)


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


# -- a move of an offline partition (KIP-966 eligible leader replicas) ----------------------------
def _offline(c: EmbeddedCluster) -> PartitionRegistration:
    """Brokers 1, 2 then 0 fail: orders-0 loses its whole ISR, 0 last."""
    for b in (1, 2):
        c.fail_broker(b)
    c.advance(10)
    c.fail_broker(0)
    c.advance(10)
    p = c.image.partition(T0)
    assert p is not None
    return p


def test_move_of_an_offline_partition_onto_its_last_leader_waits_for_it(tmp_path: Path) -> None:
    """With ELR (KIP-966, on by default in Kafka 4.x) fencing the last in-sync replica 0
    empties the ISR: 0 becomes an eligible leader replica and the last known leader. A move
    to [0] then cannot complete (PartitionReassignmentReplicas.maybeCompleteReassignment
    needs a non-empty ISR without the removing replicas): it waits with R [0,1,2], removing
    [1,2]. Broker 0 restarts after its crash, so it leaves the ELR (its unflushed data is
    not trusted) and is elected again as the last known leader, uncleanly, with ISR [0] —
    an election, which does not complete a move (completeReassignmentIfNeeded runs before
    tryElection). The next ISR change completes it: 1 returns and joins the ISR, and the
    move ends on [0], fencing 1 and 2 by a leader-epoch bump."""
    c = cluster(tmp_path)
    offline = _offline(c)
    assert (offline.isr, offline.leader, offline.elr, offline.last_known_elr) == (
        (), NO_LEADER, (0,), (0,))
    assert c.alter_partition_reassignments({T0: [0]})[T0].ok
    p = c.image.partition(T0)
    assert p is not None and (p.replicas, p.isr, p.leader, p.removing) == (
        (0, 1, 2), (), NO_LEADER, (1, 2))
    assert p.leader_epoch == offline.leader_epoch and T0 in c.list_partition_reassignments()
    c.restore_broker(0)
    c.advance(1)
    p = c.image.partition(T0)
    assert p is not None and (p.isr, p.leader, p.elr, p.last_known_elr, p.removing) == (
        (0,), 0, (), (), (1, 2))
    assert p.leader_epoch == offline.leader_epoch + 1
    c.restore_broker(1)
    run_until(c, lambda: T0 not in c.list_partition_reassignments())
    p = c.image.partition(T0)
    assert p is not None and (p.replicas, p.isr, p.leader) == ((0,), (0,), 0)
    assert p.leader_epoch == offline.leader_epoch + 2


def test_move_of_an_offline_partition_without_elr_completes_leaderless(tmp_path: Path) -> None:
    """Without ELR (eligible.leader.replicas.version 0) the last in-sync replica stays in the
    ISR when it is fenced, so the whole target [0] of the move is in sync:
    completeReassignmentIfNeeded completes it at once and tryElection finds no acceptable
    leader — R = [0], no leader, the leader epoch bumped for the removed 1 and 2. It leads
    again as soon as 0 is back."""
    c = cluster(tmp_path, eligibleLeaderReplicas=False)
    offline = _offline(c)
    assert (offline.isr, offline.leader, offline.elr) == ((0,), NO_LEADER, ())
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
    one's replica count (validateManualPartitionAssignment): INVALID_REPLICA_ASSIGNMENT in
    Kafka 4.4's exact words (which do not name the partition); nothing is written, not even
    in validate-only."""
    h = _Controller()
    for validate_only in (True, False):
        out = h.create([[0, 1], [1, 0], [0]], validate_only)
        assert out == ApiResult(
            errors.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes a partition with 1 replica(s), but this "
            "is not consistent with previous partitions, which have 2 replica(s).")
    assert h.log[-1] == BrokerFencingRecord(2, True) and "t" not in h.image.topics
    written = len(h.log)
    assert h.create([[0, 1], [1, 2]], validate_only=True).ok and len(h.log) == written
    assert h.create([[0, 1], [1, 2]]).ok
    assert [p.replicas for p in h.image.topics["t"].partitions] == [(0, 1), (1, 2)]


def test_manual_assignment_empty_unknown_or_repeated_broker_is_refused() -> None:
    """validateManualPartitionAssignment's other refusals, in its order: an empty list; then,
    over the ids in ascending order, the first not registered (a negative id is one) or seen
    twice; and createTopic's own for a partition none of whose brokers is active. Each is
    INVALID_REPLICA_ASSIGNMENT in Kafka 4.4's exact words; nothing is created."""
    h = _Controller()
    cases = {
        "The manual partition assignment includes an empty replica list.": [[0], []],
        "The manual partition assignment includes broker -1, but no such broker is "
        "registered.": [[1, -1]],
        "The manual partition assignment includes the broker 1 more than once.": [[9, 1, 1]],
        "The manual partition assignment includes broker 9, but no such broker is "
        "registered.": [[9, 9, 1]],
        "All brokers specified in the manual partition assignment for partition 1 are fenced "
        "or in controlled shutdown.": [[0], [2]],
    }
    for message, assignment in cases.items():
        assert h.create(assignment) == ApiResult(errors.INVALID_REPLICA_ASSIGNMENT, message), \
            assignment
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
