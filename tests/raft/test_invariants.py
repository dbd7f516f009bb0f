"""The checker's newer rules catch the bug each one is for: the bug is injected here (a
monkeypatched RaftNode), the checker must fail, and without it the same scenario passes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from controller_core.raft.invariants import InvariantChecker, InvariantViolation
from controller_core.raft.messages import Envelope, FetchResponse, VoteRequest
from controller_core.raft.node import RaftNode, Ready, majority
from controller_core.raft.quorum import SimulatedQuorum
from controller_core.raft.records import VoterAssignment
from controller_core.raft.state import QuorumState


def vote_kill_restart_competing_vote() -> None:
    """Voter 2 votes for 0 in epoch 1, is killed and restarted at once, then 1's VoteRequest of
    epoch 1 arrives (Kafka: the vote is in the quorum-state file before the response)."""
    q = SimulatedQuorum([0, 1, 2], seed=1, cluster_id="k")
    chk = InvariantChecker(q)
    n2 = q.node(2)
    n2.step(Envelope(0, 2, VoteRequest("k", 1, 0, 0, 0)), 1)
    q._process(2)
    chk.track()
    q.crash(2, lose_unflushed=True)
    q.restart(2)
    q.node(2).step(Envelope(1, 2, VoteRequest("k", 1, 1, 0, 0)), 2)
    q._process(2)
    chk.track()


def test_votes_are_tracked_across_restarts() -> None:
    vote_kill_restart_competing_vote()  # the real node keeps its vote: no violation


def test_check_catches_a_vote_not_persisted(monkeypatch: pytest.MonkeyPatch) -> None:
    orig: Callable[[RaftNode], Ready] = RaftNode.ready

    def forgetful(self: RaftNode) -> Ready:  # the bug: voted-for never reaches the disk
        r = orig(self)
        qs = r.quorum_state
        if qs is not None and qs.voted_for not in (None, self.id):
            return Ready(QuorumState(qs.epoch, qs.leader_id, None), r.truncate_to, r.appends,
                         r.sync, r.messages, r.committed, r.high_watermark)
        return r

    monkeypatch.setattr(RaftNode, "ready", forgetful)
    with pytest.raises(InvariantViolation, match="voted twice in epoch 1"):
        vote_kill_restart_competing_vote()


def self_removal_with_restart() -> None:
    """2 voters; the leader removes itself and restarts before the other has the record."""
    q = SimulatedQuorum([0, 1], seed=12, cluster_id="k")
    InvariantChecker(q)
    lid = q.run_until_leader()
    assert lid is not None
    other = 1 - lid
    q.advance(1000)
    q.hold(lambda e: e.src == lid and isinstance(e.body, FetchResponse) and any(
        isinstance(b.control, VoterAssignment) and b.control.current_voters == (other,)
        for b in e.body.batches))
    assert q.alter_quorum([other]).ok
    assert q.run_until(lambda: q.node(lid).voters() == (other,), 10_000)
    q.crash(lid, lose_unflushed=False)
    q.held.clear()
    q.release()
    q.restart(lid)
    assert q.run_until_voters([other], 30_000)


def test_self_removal_elects_with_the_votes_of_its_configuration() -> None:
    self_removal_with_restart()


def test_check_catches_votes_from_non_voters_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    def counts_everyone(self: RaftNode) -> bool:  # the bug: every granted vote counts
        return len(self._votes_granted) >= majority(len(self.voters()))

    monkeypatch.setattr(RaftNode, "_candidate_won", counts_everyone)
    with pytest.raises(InvariantViolation, match=r"with votes of only \[\] of its voters"):
        self_removal_with_restart()


def config_change_right_after_election(early: bool) -> None:
    """A new leader appends a voter change; ``early``: before committing its own entry."""
    q = SimulatedQuorum([0, 1, 2], observers=[3], seed=4, cluster_id="k")
    chk = InvariantChecker(q)
    done: list[int] = []

    def on_event() -> None:
        lid = q.leader()
        if lid is None or done:
            return
        node = q.node(lid)
        own = node.hw > 0 and node.log.epoch_at(node.hw - 1) == node.epoch
        if own or early:
            node._append_config([*node.voters(), 3], None)
            q._process(lid)
            done.append(lid)
            chk.track()

    q.observers_of_events.append(on_event)
    assert q.run_until(lambda: bool(done), 10_000)


def test_voter_change_after_own_epoch_commit_passes() -> None:
    config_change_right_after_election(early=False)


def test_check_catches_a_voter_change_before_own_epoch_commit() -> None:
    with pytest.raises(InvariantViolation, match="before committing an entry of its epoch"):
        config_change_right_after_election(early=True)
