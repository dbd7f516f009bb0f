"""Where a node's quorum state and log live between crashes.

Two implementations of one small interface:

* :class:`DirectoryStorage` — a directory with ``quorum-state`` (JSON, replaced atomically),
  log segments of CRC frames (``controller_core.storage.framing``), one frame per batch, and
  the latest KIP-630 snapshot (:mod:`controller_core.raft.snapshot`). Recovery drops a torn
  tail and refuses corruption before it; segments wholly below the snapshot are deleted.
* :class:`MemoryStorage` — the same contract in memory for fast simulations, with a page
  cache: appended batches are *written* but only *durable* after :meth:`flush`, so a hard
  kill can lose the unflushed tail, exactly like a real machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import orjson

from controller_core.raft.records import Batch, decode_batch, encode_batch
from controller_core.raft.snapshot import (
    RaftSnapshot,
    delete_snapshots_before,
    load_latest_snapshot,
    write_snapshot_file,
)
from controller_core.raft.state import QuorumState
from controller_core.storage.framing import (
    CorruptFileError,
    FrameWriter,
    read_frames,
    write_atomically,
)


@dataclass(slots=True)
class Recovered:
    quorum_state: QuorumState
    batches: list[Batch]
    snapshot: RaftSnapshot | None = None  # the log continues at its end


def _after_snapshot(snap: RaftSnapshot | None,
                    batches: list[Batch]) -> tuple[list[Batch], bool]:
    """The batches that continue ``snap``, and whether the log is consistent with it. It is
    not after a crash between writing a snapshot fetched from the leader and dropping the old
    log (which is then not the committed one: the reset is completed)."""
    if snap is None:
        return batches, True
    end, out = snap.end_offset, []
    for b in batches:
        if b.base_offset < end <= b.end_offset and b.epoch != snap.id.epoch:
            return [], False  # the entry at end-1 is not the snapshot's
        if b.end_offset > end:
            out.append(b.slice(end, b.end_offset))
    if out and (out[0].base_offset != end or out[0].epoch < snap.id.epoch):
        return [], False
    if not out and batches and batches[-1].end_offset != end:
        return [], False  # the log ends before the snapshot: it cannot continue it
    return out, True


class RaftStorage(Protocol):
    def load(self) -> Recovered: ...
    def save_quorum_state(self, qs: QuorumState) -> None: ...
    def save_snapshot(self, snap: RaftSnapshot, *, reset: bool) -> None: ...
    def truncate(self, offset: int) -> None: ...
    def append(self, batches: tuple[Batch, ...] | list[Batch]) -> None: ...
    def flush(self) -> None: ...


def _truncate_batches(batches: list[Batch], offset: int) -> None:
    while batches and batches[-1].base_offset >= offset:
        batches.pop()
    if batches and batches[-1].end_offset > offset:
        batches[-1] = batches[-1].slice(batches[-1].base_offset, offset)


@dataclass(slots=True)
class MemoryStorage:
    """In-memory disk: durable state plus an unflushed tail a hard kill may lose."""

    durable_state: QuorumState = field(default_factory=QuorumState)
    durable: list[Batch] = field(default_factory=list)
    unflushed: list[Batch] = field(default_factory=list)
    snapshot: RaftSnapshot | None = None

    def load(self) -> Recovered:
        return Recovered(self.durable_state,
                         _after_snapshot(self.snapshot, list(self.durable))[0], self.snapshot)

    def save_snapshot(self, snap: RaftSnapshot, *, reset: bool) -> None:
        """Atomic like a rename; then the log below it goes (all of it on ``reset``)."""
        self.snapshot = snap
        if reset:
            self.durable, self.unflushed = [], []
            return
        end = snap.end_offset
        self.durable = [b.slice(end, b.end_offset) for b in self.durable if b.end_offset > end]
        self.unflushed = [b.slice(end, b.end_offset) for b in self.unflushed
                          if b.end_offset > end]

    def save_quorum_state(self, qs: QuorumState) -> None:
        self.durable_state = qs  # an atomic rename: durable at once

    def truncate(self, offset: int) -> None:
        # a truncation is made durable before the node goes on (it fsyncs)
        self.flush()
        _truncate_batches(self.durable, offset)

    def append(self, batches: tuple[Batch, ...] | list[Batch]) -> None:
        self.unflushed.extend(batches)

    def flush(self) -> None:
        if self.unflushed:
            self.durable.extend(self.unflushed)
            self.unflushed = []

    def crash(self, lose_unflushed: bool) -> None:
        """Power loss (lose the page cache) or process kill (the OS writes it back)."""
        if lose_unflushed:
            self.unflushed = []
        else:
            self.flush()

    @property
    def durable_end(self) -> int:
        if self.durable:
            return self.durable[-1].end_offset
        return self.snapshot.end_offset if self.snapshot is not None else 0


SEGMENT_BYTES = 64 * 1024 * 1024


class DirectoryStorage:
    """Durable storage of one node in ``directory`` (created if missing)."""

    def __init__(self, directory: Path, *, segment_bytes: int = SEGMENT_BYTES,
                 fsync: bool = True) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._segment_bytes = segment_bytes
        self._fsync = fsync
        self._state_path = self.dir / "quorum-state"
        # (base offset, end offset, segment path, byte position) of every batch
        self._index: list[tuple[int, int, Path, int]] = []
        self._batches_cache: list[Batch] = []
        self._writer: FrameWriter | None = None
        self._roll = False  # start a new segment with the next append (after a snapshot)

    def _segment_path(self, base_offset: int) -> Path:
        return self.dir / f"{base_offset:020d}.log"

    def _segments(self) -> list[Path]:
        return sorted(self.dir.glob("*.log"))

    def load(self) -> Recovered:
        qs = QuorumState()
        if self._state_path.exists():
            try:
                qs = QuorumState.from_json(orjson.loads(self._state_path.read_bytes()))
            except (orjson.JSONDecodeError, ValueError) as e:
                raise ValueError(f"{self._state_path}: unreadable quorum state: {e}") from e
        batches: list[Batch] = []
        self._index = []
        segments = self._segments()
        for i, seg in enumerate(segments):
            res = read_frames(seg)
            if res.torn_bytes:
                if i != len(segments) - 1:
                    raise CorruptFileError(seg, res.valid_length,
                                           "torn frame in a segment that is not the last")
                os.truncate(seg, res.valid_length)  # drop the unacknowledged torn append
            for pos, payload in res.frames:
                b = decode_batch(payload)
                if batches and b.base_offset != batches[-1].end_offset:
                    raise CorruptFileError(seg, pos, f"batch at offset {b.base_offset} does "
                                           f"not follow offset {batches[-1].end_offset}")
                batches.append(b)
                self._index.append((b.base_offset, b.end_offset, seg, pos))
        self._batches_cache = batches
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        snap = load_latest_snapshot(self.dir)
        tail, consistent = _after_snapshot(snap, batches)
        if not consistent:
            self._drop_segments(None)
        return Recovered(qs, tail, snap)

    def save_snapshot(self, snap: RaftSnapshot, *, reset: bool) -> None:
        """Write the snapshot (atomically, durably), then delete older snapshots and the
        segments wholly below it — every segment on ``reset`` (KafkaMetadataLog's
        deleteBeforeSnapshot and truncateFullyAndStartAt). A crash in between leaves a
        snapshot and stale segments, which :meth:`load` sorts out."""
        write_snapshot_file(self.dir, snap, fsync=self._fsync)
        delete_snapshots_before(self.dir, snap.id)
        self._drop_segments(None if reset else snap.end_offset)

    def _drop_segments(self, below: int | None) -> None:
        """Delete the segments whose batches all end at or before ``below`` (all: None)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._roll = True
        seg_end: dict[Path, int] = {}
        for _, end, seg, _ in self._index:
            seg_end[seg] = max(seg_end.get(seg, 0), end)
        gone = {seg for seg in self._segments()
                if below is None or seg_end.get(seg, below + 1) <= below}
        for seg in gone:
            seg.unlink()
        keep = [i for i, e in enumerate(self._index) if e[2] not in gone]
        self._index = [self._index[i] for i in keep]
        self._batches_cache = [self._batches_cache[i] for i in keep]

    def save_quorum_state(self, qs: QuorumState) -> None:
        write_atomically(self._state_path, orjson.dumps(qs.to_json()))

    def _open_writer(self, base_offset: int) -> FrameWriter:
        if self._writer is not None and self._writer.size < self._segment_bytes:
            return self._writer
        if self._writer is not None:
            self._writer.close()
        segs = self._segments()
        path = segs[-1] if segs and self._writer is None else self._segment_path(base_offset)
        if segs and self._writer is None and path.stat().st_size >= self._segment_bytes:
            path = self._segment_path(base_offset)
        if self._roll:
            path = self._segment_path(base_offset)
            self._roll = False
        self._writer = FrameWriter(path, fsync=self._fsync)
        return self._writer

    def append(self, batches: tuple[Batch, ...] | list[Batch]) -> None:
        for b in batches:
            w = self._open_writer(b.base_offset)
            pos = w.append([encode_batch(b)])
            self._index.append((b.base_offset, b.end_offset, w.path, pos))
            self._batches_cache.append(b)

    def flush(self) -> None:
        """Appends are fsynced as they are written (FrameWriter), so nothing is pending."""

    def truncate(self, offset: int) -> None:
        keep = [e for e in self._index if e[0] < offset]
        partial = None
        if keep and keep[-1][1] > offset:
            partial = next(b for b in reversed(self._batches_cache)
                           if b.base_offset == keep[-1][0]).slice(keep[-1][0], offset)
            keep.pop()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        cut_seg: Path | None = None
        cut_pos = 0
        if len(keep) < len(self._index):
            _, _, cut_seg, cut_pos = self._index[len(keep)]
        if cut_seg is not None:
            for seg in self._segments():
                if seg > cut_seg:
                    seg.unlink()
            with open(cut_seg, "r+b") as f:
                f.truncate(cut_pos)
                f.flush()
                if self._fsync:
                    os.fsync(f.fileno())
            if cut_pos == 0 and not keep:
                cut_seg.unlink()
        self._index = keep
        self._batches_cache = [b for b in self._batches_cache if b.base_offset < offset]
        if partial is not None:
            self._batches_cache.pop()
            self.append([partial])

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
