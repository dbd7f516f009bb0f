"""The RPCs of KIP-595 as plain values. A node's inbox and outbox are :class:`Envelope` s.

Fields follow the proposal's schemas (single metadata partition, so no topic/partition
arrays). ``cluster_id`` is ``None`` when the sender does not know it yet (a fresh cluster).
"""

from __future__ import annotations

from dataclasses import dataclass

from controller_core.errors import NONE, ErrorCode
from controller_core.raft.records import Batch
from controller_core.raft.snapshot import SnapshotId

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class VoteRequest:
    cluster_id: str | None
    candidate_epoch: int
    candidate_id: int
    last_epoch: int
    last_epoch_end_offset: int
    pre_vote: bool = False  # KIP-996: ask without bumping anyone's epoch


@dataclass(frozen=True, slots=True)
class VoteResponse:
    error: ErrorCode
    leader_id: int
    leader_epoch: int
    vote_granted: bool
    candidate_epoch: int  # echo, so a late grant for an older epoch is not counted
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    cluster_id: str | None
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    error: ErrorCode
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    cluster_id: str | None
    replica_id: int
    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    error: ErrorCode
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    cluster_id: str | None
    replica_id: int
    leader_epoch: int  # the epoch the fetcher believes current
    fetch_offset: int
    last_fetched_epoch: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchResponse:
    error: ErrorCode
    leader_id: int
    leader_epoch: int
    high_watermark: int
    batches: tuple[Batch, ...] = ()
    diverging_epoch: int = -1
    diverging_end_offset: int = -1
    fetch_offset: int = -1  # echo of the request
    last_fetched_epoch: int = -1  # echo of the request
    snapshot_id: SnapshotId | None = None  # KIP-630: fetch this snapshot first (FetchSnapshot)

    @property
    def diverging(self) -> bool:
        return self.diverging_epoch >= 0


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    """KIP-630: ``max_bytes`` of the snapshot ``snapshot_id`` from byte ``position``."""

    cluster_id: str | None
    replica_id: int
    current_leader_epoch: int
    snapshot_id: SnapshotId
    position: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    error: ErrorCode
    leader_id: int
    leader_epoch: int
    snapshot_id: SnapshotId | None = None
    size: int = -1  # of the whole snapshot, in bytes
    position: int = -1
    data: bytes = b""  # Kafka's UnalignedRecords: any byte range of the snapshot


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """Connection information gossiped by DiscoverBrokers (newest boot timestamp wins)."""

    node_id: int
    boot_timestamp: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class DiscoverBrokersRequest:
    replica_id: int  # -1 for an admin client
    boot_timestamp: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class DiscoverBrokersResponse:
    error: ErrorCode
    cluster_id: str | None
    leader_id: int
    leader_epoch: int
    brokers: tuple[BrokerInfo, ...]


Request = (VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest | FetchRequest
           | DiscoverBrokersRequest | FetchSnapshotRequest)
Response = (VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse | FetchResponse
            | DiscoverBrokersResponse | FetchSnapshotResponse)
Body = Request | Response


@dataclass(frozen=True, slots=True)
class Envelope:
    src: int
    dst: int
    body: Body

    @property
    def size_bytes(self) -> int:
        if isinstance(self.body, FetchResponse):
            return 64 + sum(b.size_bytes for b in self.body.batches)
        if isinstance(self.body, FetchSnapshotResponse):
            return 64 + len(self.body.data)
        return 64


__all__ = ["NONE", "NO_LEADER"]
