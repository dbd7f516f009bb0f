"""The embedded cluster's behaviour through the ClusterAdmin port."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller_core import admin as words
from controller_core import errors
from controller_core.errors import KafkaApiError
from controller_core.model import NO_LEADER, ElectionType
from tests.helpers import cluster, run_until, tp

T0 = tp("orders", 0)  # replicas [0, 1, 2], 10 MB, brokers fetch at 1 MB/s


def test_a_move_copies_the_log_at_the_broker_bandwidth(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    assert c.alter_partition_reassignments({T0: [3, 1, 2]})[T0].ok
    c.advance(5)
    status = {s.broker: s for s in c.replica_status()}
    assert status[3].status.startswith("behind: ")
    assert status[3].size_bytes == pytest.approx(5_000_000, rel=0.05)
    assert status[1].status == words.IN_SYNC
    run_until(c, lambda: not c.list_partition_reassignments())
    assert 9.5 <= c.now <= 11.5
    p = c.image.partition(T0)
    assert p is not None and p.replicas == (3, 1, 2) and set(p.isr) == {1, 2, 3}


def test_throttle_slows_only_the_throttled_replicas(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    c.incremental_alter_configs({
        ("BROKER", "3"): {"follower.replication.throttled.rate": "250000"},
        ("TOPIC", "orders"): {"follower.replication.throttled.replicas": "0:3"},
    })
    c.alter_partition_reassignments({T0: [3, 1, 2], tp("orders", 1): [4, 2, 0]})
    run_until(c, lambda: tp("orders", 1) not in c.list_partition_reassignments())
    assert c.now <= 11.5
    assert T0 in c.list_partition_reassignments()  # still copying at a quarter of the speed
    run_until(c, lambda: not c.list_partition_reassignments())
    assert 38 <= c.now <= 42


def test_leader_moves_when_its_broker_is_fenced_and_the_replica_catches_up_later(
        tmp_path: Path) -> None:
    c = cluster(
        tmp_path, topics=[{"name": "orders", "partitions": 1, "replicationFactor": 3,
                           "sizeBytesPerPartition": 1_000_000, "produceBytesPerSecond": 10_000,
                           "assignment": [[0, 1, 2]]}])
    hw_before = c.high_watermark(T0)
    epoch = c.image.partition(T0).leader_epoch  # type: ignore[union-attr]
    c.fail_broker(0)
    c.advance(8)
    assert c.image.partition(T0).leader == 0  # type: ignore[union-attr]  # not fenced yet
    c.advance(2)
    p = c.image.partition(T0)
    assert p is not None and p.leader in (1, 2) and 0 not in p.isr
    assert p.leader_epoch > epoch
    assert c.high_watermark(T0) >= hw_before  # nothing committed was lost
    c.advance(30)
    c.restore_broker(0)
    run_until(c, lambda: 0 in c.image.partition(T0).isr)  # type: ignore[union-attr]
    described = c.describe_partitions(partitions=[T0])[0]
    assert not described.under_replicated


def test_lagging_follower_leaves_the_isr_after_replica_lag_time_max(tmp_path: Path) -> None:
    c = cluster(tmp_path, replicaLagTimeMaxMs=5_000, brokerSessionTimeoutMs=60_000)
    c.fail_broker(2)
    c.advance(4)
    assert 2 in c.image.partition(T0).isr  # type: ignore[union-attr]
    c.advance(2)
    assert 2 not in c.image.partition(T0).isr  # type: ignore[union-attr]
    assert not c.image.brokers[2].fenced


def test_last_isr_member_lost_then_unclean_election(tmp_path: Path) -> None:
    """Differential scenario unclean. With ELR (KIP-966, Kafka 4.4's default) fencing the
    last in-sync replica 0 empties the ISR: 0 is the eligible leader and the last known
    leader. The out-of-sync 1 comes back but may not lead cleanly; a preferred election
    fails, an unclean one elects 1 (ISR [1], the ELR cleared) and loses what 1 never
    fetched."""
    c = cluster(tmp_path, topics=[{"name": "orders", "partitions": 1, "replicationFactor": 2,
                                   "sizeBytesPerPartition": 1_000_000,
                                   "produceBytesPerSecond": 10_000, "assignment": [[0, 1]]}])
    c.fail_broker(1)
    c.advance(10)  # 1 fenced and out of the ISR; 0 leads alone
    c.advance(20)
    c.fail_broker(0)
    c.restore_broker(1)
    c.advance(10)
    p = c.image.partition(T0)
    assert p is not None
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (NO_LEADER, (), (0,), (0,))
    preferred = c.elect_leaders(ElectionType.PREFERRED, [T0]).results[T0]
    assert preferred.error == errors.PREFERRED_LEADER_NOT_AVAILABLE
    hw_before = c.high_watermark(T0)
    result = c.elect_leaders(ElectionType.UNCLEAN, [T0]).results[T0]
    assert result.ok
    p = c.image.partition(T0)
    assert p is not None and (p.leader, p.isr, p.elr, p.last_known_elr) == (1, (1,), (), ())
    assert c.high_watermark(T0) < hw_before  # an unclean election loses what 1 never fetched
    again = c.elect_leaders(ElectionType.UNCLEAN, [T0]).results[T0]
    assert again.error == errors.ELECTION_NOT_NEEDED


def test_unclean_with_no_live_replica(tmp_path: Path) -> None:
    c = cluster(tmp_path, topics=[{"name": "orders", "partitions": 1, "replicationFactor": 1,
                                   "assignment": [[0]]}])
    c.fail_broker(0)
    c.advance(10)
    r = c.elect_leaders(ElectionType.UNCLEAN, [T0]).results[T0]
    assert r.error == errors.ELIGIBLE_LEADERS_NOT_AVAILABLE


def test_election_with_no_set_covers_every_partition_and_says_so(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    out = c.elect_leaders(ElectionType.PREFERRED, None)
    assert set(out.attempted) == {tp("orders", i) for i in range(6)}
    assert out.results == {}  # ELECTION_NOT_NEEDED rows are dropped without a partition set
    dup = c.elect_leaders(ElectionType.PREFERRED, [T0, T0, tp("nope", 0)])
    assert set(dup.results) == {T0, tp("nope", 0)}
    assert dup.results[tp("nope", 0)].error == errors.UNKNOWN_TOPIC_OR_PARTITION


def test_alter_validation_uses_kafka_error_codes(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    res = c.alter_partition_reassignments({
        tp("orders", 0): [], tp("orders", 1): [-1, 2], tp("orders", 2): [1, 1, 2],
        tp("orders", 3): [1, 2, 99], tp("orders", 9): [1, 2, 3], tp("ghost", 0): [1, 2, 3],
        tp("orders", 4): None,
    })
    assert res[tp("orders", 0)].error.code == 39
    assert res[tp("orders", 0)].error.name == "INVALID_REPLICA_ASSIGNMENT"
    for i in (1, 2, 3):
        assert res[tp("orders", i)].error == errors.INVALID_REPLICA_ASSIGNMENT
    assert "99" in res[tp("orders", 3)].message
    assert res[tp("orders", 9)].error == errors.UNKNOWN_TOPIC_OR_PARTITION
    assert res[tp("ghost", 0)].error == errors.UNKNOWN_TOPIC_OR_PARTITION
    assert res[tp("orders", 4)].error == errors.NO_REASSIGNMENT_IN_PROGRESS
    assert not c.list_partition_reassignments()  # nothing moved


def test_list_is_incremental_and_omits_unknown_partitions(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    c.alter_partition_reassignments({T0: [3, 4, 5]})
    c.alter_partition_reassignments({tp("orders", 1): [3, 4, 5]})
    assert set(c.list_partition_reassignments()) == {T0, tp("orders", 1)}
    only = c.list_partition_reassignments([T0, tp("orders", 2), tp("ghost", 1)])
    assert set(only) == {T0}
    assert set(only[T0].adding) == {3, 4, 5} and set(only[T0].removing) == {0, 1, 2}


def test_the_later_submission_wins(tmp_path: Path) -> None:
    """KIP-455: a new target replaces the one in flight. Kafka 4.4 computes the new adding
    and removing lists against the current replica list: [0,1,2] -> [3,4,1], then [3,4,5]
    adds 5 and removes 0, 1 and 2 (the replicas 3 and 4 keep copying, no longer listed as
    adding), and the move completes on [3,4,5] once all of it is in sync (fewer adding than
    removing replicas)."""
    c = cluster(tmp_path)
    assert c.alter_partition_reassignments({T0: [3, 4, 1]})[T0].ok
    c.advance(2)
    assert c.alter_partition_reassignments({T0: [3, 4, 5]})[T0].ok
    o = c.list_partition_reassignments()[T0]
    assert (o.replicas, o.adding, o.removing) == ((3, 4, 5, 0, 1, 2), (5,), (0, 1, 2))
    assert o.target == (3, 4, 5)
    run_until(c, lambda: not c.list_partition_reassignments())
    p = c.image.partition(T0)
    assert p is not None and p.replicas == (3, 4, 5) and set(p.isr) == {3, 4, 5}


def test_a_later_submission_that_drops_an_adding_replica_strands_the_move(
        tmp_path: Path) -> None:
    """Differential scenario retarget: [0,1,2] -> [3,4,5], then [3,1,2] mid-move. Nothing is
    added, so Kafka 4.4 sets no adding list and the stale [3,4,5] stays while 4 and 5 are
    removing too: the move waits for 4 and 5 in the ISR without the removing replicas and
    never completes. A cancel gets out of it (the replicas minus the adding ones, in their
    current order) and the target then starts afresh and completes."""
    c = cluster(tmp_path)
    c.alter_partition_reassignments({T0: [3, 4, 5]})
    c.advance(2)
    c.alter_partition_reassignments({T0: [3, 1, 2]})
    o = c.list_partition_reassignments()[T0]
    assert (o.replicas, o.adding, o.removing) == ((3, 1, 2, 0, 4, 5), (3, 4, 5), (0, 4, 5))
    c.advance(120)  # long enough for every copy
    p = c.image.partition(T0)
    assert p is not None and set(p.isr) == {0, 1, 2, 3, 4, 5} and p.is_reassigning
    assert c.alter_partition_reassignments({T0: None})[T0].ok
    p = c.image.partition(T0)
    assert p is not None and (p.replicas, p.is_reassigning) == ((1, 2, 0), False)
    assert c.alter_partition_reassignments({T0: [3, 1, 2]})[T0].ok
    run_until(c, lambda: not c.list_partition_reassignments())
    assert c.image.partition(T0).replicas == (3, 1, 2)  # type: ignore[union-attr]


def test_replica_status_words(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    c.alter_partition_reassignments({T0: [3, 1, 2]})
    got = {(s.tp, s.broker): s.status for s in c.replica_status(
        [(T0, 3), (T0, 1), (T0, 5), (T0, 42), (tp("orders", 77), 1), (tp("ghost", 0), 1)])}
    assert got[(T0, 1)] == "in sync"
    assert got[(T0, 3)] == "behind: 9765 messages"
    assert got[(T0, 5)] == "broker does not host this partition"
    assert got[(T0, 42)] == "unknown broker"
    assert got[(tp("orders", 77), 1)] == "unknown partition"
    assert got[(tp("ghost", 0), 1)] == "unknown topic"


def test_under_replicated_follows_kip_352_during_a_move(tmp_path: Path) -> None:
    c = cluster(tmp_path, brokerSessionTimeoutMs=2_000)
    c.alter_partition_reassignments({T0: [3, 4, 5]})
    d = c.describe_partitions(partitions=[T0])[0]
    assert len(d.isr) < len(d.replicas)  # R is temporarily enlarged...
    assert not d.under_replicated  # ...but every original replica is in sync
    c.fail_broker(1)
    c.advance(3)
    assert T0 in c.list_partition_reassignments()
    assert c.describe_partitions(partitions=[T0])[0].under_replicated


def test_configs_are_validated(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    res = c.incremental_alter_configs({
        ("BROKER", "1"): {"follower.replication.throttled.rate": "fast"},
        ("BROKER", "77"): {"follower.replication.throttled.rate": "1"},
        ("TOPIC", "orders"): {"retention.ms": "1"},
        ("TOPIC", "ghost"): {"leader.replication.throttled.replicas": "*"},
        ("BROKER", "2"): {"leader.replication.throttled.rate": "100"},
        ("TOPIC", "orders2"): {},
    })
    assert res[("BROKER", "1")].error == errors.INVALID_CONFIG
    assert res[("BROKER", "77")].error == errors.INVALID_REQUEST
    assert res[("TOPIC", "orders")].error == errors.INVALID_CONFIG
    assert res[("TOPIC", "ghost")].error == errors.UNKNOWN_TOPIC_OR_PARTITION
    assert res[("BROKER", "2")].ok
    assert c.describe_configs([("BROKER", "2"), ("BROKER", "1")]) == {
        ("BROKER", "2"): {"leader.replication.throttled.rate": "100"}, ("BROKER", "1"): {}}
    bad = c.incremental_alter_configs(
        {("TOPIC", "orders"): {"follower.replication.throttled.replicas": "0-1"}})
    assert bad[("TOPIC", "orders")].error == errors.INVALID_CONFIG


def test_unreachable_controller_times_out(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    c.controller_available = False
    with pytest.raises(KafkaApiError) as e:
        c.alter_partition_reassignments({T0: [3, 4, 5]})
    assert e.value.error == errors.REQUEST_TIMED_OUT


def test_fault_injection_rejects_unknown_brokers(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    with pytest.raises(ValueError, match="unknown broker 9"):
        c.fail_broker(9)


def test_rack_aware_placement_when_no_assignment_is_given(tmp_path: Path) -> None:
    c = cluster(tmp_path, topics=[{"name": "t", "partitions": 12, "replicationFactor": 3}])
    racks = {b.id: b.rack for b in c.image.brokers.values()}
    for _, p in c.image.iter_partitions():
        assert len({racks[r] for r in p.replicas}) == 3
