"""Property tests of the controller core (issue 2, "Tests"), as Kafka 4.4 behaves.

Two layers:

* the pure transitions of :mod:`controller_core.metadata.partition_change` (Kafka 4.4's
  PartitionChangeBuilder and ReplicationControlManager), over partition registrations the
  controller can reach, live-broker sets and topic rules (min.insync.replicas, eligible
  leader replicas, unclean.leader.election.enable);
* the durable embedded cluster, driven by a hypothesis state machine through random
  interleavings of reassign / cancel / re-target / broker failure and return / time /
  preferred and unclean elections / throttles / snapshots / restart from disk (clean and
  crash), checking the invariants of KIP-455, KIP-179, KIP-183 and KIP-966 after every step.

What Kafka 4.4 guarantees, and so what is checked: R, the ISR and the ELR have no repeats;
ISR ⊆ R; a leader is in the ISR (with ELR the ISR may empty, and then there is none); the
ELR and the ISR are disjoint; a last known leader only while there is no leader; adding
and removing are sorted subsets of R; every change bumps the partition epoch; the leader
epoch bumps exactly when the leader changes or a replica leaves R; a new leader is a broker
the controller accepts. What Kafka does not guarantee is not checked: a re-target that
adds nothing can leave a replica both adding and removing (a stranded move that never
completes) or keep a stale removing list — ``partition_change.would_strand`` predicts
both, and the properties check that prediction against the builder.

``HYPOTHESIS_PROFILE=soak`` runs far more and longer histories (see conftest.py). A failing
history is printed step by step by hypothesis together with a ``@reproduce_failure`` blob.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Sequence, Set
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import given, note, reject, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from controller_core import errors
from controller_core.admin import (
    IN_SYNC,
    LEADERLESS,
    NOT_HOSTED,
    OFFLINE,
    UNKNOWN_BROKER,
    UNKNOWN_PARTITION,
    UNKNOWN_TOPIC,
)
from controller_core.config import EmbeddedClusterSpec
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.errors import ApiResult, ErrorCode
from controller_core.metadata import partition_change as pc
from controller_core.metadata.controller import THROTTLE_RATE_KEYS, THROTTLE_REPLICA_KEYS
from controller_core.metadata.records import PartitionChangeRecord
from controller_core.model import NO_LEADER, ElectionType, PartitionRegistration, TopicPartition
from controller_core.storage.framing import encode_frame

from .conftest import core_profile
from .strategies import (
    TP,
    PartitionCase,
    alive,
    apply_change,
    cluster_specs,
    partition_cases,
    replica_lists,
)

PROFILE = settings.get_profile(core_profile())
PURE = settings(PROFILE, max_examples=PROFILE.max_examples * 2)
BEHIND = re.compile(r"^behind: [1-9]\d* messages$")
STATIC_WORDS = {IN_SYNC, LEADERLESS, NOT_HOSTED, OFFLINE, UNKNOWN_BROKER, UNKNOWN_PARTITION,
                UNKNOWN_TOPIC}
T = TypeVar("T")
UNCLEAN_REVERT = ("Unable to revert partition assignment for {tp.topic}:{tp.partition} because "
                  "it would require an unclean leader election.")


# -- shared checks -------------------------------------------------------------------------------
def check_registration(tp: TopicPartition, p: PartitionRegistration, *, elr: bool) -> None:
    """What Kafka 4.4 keeps true of every partition at every moment (``elr``: eligible
    leader replicas enabled)."""
    where = f"{tp}: {p}"
    for name, ids in (("R", p.replicas), ("ISR", p.isr), ("ELR", p.elr)):
        assert len(set(ids)) == len(ids), f"repeated replica in {name} — {where}"
    assert set(p.isr) <= set(p.replicas), f"ISR ⊄ R — {where}"
    assert elr or p.isr, f"empty ISR without ELR — {where}"
    assert p.leader == NO_LEADER or p.leader in p.isr, f"leader outside the ISR — {where}"
    assert not set(p.elr) & set(p.isr), f"ELR ∩ ISR ≠ ∅ — {where}"
    assert elr or not (p.elr or p.last_known_elr), f"ELR fields without ELR — {where}"
    assert len(p.last_known_elr) <= 1, f"more than one last known leader — {where}"
    assert p.leader == NO_LEADER or not p.last_known_elr, \
        f"a last known leader while one leads — {where}"
    for name, ids in (("AR", p.adding), ("RR", p.removing)):
        assert set(ids) <= set(p.replicas), f"{name} ⊄ R — {where}"
        assert list(ids) == sorted(set(ids)), f"{name} not sorted (Kafka sorts it) — {where}"


def kafka_leader_epoch(before: PartitionRegistration, after: PartitionRegistration) -> int:
    """The leader epoch PartitionChangeBuilder gives ``after``: one more on a leader change
    (tryElection) or when a replica leaves the replica set
    (triggerLeaderEpochBumpForReplicaReassignmentIfNeeded); not for an ISR change at the
    current metadata version (triggerLeaderEpochBumpForIsrShrinkIfNeeded: below 3.6 only)."""
    replica_left = not set(after.replicas) >= set(before.replicas)
    return before.leader_epoch + int(after.leader != before.leader or replica_left)


def completes(replicas: Sequence[int], isr: Sequence[int], adding: Sequence[int],
              removing: Sequence[int]) -> bool:
    """PartitionReassignmentReplicas.maybeCompleteReassignment (4.4): a move completes once
    its adding replicas are in the ISR without the removing ones (not empty), and — only
    when it adds fewer replicas than it removes — once every target replica is."""
    if not adding and not removing:
        return False
    gone = set(removing)
    new_isr = {r for r in isr if r not in gone}
    target = {r for r in replicas if r not in gone}
    if removing and (not new_isr or not target):
        return False
    return set(adding) <= new_isr and (len(adding) >= len(removing) or target <= new_isr)


def faults(p: PartitionRegistration, live: Set[int]) -> bool:
    """Whether Kafka 4.4's LeaderAcceptor may throw (the controller renounces; the operation
    has no effect): it looks up the log directory of a broker that passes the acceptability
    check (alive, not the one being removed), and that throws for a broker that is no
    replica. Only eligible or last known leaders can be such brokers (after an unclean
    revert, or a move that completed below min.insync.replicas)."""
    return bool((set(p.elr) | set(p.last_known_elr)) - set(p.replicas) & live)


# -- pure transitions ----------------------------------------------------------------------------
def _or_fault(p: PartitionRegistration, live: Set[int], change: Callable[[], T]) -> T:
    """``change()``; where Kafka 4.4's controller would fault (``faults``) the example is
    dropped — the operation has no effect there — and a fault anywhere else fails."""
    try:
        return change()
    except pc.ControllerFault:
        assert faults(p, live), f"a controller fault Kafka would not have: {p}"
        reject()


def _apply(p: PartitionRegistration, out: object, rules: pc.Rules,
           acceptable: pc.Acceptable) -> PartitionRegistration:
    """Apply a transition's record and check what every transition keeps true."""
    assert isinstance(out, PartitionChangeRecord), out
    after = apply_change(p, out)
    check_registration(TP, after, elr=rules.elr)
    assert after.leader_epoch == kafka_leader_epoch(p, after), \
        f"leader epoch {p.leader_epoch} -> {after.leader_epoch}, not as Kafka: {p} -> {after}"
    assert after.partition_epoch == p.partition_epoch + 1
    if after.leader not in (p.leader, NO_LEADER):
        assert acceptable(after.leader), f"elected {after.leader}, which may not lead: {after}"
    return after


def _valid(p: PartitionRegistration, r: int, live: Set[int]) -> bool:
    """PartitionChangeBuilder.isValidNewLeader over the partition as it stands."""
    return (r in p.isr or (not p.isr and r in p.elr)) and r in live


def _shape(p: PartitionRegistration, target: Sequence[int]
           ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(R, adding, removing) as changePartitionReassignment sets them, before completion:
    computed against the current replica list, sorted, each list set only when non-empty."""
    removing = tuple(sorted(set(p.replicas) - set(target)))
    adding = tuple(sorted(set(target) - set(p.replicas)))
    return tuple(target) + removing, adding or p.adding, removing or p.removing


def _heads_to(p: PartitionRegistration) -> tuple[int, ...]:
    return p.target if p.is_reassigning else p.replicas


@PURE
@given(case=partition_cases(), data=st.data())
def test_change_reassignment_shapes_the_move(case: PartitionCase, data: st.DataObject) -> None:
    """changePartitionReassignment (4.4): the new R, adding and removing are computed against
    the current replica list; no target is refused; the ISR and a valid leader stay unless
    the move completes at once; ``would_strand`` says exactly when the outcome is a move
    that never completes or heads somewhere other than the target."""
    p, live, rules = case.reg, case.live, case.rules
    target = data.draw(replica_lists(case.brokers), label="target")
    replicas, adding, removing = _shape(p, target)
    done = completes(replicas, p.isr, adding, removing)
    out = _or_fault(p, live, partial(pc.change_reassignment, TP, p, target, alive(live), rules))
    if out is None:
        assert (replicas, adding, removing) == (p.replicas, p.adding, p.removing) and not done
        after = p
    else:
        assert not isinstance(out, ApiResult), f"Kafka 4.4 refuses no target: {out}"
        after = _apply(p, out, rules, alive(live))
        gone = set(removing)
        if done:
            assert not after.is_reassigning
            assert after.replicas == tuple(r for r in replicas if r not in gone)
            assert after.isr == tuple(r for r in p.isr if r not in gone)
        else:
            assert (after.replicas, after.adding, after.removing) == (replicas, adding,
                                                                     removing)
            assert after.isr == p.isr or (after.isr == (after.leader,) and after.leader in p.elr)
        if p.leader in after.isr and p.leader in live:
            assert after.leader == p.leader, "a kept, live, in-sync leader keeps leading"
    stuck = bool(set(after.adding) & set(after.removing))
    assert pc.would_strand(p.replicas, p.adding, p.removing, target) == (
        stuck or _heads_to(after) != tuple(target)), f"{p} -> {list(target)}: {after}"
    if not p.is_reassigning:
        assert not stuck and _heads_to(after) == tuple(target)


@PURE
@given(case=partition_cases(), data=st.data())
def test_change_then_cancel_restores_the_replicas_minus_the_adding_ones(
        case: PartitionCase, data: st.DataObject) -> None:
    """cancelPartitionReassignment with PartitionReassignmentRevert (4.4): the replicas minus
    the adding ones, in their current order, and the ISR minus the adding ones; refused
    (INVALID_REPLICA_ASSIGNMENT) when that ISR is empty, unless the topic allows an unclean
    election — then its first original replica is the ISR. A cancel of a move that started
    from a stable partition restores its replica set; dropping adding replicas fences them."""
    p, live, rules = case.reg, case.live, case.rules
    target = data.draw(replica_lists(case.brokers), label="target")
    out = _or_fault(p, live, partial(pc.change_reassignment, TP, p, target, alive(live), rules))
    moving = p if out is None else _apply(p, out, rules, alive(live))
    if not moving.is_reassigning:
        assert pc.cancel_reassignment(TP, moving, alive(live), rules) == ApiResult(
            errors.NO_REASSIGNMENT_IN_PROGRESS, "")
        return
    original = tuple(r for r in moving.replicas if r not in moving.adding)
    isr = tuple(r for r in moving.isr if r not in moving.adding)
    try:
        cancelled = pc.cancel_reassignment(TP, moving, alive(live), rules)
    except pc.ControllerFault:
        assert faults(moving, live), moving
        return
    if not isr and not original:
        assert cancelled == ApiResult(errors.INVALID_REPLICA_ASSIGNMENT, "Invalid replica "
                                      "assignment: addingReplicas contains all replicas.")
        return
    if not isr and not rules.unclean:
        assert cancelled == ApiResult(errors.INVALID_REPLICA_ASSIGNMENT,
                                      UNCLEAN_REVERT.format(tp=TP))
        return
    after = _apply(moving, cancelled, rules, alive(live))
    assert after.replicas == original and not after.is_reassigning
    expected_isr = isr or original[:1]
    assert after.isr == expected_isr or (after.isr == (after.leader,)
                                         and after.leader != moving.leader)
    if not p.is_reassigning:
        assert set(after.replicas) == set(p.replicas), "a cancel restores the replica set"
    if moving.leader in expected_isr and moving.leader in live:
        assert after.leader == moving.leader
    elif set(expected_isr) & live:
        assert after.leader in expected_isr and after.leader in live, "an in-sync one leads"


@PURE
@given(case=partition_cases(moving=False), data=st.data())
def test_a_move_completes_once_its_adding_replicas_are_in_sync(case: PartitionCase,
                                                               data: st.DataObject) -> None:
    """The leader adds caught-up replicas to the ISR one by one (AlterPartition, set order);
    the move completes in the record of the ISR change that satisfies
    maybeCompleteReassignment — the adding replicas in sync, and the whole target only when
    fewer are added than removed — on the target, in the target's order; a completion that
    drops replicas fences them by a leader-epoch bump."""
    p, rules = case.reg, case.rules
    if p.leader == NO_LEADER:
        return
    target = tuple(data.draw(replica_lists(case.brokers), label="target"))
    live = case.live | set(target) | {p.leader}  # who catches up and who sends AlterPartition
    out = _or_fault(p, live, partial(pc.change_reassignment, TP, p, target, alive(live), rules))
    reg = p if out is None else _apply(p, out, rules, alive(live))
    joining = [r for r in (*reg.adding, *target) if r not in reg.isr]
    for r in dict.fromkeys(joining):
        if not reg.is_reassigning:
            break
        before = reg
        isr = pc.hash_order([*reg.isr, r])
        out = _or_fault(reg, live, partial(pc.alter_isr, TP, reg, isr, alive(live), rules))
        reg = _apply(reg, out, rules, alive(live))
        done = (set(before.adding) <= set(isr) - set(before.removing)
                and (len(before.adding) >= len(before.removing) or set(target) <= set(isr)))
        assert reg.is_reassigning != done, f"completion as Kafka 4.4: {before} + {r} -> {reg}"
        if done and before.removing:
            assert reg.leader_epoch > before.leader_epoch, "completion fences the removed"
    assert not reg.is_reassigning, f"the target is in sync, yet the move waits: {reg}"
    assert reg.replicas == target, "after completion R is the target, in the target's order"
    assert set(reg.isr) <= set(target)
    assert reg.leader in target and reg.leader in live


@PURE
@given(case=partition_cases(moving=True), data=st.data())
def test_a_stranded_move_never_completes_and_a_cancel_gets_out(case: PartitionCase,
                                                               data: st.DataObject) -> None:
    """A re-target that adds nothing but drops a replica still being added leaves it both
    adding and removing (4.4, differential scenario retarget): however the ISR grows, the
    move never completes; the same target again changes nothing; a cancel (with an
    in-sync original replica) ends it."""
    p, rules = case.reg, case.rules
    target = tuple(data.draw(replica_lists(case.brokers), label="target"))
    live = set(case.brokers)
    acceptable = alive(live)
    out = _or_fault(p, live, partial(pc.change_reassignment, TP, p, target, acceptable, rules))
    reg = p if out is None else _apply(p, out, rules, acceptable)
    again = partial(pc.change_reassignment, TP, reg, target, acceptable, rules)
    if not set(reg.adding) & set(reg.removing):
        if reg.is_reassigning and not pc.would_strand(p.replicas, p.adding, p.removing, target) \
                and not completes(reg.replicas, reg.isr, reg.adding, reg.removing):
            # (a move left completable by the election that started it completes instead)
            assert _or_fault(reg, live, again) is None, "the same target again changes nothing"
        return
    assert _or_fault(reg, live, again) is None
    for r in reg.replicas:
        if r not in reg.isr and reg.leader != NO_LEADER:
            isr = pc.hash_order([*reg.isr, r])
            out = _or_fault(reg, live, partial(pc.alter_isr, TP, reg, isr, acceptable, rules))
            reg = _apply(reg, out, rules, acceptable)
            assert reg.is_reassigning, f"a stranded move completed: {reg}"
    if set(reg.isr) - set(reg.adding):
        out = _or_fault(reg, live, partial(pc.cancel_reassignment, TP, reg, acceptable, rules))
        assert not _apply(reg, out, rules, acceptable).is_reassigning


@PURE
@given(case=partition_cases())
def test_preferred_election(case: PartitionCase) -> None:
    """ElectLeaders PREFERRED: not needed when the first replica leads; the first replica
    when it may lead (in the ISR — or, with an empty ISR, in the ELR — and alive); else the
    builder's other outcome, or PREFERRED_LEADER_NOT_AVAILABLE when it changes nothing."""
    p, live, rules = case.reg, case.live, case.rules
    try:
        out = pc.elect_leader(TP, p, True, alive(live), rules)
    except pc.ControllerFault:
        assert faults(p, live), p
        return
    if p.leader == p.preferred:
        assert out == ApiResult(errors.ELECTION_NOT_NEEDED,
                                "Leader election not needed for topic partition.")
        return
    if isinstance(out, ApiResult):
        assert out == ApiResult(errors.PREFERRED_LEADER_NOT_AVAILABLE,
                                "The preferred leader was not available.")
        assert not _valid(p, p.preferred, live)
        return
    after = _apply(p, out, rules, alive(live))
    if _valid(p, p.preferred, live):
        assert after.leader == p.preferred and after.leader_epoch > p.leader_epoch
        if p.preferred not in p.isr:  # elected from the ELR: it alone is the ISR
            assert after.isr == (p.preferred,)
    else:
        assert after.leader == p.leader or not _valid(p, p.leader, live)


@PURE
@given(case=partition_cases())
def test_unclean_election(case: PartitionCase) -> None:
    """ElectLeaders UNCLEAN (PartitionChangeBuilder.electAnyLeader): not needed while a
    leader lives; a clean choice first (the first valid replica in replica order), then the
    last known leader (KIP-966), then the first live replica in replica order (differential
    scenario unclean-mid-move) — the ISR is then that leader alone and the ELR is cleared."""
    p, live, rules = case.reg, case.live, case.rules
    try:
        out = pc.elect_leader(TP, p, False, alive(live), rules)
    except pc.ControllerFault:
        assert faults(p, live), p
        return
    if p.leader != NO_LEADER:
        assert out == ApiResult(errors.ELECTION_NOT_NEEDED,
                                "Leader election not needed for topic partition.")
        return
    if isinstance(out, ApiResult):
        assert out == ApiResult(errors.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                                "Eligible topic partition leaders are not available.")
        assert not set(p.replicas) & live
        return
    after = _apply(p, out, rules, alive(live))
    if not set(p.replicas) & live:
        assert after.leader == NO_LEADER  # a record that elects nobody (e.g. the ELR)
        return
    clean = [r for r in p.replicas if _valid(p, r, live)]
    last = p.last_known_elr
    if clean:
        assert after.leader == clean[0]
        assert after.isr == (p.isr if clean[0] in p.isr else (clean[0],))
    elif rules.elr and not p.isr and not p.elr and len(last) == 1 and last[0] in live:
        assert (after.leader, after.isr, after.elr) == (last[0], (last[0],), ())
    else:
        first = next(r for r in p.replicas if r in live)
        assert (after.leader, after.isr, after.elr) == (first, (first,), ())
    assert after.leader_epoch == p.leader_epoch + 1


OPS = ("change", "cancel", "join", "lag", "preferred", "unclean", "fence", "unfence",
       "restart", "min_isr")
SKIP = object()  # the controller would not revisit this partition


def _transition(op: str, broker: int, p: PartitionRegistration, live: set[int],
                rules: pc.Rules, data: st.DataObject, brokers: tuple[int, ...]) -> object:
    """One of the controller's transitions of ``p``, as Controller calls it (``live`` is
    updated for a broker fenced or unfenced); SKIP when the controller would not touch it."""
    if op == "change":
        target = data.draw(replica_lists(brokers), label="target")
        return pc.change_reassignment(TP, p, target, alive(live), rules)
    if op == "cancel":
        return pc.cancel_reassignment(TP, p, alive(live), rules)
    if op in ("join", "lag"):
        isr = [*p.isr, broker] if op == "join" else [r for r in p.isr if r != broker]
        return pc.alter_isr(TP, p, pc.hash_order(isr), alive(live), rules)
    if op in ("preferred", "unclean"):
        return pc.elect_leader(TP, p, op == "preferred", alive(live), rules)
    if op == "fence":  # ReplicationControlManager revisits the broker's ISRs
        if broker not in live:
            return SKIP
        live.discard(broker)
        if broker not in p.isr:
            return SKIP
        return pc.leader_and_isr_update(TP, p, alive(live), rules, remove=broker)
    if op == "unfence":  # ... and the partitions without a leader
        if broker in live:
            return SKIP
        live.add(broker)
        if p.leader != NO_LEADER:
            return SKIP
        return pc.leader_and_isr_update(TP, p, alive(live), rules, add=broker)
    assert op == "restart"  # a crashed broker registers again (fenced), its data untrusted
    live.discard(broker)
    if rules.elr:  # handleBrokerShutdown(unclean): its ISRs and ELRs
        if broker not in p.isr and broker not in p.elr:
            return SKIP
        return pc.leader_and_isr_update(TP, p, alive(live), rules, unclean_shutdown=broker)
    if broker not in p.isr:
        return SKIP
    return pc.leader_and_isr_update(TP, p, alive(live), rules, remove=broker)


@PURE
@given(case=partition_cases(), data=st.data())
def test_random_walk_keeps_the_invariants(case: PartitionCase, data: st.DataObject) -> None:
    """Any sequence of the controller's transitions — moves, cancels, ISR changes from the
    leader, elections, brokers fenced, unfenced and restarted after a crash, a changed
    min.insync.replicas — keeps what Kafka 4.4 keeps true, grows the epochs, and elects
    only brokers the controller accepts. A controller fault (4.4's LeaderAcceptor asked
    about a broker that is no replica) happens only where Kafka's would, and changes
    nothing."""
    p, live, rules = case.reg, set(case.live), case.rules
    for _ in range(data.draw(st.integers(1, 25), label="steps")):
        op = data.draw(st.sampled_from(OPS), label="op")
        broker = data.draw(st.sampled_from(case.brokers), label="broker")
        if op == "min_isr":  # a topic config change: the next change reads it
            rules = pc.Rules(min_isr=min(data.draw(st.integers(1, 3)), len(p.replicas)),
                             elr=rules.elr, unclean=rules.unclean)
            continue
        try:
            out = _transition(op, broker, p, live, rules, data, case.brokers)
        except pc.ControllerFault:
            assert faults(p, live), f"{op}({broker}) on {p}: a fault Kafka would not have"
            note(f"{op}({broker}) on {p}: a controller fault, as in Kafka 4.4")
            continue
        note(f"{op}({broker}) on {p} live={sorted(live)} {rules} -> {out}")
        if isinstance(out, PartitionChangeRecord):
            p = _apply(p, out, rules, alive(live))
        else:
            assert out is None or out is SKIP or isinstance(out, ApiResult), out
        if op == "restart" and out is not SKIP and rules.elr:
            # KIP-966: a replica whose broker crashed is neither in sync nor eligible (its
            # unflushed data is not trusted); it may only come back as the last known leader
            assert broker not in p.isr and broker not in p.elr, f"restart({broker}): {p}"


# -- the embedded cluster as a state machine -----------------------------------------------------
def _image_state(c: EmbeddedCluster) -> dict[str, Any]:
    img = c.image
    return {
        "cluster_id": img.cluster_id,
        "brokers": dict(img.brokers),
        "topics": {n: (t.topic_id, t.message_bytes, t.produce_bytes_per_second,
                       tuple(t.partitions)) for n, t in img.topics.items()},
        "configs": {k: dict(v) for k, v in img.configs.items()},
        "reassigning": set(img.reassigning),
        "next_offset": img.next_offset,
    }


def _cluster_state(c: EmbeddedCluster) -> dict[str, Any]:
    tps = [tp for tp, _ in c.image.iter_partitions()]
    return {
        **_image_state(c),
        "listed": c.list_partition_reassignments(),
        "high_watermarks": {tp: c.high_watermark(tp) for tp in tps},
        "down": sorted(c.data.down),
        "now": c.now,
    }


class ClusterMachine(RuleBasedStateMachine):
    """Random histories against one durable embedded cluster in a temporary directory."""

    def __init__(self) -> None:
        super().__init__()
        self._tmp = tempfile.TemporaryDirectory(prefix="kraftsman-props-")
        self.dir = Path(self._tmp.name)
        self.cluster: EmbeddedCluster | None = None
        self.spec: EmbeddedClusterSpec | None = None
        self.seen: dict[TopicPartition, PartitionRegistration] = {}  # at the last check
        self.partition_epochs: dict[TopicPartition, int] = {}
        self.hw: dict[TopicPartition, int] = {}
        self.unclean: set[TopicPartition] = set()  # partitions that had an unclean election

    # -- helpers ----------------------------------------------------------------------------------
    @property
    def c(self) -> EmbeddedCluster:
        assert self.cluster is not None
        return self.cluster

    def tps(self) -> list[TopicPartition]:
        return [tp for tp, _ in self.c.image.iter_partitions()]

    def broker_ids(self) -> list[int]:
        return sorted(self.c.image.brokers)

    def unfenced(self) -> frozenset[int]:
        return self.c.image.live_brokers()

    def reg(self, tp: TopicPartition) -> PartitionRegistration:
        p = self.c.image.partition(tp)
        assert p is not None
        return p

    @property
    def elr(self) -> bool:
        assert self.spec is not None
        return self.spec.eligible_leader_replicas

    def teardown(self) -> None:
        try:
            if self.cluster is not None:
                self.cluster.close()
        finally:
            self._tmp.cleanup()

    # -- setup ------------------------------------------------------------------------------------
    @initialize(spec=cluster_specs())
    def open_cluster(self, spec: EmbeddedClusterSpec) -> None:
        self.spec = spec
        self.cluster = EmbeddedCluster.open(self.dir, spec, fsync=False)
        self.check_all()

    # -- reassignments ----------------------------------------------------------------------------
    @rule(data=st.data())
    def alter_reassignments(self, data: st.DataObject) -> None:
        """A batch of starts, re-targets, cancels and invalid requests, in one call."""
        ids = self.broker_ids()
        moving = sorted(self.c.image.reassigning)
        changes: dict[TopicPartition, tuple[int, ...] | None] = {}
        expected: dict[TopicPartition, set[ErrorCode]] = {}
        for _ in range(data.draw(st.integers(1, 4), label="batch size")):
            kind = data.draw(st.sampled_from(
                ["move", "move", "move", "retarget", "retarget", "cancel", "cancel",
                 "invalid", "unknown"]), label="kind")
            if kind in ("retarget", "cancel") and moving:
                tp = data.draw(st.sampled_from(moving), label="moving tp")
            else:
                tp = data.draw(st.sampled_from(self.tps()), label="tp")
            target: tuple[int, ...] | None
            if kind == "cancel":
                target = None
            elif kind == "invalid":
                bad = data.draw(st.sampled_from(["empty", "dup", "negative", "unknown"]))
                first = data.draw(st.sampled_from(ids))
                target = {"empty": (), "dup": (first, first), "negative": (first, -1),
                          "unknown": (first, max(ids) + 7)}[bad]
            elif kind == "unknown":
                target = (ids[0],)
                tp = data.draw(st.sampled_from([
                    TopicPartition("no-such-topic", 0),
                    TopicPartition(tp.topic, len(self.c.image.topics[tp.topic].partitions))]))
            else:
                target = data.draw(replica_lists(tuple(ids)), label="target")
            changes[tp] = target
            expected[tp] = self._expected_alter(tp, target)
        before = {tp: self.c.image.partition(tp) for tp in changes}
        note(f"alter {changes}")
        results = self.c.alter_partition_reassignments(changes)
        assert set(results) == set(changes)
        for tp, target in changes.items():
            result = results[tp]
            assert result.error in expected[tp], \
                f"{tp} -> {target}: got {result}, expected one of {expected[tp]}"
            old = before[tp]
            if not result.ok:
                assert self.c.image.partition(tp) == old, f"a refused change altered {tp}"
                # every refusal says why, but where Kafka sends no message (ApiError drops
                # one equal to the error's default) the twin sends none either
                assert result.message or result.error == errors.NO_REASSIGNMENT_IN_PROGRESS, \
                    "every refusal says why"
                continue
            assert old is not None
            self._record_move(tp, old, target)

    def _expected_alter(self, tp: TopicPartition,
                        target: tuple[int, ...] | None) -> set[ErrorCode]:
        """ReplicationControlManager.alterPartitionReassignment (4.4): validation, then a
        cancel refused only when it needs an unclean election; no valid target is refused."""
        p = self.c.image.partition(tp)
        if p is None:
            return {errors.UNKNOWN_TOPIC_OR_PARTITION}
        if target is None:
            if not p.is_reassigning:
                return {errors.NO_REASSIGNMENT_IN_PROGRESS}
            if not set(p.isr) - set(p.adding):  # the topics here allow no unclean election
                return {errors.INVALID_REPLICA_ASSIGNMENT}
            return {errors.NONE}
        if (not target or len(set(target)) != len(target) or min(target) < 0
                or not set(target) <= set(self.c.image.brokers)):
            return {errors.INVALID_REPLICA_ASSIGNMENT}
        return {errors.NONE}

    def _record_move(self, tp: TopicPartition, old: PartitionRegistration,
                     target: tuple[int, ...] | None) -> None:
        """What an accepted change did, as changePartitionReassignment / cancelPartition
        Reassignment compute it against ``old``."""
        p = self.reg(tp)
        assert p.leader_epoch == kafka_leader_epoch(old, p), f"{tp}: {old} -> {p}"
        self.seen[tp] = p
        if target is None:
            original = tuple(r for r in old.replicas if r not in old.adding)
            assert not p.is_reassigning and p.replicas == original, \
                f"{tp}: cancelled {old} -> {p}, not the replicas minus the adding ones"
            return
        replicas, adding, removing = _shape(old, target)
        if (replicas, adding, removing) == (old.replicas, old.adding, old.removing) \
                and not completes(replicas, old.isr, adding, removing):
            assert p == old, "a target that changes nothing writes nothing (not even the epoch)"
            return
        if completes(replicas, old.isr, adding, removing):
            gone = set(removing)
            assert not p.is_reassigning, f"{tp}: {old} -> {target} should complete at once: {p}"
            assert p.replicas == tuple(r for r in replicas if r not in gone)
        else:
            assert (p.replicas, p.adding, p.removing) == (replicas, adding, removing), \
                f"{tp}: {old} -> {target}: {p}"
        stuck = bool(set(p.adding) & set(p.removing))
        assert pc.would_strand(old.replicas, old.adding, old.removing, target) == (
            stuck or _heads_to(p) != tuple(target)), f"{tp}: {old} -> {target}: {p}"

    # -- brokers ----------------------------------------------------------------------------------
    @rule(data=st.data())
    def fail_broker(self, data: st.DataObject) -> None:
        up = [b for b in self.broker_ids() if b not in self.c.data.down]
        if up:
            self.c.fail_broker(data.draw(st.sampled_from(up), label="fail"))

    @precondition(lambda self: self.cluster is not None and bool(self.cluster.data.down))
    @rule(data=st.data())
    def restore_broker(self, data: st.DataObject) -> None:
        self.c.restore_broker(data.draw(st.sampled_from(sorted(self.c.data.down)), label="back"))

    @rule(seconds=st.sampled_from([0.05, 0.3, 1.0, 2.5, 7.0, 20.0, 45.0]))
    def advance(self, seconds: float) -> None:
        self.c.advance(seconds)

    # -- elections --------------------------------------------------------------------------------
    @rule(data=st.data(), election=st.sampled_from(ElectionType))
    def elect(self, data: st.DataObject, election: ElectionType) -> None:
        everything = data.draw(st.booleans(), label="every partition")
        tps: list[TopicPartition] | None = None
        if not everything:
            tps = data.draw(st.lists(st.sampled_from(
                [*self.tps(), TopicPartition("no-such-topic", 3)]), min_size=1, max_size=5))
        wanted = self.tps() if tps is None else list(dict.fromkeys(tps))
        live = self.unfenced()
        before = {tp: self.c.image.partition(tp) for tp in wanted}
        outcome = self.c.elect_leaders(election, tps)
        if tps is None:
            assert set(outcome.attempted) == set(wanted), "no set: say what was attempted"
            assert set(outcome.results) <= set(wanted)
        else:
            assert set(outcome.results) == set(wanted)
        for tp in wanted:
            old = before[tp]
            if tp not in outcome.results:
                # ReplicationControlManager.electLeaders: with no set, partitions that need
                # no election are left out of the answer — and only those.
                assert tps is None and old is not None and (
                    old.leader == old.preferred if election is ElectionType.PREFERRED
                    else old.leader != NO_LEADER), f"{tp} missing from the answer"
                continue
            result = outcome.results[tp]
            if old is None:
                assert result.error == errors.UNKNOWN_TOPIC_OR_PARTITION
                continue
            new = self.reg(tp)
            # ReplicationControlManager.electLeader: not needed, else whatever the builder
            # writes (answered only once it is in place), else "not available".
            if (old.leader == old.preferred if election is ElectionType.PREFERRED
                    else old.leader != NO_LEADER):
                want = errors.ELECTION_NOT_NEEDED
            elif new != old:
                want = errors.NONE
            elif election is ElectionType.PREFERRED:
                want = errors.PREFERRED_LEADER_NOT_AVAILABLE
            else:
                want = errors.ELIGIBLE_LEADERS_NOT_AVAILABLE
            assert result.error == want, f"{election} {tp} {old} -> {new}: {result}"
            assert result.ok or (new == old and result.message)
            if election is ElectionType.PREFERRED and old.leader != old.preferred \
                    and _valid(old, old.preferred, live):
                assert result.ok and new.leader == old.preferred, f"{tp} {old}: {new}"
            if election is ElectionType.UNCLEAN and old.leader == NO_LEADER \
                    and set(old.replicas) & live:
                assert result.ok and new.leader in live, f"{tp} {old}: {new}"
            if result.ok:
                self.seen[tp] = new
                if new.leader != old.leader:
                    assert new.leader in live and new.leader_epoch > old.leader_epoch
                if new.leader not in (*old.isr, *old.elr, NO_LEADER):
                    self.unclean.add(tp)
                    self.hw[tp] = self.c.high_watermark(tp)  # losing data is allowed here

    # -- configs ----------------------------------------------------------------------------------
    @rule(data=st.data())
    def throttle(self, data: st.DataObject) -> None:
        """Place or lift replication throttles (they slow moves down, never break them)."""
        broker = data.draw(st.sampled_from(self.broker_ids()), label="broker")
        topic = data.draw(st.sampled_from(sorted(self.c.image.topics)), label="topic")
        rate = data.draw(st.sampled_from([None, "300000", "3000000"]), label="rate")
        replicas = data.draw(st.sampled_from([None, "*", f"0:{broker}"]), label="replicas")
        changes = {
            ("BROKER", str(broker)): {k: rate for k in THROTTLE_RATE_KEYS},
            ("TOPIC", topic): {k: replicas for k in THROTTLE_REPLICA_KEYS},
        }
        results = self.c.incremental_alter_configs(changes)
        assert all(r.ok for r in results.values()), results
        described = self.c.describe_configs(list(changes))
        for resource, entries in changes.items():
            for key, value in entries.items():
                assert described[resource].get(key) == value

    # -- durability -------------------------------------------------------------------------------
    @rule()
    def snapshot(self) -> None:
        self.c.snapshot()

    @rule()
    def restart(self) -> None:
        """Clean restart: close, then rebuild from the state directory."""
        assert self.spec is not None
        before = _cluster_state(self.c)
        self.c.close()
        self.cluster = None
        self.cluster = EmbeddedCluster.open(self.dir, self.spec, fsync=False)
        after = _cluster_state(self.c)
        for key in before:
            assert after[key] == before[key], \
                f"restart changed {key}: {before[key]} -> {after[key]}"

    @rule(torn=st.one_of(st.none(), st.integers(1, 10_000)))
    def crash_restart(self, torn: int | None) -> None:
        """kill -9: no close, no checkpoint; the metadata log alone must restore the image.

        The simulated data plane (replica logs, the clock) is durable only at checkpoints, so
        a crash of the whole in-process cluster rewinds it to the later of the last checkpoint
        and the last metadata batch, as all brokers dying at once without fsync would: the
        high-watermark baseline restarts there. The metadata must come back exactly.

        ``torn``: the process died in the middle of appending one more batch (never
        acknowledged): the segment ends with a prefix of that frame, which recovery drops.
        """
        assert self.spec is not None
        before = _image_state(self.c)
        self.c.log.close()  # release the file handle, as the dying process would
        if torn is not None:
            segment = max((self.dir / "metadata").glob("log-*.log"))
            frame = encode_frame(b'{"o":%d,"e":0,"t":0,"r":[["F",0,true]]}' % before["next_offset"]
                                 + b" " * (torn // 3))
            with open(segment, "ab") as f:
                f.write(frame[:torn % (len(frame) - 1) + 1])
        self.cluster = None
        self.cluster = EmbeddedCluster.open(self.dir, self.spec, fsync=False)
        after = _image_state(self.c)
        for key in before:
            assert after[key] == before[key], f"crash changed {key}: {before[key]} -> {after[key]}"
        if torn is not None:
            assert self.c.recovered_torn_bytes > 0, "the torn tail went unnoticed"
        self.hw = {tp: self.c.high_watermark(tp) for tp in self.tps()}

    # -- liveness ---------------------------------------------------------------------------------
    @rule()
    def heal(self) -> None:
        """Every broker back, throttles lifted: every move must finish and every replica
        rejoin the ISR within the time the data takes to copy — except a move stranded by a
        re-target (a replica both adding and removing), which Kafka 4.4 never completes:
        as its operator would, heal cancels it (retrying while the cancel needs an unclean
        election)."""
        c = self.c
        for b in sorted(c.data.down):
            c.restore_broker(b)
        lifts: dict[tuple[str, str], dict[str, str | None]] = {}
        for (rtype, rname) in list(c.image.configs):
            keys = THROTTLE_RATE_KEYS if rtype == "BROKER" else THROTTLE_REPLICA_KEYS
            lifts[(rtype, rname)] = {k: None for k in keys}
        if lifts:
            c.incremental_alter_configs(lifts)
        assert self.spec is not None
        total_bytes = sum(
            c.data.leader_leo(tp, c.now) * c.image.topics[tp.topic].message_bytes * len(p.replicas)
            for tp, p in c.image.iter_partitions())
        slowest = min(b.replication_bytes_per_second or self.spec.replication_bytes_per_second
                      for b in self.spec.brokers)
        limit = 2 * total_bytes / slowest + 3 * self.spec.replica_lag_time_max_ms / 1000 + 60
        start = c.now
        while not self._healthy():
            assert c.now - start <= limit, (
                f"not healed after {c.now - start:.0f} simulated s (limit {limit:.0f}): "
                + "; ".join(f"{tp}: {p}" for tp, p in c.image.iter_partitions()
                            if p.is_reassigning or p.leader == NO_LEADER
                            or set(p.isr) != set(p.replicas)))
            stranded = [tp for tp, p in c.image.iter_partitions()
                        if set(p.adding) & set(p.removing)]
            if stranded:
                for tp, result in c.alter_partition_reassignments(
                        dict.fromkeys(stranded)).items():
                    if result.ok:
                        self.seen[tp] = self.reg(tp)
            c.advance(5.0)
            self.check_all()

    def _healthy(self) -> bool:
        img = self.c.image
        return (not self.c.data.down and not img.reassigning
                and all(not b.fenced for b in img.brokers.values())
                and all(p.leader != NO_LEADER and set(p.isr) == set(p.replicas)
                        for _, p in img.iter_partitions()))

    # -- KIP-179 probes ---------------------------------------------------------------------------
    @rule(data=st.data())
    def probe_replica_status(self, data: st.DataObject) -> None:
        tp = data.draw(st.sampled_from(self.tps()), label="tp")
        broker = data.draw(st.sampled_from([*self.broker_ids(), 4242]), label="broker")
        probes = [(tp, broker), (TopicPartition("no-such-topic", 0), broker),
                  (TopicPartition(tp.topic, 999), broker)]
        got = self.c.replica_status(probes)
        assert [s.status for s in got[1:]] == [UNKNOWN_TOPIC, UNKNOWN_PARTITION]
        p = self.reg(tp)
        first = got[0]
        if broker not in self.c.image.brokers:
            assert first.status == UNKNOWN_BROKER
        elif broker not in p.replicas:
            assert first.status == NOT_HOSTED
        elif self.c.image.brokers[broker].fenced:
            assert first.status == OFFLINE, first.status  # never "in sync" (KIP-179)
        elif p.leader == NO_LEADER:
            assert first.status == LEADERLESS and first.lag_messages is None, first
        else:
            assert first.status == IN_SYNC or BEHIND.match(first.status), first.status

    # -- invariants -------------------------------------------------------------------------------
    @invariant()
    def check_all(self) -> None:
        if self.cluster is None:
            return
        c, img = self.c, self.c.image
        live = self.unfenced()
        fenced_up = set(img.brokers) - live - set(c.data.down)
        assert not fenced_up, f"broker(s) {sorted(fenced_up)} fenced but not down"
        reassigning = set()
        for tp, p in img.iter_partitions():
            check_registration(tp, p, elr=self.elr)
            if p.leader == NO_LEADER:
                assert not set(p.isr) & live, f"{tp} is offline though {p.isr} is in sync: {p}"
            if self.elr:
                # Fencing (and a crashed broker's restart) takes a broker out of every ISR,
                # and only active brokers join one: with ELR the ISR is live brokers only,
                # so a partition is offline exactly when its ISR is empty.
                assert set(p.isr) <= live, f"{tp}: a fenced broker in the ISR: {p}"
                assert (p.leader == NO_LEADER) == (not p.isr), f"{tp}: {p}"
            prev = self.seen.get(tp)
            if prev is not None:
                assert p.leader_epoch >= prev.leader_epoch, f"{tp}: leader epoch went back"
                if prev.is_reassigning and not p.is_reassigning:
                    # Only an ISR change or an election completes a move (a cancel or a new
                    # target is recorded by the alter rule): it ends on R minus removing.
                    assert p.replicas == prev.target, f"{tp}: {prev} completed as {p}"
                    if prev.removing:
                        assert p.leader_epoch > prev.leader_epoch, \
                            f"{tp}: completion fences the removed"
                elif not p.is_reassigning:
                    assert p.replicas == prev.replicas, f"{tp}: R changed with no move: {p}"
            assert p.partition_epoch >= self.partition_epochs.get(tp, 0), f"{tp}: epoch went back"
            self.seen[tp] = p
            self.partition_epochs[tp] = p.partition_epoch
            hw = c.high_watermark(tp)
            assert hw >= self.hw.get(tp, 0), (
                f"{tp}: high watermark {self.hw[tp]} -> {hw} without an unclean election "
                f"since (partitions with one: {sorted(self.unclean)})")
            self.hw[tp] = hw
            if p.is_reassigning:
                reassigning.add(tp)
                # PartitionChangeBuilder.build completes a move before it elects, so only an
                # election (unclean, or of an eligible or last known leader, each making
                # the leader the whole ISR) leaves a move that could complete: the next ISR
                # change completes it.
                if completes(p.replicas, p.isr, p.adding, p.removing):
                    assert p.isr == (p.leader,), f"{tp}: the move should have completed: {p}"
        assert img.reassigning == reassigning
        listed = c.list_partition_reassignments()
        assert set(listed) == reassigning
        for tp, o in listed.items():
            p = self.reg(tp)
            assert (o.replicas, o.adding, o.removing) == (p.replicas, p.adding, p.removing)
            assert o.target == p.target
        some = [*sorted(reassigning)[:2], TopicPartition("no-such-topic", 0)]
        assert set(c.list_partition_reassignments(some)) == set(some) & reassigning
        statuses = c.replica_status()
        assert [(s.tp, s.broker) for s in statuses] == [
            (tp, r) for tp in sorted(reassigning) for r in self.reg(tp).replicas]
        for s in statuses:
            assert s.status in STATIC_WORDS or BEHIND.match(s.status), s.status
            fenced = img.brokers[s.broker].fenced
            assert (s.status == OFFLINE) == fenced, s
            assert (s.status == IN_SYNC) == (s.lag_messages == 0 and not fenced), s
        described = {d.tp: d for d in c.describe_partitions()}
        assert set(described) == {tp for tp, _ in img.iter_partitions()}
        for tp, d in described.items():
            p = self.reg(tp)
            assert (d.replicas, d.isr, d.leader, d.leader_epoch, d.adding, d.removing) == \
                (p.replicas, p.isr, p.leader, p.leader_epoch, p.adding, p.removing)


ClusterMachine.TestCase.settings = PROFILE
TestClusterHistories = ClusterMachine.TestCase
