"""Hypothesis strategies for the controller core: cluster specs and partition registrations."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from controller_core.config import EmbeddedClusterSpec
from controller_core.metadata import partition_change as pc
from controller_core.metadata.image import MetadataImage
from controller_core.metadata.records import PartitionChangeRecord, PartitionRecord, TopicRecord
from controller_core.model import NO_LEADER, PartitionRegistration, TopicPartition

BROKER_IDS = range(0, 12)
TOPIC_NAMES = ("orders", "payments", "clicks", "audit.log")
TP = TopicPartition("t", 0)


def apply_change(reg: PartitionRegistration,
                 change: PartitionChangeRecord) -> PartitionRegistration:
    """Apply a change record to one registration through the real :class:`MetadataImage`."""
    image = MetadataImage()
    image.apply(TopicRecord(TP.topic, "id"))
    image.apply(PartitionRecord(TP.topic, TP.partition, reg.replicas, reg.isr, reg.leader,
                                reg.leader_epoch, reg.partition_epoch, reg.adding, reg.removing))
    image.apply(change)
    after = image.partition(TP)
    assert after is not None
    return after


# -- pure registrations --------------------------------------------------------------------------
@dataclass(frozen=True)
class PartitionCase:
    """A registration with the brokers the cluster knows and the live (unfenced) ones."""

    reg: PartitionRegistration
    brokers: tuple[int, ...]
    live: frozenset[int]


def replica_lists(brokers: tuple[int, ...], min_size: int = 1,
                  max_size: int = 4) -> st.SearchStrategy[tuple[int, ...]]:
    """An ordered list of distinct brokers (a replica assignment)."""
    return st.lists(st.sampled_from(brokers), min_size=min_size,
                    max_size=min(max_size, len(brokers)), unique=True).map(tuple)


@st.composite
def stable_registrations(draw: st.DrawFn, brokers: tuple[int, ...]) -> PartitionRegistration:
    """A partition that is not moving: ISR ⊆ R, leader in the ISR or none."""
    replicas = draw(replica_lists(brokers))
    isr = tuple(r for r in replicas if draw(st.booleans())) or (replicas[0],)
    leader = draw(st.sampled_from((*isr, NO_LEADER)))
    return PartitionRegistration(
        replicas, isr, leader, leader_epoch=draw(st.integers(0, 50)),
        partition_epoch=draw(st.integers(0, 100)))


@st.composite
def partition_cases(draw: st.DrawFn, *, moving: bool | None = None) -> PartitionCase:
    """A registration (stable, or mid-move as the pure functions leave it) plus the live set.

    A moving registration is produced by the real ``start_reassignment`` from a stable one,
    optionally followed by some adding replicas joining the ISR; then the brokers outside the
    live set are fenced through ``shrink_isr``. So a moving case is a state the controller can
    reach, including a leaderless one whose only in-sync replicas are being added.
    """
    brokers = tuple(sorted(draw(st.sets(st.sampled_from(BROKER_IDS), min_size=1, max_size=7))))
    live = frozenset(b for b in brokers if draw(st.booleans()))
    reg = draw(stable_registrations(brokers))
    want_moving = draw(st.booleans()) if moving is None else moving
    if want_moving:
        start_live = frozenset(brokers)  # start while everything is up, then maybe fail some
        target = draw(replica_lists(brokers))
        change = pc.start_reassignment(TP, reg, target, start_live)
        if isinstance(change, PartitionChangeRecord):
            reg = apply_change(reg, change)
            for r in reg.adding:
                if draw(st.booleans()):
                    grown = pc.expand_isr(TP, reg, r, start_live)
                    if grown is not None:
                        reg = apply_change(reg, grown)
            if set(reg.adding) <= set(reg.isr):
                # A move whose adding replicas are all in sync would already have completed.
                done = pc.maybe_complete_reassignment(TP, reg, start_live)
                if done is not None:
                    reg = apply_change(reg, done)
    # The brokers outside ``live`` fail now: the controller fences them one by one, dropping
    # each from the ISR (and from leadership), as Controller.fence_broker does.
    still_live = set(brokers)
    for b in brokers:
        if b not in live:
            still_live.discard(b)
            shrunk = pc.shrink_isr(TP, reg, b, frozenset(still_live))
            if shrunk is not None:
                reg = apply_change(reg, shrunk)
                done = pc.maybe_complete_reassignment(TP, reg, frozenset(still_live))
                if done is not None:
                    reg = apply_change(reg, done)
    return PartitionCase(reg, brokers, live)


# -- embedded clusters ---------------------------------------------------------------------------
@st.composite
def topic_docs(draw: st.DrawFn, name: str, broker_ids: list[int]) -> dict[str, object]:
    n = len(broker_ids)
    rf = draw(st.integers(1, min(3, n)))
    partitions = draw(st.integers(1, 4))
    doc: dict[str, object] = {
        "name": name,
        "partitions": partitions,
        "replicationFactor": rf,
        "sizeBytesPerPartition": draw(st.sampled_from([0, 100_000, 2_000_000, 20_000_000])),
        "messageBytes": draw(st.sampled_from([100, 1024, 10_000])),
        "produceBytesPerSecond": draw(st.sampled_from([0.0, 0.0, 2_000.0, 20_000.0])),
    }
    if draw(st.booleans()):
        doc["assignment"] = [
            list(draw(st.permutations(broker_ids)))[:rf] for _ in range(partitions)]
    return doc


@st.composite
def cluster_specs(draw: st.DrawFn) -> EmbeddedClusterSpec:
    """A small cluster: 1-6 brokers (sparse ids, racks or none), 1-3 topics of RF 1-3,
    data sizes and producer rates, and short timeouts so failures matter within a run."""
    ids = sorted(draw(st.sets(st.sampled_from(BROKER_IDS), min_size=1, max_size=6)))
    racked = draw(st.booleans())
    brokers = []
    for i in ids:
        b: dict[str, object] = {"id": i}
        if racked:
            b["rack"] = draw(st.sampled_from("abc"))
        if draw(st.integers(0, 4)) == 0:
            b["replicationBytesPerSecond"] = draw(st.sampled_from([2_000_000.0, 20_000_000.0]))
        brokers.append(b)
    names = draw(st.lists(st.sampled_from(TOPIC_NAMES), min_size=1, max_size=3, unique=True))
    doc = {
        "brokers": brokers,
        "topics": [draw(topic_docs(n, ids)) for n in names],
        "replicationBytesPerSecond": draw(st.sampled_from([1_000_000.0, 10_000_000.0])),
        "replicaLagTimeMaxMs": draw(st.sampled_from([1_000, 5_000, 30_000])),
        "brokerSessionTimeoutMs": draw(st.sampled_from([500, 3_000, 9_000])),
        "snapshotEveryRecords": draw(st.sampled_from([7, 60, 200_000])),
        "seed": draw(st.integers(0, 2**32 - 1)),
    }
    return EmbeddedClusterSpec.model_validate(doc)
