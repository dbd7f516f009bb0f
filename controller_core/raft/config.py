"""Quorum settings, named and defaulted as Kafka's ``controller.quorum.*`` configs (ms)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RaftConfig:
    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    fetch_max_wait_ms: int = 500
    """How long the leader parks a Fetch that has nothing new (Kafka's long poll)."""
    fetch_max_bytes: int = 8 * 1024 * 1024
    leader_flush_delay_ms: int = 0
    """The leader appends proposals at once but fsyncs them on its next tick, this much later
    (a write that a hard kill can lose). Followers always fsync before they acknowledge."""

    def __post_init__(self) -> None:
        for name in ("election_timeout_ms", "fetch_timeout_ms", "election_backoff_max_ms",
                     "request_timeout_ms", "retry_backoff_ms", "fetch_max_wait_ms",
                     "fetch_max_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"RaftConfig.{name} must be > 0, got {getattr(self, name)}")
        if self.leader_flush_delay_ms < 0:
            raise ValueError("RaftConfig.leader_flush_delay_ms must be >= 0")
