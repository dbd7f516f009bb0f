"""The APIs ``cluster serve`` answers, with the version ranges ApiVersions advertises.

Only what is served is advertised. Produce, Fetch and ListOffsets are served for
kraftsman's throttle-marker topic only. Ranges are kafka-python's schema ranges (its classes
decode and encode them), narrowed where the server implements less (SaslHandshake v0 would
switch the connection to raw SASL frames, which this server does not speak).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from controller_core.wire.broker_messages import (
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
)
from controller_core.wire.raft_voter_messages import (
    AddRaftVoterRequest,
    AddRaftVoterResponse,
    RemoveRaftVoterRequest,
    RemoveRaftVoterResponse,
)


def _schema_range(cls: Any) -> tuple[int, int]:
    low, high = cls.valid_versions
    return int(low), int(high)


_PAIRS: list[tuple[Any, Any, tuple[int, int] | None]] = [
    (ApiVersionsRequest, ApiVersionsResponse, None),
    (MetadataRequest, MetadataResponse, (1, 13)),  # v0 means "all topics" for []: not served
    (DescribeClusterRequest, DescribeClusterResponse, None),
    (DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, None),
    (CreateTopicsRequest, CreateTopicsResponse, None),
    (ElectLeadersRequest, ElectLeadersResponse, None),
    (AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, None),
    (ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, None),
    (DescribeQuorumRequest, DescribeQuorumResponse, None),
    (DescribeLogDirsRequest, DescribeLogDirsResponse, None),
    (AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse, None),
    (DescribeConfigsRequest, DescribeConfigsResponse, None),
    (IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, None),
    (SaslHandshakeRequest, SaslHandshakeResponse, (1, 1)),
    (SaslAuthenticateRequest, SaslAuthenticateResponse, None),
    (AddRaftVoterRequest, AddRaftVoterResponse, None),
    (RemoveRaftVoterRequest, RemoveRaftVoterResponse, None),
    (UnregisterBrokerRequest, UnregisterBrokerResponse, None),
    # The data APIs, for kraftsman's throttle-marker topic only (handlers.py says why).
    (ProduceRequest, ProduceResponse, None),
    (FetchRequest, FetchResponse, None),
    (ListOffsetsRequest, ListOffsetsResponse, None),
]

REQUESTS: dict[int, Any] = {int(req.API_KEY): req for req, _, _ in _PAIRS}
RESPONSES: dict[int, Any] = {int(req.API_KEY): resp for req, resp, _ in _PAIRS}
SERVED: dict[int, tuple[int, int]] = {
    int(req.API_KEY): rng if rng is not None else _schema_range(req) for req, _, rng in _PAIRS}
