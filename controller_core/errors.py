"""Kafka error codes, taken from kafka-python's error table — never a number of our own.

Every per-partition or per-request outcome in the core is an :class:`ErrorCode` plus a
message a person can act on. Top-level failures raise :class:`KafkaApiError`.
"""

from __future__ import annotations

from dataclasses import dataclass

import kafka.errors as _kerr

# kafka-python spells code 39 INVALID_REPLICATION_ASSIGNMENT; Kafka's own Errors.java and
# the KIPs call it INVALID_REPLICA_ASSIGNMENT. Same code, the name users know. (Codes 6 and
# 10 keep kafka-python's NOT_LEADER_FOR_PARTITION and MESSAGE_SIZE_TOO_LARGE in messages:
# the Raft transcripts pin those words.)
_CANONICAL_NAMES = {39: "INVALID_REPLICA_ASSIGNMENT"}


@dataclass(frozen=True, slots=True)
class ErrorCode:
    code: int
    name: str
    retriable: bool

    @classmethod
    def of(cls, error_class: type[_kerr.KafkaError]) -> ErrorCode:
        code = int(error_class.errno)
        return cls(code, _CANONICAL_NAMES.get(code, str(error_class.message)),
                   bool(error_class.retriable))

    @classmethod
    def for_code(cls, code: int) -> ErrorCode:
        return cls.of(_kerr.for_code(code))

    @property
    def ok(self) -> bool:
        return self.code == 0

    def __str__(self) -> str:
        return self.name


NONE = ErrorCode.of(_kerr.NoError)
UNKNOWN_SERVER_ERROR = ErrorCode.of(_kerr.UnknownError)
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.of(_kerr.UnknownTopicOrPartitionError)
REQUEST_TIMED_OUT = ErrorCode.of(_kerr.RequestTimedOutError)
CLUSTER_AUTHORIZATION_FAILED = ErrorCode.of(_kerr.ClusterAuthorizationFailedError)
INVALID_REPLICA_ASSIGNMENT = ErrorCode.of(_kerr.InvalidReplicationAssignmentError)
INVALID_CONFIG = ErrorCode.of(_kerr.InvalidConfigurationError)
INVALID_REQUEST = ErrorCode.of(_kerr.InvalidRequestError)
NOT_CONTROLLER = ErrorCode.of(_kerr.NotControllerError)
REASSIGNMENT_IN_PROGRESS = ErrorCode.of(_kerr.ReassignmentInProgressError)
NO_REASSIGNMENT_IN_PROGRESS = ErrorCode.of(_kerr.NoReassignmentInProgressError)
PREFERRED_LEADER_NOT_AVAILABLE = ErrorCode.of(_kerr.PreferredLeaderNotAvailableError)
ELIGIBLE_LEADERS_NOT_AVAILABLE = ErrorCode.of(_kerr.EligibleLeadersNotAvailableError)
ELECTION_NOT_NEEDED = ErrorCode.of(_kerr.ElectionNotNeededError)
FENCED_LEADER_EPOCH = ErrorCode.of(_kerr.FencedLeaderEpochError)
INCONSISTENT_CLUSTER_ID = ErrorCode.of(_kerr.InconsistentClusterIdError)
INCONSISTENT_VOTER_SET = ErrorCode.of(_kerr.InconsistentVoterSetError)
BROKER_NOT_AVAILABLE = ErrorCode.of(_kerr.BrokerNotAvailableError)
TOPIC_ALREADY_EXISTS = ErrorCode.of(_kerr.TopicAlreadyExistsError)
INVALID_PARTITIONS = ErrorCode.of(_kerr.InvalidPartitionsError)
INVALID_REPLICATION_FACTOR = ErrorCode.of(_kerr.InvalidReplicationFactorError)
INELIGIBLE_REPLICA = ErrorCode.of(_kerr.IneligibleReplicaError)
DUPLICATE_VOTER = ErrorCode.of(_kerr.DuplicateVoterError)
VOTER_NOT_FOUND = ErrorCode.of(_kerr.VoterNotFoundError)
NOT_LEADER_OR_FOLLOWER = ErrorCode.of(_kerr.NotLeaderForPartitionError)
LEADER_NOT_AVAILABLE = ErrorCode.of(_kerr.LeaderNotAvailableError)
TOPIC_AUTHORIZATION_FAILED = ErrorCode.of(_kerr.TopicAuthorizationFailedError)
MESSAGE_TOO_LARGE = ErrorCode.of(_kerr.MessageSizeTooLargeError)
INVALID_RECORD = ErrorCode.of(_kerr.InvalidRecordError)
CORRUPT_MESSAGE = ErrorCode.of(_kerr.CorruptRecordError)
KAFKA_STORAGE_ERROR = ErrorCode.of(_kerr.KafkaStorageError)
OFFSET_OUT_OF_RANGE = ErrorCode.of(_kerr.OffsetOutOfRangeError)
UNKNOWN_TOPIC_ID = ErrorCode.of(_kerr.UnknownTopicIdError)
BROKER_ID_NOT_REGISTERED = ErrorCode.of(_kerr.BrokerIdNotRegisteredError)
LOG_DIR_NOT_FOUND = ErrorCode.of(_kerr.LogDirNotFoundError)
REPLICA_NOT_AVAILABLE = ErrorCode.of(_kerr.ReplicaNotAvailableError)


@dataclass(frozen=True, slots=True)
class ApiResult:
    """The outcome of one item of a request (a partition, a resource)."""

    error: ErrorCode = NONE
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.error.ok


OK = ApiResult()


class KafkaApiError(Exception):
    """A whole request failed with a Kafka error (NOT_CONTROLLER, CLUSTER_AUTHORIZATION_FAILED…)."""

    def __init__(self, error: ErrorCode, message: str = "") -> None:
        super().__init__(f"{error.name}: {message}" if message else error.name)
        self.error = error
        self.message = message
