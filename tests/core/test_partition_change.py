"""The KIP-455 / KIP-183 transitions, one rule per test, with SPEC.md §2.6's worked examples."""

from __future__ import annotations

from controller_core import errors
from controller_core.errors import ApiResult
from controller_core.metadata import partition_change as pc
from controller_core.metadata.records import PartitionChangeRecord
from controller_core.model import NO_LEADER, PartitionRegistration, TopicPartition

TP = TopicPartition("orders", 0)
ALL = frozenset(range(10))


def apply(p: PartitionRegistration, c: PartitionChangeRecord | ApiResult | None
          ) -> PartitionRegistration:
    assert isinstance(c, PartitionChangeRecord), c
    return PartitionRegistration(
        c.replicas if c.replicas is not None else p.replicas,
        c.isr if c.isr is not None else p.isr,
        c.leader if c.leader is not None else p.leader,
        c.leader_epoch if c.leader_epoch is not None else p.leader_epoch,
        p.partition_epoch + 1,
        c.adding if c.adding is not None else p.adding,
        c.removing if c.removing is not None else p.removing)


def join_isr(p: PartitionRegistration, broker: int) -> PartitionRegistration:
    return apply(p, pc.expand_isr(TP, p, broker, ALL))


def test_worked_example_move_to_4_3_2() -> None:
    p = PartitionRegistration((1, 2, 3), (1, 2, 3), leader=1)
    p = apply(p, pc.start_reassignment(TP, p, [4, 3, 2], ALL))
    assert set(p.replicas) == {1, 2, 3, 4}
    assert set(p.adding) == {4} and set(p.removing) == {1}
    assert p.leader == 1  # the leader is unchanged while moving
    assert pc.maybe_complete_reassignment(TP, p, ALL) is None  # 4 not caught up yet
    p = join_isr(p, 4)
    # joining the ISR completed the move in the same pass of the controller:
    p = apply(p, pc.maybe_complete_reassignment(TP, p, ALL))
    assert p.replicas == (4, 3, 2)
    assert set(p.isr) == {2, 3, 4}
    assert p.adding == () and p.removing == ()
    assert p.leader in {4, 3, 2}


def test_worked_example_cancel_after_partial_catch_up() -> None:
    p = PartitionRegistration((1, 2, 3), (1, 2, 3), leader=1)
    p = apply(p, pc.start_reassignment(TP, p, [3, 4, 5], ALL))
    assert set(p.adding) == {4, 5} and set(p.removing) == {1, 2}
    p = join_isr(p, 4)
    assert pc.maybe_complete_reassignment(TP, p, ALL) is None  # 5 still behind
    p = apply(p, pc.cancel_reassignment(TP, p, ALL))
    assert set(p.replicas) == {1, 2, 3}
    assert set(p.isr) <= {1, 2, 3}
    assert p.adding == () and p.removing == ()


def test_all_adding_before_any_removing() -> None:
    p = PartitionRegistration((1, 2, 3), (1, 2, 3), leader=1)
    p = apply(p, pc.start_reassignment(TP, p, [4, 5, 6], ALL))
    p = join_isr(p, 4)
    p = join_isr(p, 5)
    assert pc.maybe_complete_reassignment(TP, p, ALL) is None
    assert set(p.replicas) == {1, 2, 3, 4, 5, 6}  # nothing removed before 6 is in sync


def test_the_leader_epoch_bumps_when_a_replica_leaves_not_when_a_move_starts() -> None:
    """PartitionChangeBuilder.triggerLeaderEpochBumpForReplicaReassignmentIfNeeded: the start
    keeps every replica (R = [1,2,4,3]), so no bump; the cancel drops the adding 4 and the
    completion the removed 3, so each bumps it once. The partition epoch bumps every time."""
    p = PartitionRegistration((1, 2, 3), (1, 2, 3), leader=1, leader_epoch=7)
    started = apply(p, pc.start_reassignment(TP, p, [1, 2, 4], ALL))
    assert (started.leader_epoch, started.partition_epoch) == (7, 1)
    cancelled = apply(started, pc.cancel_reassignment(TP, started, ALL))
    assert (cancelled.leader_epoch, cancelled.partition_epoch) == (8, 2)
    done = apply(join_isr(started, 4), pc.maybe_complete_reassignment(
        TP, join_isr(started, 4), ALL))
    assert done.leader_epoch == 8 and done.replicas == (1, 2, 4)


def test_new_target_while_moving_cancels_first() -> None:
    p = PartitionRegistration((1, 2, 3), (1, 2, 3), leader=1)
    p = apply(p, pc.start_reassignment(TP, p, [1, 2, 4], ALL))
    p = apply(p, pc.start_reassignment(TP, p, [1, 2, 5], ALL))
    assert set(p.adding) == {5} and set(p.removing) == {3}
    assert 4 not in p.replicas  # the old adding replica is dropped


def test_cancel_when_not_reassigning_is_refused() -> None:
    p = PartitionRegistration((1, 2, 3), (1, 2, 3), leader=1)
    r = pc.cancel_reassignment(TP, p, ALL)
    assert isinstance(r, ApiResult) and r.error == errors.NO_REASSIGNMENT_IN_PROGRESS


def test_cancel_with_originals_offline_is_refused_kafka_14424() -> None:
    p = PartitionRegistration((1, 2, 3), (1, 2, 3), leader=1)
    p = apply(p, pc.start_reassignment(TP, p, [4, 5, 6], ALL))
    for b in (4, 5, 6):
        p = join_isr(p, b)
    # 1, 2, 3 went away before the completion step (ISR shrank to the new replicas)
    p = PartitionRegistration(p.replicas, (4, 5, 6), 4, p.leader_epoch + 1, p.partition_epoch,
                              p.adding, p.removing)
    r = pc.cancel_reassignment(TP, p, frozenset({4, 5, 6}))
    assert isinstance(r, ApiResult) and r.error == errors.ELIGIBLE_LEADERS_NOT_AVAILABLE
    assert "leaderless" in r.message


def test_cancel_moves_leadership_off_an_adding_replica_kafka_14808() -> None:
    p = PartitionRegistration((1, 2, 3), (1, 2, 3), leader=1)
    p = apply(p, pc.start_reassignment(TP, p, [4, 2, 3], ALL))
    p = join_isr(p, 4)
    p = PartitionRegistration(p.replicas, p.isr, 1, p.leader_epoch, p.partition_epoch,
                              p.adding, p.removing)
    # a preferred election made the adding replica 4 the leader mid-move
    p = PartitionRegistration(p.replicas, (1, 2, 3, 4), 4, p.leader_epoch + 1,
                              p.partition_epoch, p.adding, p.removing)
    c = apply(p, pc.cancel_reassignment(TP, p, ALL))
    assert c.leader in {1, 2, 3} and 4 not in c.replicas and c.leader_epoch > p.leader_epoch


def test_retarget_dropping_an_adding_leader_keeps_a_leader() -> None:
    p = PartitionRegistration((4, 2, 3, 1), (1, 2, 3, 4), leader=4, adding=(4,), removing=(1,))
    c = apply(p, pc.start_reassignment(TP, p, [5, 2, 3], ALL))
    assert c.leader in {1, 2, 3} and c.leader in c.isr and 4 not in c.replicas


def test_isr_never_holds_a_replica_outside_r() -> None:
    p = PartitionRegistration((1, 2, 3, 4), (1, 2, 3, 4), leader=1, adding=(4,), removing=(1,))
    c = apply(p, pc.maybe_complete_reassignment(TP, p, ALL))
    assert set(c.isr) <= set(c.replicas) and 1 not in c.isr


def test_shrinking_the_replica_set_completes_at_once() -> None:
    p = PartitionRegistration((1, 2, 3), (1, 2, 3), leader=1)
    started = apply(p, pc.start_reassignment(TP, p, [2, 3], ALL))
    done = apply(started, pc.maybe_complete_reassignment(TP, started, ALL))
    assert done.replicas == (2, 3) and done.leader in {2, 3}


def test_preferred_election_outcomes() -> None:
    led_by_2 = PartitionRegistration((1, 2, 3), (1, 2, 3), leader=2, leader_epoch=3)
    c = apply(led_by_2, pc.elect_preferred(TP, led_by_2, ALL))
    assert c.leader == 1 and c.leader_epoch == 4
    already = PartitionRegistration((1, 2, 3), (1, 2, 3), leader=1)
    r = pc.elect_preferred(TP, already, ALL)
    assert isinstance(r, ApiResult) and r.error == errors.ELECTION_NOT_NEEDED
    out_of_isr = PartitionRegistration((1, 2, 3), (2, 3), leader=2)
    r = pc.elect_preferred(TP, out_of_isr, ALL)
    assert isinstance(r, ApiResult) and r.error == errors.PREFERRED_LEADER_NOT_AVAILABLE
    offline = pc.elect_preferred(TP, led_by_2, frozenset({2, 3}))
    assert isinstance(offline, ApiResult) and "offline" in offline.message


def test_unclean_election_outcomes() -> None:
    has_leader = PartitionRegistration((1, 2, 3), (1, 2, 3), leader=1)
    r = pc.elect_unclean(TP, has_leader, ALL)
    assert isinstance(r, ApiResult) and r.error == errors.ELECTION_NOT_NEEDED
    leaderless = PartitionRegistration((1, 2, 3), (1,), leader=NO_LEADER, leader_epoch=5)
    c = apply(leaderless, pc.elect_unclean(TP, leaderless, frozenset({3})))
    assert c.leader == 3 and c.isr == (3,) and c.leader_epoch == 6
    none_alive = pc.elect_unclean(TP, leaderless, frozenset())
    assert isinstance(none_alive, ApiResult)
    assert none_alive.error == errors.ELIGIBLE_LEADERS_NOT_AVAILABLE


def test_fencing_the_last_isr_member_keeps_it_and_clears_the_leader() -> None:
    p = PartitionRegistration((1, 2), (1,), leader=1, leader_epoch=2)
    c = apply(p, pc.shrink_isr(TP, p, 1, frozenset({2})))
    assert c.leader == NO_LEADER and c.isr == (1,) and c.leader_epoch == 3
    back = apply(c, pc.elect_if_leaderless(TP, c, frozenset({1, 2})))
    assert back.leader == 1 and back.leader_epoch == 4


def test_start_to_same_replicas_is_a_no_op() -> None:
    p = PartitionRegistration((1, 2, 3), (1, 2, 3), leader=1)
    assert pc.start_reassignment(TP, p, [1, 2, 3], ALL) is None
    reordered = apply(p, pc.start_reassignment(TP, p, [3, 2, 1], ALL))
    assert reordered.replicas == (3, 2, 1) and not reordered.is_reassigning
