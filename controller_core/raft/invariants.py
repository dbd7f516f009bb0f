"""The safety properties of SPEC §3, checked against a :class:`SimulatedQuorum` after every event.

Kafka's randomised Raft simulation checks the same: SingleLeader, MonotonicEpoch,
MonotonicHighWatermark, MajorityReachedHighWatermark (on the live leader, against its last
voter set or the one at its high watermark, as Kafka's KIP-853 version does) and
ConsistentCommittedData. We add that the
committed end stays on nodes that every majority of some configuration in force meets (it
cannot be lost by an election, though after a truncated voter addition it may sit on only half
of an even configuration), that every configuration that can be in force overlaps (as a
quorum) with the committed one, that voter changes are single-server steps, and that
DescribeQuorum tells the truth.

After every single event (not only when the driver calls :meth:`InvariantChecker.check`) it
also follows the votes: a node never votes twice in an epoch (across restarts too), every
leader holds the votes of a majority of *its* voters (a vote from a non-voter never counts),
and a leader appends a voter change only once an entry of its own epoch is committed
(Ongaro's fix to single-server changes).

With KIP-630 snapshots a node's log starts at its snapshot: the committed prefix below is
checked through the snapshot (its end is committed, its id's epoch is the committed entry's,
its records are the application state there), the log above it entry by entry.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from controller_core.raft.log import RaftLog
from controller_core.raft.node import RaftNode, majority
from controller_core.raft.quorum import SimulatedQuorum
from controller_core.raft.records import Batch, VoterAssignment
from controller_core.raft.storage import MemoryStorage


class InvariantViolation(AssertionError):
    pass


def _entries(b: Batch) -> list[tuple[int, object]]:
    if b.control is not None:
        return [(b.epoch, b.control)]
    return [(b.epoch, r) for r in b.records]


def disjoint_majorities_possible(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """True if some majority of ``a`` and some majority of ``b`` share no member."""
    sa, sb = set(a), set(b)
    both = sa & sb
    need_a = max(0, majority(len(sa)) - len(sa - sb))
    need_b = max(0, majority(len(sb)) - len(sb - sa))
    return need_a + need_b <= len(both)


@dataclass
class _NodeTrack:
    log: RaftLog | None = None
    verified: int = 0
    hw: int = 0
    snapshot: object = None  # the last snapshot checked


LIVENESS_MS = 30_000.0
"""How long (simulated ms) the quorum may go without a leader while it could elect one: the
network whole and every configuration in force with a live majority. 15 election timeouts;
the longest such stretch seen in passing chaos runs is far below it (bench/raft_soak.py)."""


@dataclass
class InvariantChecker:
    sim: SimulatedQuorum
    liveness_ms: float | None = LIVENESS_MS  # None: liveness not checked
    leaders: dict[int, int] = field(default_factory=dict)  # epoch -> leader id
    epochs: dict[int, int] = field(default_factory=dict)
    ref: list[tuple[int, object]] = field(default_factory=list)  # committed (epoch, entry)
    tracks: dict[int, _NodeTrack] = field(default_factory=dict)
    committed_end: int = 0
    checks: int = 0
    votes: dict[tuple[int, int], int] = field(default_factory=dict)  # (node, epoch) -> cand.
    elected: set[tuple[int, int]] = field(default_factory=set)  # (epoch, leader) checked
    config_appends: set[tuple[int, int, int]] = field(default_factory=set)  # (node, epoch, off)
    leaderless_since: float | None = None  # start of the present electable stretch, no leader
    max_leaderless_ms: float = 0.0  # the longest such stretch seen

    def __post_init__(self) -> None:
        self.sim.observers_of_events.append(self.track)

    def track(self) -> None:
        """Per event: votes, elections and voter changes (they can come and go between two
        :meth:`check` calls)."""
        live = [(n, node) for n, node in self.sim.nodes.items() if node is not None]
        for n, node in live:
            qs = node.qs
            if qs.voted_for is not None:
                cast = self.votes.setdefault((n, qs.epoch), qs.voted_for)
                if cast != qs.voted_for:
                    self.fail(f"node {n} voted twice in epoch {qs.epoch}: for {cast} and "
                              f"{qs.voted_for}")
        for n, node in live:
            if node.is_leader:
                self._check_elected(n, node)
                self._check_config_append(n, node)

    def _check_elected(self, n: int, node: RaftNode) -> None:
        """A leader holds the votes of a majority of the voters it counted (its own
        configuration): votes from nodes outside it never make a majority."""
        key = (node.epoch, n)
        if key in self.elected:
            return
        self.elected.add(key)
        voters = node.voters()
        got = sorted(v for v in voters if self.votes.get((v, node.epoch)) == n)
        if len(got) < majority(len(voters)):
            self.fail(f"node {n} leads epoch {node.epoch} with votes of only {got} of its "
                      f"voters {voters}")

    def _check_config_append(self, n: int, node: RaftNode) -> None:
        """A voter assignment appended by a leader comes after an entry of its own epoch was
        committed (Raft thesis 4.1, Ongaro's fix) and after the one before it committed: one
        voter change in flight (Kafka's AddVoterHandler / RemoveVoterHandler refuse while the
        latest VotersRecord is uncommitted). The high watermark only grows, so this is exact
        when it runs before the next event: :meth:`check` runs it too, and drivers call that
        right after their own AlterQuorum calls."""
        configs = node.log.configs
        if not configs:
            return
        off, cfg = configs[-1]
        key = (n, node.epoch, off)
        if key in self.config_appends or node.log.epoch_at(off) != node.epoch:
            return
        self.config_appends.add(key)
        if len(configs) < 2:
            return  # the first configuration (the cluster id), written by the first leader
        prev_off, prev = configs[-2]
        before = prev.current_voters
        if node.hw == 0 or node.log.epoch_at(node.hw - 1) != node.epoch:
            what = ("voter change" if set(before) != set(cfg.current_voters)
                    else "voter assignment")
            self.fail(f"leader {n} of epoch {node.epoch} appended the {what} "
                      f"{before} -> {cfg.current_voters} before committing an entry of its "
                      f"epoch (high watermark {node.hw})")
        if prev_off >= node.hw:
            self.fail(f"leader {n} of epoch {node.epoch} appended the voter assignment at "
                      f"{off} ({cfg.current_voters}, target {cfg.target_voters}) on top of the "
                      f"uncommitted one at {prev_off} ({before}, target {prev.target_voters}; "
                      f"high watermark {node.hw}): two voter changes in flight")

    def fail(self, msg: str) -> None:
        raise InvariantViolation(
            f"seed {self.sim.seed}, t={self.sim.now:.0f}ms, event {self.sim.events}: {msg}")

    def check(self) -> None:
        self.checks += 1
        sim = self.sim
        self.track()  # the driver may have appended a voter change since the last event
        # committed reference grows from the driver's global committed list
        if sim.committed_end < self.committed_end:
            self.fail(f"global high watermark went back {self.committed_end}->"
                      f"{sim.committed_end}")
        while len(self.ref) < sim.committed_end:
            off = len(self.ref)
            b = next(b for b in reversed(sim.committed) if b.base_offset <= off)
            self.ref.extend(_entries(b.slice(off, b.end_offset)))
        self.committed_end = sim.committed_end
        for n, node in sim.nodes.items():
            if node is None:
                continue
            self._check_node(n, node)
        self._check_majority()
        self._check_configs()
        self._check_describe()
        self._check_liveness()

    def _configs_in_force(self) -> set[tuple[int, ...]]:
        """The configurations a live node that holds the committed prefix can count votes or
        commits in: the one at the committed end and its latest (maybe uncommitted) one."""
        c = self.committed_end
        out: set[tuple[int, ...]] = set()
        for n, node in self.sim.nodes.items():
            if node is None or (c and not self._has_prefix(n, c)):
                continue
            at = node.log.config_at(c - 1) if c else None
            out.add(at[1].current_voters if at else node.bootstrap_voters)
            out.add(node.voters())
        return out

    def electable(self) -> bool:
        """The quorum can elect a leader: the network is whole (no partition, nothing held
        back) and every configuration in force has a majority of running nodes."""
        sim = self.sim
        if not sim.connected():
            return False
        configs = self._configs_in_force()
        return bool(configs) and all(
            sum(1 for v in cfg if sim.alive(v)) >= majority(len(cfg)) for cfg in configs)

    def _check_liveness(self) -> None:
        """Liveness: a quorum that can elect a leader has one within :attr:`liveness_ms`.

        The stretch starts when there is no leader while :meth:`electable` holds, and starts
        again whenever a leader appears or the quorum stops being electable (a partition, a
        held message, too few nodes of some configuration running)."""
        if self.liveness_ms is None:
            return
        sim = self.sim
        if sim.leader() is not None or not self.electable():
            self.leaderless_since = None
            return
        if self.leaderless_since is None:
            self.leaderless_since = sim.now
        stretch = sim.now - self.leaderless_since
        self.max_leaderless_ms = max(self.max_leaderless_ms, stretch)
        if stretch > self.liveness_ms:
            self.fail(f"liveness: no leader for {stretch / 1000:.1f} s while the network is "
                      f"whole and every configuration in force "
                      f"{sorted(self._configs_in_force())} has a live majority "
                      f"({self.describe_nodes()})")

    def describe_nodes(self) -> str:
        """Each node's role, epoch, latest voters and log, for a failure message."""
        return "; ".join(
            f"{n}: down" if node is None else
            f"{n}: {node.role_name()} epoch {node.epoch} voters {node.voters()} log end "
            f"{node.log.end_offset} (last epoch {node.log.last_epoch}) hw {node.hw}"
            for n, node in sorted(self.sim.nodes.items()))

    def _check_node(self, n: int, node: RaftNode) -> None:
        # MonotonicEpoch (the quorum state is durable, so across restarts too)
        if node.epoch < self.epochs.get(n, 0):
            self.fail(f"node {n}: epoch went back {self.epochs[n]}->{node.epoch}")
        self.epochs[n] = node.epoch
        # SingleLeader
        if node.is_leader:
            other = self.leaders.setdefault(node.epoch, n)
            if other != n:
                self.fail(f"two leaders in epoch {node.epoch}: {other} and {n}")
        tr = self.tracks.setdefault(n, _NodeTrack())
        if tr.log is not node.log:  # a restart: a new incarnation
            tr.log, tr.verified, tr.hw = node.log, 0, 0
            tr.snapshot = None
        # MonotonicHighWatermark (per incarnation; the global one above)
        if node.hw < tr.hw:
            self.fail(f"node {n}: high watermark went back {tr.hw}->{node.hw}")
        tr.hw = node.hw
        if node.hw > self.committed_end:
            self.fail(f"node {n}: high watermark {node.hw} beyond what was ever committed "
                      f"{self.committed_end}")
        # ConsistentCommittedData / no committed entry lost on a running node
        log = node.log
        self._check_snapshot(n, node, tr)
        if log.end_offset < tr.verified:
            self.fail(f"node {n}: truncated committed entries ({tr.verified} -> "
                      f"{log.end_offset})")
        # a node's own committed prefix must equal the cluster's (beyond its HW it may
        # still hold a stale suffix that its next fetch truncates)
        upto = min(log.end_offset, node.hw, self.committed_end)
        if upto > tr.verified:
            for b in log.read(tr.verified, 1 << 62):
                if b.base_offset >= upto:
                    break
                for i, e in enumerate(_entries(b.slice(b.base_offset, upto))):
                    off = max(b.base_offset, tr.verified) + i
                    if self.ref[off] != e:
                        self.fail(f"node {n}: entry at offset {off} differs from the committed "
                                  f"one ({e!r} != {self.ref[off]!r})")
            tr.verified = upto

    def _check_snapshot(self, n: int, node: RaftNode, tr: _NodeTrack) -> None:
        snap = node.snapshot
        if snap is None or snap is tr.snapshot:
            return
        tr.snapshot = snap
        end = snap.end_offset
        if end > self.committed_end:
            self.fail(f"node {n}: snapshot {snap.id} goes beyond what was ever committed "
                      f"{self.committed_end}")
        if self.ref[end - 1][0] != snap.id.epoch:
            self.fail(f"node {n}: snapshot {snap.id} has epoch {snap.id.epoch}, the committed "
                      f"entry at {end - 1} epoch {self.ref[end - 1][0]}")
        state = self.sim.snapshot_state
        if state is not None and tuple(snap.records) != tuple(state(end)):
            self.fail(f"node {n}: snapshot {snap.id} does not hold the committed state")
        if node.log.start_offset != end:
            self.fail(f"node {n}: log starts at {node.log.start_offset}, snapshot ends at {end}")
        tr.verified = max(tr.verified, end)

    @staticmethod
    def _epoch_matches(log: RaftLog, offset: int, want: int) -> bool:
        """The entry at ``offset - 1`` has epoch ``want`` (below the log start the snapshot
        holds the committed prefix, which :meth:`_check_snapshot` verified)."""
        return offset < log.start_offset or log.epoch_at(offset - 1) == want

    def _has_prefix(self, n: int, offset: int) -> bool:
        """Node ``n`` durably holds the committed prefix up to ``offset`` (Log Matching: the
        same epoch at ``offset - 1`` means the same prefix)."""
        want = self.ref[offset - 1][0]
        st = self.sim.storages[n]
        node = self.sim.nodes.get(n)
        if isinstance(st, MemoryStorage):
            if st.durable_end < offset:
                return False
            b = next((b for b in reversed(st.durable) if b.base_offset <= offset - 1), None)
            if b is not None and b.epoch != want:
                return False
            snap = st.snapshot
            if b is None and (snap is None or (offset == snap.end_offset
                                               and snap.id.epoch != want)):
                return False
            return node is None or (node.log.end_offset >= offset
                                    and self._epoch_matches(node.log, offset, want))
        if node is None:
            return False
        return (node.durable_end >= offset and node.log.end_offset >= offset
                and self._epoch_matches(node.log, offset, want))

    def _check_majority(self) -> None:
        """The committed end survives any election, and the leader committed it by a majority.

        Two checks, because a committed entry need not stay on a *majority* of the
        configuration left in force: a leader counts a voter addition as soon as it appends
        it (Raft thesis 4.1; Kafka's LeaderState uses the last voter set, committed or not),
        so with 4 voters adding a 5th it commits on 3 of the 5 — 2 of the 4 old voters. If the
        addition is then truncated, 2 of 4 hold the entry: no longer a majority, yet every
        majority of the 4 (3 of them) includes a holder, who refuses its vote to a shorter log
        (thesis 3.6.3). So (1) the committed end is durable on nodes that every majority of
        some configuration in force meets; (2) Kafka's MajorityReachedHighWatermark
        (RaftEventSimulationTest, KIP-853): the live leader of the highest epoch has its high
        watermark on a majority of its last voter set or of the voter set at the high
        watermark."""
        c = self.committed_end
        if c == 0:
            return
        self._check_leader_majority()
        candidates: list[tuple[int, ...]] = []
        for n, node in self.sim.nodes.items():
            # configurations as seen by nodes that hold the committed prefix (a zombie
            # leader's stale log does not tell which configuration is in force)
            if node is not None and self._has_prefix(n, c):
                at = node.log.config_at(c - 1)
                candidates.append(at[1].current_voters if at else node.bootstrap_voters)
                candidates.append(node.voters())
            elif (node is not None and node.is_leader and node.log.end_offset >= c
                  and self._epoch_matches(node.log, c, self.ref[c - 1][0])):
                # a leader counts the configuration it appended at once (even unflushed)
                candidates.append(node.voters())
        if not candidates:
            return  # every holder is down; their logs are checked when they restart
        for voters in candidates:
            if len(self._lacking(voters, c)) < majority(len(voters)):
                return
        self.fail(f"committed end {c} is not durable on nodes that every majority of a "
                  f"configuration in force meets {candidates}: lacking "
                  f"{[self._lacking(v, c) for v in candidates]}")

    def _lacking(self, voters: tuple[int, ...], offset: int) -> list[int]:
        """The voters that do not durably hold the committed prefix up to ``offset``."""
        return [v for v in voters if v not in self.sim.nodes or not self._has_prefix(v, offset)]

    def _check_leader_majority(self) -> None:
        lid = self.sim.leader()
        if lid is None:
            return
        leader = self.sim.node(lid)
        hw = leader.hw
        if hw <= leader.log.start_offset:
            return  # a snapshot (checked against the committed prefix) or nothing yet
        last = leader.voters()
        at = leader.log.config_at(hw - 1)
        at_hw = at[1].current_voters if at else leader.bootstrap_voters
        for voters in (last, at_hw):
            if len(voters) - len(self._lacking(voters, hw)) >= majority(len(voters)):
                return
        self.fail(f"leader {lid} of epoch {leader.epoch}: high watermark {hw} is durable on "
                  f"no majority of its last voters {last} (lacking "
                  f"{self._lacking(last, hw)}) nor of the voters at it {at_hw} (lacking "
                  f"{self._lacking(at_hw, hw)})")

    def _check_configs(self) -> None:
        committed: VoterAssignment | None = None
        in_force: list[tuple[int, ...]] = []
        for n, node in self.sim.nodes.items():
            if node is None:
                continue
            configs = node.log.configs
            for (_, a), (_, b) in itertools.pairwise(configs):
                if len(set(a.current_voters) ^ set(b.current_voters)) > 1:
                    self.fail(f"node {n}: voter change {a.current_voters} -> "
                              f"{b.current_voters} is not a single-server step")
            if self.committed_end and not self._has_prefix(n, self.committed_end):
                continue  # lacks committed entries: cannot be elected
            at = node.log.config_at(self.committed_end - 1) if self.committed_end else None
            if at is not None:
                committed = at[1]
            in_force.extend(c.current_voters for off, c in configs if off >= self.committed_end)
        if committed is None:
            return
        for cfg in in_force:
            if disjoint_majorities_possible(committed.current_voters, cfg):
                self.fail(f"configurations {committed.current_voters} and {cfg} can both be in "
                          f"force with disjoint majorities")

    def _check_describe(self) -> None:
        lid = self.sim.leader()
        if lid is None:
            return
        leader = self.sim.node(lid)
        resp = self.sim.describe_quorum()
        st = resp.status
        if st is None:
            self.fail(f"leader {lid} did not answer DescribeQuorum: {resp.error}")
            return
        if (st.leader_id, st.leader_epoch, st.high_watermark) != (lid, leader.epoch, leader.hw):
            self.fail(f"DescribeQuorum says leader {st.leader_id} epoch {st.leader_epoch} HW "
                      f"{st.high_watermark}; truth {lid}/{leader.epoch}/{leader.hw}")
        # KIP-853: CurrentVoters are the committed ones; an uncommitted change is pending
        at = leader.log.config_at(leader.hw - 1) if leader.hw > 0 else None
        committed = at[1].current_voters if at else leader.bootstrap_voters
        latest = leader.log.latest_config()
        if latest is None:
            pending = None
        elif latest[0] >= leader.hw:
            pending = latest[1].target_voters or latest[1].current_voters
        else:
            pending = latest[1].target_voters
        if st.current_voters != committed or st.target_voters != pending:
            self.fail(f"DescribeQuorum voters {st.current_voters}/{st.target_voters} != "
                      f"committed {committed} / pending {pending}")
        leo = leader.log.end_offset
        for r in st.replicas:
            if r.lag != (leo - r.log_end_offset if r.log_end_offset >= 0 else leo):
                self.fail(f"DescribeQuorum lag of {r.replica_id} is {r.lag}, truth "
                          f"{leo - r.log_end_offset}")
            node = self.sim.nodes.get(r.replica_id)
            if r.replica_id == lid:
                if r.log_end_offset != leo:
                    self.fail("DescribeQuorum: leader log end offset is wrong")
                continue
            if (node is not None and node.epoch == leader.epoch
                    and node.leader_id == lid and r.log_end_offset > node.log.end_offset):
                self.fail(f"DescribeQuorum: replica {r.replica_id} reported at "
                          f"{r.log_end_offset}, it only has {node.log.end_offset}")
        followers = [r for r in st.replicas if r.status == "Follower"]
        if st.max_follower_lag != max((r.lag for r in followers), default=0):
            self.fail("DescribeQuorum MaxFollowerLag is not the maximum follower lag")

    def check_quiescent(self) -> None:
        """After healing and draining: every follower row equals the follower's log end."""
        lid = self.sim.leader()
        if lid is None:
            self.fail("no leader after healing the network")
            return
        st = self.sim.describe_quorum().status
        assert st is not None
        for r in st.replicas:
            node = self.sim.nodes.get(r.replica_id)
            if node is not None and r.log_end_offset != node.log.end_offset:
                self.fail(f"quiescent: DescribeQuorum reports {r.replica_id} at "
                          f"{r.log_end_offset}, truth {node.log.end_offset}")
