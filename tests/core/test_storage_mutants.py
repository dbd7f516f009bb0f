"""Storage behaviours that mutation testing (docs/mutation.md) showed no test pinned.

Durability is checked by recording the calls that make data durable (``os.fsync`` and
``os.replace``) and asserting their order: the data of a file is fsynced before it is renamed
into place, and the directory after, so that a crash at any point leaves the old or the new
file, never an empty one under the new name. Damage is made byte by byte in frames.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from controller_core.metadata.records import ClusterRecord, RecordBatch, encode_record
from controller_core.storage import framing, metadata_log
from controller_core.storage.framing import (
    HEADER_SIZE,
    MAGIC,
    CorruptFileError,
    FrameWriter,
    encode_frame,
    parse_frames,
    read_frames,
    write_atomically,
)
from controller_core.storage.metadata_log import MetadataLog, read_snapshot

F = encode_frame
HERE = Path("frames.bin")  # names the bytes in errors of parse_frames


class Durability:
    """Records fsyncs (as ``("fsync", inode)`` / ``("fsync-dir", inode)``) and renames."""

    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []

    def file_syncs(self) -> list[object]:
        return [e[1] for e in self.events if e[0] == "fsync"]

    def dir_syncs(self) -> list[object]:
        return [e[1] for e in self.events if e[0] == "fsync-dir"]


@pytest.fixture
def durability(monkeypatch: pytest.MonkeyPatch) -> Iterator[Durability]:
    rec = Durability()
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        rec.events.append(("fsync-dir" if stat.S_ISDIR(st.st_mode) else "fsync", st.st_ino))
        real_fsync(fd)

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        rec.events.append(("replace", Path(src), Path(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    yield rec


def ino(path: Path) -> int:
    return path.stat().st_ino


def corrupt_magic(frame: bytes) -> bytes:
    return bytes([frame[0] ^ 0xFF]) + frame[1:]


def corrupt_payload(frame: bytes) -> bytes:
    return frame[:-1] + bytes([frame[-1] ^ 0xFF])


def batch(base: int, *names: str, stamp: int = 0, q: int = 0) -> bytes:
    return RecordBatch(base, 0, stamp, tuple(ClusterRecord(n) for n in names), q).encode()


def fresh_log(path: Path, **kw: bool) -> MetadataLog:
    log = MetadataLog(path, **kw)
    log.recover()
    return log


def names(directory: Path, pattern: str) -> list[int]:
    return sorted(int(p.name.split("-")[1].split(".")[0]) for p in directory.glob(pattern))


# -- write_atomically ------------------------------------------------------------------------------
def test_atomic_write_fsyncs_the_data_before_the_rename_and_the_directory_after(
        tmp_path: Path, durability: Durability) -> None:
    target = tmp_path / "state.json"
    target.write_bytes(b"old")
    write_atomically(target, b"new content")
    assert target.read_bytes() == b"new content"
    tmp = target.with_name("state.json.tmp")
    assert durability.events == [
        ("fsync", ino(target)),  # the new data is on disk ...
        ("replace", tmp, target),  # ... before its name replaces the old file ...
        ("fsync-dir", ino(tmp_path)),  # ... and the rename itself is made durable
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


# -- frames ----------------------------------------------------------------------------------------
def test_whole_frames_are_read_back_with_their_positions() -> None:
    a, b = F(b"first"), F(b"second")
    r = parse_frames(a + b, HERE)
    assert r.frames == [(0, b"first"), (len(a), b"second")]
    assert (r.valid_length, r.torn_bytes) == (len(a) + len(b), 0)


def test_an_empty_payload_is_a_whole_frame_not_a_torn_header() -> None:
    a = F(b"a")
    r = parse_frames(a + F(b""), HERE)
    assert r.frames == [(0, b"a"), (len(a), b"")]
    assert (r.valid_length, r.torn_bytes) == (len(a) + HEADER_SIZE, 0)


def test_a_torn_header_keeps_the_frames_before_it() -> None:
    a = F(b"abc")
    r = parse_frames(a + F(b"xyz")[:3], HERE)
    assert (r.frames, r.valid_length, r.torn_bytes) == ([(0, b"abc")], len(a), 3)


def test_a_torn_body_keeps_the_frames_before_it() -> None:
    a, b = F(b"abc"), F(b"a longer payload")
    r = parse_frames(a + b[:-4], HERE)
    assert (r.frames, r.valid_length, r.torn_bytes) == ([(0, b"abc")], len(a), len(b) - 4)


def test_a_checksum_failure_in_the_last_frame_is_a_torn_tail() -> None:
    """A write cut after the length but before the whole payload reached the disk."""
    a, b = F(b"abc"), F(b"defgh")
    r = parse_frames(a + corrupt_payload(b), HERE)
    assert (r.frames, r.valid_length, r.torn_bytes) == ([(0, b"abc")], len(a), len(b))


def test_zero_fill_after_the_last_frame_is_a_torn_tail(tmp_path: Path) -> None:
    a, b = F(b"a"), F(b"bc")
    path = tmp_path / "seg"
    path.write_bytes(a + b + b"\x00" * 100)
    r = read_frames(path)
    assert r.frames == [(0, b"a"), (len(a), b"bc")]
    assert (r.valid_length, r.torn_bytes) == (len(a) + len(b), 100)


def test_non_zero_garbage_after_the_last_frame_is_corruption(tmp_path: Path) -> None:
    a = F(b"a")
    path = tmp_path / "seg"
    path.write_bytes(a + b"X" * 16)
    with pytest.raises(CorruptFileError) as e:
        read_frames(path)
    assert (e.value.path, e.value.offset) == (path, len(a))
    assert e.value.reason.startswith("bad frame header")


def test_a_bad_magic_byte_before_the_tail_is_corruption_naming_file_and_offset(
        tmp_path: Path) -> None:
    a, b, c = F(b"a"), F(b"b"), F(b"c")
    path = tmp_path / "seg"
    path.write_bytes(a + corrupt_magic(b) + c)
    with pytest.raises(CorruptFileError) as e:
        read_frames(path)
    assert (e.value.path, e.value.offset) == (path, len(a))
    assert e.value.reason == f"bad frame header (magic {MAGIC ^ 0xFF:#x}, length 1)"
    assert str(e.value) == f"{path}: corrupt data at byte offset {len(a)}: {e.value.reason}"


def test_a_bad_magic_byte_on_the_last_whole_frame_is_corruption() -> None:
    """Its checksum still matches: only the magic byte tells the frame is damaged."""
    a = F(b"a")
    with pytest.raises(CorruptFileError) as e:
        parse_frames(a + corrupt_magic(F(b"payload")), HERE)
    assert e.value.offset == len(a)


def test_an_impossible_length_before_the_tail_is_corruption_not_a_torn_tail() -> None:
    """Read as a torn tail, the length would make recovery truncate acknowledged frames."""
    a, c = F(b"a"), F(b"c" * 64)
    bad = struct.pack(">BII", MAGIC, 0xFFFF_FFFF, 0)
    with pytest.raises(CorruptFileError) as e:
        parse_frames(a + bad + c, HERE)
    assert e.value.offset == len(a)
    assert e.value.reason == f"bad frame header (magic {MAGIC:#x}, length {0xFFFF_FFFF})"


def test_a_frame_of_exactly_the_size_limit_is_written_and_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(framing, "MAX_FRAME", 8)
    frame = F(b"x" * 8)
    assert parse_frames(frame, HERE).frames == [(0, b"x" * 8)]
    with pytest.raises(ValueError, match="frame of 9 bytes exceeds the 8-byte limit"):
        F(b"x" * 9)


def test_a_checksum_failure_before_the_tail_names_file_offset_and_reason(tmp_path: Path) -> None:
    a, b, c = F(b"a"), F(b"bb"), F(b"c")
    path = tmp_path / "seg"
    path.write_bytes(a + corrupt_payload(b) + c)
    with pytest.raises(CorruptFileError) as e:
        read_frames(path)
    assert (e.value.path, e.value.offset, e.value.reason) == (path, len(a), "checksum mismatch")


# -- FrameWriter -----------------------------------------------------------------------------------
def test_frame_writer_fsyncs_each_append_and_a_new_files_directory_by_default(
        tmp_path: Path, durability: Durability) -> None:
    path = tmp_path / "seg"
    w = FrameWriter(path)
    assert durability.events == [("fsync-dir", ino(tmp_path))]  # the new name is durable
    assert w.append([b"one", b"two"]) == 0
    assert durability.file_syncs() == [ino(path)]
    second = w.append([b"three"])
    assert second == len(F(b"one")) + len(F(b"two"))
    assert w.size == second + len(F(b"three"))
    w.close()
    assert [p for _, p in read_frames(path).frames] == [b"one", b"two", b"three"]
    assert durability.file_syncs() == [ino(path)] * 2


def test_frame_writer_reopening_an_existing_file_does_not_fsync_the_directory(
        tmp_path: Path, durability: Durability) -> None:
    path = tmp_path / "seg"
    path.write_bytes(F(b"one"))
    w = FrameWriter(path)
    w.close()
    assert durability.events == []


def test_frame_writer_truncate_is_durable_and_the_next_append_follows_it(
        tmp_path: Path, durability: Durability) -> None:
    path = tmp_path / "seg"
    w = FrameWriter(path)
    w.append([b"one"])
    second = w.append([b"two"])
    w.truncate(second)
    assert w.size == second == path.stat().st_size
    assert durability.file_syncs() == [ino(path)] * 3
    w.append([b"three"])
    w.close()
    assert [p for _, p in read_frames(path).frames] == [b"one", b"three"]


def test_frame_writer_without_fsync_never_fsyncs_the_file(
        tmp_path: Path, durability: Durability) -> None:
    w = FrameWriter(tmp_path / "seg", fsync=False)
    w.append([b"one"])
    w.truncate(0)
    w.close()
    assert durability.file_syncs() == []


# -- MetadataLog: appends --------------------------------------------------------------------------
def test_a_fresh_log_recovers_empty_and_starts_its_first_segment(tmp_path: Path) -> None:
    directory = tmp_path / "a" / "b" / "metadata"  # parents are created
    log = MetadataLog(directory)
    rec = log.recover()
    assert (rec.snapshot_offset, rec.snapshot_rows, rec.batches) == (0, [], [])
    assert (rec.last_timestamp_ms, rec.torn_bytes, rec.quorum_end) == (0, 0, 0)
    assert (log.next_offset, log.snapshot_offset, log.quorum_end) == (0, 0, 0)
    assert names(directory, "log-*.log") == [0]


def test_metadata_log_fsyncs_appends_by_default(tmp_path: Path, durability: Durability) -> None:
    log = fresh_log(tmp_path)
    log.append([ClusterRecord("a")], epoch=0, timestamp_ms=1)
    log.close()
    assert durability.file_syncs() == [ino(tmp_path / f"log-{0:020d}.log")]


def test_metadata_log_without_fsync_never_fsyncs_data(
        tmp_path: Path, durability: Durability) -> None:
    log = fresh_log(tmp_path, fsync=False)
    log.append([ClusterRecord("a")], epoch=0, timestamp_ms=1)
    log.write_snapshot([["C", "a"]], timestamp_ms=1)
    log.append_encoded(b'[["C","b"]]', 1, epoch=0, timestamp_ms=2)
    log.close()
    assert durability.file_syncs() == []


def test_appending_before_recover_or_after_close_is_refused(tmp_path: Path) -> None:
    log = MetadataLog(tmp_path)
    with pytest.raises(AssertionError, match=r"^recover\(\) first$"):
        log.append([ClusterRecord("a")], epoch=0, timestamp_ms=1)
    with pytest.raises(AssertionError, match=r"^recover\(\) first$"):
        log.append_encoded(b"[]", 0, epoch=0, timestamp_ms=1)
    log.recover()
    log.close()
    with pytest.raises(AssertionError, match=r"^recover\(\) first$"):
        log.append([ClusterRecord("a")], epoch=0, timestamp_ms=1)


def test_an_encoded_append_writes_the_same_bytes_as_a_record_append(tmp_path: Path) -> None:
    """The quorum's already-encoded rows must land in the log exactly as records would."""
    records = [ClusterRecord("a"), ClusterRecord("b")]
    plain, encoded = fresh_log(tmp_path / "plain"), fresh_log(tmp_path / "encoded")
    for log in (plain, encoded):
        log.append([ClusterRecord("x")], epoch=1, timestamp_ms=5, quorum_end=1)
    plain.append(records, epoch=3, timestamp_ms=7, quorum_end=4)
    encoded.append_encoded(orjson.dumps([encode_record(r) for r in records]), len(records),
                           epoch=3, timestamp_ms=7, quorum_end=4)
    for log in (plain, encoded):
        assert (log.next_offset, log.quorum_end) == (3, 4)
        log.close()
    seg = f"log-{0:020d}.log"
    assert (tmp_path / "encoded" / seg).read_bytes() == (tmp_path / "plain" / seg).read_bytes()


def test_appends_without_a_quorum_offset_recover_quorum_end_zero(tmp_path: Path) -> None:
    log = fresh_log(tmp_path)
    log.append([ClusterRecord("a")], epoch=0, timestamp_ms=1)
    log.append_encoded(b'[["C","b"]]', 1, epoch=0, timestamp_ms=2)
    assert log.quorum_end == 0
    log.close()
    rec = MetadataLog(tmp_path).recover()
    assert rec.quorum_end == 0 and [b for b, _ in rec.batches] == [0, 1]


def test_reopening_a_log_appends_to_its_last_segment(tmp_path: Path) -> None:
    for i in range(3):
        log = fresh_log(tmp_path)
        log.append([ClusterRecord(f"c{i}")], epoch=0, timestamp_ms=i)
        log.close()
    assert names(tmp_path, "log-*.log") == [0]
    rec = MetadataLog(tmp_path).recover()
    assert [r for _, r in rec.batches] == [[["C", "c0"]], [["C", "c1"]], [["C", "c2"]]]


# -- MetadataLog: recovery of damage ---------------------------------------------------------------
def test_a_torn_tail_is_truncated_on_disk_so_the_next_recovery_is_clean(
        tmp_path: Path, durability: Durability) -> None:
    log = fresh_log(tmp_path, fsync=False)
    log.append([ClusterRecord("a")], epoch=0, timestamp_ms=1)
    log.append([ClusterRecord("b")], epoch=0, timestamp_ms=2)
    log.close()
    seg = tmp_path / f"log-{0:020d}.log"
    whole = read_frames(seg).frames[1][0]
    seg.write_bytes(seg.read_bytes()[:-3])
    first = MetadataLog(tmp_path, fsync=False)
    rec = first.recover()
    first.close()
    assert rec.torn_bytes > 0 and seg.stat().st_size == whole
    assert durability.file_syncs() == [ino(seg)]  # the truncation is durable
    again = MetadataLog(tmp_path).recover()
    assert again.torn_bytes == 0 and again.batches == rec.batches == [(0, [["C", "a"]])]


def test_a_torn_frame_in_a_segment_before_the_last_is_refused(tmp_path: Path) -> None:
    (tmp_path / f"log-{0:020d}.log").write_bytes(F(batch(0, "a")) + F(batch(1, "b"))[:-2])
    (tmp_path / f"log-{2:020d}.log").write_bytes(F(batch(2, "c")))
    with pytest.raises(CorruptFileError) as e:
        MetadataLog(tmp_path).recover()
    assert e.value.path == tmp_path / f"log-{0:020d}.log"
    assert e.value.offset == len(F(batch(0, "a")))
    assert e.value.reason == "incomplete batch in the middle of the log"


def test_an_undecodable_batch_names_file_and_offset(tmp_path: Path) -> None:
    seg = tmp_path / f"log-{0:020d}.log"
    first = F(batch(0, "a"))
    seg.write_bytes(first + F(b'{"o": 1}') + F(batch(1, "b")))
    with pytest.raises(CorruptFileError) as e:
        MetadataLog(tmp_path).recover()
    assert (e.value.path, e.value.offset) == (seg, len(first))
    assert e.value.reason.startswith("undecodable batch: ")


def test_a_gap_in_the_offsets_names_file_offset_and_the_expected_offset(tmp_path: Path) -> None:
    seg = tmp_path / f"log-{0:020d}.log"
    first = F(batch(0, "a"))
    seg.write_bytes(first + F(batch(5, "b")))
    with pytest.raises(CorruptFileError) as e:
        MetadataLog(tmp_path).recover()
    assert (e.value.path, e.value.offset) == (seg, len(first))
    assert e.value.reason == "batch at offset 5, expected 1"


def test_batches_written_without_a_quorum_offset_recover_with_zero(tmp_path: Path) -> None:
    """Older logs carried no ``q``; they still recover (quorum offset 0: none known)."""
    seg = tmp_path / f"log-{0:020d}.log"
    seg.write_bytes(F(b'{"o":0,"e":0,"t":5,"r":[["C","a"]]}'))
    rec = MetadataLog(tmp_path).recover()
    assert (rec.batches, rec.quorum_end, rec.last_timestamp_ms) == ([(0, [["C", "a"]])], 0, 5)


# -- MetadataLog: snapshots ------------------------------------------------------------------------
def test_a_snapshot_is_fsynced_before_its_rename_and_the_directory_after(
        tmp_path: Path, durability: Durability) -> None:
    log = fresh_log(tmp_path)
    log.append([ClusterRecord("a")], epoch=0, timestamp_ms=1)
    durability.events.clear()
    path = log.write_snapshot([["C", "a"]], timestamp_ms=1)
    log.close()
    assert path == tmp_path / f"snapshot-{1:020d}.snap" and log.snapshot_offset == 1
    assert durability.events[:3] == [
        ("fsync", ino(path)),
        ("replace", path.with_name(path.name + ".tmp"), path),
        ("fsync-dir", ino(tmp_path)),
    ]


def test_snapshot_rows_are_framed_in_bounded_chunks_and_all_read_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata_log, "SNAPSHOT_CHUNK", 2)
    log = fresh_log(tmp_path)
    log.append([ClusterRecord(f"c{i}") for i in range(5)], epoch=0, timestamp_ms=1)
    rows = [["C", f"c{i}"] for i in range(5)]
    path = log.write_snapshot(rows, timestamp_ms=9)
    log.close()
    frames = [orjson.loads(p) for _, p in read_frames(path).frames]
    assert [len(f) for f in frames[:-1]] == [2, 2, 1]
    assert frames[-1] == {"offset": 5, "timestamp_ms": 9, "records": 5, "quorum_end": 0}
    assert read_snapshot(path) == (rows, 9, 0)


def test_a_snapshot_keeps_the_quorum_offset(tmp_path: Path) -> None:
    log = fresh_log(tmp_path)
    log.append([ClusterRecord("a")], epoch=0, timestamp_ms=1, quorum_end=7)
    log.write_snapshot([["C", "a"]], timestamp_ms=1)
    log.close()
    assert names(tmp_path, "log-*.log") == [1]  # the batch carrying q=7 is pruned
    rec = MetadataLog(tmp_path).recover()
    assert (rec.snapshot_offset, rec.snapshot_rows, rec.quorum_end) == (1, [["C", "a"]], 7)


def test_a_snapshot_without_a_quorum_offset_reads_as_zero(tmp_path: Path) -> None:
    """Snapshots written before the quorum offset existed still load."""
    path = tmp_path / f"snapshot-{1:020d}.snap"
    path.write_bytes(F(b'[["C","a"]]') + F(b'{"offset":1,"timestamp_ms":4,"records":1}'))
    assert read_snapshot(path) == ([["C", "a"]], 4, 0)


@pytest.mark.parametrize("trailer", [
    b'{"offset":1,"timestamp_ms":4,"records":2,"quorum_end":0}',  # counts a row that is not there
    b'[1, 4, 1]',  # not a trailer at all
])
def test_a_snapshot_whose_trailer_does_not_match_its_rows_is_refused(
        tmp_path: Path, trailer: bytes) -> None:
    path = tmp_path / f"snapshot-{1:020d}.snap"
    rows = F(b'[["C","a"]]')
    path.write_bytes(rows + F(trailer))
    with pytest.raises(CorruptFileError) as e:
        MetadataLog(tmp_path).recover()
    assert (e.value.path, e.value.offset) == (path, len(rows))
    assert e.value.reason == "snapshot trailer does not match its content"


@pytest.mark.parametrize("cut", [5, None])
def test_a_snapshot_cut_short_or_empty_is_refused_at_its_valid_length(
        tmp_path: Path, cut: int | None) -> None:
    log = fresh_log(tmp_path)
    log.append([ClusterRecord("a")], epoch=0, timestamp_ms=1)
    path = log.write_snapshot([["C", "a"]], timestamp_ms=1)
    log.close()
    data = path.read_bytes()
    path.write_bytes(data[:-cut] if cut else b"")
    with pytest.raises(CorruptFileError) as e:
        read_snapshot(path)
    assert (e.value.path, e.value.reason) == (path, "snapshot is incomplete")
    assert e.value.offset == (len(F(b'[["C","a"]]')) if cut else 0)


def test_a_snapshot_write_cut_before_its_rename_leaves_nothing_behind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = fresh_log(tmp_path)
    log.append([ClusterRecord("a")], epoch=0, timestamp_ms=1)

    def crash(src: object, dst: object) -> None:
        raise OSError("power lost")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="power lost"):
        log.write_snapshot([["C", "a"]], timestamp_ms=1)
    log.close()
    monkeypatch.undo()
    assert list(tmp_path.glob("snapshot-*")) != []  # the temporary file a crash leaves
    rec = MetadataLog(tmp_path).recover()
    assert rec.snapshot_offset == 0 and [b for b, _ in rec.batches] == [0]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"log-{0:020d}.log"]


def test_a_crash_right_after_a_snapshot_rename_recovers_and_appends_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed after the rename, before the next segment and pruning: the old segment stays
    last, its batches below the snapshot are skipped, and appends go on in it."""
    log = fresh_log(tmp_path)
    log.append([ClusterRecord("a")], epoch=0, timestamp_ms=1)
    log.append([ClusterRecord("b")], epoch=0, timestamp_ms=2)

    def killed(directory: Path) -> None:
        raise SystemExit("killed")

    monkeypatch.setattr(metadata_log, "fsync_dir", killed)  # the call right after the rename
    with pytest.raises(SystemExit):
        log.write_snapshot([["C", "a"], ["C", "b"]], timestamp_ms=2)
    monkeypatch.undo()
    log.close()
    assert names(tmp_path, "snapshot-*.snap") == [2] and names(tmp_path, "log-*.log") == [0]
    log = MetadataLog(tmp_path)
    rec = log.recover()
    assert (rec.snapshot_offset, rec.batches, log.next_offset) == (2, [], 2)
    log.append([ClusterRecord("c")], epoch=0, timestamp_ms=3)
    log.close()
    assert names(tmp_path, "log-*.log") == [0]
    log = MetadataLog(tmp_path)
    rec = log.recover()
    log.close()
    assert (rec.snapshot_offset, rec.batches, rec.last_timestamp_ms) == (2, [(2, [["C", "c"]])], 3)


def test_a_damaged_segment_wholly_inside_the_snapshot_is_not_read(tmp_path: Path) -> None:
    log = fresh_log(tmp_path)
    for i in range(2):
        log.append([ClusterRecord(f"c{i}")], epoch=0, timestamp_ms=i)
        log.write_snapshot([["C", f"c{j}"] for j in range(i + 1)], timestamp_ms=i)
    log.append([ClusterRecord("tail")], epoch=0, timestamp_ms=9)
    log.close()
    assert names(tmp_path, "log-*.log") == [1, 2]
    covered = tmp_path / f"log-{1:020d}.log"
    covered.write_bytes(corrupt_payload(covered.read_bytes()) + F(b"more"))
    rec = MetadataLog(tmp_path).recover()
    assert (rec.snapshot_offset, rec.batches) == (2, [(2, [["C", "tail"]])])


@pytest.mark.parametrize("keep", [2, 3])
def test_pruning_keeps_what_recovery_from_the_older_snapshot_needs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep: int) -> None:
    """Losing the newest snapshot (deleted because damaged) falls back to the older kept one
    and replays every segment after it; with ``keep`` snapshots, exactly the segments from
    the oldest kept snapshot on are kept."""
    monkeypatch.setattr(metadata_log, "KEEP_SNAPSHOTS", keep)
    log = fresh_log(tmp_path)
    for i in range(5):
        log.append([ClusterRecord(f"c{i}")], epoch=0, timestamp_ms=i)
        log.write_snapshot([["C", f"c{j}"] for j in range(i + 1)], timestamp_ms=i)
    log.close()
    kept = list(range(6 - keep, 6))
    assert names(tmp_path, "snapshot-*.snap") == kept
    assert names(tmp_path, "log-*.log") == kept
    # a restart appends to the last segment, whatever the number of segments
    log = MetadataLog(tmp_path)
    assert log.recover().snapshot_offset == 5
    log.append([ClusterRecord("tail")], epoch=0, timestamp_ms=9)
    log.close()
    (tmp_path / f"snapshot-{5:020d}.snap").unlink()
    older = kept[-2]
    rec = MetadataLog(tmp_path).recover()
    assert rec.snapshot_offset == older
    assert rec.snapshot_rows == [["C", f"c{j}"] for j in range(older)]
    assert rec.batches == [(j, [["C", f"c{j}"]]) for j in range(older, 5)] + [
        (5, [["C", "tail"]])]


def test_recovery_loads_the_newest_of_several_snapshots(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata_log, "KEEP_SNAPSHOTS", 3)
    log = fresh_log(tmp_path)
    for i in range(3):
        log.append([ClusterRecord(f"c{i}")], epoch=0, timestamp_ms=i)
        log.write_snapshot([["C", f"c{j}"] for j in range(i + 1)], timestamp_ms=10 + i)
    log.close()
    rec = MetadataLog(tmp_path).recover()
    assert (rec.snapshot_offset, rec.last_timestamp_ms, len(rec.snapshot_rows)) == (3, 12, 3)
