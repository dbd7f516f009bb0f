"""Crash-safe framing for append-only files (metadata log segments and snapshots).

A frame is ``magic(1) | length(u32) | crc32c(u32) | payload``. The CRC covers the payload.
Reading distinguishes two failures that must never be confused:

* a **torn tail** — the last frame of the file is incomplete or fails its CRC. That is what a
  ``kill -9`` (or power loss) in the middle of an append leaves behind; the frame was never
  acknowledged, so it is dropped and the file is truncated back to the last whole frame;
* **corruption** — a bad frame followed by more data. Something damaged acknowledged data;
  we stop with :class:`CorruptFileError` naming the file and the byte offset instead of
  guessing.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import crc32c

MAGIC = 0xC5
_HEADER = struct.Struct(">BII")
HEADER_SIZE = _HEADER.size
MAX_FRAME = 256 * 1024 * 1024


class CorruptFileError(Exception):
    """A file holds damaged data before its tail; names the file and the byte offset."""

    def __init__(self, path: Path, offset: int, reason: str) -> None:
        super().__init__(f"{path}: corrupt data at byte offset {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


def encode_frame(payload: bytes) -> bytes:
    if len(payload) > MAX_FRAME:
        raise ValueError(f"frame of {len(payload)} bytes exceeds the {MAX_FRAME}-byte limit")
    return _HEADER.pack(MAGIC, len(payload), crc32c.crc32c(payload)) + payload


@dataclass(frozen=True, slots=True)
class ReadResult:
    frames: list[tuple[int, bytes]]  # (byte position, payload)
    valid_length: int  # bytes of whole, valid frames
    torn_bytes: int  # bytes past valid_length that a torn write left


def read_frames(path: Path) -> ReadResult:
    """Read every whole frame; report a torn tail; raise on corruption before the tail."""
    return parse_frames(path.read_bytes(), path)


def parse_frames(data: bytes, path: Path) -> ReadResult:
    """:func:`read_frames` of bytes in memory (``path`` names them in errors)."""
    frames: list[tuple[int, bytes]] = []
    pos = 0
    end = len(data)
    while pos < end:
        if end - pos < HEADER_SIZE:
            return ReadResult(frames, pos, end - pos)
        magic, length, crc = _HEADER.unpack_from(data, pos)
        if magic != MAGIC or length > MAX_FRAME:
            if _only_padding(data, pos):
                return ReadResult(frames, pos, end - pos)
            raise CorruptFileError(
                path, pos, f"bad frame header (magic {magic:#x}, length {length})")
        body_start = pos + HEADER_SIZE
        body_end = body_start + length
        if body_end > end:
            return ReadResult(frames, pos, end - pos)
        payload = data[body_start:body_end]
        if crc32c.crc32c(payload) != crc:
            if body_end == end:
                return ReadResult(frames, pos, end - pos)
            raise CorruptFileError(path, pos, "checksum mismatch")
        frames.append((pos, payload))
        pos = body_end
    return ReadResult(frames, pos, 0)


def _only_padding(data: bytes, pos: int) -> bool:
    # A torn append on some filesystems leaves zero-filled blocks behind the last frame.
    return not data[pos:].strip(b"\x00")


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` so that ``path`` holds either the old or the new content, never a mix."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


class FrameWriter:
    """Appends frames to a file; :meth:`append` returns only once the data is durable."""

    def __init__(self, path: Path, *, fsync: bool = True) -> None:
        self.path = path
        self._fsync = fsync
        existed = path.exists()
        self._file = open(path, "ab")  # noqa: SIM115 - held open for the writer's lifetime
        if not existed:
            fsync_dir(path.parent)

    def append(self, payloads: list[bytes]) -> int:
        """Append frames durably; returns the byte position of the first."""
        pos = self._file.tell()
        self._file.write(b"".join(encode_frame(p) for p in payloads))
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())
        return pos

    def truncate(self, length: int) -> None:
        self._file.truncate(length)
        self._file.seek(length)
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())

    @property
    def size(self) -> int:
        return self._file.tell()

    def close(self) -> None:
        self._file.close()
