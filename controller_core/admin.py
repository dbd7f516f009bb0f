"""The ClusterAdmin port: the admin operations of KIP-455, KIP-179, KIP-183/460 and configs.

The orchestrators are written against this port only, so the same code drives the embedded
cluster and a real Kafka cluster. Per-item outcomes are :class:`ApiResult` values with Kafka
error codes; a whole request that fails raises :class:`KafkaApiError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from controller_core.errors import ApiResult
from controller_core.model import ElectionType, TopicPartition

# KIP-179 replica status words.
IN_SYNC = "in sync"
UNKNOWN_TOPIC = "unknown topic"
UNKNOWN_PARTITION = "unknown partition"
UNKNOWN_BROKER = "unknown broker"
NOT_HOSTED = "broker does not host this partition"
OFFLINE = "offline: the broker is fenced"  # not in sync, whatever its log end says
UNREACHABLE = "unreachable: the broker did not answer"  # down, not fenced yet
# The partition has no leader: no log to measure a replica's lag against (a real broker
# reports a lag of 0 against its own high watermark, which would read as "in sync").
LEADERLESS = "leaderless: no leader to copy from"


def behind(messages: int) -> str:
    return f"behind: {messages} messages"


@dataclass(frozen=True, slots=True)
class BrokerDescription:
    id: int
    rack: str | None
    fenced: bool = False


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str
    controller_id: int
    brokers: tuple[BrokerDescription, ...]


class PartitionDescription(NamedTuple):
    tp: TopicPartition
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()
    size_bytes: int | None = None  # the leader's log size, when the backend knows it
    bytes_in_per_second: float | None = None  # producer rate, when known
    offline: tuple[int, ...] = ()  # replicas on fenced brokers

    @property
    def under_replicated(self) -> bool:
        return under_replicated(len(self.isr), len(self.replicas), len(self.adding))


def under_replicated(isr: int, replicas: int, adding: int) -> bool:
    """KIP-352: fewer in-sync replicas than the replica set minus the replicas being
    added — not "ISR smaller than the temporarily enlarged R" of a move."""
    return isr < replicas - adding


class PartitionCounts(NamedTuple):
    """A cluster's partitions counted: what a cluster's status shows, without a description
    of every partition."""

    topics: int  # topics with at least one partition
    partitions: int
    under_replicated: int  # KIP-352 (:func:`under_replicated`)
    offline: int  # without a leader


class OngoingReassignment(NamedTuple):
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]

    @property
    def target(self) -> tuple[int, ...]:
        if not self.removing:
            return self.replicas
        removing = set(self.removing)
        return tuple(r for r in self.replicas if r not in removing)


class ReplicaStatus(NamedTuple):
    """KIP-179: where one replica of a partition stands."""

    tp: TopicPartition
    broker: int
    status: str
    lag_messages: int | None = None
    lag_bytes: int | None = None
    size_bytes: int | None = None
    time_ms: int = 0


class LogDirReplica(NamedTuple):
    """One replica in one log directory (DescribeLogDirs)."""

    tp: TopicPartition
    size_bytes: int
    offset_lag: int = 0
    # KIP-113: the copy a broker is making in this directory while the replica moves here
    # from another directory of the same broker (DescribeLogDirs' is_future_key).
    future: bool = False


class LogDir(NamedTuple):
    """One log directory of one broker, as DescribeLogDirs answers it."""

    broker: int
    path: str
    replicas: tuple[LogDirReplica, ...] = ()
    error: str | None = None  # Kafka's error name for an offline directory
    total_bytes: int | None = None  # None: the broker does not say (-1 on the wire)
    usable_bytes: int | None = None
    cordoned: bool = False


@dataclass(frozen=True, slots=True)
class ElectionOutcome:
    results: dict[TopicPartition, ApiResult]
    # with no partition set, every partition (a lazy TopicsPartitions on the embedded cluster)
    attempted: Sequence[TopicPartition] = field(default_factory=tuple)


ConfigResource = tuple[str, str]  # ("BROKER", "1") or ("TOPIC", "orders")

# Where kraftsman keeps what it placed for replication throttles (orchestration/throttles.py):
# a compacted topic it owns, one record per broker (key: the broker id in ASCII digits; value:
# a JSON marker; a tombstone removes it). Kafka masks every broker config it does not know as
# sensitive (DescribeConfigs answers null) and refuses unknown topic config names, so the
# marker cannot live in a config; Cruise Control and Kafka Connect keep their state in topics
# the same way.
THROTTLE_MARKER_TOPIC = "__kraftsman_throttles"
MARKER_TOPIC_CONFIGS = {"cleanup.policy": "compact"}
LEGACY_MARKER_CONFIG = "kraftsman.throttle"  # the broker config that held it before
MARKER_TOPIC_ACLS = ("DESCRIBE, READ and WRITE on TOPIC " + THROTTLE_MARKER_TOPIC
                     + ", and CREATE on it (or on the CLUSTER) until it exists")


# KIP-1066: a broker config listing the broker's log directories that take no new replica
# ("*": all of them). Kafka 4.3+ (metadata.version 4.3-IV0); see metadata/versions.py.
CORDONED_LOG_DIRS = "cordoned.log.dirs"
CORDON_ALL = "*"


def marker_replication_factor(live_brokers: int) -> int:
    """The marker topic's replication factor: Kafka's usual 3, or every broker of a smaller
    cluster."""
    return max(1, min(3, live_brokers))


class ClusterAdmin(Protocol):
    def describe_cluster(self) -> ClusterDescription: ...

    def describe_partitions(
        self, topics: Iterable[str] | None = None,
        partitions: Iterable[TopicPartition] | None = None,
    ) -> list[PartitionDescription]:
        """Every partition of ``topics`` (None: all), or exactly ``partitions``; unknown ones
        are omitted."""
        ...

    def partition_counts(self) -> PartitionCounts:
        """Every partition counted, as :meth:`describe_partitions` of all would count them,
        without holding a description of each (nor asking for log sizes)."""
        ...

    def alter_partition_reassignments(
        self, changes: Mapping[TopicPartition, Sequence[int] | None]
    ) -> dict[TopicPartition, ApiResult]:
        """Incremental: start or re-target (a replica list) or cancel (None) each partition."""
        ...

    def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OngoingReassignment]:
        """The reassignments in progress among ``partitions`` (None: all of them; an empty
        list: none, without a request)."""
        ...

    def replica_status(
        self, replicas: Iterable[tuple[TopicPartition, int]] | None = None
    ) -> list[ReplicaStatus]:
        """KIP-179 figures; None: every replica of every partition being reassigned."""
        ...

    def replica_log_sizes(
        self, replicas: Iterable[tuple[TopicPartition, int]]
    ) -> dict[tuple[TopicPartition, int], int]:
        """Bytes in each replica's log (DescribeLogDirs, asked of each replica's broker);
        replicas that do not exist, or whose broker does not answer (down), are omitted.
        Cheaper than replica_status when only progress in bytes is wanted."""
        ...

    def describe_log_dirs(
        self, brokers: Iterable[int], partitions: Iterable[TopicPartition] | None = None
    ) -> dict[int, tuple[LogDir, ...]]:
        """Each broker's log directories (DescribeLogDirs, asked of each broker), with the
        replicas of ``partitions`` (None: every replica) they hold, future replicas included;
        a broker that does not answer (down) is omitted."""
        ...

    def alter_replica_log_dirs(
        self, moves: Mapping[tuple[TopicPartition, int], str]
    ) -> dict[tuple[TopicPartition, int], ApiResult]:
        """AlterReplicaLogDirs (KIP-113), asked of each replica's broker: move the replica
        on that broker to the log directory at the path given. Per replica, as Kafka answers:
        LOG_DIR_NOT_FOUND (no such directory on the broker), KAFKA_STORAGE_ERROR (the
        directory is offline), REPLICA_NOT_AVAILABLE (the broker does not host the replica
        yet: it keeps the directory for when it does, and the caller asks again;
        UNKNOWN_TOPIC_OR_PARTITION when the partition does not exist at all). A replica
        already in that directory is NONE. A broker that does not answer gives each of its
        replicas BROKER_NOT_AVAILABLE; nothing to move: no request."""
        ...

    def elect_leaders(
        self, election_type: ElectionType, partitions: Iterable[TopicPartition] | None = None
    ) -> ElectionOutcome:
        """Returns once the elections completed; None means every partition."""
        ...

    def describe_configs(
        self, resources: Iterable[ConfigResource]
    ) -> dict[ConfigResource, dict[str, str | None]]:
        """The dynamic configs of every resource asked (an unknown topic: none); a resource
        the cluster cannot describe raises rather than being left out. A sensitive config is
        listed with the value None: Kafka hides its value, and treats every broker config
        name it does not know as sensitive."""
        ...

    def incremental_alter_configs(
        self, changes: Mapping[ConfigResource, Mapping[str, str | None]]
    ) -> dict[ConfigResource, ApiResult]:
        """Set (a value) or delete (None) dynamic configs, such as replication throttles;
        nothing to change: no request."""
        ...

    def read_throttle_markers(self) -> dict[int, str]:
        """The live throttle markers (broker id → JSON) in :data:`THROTTLE_MARKER_TOPIC`, the
        latest record of each key; none while the topic does not exist. A refusal raises
        :class:`KafkaApiError` naming the topic and the ACLs it needs."""
        ...

    def write_throttle_markers(self, changes: Mapping[int, str | None]) -> list[str]:
        """Set (JSON) or remove (None: a tombstone) the markers of brokers, creating the topic
        on first need; returns once they are durable (acks=all). The problems the cluster
        reported (empty: all written); nothing to change: no request."""
        ...

    def unregister_broker(self, broker_id: int) -> ApiResult:
        """UnregisterBroker (API key 64), as Kafka answers it: BROKER_ID_NOT_REGISTERED for an
        unknown id; otherwise the registration goes, fenced or not — Kafka 4.4 unregisters a
        running broker too (which then stays out, its heartbeats refused with
        STALE_BROKER_EPOCH, until it restarts). kraftsman's own guard against that is
        :func:`controller_core.orchestration.brokers_out.unregister`."""
        ...

    def metadata_version(self) -> int | None:
        """The cluster's finalized ``metadata.version`` feature level (ApiVersions); None when
        the cluster does not report one."""
        ...

    def set_cordoned(self, brokers: Mapping[int, bool]) -> dict[int, ApiResult]:
        """Cordon (True: ``cordoned.log.dirs=*``) or uncordon (False: the config deleted) each
        broker, an incremental AlterConfigs on the broker. Returns once the controller has
        it — Kafka's controller learns a broker's cordoned directories from the broker's next
        heartbeat, and only then stops placing replicas there."""
        ...

    def now_ms(self) -> int:
        """The cluster's clock (simulated for the embedded cluster, wall time otherwise)."""
        ...
