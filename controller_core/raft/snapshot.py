"""KIP-630 snapshots of the metadata quorum: the state at a committed offset, as bytes.

A :class:`RaftSnapshot` is what the application (the embedded cluster's controller) hands the
quorum: its state at ``end_offset`` as opaque records (the same payloads the quorum commits),
plus the voter configuration in force there, so that the log below can be dropped. Its id is
Kafka's ``OffsetAndEpoch``: the end offset and the epoch of the record just before it.

On the wire and on disk a snapshot is one byte string of CRC frames
(:mod:`controller_core.storage.framing`): a header, one frame per record, a trailer with the
count. FetchSnapshot moves it in chunks by byte position (Kafka's ``UnalignedRecords``), and
the receiver checks every CRC before it uses a byte. Files are named like Kafka's
``SnapshotPath`` (``<end offset>-<epoch>.checkpoint``), written as ``.checkpoint.part``,
fsynced and renamed, so a snapshot is whole or absent; a damaged one is an error naming the
file, never silently used.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import orjson

from controller_core.raft.records import VoterAssignment
from controller_core.storage.framing import (
    CorruptFileError,
    encode_frame,
    fsync_dir,
    parse_frames,
)

SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")


@dataclass(frozen=True, slots=True, order=True)
class SnapshotId:
    """Kafka's OffsetAndEpoch of a snapshot: offsets below ``end_offset`` are in it, and the
    record at ``end_offset - 1`` was appended in ``epoch``."""

    end_offset: int
    epoch: int


@dataclass(frozen=True, slots=True)
class RaftSnapshot:
    id: SnapshotId
    config: VoterAssignment | None  # the configuration in force at end_offset - 1
    records: tuple[bytes, ...]  # the application state, opaque to the quorum

    @property
    def end_offset(self) -> int:
        return self.id.end_offset


def encode_snapshot(snap: RaftSnapshot) -> bytes:
    c = snap.config
    header = {"endOffset": snap.id.end_offset, "epoch": snap.id.epoch,
              "config": None if c is None else {
                  "clusterId": c.cluster_id, "currentVoters": c.current_voters,
                  "targetVoters": c.target_voters}}
    parts = [encode_frame(orjson.dumps(header))]
    parts.extend(encode_frame(r) for r in snap.records)
    parts.append(encode_frame(orjson.dumps({"records": len(snap.records)})))
    return b"".join(parts)


class SnapshotDecodeError(ValueError):
    """Bytes that are not a whole, valid snapshot (a damaged or incomplete transfer)."""


def decode_snapshot(data: bytes, where: str = "snapshot") -> RaftSnapshot:
    """Decode and verify a snapshot (every CRC, the header and the trailer's record count)."""
    try:
        res = parse_frames(data, Path(where))
    except CorruptFileError as e:
        raise SnapshotDecodeError(str(e)) from None
    if res.torn_bytes:
        raise SnapshotDecodeError(f"{where}: snapshot is incomplete: {res.torn_bytes} bytes "
                                  f"after byte {res.valid_length} are not a whole frame")
    frames = res.frames
    if len(frames) < 2:
        raise SnapshotDecodeError(f"{where}: incomplete snapshot ({len(frames)} frames)")
    try:
        head = orjson.loads(frames[0][1])
        trailer = orjson.loads(frames[-1][1])
        sid = SnapshotId(int(head["endOffset"]), int(head["epoch"]))
        c = head["config"]
        config = None if c is None else VoterAssignment(
            str(c["clusterId"]), tuple(c["currentVoters"]),
            None if c["targetVoters"] is None else tuple(c["targetVoters"]))
        count = int(trailer["records"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise SnapshotDecodeError(f"{where}: unreadable snapshot header or trailer: {e}") from None
    records = tuple(p for _, p in frames[1:-1])
    if count != len(records):
        raise SnapshotDecodeError(f"{where}: trailer says {count} records, found {len(records)}")
    return RaftSnapshot(sid, config, records)


# ---------------------------------------------------------------------------- files
def snapshot_path(directory: Path, sid: SnapshotId) -> Path:
    """Kafka's SnapshotPath: ``<end offset, 20 digits>-<epoch, 10 digits>.checkpoint``."""
    return directory / f"{sid.end_offset:020d}-{sid.epoch:010d}{SUFFIX}"


def snapshot_files(directory: Path) -> list[tuple[SnapshotId, Path]]:
    out = []
    for p in directory.iterdir():
        m = _NAME.match(p.name)
        if m:
            out.append((SnapshotId(int(m.group(1)), int(m.group(2))), p))
    return sorted(out)


def write_snapshot_file(directory: Path, snap: RaftSnapshot, *, fsync: bool = True) -> Path:
    """Write ``snap`` atomically: a ``.checkpoint.part`` file, fsync, rename, fsync the
    directory (Kafka's FileRawSnapshotWriter.freeze)."""
    path = snapshot_path(directory, snap.id)
    tmp = path.with_name(path.name.removesuffix(SUFFIX) + PARTIAL_SUFFIX)
    with open(tmp, "wb") as f:
        f.write(encode_snapshot(snap))
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if fsync:
        fsync_dir(directory)
    return path


def read_snapshot_file(path: Path) -> RaftSnapshot:
    """Load one snapshot file; any damage is a :class:`CorruptFileError` naming the file."""
    data = path.read_bytes()
    try:
        snap = decode_snapshot(data, str(path))
    except SnapshotDecodeError as e:
        raise CorruptFileError(path, 0, f"damaged snapshot: {e}") from None
    m = _NAME.match(path.name)
    if m and (int(m.group(1)), int(m.group(2))) != (snap.id.end_offset, snap.id.epoch):
        raise CorruptFileError(path, 0, f"the file name does not match the snapshot id "
                                        f"({snap.id.end_offset}, {snap.id.epoch}) it holds")
    return snap


def load_latest_snapshot(directory: Path) -> RaftSnapshot | None:
    """The newest snapshot of ``directory`` (leftover partial files of a crash are removed)."""
    for leftover in directory.glob("*" + PARTIAL_SUFFIX):
        leftover.unlink()
    files = snapshot_files(directory)
    return read_snapshot_file(files[-1][1]) if files else None


def delete_snapshots_before(directory: Path, sid: SnapshotId) -> None:
    for other, path in snapshot_files(directory):
        if other < sid:
            path.unlink()
