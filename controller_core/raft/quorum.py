"""The driver of a metadata quorum: N :class:`RaftNode` s on a simulated network and clock.

:class:`SimulatedQuorum` carries out every :class:`Ready` in the order the contract asks
(persist, fsync, then send and apply), delivers messages through
:class:`SimulatedNetwork` and runs timers from an event queue in simulated milliseconds.
The embedded Kafka cluster owns one: it proposes metadata records (``bytes``), waits for
them to commit and applies what :meth:`SimulatedQuorum.committed_since` /
``on_commit`` hand it. Node ids are Kafka broker ids: any node can join as an observer
(:meth:`add_node`) and be promoted by :meth:`alter_quorum`.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from controller_core.errors import NONE, KafkaApiError
from controller_core.raft.config import RaftConfig
from controller_core.raft.describe import DescribeQuorumResponse
from controller_core.raft.messages import NO_LEADER, Envelope
from controller_core.raft.network import NetworkConfig, SimulatedNetwork
from controller_core.raft.node import (
    NOT_LEADER_OR_FOLLOWER,
    AlterQuorumResult,
    NotLeaderError,
    RaftNode,
    Ready,
)
from controller_core.raft.records import Batch
from controller_core.raft.state import Role
from controller_core.raft.storage import DirectoryStorage, MemoryStorage, RaftStorage

CommitCallback = Callable[[list[Batch]], None]
SnapshotState = Callable[[int], Sequence[bytes]]
"""The application's state below an offset, as snapshot records (KIP-630)."""


@dataclass(slots=True)
class _Clock:
    """A node's local clock: ``offset + rate * global`` (drift between nodes)."""

    offset: float = 0.0
    rate: float = 1.0

    def local(self, t: float) -> int:
        return int(self.offset + self.rate * t)

    def global_of(self, local: int) -> float:
        return (local - self.offset) / self.rate


class SimulatedQuorum:
    def __init__(
        self,
        voters: Sequence[int],
        observers: Sequence[int] = (),
        *,
        seed: int = 0,
        config: RaftConfig | None = None,
        network: NetworkConfig | None = None,
        data_dir: Path | None = None,
        cluster_id: str | None = None,
        clock_drift: float = 0.0,
        on_commit: CommitCallback | None = None,
        storage_fsync: bool = True,
        snapshot_every: int | None = None,
        snapshot_state: SnapshotState | None = None,
    ) -> None:
        if not voters:
            raise ValueError("voters: give at least one node id for quorum.voters")
        if len(set(voters)) != len(voters):
            raise ValueError(f"voters: duplicate node ids in {list(voters)}")
        overlap = set(voters) & set(observers)
        if overlap:
            raise ValueError(f"observers {sorted(overlap)} are also listed as voters")
        if not 0.0 <= clock_drift < 0.5:
            raise ValueError(f"clock_drift must be in [0, 0.5), got {clock_drift}")
        self.seed = seed
        self.rng = random.Random(seed)
        self.config = config or RaftConfig()
        self.net = SimulatedNetwork(network or NetworkConfig(), random.Random(self.rng.random()))
        self.bootstrap_voters = tuple(voters)
        self.cluster_id = cluster_id
        self.data_dir = data_dir
        self.storage_fsync = storage_fsync
        self.clock_drift = clock_drift
        self.on_commit = on_commit
        if (snapshot_every is None) != (snapshot_state is None):
            raise ValueError("snapshot_every and snapshot_state go together")
        if snapshot_every is not None and snapshot_every <= 0:
            raise ValueError(f"snapshot_every must be > 0, got {snapshot_every}")
        self.snapshot_every = snapshot_every
        self.snapshot_state = snapshot_state
        self.snapshots_taken = 0
        self.snapshots_installed = 0  # fetched from a leader (FetchSnapshot)
        self._offered: tuple[int, Sequence[bytes]] | None = None  # see offer_snapshot
        self.now: float = 0.0
        self.nodes: dict[int, RaftNode | None] = {}
        self.storages: dict[int, RaftStorage] = {}
        self.clocks: dict[int, _Clock] = {}
        self._queue: list[tuple[float, int, int, Envelope | None]] = []
        self._seq = 0
        self._tick_at: dict[int, float] = {}
        self.committed: list[Batch] = []
        self.committed_end = 0
        self.messages_delivered = 0
        self.events = 0
        self.observers_of_events: list[Callable[[], None]] = []
        self._holds: list[Callable[[Envelope], bool]] = []
        self.held: list[Envelope] = []
        for n in [*voters, *observers]:
            self._create(n)

    # ================================================================ membership of the sim
    def _create(self, n: int) -> None:
        if self.data_dir is not None:
            self.storages[n] = DirectoryStorage(self.data_dir / f"node-{n}",
                                                fsync=self.storage_fsync)
        else:
            self.storages[n] = MemoryStorage()
        drift = self.clock_drift
        self.clocks[n] = _Clock(offset=self.rng.uniform(0, 1000) if drift else 0.0,
                                rate=1.0 + self.rng.uniform(-drift, drift))
        self._boot(n)

    def add_node(self, node_id: int) -> None:
        """Start a new node (a broker) that joins as an observer of the quorum."""
        if node_id < 0:
            raise ValueError(f"node id must be >= 0, got {node_id}")
        if node_id in self.nodes:
            raise ValueError(f"node {node_id} already exists")
        self._create(node_id)

    def _boot(self, n: int) -> None:
        rec = self.storages[n].load()
        node = RaftNode(
            n, voters=self.bootstrap_voters, rng=random.Random(self.rng.getrandbits(64)),
            now_ms=self.clocks[n].local(self.now), config=self.config,
            quorum_state=rec.quorum_state, log=rec.batches, cluster_id=self.cluster_id,
            bootstrap_servers=sorted(self.bootstrap_voters), host=f"node-{n}", port=9093,
            snapshot=rec.snapshot)
        self.nodes[n] = node
        self._process(n)

    @property
    def node_ids(self) -> list[int]:
        return sorted(self.nodes)

    def node(self, n: int) -> RaftNode:
        node = self.nodes.get(n)
        if node is None:
            raise KeyError(f"node {n} is not running" if n in self.nodes else
                           f"node {n} does not exist")
        return node

    def alive(self, n: int) -> bool:
        return self.nodes.get(n) is not None

    # ================================================================ faults
    def crash(self, n: int, *, lose_unflushed: bool = True) -> None:
        """Hard-kill node ``n``; with ``lose_unflushed`` its page cache is lost too."""
        if not self.alive(n):
            raise ValueError(f"node {n} is not running")
        st = self.storages[n]
        if isinstance(st, MemoryStorage):
            st.crash(lose_unflushed)
        elif isinstance(st, DirectoryStorage):
            st.close()
        self.nodes[n] = None
        self._tick_at.pop(n, None)

    def restart(self, n: int) -> None:
        if n not in self.nodes:
            raise ValueError(f"node {n} does not exist")
        if self.alive(n):
            raise ValueError(f"node {n} is already running")
        self._boot(n)

    def partition(self, side_a: Sequence[int], side_b: Sequence[int], *,
                  symmetric: bool = True) -> None:
        self.net.partition(set(side_a), set(side_b), symmetric=symmetric)

    def isolate(self, n: int) -> None:
        self.partition([n], [m for m in self.nodes if m != n])

    def heal(self) -> None:
        self.net.heal()

    def expire_timer(self, n: int) -> None:
        """Fire node ``n``'s election (or fetch) timer now, as if it had drawn a short one."""
        node = self.node(n)
        now = self.clocks[n].local(self.now)
        node._election_deadline = min(node._election_deadline, now)
        if node.role is Role.FOLLOWER:
            node._fetch_deadline = min(node._fetch_deadline, now)
        node.tick(now)
        self._process(n)

    def resign(self, n: int) -> None:
        """Graceful shutdown of leader ``n``: it resigns (EndQuorumEpoch to the voters)."""
        self.node(n).resign(self.clocks[n].local(self.now))
        self._process(n)

    def hold(self, match: Callable[[Envelope], bool]) -> None:
        """From now on, set aside every message ``match`` accepts (a network that delays it
        for as long as the test wants) until :meth:`release`."""
        self._holds.append(match)

    def release(self) -> int:
        """Stop holding; the held messages go out now (through the network again)."""
        held, self.held, self._holds = self.held, [], []
        for env in held:
            for t in self.net.delays(env.src, env.dst, env.size_bytes, self.now):
                self._push(t, env.dst, env)
        return len(held)

    def connected(self) -> bool:
        """No partition is in place and no message is being held back."""
        return not self.net.blocked and not self._holds

    # ================================================================ event loop
    def _push(self, t: float, n: int, env: Envelope | None) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (t, self._seq, n, env))

    def _schedule_tick(self, n: int) -> None:
        node = self.nodes.get(n)
        if node is None:
            return
        local = node.next_deadline()
        if local >= (1 << 61):
            return
        t = max(self.now, math.ceil(self.clocks[n].global_of(local) * 1000) / 1000)
        while self.clocks[n].local(t) < local:
            t += 0.001
        if self._tick_at.get(n, math.inf) > t:
            self._tick_at[n] = t
            self._push(t, n, None)

    def _process(self, n: int) -> None:
        node = self.nodes[n]
        assert node is not None
        while node.has_ready():
            self._carry_out(n, node, node.ready())
            if self._snapshot_due(node):
                assert self.snapshot_state is not None
                node.create_snapshot(node.hw, self.snapshot_state(node.hw))
                self.snapshots_taken += 1
            else:
                self._adopt_offered(node)
        self._schedule_tick(n)

    def _carry_out(self, n: int, node: RaftNode, r: Ready) -> None:
        st = self.storages[n]
        if r.quorum_state is not None:
            st.save_quorum_state(r.quorum_state)
        if r.snapshot is not None:
            st.save_snapshot(r.snapshot, reset=r.snapshot_reset)
            self.snapshots_installed += r.snapshot_reset
        if r.truncate_to is not None:
            st.truncate(r.truncate_to)
        if r.appends:
            st.append(r.appends)
        if r.sync:
            st.flush()
        for env in r.messages:
            if self._holds and any(m(env) for m in self._holds):
                self.held.append(env)
                continue
            for t in self.net.delays(env.src, env.dst, env.size_bytes, self.now):
                self._push(t, env.dst, env)
        if r.committed and r.high_watermark > self.committed_end:
            fresh = [b.slice(max(b.base_offset, self.committed_end), b.end_offset)
                     for b in r.committed if b.end_offset > self.committed_end]
            self.committed.extend(fresh)
            self.committed_end = r.high_watermark
            if self.on_commit is not None and fresh:
                self.on_commit(fresh)
        node.advance(r)

    def step(self, until: float = math.inf) -> bool:
        """Run the next event if it is due by ``until``; False when there is none."""
        while self._queue and self._queue[0][0] <= until:
            t, _, n, env = heapq.heappop(self._queue)
            self.now = max(self.now, t)
            node = self.nodes.get(n)
            if env is None:
                if self._tick_at.get(n) != t:
                    continue  # superseded tick
                del self._tick_at[n]
                if node is None:
                    continue
                node.tick(self.clocks[n].local(self.now))
            else:
                if node is None or not self.net.can_deliver(env.src, env.dst):
                    continue
                self.messages_delivered += 1
                node.step(env, self.clocks[n].local(self.now))
            self._process(n)
            self.events += 1
            for cb in self.observers_of_events:
                cb()
            return True
        return False

    def advance(self, dt_ms: float) -> None:
        """Let ``dt_ms`` of simulated time pass."""
        if dt_ms < 0:
            raise ValueError(f"advance: dt_ms must be >= 0, got {dt_ms}")
        end = self.now + dt_ms
        while self.step(end):
            pass
        self.now = end

    def run_until(self, pred: Callable[[], bool], timeout_ms: float) -> bool:
        end = self.now + timeout_ms
        while not pred():
            if not self.step(end):
                self.now = end
                return pred()
        return True

    # ================================================================ the application side
    def leader(self) -> int | None:
        """The live leader of the highest epoch, if any."""
        best: tuple[int, int] | None = None
        for n, node in self.nodes.items():
            if node is not None and node.is_leader and (best is None or node.epoch > best[0]):
                best = (node.epoch, n)
        return best[1] if best else None

    def run_until_leader(self, timeout_ms: float = 10_000) -> int | None:
        self.run_until(lambda: self.leader() is not None, timeout_ms)
        return self.leader()

    def _leader_node(self) -> RaftNode:
        lid = self.leader()
        if lid is None:
            hints = [n.leader_id for n in self.nodes.values() if n is not None]
            raise NotLeaderError(-1, next((h for h in hints if h is not None), None),
                                 max((n.epoch for n in self.nodes.values() if n), default=0))
        return self.node(lid)

    def propose(self, records: Sequence[bytes]) -> int:
        """Append records at the leader; returns the offset of the last one.

        Raises :class:`NotLeaderError` (a KafkaApiError, NOT_LEADER_OR_FOLLOWER) when no
        leader is up. Committed once :attr:`committed_end` passes the offset.
        """
        node = self._leader_node()
        off = node.propose(records, self.clocks[node.id].local(self.now))
        self._process(node.id)
        return off

    def run_until_committed(self, offset: int, timeout_ms: float = 10_000) -> bool:
        return self.run_until(lambda: self.committed_end > offset, timeout_ms)

    def committed_since(self, offset: int) -> Iterator[tuple[int, bytes]]:
        """(offset, record) of every committed application record at or after ``offset``."""
        start = bisect.bisect_right(self.committed, offset, key=lambda b: b.end_offset)
        for b in self.committed[start:]:
            if b.end_offset <= offset or b.control is not None:
                continue
            for i, rec in enumerate(b.records):
                if b.base_offset + i >= offset:
                    yield b.base_offset + i, rec

    def high_watermark(self) -> int:
        return self.committed_end

    # ================================================================ snapshots (KIP-630)
    def _snapshot_due(self, node: RaftNode) -> bool:
        """Kafka's policy: a node snapshots once enough has committed since its last one."""
        every = self.snapshot_every
        return (every is not None and node.hw <= self.committed_end
                and node.hw - node.log_start_offset >= every)

    def create_snapshot(self, n: int, end_offset: int, records: Sequence[bytes]) -> bool:
        """Node ``n`` snapshots the application state ``records`` at ``end_offset``; False if
        it cannot (down, not that far committed, or already past it)."""
        node = self.nodes.get(n)
        if node is None or not (node.log_start_offset < end_offset <= node.hw):
            return False
        node.create_snapshot(end_offset, records)
        self.snapshots_taken += 1
        self._process(n)
        return True

    def offer_snapshot(self, end_offset: int, records: Sequence[bytes]) -> int:
        """The application's state at ``end_offset``: every node snapshots it as soon as it
        has committed that far (at once if it has; returns how many did). The application
        holds everything below, so the committed entries kept for it are dropped too."""
        self._offered = (end_offset, records)
        self.committed = [b for b in self.committed if b.end_offset > end_offset]
        took = 0
        for n, node in self.nodes.items():
            if node is not None and self._adopt_offered(node):
                took += 1
                self._process(n)
        return took

    def _adopt_offered(self, node: RaftNode) -> bool:
        o = self._offered
        if o is None or not node.log_start_offset < o[0] <= node.hw:
            return False
        node.create_snapshot(o[0], o[1])
        self.snapshots_taken += 1
        return True

    def committed_start(self) -> int:
        """The first offset :meth:`committed_since` can hand out (the rest is in snapshots)."""
        return self.committed[0].base_offset if self.committed else self.committed_end

    def close(self) -> None:
        """Release the nodes' files (the quorum can be opened again from ``data_dir``)."""
        for st in self.storages.values():
            if isinstance(st, DirectoryStorage):
                st.close()

    # ================================================================ admin
    def describe_quorum(self) -> DescribeQuorumResponse:
        """Ask the leader (as AdminClient does after DiscoverBrokers)."""
        lid = self.leader()
        if lid is None:
            hint = max(((n.epoch, n.leader_id) for n in self.nodes.values()
                        if n is not None and n.leader_id is not None), default=None)
            epoch = max((n.epoch for n in self.nodes.values() if n), default=0)
            return DescribeQuorumResponse(NOT_LEADER_OR_FOLLOWER,
                                          hint[1] if hint and hint[1] is not None else NO_LEADER,
                                          epoch)
        node = self.node(lid)
        return node.describe_quorum(self.clocks[lid].local(self.now))

    def alter_quorum(self, target_voters: Sequence[int] | None) -> AlterQuorumResult:
        """AlterQuorum at the leader; ``None`` (or the current voters) cancels."""
        node = self._leader_node()
        if target_voters is not None:
            unknown = sorted(i for i in set(target_voters) - set(self.nodes) if i >= 0)
            if unknown:
                from controller_core.raft.node import VOTER_NOT_FOUND
                return AlterQuorumResult(
                    VOTER_NOT_FOUND,
                    f"targetVoters names node id(s) {unknown} that do not exist in this "
                    f"cluster (nodes: {self.node_ids})",
                    node.id, node.epoch, node.voters(), node.target_voters())
        res = node.alter_quorum(target_voters, self.clocks[node.id].local(self.now))
        self._process(node.id)
        return res

    def run_until_voters(self, voters: Sequence[int], timeout_ms: float = 60_000) -> bool:
        """Run until the leader's committed configuration is ``voters`` with no target left."""
        want = tuple(sorted(voters))

        def done() -> bool:
            lid = self.leader()
            if lid is None:
                return False
            node = self.node(lid)
            latest = node.log.latest_config()
            return (latest is not None and latest[0] < node.hw
                    and latest[1].current_voters == want and latest[1].target_voters is None)
        return self.run_until(done, timeout_ms)


__all__ = ["NONE", "KafkaApiError", "SimulatedQuorum"]
