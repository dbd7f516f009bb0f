"""Pure partition transitions, modelled on Kafka's PartitionChangeBuilder.

Every function takes a partition's registration and the set of live (unfenced) brokers and
returns either a :class:`PartitionChangeRecord` or a reason it must not happen. None of them
touch state; the controller applies the records. The invariants every result keeps:

* the ISR never holds a replica outside the replica set (KAFKA-6638, KAFKA-9672);
* a leader is always a live member of the ISR (or there is no leader);
* the leader epoch bumps exactly when the leader changes or a replica leaves the replica set
  (PartitionChangeBuilder.triggerLeaderEpochBumpForReplicaReassignmentIfNeeded, at the current
  metadata version): a removed or dropped adding replica is fenced (KAFKA-12803/13972/16120)
  while a move that only adds, an ISR change and an add-only completion leave it alone; the
  partition epoch bumps with every record;
* a reassignment or its cancellation never leaves a partition leaderless while a suitable
  replica is in sync (KAFKA-14808, KAFKA-14424) — it is refused instead.
"""

from __future__ import annotations

from collections.abc import Sequence, Set

from controller_core import errors
from controller_core.errors import ApiResult
from controller_core.metadata.records import PartitionChangeRecord
from controller_core.model import NO_LEADER, PartitionRegistration, TopicPartition


def after(p: PartitionRegistration, c: PartitionChangeRecord) -> PartitionRegistration:
    """The registration once ``c`` is applied (the partition epoch always bumps)."""
    return PartitionRegistration(
        p.replicas if c.replicas is None else c.replicas,
        p.isr if c.isr is None else c.isr,
        p.leader if c.leader is None else c.leader,
        p.leader_epoch if c.leader_epoch is None else c.leader_epoch,
        p.partition_epoch + 1,
        p.adding if c.adding is None else c.adding,
        p.removing if c.removing is None else c.removing,
    )


def then_complete(tp: TopicPartition, p: PartitionRegistration, c: PartitionChangeRecord,
                  live: Set[int]) -> PartitionChangeRecord:
    """``c``, extended to also finish the partition's move when ``c`` makes it finishable —
    one record, as KRaft's PartitionChangeBuilder writes an ISR expansion that completes a
    reassignment."""
    mid = after(p, c)
    done = maybe_complete_reassignment(tp, mid, live)
    if done is None:
        return c
    final = after(mid, done)
    # One record bumps the leader epoch at most once (PartitionChangeBuilder.build), however
    # many reasons it has: here the change and the completion that drops replicas.
    merged = _record(tp, p, replicas=final.replicas, isr=final.isr, leader=final.leader,
                     adding=final.adding, removing=final.removing)
    assert merged is not None
    return merged


def _eligible_leader(order: Sequence[int], isr: Sequence[int], live: Set[int]) -> int:
    in_sync = set(isr)
    for r in order:
        if r in in_sync and r in live:
            return r
    return NO_LEADER


def _record(tp: TopicPartition, p: PartitionRegistration, *, leader: int,
            isr: tuple[int, ...] | None = None, replicas: tuple[int, ...] | None = None,
            adding: tuple[int, ...] | None = None, removing: tuple[int, ...] | None = None,
            ) -> PartitionChangeRecord | None:
    """A record carrying only the fields that change; ``None`` when nothing does. A field
    not given keeps the partition's value; the ISR keeps only members of the new replica set
    (so a move's callers leave it to this). The leader epoch bumps as PartitionChangeBuilder
    bumps it: on a leader change (tryElection sets the leader), and when the new replica set
    lacks a replica of the old one (triggerLeaderEpochBumpForReplicaReassignmentIfNeeded), so
    the replica that left is fenced. Not on an ISR change: Kafka bumps on an ISR shrink only
    below metadata version 3.6 (triggerLeaderEpochBumpForIsrShrinkIfNeeded, KAFKA-15021)."""
    replicas = p.replicas if replicas is None else replicas
    isr = p.isr if isr is None else isr
    replicas_set = set(replicas)
    isr = tuple(r for r in isr if r in replicas_set)
    assert leader == NO_LEADER or leader in isr  # a leader is always in the ISR
    leader_changed = leader != p.leader
    replica_left = not replicas_set.issuperset(p.replicas)
    new_epoch = p.leader_epoch + 1 if (leader_changed or replica_left) else None
    change = PartitionChangeRecord(
        tp.topic, tp.partition,
        replicas=replicas if replicas != p.replicas else None,
        isr=isr if isr != p.isr else None,
        leader=leader if leader_changed else None,
        leader_epoch=new_epoch,
        adding=None if adding == p.adding else adding,  # None given: None, unchanged
        removing=None if removing == p.removing else removing,
    )
    if (change.replicas is None and change.isr is None and change.leader is None
            and change.leader_epoch is None and change.adding is None
            and change.removing is None):
        return None
    return change


# -- reassignment (KIP-455) -------------------------------------------------------------------
def start_reassignment(tp: TopicPartition, p: PartitionRegistration, target: Sequence[int],
                       live: Set[int]) -> PartitionChangeRecord | ApiResult | None:
    """Begin moving ``p`` to ``target``, or re-target a partition already moving.

    R becomes TR followed by the original replicas not in TR, AR = TR - R, RR = R - TR, where
    R is the replica set before any move. As in KRaft (``ReplicationControlManager``
    keeps the partition's ISR and leader as the builder's starting point), every ISR member
    the new replica set keeps stays in sync — a caught-up replica of an earlier target that
    the new target keeps does not have to copy again — and the leader stays where it is when
    it is kept. Returns ``None`` when nothing would change (an identical resubmit).
    """
    base = p.original
    target = tuple(target)
    target_set = set(target)
    base_set = set(base)
    adding = tuple(r for r in target if r not in base_set)
    removing = tuple(r for r in base if r not in target_set)
    replicas = target + removing
    kept = set(replicas)
    isr = tuple(r for r in p.isr if r in kept)
    if not isr:
        # Every in-sync replica would be dropped (say the adding replicas of the current move
        # took over and the originals died): that throws away the only committed copy.
        return ApiResult(
            errors.ELIGIBLE_LEADERS_NOT_AVAILABLE,
            f"{tp}: the new target {list(target)} drops every in-sync replica {list(p.isr)}; "
            "keep one of them in the target, or bring another replica back in sync first")
    leader = p.leader
    if leader not in isr or leader not in live:
        leader = _eligible_leader(replicas, isr, live)
        if leader == NO_LEADER and p.leader != NO_LEADER:
            # KAFKA-14808: never drop a leader that nothing eligible can replace.
            return ApiResult(
                errors.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                f"{tp}: leader {p.leader} would be dropped and none of the replicas it keeps "
                f"{[r for r in isr if r != p.leader]} is alive and in sync; keep the leader in "
                "the target or wait for another replica to catch up")
    if not adding and not removing:
        # The same replicas (None: nothing changes), a reorder, or a return to the original
        # replicas (the replicas being added leave, so the leader epoch bumps to fence them).
        return _record(tp, p, replicas=target, leader=leader, adding=(), removing=())
    # A move that starts keeps every replica (R = TR + RR): no leader epoch bump, as in
    # KRaft; a re-target that drops an adding replica of the move it replaces bumps it.
    # The same target again is None: nothing to do.
    return _record(tp, p, replicas=replicas, leader=leader, adding=adding, removing=removing)


def cancel_reassignment(tp: TopicPartition, p: PartitionRegistration,
                        live: Set[int]) -> PartitionChangeRecord | ApiResult:
    """Roll back: R = R - AR, AR = RR = []; refuse if no original replica could lead."""
    if not p.is_reassigning:
        return ApiResult(errors.NO_REASSIGNMENT_IN_PROGRESS, f"{tp} is not being reassigned")
    original = p.original
    isr = tuple(r for r in p.isr if r in set(original))
    leader = p.leader
    if leader not in isr or leader not in live:
        leader = _eligible_leader(original, isr, live)
        if leader == NO_LEADER:
            return ApiResult(
                errors.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                f"{tp}: cannot cancel — none of the original replicas {list(original)} is alive "
                "and in sync, so the rollback would leave the partition leaderless "
                "(KAFKA-14424); bring an original replica back or let the move finish")
    # The adding replicas leave R (PartitionReassignmentRevert): that bumps the leader epoch;
    # a move that only removed replicas rolls back with none leaving, and no bump.
    change = _record(tp, p, replicas=original, leader=leader, adding=(), removing=())
    assert change is not None
    return change


def maybe_complete_reassignment(tp: TopicPartition, p: PartitionRegistration,
                                live: Set[int]) -> PartitionChangeRecord | None:
    """Once every target replica is in the ISR: R = TR, ISR = ISR - RR, AR = RR = [] at once.

    As KRaft's ``PartitionReassignmentReplicas.maybeCompleteReassignment``
    (``newTargetIsr.containsAll(newTargetReplicas)``): "the adding replicas caught up" is not
    enough — a target replica that fell out of the ISR (its broker died) holds the move, so
    in-sync replicas being removed are not dropped while the target is under-replicated.

    The leader is then chosen as PartitionChangeBuilder.tryElection chooses it (electLeader:
    the current one if it stays in sync and alive, else the first live in-sync target
    replica) and, as there, no such replica means the move completes leaderless rather than
    waits. That loses nothing: the target is all in the ISR, and a fenced broker leaves every
    ISR it is not the last member of, so this happens only to a partition that is offline
    already (its one in-sync replica is on a fenced broker); it leads again when that broker
    is back, as it would have after a wait.
    """
    if not p.is_reassigning:
        return None
    target = p.target
    isr = tuple(r for r in p.isr if r in set(target))
    if not isr or not set(target) <= set(isr):
        return None
    leader = p.leader
    if leader not in isr or leader not in live:
        leader = _eligible_leader(target, isr, live)
    return _record(tp, p, replicas=target, leader=leader, adding=(), removing=())


# -- elections (KIP-183, KIP-460) -------------------------------------------------------------
ALREADY_PREFERRED = ApiResult(errors.ELECTION_NOT_NEEDED, "already led by its preferred replica")
ALREADY_LED = ApiResult(errors.ELECTION_NOT_NEEDED, "the partition already has a leader")


def elect_preferred(tp: TopicPartition, p: PartitionRegistration,
                    live: Set[int]) -> PartitionChangeRecord | ApiResult:
    preferred = p.preferred
    if p.leader == preferred:
        return ALREADY_PREFERRED
    if preferred not in live:
        return ApiResult(errors.PREFERRED_LEADER_NOT_AVAILABLE,
                         f"{tp}: preferred replica {preferred} is offline")
    if preferred not in p.isr:
        return ApiResult(errors.PREFERRED_LEADER_NOT_AVAILABLE,
                         f"{tp}: preferred replica {preferred} is not in the ISR {list(p.isr)}")
    change = _record(tp, p, leader=preferred)  # a new leader: the epoch bumps
    assert change is not None
    return change


def elect_unclean(tp: TopicPartition, p: PartitionRegistration,
                  live: Set[int]) -> PartitionChangeRecord | ApiResult:
    """Elect any live replica of a leaderless partition, even outside the ISR (data may be lost)."""
    if p.leader != NO_LEADER:
        return ALREADY_LED
    clean = _eligible_leader(p.replicas, p.isr, live)
    if clean != NO_LEADER:  # an in-sync replica is back: a clean election, the ISR stays
        change = _record(tp, p, leader=clean)
    else:
        adding = set(p.adding)
        # Prefer a replica that held the data before this move over one still copying it.
        candidates = [r for r in p.replicas if r not in adding] + list(p.adding)
        leader = next((r for r in candidates if r in live), NO_LEADER)
        if leader == NO_LEADER:
            return ApiResult(errors.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                             f"{tp}: none of the replicas {list(p.replicas)} is alive")
        change = _record(tp, p, isr=(leader,), leader=leader)
    assert change is not None  # a new leader: the epoch bumps
    return change


# -- ISR changes (AlterPartition) and broker fencing ----------------------------------------------
def expand_isr(tp: TopicPartition, p: PartitionRegistration, broker: int,
               live: Set[int]) -> PartitionChangeRecord | None:
    """A caught-up replica joins the ISR; a leaderless partition gets it as leader."""
    if broker not in p.replicas or broker in p.isr or broker not in live:
        return None
    isr = (*p.isr, broker)
    leader = p.leader if p.leader != NO_LEADER else _eligible_leader(p.replicas, isr, live)
    return _record(tp, p, isr=isr, leader=leader)


def shrink_isr(tp: TopicPartition, p: PartitionRegistration, broker: int,
               live: Set[int]) -> PartitionChangeRecord | None:
    """Drop ``broker`` from the ISR (lagging too long, or fenced); re-elect if it led.

    The last ISR member is kept when no other replica can lead (as KRaft does), so a later
    clean election can still pick it when it comes back.
    """
    if broker not in p.isr:
        return None
    isr = tuple(r for r in p.isr if r != broker)
    leader = p.leader
    if leader in (broker, NO_LEADER):
        leader = _eligible_leader(p.replicas, isr, live)
    if not isr:
        if p.leader == NO_LEADER:
            return None
        isr, leader = p.isr, NO_LEADER
    return _record(tp, p, isr=isr, leader=leader)


def elect_if_leaderless(tp: TopicPartition, p: PartitionRegistration,
                        live: Set[int]) -> PartitionChangeRecord | None:
    """Clean election for a leaderless partition whose in-sync replica came back."""
    if p.leader != NO_LEADER:
        return None
    leader = _eligible_leader(p.replicas, p.isr, live)
    if leader == NO_LEADER:
        return None
    return _record(tp, p, leader=leader)
