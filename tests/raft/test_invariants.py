"""The checker's newer rules catch the bug each one is for: the bug is injected here (a
monkeypatched RaftNode), the checker must fail, and without it the same scenario passes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from chaos import leader_removes_itself_held

from controller_core.raft.invariants import InvariantChecker, InvariantViolation
from controller_core.raft.messages import Envelope, VoteRequest
from controller_core.raft.node import RaftNode, Ready, majority
from controller_core.raft.quorum import SimulatedQuorum
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
    lid, other = leader_removes_itself_held(q)
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


def self_removal_with_a_change_on_top(*, check_at_once: bool) -> None:
    """Issue 20's shape: 2 voters, the leader L removes itself (the record kept from K), asks
    for another change (L back in) before the removal commits and restarts. ``check_at_once``:
    check right after the AlterQuorum, while L still leads."""
    q = SimulatedQuorum([0, 1], seed=12, cluster_id="k")
    chk = InvariantChecker(q)
    q.observers_of_events.append(chk.check)
    lid, other = leader_removes_itself_held(q)
    q.alter_quorum([0, 1])
    if check_at_once:
        chk.check()
    q.crash(lid, lose_unflushed=False)
    q.held.clear()
    q.release()
    q.restart(lid)
    assert q.run_until_voters([other], 60_000)


def appends_on_top(self: RaftNode) -> str | None:
    """The injected bug: AlterQuorum never waits for the voter change in flight."""
    return None


def test_self_removal_with_a_change_asked_on_top_passes() -> None:
    self_removal_with_a_change_on_top(check_at_once=True)


def test_check_catches_two_voter_changes_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RaftNode, "_voter_change_in_flight", appends_on_top)
    with pytest.raises(InvariantViolation, match=r"on top of the uncommitted one at 3 .*two "
                                                 r"voter changes in flight"):
        self_removal_with_a_change_on_top(check_at_once=True)


def test_check_catches_a_quorum_that_never_elects(monkeypatch: pytest.MonkeyPatch) -> None:
    """The liveness rule: L, outside both of its last configurations, never campaigns; K needs
    L's vote. Both are up and connected, so 30 s without a leader fails the run (it used to be
    noticed only by the heal at the end of a chaos run, if at all)."""
    monkeypatch.setattr(RaftNode, "_voter_change_in_flight", appends_on_top)
    with pytest.raises(InvariantViolation, match=r"seed 12, .*liveness: no leader for 30\.0 s "
                                                 r"while the network is whole"):
        self_removal_with_a_change_on_top(check_at_once=False)


def test_liveness_is_not_required_of_a_quorum_that_cannot_elect() -> None:
    """No false alarm: without a running majority, or while a partition or held messages cut
    the quorum, a minute without a leader is no violation; healed, the stretch counts."""
    q = SimulatedQuorum([0, 1, 2], seed=7, cluster_id="k")
    chk = InvariantChecker(q)
    q.observers_of_events.append(chk.check)
    lid = q.run_until_leader()
    assert lid is not None
    a, b = (v for v in (0, 1, 2) if v != lid)
    q.crash(lid)
    q.crash(a)
    q.advance(60_000)
    assert q.leader() is None and not chk.electable()
    q.restart(a)
    q.partition([a], [b])
    q.advance(60_000)
    assert q.leader() is None and not chk.electable()
    q.heal()
    q.hold(lambda e: e.src == a)
    q.advance(60_000)
    assert q.leader() is None and not chk.electable()
    q.release()
    assert chk.electable()
    assert q.run_until_leader(10_000) is not None
    assert 0 < chk.max_leaderless_ms < 10_000


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


def entry_committed_under_a_truncated_voter_addition() -> tuple[int, int]:
    """4 voters and observer 4, whose addition is the target. The leader L holds entry P with
    one voter C and the observer (2 of 4: not committed), then appends the step that adds 4 and
    counts it at once (Raft thesis 4.1; Kafka's LeaderState uses the last voter set): P is on 3
    of 5, committed. L is killed before the step leaves it; C is elected by the old voters and
    truncates it. P is then on 2 of the 4 voters in force — not a majority, yet every majority
    of them (3) meets L or C, who refuse their votes to a log without P, so P cannot be lost
    (soak seed 600665 at event 7160 of 10,000, in miniature). Returns (L, C)."""
    q = SimulatedQuorum([0, 1, 2, 3], observers=[4], seed=5, cluster_id="k")
    chk = InvariantChecker(q)
    q.observers_of_events.append(chk.check)
    lid = q.run_until_leader()
    assert lid is not None
    assert q.run_until_committed(q.propose([b"warm-up"]))  # an entry of L's epoch committed
    q.advance(1000)
    c, a, b = (v for v in (0, 1, 2, 3) if v != lid)
    leader = q.node(lid)
    ls = leader._leader
    assert ls is not None
    cut = {4}  # L's messages to these are held back
    q.hold(lambda e: e.src == lid and e.dst in cut)
    assert q.alter_quorum([0, 1, 2, 3, 4]).ok  # the target; 4 lags, so no step yet
    target_at = leader.log.end_offset - 1
    assert q.run_until_committed(target_at)
    cut.update((a, b))
    off = q.propose([b"P"])
    assert q.run_until(lambda: ls.progress[c].log_end_offset > off, 5000)
    cut.discard(4)
    assert q.run_until(lambda: ls.progress[4].log_end_offset > off, 5000)
    cut.update((c, 4))  # the step that adds 4 stays on L
    assert q.committed_end <= off and leader.voters() == (0, 1, 2, 3)  # L and C: 2 of 4
    assert q.run_until(lambda: q.committed_end > off, 1000)  # L, C and 4: 3 of 5
    assert leader.voters() == (0, 1, 2, 3, 4)
    q.crash(lid, lose_unflushed=True)
    q.held.clear()
    q.release()
    chk.check()
    holders = [v for v in (0, 1, 2, 3) if chk._has_prefix(v, off + 1)]
    assert holders == sorted([lid, c])  # 2 of the 4 voters in force
    assert q.run_until_leader(30_000) == c
    q.restart(lid)
    assert q.run_until_committed(q.propose([b"after"]), 30_000)
    assert q.run_until(lambda: q.node(lid).log.end_offset == q.node(c).log.end_offset, 30_000)
    assert q.node(lid).voters() == (0, 1, 2, 3)  # the step was truncated on L
    assert ref_record(q, off) == b"P"
    chk.check()
    return lid, c


def ref_record(q: SimulatedQuorum, off: int) -> bytes:
    return next(rec for o, rec in q.committed_since(off) if o == off)


def test_an_entry_committed_under_a_truncated_voter_addition_survives() -> None:
    """The durability rule is that every majority of a configuration in force meets a holder
    (not that a majority holds it): KafkaRaftClient's LeaderState counts the last voter set,
    committed or not, and RaftEventSimulationTest's MajorityReachedHighWatermark accepts a
    high watermark on a majority of either that set or the one at the high watermark."""
    entry_committed_under_a_truncated_voter_addition()


def counts_observers(self: RaftNode) -> None:
    """The injected bug: the leader counts observers' fetches toward its high watermark."""
    ls = self._leader
    if ls is None:
        return
    ids = set(self.voters()) | set(ls.progress)
    matches = sorted((self.durable_end if v == self.id else ls.progress[v].log_end_offset
                      for v in ids), reverse=True)
    candidate = matches[majority(len(self.voters())) - 1]
    if candidate > self.hw and candidate > ls.epoch_start_offset:
        self.hw = candidate
        self._wake_parked(only_expired=False)
        self._leader_after_commit()


def commit_held_by_the_leader_and_an_observer(*, crash_leader: bool) -> None:
    """3 voters and observer 3; only the leader and the observer get entry P."""
    q = SimulatedQuorum([0, 1, 2], observers=[3], seed=5, cluster_id="k")
    chk = InvariantChecker(q)
    lid = q.run_until_leader()
    assert lid is not None
    assert q.run_until_committed(q.propose([b"warm-up"]))
    q.advance(1000)
    chk.check()
    others = [v for v in (0, 1, 2) if v != lid]
    q.hold(lambda e: e.src == lid and e.dst in others)
    off = q.propose([b"P"])
    ls = q.node(lid)._leader
    assert ls is not None
    q.run_until(lambda: ls.progress[3].log_end_offset > off, 5000)
    if crash_leader:
        q.crash(lid, lose_unflushed=False)  # no live leader: only the durability rule applies
    chk.check()


def test_without_the_bug_an_entry_on_the_leader_and_an_observer_is_not_committed() -> None:
    commit_held_by_the_leader_and_an_observer(crash_leader=False)
    commit_held_by_the_leader_and_an_observer(crash_leader=True)


def test_check_catches_a_commit_lost_to_the_voters_in_force(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A real lost commit: P is on the leader and an observer only; the other two voters can
    elect one of them without it. The relaxed durability rule still fails it."""
    monkeypatch.setattr(RaftNode, "_leader_update_hw", counts_observers)
    with pytest.raises(InvariantViolation, match=r"is not durable on nodes that every majority"):
        commit_held_by_the_leader_and_an_observer(crash_leader=True)


def test_check_catches_a_leader_high_watermark_on_no_majority(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RaftNode, "_leader_update_hw", counts_observers)
    with pytest.raises(InvariantViolation, match=r"is durable on no majority of its last voters"):
        commit_held_by_the_leader_and_an_observer(crash_leader=False)
