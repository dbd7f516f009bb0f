"""How Apache Kafka 4.4's controller changes one partition, as pure functions.

The embedded cluster is a rehearsal of production, so it follows Kafka 4.4.0 — the release
the differential tests (tests/diff) run it against — and not a reading of the KIPs:

* :func:`build` is ``PartitionChangeBuilder.build``: from a partition and the targets a caller
  sets (ISR, replicas, adding, removing), it completes a reassignment that became complete,
  keeps the eligible leader replicas (KIP-966), elects a leader, fences removed replicas by
  a leader-epoch bump, and returns the one record that says what changed (or None);
* the other functions are the ``ReplicationControlManager`` entry points that set those
  targets: a reassignment started or re-targeted (``changePartitionReassignment``), cancelled
  (``cancelPartitionReassignment`` with ``PartitionReassignmentRevert``), a leader elected on
  request (``electLeader``), ISR and leadership updates when a broker is fenced, unfenced or
  restarts (``generateLeaderAndIsrUpdates``), and an ISR change sent by a partition leader
  (``alterPartition``).

Kafka 4.4 behaviours a user may not expect, kept on purpose because production has them:

* a re-target computes adding/removing against the *current* replica list (the target plus
  the replicas still being removed) and sets each only when it is non-empty, so a stale
  adding or removing list survives. A re-target back to a set that drops a replica still
  being added leaves it both adding and removing, and that reassignment never completes
  (``maybeCompleteReassignment`` waits for every adding replica in the ISR without the
  removing ones). kraftsman's executor never sends such a re-target (it cancels first);
* a reassignment completes once its adding replicas are in the ISR — every target replica
  only when it shrinks the replica set;
* a cancel restores "the replicas minus the adding ones" in the current order, not the
  original order, and is refused when every in-sync replica is an adding one (an unclean
  revert) unless unclean election is enabled for the topic;
* with ELR (the default of new 4.x clusters) the ISR may empty: a replica that leaves an
  ISR already below min.insync.replicas goes to the ELR and can still lead cleanly.

The leader-recovery state after an unclean election and directory assignments (JBOD) are
not modelled: neither shows in Metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from enum import Enum

from controller_core import errors
from controller_core.errors import ApiResult
from controller_core.metadata.records import PartitionChangeRecord
from controller_core.model import NO_LEADER, PartitionRegistration, TopicPartition

Acceptable = Callable[[int], bool]  # LeaderAcceptor: may this broker lead?


class ControllerFault(Exception):
    """What Kafka 4.4's controller throws mid-operation, renouncing its leadership and
    reverting to the last committed offset: the operation has no effect, and a broker
    registration that hits it fails every time (the broker cannot rejoin)."""


class Election(Enum):
    PREFERRED = "PREFERRED"  # the preferred replica if it can lead, else keep the partition online
    ONLINE = "ONLINE"  # any in-sync (or eligible) replica
    UNCLEAN = "UNCLEAN"  # ... and, failing that, any live replica (data may be lost)


@dataclass(frozen=True, slots=True)
class Rules:
    """What the controller reads besides the partition: the topic's effective
    min.insync.replicas (capped at its replication factor), whether ELR is enabled
    (eligible.leader.replicas.version), and the topic's unclean.leader.election.enable."""

    min_isr: int = 1
    elr: bool = True
    unclean: bool = False

    @property
    def election(self) -> Election:
        """The election of ISR and fencing updates, cancels and ISR changes."""
        return Election.UNCLEAN if self.unclean else Election.ONLINE


def after(p: PartitionRegistration, c: PartitionChangeRecord) -> PartitionRegistration:
    """The registration once ``c`` is applied (the partition epoch always bumps)."""
    # tuple.__new__ skips the named tuple's Python-level __new__: one per partition change
    return _new_registration(PartitionRegistration, (
        p.replicas if c.replicas is None else c.replicas,
        p.isr if c.isr is None else c.isr,
        p.leader if c.leader is None else c.leader,
        p.leader_epoch if c.leader_epoch is None else c.leader_epoch,
        p.partition_epoch + 1,
        p.adding if c.adding is None else c.adding,
        p.removing if c.removing is None else c.removing,
        p.elr if c.elr is None else c.elr,
        p.last_known_elr if c.last_known_elr is None else c.last_known_elr,
        _directories(p, c),
    ))


_new_registration = tuple.__new__
_new_record = tuple.__new__


def _directories(p: PartitionRegistration, c: PartitionChangeRecord) -> tuple[str, ...]:
    """KIP-858: the directories a change leaves. Given, they are the record's; otherwise a
    replica that stays keeps its directory and a new one is unassigned (""), as Kafka's
    PartitionChangeBuilder fills them in."""
    if c.directories is not None:
        return c.directories
    if c.replicas is None or not p.directories or c.replicas == p.replicas:
        return p.directories
    kept = dict(zip(p.replicas, p.directories, strict=True))
    dirs = tuple(kept.get(r, "") for r in c.replicas)
    return dirs if any(dirs) else ()


def hash_order(ids: Iterable[int]) -> tuple[int, ...]:
    """The iteration order of a small Java ``HashSet`` / Scala ``mutable.HashSet`` of broker
    ids (16 buckets, growing at 3/4 full; bucket = (h ^ h >>> 16) mod size). A partition
    leader sends its new ISR in this order (``Partition.prepareIsrExpand``/``Shrink`` build it
    from a set), and the controller fills the ELR from one, so the ISR a describe shows
    after a follower rejoins is, for ids below 16, ascending — not the order it joined in."""
    unique = list(dict.fromkeys(ids))
    if len(unique) < 12 and unique and min(unique) >= 0 and max(unique) < 0x10000:
        # the common case: 16 buckets and ids below 2^16, whose h is the id itself; each
        # (bucket, h) packed into one int, sorted, unpacked (one per ISR change)
        return tuple([i & 0xFFFF for i in sorted([(i & 15) << 16 | i for i in unique])])
    return _hash_set_order(unique)


def _hash_set_order(unique: list[int]) -> tuple[int, ...]:
    """:func:`hash_order` of distinct ids, any of them, the long way."""
    size = 16
    while len(unique) >= size * 3 // 4:
        size *= 2

    def key(i: int) -> tuple[int, int]:
        h = (i ^ ((i & 0xFFFFFFFF) >> 16)) & 0xFFFFFFFF
        return h & (size - 1), h

    return tuple(sorted(unique, key=key))


# -- PartitionChangeBuilder ---------------------------------------------------------------------
def build(tp: TopicPartition, p: PartitionRegistration, acceptable: Acceptable, rules: Rules, *,
          election: Election = Election.ONLINE, isr: Sequence[int] | None = None,
          replicas: Sequence[int] | None = None, adding: Sequence[int] | None = None,
          removing: Sequence[int] | None = None, unclean_shutdown: frozenset[int] = frozenset(),
          ) -> PartitionChangeRecord | None:
    """The record that moves ``p`` to the given targets (None: nothing changes)."""
    acceptable = _assigned_only(p, acceptable)
    # read, never changed in place: no copies (a reassignment builds 200,000 records)
    t_isr: Sequence[int] = p.isr if isr is None else isr
    t_replicas: Sequence[int] = p.replicas if replicas is None else replicas
    t_adding: Sequence[int] = p.adding if adding is None else adding
    t_removing: Sequence[int] = p.removing if removing is None else removing
    t_elr: Sequence[int] = p.elr

    # completeReassignmentIfNeeded
    if t_adding or t_removing:
        done = _completed(t_replicas, t_isr, t_adding, t_removing)
        if done is not None:
            t_replicas, t_isr = done
            t_adding, t_removing = [], []

    # maybePopulateTargetElr: below min.insync.replicas, who leaves the ISR stays eligible
    if rules.elr:
        if len(t_isr) >= rules.min_isr:
            t_elr = []
        else:
            in_isr = set(t_isr)
            t_elr = [r for r in hash_order([*t_elr, *p.isr])
                     if r not in in_isr and r not in unclean_shutdown]

    # tryElection
    leader, unclean = _elect(p, acceptable, rules, election, t_isr, t_replicas, t_elr)
    new_leader: int | None = None
    new_isr: Sequence[int] | None = None
    if leader != p.leader:
        if leader in t_elr:
            t_isr = [leader]
            t_elr = [r for r in t_elr if r != leader]
        new_leader = leader
        if unclean:
            new_isr = [leader]

    # triggerLeaderEpochBumpForReplicaReassignmentIfNeeded: a replica that leaves is fenced
    replicas_now = tuple(t_replicas)
    if new_leader is None and replicas_now != p.replicas \
            and not set(p.replicas) <= set(replicas_now):
        new_leader = p.leader

    # maybeUpdateRecordElr
    if new_isr is not None or not rules.elr:
        t_elr = []
    elr_now = tuple(t_elr)
    new_elr = elr_now if elr_now != p.elr else None

    isr_now = tuple(t_isr)
    if new_isr is None and (t_isr or rules.elr) and isr_now != p.isr:
        new_isr = t_isr

    # maybeUpdateLastKnownLeader (the last known leader, not the last ELR, is kept)
    new_last: tuple[int, ...] | None = None
    if rules.elr:
        if new_leader == NO_LEADER and not p.last_known_elr:
            new_last = (p.leader,)
        elif new_leader is not None and new_leader >= 0 and p.last_known_elr:
            new_last = ()

    adding_now, removing_now = tuple(t_adding), tuple(t_removing)
    new_replicas = replicas_now if replicas_now and replicas_now != p.replicas else None
    new_adding = adding_now if adding_now != p.adding else None
    new_removing = removing_now if removing_now != p.removing else None
    if (new_replicas is None and new_isr is None and new_leader is None and new_adding is None
            and new_removing is None and new_elr is None and new_last is None):
        return None
    # tuple.__new__ skips the named tuple's Python-level __new__ (one per partition change);
    # the fields in PartitionChangeRecord's order, ``directories`` left None
    return _new_record(PartitionChangeRecord, (
        tp.topic, tp.partition, new_replicas,
        None if new_isr is None else tuple(new_isr),
        new_leader, None if new_leader is None else p.leader_epoch + 1,
        new_adding, new_removing, new_elr, new_last, None))


def _assigned_only(p: PartitionRegistration, acceptable: Acceptable) -> Acceptable:
    """Kafka's LeaderAcceptor looks up the replica's log directory once the broker passes
    the acceptability check (active, not being removed), and that lookup throws for a broker
    that is no replica of the partition. The builder asks that of its last known leader
    without checking membership, and after an unclean revert (a cancel that dropped the
    adding replica leading the partition) the last known leader is exactly such a broker:
    while it is active, every broker registration that revisits the partition fails; a
    fenced one is merely not acceptable."""
    def check(r: int) -> bool:
        if not acceptable(r):
            return False
        if r not in p.replicas:
            raise ControllerFault(f"Replica {r} is not assigned to this partition.")
        return True
    return check


def _completed(replicas: Sequence[int], isr: Sequence[int], adding: Sequence[int],
               removing: Sequence[int]) -> tuple[Sequence[int], Sequence[int]] | None:
    """PartitionReassignmentReplicas.maybeCompleteReassignment (4.4): the replicas and ISR
    once the move completes, or None while it must wait."""
    new_isr, new_replicas = isr, replicas
    if removing:
        gone = set(removing)
        new_isr = [r for r in isr if r not in gone]
        new_replicas = [r for r in replicas if r not in gone]
        if not new_isr or not new_replicas:
            return None
    in_sync = set(new_isr)
    if not in_sync.issuperset(adding):
        return None
    if len(adding) < len(removing) and not in_sync.issuperset(new_replicas):
        return None
    return new_replicas, new_isr


def _elect(p: PartitionRegistration, acceptable: Acceptable, rules: Rules, election: Election,
           isr: Sequence[int], replicas: Sequence[int], elr: Sequence[int]
           ) -> tuple[int, bool]:
    """PartitionChangeBuilder.electLeader: (leader, unclean)."""
    in_isr = set(isr)
    if election is not Election.PREFERRED and p.leader in in_isr and acceptable(p.leader):
        return p.leader, False  # valid(p.leader) below, the usual answer, without closures
    eligible = set(elr)

    def valid(r: int) -> bool:  # short-circuits as Kafka's does: only members are looked up
        return (r in in_isr or (not in_isr and r in eligible)) and acceptable(r)

    def last_known() -> bool:
        return (rules.elr and not isr and not elr and len(p.last_known_elr) == 1
                and acceptable(p.last_known_elr[0]))

    if election is Election.PREFERRED:
        if replicas and valid(replicas[0]):
            return replicas[0], False
        if valid(p.leader):
            return p.leader, False
        for r in replicas[1:]:
            if valid(r):
                return r, False
        if last_known():
            return p.last_known_elr[0], True
        return NO_LEADER, False
    if valid(p.leader):
        return p.leader, False
    for r in replicas:
        if valid(r):
            return r, False
    if last_known():
        return p.last_known_elr[0], True
    if election is Election.UNCLEAN:
        for r in replicas:
            if acceptable(r):
                return r, True
    return NO_LEADER, False


# -- ReplicationControlManager -----------------------------------------------------------------
def change_reassignment(tp: TopicPartition, p: PartitionRegistration, target: Sequence[int],
                        acceptable: Acceptable, rules: Rules) -> PartitionChangeRecord | None:
    """Start, re-target or (a target equal to the replicas) keep a move: adding and removing
    are computed against the current replica list, sorted, and only a non-empty one is set.
    The caller has validated the target (``manual_assignment_problem``)."""
    removing = sorted(set(p.replicas) - set(target))
    adding = sorted(set(target) - set(p.replicas))
    return build(tp, p, acceptable, rules, replicas=[*target, *removing],
                 removing=removing or None, adding=adding or None)


def cancel_reassignment(tp: TopicPartition, p: PartitionRegistration, acceptable: Acceptable,
                        rules: Rules) -> PartitionChangeRecord | ApiResult | None:
    """Revert to the replicas minus the adding ones (in their current order), the ISR minus
    the adding ones; refused when that ISR is empty, unless the topic allows an unclean
    election (then its first original replica is the ISR)."""
    if not p.is_reassigning:
        # Kafka throws NoReassignmentInProgressException with the error's default message,
        # and ApiError.fromThrowable drops a message equal to the default one: none is sent.
        return ApiResult(errors.NO_REASSIGNMENT_IN_PROGRESS, "")
    adding = set(p.adding)
    original = [r for r in p.replicas if r not in adding]
    isr = [r for r in p.isr if r not in adding]
    if not isr:
        if not original:
            return ApiResult(errors.INVALID_REPLICA_ASSIGNMENT,
                             "Invalid replica assignment: addingReplicas contains all replicas.")
        if not rules.unclean:
            return ApiResult(
                errors.INVALID_REPLICA_ASSIGNMENT,
                f"Unable to revert partition assignment for {tp.topic}:{tp.partition} because "
                "it would require an unclean leader election.")
        isr = [original[0]]
    return build(tp, p, acceptable, rules, election=rules.election, isr=isr, replicas=original,
                 removing=(), adding=())


def would_strand(replicas: Sequence[int], adding: Sequence[int], removing: Sequence[int],
                 target: Sequence[int]) -> bool:
    """Whether sending ``target`` to a partition moving as (replicas, adding, removing) would
    leave Kafka 4.4 with a stale adding or removing list (see the module docstring): a
    replica both adding and removing never completes, and a stale removing list drops
    replicas the target keeps. The executor cancels such a move first and starts the target
    afresh."""
    current, wanted = set(replicas), set(target)
    new_removing, new_adding = current - wanted, wanted - current
    return bool((not new_adding and new_removing & set(adding))
                or (not new_removing and removing))


def manual_assignment_problem(replicas: Sequence[int], registered: Iterable[int],
                              replication_factor: int | None = None, *,
                              cordoned: Callable[[int], bool] = lambda b: False) -> str | None:
    """ReplicationControlManager.validateManualPartitionAssignment, in Kafka's order and words:
    an empty list; then, walking the ids in ascending order, the first one not registered,
    with all its log directories ``cordoned`` (KIP-1066) or seen twice (so a negative id is
    an unregistered broker); then a replica count unlike ``replication_factor``."""
    if not replicas:
        return "The manual partition assignment includes an empty replica list."
    # a mapping or set is looked up as it is: copying the brokers per partition was most of
    # the cost of validating a 100,000-partition reassignment
    known = registered if isinstance(registered, AbstractSet | Mapping) else set(registered)
    previous = None
    for b in sorted(replicas):
        if b not in known:
            return (f"The manual partition assignment includes broker {b}, but no such broker "
                    "is registered.")
        if cordoned(b):
            return (f"The manual partition assignment includes broker {b}, but all its log "
                    "directories are cordoned.")
        if b == previous:
            return f"The manual partition assignment includes the broker {b} more than once."
        previous = b
    if replication_factor is not None and len(replicas) != replication_factor:
        return (f"The manual partition assignment includes a partition with {len(replicas)} "
                "replica(s), but this is not consistent with previous partitions, which have "
                f"{replication_factor} replica(s).")
    return None


# ReplicationControlManager.electLeader answers ``new ApiError(Errors.X)``, whose message is
# the error's default one (kafka-clients' Errors), and electLeaders sends it as the
# partition's error message.
ELECTION_NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."
PREFERRED_LEADER_NOT_AVAILABLE_MESSAGE = "The preferred leader was not available."
ELIGIBLE_LEADERS_NOT_AVAILABLE_MESSAGE = "Eligible topic partition leaders are not available."


def elect_leader(tp: TopicPartition, p: PartitionRegistration, preferred: bool,
                 acceptable: Acceptable, rules: Rules) -> PartitionChangeRecord | ApiResult:
    """ElectLeaders for one partition: ELECTION_NOT_NEEDED when it already has the leader
    asked for, else the election, or the error Kafka answers when it elects nobody (each
    with Kafka's default message for that error)."""
    if (p.leader == p.preferred) if preferred else (p.leader != NO_LEADER):
        return ApiResult(errors.ELECTION_NOT_NEEDED, ELECTION_NOT_NEEDED_MESSAGE)
    change = build(tp, p, acceptable, rules,
                   election=Election.PREFERRED if preferred else Election.UNCLEAN)
    if change is None:
        if preferred:
            return ApiResult(errors.PREFERRED_LEADER_NOT_AVAILABLE,
                             PREFERRED_LEADER_NOT_AVAILABLE_MESSAGE)
        return ApiResult(errors.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                         ELIGIBLE_LEADERS_NOT_AVAILABLE_MESSAGE)
    return change


def leader_and_isr_update(tp: TopicPartition, p: PartitionRegistration, active: Acceptable,
                          rules: Rules, *, remove: int = NO_LEADER, add: int = NO_LEADER,
                          unclean_shutdown: int = NO_LEADER) -> PartitionChangeRecord | None:
    """generateLeaderAndIsrUpdates for one partition: ``remove`` leaves the ISR and may not
    lead (fenced, shutting down), ``add`` may lead though not active yet (being unfenced),
    ``unclean_shutdown`` leaves the ISR and the ELR (restarted after a crash)."""
    def acceptable(r: int) -> bool:
        return r not in (remove, unclean_shutdown) and (r == add or active(r))

    isr = [r for r in p.isr if r not in (remove, unclean_shutdown)]
    return build(tp, p, acceptable, rules, election=rules.election, isr=isr,
                 unclean_shutdown=frozenset() if unclean_shutdown == NO_LEADER
                 else frozenset({unclean_shutdown}))


def alter_isr(tp: TopicPartition, p: PartitionRegistration, new_isr: Sequence[int],
              active: Acceptable, rules: Rules) -> PartitionChangeRecord | ApiResult | None:
    """AlterPartition from the partition's leader: its new ISR (expanded with a caught-up
    follower, or shrunk by a lagging one), validated as the controller validates it."""
    if p.leader == NO_LEADER:
        return ApiResult(errors.INVALID_REQUEST, f"{tp} has no leader to alter its ISR")
    members = set(new_isr)
    if not members <= set(p.replicas) or len(members) != len(new_isr):
        return ApiResult(errors.INVALID_REQUEST, f"{tp}: invalid ISR {list(new_isr)}")
    if p.leader not in new_isr:
        return ApiResult(errors.INVALID_REQUEST,
                         f"{tp}: the new ISR {list(new_isr)} does not include the leader")
    if not all(map(active, new_isr)):
        ineligible = [r for r in new_isr if not active(r)]
        return ApiResult(errors.INELIGIBLE_REPLICA,
                         f"{tp}: ineligible replicas {ineligible} in the new ISR")
    return build(tp, p, active, rules, election=rules.election, isr=new_isr)

