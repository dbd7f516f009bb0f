"""A seeded fault-injection run of a SimulatedQuorum, checked after every event.

Besides crashes, partitions, whole-cluster restarts and voter changes, the generator has
fault *shapes* that wait for a moment and strike then (issue 12): a voter is killed and
restarted right after it votes while a rival campaigns in the same epoch; messages are delayed
across a leader's resignation; a leader is killed (and restarted) right after it appends a
voter change, its messages to the nodes that change concerns held back. Issue 20 adds a leader
that removes itself from two voters and is restarted before the removal commits, after being
asked for another voter change on top of it (refused while the removal is in flight).
"""

from __future__ import annotations

import contextlib
import hashlib
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from controller_core.raft.config import RaftConfig
from controller_core.raft.invariants import InvariantChecker
from controller_core.raft.messages import Envelope, FetchResponse, VoteRequest, VoteResponse
from controller_core.raft.network import NetworkConfig
from controller_core.raft.node import NotLeaderError
from controller_core.raft.quorum import SimulatedQuorum
from controller_core.raft.records import VoterAssignment

ISSUE_12_SHAPES = ("vote_kill_restart", "delay_across_resignation", "config_race")
SHAPES = (*ISSUE_12_SHAPES, "self_removal_restart")
HOOK_PATIENCE = 5000  # events a shape waits for its moment before it gives up


@dataclass
class ChaosReport:
    seed: int
    events: int
    faults: int
    committed: int
    elections: int
    voter_changes: int
    fired: dict[str, int] = field(default_factory=dict)  # shape -> times it struck
    snapshots: int = 0  # KIP-630 snapshots taken, and fetched from a leader
    snapshot_installs: int = 0
    max_leaderless_ms: float = 0.0  # longest stretch without a leader while one was electable


class _Shapes:
    """The fault shapes: each arms a hook that runs after every event until its moment."""

    def __init__(self, sim: SimulatedQuorum, rng: random.Random, crashed: set[int]) -> None:
        self.sim = sim
        self.rng = rng
        self.crashed = crashed
        self.fired: Counter[str] = Counter()
        self.hook: Callable[[], bool] | None = None
        self.hook_since = 0
        self.release_at: int | None = None
        sim.observers_of_events.append(self._on_event)

    def _on_event(self) -> None:
        sim = self.sim
        if self.hook is not None and (self.hook() or sim.events - self.hook_since > HOOK_PATIENCE):
            self.hook = None
        if self.release_at is not None and sim.events >= self.release_at:
            self.release_at = None
            sim.release()

    def _arm(self, hook: Callable[[], bool]) -> None:
        self.hook = hook
        self.hook_since = self.sim.events

    def stop(self) -> None:
        self.hook = None
        self.release_at = None
        self.sim.release()

    def _live_voters(self) -> list[int]:
        return [n for n, node in self.sim.nodes.items() if node is not None and node.is_voter]

    def start(self, shape: str) -> None:
        if self.hook is not None or self.release_at is not None:
            return  # one shape at a time
        getattr(self, shape)()

    def vote_kill_restart(self) -> None:
        sim, rng = self.sim, self.rng
        voters = self._live_voters()
        if len(voters) < 3:
            return
        n = rng.choice(voters)
        first = sim.node(n).qs

        def hook() -> bool:
            node = sim.nodes.get(n)
            if node is None:
                return True
            qs = node.qs
            if qs.voted_for in (None, n) or qs == first or (qs.epoch, qs.voted_for) == (
                    first.epoch, first.voted_for):
                return False
            sim.crash(n, lose_unflushed=rng.random() < 0.5)
            sim.restart(n)
            rivals = [m for m in self._live_voters()
                      if m not in (n, qs.voted_for) and sim.node(m).epoch < qs.epoch]
            if rivals:
                sim.expire_timer(rng.choice(rivals))
            self.fired["vote_kill_restart"] += 1
            return True

        self._arm(hook)
        # an election now, with rivals: every other voter campaigns at once, so that n votes
        # soon and rival VoteRequests of the same epoch are on their way to it
        lid = sim.leader()
        if lid is not None:
            sim.resign(lid)
        for m in voters:
            if m != n and sim.alive(m):
                sim.expire_timer(m)

    def delay_across_resignation(self) -> None:
        sim, rng = self.sim, self.rng
        lid = sim.leader()
        if lid is None:
            return
        followers = [n for n in sim.node_ids if n != lid and sim.alive(n)]
        if not followers:
            return
        f = rng.choice(followers)

        def delayed(e: Envelope) -> bool:
            b = e.body
            return ((isinstance(b, VoteRequest) and not b.pre_vote)
                    or (isinstance(b, VoteResponse) and rng.random() < 0.5)
                    or (e.src == lid and e.dst == f))

        sim.hold(delayed)
        sim.resign(lid)
        self.release_at = sim.events + rng.randrange(20, 400)
        self.fired["delay_across_resignation"] += 1

    def config_race(self) -> None:
        sim, rng = self.sim, self.rng
        lid = sim.leader()
        if lid is None:
            return
        leader = sim.node(lid)
        voters = list(leader.voters())
        observers = [n for n in sim.node_ids if n not in voters and sim.alive(n)]
        if len(voters) >= 2 and (not observers or rng.random() < 0.5):
            target = [v for v in voters if v != lid]  # the leader removes itself
        elif observers:
            target = [*voters, rng.choice(observers)]  # a new voter joins
        else:
            return
        if not sim.alter_quorum(target).ok:
            return

        def hook() -> bool:
            if sim.nodes.get(lid) is not leader or not leader.is_leader:
                return True
            configs = leader.log.configs
            if len(configs) < 2 or configs[-1][0] < leader.hw:
                return False
            before, after = set(configs[-2][1].current_voters), set(configs[-1][1].current_voters)
            if before == after:
                return False
            concerned = (after - before) or after
            sim.hold(lambda e: e.src == lid and e.dst in concerned)
            sim.crash(lid, lose_unflushed=rng.random() < 0.5)
            if rng.random() < 0.7:
                sim.restart(lid)
            else:
                self.crashed.add(lid)
            self.release_at = sim.events + rng.randrange(20, 400)
            self.fired["config_race"] += 1
            return True

        self._arm(hook)

    def self_removal_restart(self) -> None:
        """Issue 20: the leader L of two voters {L, K} removes itself; the record that removes
        it is kept from K, L is asked for another voter change on top of it (L back in), is
        killed and restarted with the removal in its log, uncommitted. L then
        holds the newest log but is outside its latest configuration; K needs L's vote and L
        refuses it (K's log is shorter). L must still campaign for its removal to commit, and
        its log must let it (the configuration before the removal, with L in it, committed:
        the second change refused). A larger quorum is first shrunk to {L, K}."""
        sim, rng = self.sim, self.rng
        lid = sim.leader()
        if lid is None:
            return
        leader = sim.node(lid)
        others = [v for v in leader.voters() if v != lid and leader.is_live(v)]
        if not others:
            return
        keep = rng.choice(others)
        pair = tuple(sorted((lid, keep)))
        stage = ["shrink" if tuple(sorted(leader.voters())) != pair else "remove"]

        def removes_lid(e: Envelope) -> bool:
            b = e.body
            return e.src == lid and isinstance(b, FetchResponse) and any(
                isinstance(x.control, VoterAssignment) and lid not in x.control.current_voters
                for x in b.batches)

        def remove() -> bool:
            if not sim.alter_quorum([keep]).ok:
                return False
            sim.hold(removes_lid)  # K must not learn that it is to be the sole voter
            self.release_at = sim.events + HOOK_PATIENCE  # at the latest
            stage[0] = "remove"
            return True

        def give_up() -> bool:
            if stage[0] == "remove":
                self.release_at = None
                sim.release()
            return True

        def hook() -> bool:
            if sim.nodes.get(lid) is not leader or not leader.is_leader:
                return give_up()  # it lost the lead meanwhile
            latest = leader.log.latest_config()
            assert latest is not None  # the shape appended one
            off, cfg = latest
            current = tuple(sorted(cfg.current_voters))
            if stage[0] == "shrink":
                if cfg.target_voters == pair:
                    return False  # walking down to {L, K}
                if cfg.target_voters is None and current == pair:
                    if off < leader.hw:
                        remove()  # {L, K} committed: now the removal (retried if refused)
                    return False
                return give_up()  # another change replaced the shrink
            if lid in current:
                return False if cfg.target_voters == (keep,) else give_up()
            if off < leader.hw:
                return give_up()  # the removal committed: too late
            # the step that removes L is appended, not committed: a change on top of it (a
            # cancel would be no change: the step reached the target)
            sim.alter_quorum(list(pair))
            sim.crash(lid, lose_unflushed=False)
            sim.restart(lid)
            self.release_at = sim.events + rng.randrange(20, 400)
            self.fired["self_removal_restart"] += 1
            return True

        if stage[0] == "remove":
            if not remove():
                return
        elif not sim.alter_quorum(list(pair)).ok:
            return
        self._arm(hook)


def state_digest(sim: SimulatedQuorum, end: int) -> tuple[bytes]:
    """A stand-in application state for KIP-630 snapshots: a digest of the committed records
    below ``end`` (so a snapshot holding anything else is caught)."""
    h = hashlib.sha256()
    for off, rec in sim.committed_since(0):
        if off >= end:
            break
        h.update(b"%d:%d:" % (off, len(rec)) + rec)
    return (h.digest(),)


def run_chaos(seed: int, events: int = 3000, *, shapes: bool | Sequence[str] = True,
              snapshot_every: int | None = None) -> ChaosReport:
    """Drive one seeded scenario; raises InvariantViolation naming the seed on a violation.

    ``shapes=False`` is the generator as it was before the fault shapes (the liveness
    regression seeds replay exactly what failed then); ``shapes=ISSUE_12_SHAPES`` as it was
    before issue 20 added its shape; True: all of :data:`SHAPES`. With ``snapshot_every`` every node
    snapshots (KIP-630) once that many offsets committed since its last snapshot, so lagging
    and restarted nodes catch up by FetchSnapshot."""
    rng = random.Random(seed)
    n_voters = rng.choice([3, 3, 5])
    voters = list(range(n_voters))
    observers = list(range(n_voters, n_voters + rng.choice([0, 1, 2, 3])))
    net = NetworkConfig(
        one_way_delay_ms=rng.choice([1.0, 5.0, 10.0]),
        delay_jitter_ms=rng.choice([0.0, 5.0, 20.0]),
        loss=rng.choice([0.0, 0.01, 0.05, 0.1]),
        duplicate=rng.choice([0.0, 0.02, 0.05]),
        reorder=rng.choice([0.0, 0.05, 0.2]),
    )
    cfg = RaftConfig(leader_flush_delay_ms=rng.choice([0, 0, 5, 20]))
    sim = SimulatedQuorum(voters, observers, seed=seed, config=cfg, network=net,
                          clock_drift=rng.choice([0.0, 0.01, 0.05]),
                          snapshot_every=snapshot_every,
                          snapshot_state=None if snapshot_every is None else (
                              lambda end: state_digest(sim, end)))
    chk = InvariantChecker(sim)
    faults = 0
    changes = 0
    crashed: set[int] = set()
    fault_rate = rng.choice([0.002, 0.005, 0.01])
    kinds = () if shapes is False else SHAPES if shapes is True else tuple(shapes)
    shaper = _Shapes(sim, random.Random(seed * 7919 + 17), crashed) if kinds else None
    for _ in range(events):
        r = rng.random()
        if r < fault_rate:
            faults += 1
            kind = rng.randrange(7 + len(kinds))
            if kind >= 7 and shaper is not None:
                shaper.start(kinds[kind - 7])
                continue
            alive = [n for n in sim.node_ids if sim.alive(n)]
            if kind == 0 and len(alive) > 1:
                n = rng.choice(alive)
                sim.crash(n, lose_unflushed=rng.random() < 0.5)
                crashed.add(n)
            elif kind == 1 and crashed:
                n = rng.choice(sorted(crashed))
                sim.restart(n)
                crashed.discard(n)
            elif kind == 2:
                nodes = sim.node_ids
                rng.shuffle(nodes)
                k = rng.randrange(1, len(nodes))
                sim.partition(nodes[:k], nodes[k:], symmetric=rng.random() < 0.7)
            elif kind == 3:
                sim.heal()
            elif kind == 4:
                lid = sim.leader()
                if lid is not None:
                    sim.isolate(lid)
            elif kind == 5:
                lid = sim.leader()
                if lid is not None:
                    size = rng.choice([1, 3, 3, 5]) if len(sim.node_ids) >= 5 else rng.choice(
                        [1, 3, 3])
                    target = sorted(rng.sample(sim.node_ids, min(size, len(sim.node_ids))))
                    res = sim.alter_quorum(rng.choice([target, target, None]))
                    changes += res.ok
            elif kind == 6 and len(crashed) == 0 and rng.random() < 0.3:
                # kill everything, then bring back a majority of the voters first
                for n in sim.node_ids:
                    sim.crash(n, lose_unflushed=rng.random() < 0.5)
                back = sim.node_ids
                rng.shuffle(back)
                for n in back[: len(back) // 2 + 1]:
                    sim.restart(n)
                crashed.clear()
                crashed.update(back[len(back) // 2 + 1:])
        elif r < 0.08:
            with contextlib.suppress(NotLeaderError):
                sim.propose([rng.randbytes(rng.randrange(1, 32))
                             for _ in range(rng.randrange(1, 4))])
        else:
            if not sim.step():
                sim.advance(rng.choice([10, 100, 1000]))
        chk.check()
    # heal everything and require progress (liveness) and the quiescent truth
    if shaper is not None:
        shaper.stop()
    sim.heal()
    sim.net.config.loss = sim.net.config.duplicate = sim.net.config.reorder = 0.0
    for n in sorted(crashed):
        sim.restart(n)
    chk.check()
    leader = sim.run_until_leader(60_000)
    if leader is None:
        chk.fail(f"no leader within 60 s after healing everything ({chk.describe_nodes()})")
    deadline = sim.now + 60_000
    while sim.now < deadline:
        try:
            off = sim.propose([b"final"])
        except NotLeaderError:
            sim.run_until_leader(10_000)
            continue
        if sim.run_until_committed(off, 10_000):
            break
        chk.check()
    else:
        chk.fail(f"the final proposal did not commit within 60 s after healing "
                 f"({chk.describe_nodes()})")
    # settle: every live node follows one leader and has its whole log
    def settled() -> bool:
        chk.check()
        lid = sim.leader()
        if lid is None:
            return False
        lead = sim.node(lid)
        return all(n.epoch == lead.epoch and n.log.end_offset == lead.log.end_offset
                   and (n is lead or n.leader_id == lid)
                   for n in sim.nodes.values() if n is not None)
    if not sim.run_until(settled, 60_000):
        chk.fail(f"the quorum did not settle within 60 s after healing ({chk.describe_nodes()})")
    sim.advance(cfg.request_timeout_ms + 2 * cfg.fetch_max_wait_ms)
    chk.check()
    chk.check_quiescent()
    return ChaosReport(seed, events, faults, sim.committed_end, len(chk.leaders), changes,
                       dict(shaper.fired) if shaper is not None else {},
                       sim.snapshots_taken, sim.snapshots_installed, chk.max_leaderless_ms)


def leader_removes_itself_held(q: SimulatedQuorum) -> tuple[int, int]:
    """Of 2 voters, the elected leader L appends the step that removes it while the other, K,
    is kept from fetching it (its FetchResponses carrying that step are held). Returns (L, K)."""
    lid = q.run_until_leader()
    assert lid is not None
    other = 1 - lid
    q.advance(1000)
    q.hold(lambda e: e.src == lid and isinstance(e.body, FetchResponse) and any(
        isinstance(b.control, VoterAssignment) and b.control.current_voters == (other,)
        for b in e.body.batches))
    assert q.alter_quorum([other]).ok
    assert q.run_until(lambda: q.node(lid).voters() == (other,), 10_000)
    return lid, other
