"""Hypothesis strategies for the controller core: cluster specs and partition registrations."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from hypothesis import strategies as st

from controller_core.config import EmbeddedClusterSpec
from controller_core.errors import ApiResult
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
                                reg.leader_epoch, reg.partition_epoch, reg.adding, reg.removing,
                                reg.elr, reg.last_known_elr))
    image.apply(change)
    after = image.partition(TP)
    assert after is not None
    return after


def alive(ids: frozenset[int] | set[int]) -> pc.Acceptable:
    """ClusterControlManager.isActive over a set of unfenced brokers."""
    return frozenset(ids).__contains__


# -- pure registrations --------------------------------------------------------------------------
@dataclass(frozen=True)
class PartitionCase:
    """A registration, the brokers the cluster knows, the live (unfenced) ones, and the
    topic's rules (min.insync.replicas, ELR, unclean.leader.election.enable)."""

    reg: PartitionRegistration
    brokers: tuple[int, ...]
    live: frozenset[int]
    rules: pc.Rules


def replica_lists(brokers: tuple[int, ...], min_size: int = 1,
                  max_size: int = 4) -> st.SearchStrategy[tuple[int, ...]]:
    """An ordered list of distinct brokers (a replica assignment)."""
    return st.lists(st.sampled_from(brokers), min_size=min_size,
                    max_size=min(max_size, len(brokers)), unique=True).map(tuple)


def _then(reg: PartitionRegistration,
          change: Callable[[], PartitionChangeRecord | ApiResult | None]
          ) -> PartitionRegistration:
    """``reg`` after ``change()`` — unchanged when it is refused, or when Kafka 4.4's
    controller would fault on it (test_properties.faults says when)."""
    try:
        out = change()
    except pc.ControllerFault:
        return reg
    return apply_change(reg, out) if isinstance(out, PartitionChangeRecord) else reg


@st.composite
def partition_cases(draw: st.DrawFn, *, moving: bool | None = None) -> PartitionCase:
    """A registration the controller can reach, plus the live set and the topic's rules.

    Built only by the real transitions, from a partition created with every replica in
    sync: some followers lag out of the ISR (AlterPartition from the leader); optionally a
    reassignment starts (``change_reassignment``), some adding replicas join the ISR, and a
    second target may follow (Kafka 4.4's re-target, stale lists included); then the brokers
    outside the live set are fenced one by one (``leader_and_isr_update``), which with ELR
    may empty the ISR and leave eligible leader replicas and a last known leader.
    """
    brokers = tuple(sorted(draw(st.sets(st.sampled_from(BROKER_IDS), min_size=1, max_size=7))))
    live = frozenset(b for b in brokers if draw(st.booleans()))
    replicas = draw(replica_lists(brokers))
    rules = pc.Rules(min_isr=min(draw(st.integers(1, 3)), len(replicas)),
                     elr=draw(st.booleans()), unclean=draw(st.integers(0, 3)) == 0)
    everyone = alive(set(brokers))
    reg = PartitionRegistration(replicas, replicas, replicas[0],
                                leader_epoch=draw(st.integers(0, 50)),
                                partition_epoch=draw(st.integers(0, 100)))
    for r in replicas[1:]:
        if draw(st.integers(0, 3)) == 0:  # a follower lags: its leader drops it
            isr = pc.hash_order(x for x in reg.isr if x != r)
            reg = _then(reg, partial(pc.alter_isr, TP, reg, isr, everyone, rules))
    want_moving = draw(st.booleans()) if moving is None else moving
    if want_moving:
        for _ in range(draw(st.integers(1, 2))):  # a move, maybe re-targeted mid-way
            target = draw(replica_lists(brokers), label="earlier target")
            reg = _then(reg, partial(pc.change_reassignment, TP, reg, target, everyone, rules))
            for r in reg.replicas:
                if r not in reg.isr and reg.leader != NO_LEADER and draw(st.booleans()):
                    isr = pc.hash_order([*reg.isr, r])
                    reg = _then(reg, partial(pc.alter_isr, TP, reg, isr, everyone, rules))
    # The brokers outside ``live`` fail now: the controller fences them one by one, dropping
    # each from the ISR and from leadership, as Controller.fence_broker does.
    still_live = set(brokers)
    for b in brokers:
        if b not in live:
            still_live.discard(b)
            if b in reg.isr:
                reg = _then(reg, partial(pc.leader_and_isr_update, TP, reg,
                                         alive(still_live), rules, remove=b))
    return PartitionCase(reg, brokers, live, rules)


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
    data sizes and producer rates, short timeouts so failures matter within a run, and
    eligible leader replicas (KIP-966) mostly on, as in a new Kafka 4.x cluster."""
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
        "eligibleLeaderReplicas": draw(st.integers(0, 3)) != 0,
    }
    return EmbeddedClusterSpec.model_validate(doc)
