"""Metadata records — the only way metadata changes (as in KRaft's metadata log).

Every record is a small frozen dataclass with a short tag. On disk a batch of records is one
frame (see :mod:`controller_core.storage.framing`) holding ``{o: base offset, e: epoch,
t: timestamp ms, r: [[tag, field, ...], ...]}`` — the shape of a Raft log entry, so the same
batches can be replicated by the metadata quorum.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson


@dataclass(frozen=True, slots=True)
class ClusterRecord:
    TAG: ClassVar[str] = "C"
    cluster_id: str


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord:
    TAG: ClassVar[str] = "B"
    broker_id: int
    rack: str | None
    fenced: bool


@dataclass(frozen=True, slots=True)
class BrokerFencingRecord:
    """BrokerRegistrationChangeRecord: a broker is fenced (silent) or unfenced (back)."""

    TAG: ClassVar[str] = "F"
    broker_id: int
    fenced: bool


@dataclass(frozen=True, slots=True)
class TopicRecord:
    TAG: ClassVar[str] = "T"
    name: str
    topic_id: str
    message_bytes: int = 1024
    produce_bytes_per_second: float = 0.0


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    TAG: ClassVar[str] = "RT"
    name: str


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    TAG: ClassVar[str] = "P"
    topic: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord:
    """A change of one partition; ``None`` means unchanged. The partition epoch always bumps."""

    TAG: ClassVar[str] = "PC"
    topic: str
    partition: int
    replicas: tuple[int, ...] | None = None
    isr: tuple[int, ...] | None = None
    leader: int | None = None
    leader_epoch: int | None = None
    adding: tuple[int, ...] | None = None
    removing: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    """A dynamic config of a broker or topic; ``value=None`` deletes it."""

    TAG: ClassVar[str] = "CF"
    resource_type: str  # "BROKER" | "TOPIC"
    resource_name: str
    name: str
    value: str | None


Record = (
    ClusterRecord
    | RegisterBrokerRecord
    | BrokerFencingRecord
    | TopicRecord
    | RemoveTopicRecord
    | PartitionRecord
    | PartitionChangeRecord
    | ConfigRecord
)

_TYPES: dict[str, type[Any]] = {
    cls.TAG: cls
    for cls in (ClusterRecord, RegisterBrokerRecord, BrokerFencingRecord, TopicRecord,
                RemoveTopicRecord, PartitionRecord, PartitionChangeRecord, ConfigRecord)
}
_FIELDS: dict[str, tuple[str, ...]] = {
    tag: tuple(f.name for f in dataclasses.fields(cls)) for tag, cls in _TYPES.items()
}


def encode_record(record: Record) -> list[Any]:
    return [record.TAG, *(getattr(record, f) for f in _FIELDS[record.TAG])]


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

    @classmethod
    def decode(cls, payload: bytes) -> RecordBatch:
        doc = orjson.loads(payload)
        return cls(int(doc["o"]), int(doc["e"]), int(doc["t"]),
                   tuple(decode_record(r) for r in doc["r"]), int(doc.get("q", 0)))
