"""Configuration of an embedded cluster — the `spec.embedded` of a KafkaCluster.

Field names are camelCase on the wire (the custom resource), snake_case in Python.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from controller_core.metadata import versions

TOPIC_NAME_PATTERN = r"^[a-zA-Z0-9._-]{1,249}$"


class CamelModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


BrokerId = Annotated[int, Field(ge=0, le=2**31 - 1)]
DEFAULT_LOG_DIR = "/var/lib/kraftsman/broker-{id}"  # a broker's one log directory by default


class LogDirSpec(CamelModel):
    path: str = Field(pattern=r"^/", description="Absolute path of the log directory (log.dirs).")
    capacity_bytes: int | None = Field(
        default=None, gt=0,
        description="Bytes the directory's volume holds (DescribeLogDirs' total_bytes); "
                    "unknown when left out.")


class BrokerSpec(CamelModel):
    id: BrokerId = Field(description="Broker id (node.id); one id space with controllers.")
    rack: str | None = Field(default=None, description="broker.rack, for rack-aware placement.")
    replication_bytes_per_second: float | None = Field(
        default=None, gt=0,
        description="Fetch bandwidth of this broker; defaults to the cluster's figure.")
    disk_bytes: int | None = Field(default=None, gt=0, description="Disk capacity (for plans).")
    log_dirs: list[LogDirSpec] | None = Field(
        default=None, min_length=1,
        description="The broker's log directories (JBOD, KIP-113). Default: one directory, "
                    f"{DEFAULT_LOG_DIR.format(id='<id>')}, of diskBytes capacity.")

    @model_validator(mode="after")
    def _unique_log_dirs(self) -> BrokerSpec:
        paths = [d.path for d in self.log_dirs or ()]
        dup = sorted({p for p in paths if paths.count(p) > 1})
        if dup:
            raise ValueError(f"logDirs: duplicate path(s) {dup}; every path must be unique")
        return self

    def directories(self) -> tuple[LogDirSpec, ...]:
        """The broker's log directories, in order; the single default one when not given."""
        if self.log_dirs:
            return tuple(self.log_dirs)
        return (LogDirSpec(path=DEFAULT_LOG_DIR.format(id=self.id),
                           capacity_bytes=self.disk_bytes),)


class TopicSpec(CamelModel):
    name: str = Field(pattern=TOPIC_NAME_PATTERN, description="Topic name.")
    partitions: int = Field(ge=1, le=1_000_000, description="Number of partitions.")
    replication_factor: int = Field(ge=1, le=64, description="Replicas per partition.")
    size_bytes_per_partition: int = Field(
        default=0, ge=0, description="Data each partition holds when the cluster is created.")
    message_bytes: int = Field(default=1024, ge=1, description="Average message size.")
    produce_bytes_per_second: float = Field(
        default=0.0, ge=0, description="Producer rate into each partition.")
    assignment: list[list[BrokerId]] | None = Field(
        default=None,
        description="Explicit replicas per partition (else rack-aware round robin).")
    configs: dict[str, str] = Field(
        default_factory=dict,
        description="Topic configs the controller reads: min.insync.replicas, "
                    "unclean.leader.election.enable.")

    @model_validator(mode="after")
    def _assignment_matches(self) -> TopicSpec:
        if self.assignment is not None:
            if len(self.assignment) != self.partitions:
                raise ValueError(
                    f"assignment has {len(self.assignment)} entries but partitions is "
                    f"{self.partitions}: give one replica list per partition")
            for i, replicas in enumerate(self.assignment):
                if len(replicas) != self.replication_factor or len(set(replicas)) != len(replicas):
                    raise ValueError(
                        f"assignment[{i}] must list {self.replication_factor} distinct brokers")
        return self


class EmbeddedClusterSpec(CamelModel):
    brokers: list[BrokerSpec] = Field(min_length=1, description="The brokers.")
    controllers: list[BrokerId] = Field(
        default_factory=list,
        description="Initial quorum.voters. Empty: the first (up to) three broker ids.")
    spare_controllers: list[BrokerId] = Field(
        default_factory=list,
        description="Controllers formatted with --no-initial-controllers: running observers "
                    "of the metadata quorum that a voter change (AddRaftVoter) can promote.")
    topics: list[TopicSpec] = Field(default_factory=list, description="Topics to create.")
    replication_bytes_per_second: float = Field(
        default=100_000_000.0, gt=0, description="Default fetch bandwidth per broker.")
    replica_lag_time_max_ms: int = Field(
        default=30_000, ge=1, description="replica.lag.time.max.ms")
    broker_session_timeout_ms: int = Field(
        default=9_000, ge=1, description="broker.session.timeout.ms: a silent broker is fenced.")
    controller_link_delay_ms: float = Field(
        default=1.0, ge=0, description="One-way delay between the controllers of the quorum.")
    controller_request_timeout_ms: int = Field(
        default=30_000, ge=1,
        description="How long a change waits for the metadata quorum to commit it.")
    snapshot_every_records: int = Field(
        default=200_000, ge=1, description="Write a metadata snapshot after this many records.")
    snapshot_every_bytes: int = Field(
        default=20 * 1024 * 1024, ge=1,
        description="metadata.log.max.record.bytes.between.snapshots: write a metadata "
                    "snapshot once the records since the last one reach this many bytes "
                    "(Kafka's default, 20 MiB; the controllers keep those records in memory).")
    seed: int = Field(default=0, description="Seed of the cluster's random choices.")
    eligible_leader_replicas: bool = Field(
        default=True,
        description="KIP-966 eligible leader replicas (eligible.leader.replicas.version 1, "
                    "on by default in new Kafka 4.x clusters): the ISR may empty and a replica "
                    "that left it below min.insync.replicas can still lead cleanly.")
    metadata_version: str = Field(
        default=versions.NAMES[versions.LATEST_PRODUCTION],
        description="The finalized metadata.version, as `kafka-storage format "
                    "--release-version` names it (default: Kafka 4.4's latest production "
                    f"one). Cordoning brokers (KIP-1066) needs "
                    f"{versions.NAMES[versions.CORDON_MIN_LEVEL]} or later.")

    @model_validator(mode="after")
    def _consistent(self) -> EmbeddedClusterSpec:
        ids = [b.id for b in self.brokers]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"brokers: duplicate broker id(s) {dup}; every id must be unique")
        if len(set(self.controllers)) != len(self.controllers):
            raise ValueError("controllers: duplicate node ids")
        both = sorted(set(self.spare_controllers) & set(self.voters))
        if both or len(set(self.spare_controllers)) != len(self.spare_controllers):
            raise ValueError(f"spareControllers: {both or 'duplicate node ids'}: a spare "
                             "controller is listed once and is not an initial voter")
        if self.metadata_version not in versions.LEVELS:
            raise ValueError(f"metadataVersion {self.metadata_version!r}: not a Kafka "
                             f"metadata.version; one of {', '.join(versions.LEVELS)}")
        names = [t.name for t in self.topics]
        dupt = sorted({n for n in names if names.count(n) > 1})
        if dupt:
            raise ValueError(f"topics: duplicate topic name(s) {dupt}")
        known = set(ids)
        for t in self.topics:
            if t.replication_factor > len(ids):
                raise ValueError(
                    f"topics[{t.name}].replicationFactor {t.replication_factor} exceeds the "
                    f"{len(ids)} brokers")
            for replicas in t.assignment or []:
                unknown = sorted(set(replicas) - known)
                if unknown:
                    raise ValueError(
                        f"topics[{t.name}].assignment names unknown broker(s) {unknown}")
        return self

    @property
    def metadata_version_level(self) -> int:
        return versions.LEVELS[self.metadata_version]

    @property
    def voters(self) -> list[int]:
        return list(self.controllers) or sorted(b.id for b in self.brokers)[:3]
