"""Property tests of the controller core (issue 2, "Tests").

Two layers:

* the pure transitions of :mod:`controller_core.metadata.partition_change`, over random
  partition registrations and live-broker sets;
* the durable embedded cluster, driven by a hypothesis state machine through random
  interleavings of reassign / cancel / re-target / broker failure and return / time /
  preferred and unclean elections / throttles / snapshots / restart from disk (clean and
  crash), checking the invariants of KIP-455, KIP-179 and KIP-183 after every step.

``HYPOTHESIS_PROFILE=soak`` runs far more and longer histories (see conftest.py). A failing
history is printed step by step by hypothesis together with a ``@reproduce_failure`` blob.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import given, note, settings
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
    apply_change,
    cluster_specs,
    partition_cases,
    replica_lists,
)

PROFILE = settings.get_profile(core_profile())
PURE = settings(PROFILE, max_examples=PROFILE.max_examples * 2)
BEHIND = re.compile(r"^behind: [1-9]\d* messages$")
STATIC_WORDS = {IN_SYNC, NOT_HOSTED, OFFLINE, UNKNOWN_BROKER, UNKNOWN_PARTITION, UNKNOWN_TOPIC}


# -- shared checks -------------------------------------------------------------------------------
def check_registration(tp: TopicPartition, p: PartitionRegistration) -> None:
    """What holds for every partition at every moment."""
    where = f"{tp}: {p}"
    assert len(set(p.replicas)) == len(p.replicas), f"repeated replica in R — {where}"
    assert len(set(p.isr)) == len(p.isr), f"repeated replica in the ISR — {where}"
    assert set(p.isr) <= set(p.replicas), f"ISR ⊄ R — {where}"
    assert p.isr, f"empty ISR — {where}"
    assert p.leader == NO_LEADER or (p.leader in p.isr and p.leader in p.replicas), \
        f"leader outside ISR or R — {where}"
    assert not set(p.adding) & set(p.removing), f"AR ∩ RR ≠ ∅ — {where}"
    assert set(p.adding) | set(p.removing) <= set(p.replicas), f"AR/RR ⊄ R — {where}"
    if p.is_reassigning:
        target = p.target
        assert set(p.adding) | (set(p.replicas) - set(p.removing)) == set(target), where
        assert set(p.adding) <= set(target) and not set(p.removing) & set(target), where
        assert p.replicas == target + p.removing, f"R ≠ TR + RR — {where}"


def check_move(tp: TopicPartition, p: PartitionRegistration, target: Sequence[int],
               original: Set[int]) -> None:
    """A partition moving from ``original`` towards ``target`` (KIP-455 step 1)."""
    where = f"{tp}: {p}, target {list(target)}, original {sorted(original)}"
    assert p.is_reassigning, where
    assert p.target == tuple(target), f"the move heads elsewhere — {where}"
    assert set(p.original) == set(original), f"R - AR is not the original set — {where}"
    assert set(p.adding) == set(target) - set(original), where
    assert set(p.removing) == set(original) - set(target), where
    assert set(p.replicas) == set(target) | set(original), where


def kafka_leader_epoch(before: PartitionRegistration, after: PartitionRegistration) -> int:
    """The leader epoch PartitionChangeBuilder gives ``after``: one more on a leader change
    (tryElection) or when a replica leaves the replica set
    (triggerLeaderEpochBumpForReplicaReassignmentIfNeeded); not for an ISR change at the
    current metadata version (triggerLeaderEpochBumpForIsrShrinkIfNeeded: below 3.6 only)."""
    replica_left = not set(after.replicas) >= set(before.replicas)
    return before.leader_epoch + int(after.leader != before.leader or replica_left)


# -- pure transitions ----------------------------------------------------------------------------
def _apply(p: PartitionRegistration, out: object) -> PartitionRegistration:
    assert isinstance(out, PartitionChangeRecord), out
    after = apply_change(p, out)
    check_registration(TP, after)
    assert after.leader_epoch == kafka_leader_epoch(p, after), \
        f"leader epoch {p.leader_epoch} -> {after.leader_epoch}, not as Kafka: {p} -> {after}"
    assert after.partition_epoch == p.partition_epoch + 1
    return after


def _eligible(order: Sequence[int], isr: Sequence[int], live: Set[int]) -> list[int]:
    return [r for r in order if r in isr and r in live]


def start_refused(p: PartitionRegistration, target: Sequence[int], live: Set[int]) -> bool:
    """The oracle of KAFKA-14808 for a (re-)start, as ReplicationControlManager keeps the ISR
    across a re-target: refuse when the new replica set keeps no in-sync replica, or drops
    the leader with none to take over."""
    kept = set(target) | set(p.original)
    isr = [r for r in p.isr if r in kept]
    if not isr:
        return True
    keeps_leader = p.leader in isr and p.leader in live
    return p.leader != NO_LEADER and not keeps_leader and not _eligible(
        [*target, *p.original], isr, live)


@PURE
@given(case=partition_cases(), data=st.data())
def test_start_reassignment_shapes_the_move(case: PartitionCase, data: st.DataObject) -> None:
    p, live = case.reg, case.live
    target = data.draw(replica_lists(case.brokers), label="target")
    out = pc.start_reassignment(TP, p, target, live)
    if out is None:
        if p.is_reassigning:  # an identical resubmit: the move already heads there
            assert p.target == tuple(target) and not start_refused(p, target, live)
        else:
            assert p.replicas == tuple(target)
        return
    if isinstance(out, ApiResult):
        assert out.error == errors.ELIGIBLE_LEADERS_NOT_AVAILABLE
        assert start_refused(p, target, live), out.message
        return
    assert not start_refused(p, target, live), f"accepted, though it drops the leader: {out}"
    after = _apply(p, out)
    assert after.leader == NO_LEADER or after.leader in live, "a move must not elect a dead leader"
    if after.leader != NO_LEADER:
        assert after.leader in p.isr, "the leader stays on a replica that was in sync"
    assert set(after.isr) == set(p.isr) & set(after.replicas), "kept replicas keep the ISR"
    if p.leader in after.isr and p.leader in live:
        assert after.leader == p.leader, "a kept, live, in-sync leader keeps leading"
    if after.is_reassigning:
        check_move(TP, after, target, set(p.original))
        if not p.is_reassigning and after.leader == p.leader:
            assert after.leader_epoch == p.leader_epoch, "a move that starts keeps its epoch"
    else:
        assert after.replicas == tuple(target) and set(target) == set(p.original)


@PURE
@given(case=partition_cases(), data=st.data())
def test_start_then_cancel_restores_the_original_set(case: PartitionCase,
                                                     data: st.DataObject) -> None:
    p, live = case.reg, case.live
    original = set(p.original)
    target = data.draw(replica_lists(case.brokers), label="target")
    out = pc.start_reassignment(TP, p, target, live)
    if not isinstance(out, PartitionChangeRecord):
        return
    moving = _apply(p, out)
    if not moving.is_reassigning:
        assert isinstance(pc.cancel_reassignment(TP, moving, live), ApiResult)
        return
    cancelled = pc.cancel_reassignment(TP, moving, live)
    if isinstance(cancelled, ApiResult):
        assert cancelled.error == errors.ELIGIBLE_LEADERS_NOT_AVAILABLE
        assert not _eligible(moving.original, moving.isr, live), cancelled.message
        return
    after = _apply(moving, cancelled)
    assert set(after.replicas) == original and not after.is_reassigning
    assert after.leader != NO_LEADER and after.leader in live, "a cancel must leave a leader"
    if moving.adding:
        assert after.leader_epoch > moving.leader_epoch, "a cancel fences the adding replicas"


@PURE
@given(case=partition_cases(), data=st.data())
def test_start_then_catch_up_completes_on_the_target(case: PartitionCase,
                                                     data: st.DataObject) -> None:
    p = case.reg
    target = tuple(data.draw(replica_lists(case.brokers), label="target"))
    live = case.live | set(target)  # the adding replicas must be alive to catch up
    out = pc.start_reassignment(TP, p, target, live)
    if not isinstance(out, PartitionChangeRecord):
        return
    reg = _apply(p, out)
    done = pc.maybe_complete_reassignment(TP, reg, live)
    if done is not None:
        reg = _apply(reg, done)
    # PartitionReassignmentReplicas.maybeCompleteReassignment: every target replica must be
    # in the ISR, the kept originals that had fallen out as well as the adding ones.
    for r in [r for r in reg.target if r not in reg.isr] if reg.is_reassigning else []:
        assert pc.maybe_complete_reassignment(TP, reg, live) is None, \
            "completed before every target replica joined the ISR"
        grown = pc.expand_isr(TP, reg, r, live)
        assert grown is not None
        reg = _apply(reg, grown)
        done = pc.maybe_complete_reassignment(TP, reg, live)
        if done is not None:
            before = reg
            reg = _apply(reg, done)
            if before.removing:
                assert reg.leader_epoch > before.leader_epoch, "completion fences the removed"
            break
    # PartitionChangeBuilder.completeReassignmentIfNeeded: an all-in-sync target completes.
    assert not reg.is_reassigning, f"the target is in sync, yet the move waits: {reg}"
    assert reg.replicas == target, "after completion R is the target, in the target's order"
    assert set(reg.isr) <= set(target)
    assert reg.leader in target and reg.leader in live


@PURE
@given(case=partition_cases(moving=True), data=st.data())
def test_retarget_keeps_what_the_new_target_keeps(case: PartitionCase,
                                                  data: st.DataObject) -> None:
    """KIP-455 step 4, as ReplicationControlManager does it: a new target replaces the current
    one — R, AR and RR are those of the original replicas moving to it — while the ISR members
    and the leader that the new replica set keeps stay (a caught-up replica does not copy
    again, the leader does not move); the same target again changes nothing."""
    p, live = case.reg, case.live
    if not p.is_reassigning:
        return
    target = tuple(data.draw(replica_lists(case.brokers), label="target"))
    direct = pc.start_reassignment(TP, p, target, live)
    if direct is None:
        assert p.target == target, "only an identical resubmit may change nothing"
        return
    if isinstance(direct, ApiResult):
        assert start_refused(p, target, live), direct.message
        return
    after = _apply(p, direct)
    original = p.original
    adding = tuple(r for r in target if r not in original)
    removing = tuple(r for r in original if r not in target)
    if adding or removing:
        assert (after.replicas, after.adding, after.removing) == (target + removing, adding,
                                                                 removing)
    else:
        assert after.replicas == target and not after.is_reassigning
    assert after.isr == tuple(r for r in p.isr if r in after.replicas)
    if p.leader in after.isr and p.leader in live:
        assert after.leader == p.leader
    if set(p.replicas) - set(after.replicas):
        assert after.leader_epoch > p.leader_epoch, "replacing a move fences its dropped replicas"
    assert pc.start_reassignment(TP, after, target, live) is None or not after.is_reassigning


@PURE
@given(case=partition_cases())
def test_preferred_election(case: PartitionCase) -> None:
    p, live = case.reg, case.live
    out = pc.elect_preferred(TP, p, live)
    if p.leader == p.preferred:
        assert isinstance(out, ApiResult) and out.error == errors.ELECTION_NOT_NEEDED
    elif p.preferred not in live or p.preferred not in p.isr:
        assert isinstance(out, ApiResult) and out.error == errors.PREFERRED_LEADER_NOT_AVAILABLE
    else:
        after = _apply(p, out)
        assert after.leader == p.preferred and after.leader_epoch == p.leader_epoch + 1
        assert (after.replicas, after.isr, after.adding, after.removing) == \
            (p.replicas, p.isr, p.adding, p.removing)


@PURE
@given(case=partition_cases())
def test_unclean_election(case: PartitionCase) -> None:
    p, live = case.reg, case.live
    out = pc.elect_unclean(TP, p, live)
    if p.leader != NO_LEADER:
        assert isinstance(out, ApiResult) and out.error == errors.ELECTION_NOT_NEEDED
        return
    if not set(p.replicas) & live:
        assert isinstance(out, ApiResult) and out.error == errors.ELIGIBLE_LEADERS_NOT_AVAILABLE
        return
    after = _apply(p, out)
    assert after.leader in live and after.leader_epoch > p.leader_epoch
    clean = _eligible(p.replicas, p.isr, live)
    if clean:
        assert after.leader == clean[0] and after.isr == p.isr, "a clean choice comes first"
    elif set(p.original) & live:
        assert after.leader in p.original, "prefer a replica that held the data before the move"


OPS = ("start", "cancel", "complete", "expand", "shrink", "preferred", "unclean", "revive",
       "kill", "birth")


@PURE
@given(case=partition_cases(), data=st.data())
def test_random_walk_keeps_the_invariants(case: PartitionCase, data: st.DataObject) -> None:
    """Any sequence of transitions keeps R/ISR/leader consistent and epochs growing."""
    p, live = case.reg, set(case.live)
    for _ in range(data.draw(st.integers(1, 25), label="steps")):
        op = data.draw(st.sampled_from(OPS), label="op")
        broker = data.draw(st.sampled_from(case.brokers), label="broker")
        out: object
        if op == "start":
            out = pc.start_reassignment(TP, p, data.draw(replica_lists(case.brokers)), live)
        elif op == "cancel":
            out = pc.cancel_reassignment(TP, p, live)
        elif op == "complete":
            out = pc.maybe_complete_reassignment(TP, p, live)
        elif op == "expand":
            out = pc.expand_isr(TP, p, broker, live)
        elif op == "shrink":
            out = pc.shrink_isr(TP, p, broker, live)
        elif op == "preferred":
            out = pc.elect_preferred(TP, p, live)
        elif op == "unclean":
            out = pc.elect_unclean(TP, p, live)
        elif op == "revive":
            out = pc.elect_if_leaderless(TP, p, live)
        elif op == "kill":
            live.discard(broker)  # fenced: the controller drops it from the ISR
            out = pc.shrink_isr(TP, p, broker, live)
        else:
            live.add(broker)
            out = pc.elect_if_leaderless(TP, p, live)
        note(f"{op}({broker}) on {p} live={sorted(live)} -> {out}")
        if isinstance(out, PartitionChangeRecord):
            before, p = p, _apply(p, out)
            if p.leader not in (before.leader, NO_LEADER):
                assert p.leader in live, f"{op} elected dead broker {p.leader}"


# -- the embedded cluster as a state machine -----------------------------------------------------
@dataclass
class Move:
    target: tuple[int, ...]
    original: frozenset[int]



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
        self.moves: dict[TopicPartition, Move] = {}
        self.leader_epochs: dict[TopicPartition, int] = {}
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
                assert result.message, "every refusal says why"
                continue
            assert old is not None
            self._record_move(tp, old, target)

    def _expected_alter(self, tp: TopicPartition,
                        target: tuple[int, ...] | None) -> set[ErrorCode]:
        p = self.c.image.partition(tp)
        if p is None:
            return {errors.UNKNOWN_TOPIC_OR_PARTITION}
        live = self.unfenced()
        if target is None:
            if not p.is_reassigning:
                return {errors.NO_REASSIGNMENT_IN_PROGRESS}
            eligible = _eligible(p.original, p.isr, live)
            return {errors.NONE} if eligible else {errors.ELIGIBLE_LEADERS_NOT_AVAILABLE}
        if (not target or len(set(target)) != len(target) or min(target) < 0
                or not set(target) <= set(self.c.image.brokers)):
            return {errors.INVALID_REPLICA_ASSIGNMENT}
        if start_refused(p, target, live):
            return {errors.ELIGIBLE_LEADERS_NOT_AVAILABLE}
        return {errors.NONE}

    def _record_move(self, tp: TopicPartition, old: PartitionRegistration,
                     target: tuple[int, ...] | None) -> None:
        p = self.reg(tp)
        if target is None:
            move = self.moves.pop(tp)
            assert not p.is_reassigning
            assert set(p.replicas) == move.original, \
                f"{tp}: after cancel R={p.replicas}, original {sorted(move.original)}"
            assert p.leader_epoch == kafka_leader_epoch(old, p), f"{tp}: cancel {old} -> {p}"
            return
        original = self.moves[tp].original if tp in self.moves else frozenset(old.replicas)
        if old.is_reassigning:
            assert set(old.original) == original
            if old.target == tuple(target):
                assert p == old, "an identical resubmit changes nothing (not even the epoch)"
                return
        assert p.leader_epoch == kafka_leader_epoch(old, p), f"{tp}: move {old} -> {p}"
        if p.is_reassigning:
            check_move(tp, p, target, original)
            self.moves[tp] = Move(tuple(target), original)
        else:
            assert p.replicas == tuple(target), f"{tp}: completed at once on {p.replicas}"
            self.moves.pop(tp, None)

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
            if election is ElectionType.PREFERRED:
                if old.leader == old.preferred:
                    want = errors.ELECTION_NOT_NEEDED
                elif old.preferred in live and old.preferred in old.isr:
                    want = errors.NONE
                else:
                    want = errors.PREFERRED_LEADER_NOT_AVAILABLE
            elif old.leader != NO_LEADER:
                want = errors.ELECTION_NOT_NEEDED
            elif set(old.replicas) & live:
                want = errors.NONE
            else:
                want = errors.ELIGIBLE_LEADERS_NOT_AVAILABLE
            assert result.error == want, f"{election} {tp} {old}: {result}, expected {want}"
            if result.ok:
                # answered only once completed: the new leader and epoch are in place
                assert new.leader != old.leader and new.leader_epoch > old.leader_epoch
                if election is ElectionType.PREFERRED:
                    assert new.leader == old.preferred
                elif not _eligible(old.replicas, old.isr, live):
                    self.unclean.add(tp)
                    self.hw[tp] = self.c.high_watermark(tp)  # losing data is allowed here
            else:
                assert new == old and result.message

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
        rejoin the ISR within the time the data takes to copy."""
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
            check_registration(tp, p)
            if p.leader == NO_LEADER:
                assert not set(p.isr) & live, f"{tp} is offline though {p.isr} is in sync: {p}"
            seen_epoch = self.leader_epochs.get(tp, 0)
            assert p.leader_epoch >= seen_epoch, f"{tp}: leader epoch went back"
            assert p.partition_epoch >= self.partition_epochs.get(tp, 0), f"{tp}: epoch went back"
            self.leader_epochs[tp] = p.leader_epoch
            self.partition_epochs[tp] = p.partition_epoch
            hw = c.high_watermark(tp)
            assert hw >= self.hw.get(tp, 0), (
                f"{tp}: high watermark {self.hw[tp]} -> {hw} without an unclean election "
                f"since (partitions with one: {sorted(self.unclean)})")
            self.hw[tp] = hw
            move = self.moves.get(tp)
            if p.is_reassigning:
                reassigning.add(tp)
                assert move is not None, f"{tp} is moving but nobody moved it: {p}"
                check_move(tp, p, move.target, move.original)
                # PartitionReassignmentReplicas.maybeCompleteReassignment: complete once every
                # target replica (not only the adding ones) is in the ISR, with a leader or
                # without one (PartitionChangeBuilder.tryElection).
                assert not set(p.target) <= set(p.isr), \
                    f"{tp}: every target replica is in sync but the move did not complete: {p}"
            elif move is not None:
                assert p.replicas == move.target, \
                    f"{tp}: completed on {p.replicas}, target {move.target}"
                if move.original - set(move.target):
                    assert p.leader_epoch > seen_epoch, f"{tp}: completion fences the removed"
                del self.moves[tp]
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
