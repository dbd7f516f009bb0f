"""KIP-630 snapshots of the metadata quorum: log start offset, FetchSnapshot, crash safety.

Each test names the Kafka class whose behaviour it follows (apache/kafka ``raft`` module).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from chaos import run_chaos, state_digest

from controller_core.errors import NONE
from controller_core.raft.config import RaftConfig
from controller_core.raft.invariants import InvariantChecker, InvariantViolation
from controller_core.raft.log import RaftLog
from controller_core.raft.messages import (
    Envelope,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
)
from controller_core.raft.network import NetworkConfig
from controller_core.raft.node import POSITION_OUT_OF_RANGE, SNAPSHOT_NOT_FOUND, RaftNode
from controller_core.raft.quorum import SimulatedQuorum
from controller_core.raft.records import Batch, VoterAssignment
from controller_core.raft.snapshot import (
    RaftSnapshot,
    SnapshotId,
    encode_snapshot,
    snapshot_files,
)
from controller_core.raft.state import QuorumState
from controller_core.raft.storage import DirectoryStorage, MemoryStorage
from controller_core.storage.framing import CorruptFileError


def committed_quorum(records: int = 40, **kw: object) -> SimulatedQuorum:
    q = SimulatedQuorum([0, 1, 2], seed=5, network=NetworkConfig(5.0), **kw)  # type: ignore[arg-type]
    assert q.run_until_leader() is not None
    for i in range(records):
        off = q.propose([b"rec-%d" % i])
    assert q.run_until_committed(off)
    q.advance(1000)  # every follower learns the high watermark
    return q


def snapshot_everywhere(q: SimulatedQuorum) -> int:
    end = q.committed_end
    state = q.snapshot_state(end) if q.snapshot_state is not None else state_digest(q, end)
    for n in q.node_ids:
        if q.alive(n):
            assert q.create_snapshot(n, end, state)
    return end


def replies(n: RaftNode) -> list[Envelope]:
    return list(n.ready().messages)


# ------------------------------------------------------------------------ the log
def test_log_compaction_keeps_epochs_and_configuration_across_the_start() -> None:
    """KafkaMetadataLog.deleteBeforeSnapshot / truncateToLatestSnapshot: the log start moves
    to the snapshot end; OffsetForLeaderEpoch and the configuration still answer across it."""
    cfg = VoterAssignment("c", (0, 1, 2), None)
    log = RaftLog([Batch(0, 1, control=cfg), Batch(1, 1, (b"a", b"b")), Batch(3, 2, (b"c",)),
                   Batch(4, 3, (b"d", b"e"))])
    assert log.compact(SnapshotId(4, 2)) == cfg
    assert (log.start_offset, log.end_offset, log.last_epoch) == (4, 6, 3)
    assert log.epoch_at(3) == 2 and log.epoch_at(4) == 3
    assert log.end_offset_for_epoch(2) == (2, 4)
    assert log.end_offset_for_epoch(1) == (2, 4)  # older than the snapshot: its id
    assert log.config_at(5) == (3, cfg) and log.cluster_id() == "c"
    with pytest.raises(IndexError, match="below the log start"):
        log.epoch_at(2)
    with pytest.raises(ValueError, match="below the log start"):
        log.truncate(3)
    log.truncate(4)  # down to the start (an uncommitted suffix) is fine
    assert (log.end_offset, log.last_epoch) == (4, 2)
    with pytest.raises(ValueError, match="does not match the log"):
        RaftLog([Batch(0, 1, (b"a", b"b"))]).compact(SnapshotId(2, 7))


def test_snapshot_only_of_committed_state() -> None:
    """RaftClient.createSnapshot: only an offset at or below the high watermark."""
    q = committed_quorum(10)
    lid = q.leader()
    assert lid is not None
    ldr = q.node(lid)
    with pytest.raises(ValueError, match="only offsets up to the applied high watermark"):
        ldr.create_snapshot(ldr.hw + 1, [b"state"])
    ldr.create_snapshot(ldr.hw, [b"state"])
    with pytest.raises(ValueError, match="not newer than the log start"):
        ldr.create_snapshot(ldr.hw, [b"state"])


# ------------------------------------------------------------------------ Fetch / FetchSnapshot
def test_fetch_below_log_start_answers_with_the_snapshot_id() -> None:
    """KafkaRaftClient.tryCompleteFetchRequest + ReplicatedLog.validateOffsetAndEpoch: a fetch
    below the log start (or from an empty log, or with an epoch older than the snapshot's)
    gets FetchResponse.SnapshotId and no records."""
    q = committed_quorum(20)
    end = snapshot_everywhere(q)
    lid = q.leader()
    assert lid is not None
    ldr = q.node(lid)
    sid = ldr.log.snapshot_id
    assert sid is not None and sid.end_offset == end == ldr.log_start_offset
    other = next(n for n in q.node_ids if n != lid)
    for offset, epoch in ((3, 1), (0, 0), (end, sid.epoch - 1)):
        ldr.step(Envelope(other, lid, FetchRequest(None, other, ldr.epoch, offset, epoch,
                                                   1000)), 0)
        r = [m.body for m in replies(ldr) if isinstance(m.body, FetchResponse)][-1]
        assert r.error == NONE and r.snapshot_id == sid and r.batches == ()
    ldr.step(Envelope(other, lid, FetchRequest(None, other, ldr.epoch, end, sid.epoch, 1000)), 0)
    assert not [m for m in replies(ldr) if isinstance(m.body, FetchResponse)
                and m.body.snapshot_id is not None], "a fetch at the start is answered from the log"


def test_fetch_snapshot_serves_chunks_and_refuses_bad_requests() -> None:
    """KafkaRaftClient.handleFetchSnapshotRequest: a byte range of the snapshot with its size;
    SNAPSHOT_NOT_FOUND for an id it does not have, POSITION_OUT_OF_RANGE past its end."""
    q = committed_quorum(20)
    snapshot_everywhere(q)
    lid = q.leader()
    assert lid is not None
    ldr = q.node(lid)
    snap = ldr.snapshot
    assert snap is not None
    whole = encode_snapshot(snap)
    other = next(n for n in q.node_ids if n != lid)

    def ask(sid: SnapshotId, position: int, max_bytes: int) -> FetchSnapshotResponse:
        ldr.step(Envelope(other, lid, FetchSnapshotRequest(None, other, ldr.epoch, sid, position,
                                                           max_bytes)), 0)
        return [m.body for m in replies(ldr) if isinstance(m.body, FetchSnapshotResponse)][-1]

    r = ask(snap.id, 10, 7)
    assert r.error == NONE and (r.size, r.position, r.data) == (len(whole), 10, whole[10:17])
    assert ask(snap.id, len(whole) + 1, 7).error == POSITION_OUT_OF_RANGE
    assert ask(SnapshotId(snap.end_offset + 5, snap.id.epoch), 0, 7).error == SNAPSHOT_NOT_FOUND


def follower_fetching_snapshot(snap: RaftSnapshot) -> RaftNode:
    f = RaftNode(1, voters=[0, 1, 2], rng=random.Random(1), now_ms=0,
                 quorum_state=QuorumState(snap.id.epoch, 0, None), cluster_id="c")
    f.tick(0)
    f.ready()
    f.step(Envelope(0, 1, FetchResponse(NONE, 0, snap.id.epoch, snap.end_offset,
                                        fetch_offset=0, last_fetched_epoch=0,
                                        snapshot_id=snap.id)), 1)
    (req,) = replies(f)
    assert isinstance(req.body, FetchSnapshotRequest) and req.body.position == 0
    return f


def test_follower_rejects_a_snapshot_damaged_in_transit_and_fetches_again() -> None:
    """KafkaRaftClient.handleFetchSnapshotResponse appends chunks and freezes the snapshot at
    its size; here every frame's CRC is checked before it is installed."""
    snap = RaftSnapshot(SnapshotId(7, 2), VoterAssignment("c", (0, 1, 2), None), (b"s" * 40,))
    whole = encode_snapshot(snap)
    f = follower_fetching_snapshot(snap)
    bad = bytearray(whole)
    bad[30] ^= 0xFF
    f.step(Envelope(0, 1, FetchSnapshotResponse(NONE, 0, 2, snap.id, len(whole), 0,
                                                bytes(bad))), 2)
    r = f.ready()
    assert r.snapshot is None and f.log.end_offset == 0 and f.snapshot is None
    f.tick(3)
    (again,) = replies(f)
    assert isinstance(again.body, FetchRequest), "starts over with a Fetch"

    f = follower_fetching_snapshot(snap)
    half = len(whole) // 2
    f.step(Envelope(0, 1, FetchSnapshotResponse(NONE, 0, 2, snap.id, len(whole), 0,
                                                whole[:half])), 2)
    (nxt,) = replies(f)
    assert isinstance(nxt.body, FetchSnapshotRequest) and nxt.body.position == half
    f.step(Envelope(0, 1, FetchSnapshotResponse(NONE, 0, 2, snap.id, len(whole), half,
                                                whole[half:])), 3)
    r = f.ready()
    assert r.snapshot == snap and r.snapshot_reset
    assert (f.log.start_offset, f.log.end_offset, f.hw, f.log.last_epoch) == (7, 7, 7, 2)
    assert f.voters() == (0, 1, 2) and f.cluster_id() == "c"
    fetch = [m.body for m in r.messages] + [m.body for m in replies(f)]
    f.tick(4)
    fetch += [m.body for m in replies(f)]
    assert any(isinstance(b, FetchRequest) and b.fetch_offset == 7 and b.last_fetched_epoch == 2
               for b in fetch), "then fetches on from the snapshot end"


def test_snapshot_not_found_restarts_with_a_fetch() -> None:
    """KafkaRaftClient.handleFetchSnapshotResponse: on SNAPSHOT_NOT_FOUND (the leader moved to
    a newer snapshot) the follower drops the partial one and fetches again."""
    snap = RaftSnapshot(SnapshotId(7, 2), None, (b"x",))
    f = follower_fetching_snapshot(snap)
    f.step(Envelope(0, 1, FetchSnapshotResponse(SNAPSHOT_NOT_FOUND, 0, 2, snap.id)), 2)
    f.tick(2 + RaftConfig().retry_backoff_ms)
    (m,) = replies(f)
    assert isinstance(m.body, FetchRequest) and m.body.fetch_offset == 0


# ------------------------------------------------------------------------ whole quorums
def test_lagging_follower_catches_up_by_chunked_fetch_snapshot() -> None:
    """A follower that was down while the others compacted loads the leader's snapshot in
    chunks (fetch.max.bytes), then fetches on from its end; invariants hold at every event."""
    q = SimulatedQuorum([0, 1, 2], seed=9, network=NetworkConfig(5.0, loss=0.05),
                        config=RaftConfig(fetch_max_bytes=64))
    q.snapshot_state = lambda end: [b"%d" % end * 40] * 20  # ~1.8 kB: 29 chunks
    chk = InvariantChecker(q)
    q.observers_of_events.append(chk.check)
    lid = q.run_until_leader()
    assert lid is not None
    lagging = next(n for n in q.node_ids if n != lid)
    q.crash(lagging)
    for i in range(30):
        off = q.propose([b"r%d" % i])
    assert q.run_until_committed(off, 60_000)
    q.advance(1000)
    end = q.committed_end
    for n in q.node_ids:
        if q.alive(n):
            assert q.create_snapshot(n, end, q.snapshot_state(end))
    off = q.propose([b"after"])
    assert q.run_until_committed(off, 60_000)
    sent = q.messages_delivered
    q.restart(lagging)
    leader_end = q.node(q.leader() or 0).log.end_offset
    assert q.run_until(lambda: q.node(lagging).log.end_offset == leader_end, 60_000)
    node = q.node(lagging)
    assert node.snapshot is not None and node.snapshot.end_offset == end
    assert node.log.start_offset == end and q.snapshots_installed == 1
    assert q.messages_delivered - sent > 20, "the snapshot came in many 64-byte chunks"


def test_new_voters_load_the_snapshot_then_the_walk_completes() -> None:
    """KIP-853 + KIP-630: new voters start empty, are answered with the snapshot id, load it
    and become voters; {0,1,2} -> {3,4,5}."""
    q = SimulatedQuorum([0, 1, 2], observers=[3, 4, 5], seed=3, network=NetworkConfig(5.0))
    q.snapshot_state = lambda end: [b"state-at-%d" % end]
    chk = InvariantChecker(q)
    q.observers_of_events.append(chk.check)
    assert q.run_until_leader() is not None
    for n in (3, 4, 5):
        q.crash(n)
    for i in range(50):
        off = q.propose([b"r%d" % i])
    assert q.run_until_committed(off)
    q.advance(1000)
    snapshot_everywhere(q)
    for n in (3, 4, 5):
        q.restart(n)
    q.advance(2000)  # they find the leader (DiscoverBrokers) and fetch
    assert q.alter_quorum([3, 4, 5]).ok
    assert q.run_until_voters([3, 4, 5], 120_000)
    assert q.snapshots_installed >= 3
    assert all(q.node(n).log.start_offset > 0 for n in (3, 4, 5))


def test_checker_catches_a_snapshot_of_the_wrong_state() -> None:
    """The invariants account for snapshotted entries: a snapshot whose content is not the
    committed state (or that goes beyond it) is a violation, not silently accepted."""
    q = committed_quorum(10)
    q.snapshot_state = lambda end: [b"truth-%d" % end]
    chk = InvariantChecker(q)
    chk.check()
    lid = q.leader()
    assert lid is not None
    q.node(lid).create_snapshot(q.committed_end, [b"something else"])
    with pytest.raises(InvariantViolation, match="does not hold the committed state"):
        chk.check()


def test_randomised_quorum_with_snapshots() -> None:
    """The chaos harness (loss, delay, reordering, crashes, partitions, voter changes) with
    every node snapshotting every 10 offsets: lagging and restarted nodes use FetchSnapshot."""
    installs = 0
    for seed in range(12):
        try:
            report = run_chaos(seed, 3000, snapshot_every=10)
        except AssertionError as e:
            pytest.fail(f"seed {seed} failed (replay: run_chaos({seed}, 3000, "
                        f"snapshot_every=10)): {e}")
        assert report.committed > 0 and report.snapshots > 0, f"seed {seed}: {report}"
        installs += report.snapshot_installs
    assert installs > 0, "no node fetched a snapshot: the run would test nothing of it"


@pytest.mark.slow
def test_soak_with_snapshots() -> None:
    for seed in range(2000, 2300):
        try:
            run_chaos(seed, 10_000, snapshot_every=25)
        except AssertionError as e:
            pytest.fail(f"seed {seed} failed (replay: run_chaos({seed}, 10_000, "
                        f"snapshot_every=25)): {e}")


# ------------------------------------------------------------------------ storage
def test_directory_storage_snapshot_drops_segments_and_restarts_from_it(tmp_path: Path) -> None:
    """SnapshotPath naming (<end offset>-<epoch>.checkpoint), FileRawSnapshotWriter's
    .checkpoint.part + rename, KafkaMetadataLog.deleteBeforeSnapshot: the segments below the
    snapshot are deleted and a restart loads snapshot + tail."""
    q = SimulatedQuorum([0, 1, 2], seed=4, data_dir=tmp_path, storage_fsync=False,
                        network=NetworkConfig(5.0))
    assert q.run_until_leader() is not None
    for i in range(30):
        off = q.propose([b"%d" % i * 100])
    assert q.run_until_committed(off)
    q.advance(1000)
    before = {n: sorted(p.name for p in (tmp_path / f"node-{n}").glob("*.log"))
              for n in q.node_ids}
    end = snapshot_everywhere(q)
    for i in range(5):
        off = q.propose([b"tail%d" % i])
    assert q.run_until_committed(off)
    q.advance(1000)
    logs = {n: q.node(n).log.end_offset for n in q.node_ids}
    q.close()
    for n in q.node_ids:
        d = tmp_path / f"node-{n}"
        (sid, path), = snapshot_files(d)
        assert sid.end_offset == end and path.name == f"{end:020d}-{sid.epoch:010d}.checkpoint"
        assert not set(before[n]) & {p.name for p in d.glob("*.log")}, "old segments deleted"
    again = SimulatedQuorum([0, 1, 2], seed=4, data_dir=tmp_path, storage_fsync=False,
                            network=NetworkConfig(5.0))
    for n in again.node_ids:
        node = again.node(n)
        assert node.log.start_offset == end and node.log.end_offset == logs[n]
        assert node.hw == end
    assert again.run_until_leader() is not None
    again.close()


def test_damaged_or_torn_snapshot_file_is_an_error_naming_it(tmp_path: Path) -> None:
    st = DirectoryStorage(tmp_path, fsync=False)
    st.load()
    st.append([Batch(0, 1, (b"a", b"b"))])
    snap = RaftSnapshot(SnapshotId(2, 1), None, (b"state",))
    st.save_snapshot(snap, reset=False)
    (tmp_path / "00000000000000000001-0000000001.checkpoint.part").write_bytes(b"junk")
    rec = DirectoryStorage(tmp_path, fsync=False).load()
    assert rec.snapshot == snap and rec.batches == []
    assert not list(tmp_path.glob("*.part")), "a partial snapshot of a crash is removed"
    (_, path), = snapshot_files(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:-3])  # torn
    with pytest.raises(CorruptFileError, match=path.name):
        DirectoryStorage(tmp_path, fsync=False).load()
    path.write_bytes(data[:12] + bytes([data[12] ^ 1]) + data[13:])  # a flipped bit
    with pytest.raises(CorruptFileError, match=path.name):
        DirectoryStorage(tmp_path, fsync=False).load()


def test_crash_between_installing_a_snapshot_and_dropping_the_log(tmp_path: Path) -> None:
    """ReplicatedLog.truncateToLatestSnapshot done in two steps (snapshot file, then delete
    the log): a crash in between leaves a stale log that load discards, never mixes in."""
    st = DirectoryStorage(tmp_path, fsync=False)
    st.load()
    st.append([Batch(0, 1, (b"a",)), Batch(1, 1, (b"stale", b"x", b"y"))])
    snap = RaftSnapshot(SnapshotId(3, 2), None, (b"state",))
    from controller_core.raft.snapshot import write_snapshot_file
    write_snapshot_file(tmp_path, snap, fsync=False)  # ... and the process dies here
    rec = DirectoryStorage(tmp_path, fsync=False).load()
    assert rec.snapshot == snap and rec.batches == []
    assert not list(tmp_path.glob("*.log"))
    st2 = DirectoryStorage(tmp_path, fsync=False)
    st2.load()
    st2.append([Batch(3, 2, (b"next",))])
    assert DirectoryStorage(tmp_path, fsync=False).load().batches == [Batch(3, 2, (b"next",))]


def test_memory_storage_snapshot_is_durable_at_once() -> None:
    st = MemoryStorage()
    st.append([Batch(0, 1, (b"a", b"b", b"c"))])
    st.flush()
    st.append([Batch(3, 1, (b"d",))])
    st.save_snapshot(RaftSnapshot(SnapshotId(2, 1), None, ()), reset=False)
    st.crash(lose_unflushed=True)
    rec = st.load()
    assert rec.snapshot is not None and [b.base_offset for b in rec.batches] == [2]
    assert rec.batches[0].records == (b"c",) and st.durable_end == 3
