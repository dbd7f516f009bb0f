"""The durable metadata log: segment files of record batches plus periodic snapshots.

Layout of a log directory::

    log-00000000000000000000.log     batches from offset 0 (one CRC frame per batch)
    snapshot-00000000000000123456.snap   every record needed to rebuild offsets < 123456
    log-00000000000000123456.log     batches from 123456 on

An append returns only after fsync. A snapshot is written to a temporary file, fsynced and
renamed, so it is either whole or absent. Recovery loads the newest snapshot, replays the
batches after it, truncates a torn tail (an append cut by a crash, never acknowledged) and
refuses anything else that is damaged with :class:`CorruptFileError` naming file and offset.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from controller_core.metadata.records import Record, RecordBatch
from controller_core.storage.framing import (
    CorruptFileError,
    FrameWriter,
    encode_frame,
    fsync_dir,
    read_frames,
)

_SEGMENT = re.compile(r"^log-(\d{20})\.log$")
_SNAPSHOT = re.compile(r"^snapshot-(\d{20})\.snap$")
SNAPSHOT_CHUNK = 20_000
KEEP_SNAPSHOTS = 2


@dataclass(slots=True)
class Recovered:
    snapshot_offset: int  # offsets below this come from the snapshot
    snapshot_rows: list[list[Any]]  # encoded records of the snapshot
    batches: list[tuple[int, list[list[Any]]]]  # (base offset, encoded records) after it
    last_timestamp_ms: int
    torn_bytes: int  # bytes of an unacknowledged tail that recovery dropped
    quorum_end: int  # metadata-quorum offset up to which records are here (0: none)


class MetadataLog:
    def __init__(self, directory: Path, *, fsync: bool = True) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._writer: FrameWriter | None = None
        self.next_offset = 0
        self.snapshot_offset = 0
        self.quorum_end = 0

    # -- recovery -------------------------------------------------------------------------------
    def _files(self, pattern: re.Pattern[str]) -> list[tuple[int, Path]]:
        found = []
        for p in self.dir.iterdir():
            m = pattern.match(p.name)
            if m:
                found.append((int(m.group(1)), p))
        return sorted(found)

    def recover(self) -> Recovered:
        for leftover in self.dir.glob("*.tmp"):
            leftover.unlink()  # a snapshot that never got renamed into place
        snapshot_offset, ts, quorum_end = 0, 0, 0
        rows: list[list[Any]] = []
        snapshots = self._files(_SNAPSHOT)
        if snapshots:
            snapshot_offset, path = snapshots[-1]
            rows, ts, quorum_end = read_snapshot(path)
        segments = self._files(_SEGMENT)
        batches: list[tuple[int, list[list[Any]]]] = []
        expected = snapshot_offset
        torn = 0
        for i, (_base, path) in enumerate(segments):
            last_segment = i == len(segments) - 1
            if not last_segment and segments[i + 1][0] <= snapshot_offset:
                continue  # wholly contained in the snapshot: not read at all
            result = read_frames(path)
            if result.torn_bytes:
                if not last_segment:
                    raise CorruptFileError(path, result.valid_length,
                                           "incomplete batch in the middle of the log")
                torn = result.torn_bytes
                with open(path, "r+b") as f:
                    f.truncate(result.valid_length)
                    os.fsync(f.fileno())
            for pos, payload in result.frames:
                try:
                    doc = orjson.loads(payload)
                    base, batch_rows, stamp = int(doc["o"]), doc["r"], int(doc["t"])
                    quorum_end = max(quorum_end, int(doc.get("q", 0)))
                except (ValueError, KeyError, TypeError) as e:
                    raise CorruptFileError(path, pos, f"undecodable batch: {e}") from None
                if base + len(batch_rows) <= snapshot_offset:
                    continue  # already contained in the snapshot
                if base != expected:
                    raise CorruptFileError(
                        path, pos, f"batch at offset {base}, expected {expected}")
                batches.append((base, batch_rows))
                expected = base + len(batch_rows)
                ts = max(ts, stamp)
        self.next_offset = expected
        self.snapshot_offset = snapshot_offset
        self.quorum_end = quorum_end
        self._open_writer(segments[-1][1] if segments else None)
        return Recovered(snapshot_offset, rows, batches, ts, torn, quorum_end)

    def _open_writer(self, path: Path | None) -> None:
        if self._writer is not None:
            self._writer.close()
        if path is None:
            path = self.dir / f"log-{self.next_offset:020d}.log"
        self._writer = FrameWriter(path, fsync=self._fsync)

    # -- appending ------------------------------------------------------------------------------
    def append(self, records: Iterable[Record], *, epoch: int, timestamp_ms: int,
               quorum_end: int = 0) -> RecordBatch:
        """Append one batch durably; returns it with its base offset."""
        batch = RecordBatch(self.next_offset, epoch, timestamp_ms, tuple(records), quorum_end)
        self.quorum_end = max(self.quorum_end, quorum_end)
        assert self._writer is not None, "recover() first"
        self._writer.append([batch.encode()])
        self.next_offset = batch.next_offset
        return batch

    def append_encoded(self, rows_json: bytes, count: int, *, epoch: int, timestamp_ms: int,
                       quorum_end: int = 0) -> None:
        """Append a batch whose records are already encoded as a JSON list (as the quorum
        carried them), without decoding and encoding them again."""
        head = orjson.dumps({"o": self.next_offset, "e": epoch, "t": timestamp_ms,
                             "q": quorum_end})
        assert self._writer is not None, "recover() first"
        self._writer.append([head[:-1] + b',"r":' + rows_json + b"}"])
        self.next_offset += count
        self.quorum_end = max(self.quorum_end, quorum_end)

    # -- snapshots ------------------------------------------------------------------------------
    def write_snapshot(self, rows: Iterable[list[Any]], *, timestamp_ms: int) -> Path:
        """Snapshot the state at ``next_offset`` from encoded rows (records, or blocks of
        them); later segments start after it."""
        offset = self.next_offset
        path = self.dir / f"snapshot-{offset:020d}.snap"
        tmp = path.with_name(path.name + ".tmp")
        count = 0
        with open(tmp, "wb") as f:
            chunk: list[list[Any]] = []
            for row in rows:
                chunk.append(row)
                if len(chunk) >= SNAPSHOT_CHUNK:
                    f.write(encode_frame(orjson.dumps(chunk)))
                    count += len(chunk)
                    chunk = []
            if chunk:
                f.write(encode_frame(orjson.dumps(chunk)))
                count += len(chunk)
            f.write(encode_frame(orjson.dumps(
                {"offset": offset, "timestamp_ms": timestamp_ms, "records": count,
                 "quorum_end": self.quorum_end})))
            f.flush()
            if self._fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if self._fsync:
            fsync_dir(self.dir)
        self.snapshot_offset = offset
        self._open_writer(None)
        self._prune()
        return path

    def _prune(self) -> None:
        snapshots = self._files(_SNAPSHOT)
        keep = snapshots[-KEEP_SNAPSHOTS:]
        for _, path in snapshots[:-KEEP_SNAPSHOTS]:
            path.unlink()
        oldest_kept = keep[0][0] if keep else 0
        segments = self._files(_SEGMENT)
        for i, (_base, path) in enumerate(segments):
            next_base = segments[i + 1][0] if i + 1 < len(segments) else None
            if next_base is not None and next_base <= oldest_kept:
                path.unlink()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def read_snapshot(path: Path) -> tuple[list[list[Any]], int, int]:
    """Rows of every record in a snapshot, its timestamp and quorum offset; a damaged
    snapshot is an error."""
    result = read_frames(path)
    if result.torn_bytes or not result.frames:
        raise CorruptFileError(path, result.valid_length, "snapshot is incomplete")
    *chunks, (pos, trailer) = result.frames
    meta = orjson.loads(trailer)
    rows: list[list[Any]] = []
    for _, payload in chunks:
        rows.extend(orjson.loads(payload))
    if not isinstance(meta, dict) or meta.get("records") != len(rows):
        raise CorruptFileError(path, pos, "snapshot trailer does not match its content")
    return rows, int(meta["timestamp_ms"]), int(meta.get("quorum_end", 0))
