"""One test per rule of SPEC §3 / KIP-595, on single nodes and small simulated quorums."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from controller_core.errors import (
    INCONSISTENT_CLUSTER_ID,
    INVALID_REQUEST,
    NONE,
    REQUEST_TIMED_OUT,
)
from controller_core.raft.describe import format_replication, format_status
from controller_core.raft.log import RaftLog
from controller_core.raft.messages import Envelope, FetchRequest, FetchResponse, VoteRequest
from controller_core.raft.node import (
    DUPLICATE_VOTER,
    NOT_ENOUGH_REPLICAS,
    NOT_LEADER_OR_FOLLOWER,
    VOTER_NOT_FOUND,
    NotLeaderError,
    RaftNode,
)
from controller_core.raft.quorum import SimulatedQuorum
from controller_core.raft.records import Batch, LeaderChange, decode_batch, encode_batch
from controller_core.raft.state import QuorumState
from controller_core.raft.storage import DirectoryStorage, MemoryStorage


def node(nid: int = 1, **kw: object) -> RaftNode:
    return RaftNode(nid, voters=[0, 1, 2], rng=random.Random(nid), now_ms=0, **kw)  # type: ignore[arg-type]


def batches(*epochs: int) -> list[Batch]:
    return [Batch(i, e, (f"r{i}".encode(),)) for i, e in enumerate(epochs)]


def replies(n: RaftNode) -> list[Envelope]:
    return list(n.ready().messages)


# ------------------------------------------------------------------------ vote granting
def test_vote_granted_once_per_epoch() -> None:
    n = node()
    n.step(Envelope(0, 1, VoteRequest("c", 1, 0, 0, 0)), 10)
    (r,) = replies(n)
    assert r.body.vote_granted and n.qs == QuorumState(1, None, 0)
    n.step(Envelope(2, 1, VoteRequest("c", 1, 2, 0, 0)), 11)
    (r,) = replies(n)
    assert not r.body.vote_granted, "a second candidate in the same epoch must be refused"
    n.step(Envelope(0, 1, VoteRequest("c", 1, 0, 0, 0)), 12)
    assert replies(n)[0].body.vote_granted, "a retransmission is granted again"


def test_vote_requires_log_at_least_as_up_to_date() -> None:
    n = node(log=batches(1, 1, 2))
    n.step(Envelope(0, 1, VoteRequest(None, 3, 0, 1, 10)), 1)  # older last epoch, longer
    assert not replies(n)[0].body.vote_granted
    n.step(Envelope(2, 1, VoteRequest(None, 4, 2, 2, 2)), 1)  # same epoch, shorter
    assert not replies(n)[0].body.vote_granted
    n.step(Envelope(2, 1, VoteRequest(None, 5, 2, 2, 3)), 1)  # equal
    assert replies(n)[0].body.vote_granted


def test_stale_epoch_vote_is_fenced() -> None:
    n = node(quorum_state=QuorumState(5, None, None))
    n.step(Envelope(0, 1, VoteRequest(None, 4, 0, 0, 0)), 1)
    r = replies(n)[0].body
    assert not r.vote_granted and r.error.name == "FENCED_LEADER_EPOCH" and r.leader_epoch == 5


def test_pre_vote_changes_no_state() -> None:
    n = node(quorum_state=QuorumState(3, None, None))
    n.step(Envelope(0, 1, VoteRequest(None, 4, 0, 0, 0, pre_vote=True)), 1)
    r = n.ready()
    assert r.quorum_state is None and r.messages[0].body.vote_granted
    assert n.epoch == 3


# ------------------------------------------------------------------------ log comparison
def test_end_offset_for_epoch() -> None:
    log = RaftLog(batches(1, 1, 3, 3, 5))
    assert log.end_offset_for_epoch(1) == (1, 2)
    assert log.end_offset_for_epoch(2) == (1, 2)
    assert log.end_offset_for_epoch(4) == (3, 4)
    assert log.end_offset_for_epoch(9) == (5, 5)
    assert log.end_offset_for_epoch(0) == (0, 0)


def test_truncate_reverts_configuration() -> None:
    from controller_core.raft.records import VoterAssignment
    log = RaftLog(batches(1, 1))
    log.append(Batch(2, 2, control=VoterAssignment("c", (0, 1, 2, 3), None)))
    assert log.latest_config() is not None
    log.truncate(2)
    assert log.latest_config() is None and log.end_offset == 2 and log.last_epoch == 1


def test_truncate_mid_batch_keeps_prefix() -> None:
    log = RaftLog([Batch(0, 1, (b"a", b"b", b"c"))])
    log.truncate(2)
    assert log.end_offset == 2 and log.batches[0].records == (b"a", b"b")


# ------------------------------------------------------------------------ fetch rules
def leader_with_log(epochs: list[int]) -> RaftNode:
    n = RaftNode(0, voters=[0, 1, 2], rng=random.Random(0), now_ms=0,
                 quorum_state=QuorumState(max(epochs), None, 0), log=batches(*epochs),
                 cluster_id="c")
    n._become_candidate(0)
    n.step(Envelope(1, 0, __import__("controller_core.raft.messages", fromlist=["x"])
                    .VoteResponse(NONE, -1, n.epoch, True, n.epoch)), 1)
    assert n.is_leader
    n.ready()
    return n


def test_fetch_divergence_tells_where_to_truncate() -> None:
    ldr = leader_with_log([1, 1, 2])
    ldr.step(Envelope(1, 0, FetchRequest("c", 1, ldr.epoch, 5, 1, 1000)), 2)
    r = next(m.body for m in replies(ldr) if isinstance(m.body, FetchResponse))
    assert r.diverging and (r.diverging_epoch, r.diverging_end_offset) == (1, 2)


def test_follower_truncates_on_divergence_and_refetches() -> None:
    f = RaftNode(1, voters=[0, 1, 2], rng=random.Random(1), now_ms=0,
                 quorum_state=QuorumState(3, 0, None), log=batches(1, 1, 2, 2), cluster_id="c")
    f.tick(0)
    f.ready()
    f.step(Envelope(0, 1, FetchResponse(NONE, 0, 3, 0, (), 1, 2, fetch_offset=4,
                                        last_fetched_epoch=2)), 5)
    r = f.ready()
    assert r.truncate_to == 2 and f.log.end_offset == 2
    f.tick(5)
    fetch = f.ready().messages[0].body
    assert isinstance(fetch, FetchRequest) and fetch.fetch_offset == 2


def test_stale_fetch_epoch_is_fenced_with_known_leader() -> None:
    ldr = leader_with_log([1])
    ldr.step(Envelope(1, 0, FetchRequest("c", 1, ldr.epoch - 1, 0, 0, 1000)), 2)
    r = replies(ldr)[-1].body
    assert r.error.name == "FENCED_LEADER_EPOCH" and r.leader_id == 0
    assert r.leader_epoch == ldr.epoch


def test_hw_only_advances_on_current_epoch_entry() -> None:
    ldr = leader_with_log([1, 1])  # leader of epoch 3 with two entries of epoch 1
    start = ldr.log.end_offset
    assert start > 2
    # follower 1 has only the old entries: a majority holds offset 2 but it is not ours
    ldr.step(Envelope(1, 0, FetchRequest("c", 1, ldr.epoch, 2, 1, 1000)), 2)
    ldr.ready()
    assert ldr.hw == 0
    ldr.step(Envelope(1, 0, FetchRequest("c", 1, ldr.epoch, start, ldr.epoch, 1000)), 3)
    r = ldr.ready()
    ldr.advance(r)
    assert ldr.hw == 0 or ldr.hw == start  # the leader's own copy must be flushed first
    ldr.tick(4)
    r = ldr.ready()
    ldr.advance(r)
    assert ldr.hw == start


# ------------------------------------------------------------------------ cluster id
def test_cluster_id_mismatch_is_refused() -> None:
    n = node(cluster_id="mine")
    for body in (VoteRequest("other", 1, 0, 0, 0), FetchRequest("other", 0, 0, 0, 0, 1)):
        n.step(Envelope(0, 1, body), 1)
        assert replies(n)[0].body.error == INCONSISTENT_CLUSTER_ID
    assert n.epoch == 0


# ------------------------------------------------------------------------ AlterQuorum
@pytest.fixture
def quorum() -> SimulatedQuorum:
    q = SimulatedQuorum([0, 1, 2], observers=[3, 4, 5], seed=3, cluster_id="kraft")
    assert q.run_until_leader() is not None
    q.advance(1000)
    return q


def test_alter_bad_input_changes_nothing(quorum: SimulatedQuorum) -> None:
    before = quorum.node(quorum.leader()).log.end_offset  # type: ignore[arg-type]
    cases = [([], INVALID_REQUEST, "empty"), ([0, 1, 9], VOTER_NOT_FOUND, "9"),
             ([0, 0, 1], DUPLICATE_VOTER, "more than once"), ([-1, 0, 1], INVALID_REQUEST, ">= 0")]
    for target, err, word in cases:
        res = quorum.alter_quorum(target)
        assert res.error == err and word in res.message, res
    quorum.crash(4)
    quorum.crash(5)
    quorum.advance(3000)
    res = quorum.alter_quorum([3, 4, 5])
    assert res.error == NOT_ENOUGH_REPLICAS and "majority" in res.message
    ldr = quorum.node(quorum.leader())  # type: ignore[arg-type]
    assert ldr.target_voters() is None and ldr.voters() == (0, 1, 2)
    assert ldr.log.end_offset == before


def test_alter_not_leader() -> None:
    n = node()
    res = n.alter_quorum([0, 1], 0)
    assert res.error == NOT_LEADER_OR_FOLLOWER


def test_alter_cancel_semantics(quorum: SimulatedQuorum) -> None:
    quorum.crash(3)  # 3 can never catch up, so the walk stalls and can be cancelled
    quorum.advance(3000)
    ldr = quorum.node(quorum.leader())  # type: ignore[arg-type]

    def committed() -> None:  # one voter change in flight at a time: let the last commit
        assert quorum.run_until_committed(ldr.log.end_offset - 1)

    assert quorum.alter_quorum([0, 1, 3]).ok
    quorum.advance(500)
    assert ldr.target_voters() == (0, 1, 3) and ldr.voters() == (0, 1, 2)
    assert quorum.alter_quorum([0, 1, 4]).ok, "a new target replaces a pending one"
    assert ldr.target_voters() == (0, 1, 4)
    committed()
    res = quorum.alter_quorum([0, 1, 2])
    assert res.ok and "cancelled" in res.message and res.target_voters is None
    committed()
    assert quorum.alter_quorum([0, 1, 4]).ok
    committed()
    res = quorum.alter_quorum(None)
    assert res.ok and res.target_voters is None and ldr.voters() == (0, 1, 2)


def test_alter_waits_for_the_voter_change_in_flight(quorum: SimulatedQuorum) -> None:
    """Kafka's RemoveVoterHandler / AddVoterHandler answer REQUEST_TIMED_OUT (retriable) while
    the latest VotersRecord is uncommitted: a second record is never appended on top of it.
    Asking again for the target in flight is no change and is answered as such."""
    ldr = quorum.node(quorum.leader())  # type: ignore[arg-type]
    quorum.hold(lambda e: e.src == ldr.id)  # nothing the leader appends can commit
    assert quorum.alter_quorum([0, 1, 2, 3]).ok
    end = ldr.log.end_offset
    for target in ([0, 1, 2, 4], [0, 1], None, [0, 1, 2]):
        res = quorum.alter_quorum(target)
        assert res.error == REQUEST_TIMED_OUT and res.error.retriable, (target, res)
        assert "not committed yet" in res.message and "retry" in res.message
    assert quorum.alter_quorum([0, 1, 2, 3]).message == "this target is already in progress"
    assert ldr.log.end_offset == end and ldr.target_voters() == (0, 1, 2, 3)
    quorum.release()
    assert quorum.run_until_committed(end - 1, 5000)
    assert quorum.alter_quorum(None).ok, "once it committed, the next change is taken"


def test_a_new_leader_alters_only_after_committing_its_epoch() -> None:
    """Kafka answers voter changes with REQUEST_TIMED_OUT until the new leader's high
    watermark is established (an entry of its epoch committed, earlier changes fenced)."""
    q = SimulatedQuorum([0, 1, 2], seed=3, cluster_id="kraft")
    q.hold(lambda e: isinstance(e.body, FetchResponse))  # the followers never catch up
    lid = q.run_until_leader()
    assert lid is not None
    ldr = q.node(lid)
    ls = ldr._leader
    assert q.run_until(lambda: all(ldr.is_live(n) for n in (0, 1, 2)), 5000)
    assert ls is not None and ldr.hw <= ls.epoch_start_offset  # elected, nothing committed
    res = q.alter_quorum([0, 1])
    assert res.error == REQUEST_TIMED_OUT and "has not committed an entry of its epoch" in (
        res.message)
    assert ldr.target_voters() is None
    q.release()
    assert q.run_until(lambda: ldr.hw > ls.epoch_start_offset, 5000)
    assert q.alter_quorum([0, 1]).ok


def test_replacement_keeps_availability_and_leader_steps_down(quorum: SimulatedQuorum) -> None:
    old_leader = quorum.leader()
    assert quorum.alter_quorum([3, 4, 5]).ok
    assert quorum.run_until_voters([3, 4, 5], 60_000)
    quorum.advance(3000)
    lid = quorum.leader()
    assert lid in (3, 4, 5) and lid != old_leader
    off = quorum.propose([b"after"])
    assert quorum.run_until_committed(off, 5000)
    d = quorum.describe_quorum().status
    assert d is not None and d.current_voters == (3, 4, 5) and d.target_voters is None
    assert {r.replica_id for r in d.replicas if r.status == "Observer"} == {0, 1, 2}


def test_propose_on_follower_raises_with_hint(quorum: SimulatedQuorum) -> None:
    lid = quorum.leader()
    other = next(n for n in (0, 1, 2) if n != lid)
    with pytest.raises(NotLeaderError) as e:
        quorum.node(other).propose([b"x"], 0)
    assert e.value.leader_id == lid and e.value.error == NOT_LEADER_OR_FOLLOWER


def test_describe_on_follower_names_leader(quorum: SimulatedQuorum) -> None:
    lid = quorum.leader()
    other = next(n for n in (0, 1, 2) if n != lid)
    r = quorum.node(other).describe_quorum(0)
    assert r.error == NOT_LEADER_OR_FOLLOWER and r.leader_id == lid and r.status is None


def test_describe_tables(quorum: SimulatedQuorum) -> None:
    st = quorum.describe_quorum().status
    assert st is not None
    text = format_status(st)
    assert text.splitlines()[0].startswith("LeaderId:") and "CurrentVoters:" in text
    rep = format_replication(st).splitlines()
    assert rep[0].split() == ["ReplicaId", "LogEndOffset", "Lag", "LagTimeMs", "Status",
                              "IsReassignTarget"]
    assert len(rep) == 1 + 6 and "Leader" in rep[1]


def test_zombie_leader_steps_down_after_partition(quorum: SimulatedQuorum) -> None:
    old = quorum.leader()
    assert old is not None
    quorum.isolate(old)
    quorum.advance(5000)
    new = quorum.leader()
    assert new is not None and new != old
    quorum.heal()
    quorum.advance(3000)
    assert not quorum.node(old).is_leader and quorum.node(old).leader_id == quorum.leader()


# ------------------------------------------------------------------------ storage
def test_batch_encoding_roundtrip() -> None:
    for b in (Batch(5, 2, (b"a", b"", b"xyz")), Batch(0, 1, control=LeaderChange(1, 1, (0, 1)))):
        assert decode_batch(encode_batch(b)) == b


def test_directory_storage_recovers_and_drops_torn_tail(tmp_path: Path) -> None:
    st = DirectoryStorage(tmp_path)
    st.save_quorum_state(QuorumState(4, 1, 1))
    st.append([Batch(0, 1, (b"a", b"b")), Batch(2, 2, (b"c",))])
    st.truncate(1)
    st.append([Batch(1, 3, (b"z",))])
    st.close()
    seg = sorted(tmp_path.glob("*.log"))[-1]
    with open(seg, "ab") as f:
        f.write(b"\xc5\x00\x00\x00\x09garbage")  # a torn append
    rec = DirectoryStorage(tmp_path).load()
    assert rec.quorum_state == QuorumState(4, 1, 1)
    assert [(b.base_offset, b.epoch, b.records) for b in rec.batches] == [
        (0, 1, (b"a",)), (1, 3, (b"z",))]


def test_quorum_survives_full_restart_from_disk(tmp_path: Path) -> None:
    q = SimulatedQuorum([0, 1, 2], seed=5, data_dir=tmp_path, cluster_id="k")
    assert q.run_until_leader() is not None
    off = q.propose([b"durable"])
    assert q.run_until_committed(off)
    for n in (0, 1, 2):
        q.crash(n)
    for n in (0, 1, 2):
        q.restart(n)
    assert q.run_until_leader() is not None
    off2 = q.propose([b"more"])
    assert q.run_until_committed(off2)
    assert [r for _, r in q.committed_since(0)] == [b"durable", b"more"]


def test_memory_storage_loses_only_unflushed() -> None:
    st = MemoryStorage()
    st.append([Batch(0, 1, (b"a",))])
    st.flush()
    st.append([Batch(1, 1, (b"b",))])
    st.crash(lose_unflushed=True)
    assert st.load().batches == [Batch(0, 1, (b"a",))]
