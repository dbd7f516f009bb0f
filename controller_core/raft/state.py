"""The persistent quorum state (KIP-595 ``quorum-state`` file) and the roles of a node."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Role(enum.Enum):
    LEADER = "Leader"
    PROSPECTIVE = "Prospective"  # KIP-996 pre-vote: asks before bumping the epoch
    CANDIDATE = "Candidate"
    FOLLOWER = "Follower"
    UNATTACHED = "Unattached"
    VOTED = "Voted"
    RESIGNED = "Resigned"


@dataclass(frozen=True, slots=True)
class QuorumState:
    """What must be durable before a node acts on it: epoch, known leader, vote cast."""

    epoch: int = 0
    leader_id: int | None = None
    voted_for: int | None = None

    def to_json(self) -> dict[str, int | None]:
        return {"leaderEpoch": self.epoch, "leaderId": self.leader_id, "votedId": self.voted_for}

    @classmethod
    def from_json(cls, d: dict[str, int | None]) -> QuorumState:
        epoch = d.get("leaderEpoch")
        if not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"quorum-state: leaderEpoch must be an integer >= 0, got {epoch!r}")
        return cls(epoch, d.get("leaderId"), d.get("votedId"))
