"""Kafka 4.4's partition transitions, one rule per test (controller_core/metadata/
partition_change.py). Each rule was seen on a real Kafka 4.4.0 cluster by a differential
scenario (tests/diff/scenarios.py, named in the docstring) or read in Kafka's
PartitionChangeBuilder / ReplicationControlManager of that release."""

from __future__ import annotations

import pytest

from controller_core import errors
from controller_core.errors import ApiResult
from controller_core.metadata import partition_change as pc
from controller_core.metadata.records import PartitionChangeRecord
from controller_core.model import NO_LEADER, PartitionRegistration, TopicPartition

TP = TopicPartition("orders", 0)
RULES = pc.Rules()  # Kafka 4.4's defaults: min.insync.replicas 1, ELR on, no unclean
NO_ELR = pc.Rules(elr=False)


def alive(*ids: int) -> pc.Acceptable:
    return lambda r: r in ids


ALL = alive(*range(10))


def apply(p: PartitionRegistration, c: PartitionChangeRecord | ApiResult | None
          ) -> PartitionRegistration:
    assert isinstance(c, PartitionChangeRecord), c
    return pc.after(p, c)


def move(p: PartitionRegistration, target: list[int], acceptable: pc.Acceptable = ALL
         ) -> PartitionRegistration:
    return apply(p, pc.change_reassignment(TP, p, target, acceptable, RULES))


def join(p: PartitionRegistration, broker: int) -> PartitionRegistration:
    """The leader adds a caught-up follower (AlterPartition, its ISR in set order)."""
    return apply(p, pc.alter_isr(TP, p, pc.hash_order([*p.isr, broker]), ALL, RULES))


def test_a_move_starts_with_the_target_then_the_removed_replicas_sorted() -> None:
    """start-complete: R = target + sorted(removing), no leader-epoch bump."""
    p = PartitionRegistration((2, 0, 1), (2, 0, 1), leader=2, leader_epoch=4)
    m = move(p, [3, 1, 2])
    assert (m.replicas, m.adding, m.removing) == ((3, 1, 2, 0), (3,), (0,))
    assert (m.leader, m.leader_epoch, m.partition_epoch) == (2, 4, 1)
    two = move(PartitionRegistration((0, 1, 2), (0, 1, 2), leader=0), [1, 3])
    assert (two.replicas, two.adding, two.removing) == ((1, 3, 0, 2), (3,), (0, 2))


def test_the_adding_replica_joining_the_isr_completes_the_move_in_the_same_record() -> None:
    """start-complete: completion drops the removed leader, so the first in-sync target
    replica leads and the leader epoch bumps once."""
    p = move(PartitionRegistration((1, 2, 3), (1, 2, 3), leader=1), [4, 3, 2])
    done = join(p, 4)
    assert (done.replicas, done.isr, done.adding, done.removing) == ((4, 3, 2), (2, 3, 4), (),
                                                                     ())
    assert (done.leader, done.leader_epoch) == (4, 1)


def test_a_move_completes_once_its_adding_replicas_are_in_sync() -> None:
    """broker-failure: Kafka 4.4 waits for the adding replicas only (adding >= removing), so a
    target replica out of the ISR (its broker died) does not hold the move."""
    p = move(PartitionRegistration((1, 2, 3), (1, 2, 3), leader=1), [1, 2, 4])
    p = apply(p, pc.leader_and_isr_update(TP, p, alive(1, 3, 4), RULES, remove=2))
    assert p.isr == (1, 3)
    done = join(p, 4)
    assert (done.replicas, done.isr, done.removing) == ((1, 2, 4), (1, 4), ())


def test_a_shrinking_move_waits_for_every_target_replica() -> None:
    """Fewer adding than removing replicas: the whole target must be in sync."""
    p = PartitionRegistration((1, 2, 3), (1, 3), leader=1)
    waiting = move(p, [2, 3])
    assert (waiting.replicas, waiting.removing) == ((2, 3, 1), (1,))
    done = join(waiting, 2)
    assert (done.replicas, done.isr, done.leader) == ((2, 3), (2, 3), 2)
    at_once = move(PartitionRegistration((1, 2, 3), (1, 2, 3), leader=1), [2, 3])
    assert (at_once.replicas, at_once.leader, at_once.leader_epoch) == ((2, 3), 2, 1)


def test_a_reorder_completes_at_once_without_an_epoch_bump() -> None:
    p = PartitionRegistration((1, 2, 3), (1, 2, 3), leader=1, leader_epoch=2)
    assert pc.change_reassignment(TP, p, [1, 2, 3], ALL, RULES) is None
    r = move(p, [3, 2, 1])
    assert (r.replicas, r.leader, r.leader_epoch, r.is_reassigning) == ((3, 2, 1), 1, 2, False)


def test_a_cancel_keeps_the_current_order_minus_the_adding_replicas() -> None:
    """cancel: [2,0,1] -> [3,1,2] cancelled is [1,2,0], not the original order; 3 leaves, so
    the leader epoch bumps."""
    p = move(PartitionRegistration((2, 0, 1), (2, 0, 1), leader=2), [3, 1, 2])
    c = apply(p, pc.cancel_reassignment(TP, p, ALL, RULES))
    assert (c.replicas, c.isr, c.leader, c.leader_epoch) == ((1, 2, 0), (2, 0, 1), 2, 1)
    again = pc.cancel_reassignment(TP, c, ALL, RULES)
    assert again == ApiResult(errors.NO_REASSIGNMENT_IN_PROGRESS, "")


def test_a_cancel_that_needs_an_unclean_election_is_refused_unless_the_topic_allows_it() -> None:
    """cancel-offline / cancel-offline-unclean: with ELR the offline partition's ISR is
    empty, so the revert is unclean."""
    p = PartitionRegistration((1, 0), (), NO_LEADER, 1, 3, adding=(1,), removing=(0,), elr=(0,))
    assert pc.cancel_reassignment(TP, p, alive(1), RULES) == ApiResult(
        errors.INVALID_REPLICA_ASSIGNMENT,
        "Unable to revert partition assignment for orders:0 because it would require an "
        "unclean leader election.")
    unclean = pc.Rules(unclean=True)
    led = PartitionRegistration((1, 0), (1,), 1, 1, 3, adding=(1,), removing=(0,))
    c = apply(led, pc.cancel_reassignment(TP, led, alive(1), unclean))
    assert (c.replicas, c.isr, c.leader, c.leader_epoch) == ((0,), (0,), NO_LEADER, 2)
    assert c.last_known_elr == (1,)  # a leader that is no replica any more (see below)


def test_an_unclean_revert_leaves_a_last_known_leader_that_breaks_the_controller() -> None:
    """cancel-offline-unclean: Kafka 4.4's LeaderAcceptor throws for a broker that is not a
    replica, and the last-known-leader election asks it of exactly that broker — every
    registration of broker 0 then fails."""
    broken = PartitionRegistration((0,), (0,), NO_LEADER, 2, 4, last_known_elr=(1,))
    with pytest.raises(pc.ControllerFault, match="Replica 1 is not assigned"):
        pc.leader_and_isr_update(TP, broken, alive(1, 2), RULES, unclean_shutdown=0)


def test_a_retarget_is_computed_against_the_current_replicas() -> None:
    """retarget: the adding list is only replaced when the new one is non-empty."""
    p = move(PartitionRegistration((0, 1, 2), (0, 1, 2), leader=0), [3, 1, 2])
    r = move(p, [3, 0, 2])
    assert (r.replicas, r.adding, r.removing, r.leader_epoch) == ((3, 0, 2, 1), (3,), (1,), 0)


def test_a_retarget_that_drops_an_adding_replica_never_completes() -> None:
    """retarget: 3 ends up both adding and removing; the move waits for 3 in the ISR without
    the removing replicas, which cannot happen. A cancel is the way out."""
    p = move(move(PartitionRegistration((0, 1, 2), (0, 1, 2), leader=0), [3, 1, 2]), [3, 0, 2])
    assert pc.would_strand(p.replicas, p.adding, p.removing, [2, 1, 0])
    stuck = move(p, [2, 1, 0])
    assert (stuck.replicas, stuck.adding, stuck.removing) == ((2, 1, 0, 3), (3,), (3,))
    in_sync = join(stuck, 3)
    assert in_sync.is_reassigning and in_sync.isr == (0, 1, 2, 3)
    out = apply(in_sync, pc.cancel_reassignment(TP, in_sync, ALL, RULES))
    assert (out.replicas, out.isr, out.is_reassigning) == ((2, 1, 0), (0, 1, 2), False)


def test_a_retarget_that_keeps_a_removed_replica_is_ignored() -> None:
    """retarget-regrow: nothing to add or remove, so nothing is set; the stale removing list
    completes the move to the old target."""
    p = move(PartitionRegistration((0, 1, 2), (0, 1, 2), leader=0), [3, 1, 2])
    assert pc.would_strand(p.replicas, p.adding, p.removing, [3, 1, 2, 0])
    assert pc.change_reassignment(TP, p, [3, 1, 2, 0], ALL, RULES) is None
    assert not pc.would_strand(p.replicas, p.adding, p.removing, [4, 1, 2])
    assert not pc.would_strand((0, 1, 2), (), (), [2, 1, 0])


def test_preferred_election_outcomes() -> None:
    led_by_2 = PartitionRegistration((1, 2, 3), (1, 2, 3), leader=2, leader_epoch=3)
    c = apply(led_by_2, pc.elect_leader(TP, led_by_2, True, ALL, RULES))
    assert (c.leader, c.leader_epoch) == (1, 4)
    already = PartitionRegistration((1, 2, 3), (1, 2, 3), leader=1)
    assert pc.elect_leader(TP, already, True, ALL, RULES) == ApiResult(
        errors.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition.")
    out_of_isr = PartitionRegistration((1, 2, 3), (2, 3), leader=2)
    assert pc.elect_leader(TP, out_of_isr, True, ALL, RULES) == ApiResult(
        errors.PREFERRED_LEADER_NOT_AVAILABLE, "The preferred leader was not available.")
    assert pc.elect_leader(TP, led_by_2, True, alive(2, 3), RULES).error == (  # type: ignore[union-attr]
        errors.PREFERRED_LEADER_NOT_AVAILABLE)


def test_an_unclean_election_takes_the_first_live_replica_in_replica_order() -> None:
    """unclean-mid-move: the adding replica 2 comes first in [2,3,0,1] and leads, its log
    the partition's from then on."""
    p = PartitionRegistration((2, 3, 0, 1), (), NO_LEADER, 1, 5, adding=(2, 3), removing=(1,),
                              elr=(0,), last_known_elr=(0,))
    c = apply(p, pc.elect_leader(TP, p, False, alive(1, 2, 3), RULES))
    assert (c.leader, c.isr, c.elr, c.last_known_elr, c.leader_epoch) == (2, (2,), (), (), 2)
    led = PartitionRegistration((1, 2), (1,), leader=1)
    assert pc.elect_leader(TP, led, False, ALL, RULES).error == errors.ELECTION_NOT_NEEDED  # type: ignore[union-attr]
    dead = PartitionRegistration((1, 2), (1,), leader=NO_LEADER, elr=())
    assert pc.elect_leader(TP, dead, False, alive(), NO_ELR) == ApiResult(
        errors.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        "Eligible topic partition leaders are not available.")


def test_fencing_the_last_in_sync_replica() -> None:
    """unclean: without ELR the ISR keeps its last member; with ELR (Kafka 4.4's default)
    the ISR empties and the replica becomes an eligible leader, and the last leader is
    remembered."""
    p = PartitionRegistration((0, 1), (0,), leader=0, leader_epoch=2)
    without = apply(p, pc.leader_and_isr_update(TP, p, alive(1), NO_ELR, remove=0))
    assert (without.isr, without.leader, without.leader_epoch, without.elr) == ((0,), -1, 3, ())
    fenced = apply(p, pc.leader_and_isr_update(TP, p, alive(1), RULES, remove=0))
    assert (fenced.isr, fenced.leader, fenced.elr, fenced.last_known_elr) == ((), -1, (0,), (0,))
    back = apply(fenced, pc.leader_and_isr_update(TP, fenced, alive(1), RULES, add=0))
    assert (back.isr, back.leader, back.elr, back.last_known_elr) == ((0,), 0, (), ())


def test_a_crashed_replica_leaves_the_eligible_leaders_and_comes_back_as_last_leader() -> None:
    """eligible-leaders: a broker that restarts after a crash leaves the ISR and the ELR (its
    unflushed data is not trusted); the last known leader is still elected, uncleanly."""
    p = PartitionRegistration((0, 1), (), NO_LEADER, 3, 6, elr=(0,), last_known_elr=(0,))
    gone = apply(p, pc.leader_and_isr_update(TP, p, alive(1), RULES, unclean_shutdown=0))
    assert (gone.isr, gone.elr, gone.last_known_elr) == ((), (), (0,))
    back = apply(gone, pc.leader_and_isr_update(TP, gone, alive(1), RULES, add=0))
    assert (back.leader, back.isr, back.last_known_elr) == (0, (0,), ())


def test_eligible_leaders_fill_below_min_insync_replicas() -> None:
    min2 = pc.Rules(min_isr=2)
    p = PartitionRegistration((0, 1, 2), (0, 1, 2), leader=0)
    one = apply(p, pc.leader_and_isr_update(TP, p, alive(0, 1), min2, remove=2))
    assert (one.isr, one.elr) == ((0, 1), ())
    two = apply(one, pc.leader_and_isr_update(TP, one, alive(0), min2, remove=1))
    assert (two.isr, two.elr) == ((0,), (1,))


def test_the_leader_sends_its_isr_in_set_order() -> None:
    """elections: a rejoining replica is not appended; a small hash set orders broker ids
    by id mod 16 (Partition.prepareIsrExpand builds the ISR from one)."""
    assert pc.hash_order([1, 2, 0]) == (0, 1, 2)
    assert pc.hash_order([1000, 17, 1001]) == (17, 1000, 1001)
    assert pc.hash_order([1, 16]) == (16, 1)
    p = PartitionRegistration((0, 1, 2), (1, 2), leader=1, leader_epoch=1)
    assert join(p, 0).isr == (0, 1, 2)


def test_an_isr_change_is_checked_like_alter_partition() -> None:
    p = PartitionRegistration((0, 1, 2), (0, 1), leader=0)
    assert pc.alter_isr(TP, p, [0, 5], ALL, RULES).error == errors.INVALID_REQUEST  # type: ignore[union-attr]
    assert pc.alter_isr(TP, p, [1, 2], ALL, RULES).error == errors.INVALID_REQUEST  # type: ignore[union-attr]
    assert pc.alter_isr(TP, p, [0, 2], alive(0, 1), RULES).error == (  # type: ignore[union-attr]
        errors.INELIGIBLE_REPLICA)
    leaderless = PartitionRegistration((0, 1, 2), (0,), leader=NO_LEADER)
    assert pc.alter_isr(TP, leaderless, [0], ALL, RULES).error == errors.INVALID_REQUEST  # type: ignore[union-attr]


def test_manual_assignment_problems_in_kafkas_order_and_words() -> None:
    check = pc.manual_assignment_problem
    assert check([], [0, 1]) == "The manual partition assignment includes an empty replica list."
    assert check([1, 9, -1], [0, 1]) == ("The manual partition assignment includes broker -1, "
                                         "but no such broker is registered.")
    assert check([1, 1], [0, 1]) == ("The manual partition assignment includes the broker 1 "
                                     "more than once.")
    assert check([0], [0, 1], 2) is not None and "consistent" in str(check([0], [0, 1], 2))
    assert check([1, 0], [0, 1]) is None
