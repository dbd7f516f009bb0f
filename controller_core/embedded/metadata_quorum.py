"""The embedded cluster's controllers: a KIP-595 Raft quorum that commits every metadata batch.

Wraps :class:`~controller_core.raft.quorum.SimulatedQuorum` for the cluster: keeps the
quorum's simulated clock in step with the cluster's (seconds there, milliseconds here),
proposes batches and reports whether exactly those batches committed, hands over committed
entries the cluster has not applied yet, and carries the quorum admin calls (DescribeQuorum,
AlterQuorum, AddRaftVoter / RemoveRaftVoter) with their validation. Node ids are broker ids:
a broker becomes a quorum node (an observer) the first time a voter change names it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from controller_core import errors
from controller_core.errors import ApiResult, KafkaApiError
from controller_core.orchestration.voters import voter_set_problems
from controller_core.raft.describe import QuorumStatus
from controller_core.raft.network import NetworkConfig
from controller_core.raft.node import NotLeaderError
from controller_core.raft.quorum import SimulatedQuorum
from controller_core.raft.snapshot import RaftSnapshot


class MetadataQuorum:
    def __init__(self, directory: Path, voters: Sequence[int], *, cluster_id: str, seed: int,
                 now_s: float, link_delay_ms: float, fsync: bool = True,
                 spare: Sequence[int] = ()) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        existing = sorted(int(p.name.removeprefix("node-")) for p in directory.glob("node-*")
                          if p.name.removeprefix("node-").isdigit())
        observers = sorted({*existing, *spare} - set(voters))
        self.q = SimulatedQuorum(
            list(voters), observers, seed=seed, data_dir=directory, cluster_id=cluster_id,
            network=NetworkConfig(one_way_delay_ms=link_delay_ms), storage_fsync=fsync)
        self._offset_ms = now_s * 1000.0 - self.q.now

    # -- time -----------------------------------------------------------------------------------
    def now_s(self) -> float:
        return (self.q.now + self._offset_ms) / 1000.0

    def rebase(self, now_s: float) -> None:
        """Let the quorum's present be the cluster's ``now_s``."""
        self._offset_ms = now_s * 1000.0 - self.q.now

    def advance_to(self, now_s: float) -> None:
        target = now_s * 1000.0 - self._offset_ms
        if target > self.q.now:
            self.q.advance(target - self.q.now)

    # -- committing -----------------------------------------------------------------------------
    def leader(self) -> int | None:
        return self.q.leader()

    def wait_caught_up(self, timeout_ms: float) -> bool:
        """Run until a leader has committed everything in its log (after a restart, the
        entries of earlier epochs commit with the new leader's first entry)."""
        def done() -> bool:
            lid = self.q.leader()
            return lid is not None and self.q.committed_end >= self.q.node(lid).log.end_offset
        return self.q.run_until(done, timeout_ms)

    @property
    def committed_end(self) -> int:
        return self.q.committed_end

    def commit(self, payloads: Sequence[bytes], timeout_ms: float) -> int | None:
        """Propose ``payloads`` and run the quorum until they commit. Returns the offset of
        the first, or None when they did not commit in time (they may still commit later, and
        then arrive through :meth:`committed_from`)."""
        if self.q.leader() is None and self.q.run_until_leader(timeout_ms) is None:
            return None
        try:
            last = self.q.propose(list(payloads))
        except NotLeaderError:
            return None
        first = last - len(payloads) + 1
        if not self.q.run_until_committed(last, timeout_ms):
            return None
        for off, rec in self.q.committed_since(first):
            if off > last:
                break
            if rec is not payloads[off - first]:
                return None  # the leader changed and another entry took the offset
        return first

    def committed_from(self, offset: int) -> Iterator[tuple[int, bytes]]:
        return self.q.committed_since(offset)

    def committed_start(self) -> int:
        """Committed entries below this are only in snapshots (KIP-630)."""
        return self.q.committed_start()

    # -- snapshots (KIP-630) --------------------------------------------------------------------
    def snapshot(self, end_offset: int, records: Sequence[bytes]) -> int:
        """Every node snapshots the state ``records`` at ``end_offset`` and drops its log
        below, as soon as it has committed that far (followers learn the high watermark a
        fetch later: give them that long). Returns how many nodes hold the snapshot; a node
        left below the leader's log start gets the leader's snapshot by FetchSnapshot."""
        self.q.offer_snapshot(end_offset, records)

        def holders() -> int:
            return sum(1 for node in self.q.nodes.values()
                       if node is not None and node.log_start_offset >= end_offset)
        running = sum(1 for node in self.q.nodes.values() if node is not None)
        # a follower parked in a long poll hears of the high watermark when the poll ends;
        # the wait is the controllers' own business: the cluster's clock does not move
        now_s = self.now_s()
        self.q.run_until(lambda: holders() == running, 2 * self.q.config.fetch_max_wait_ms)
        self.rebase(now_s)
        return holders()

    def latest_snapshot(self) -> RaftSnapshot | None:
        snaps = [node.snapshot for node in self.q.nodes.values()
                 if node is not None and node.snapshot is not None]
        return max(snaps, key=lambda s: s.end_offset, default=None)

    # -- admin ----------------------------------------------------------------------------------
    def describe(self) -> QuorumStatus:
        resp = self.q.describe_quorum()
        if not resp.ok or resp.status is None:
            raise KafkaApiError(resp.error, "the metadata quorum has no leader right now "
                                            f"(last known leader {resp.leader_id}); retry")
        return resp.status

    def nodes(self) -> list[int]:
        return self.q.node_ids

    def alive(self, node: int) -> bool:
        return node in self.q.nodes and self.q.alive(node)

    def alter(self, target: Iterable[int] | None, *, known: set[int],
              live: set[int]) -> ApiResult:
        """AlterQuorum: set the target voters (None cancels a pending change)."""
        if target is not None:
            wanted = list(target)
            problems = voter_set_problems(wanted, known, live)
            if problems:
                return ApiResult(errors.INVALID_REQUEST, "; ".join(problems))
            for node in wanted:
                if node not in self.q.nodes:
                    self.q.add_node(node)  # starts as an observer and catches up first
            self._wait_until_seen(wanted)
        # One voter change in flight (as in Kafka): the leader refuses, with the retriable
        # REQUEST_TIMED_OUT, until it has committed an entry of its epoch and the last voter
        # assignment. Wait for that in the controllers' time, as an admin client retries
        # within its timeout; what is still not committed then is answered as refused.
        self.wait_caught_up(self.q.config.request_timeout_ms)
        try:
            result = self.q.alter_quorum(None if target is None else sorted(set(target)))
        except NotLeaderError as e:
            return ApiResult(e.error, e.message)
        return ApiResult(result.error, result.message)

    def _wait_until_seen(self, nodes: Sequence[int]) -> None:
        """Give freshly started nodes time to fetch once, so the leader knows them."""
        def seen() -> bool:
            resp = self.q.describe_quorum()
            if resp.status is None:
                return False
            known = {r.replica_id for r in resp.status.replicas}
            return all(n in known or not self.q.alive(n) for n in nodes)
        self.q.run_until(seen, self.q.config.fetch_timeout_ms)

    def crash(self, node: int, *, lose_unflushed: bool) -> None:
        self.q.crash(node, lose_unflushed=lose_unflushed)

    def restart(self, node: int) -> None:
        self.q.restart(node)

    def close(self) -> None:
        self.q.close()
