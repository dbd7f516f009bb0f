"""Issue 11, "tests that catch regressions": each test pins one behaviour that a one-line
change used to break without any test failing. (Each was checked by making that change and
watching the test fail.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controller_core.errors import ApiResult
from controller_core.metadata import partition_change as pc
from controller_core.metadata.controller import Controller
from controller_core.metadata.image import MetadataImage
from controller_core.metadata.records import (
    PartitionChangeRecord,
    PartitionRecord,
    Record,
    RegisterBrokerRecord,
    TopicRecord,
)
from controller_core.model import PartitionRegistration, TopicPartition
from controller_core.orchestration.reassignment import (
    Limits,
    Phase,
    ReassignmentExecutor,
    ReassignmentPlan,
)
from controller_core.raft.records import Batch
from controller_core.raft.storage import DirectoryStorage
from controller_core.storage import framing
from controller_core.storage.framing import CorruptFileError, encode_frame, read_frames
from controller_core.storage.metadata_log import MetadataLog
from tests.helpers import cluster, tp

TP = TopicPartition("orders", 0)
RULES = pc.Rules()  # Kafka 4.4's defaults: min.insync.replicas 1, ELR on, no unclean


def _alive(*ids: int) -> pc.Acceptable:
    return lambda r: r in ids


ALL = _alive(*range(10))


def _after(p: PartitionRegistration, c: PartitionChangeRecord | ApiResult | None
           ) -> PartitionRegistration:
    assert isinstance(c, PartitionChangeRecord), c
    return pc.after(p, c)


# -- the core ------------------------------------------------------------------------------------
def test_starting_a_move_does_not_keep_a_leader_that_is_not_alive() -> None:
    """PartitionChangeBuilder.electAnyLeader keeps the current leader only if it is still an
    acceptable (live) ISR member; otherwise the move starts under a live one."""
    p = PartitionRegistration((1, 2, 3), (1, 2, 3), leader=1)
    moving = _after(p, pc.change_reassignment(TP, p, [4, 2, 3], _alive(2, 3, 4), RULES))
    assert moving.leader == 2 and moving.leader_epoch > p.leader_epoch


def test_a_retarget_back_to_the_original_replicas_strands_the_move_until_a_cancel() -> None:
    """Kafka 4.4 (differential scenario retarget): [1,2,3] -> [4,2,3], then back to [1,2,3].
    changePartitionReassignment finds nothing to add, so the adding list [4] stays while 4
    is now removing too: nothing leaves R (no leader-epoch bump) and the move never
    completes, even with 4 in sync (maybeCompleteReassignment wants 4 in the ISR without
    the removing replicas). would_strand says so; the cancel that gets out of it drops 4
    and bumps the leader epoch to fence it."""
    p = PartitionRegistration((1, 2, 3), (1, 2, 3), leader=1)
    moving = _after(p, pc.change_reassignment(TP, p, [4, 2, 3], ALL, RULES))
    assert pc.would_strand(moving.replicas, moving.adding, moving.removing, [1, 2, 3])
    back = _after(moving, pc.change_reassignment(TP, moving, [1, 2, 3], ALL, RULES))
    assert (back.replicas, back.adding, back.removing) == ((1, 2, 3, 4), (4,), (4,))
    assert back.leader == 1 and back.leader_epoch == moving.leader_epoch
    in_sync = _after(back, pc.alter_isr(TP, back, [1, 2, 3, 4], ALL, RULES))
    assert in_sync.is_reassigning
    out = _after(in_sync, pc.cancel_reassignment(TP, in_sync, ALL, RULES))
    assert (out.replicas, out.isr, out.leader) == ((1, 2, 3), (1, 2, 3), 1)
    assert not out.is_reassigning and out.leader_epoch == moving.leader_epoch + 1


def _controller(*records: Record) -> tuple[Controller, list[Record]]:
    image = MetadataImage()
    emitted: list[Record] = []

    def emit(r: Record) -> None:
        image.apply(r)
        emitted.append(r)

    for r in records:
        image.apply(r)
    return Controller(image, emit), emitted


def test_a_fenced_broker_does_not_join_the_isr() -> None:
    """ReplicationControlManager refuses an AlterPartition that adds a fenced broker to the
    ISR (INELIGIBLE_REPLICA): a caught-up report for it changes nothing."""
    c, emitted = _controller(
        *(RegisterBrokerRecord(b, None, fenced=b == 3) for b in range(4)),
        TopicRecord("orders", "id", 100, 0.0),
        PartitionRecord("orders", 0, (0, 1, 3), (0, 1), 0))
    c.replica_caught_up(TP, 3)
    assert emitted == [] and c.image.partition(TP).isr == (0, 1)  # type: ignore[union-attr]
    c.replica_caught_up(TP, 2)  # not a replica at all
    assert emitted == []


def test_a_fell_behind_report_never_removes_the_leader_from_the_isr() -> None:
    """The leader is the one reporting lag (AlterPartition from the leader): it never reports
    itself, and the controller ignores such a report."""
    c, emitted = _controller(
        *(RegisterBrokerRecord(b, None, fenced=False) for b in range(3)),
        TopicRecord("orders", "id", 100, 0.0),
        PartitionRecord("orders", 0, (0, 1, 2), (0, 1, 2), 0))
    c.replica_fell_behind(TP, 0)
    assert emitted == []
    c.replica_fell_behind(TP, 2)
    assert c.image.partition(TP).isr == (0, 1)  # type: ignore[union-attr]


# -- the executor ----------------------------------------------------------------------------------
def test_the_executor_does_not_override_a_reassignment_another_tool_started(
        tmp_path: Path) -> None:
    """A pending move of the plan that another tool starts meanwhile is not taken over (the
    other tool's target stays); the partition is reported failed."""
    c = cluster(tmp_path)
    plan, _ = ReassignmentPlan.from_moves(  # a reorder (done at once), then a copy
        [(tp("orders", 0), [1, 0, 2]), (tp("orders", 1), [4, 2, 0])], limits=Limits(None, 1))
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    ex.step()
    assert list(ex.pending) == [tp("orders", 1)] and not ex.moving
    pending = tp("orders", 1)
    assert c.alter_partition_reassignments({pending: [5, 2, 0]})[pending].ok  # someone else
    for _ in range(200):
        if ex.step().phase.terminal:
            break
        c.advance(1)
    assert "another tool" in ex.state.failed[str(pending)]
    assert c.list_partition_reassignments()[pending].target == (5, 2, 0)


def _spec_change(tmp_path: Path) -> tuple[object, object]:
    from kraftsman import reconcile
    from kraftsman.resources import PartitionReassignmentSpec

    c = cluster(tmp_path)

    def spec(parts: list[dict[str, object]]) -> PartitionReassignmentSpec:
        return PartitionReassignmentSpec.model_validate(
            {"clusterRef": {"name": "demo"}, "partitions": parts,
             "throttleBytesPerSecond": 500_000, "maxConcurrentMoves": 2})

    old = spec([{"topic": "orders", "partition": 0, "replicas": [3, 1, 2]},
                {"topic": "orders", "partition": 1, "replicas": [4, 2, 0]}])
    ex, problems, _ = reconcile.executor_for(c, old, None, None)
    assert problems == []
    ex.step()
    c.advance(2)
    ex.step()
    new = spec([{"topic": "orders", "partition": 0, "replicas": [3, 1, 2]}])
    ex2, problems, retargeted = reconcile.executor_for(
        c, new, ex.state.model_dump(mode="json"), old)
    assert problems == [] and retargeted
    ex2.step()
    return c, ex2


def test_a_changed_spec_cancels_the_moves_it_no_longer_names(tmp_path: Path) -> None:
    c, _ = _spec_change(tmp_path)
    assert set(c.list_partition_reassignments()) == {tp("orders", 0)}  # type: ignore[attr-defined]
    p1 = c.image.partition(tp("orders", 1))  # type: ignore[attr-defined]
    assert set(p1.replicas) == {1, 2, 0}


def test_a_changed_spec_removes_the_old_runs_throttles(tmp_path: Path) -> None:
    c, ex2 = _spec_change(tmp_path)
    cfg = c.describe_configs([("TOPIC", "orders"), ("BROKER", "4")])  # type: ignore[attr-defined]
    topic = cfg[("TOPIC", "orders")]
    assert set(topic["follower.replication.throttled.replicas"].split(",")) == {"0:3"}
    assert set(topic["leader.replication.throttled.replicas"].split(",")) == {"0:0", "0:1",
                                                                              "0:2"}
    assert cfg[("BROKER", "4")] == {}, "broker 4 only served the dropped move"
    for _ in range(200):
        if ex2.step().phase is Phase.COMPLETED:  # type: ignore[attr-defined]
            break
        c.advance(1)  # type: ignore[attr-defined]
    res = [("BROKER", str(b)) for b in range(6)] + [("TOPIC", "orders")]
    assert not any(c.describe_configs(res).values())  # type: ignore[attr-defined]


# -- storage ---------------------------------------------------------------------------------------
def _batch(offset: int) -> bytes:
    return encode_frame(b'{"o":%d,"e":0,"t":0,"r":[["C","x"]]}' % offset)


def test_a_bad_frame_header_before_the_tail_is_corruption_not_a_torn_tail(
        tmp_path: Path) -> None:
    """Acknowledged data after a damaged header must not be truncated as if torn."""
    seg = tmp_path / "log-00000000000000000000.log"
    seg.write_bytes(_batch(0) + b"\x00" + _batch(1)[1:] + _batch(2))
    with pytest.raises(CorruptFileError) as e:
        read_frames(seg)
    assert e.value.offset == len(_batch(0)) and "bad frame header" in e.value.reason


def test_write_atomically_fsyncs_the_data_before_the_rename(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync " + os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def replace(src: str | Path, dst: str | Path) -> None:
        events.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(framing.os, "fsync", fsync)
    monkeypatch.setattr(framing.os, "replace", replace)
    target = tmp_path / "state.json"
    framing.write_atomically(target, b"new")
    assert target.read_bytes() == b"new"
    assert events == [f"fsync {target}.tmp", "rename", f"fsync {tmp_path}"]


def test_a_torn_frame_in_a_segment_that_is_not_the_last_is_refused(tmp_path: Path) -> None:
    """Metadata log: only the last segment can have been cut by a crash."""
    d = tmp_path / "metadata"
    d.mkdir()
    (d / "log-00000000000000000000.log").write_bytes(_batch(0) + _batch(1)[:-3])
    (d / "log-00000000000000000002.log").write_bytes(_batch(2))
    with pytest.raises(CorruptFileError) as e:
        MetadataLog(d).recover()
    assert "log-00000000000000000000.log" in str(e.value)
    assert (d / "log-00000000000000000000.log").stat().st_size == 2 * len(_batch(0)) - 3


def test_raft_storage_refuses_a_torn_frame_in_a_segment_that_is_not_the_last(
        tmp_path: Path) -> None:
    """Raft storage, likewise (KafkaRaftClient's log: only an unflushed tail can be torn)."""
    s = DirectoryStorage(tmp_path, segment_bytes=1, fsync=False)
    s.load()
    s.append([Batch(0, 1, (b"a",)), Batch(1, 1, (b"b",)), Batch(2, 1, (b"c",))])
    s.close()
    segs = sorted(tmp_path.glob("*.log"))
    assert len(segs) == 3
    size = segs[0].stat().st_size
    segs[0].write_bytes(segs[0].read_bytes()[:-2])
    with pytest.raises(CorruptFileError):
        DirectoryStorage(tmp_path, segment_bytes=1, fsync=False).load()
    assert segs[0].stat().st_size == size - 2
