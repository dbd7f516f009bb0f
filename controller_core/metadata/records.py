"""Metadata records — the only way metadata changes (as in KRaft's metadata log).

Every record is a small named tuple (a million of them are built and encoded when a big
cluster is created) with a short tag (:data:`TAGS`). On disk a batch of records is one
frame (see :mod:`controller_core.storage.framing`) holding ``{o: base offset, e: epoch,
t: timestamp ms, r: [[tag, field, ...], ...]}`` — the shape of a Raft log entry, so the same
batches can be replicated by the metadata quorum.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson


class ClusterRecord(NamedTuple):
    cluster_id: str


class RegisterBrokerRecord(NamedTuple):
    broker_id: int
    rack: str | None
    fenced: bool


class BrokerFencingRecord(NamedTuple):
    """BrokerRegistrationChangeRecord: a broker is fenced (silent) or unfenced (back)."""

    broker_id: int
    fenced: bool


class UnregisterBrokerRecord(NamedTuple):
    """UnregisterBrokerRecord: the broker leaves the cluster's registrations (UnregisterBroker,
    KIP-1073's way to clean describe cluster up after a broker is gone for good)."""

    broker_id: int


class TopicRecord(NamedTuple):
    name: str
    topic_id: str
    message_bytes: int = 1024
    produce_bytes_per_second: float = 0.0


class RemoveTopicRecord(NamedTuple):
    name: str


class PartitionRecord(NamedTuple):
    topic: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()
    directories: tuple[str, ...] = ()  # KIP-858, aligned with replicas; "": unassigned


class PartitionChangeRecord(NamedTuple):
    """A change of one partition; ``None`` means unchanged. The partition epoch always bumps."""

    topic: str
    partition: int
    replicas: tuple[int, ...] | None = None
    isr: tuple[int, ...] | None = None
    leader: int | None = None
    leader_epoch: int | None = None
    adding: tuple[int, ...] | None = None
    removing: tuple[int, ...] | None = None
    elr: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None
    # KIP-858: the replicas' directories (AssignReplicasToDirs). None with new ``replicas``:
    # each replica that stays keeps its directory, a new one is unassigned.
    directories: tuple[str, ...] | None = None


class ConfigRecord(NamedTuple):
    """A dynamic config of a broker or topic; ``value=None`` deletes it."""

    resource_type: str  # "BROKER" | "TOPIC"
    resource_name: str
    name: str
    value: str | None


class MarkerRecord(NamedTuple):
    """One record of the throttle-marker topic (``admin.THROTTLE_MARKER_TOPIC``) at ``offset``
    of its only partition; ``value=None`` is a tombstone. The embedded cluster keeps that
    topic's data in its metadata log, so restarts, snapshots and controller fail-over keep it
    as the replicas of a real topic would."""

    key: str
    value: str | None
    offset: int


Record = (
    ClusterRecord
    | RegisterBrokerRecord
    | BrokerFencingRecord
    | UnregisterBrokerRecord
    | TopicRecord
    | RemoveTopicRecord
    | PartitionRecord
    | PartitionChangeRecord
    | ConfigRecord
    | MarkerRecord
)

TAGS: dict[type[Any], str] = {
    ClusterRecord: "C", RegisterBrokerRecord: "B", BrokerFencingRecord: "F", TopicRecord: "T",
    RemoveTopicRecord: "RT", PartitionRecord: "P", PartitionChangeRecord: "PC",
    ConfigRecord: "CF", MarkerRecord: "MK", UnregisterBrokerRecord: "UB",
}
PARTITION_TAG = TAGS[PartitionRecord]
_CHANGE_TAG = TAGS[PartitionChangeRecord]
_TYPES: dict[str, type[Any]] = {tag: cls for cls, tag in TAGS.items()}


# Fields added after a record type was first written (KIP-966's ELR fields, KIP-858's
# directories): left out of the encoding while they hold their default, so older logs and
# snapshots read back the same and the common record stays as short as it was.
_TRAILING_DEFAULTS: dict[type[Any], tuple[Any, ...]] = {
    PartitionRecord: ((), (), ()), PartitionChangeRecord: (None, None, None)}


def encode_record(record: Record) -> list[Any]:
    if type(record) is PartitionRecord:  # the common record of a create: no lookups
        if record[11] != ():
            return [PARTITION_TAG, *record]
        if record[10] != ():
            return [PARTITION_TAG, *record[:11]]
        return [PARTITION_TAG, *record[:10]] if record[9] != () else [PARTITION_TAG,
                                                                      *record[:9]]
    if type(record) is PartitionChangeRecord:  # the record of every move and ISR change
        if record[10] is not None:
            return [_CHANGE_TAG, *record]
        if record[9] is not None:
            return [_CHANGE_TAG, *record[:10]]
        return [_CHANGE_TAG, *record[:9]] if record[8] is not None else [_CHANGE_TAG,
                                                                         *record[:8]]
    row = [TAGS[type(record)], *record]
    defaults = _TRAILING_DEFAULTS.get(type(record))
    if defaults is not None:
        for default in reversed(defaults):
            if row[-1] != default:
                break
            row.pop()
    return row


def decode_record(row: list[Any]) -> Record:
    tag = row[0]
    cls = _TYPES.get(tag)
    if cls is None:
        raise ValueError(f"unknown record type {tag!r}")
    args = [tuple(v) if isinstance(v, list) else v for v in row[1:]]
    record: Record = cls(*args)
    return record


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """A batch of records at ``base_offset``; the unit of durability and of replication."""

    base_offset: int
    epoch: int
    timestamp_ms: int
    records: tuple[Record, ...]
    quorum_end: int = 0  # metadata-quorum offset just past the entry these records came in

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.records)

    def encode(self) -> bytes:
        return orjson.dumps({
            "o": self.base_offset, "e": self.epoch, "t": self.timestamp_ms,
            "q": self.quorum_end, "r": [encode_record(r) for r in self.records],
        })
