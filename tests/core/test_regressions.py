"""Regression tests for core bugs the property tests (test_properties.py) found.

Each test is the minimal history hypothesis shrank the failure to, asserting the behaviour
the fix restored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from controller_core.config import EmbeddedClusterSpec
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.errors import KafkaApiError
from controller_core.model import NO_LEADER, ElectionType, TopicPartition

T0 = TopicPartition("orders", 0)


def _spec(brokers: list[int], assignment: list[list[int]], **extra: Any) -> EmbeddedClusterSpec:
    doc: dict[str, Any] = {
        "brokers": [{"id": b} for b in brokers],
        "topics": [{"name": "orders", "partitions": len(assignment),
                    "replicationFactor": len(assignment[0]), "assignment": assignment,
                    "sizeBytesPerPartition": 0, "messageBytes": 100}],
        "replicaLagTimeMaxMs": 1_000,
        "brokerSessionTimeoutMs": 500,
    }
    for topic in doc["topics"]:
        topic.update(extra.pop("topic", {}))
    doc.update(extra)
    return EmbeddedClusterSpec.model_validate(doc)


def test_an_unclean_election_of_the_adding_replica_leaves_the_move_to_the_next_isr_change(
        tmp_path: Path) -> None:
    """Found against the pre-4.4 controller (a move that stayed open for ever). Kafka 4.4's
    PartitionChangeBuilder.build completes a reassignment before it elects
    (completeReassignmentIfNeeded, then tryElection), so an unclean election that makes
    the adding replica 0 the partition's only in-sync replica and leader leaves the move in
    flight, and a leader sends AlterPartition only for ISR changes (not for its recovery
    from the unclean election). The move is not lost: the next ISR change — the removed
    broker 1 back and caught up — completes it on [0], fencing 1 by a leader-epoch bump."""
    c = EmbeddedCluster.open(tmp_path, _spec([0, 1], [[1]]), fsync=False)
    c.fail_broker(1)
    assert c.alter_partition_reassignments({T0: [0]})[T0].ok
    c.advance(1.0)  # broker 1 is fenced: leaderless, ISR empty, 1 the eligible leader (ELR)
    p = c.image.partition(T0)
    assert p is not None and (p.leader, p.isr, p.elr, p.adding) == (NO_LEADER, (), (1,), (0,))
    outcome = c.elect_leaders(ElectionType.UNCLEAN, [T0])
    assert outcome.results[T0].ok
    p = c.image.partition(T0)
    assert p is not None
    assert (p.replicas, p.isr, p.leader, p.adding, p.removing) == ((0, 1), (0,), 0, (0,), (1,))
    c.advance(5.0)
    assert T0 in c.list_partition_reassignments()  # no ISR change while 1 is down
    c.restore_broker(1)
    c.advance(5.0)
    p = c.image.partition(T0)
    assert p is not None
    assert (p.replicas, p.isr, p.leader, p.leader_epoch, p.adding, p.removing) == (
        (0,), (0,), 0, 3, (), ())
    assert c.list_partition_reassignments() == {}
    c.close()


def test_a_clean_restart_keeps_the_clock_and_the_high_watermark(tmp_path: Path) -> None:
    """cluster.py EmbeddedCluster._recover: the clock came back as max(checkpoint, last log
    timestamp); the log's timestamp is rounded to the millisecond, so a restart moved time
    (and every producing partition's high watermark) forward by up to 0.5 ms."""
    spec = _spec([0], [[0]], topic={"messageBytes": 1, "produceBytesPerSecond": 1_000_000.0})
    c = EmbeddedCluster.open(tmp_path, spec, fsync=False)
    c.advance(0.0006)  # 600 messages; a record now is stamped 1 ms
    assert c.incremental_alter_configs(
        {("BROKER", "0"): {"leader.replication.throttled.rate": "1000"}})[("BROKER", "0")].ok
    before = (c.now, c.high_watermark(T0))
    assert before[1] >= 600  # (committing the config through the quorum takes a few ms)
    c.close()
    c = EmbeddedCluster.open(tmp_path, spec, fsync=False)
    assert (c.now, c.high_watermark(T0)) == before
    c.close()


def test_a_broker_fenced_after_the_last_checkpoint_stays_down_after_a_crash(
        tmp_path: Path) -> None:
    """cluster.py EmbeddedCluster._reconcile_data_plane: after a crash the data plane came
    from a checkpoint taken before the broker failed, so the log said "fenced" while the data
    plane said "up". Its replica then caught up while fenced, left the fetchers without
    joining the ISR, and never rejoined it after the broker was restored."""
    spec = _spec([0, 1], [[0, 1]], topic={"produceBytesPerSecond": 10_000.0})
    c = EmbeddedCluster.open(tmp_path, spec, fsync=False)
    c.fail_broker(1)
    c.advance(3.0)  # lag time and session timeout pass: 1 is out of the ISR and fenced
    p = c.image.partition(T0)
    assert p is not None and p.isr == (0,) and c.image.brokers[1].fenced
    c.log.close()  # kill -9: no checkpoint since open()
    c = EmbeddedCluster.open(tmp_path, spec, fsync=False)
    assert 1 in c.data.down, "the log fenced broker 1: it is down until restored"
    c.advance(2.0)
    c.restore_broker(1)
    c.advance(5.0)
    p = c.image.partition(T0)
    assert p is not None and set(p.isr) == {0, 1}, p
    c.close()


def test_a_new_target_that_drops_the_only_eligible_replica_loses_nothing(
        tmp_path: Path) -> None:
    """Found against the pre-4.4 controller: re-targeting a leaderless move whose only
    in-sync copy was an adding replica (it led, then failed) rolled the move back with an
    EMPTY ISR — the only committed copy thrown away. Kafka 4.4 refuses no new target
    (ReplicationControlManager.changePartitionReassignment has no KAFKA-14808 refusal) and
    loses nothing: the dropped replica 2 stays in R as a removing one and stays the eligible
    leader (KIP-966), so the partition waits, leaderless, for it. The new target strands
    the move (2 and 3 both adding and removing) and the cancel needs an unclean election
    while 2 is away, so it is refused; once 2 is back it leads again (the last known leader),
    the others catch up from it, and the cancel ends the move on [1], copied from 2."""
    spec = _spec([1, 2, 3], [[1]], replicationBytesPerSecond=10_000_000.0)
    c = EmbeddedCluster.open(tmp_path, spec, fsync=False)
    c.fail_broker(3)
    assert c.alter_partition_reassignments({T0: [2, 3]})[T0].ok
    c.advance(0.5)  # 2 catches up; 3 is down: the move waits for it
    c.fail_broker(1)
    c.advance(1.0)  # 1 fenced: the adding replica 2 leads
    c.fail_broker(2)
    c.advance(1.0)  # 2 fenced too: leaderless, 2 the eligible leader
    c.restore_broker(1)
    c.restore_broker(3)
    before = c.image.partition(T0)
    assert before is not None
    assert (before.leader, before.isr, before.elr, before.adding, before.removing) == (
        NO_LEADER, (), (2,), (2, 3), (1,))
    assert c.alter_partition_reassignments({T0: [1]})[T0].ok
    p = c.image.partition(T0)
    assert p is not None
    assert (p.replicas, p.isr, p.leader, p.elr, p.adding, p.removing) == (
        (1, 2, 3), (), NO_LEADER, (2,), (2, 3), (2, 3))
    assert p.leader_epoch == before.leader_epoch  # nothing left the replica set
    refused = c.alter_partition_reassignments({T0: None})[T0]
    assert refused.error.name == "INVALID_REPLICA_ASSIGNMENT" and "unclean" in refused.message
    c.restore_broker(2)  # it comes back and leads again, with the data
    c.advance(5.0)
    p = c.image.partition(T0)
    assert p is not None and (p.leader, set(p.isr)) == (2, {1, 2, 3}) and p.is_reassigning
    assert c.alter_partition_reassignments({T0: None})[T0].ok
    p = c.image.partition(T0)
    assert p is not None and (p.replicas, p.isr, p.leader, p.adding) == ((1,), (1,), 1, ())
    c.close()


def test_an_unclean_reverts_last_known_leader_breaks_a_restart_only_while_it_is_alive(
        tmp_path: Path) -> None:
    """partition_change.py _assigned_only asked "is it a replica?" before "may it lead?", so
    the controller fault of differential scenario cancel-offline-unclean also hit when the
    last known leader was dead. Kafka 4.4's LeaderAcceptor tests isAcceptableLeader first and
    looks up the replica's directory (which throws for a non-replica) only for a broker that
    passes: after an unclean revert leaves [0] with last known leader 1, broker 0 cannot
    register while 1 is alive, and can once 1 is fenced — then it leads again, uncleanly."""
    spec = _spec([0, 1], [[0]], topic={"configs": {"unclean.leader.election.enable": "true"},
                                       "sizeBytesPerPartition": 10_000_000},
                 replicationBytesPerSecond=1_000.0)
    c = EmbeddedCluster.open(tmp_path, spec, fsync=False)
    assert c.alter_partition_reassignments({T0: [1]})[T0].ok
    c.fail_broker(0)
    c.advance(1.0)  # 0 fenced: the adding replica 1 leads, uncleanly
    assert c.alter_partition_reassignments({T0: None})[T0].ok  # an unclean revert
    p = c.image.partition(T0)
    assert p is not None
    assert (p.replicas, p.isr, p.leader, p.last_known_elr) == ((0,), (0,), NO_LEADER, (1,))
    with pytest.raises(KafkaApiError, match="Replica 1 is not assigned to this partition"):
        c.restore_broker(0)  # as Kafka 4.4: its controller cannot register broker 0
    assert c.image.partition(T0) == p
    c.fail_broker(1)
    c.advance(1.0)  # 1 fenced: no longer an acceptable leader, so never looked up
    c.restore_broker(0)
    c.advance(1.0)
    p = c.image.partition(T0)
    assert p is not None and (p.replicas, p.isr, p.leader, p.last_known_elr) == (
        (0,), (0,), 0, ())
    assert not c.image.brokers[0].fenced
    c.close()


def test_a_leader_elected_while_it_restarts_does_not_hold_the_high_watermark_back(
        tmp_path: Path) -> None:
    """Shrunk from TestClusterHistories (seed-free: the history is the test). Broker 1 leads
    alone; it crashes and comes back within the session timeout, so its restart takes it out
    of the ISR and the controller elects it again while the data plane still has it down.
    Its replica log was left aside as a lagging replica of itself: once it led again, the
    high watermark stayed at that log's end while the partition's grew, and after the next
    crash and ELR election it went back (102 -> 101)."""
    c = EmbeddedCluster.open(tmp_path, _spec(
        [0, 1], [[1, 0]], eligibleLeaderReplicas=True,
        topic={"produceBytesPerSecond": 20_000}), fsync=False)
    c.fail_broker(0)
    c.advance(1.0)  # broker 0 fenced: 1 leads alone
    c.fail_broker(1)
    c.advance(0.05)
    c.restore_broker(1)  # back before its session ended
    p = c.image.partition(T0)
    assert p is not None and (p.leader, p.isr) == (1, (1,))
    back = c.high_watermark(T0)
    c.advance(0.5)
    grown = c.high_watermark(T0)
    assert grown >= back + 90, "200 messages/s go on, and the high watermark with them"
    c.fail_broker(1)
    c.advance(45.0)  # fenced: leaderless, 1 in the ELR
    c.restore_broker(1)
    p = c.image.partition(T0)
    assert p is not None and p.leader == 1
    assert c.high_watermark(T0) >= grown
    c.close()
