"""Log entries of the metadata quorum: batches of opaque records plus two control records.

A :class:`Batch` is what the leader appends in one go: either application records (opaque
``bytes`` — the metadata records of the embedded cluster) occupying one offset each, or one
control record occupying one offset. Batches are immutable and share their record objects,
so a batch of many (or large) records is cheap to copy between simulated nodes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import orjson


@dataclass(frozen=True, slots=True)
class LeaderChange:
    """Written by every new leader right after its election (KIP-595 LeaderChangeMessage)."""

    leader_id: int
    epoch: int
    voters: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class VoterAssignment:
    """The quorum's configuration (KIP-595 VoterAssignmentMessage).

    ``current_voters`` is in force as soon as the record is appended (single-server change:
    it differs from the previous one by at most one voter); ``target_voters`` is where the
    leader walks the quorum to, ``None`` when no change is wanted.
    """

    cluster_id: str
    current_voters: tuple[int, ...]
    target_voters: tuple[int, ...] | None


ControlRecord = LeaderChange | VoterAssignment


def _records_size(records: tuple[bytes, ...]) -> int:
    return sum(map(len, records))


@dataclass(frozen=True, slots=True)
class Batch:
    """Records ``base_offset .. base_offset + count - 1`` appended by the leader of ``epoch``."""

    base_offset: int
    epoch: int
    records: tuple[bytes, ...] = ()
    control: ControlRecord | None = None
    size_bytes: int = field(default=-1, compare=False)

    def __post_init__(self) -> None:
        if (self.control is None) == (not self.records):
            # exactly one of records / control
            if self.control is None:
                raise ValueError("a batch needs at least one record or a control record")
            raise ValueError("a batch holds either records or a control record, not both")
        if self.size_bytes < 0:
            size = 64 if self.control is not None else _records_size(self.records) + 16
            object.__setattr__(self, "size_bytes", size)

    @property
    def count(self) -> int:
        return 1 if self.control is not None else len(self.records)

    @property
    def end_offset(self) -> int:
        """Offset just past the last record of the batch."""
        return self.base_offset + self.count

    def slice(self, start: int, end: int) -> Batch:
        """The records ``start .. end-1`` (absolute offsets) as a batch of their own."""
        if start <= self.base_offset and end >= self.end_offset:
            return self
        if self.control is not None:
            raise ValueError("a control batch cannot be split")
        lo = max(start, self.base_offset) - self.base_offset
        hi = min(end, self.end_offset) - self.base_offset
        return Batch(self.base_offset + lo, self.epoch, self.records[lo:hi])

    def rebase(self, base_offset: int) -> Batch:
        return Batch(base_offset, self.epoch, self.records, self.control)


# ---------------------------------------------------------------------------- encoding

_HDR = struct.Struct(">qiBi")  # base offset, epoch, kind, count
_KIND_RECORDS, _KIND_LEADER_CHANGE, _KIND_VOTERS = 0, 1, 2
_LEN = struct.Struct(">I")


def encode_batch(batch: Batch) -> bytes:
    """Bytes of one batch for a log segment frame (the frame adds length and CRC)."""
    c = batch.control
    if isinstance(c, LeaderChange):
        body = orjson.dumps({"leaderId": c.leader_id, "epoch": c.epoch, "voters": c.voters})
        return _HDR.pack(batch.base_offset, batch.epoch, _KIND_LEADER_CHANGE, 1) + body
    if isinstance(c, VoterAssignment):
        body = orjson.dumps({"clusterId": c.cluster_id, "currentVoters": c.current_voters,
                             "targetVoters": c.target_voters})
        return _HDR.pack(batch.base_offset, batch.epoch, _KIND_VOTERS, 1) + body
    parts = [_HDR.pack(batch.base_offset, batch.epoch, _KIND_RECORDS, len(batch.records))]
    for r in batch.records:
        parts.append(_LEN.pack(len(r)))
        parts.append(r)
    return b"".join(parts)


def decode_batch(data: bytes) -> Batch:
    base, epoch, kind, count = _HDR.unpack_from(data, 0)
    pos = _HDR.size
    if kind == _KIND_LEADER_CHANGE:
        d = orjson.loads(data[pos:])
        return Batch(base, epoch, control=LeaderChange(d["leaderId"], d["epoch"],
                                                       tuple(d["voters"])))
    if kind == _KIND_VOTERS:
        d = orjson.loads(data[pos:])
        target = d["targetVoters"]
        return Batch(base, epoch, control=VoterAssignment(
            d["clusterId"], tuple(d["currentVoters"]),
            None if target is None else tuple(target)))
    if kind != _KIND_RECORDS:
        raise ValueError(f"unknown batch kind {kind}")
    mv = memoryview(data)
    records: list[bytes] = []
    for _ in range(count):
        (n,) = _LEN.unpack_from(data, pos)
        pos += _LEN.size
        records.append(bytes(mv[pos:pos + n]))
        pos += n
    return Batch(base, epoch, tuple(records))
