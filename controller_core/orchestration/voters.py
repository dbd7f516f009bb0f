"""The voter-change walker: from the current voters to the target, one safe step at a time.

Each step adds or removes a single voter (KIP-853's AddRaftVoter / RemoveRaftVoter, which
is also how KIP-595's AlterQuorum moves), so any two configurations that can be in force
overlap in a majority. Steps alternate so the quorum never grows by more than one voter
above the larger of the two sets. The quorum promotes a node only once it has caught up as
an observer, and a leader that removes itself steps down only after the removal commits;
the walker removes the leader last. Works on any backend that implements the quorum calls of the
:class:`~controller_core.admin.ClusterAdmin` port.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Protocol

from controller_core.errors import ApiResult, KafkaApiError
from controller_core.raft.describe import QuorumStatus

# A new voter must have caught up as an observer: fetched to the leader's end within the
# last controller.quorum.fetch.timeout.ms (Kafka's default), as the leader checks.
CAUGHT_UP_MS = 2_000


class QuorumAdmin(Protocol):
    def describe_quorum(self) -> QuorumStatus: ...

    def add_raft_voter(self, node_id: int, endpoints: Sequence[str] = ()) -> ApiResult: ...

    def remove_raft_voter(self, node_id: int) -> ApiResult: ...


class WalkPhase(StrEnum):
    RUNNING = "Running"
    COMPLETED = "Completed"
    FAILED = "Failed"


@dataclass(frozen=True, slots=True)
class WalkProgress:
    phase: WalkPhase
    current: tuple[int, ...]
    target: tuple[int, ...]
    action: str  # what this step did or waits for, in words
    leader_id: int
    leader_epoch: int
    high_watermark: int
    # this step's change was accepted: AddRaftVoter/RemoveRaftVoter answer once it is
    # committed, so the next step may look at once
    acted: bool = False


def voter_set_problems(target: Sequence[int], known: set[int], live: set[int]) -> list[str]:
    """Why ``target`` cannot be the voter set, in words; empty when it can."""
    problems = []
    if not target:
        return ["voters: the voter set is empty; name at least one node id"]
    if len(set(target)) != len(target):
        problems.append(f"voters: {list(target)} lists a node id twice")
    unknown = sorted(set(target) - known)
    if unknown:
        problems.append(f"voters: unknown node id(s) {unknown}; nodes are {sorted(known)} (a "
                        "new controller must be running and fetching the metadata log first)")
    up = set(target) & live
    majority = len(set(target)) // 2 + 1
    if not unknown and len(up) < majority:
        problems.append(
            f"voters: only {len(up)} of {sorted(set(target))} are live, fewer than the "
            f"majority of {majority} the new quorum needs to elect a leader")
    return problems


class VoterChangeWalker:
    """``endpoints``: the controller listeners of nodes that are not voters yet ("NAME://
    host:port"); a real quorum needs them to add a voter, the embedded one does not."""

    def __init__(self, admin: QuorumAdmin, target: Sequence[int],
                 endpoints: Mapping[int, Sequence[str]] | None = None) -> None:
        self.admin = admin
        self.target = tuple(sorted(set(target)))
        self.endpoints = dict(endpoints or {})

    def step(self) -> WalkProgress:
        """Look at the quorum and take at most one step toward the target."""
        q = self.admin.describe_quorum()
        current = tuple(sorted(q.current_voters))
        if q.target_voters is not None and tuple(sorted(q.target_voters)) != current:
            return self._progress(q, WalkPhase.RUNNING,
                                  "waiting for the voter change in flight to commit")
        if current == self.target:
            return self._progress(q, WalkPhase.COMPLETED, "voters are as desired")
        to_add = [n for n in self.target if n not in current]
        to_remove = [n for n in current if n not in self.target]
        if to_add and (len(current) <= len(self.target) or not to_remove):
            # The quorum promotes a new voter only once it has caught up as an observer: ask
            # then, not before (Kafka's leader would answer "lagging behind" and time out).
            node = to_add[0]
            waiting = _not_caught_up(q, node)
            if waiting:
                return self._progress(q, WalkPhase.RUNNING, waiting)
            return self._act(q, self.admin.add_raft_voter(node, self.endpoints.get(node, ())),
                             f"adding voter {node}")
        # Remove followers before the leader; the leader resigns once its removal commits.
        node = sorted(to_remove, key=lambda n: (n == q.leader_id, n))[0]
        return self._act(q, self.admin.remove_raft_voter(node), f"removing voter {node}")

    def _progress(self, q: QuorumStatus, phase: WalkPhase, action: str) -> WalkProgress:
        return WalkProgress(phase, tuple(sorted(q.current_voters)), self.target, action,
                            q.leader_id, q.leader_epoch, q.high_watermark)

    def _act(self, q: QuorumStatus, result: ApiResult, action: str) -> WalkProgress:
        if result.ok:
            return replace(self._progress(q, WalkPhase.RUNNING, action), acted=True)
        if result.error.retriable:
            return self._progress(q, WalkPhase.RUNNING, f"{action}: {result.error.name}, retrying")
        raise KafkaApiError(result.error, f"{action}: {result.message}")


def _not_caught_up(q: QuorumStatus, node: int) -> str:
    """Why ``node`` may not be added yet, in words; empty when it may."""
    replica = next((r for r in q.replicas if r.replica_id == node), None)
    if replica is None:
        return (f"waiting for node {node} to fetch the metadata log as an observer (start it "
                "as a controller formatted with --no-initial-controllers)")
    if replica.lag > 0 and not 0 <= replica.lag_time_ms <= CAUGHT_UP_MS:
        return f"waiting for node {node} to catch up ({replica.lag} records behind)"
    return ""
