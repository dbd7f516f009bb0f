"""Regression tests for core bugs the property tests (test_properties.py) found.

Each test is the minimal history hypothesis shrank the failure to, asserting the behaviour
the fix restored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from controller_core.config import EmbeddedClusterSpec
from controller_core.embedded.cluster import EmbeddedCluster
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


def test_an_election_that_puts_every_adding_replica_in_sync_completes_the_move(
        tmp_path: Path) -> None:
    """controller.py Controller._change: only a catch-up or an alter used to try to complete
    a move. Here an unclean election makes the adding replica the in-sync leader (AR ⊆ ISR);
    the move stayed open for ever while the removed broker was down."""
    c = EmbeddedCluster.open(tmp_path, _spec([0, 1], [[1]]), fsync=False)
    c.fail_broker(1)
    assert c.alter_partition_reassignments({T0: [0]})[T0].ok
    c.advance(1.0)  # broker 1 is fenced: the partition is leaderless, ISR [1]
    p = c.image.partition(T0)
    assert p is not None and p.leader == NO_LEADER and p.adding == (0,)
    outcome = c.elect_leaders(ElectionType.UNCLEAN, [T0])
    assert outcome.results[T0].ok
    p = c.image.partition(T0)
    assert p is not None
    assert (p.replicas, p.isr, p.leader, p.adding, p.removing) == ((0,), (0,), 0, (), ())
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


def test_a_new_target_may_not_drop_the_only_in_sync_replicas(tmp_path: Path) -> None:
    """partition_change.py start_reassignment: re-targeting a leaderless move whose only
    in-sync replica was an adding one (it led, then failed) rolled the move back to the
    original replicas with an EMPTY ISR — the only committed copy thrown away without any
    unclean election (KAFKA-14808). It is now refused, like the equivalent cancel."""
    spec = _spec([1, 2, 3], [[1]], replicationBytesPerSecond=10_000_000.0)
    c = EmbeddedCluster.open(tmp_path, spec, fsync=False)
    c.fail_broker(3)
    assert c.alter_partition_reassignments({T0: [2, 3]})[T0].ok
    c.advance(0.5)  # 2 catches up; 3 is down: the move waits for it
    c.fail_broker(1)
    c.advance(1.0)  # 1 fenced: the adding replica 2 leads
    c.fail_broker(2)
    c.advance(1.0)  # 2 fenced too: leaderless, ISR [2]
    c.restore_broker(1)
    c.restore_broker(3)
    before = c.image.partition(T0)
    assert before is not None
    assert (before.leader, before.isr, before.adding) == (NO_LEADER, (2,), (2, 3))
    for target in ([1], [1, 3]):
        result = c.alter_partition_reassignments({T0: target})[T0]
        assert result.error.name == "ELIGIBLE_LEADERS_NOT_AVAILABLE", (target, result)
        assert "[2]" in result.message
        assert c.image.partition(T0) == before
    assert not c.alter_partition_reassignments({T0: None})[T0].ok  # as cancel already was
    # A target that keeps the in-sync replica is accepted (ReplicationControlManager keeps
    # the ISR across a re-target): 2 stays the ISR, nothing is thrown away.
    assert c.alter_partition_reassignments({T0: [2, 3, 1]})[T0].ok
    moving = c.image.partition(T0)
    assert moving is not None and moving.isr == (2,) and moving.adding == (2, 3)
    c.restore_broker(2)  # the in-sync replica returns: it leads, and the move can finish
    c.advance(5.0)
    p = c.image.partition(T0)
    assert p is not None and (p.replicas, p.leader, p.adding) == ((2, 3, 1), 2, ())
    c.close()
