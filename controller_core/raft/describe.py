"""DescribeQuorum result and the two tables ``kafka-metadata-quorum --describe`` prints."""

from __future__ import annotations

from dataclasses import dataclass

from controller_core.errors import NONE, ErrorCode


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    replica_id: int
    log_end_offset: int  # -1 when the leader has not heard from the replica
    lag: int  # leader log end offset - log_end_offset
    lag_time_ms: int  # now - last caught-up time
    status: str  # "Leader" | "Follower" | "Observer"
    is_reassign_target: bool
    last_fetch_timestamp: int  # leader clock, -1 if never
    last_caught_up_timestamp: int  # leader clock, -1 if never


@dataclass(frozen=True, slots=True)
class QuorumStatus:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    max_follower_lag: int
    max_follower_lag_time_ms: int
    current_voters: tuple[int, ...]
    target_voters: tuple[int, ...] | None
    replicas: tuple[ReplicaStatus, ...]  # voters first (leader first), then observers

    def replica(self, replica_id: int) -> ReplicaStatus:
        for r in self.replicas:
            if r.replica_id == replica_id:
                return r
        raise KeyError(f"replica {replica_id} is neither a voter nor a known observer")


@dataclass(frozen=True, slots=True)
class DescribeQuorumResponse:
    """The leader answers with ``status``; any other node with the leader it knows."""

    error: ErrorCode
    leader_id: int
    leader_epoch: int
    status: QuorumStatus | None = None

    @property
    def ok(self) -> bool:
        return self.error == NONE


def _ids(ids: tuple[int, ...] | None) -> str:
    return "None" if ids is None else "[" + ", ".join(str(i) for i in ids) + "]"


def format_status(q: QuorumStatus) -> str:
    """``kafka-metadata-quorum --describe --status``."""
    rows = [
        ("LeaderId:", str(q.leader_id)),
        ("LeaderEpoch:", str(q.leader_epoch)),
        ("HighWatermark:", str(q.high_watermark)),
        ("MaxFollowerLag:", str(q.max_follower_lag)),
        ("MaxFollowerLagTimeMs:", str(q.max_follower_lag_time_ms)),
        ("CurrentVoters:", _ids(q.current_voters)),
        ("TargetVoters:", _ids(q.target_voters)),
    ]
    width = max(len(k) for k, _ in rows) + 2
    return "\n".join(f"{k:<{width}}{v}" for k, v in rows) + "\n"


REPLICATION_HEADER = ("ReplicaId", "LogEndOffset", "Lag", "LagTimeMs", "Status",
                      "IsReassignTarget")


def format_replication(q: QuorumStatus) -> str:
    """``kafka-metadata-quorum --describe --replication``."""
    rows = [REPLICATION_HEADER] + [
        (str(r.replica_id), str(r.log_end_offset), str(r.lag), str(r.lag_time_ms), r.status,
         "Yes" if r.is_reassign_target else "No")
        for r in q.replicas
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(REPLICATION_HEADER))]
    return "".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n"
        for row in rows)
