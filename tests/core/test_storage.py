"""Durability of the metadata log: restart, torn tails, corruption, snapshots."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.metadata.records import ClusterRecord
from controller_core.storage.framing import CorruptFileError, encode_frame, read_frames
from controller_core.storage.metadata_log import MetadataLog
from tests.helpers import cluster, spec, tp


def image_state(c: EmbeddedCluster) -> tuple[object, ...]:
    return (c.image.cluster_id, dict(c.image.brokers),
            {n: list(t.partitions) for n, t in c.image.topics.items()},
            {k: dict(v) for k, v in c.image.configs.items()}, set(c.image.reassigning),
            c.image.next_offset)


def segment(path: Path) -> Path:
    return sorted((path / "metadata").glob("log-*.log"))[-1]


def test_restart_rebuilds_the_same_state(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    c.alter_partition_reassignments({tp("orders", 0): [3, 4, 5]})
    c.incremental_alter_configs({("BROKER", "1"): {"follower.replication.throttled.rate": "5"}})
    c.advance(3)
    before = image_state(c)
    c.close()
    again = EmbeddedCluster.open(tmp_path, spec(), fsync=False)
    assert image_state(again) == before
    assert again.now == c.now == pytest.approx(3.0, abs=0.05)  # commits take a few ms


def test_restart_after_crash_without_checkpoint_keeps_committed_metadata(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    c.alter_partition_reassignments({tp("orders", 1): [3, 4, 5]})
    before = image_state(c)
    # no close(): the process dies; only what append() made durable survives
    again = EmbeddedCluster.open(tmp_path, spec(), fsync=False)
    assert image_state(again) == before
    assert again.list_partition_reassignments()  # the move is still in flight and resumes
    again.advance(60)
    assert not again.list_partition_reassignments()


def test_torn_tail_is_dropped_and_the_quorum_restores_what_it_committed(
        tmp_path: Path) -> None:
    c = cluster(tmp_path)
    c.alter_partition_reassignments({tp("orders", 2): [3, 4, 5]})
    committed = image_state(c)
    seg = segment(tmp_path)
    data = seg.read_bytes()
    last = read_frames(seg).frames[-1][0]
    seg.write_bytes(data[: last + (len(data) - last) // 2])  # kill -9 in the middle of a write
    again = EmbeddedCluster.open(tmp_path, spec(), fsync=False)
    assert again.recovered_torn_bytes > 0
    # the local copy lost its tail, but the change was committed by the metadata quorum
    assert image_state(again)[:5] == committed[:5]


def test_metadata_log_drops_a_torn_tail_without_misreading_it(tmp_path: Path) -> None:
    log = MetadataLog(tmp_path)
    log.recover()
    log.append([ClusterRecord("a")], epoch=0, timestamp_ms=1, quorum_end=1)
    log.append([ClusterRecord("b")], epoch=0, timestamp_ms=2, quorum_end=2)
    log.close()
    seg = next(tmp_path.glob("log-*.log"))
    data = seg.read_bytes()
    seg.write_bytes(data[:-7])
    again = MetadataLog(tmp_path)
    rec = again.recover()
    assert rec.torn_bytes > 0 and [rows for _, rows in rec.batches] == [[["C", "a"]]]
    assert rec.quorum_end == 1 and again.next_offset == 1


def test_torn_header_and_zero_padding_are_torn_tails(tmp_path: Path) -> None:
    log = MetadataLog(tmp_path)
    log.recover()
    log.close()
    seg = next(tmp_path.glob("log-*.log"))
    seg.write_bytes(encode_frame(b'{"o":0,"e":0,"t":0,"r":[]}') + b"\xc5\x00")
    assert read_frames(seg).torn_bytes == 2
    seg.write_bytes(encode_frame(b"x") + b"\x00" * 4096)
    assert read_frames(seg).torn_bytes == 4096


def test_corruption_before_the_tail_names_file_and_offset(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    c.alter_partition_reassignments({tp("orders", 0): [3, 4, 5]})
    c.alter_partition_reassignments({tp("orders", 1): [3, 4, 5]})
    c.log.close()
    seg = segment(tmp_path)
    frames = read_frames(seg).frames
    pos = frames[1][0]
    data = bytearray(seg.read_bytes())
    data[pos + 12] ^= 0xFF  # flip a payload byte of a batch that is followed by more
    seg.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError) as e:
        EmbeddedCluster.open(tmp_path, spec(), fsync=False)
    assert str(seg) in str(e.value) and f"offset {pos}" in str(e.value)


def test_snapshot_then_restart_replays_only_the_tail(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    c.alter_partition_reassignments({tp("orders", 0): [3, 4, 5]})
    snap = c.snapshot()
    c.alter_partition_reassignments({tp("orders", 1): [3, 4, 5]})
    before = image_state(c)
    c.close()
    again = EmbeddedCluster.open(tmp_path, spec(), fsync=False)
    assert image_state(again) == before
    assert snap.exists() and again.log.snapshot_offset > 0


def test_snapshots_are_taken_periodically_and_old_ones_pruned(tmp_path: Path) -> None:
    c = cluster(tmp_path, snapshotEveryRecords=5)
    for i in range(6):
        c.alter_partition_reassignments({tp("orders", i): [3, 4, 5]})
        c.alter_partition_reassignments({tp("orders", i): None})
    snaps = sorted((tmp_path / "metadata").glob("snapshot-*.snap"))
    assert 1 <= len(snaps) <= 2
    before = image_state(c)
    c.close()
    assert image_state(EmbeddedCluster.open(tmp_path, spec(snapshotEveryRecords=5),
                                            fsync=False)) == before


def test_a_damaged_snapshot_is_an_error_not_a_guess(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    snap = c.snapshot()
    c.close()
    data = bytearray(snap.read_bytes())
    data[20] ^= 0xFF
    snap.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError) as e:
        EmbeddedCluster.open(tmp_path, spec(), fsync=False)
    assert snap.name in str(e.value)


def test_leftover_temporary_snapshot_is_ignored(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    before = image_state(c)
    c.close()
    (tmp_path / "metadata" / "snapshot-00000000000000000099.snap.tmp").write_bytes(b"junk")
    assert image_state(EmbeddedCluster.open(tmp_path, spec(), fsync=False)) == before
    assert not list((tmp_path / "metadata").glob("*.tmp"))


def test_a_snapshot_cut_short_is_refused(tmp_path: Path) -> None:
    """A snapshot is renamed into place only once whole: a torn one is damage, not a tail."""
    c = cluster(tmp_path)
    snap = c.snapshot()
    c.close()
    snap.write_bytes(snap.read_bytes()[:-5])
    with pytest.raises(CorruptFileError) as e:
        EmbeddedCluster.open(tmp_path, spec(), fsync=False)
    assert "incomplete" in str(e.value)


def test_pruning_keeps_two_snapshots_and_the_segments_after_the_older(tmp_path: Path) -> None:
    log = MetadataLog(tmp_path)
    log.recover()
    for i in range(4):
        log.append([ClusterRecord(f"c{i}")], epoch=0, timestamp_ms=i)
        log.write_snapshot([["C", f"c{i}"]], timestamp_ms=i)
    log.append([ClusterRecord("tail")], epoch=0, timestamp_ms=9)
    log.close()
    snaps = sorted(p.name for p in tmp_path.glob("snapshot-*.snap"))
    assert snaps == [f"snapshot-{3:020d}.snap", f"snapshot-{4:020d}.snap"]
    segments = sorted(int(p.name[4:24]) for p in tmp_path.glob("log-*.log"))
    assert segments and min(segments) >= 2, segments  # nothing wholly before offset 3 is kept
    rec = MetadataLog(tmp_path).recover()
    assert rec.snapshot_offset == 4 and [r for _, r in rec.batches] == [[["C", "tail"]]]
