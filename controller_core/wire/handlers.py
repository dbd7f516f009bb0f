"""Kafka admin requests answered by the embedded cluster — one function per API.

Pure request → response translation over :class:`EmbeddedCluster` (the ClusterAdmin port plus
the few embedded-only reads a broker answers from: liveness, topic ids, topic creation).
Authorization follows Kafka: DESCRIBE on CLUSTER to list and describe, ALTER on CLUSTER to
alter reassignments and replica log dirs, elect leaders, change the quorum; ALTER_CONFIGS (or
ALTER) to alter configs; CREATE to create topics. Errors are Kafka's codes, with a message a
person can act on.
"""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import kafka.errors as kerr

from controller_core import errors
from controller_core.admin import CORDONED_LOG_DIRS
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.errors import ApiResult, ErrorCode, KafkaApiError
from controller_core.metadata.controller import (
    ALTERABLE_CONFIGS,
    CLEANUP_POLICY,
    DEFAULT_MIN_ISR,
    MAX_THROTTLE_RATE,
    MIN_ISR_KEY,
    RATE_KEYS,
    THROTTLE_REPLICA_KEYS,
    UNCLEAN_KEY,
    is_sensitive_config,
)
from controller_core.model import NO_LEADER, ElectionType, TopicPartition, is_whole_number
from controller_core.wire import apis, data_apis
from controller_core.wire.auth import Authorizer, Operation

METADATA_TOPIC = "__cluster_metadata"
TOPIC_AUTHORIZATION_FAILED = ErrorCode.of(kerr.TopicAuthorizationFailedError)
LEADER_NOT_AVAILABLE = ErrorCode.of(kerr.LeaderNotAvailableError)
UNKNOWN_TOPIC_ID = ErrorCode.of(kerr.UnknownTopicIdError)
UNSUPPORTED_ENDPOINT_TYPE = ErrorCode.of(kerr.UnsupportedEndpointTypeError)
UNSUPPORTED_VERSION = ErrorCode.of(kerr.UnsupportedVersionError)
TOPIC_ALREADY_EXISTS = ErrorCode.of(kerr.TopicAlreadyExistsError)
INVALID_TOPIC = ErrorCode.of(kerr.InvalidTopicError)
SASL_AUTHENTICATION_FAILED = ErrorCode.of(kerr.SaslAuthenticationFailedError)
UNSUPPORTED_SASL_MECHANISM = ErrorCode.of(kerr.UnsupportedSaslMechanismError)
ILLEGAL_SASL_STATE = ErrorCode.of(kerr.IllegalSaslStateError)

# Kafka's AclOperation codes, for the authorized-operations bit fields.
_ACL_BITS = {Operation.ALL: 2, Operation.READ: 3, Operation.WRITE: 4, Operation.CREATE: 5,
             Operation.ALTER: 7, Operation.DESCRIBE: 8, Operation.DESCRIBE_CONFIGS: 10,
             Operation.ALTER_CONFIGS: 11}
_DELETE, _CLUSTER_ACTION, _IDEMPOTENT_WRITE = 6, 9, 12
# Kafka's AclEntry.supportedOperations(TOPIC) and (CLUSTER), as bits
_TOPIC_OPS = frozenset({3, 4, 5, _DELETE, 7, 8, 10, 11})
_CLUSTER_OPS = frozenset({5, 7, 8, _CLUSTER_ACTION, 10, 11, _IDEMPOTENT_WRITE})
# DescribeConfigs ConfigSource and ConfigType values.
_SOURCE_TOPIC, _SOURCE_BROKER, _SOURCE_DEFAULT_BROKER, _SOURCE_DEFAULT = 1, 2, 3, 5
# Kafka's defaults for the configs the embedded cluster lets you change.
_DEFAULTS = {**dict.fromkeys(RATE_KEYS, str(MAX_THROTTLE_RATE)),
             **dict.fromkeys(THROTTLE_REPLICA_KEYS, ""), CLEANUP_POLICY: "delete",
             MIN_ISR_KEY: DEFAULT_MIN_ISR, UNCLEAN_KEY: "false", CORDONED_LOG_DIRS: ""}
_TYPE_UNKNOWN, _TYPE_BOOLEAN, _TYPE_STRING, _TYPE_INT, _TYPE_LONG, _TYPE_LIST = 0, 1, 2, 3, 5, 7
_CONFIG_TYPES = {**dict.fromkeys((*THROTTLE_REPLICA_KEYS, CLEANUP_POLICY, CORDONED_LOG_DIRS),
                                  _TYPE_LIST),
                 **dict.fromkeys(RATE_KEYS, _TYPE_LONG),
                 MIN_ISR_KEY: _TYPE_INT, UNCLEAN_KEY: _TYPE_BOOLEAN}
_RESOURCE_TYPES = {2: "TOPIC", 4: "BROKER"}
# Kafka's max.request.partition.size.limit (its default): DescribeTopicPartitions pages by it.
MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000
_NO_AUTHORIZED_OPERATIONS = -2147483648  # DescribeTopicPartitions' default for the field
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_ZERO_UUID = uuid.UUID(int=0)


@dataclass(frozen=True, slots=True)


class Endpoint:
    host: str
    port: int


@dataclass(slots=True)
class Session:
    """What the server knows about one connection."""

    broker_id: int  # which broker this listener stands for
    principal: str | None  # None until authenticated (when authentication is required)
    sasl_mechanism: str | None = None
    peer: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class Handlers:
    def __init__(self, cluster: EmbeddedCluster, authorizer: Authorizer,
                 endpoints: dict[int, Endpoint]) -> None:
        self.cluster = cluster
        self.authorizer = authorizer
        self.endpoints = endpoints
        self.served = served_apis(cluster)
        self._table: dict[int, Callable[[Any, int, Session], Any]] = {
            18: self.api_versions, 3: self.metadata, 60: self.describe_cluster,
            75: self.describe_topic_partitions,
            19: self.create_topics, 43: self.elect_leaders,
            45: self.alter_partition_reassignments, 46: self.list_partition_reassignments,
            55: self.describe_quorum, 35: self.describe_log_dirs, 32: self.describe_configs,
            34: self.alter_replica_log_dirs,
            44: self.incremental_alter_configs, 80: self.add_raft_voter,
            81: self.remove_raft_voter, 64: self.unregister_broker,
            0: lambda r, v, s: data_apis.produce(self, r, v, s),
            1: lambda r, v, s: data_apis.fetch(self, r, v, s),
            2: lambda r, v, s: data_apis.list_offsets(self, r, v, s),
        }

    def handle(self, api_key: int, version: int, request: Any, session: Session) -> Any:
        return self._table[api_key](request, version, session)

    # -- helpers -----------------------------------------------------------------------------------
    def _allowed(self, session: Session, *ops: Operation) -> bool:
        principal = session.principal or ""
        return any(self.authorizer.allowed(principal, op) for op in ops)

    def _authorized_ops(self, session: Session, wanted: bool, *, topic: bool = False
                        ) -> set[int] | None:
        """Kafka's authorized-operations bits of the operations its ``AclEntry`` supports on
        a topic or on the cluster; those the twin's ACLs cannot name (DELETE,
        CLUSTER_ACTION, IDEMPOTENT_WRITE) only ALL grants."""
        if not wanted:
            return None
        named = _TOPIC_OPS if topic else _CLUSTER_OPS
        ops = {bit for op, bit in _ACL_BITS.items()
               if bit in named and self._allowed(session, op)}
        if self._allowed(session, Operation.ALL):
            ops |= named
        return ops

    def _response(self, api_key: int, version: int, **fields: Any) -> Any:
        return apis.RESPONSES[api_key](version=version, **fields)

    def controller_id(self) -> int:
        """KRaft brokers answer with a live broker as 'controller' (they forward to it)."""
        live = [b for b in sorted(self.cluster.image.live_brokers()) if self.cluster.alive(b)]
        return live[0] if live else -1

    # -- ApiVersions -------------------------------------------------------------------------------
    def api_versions(self, request: Any, version: int, session: Session) -> Any:
        return self.api_versions_response(version, errors.NONE)

    def api_versions_response(self, version: int, error: ErrorCode) -> Any:
        cls = apis.RESPONSES[18]
        keys = [cls.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in sorted(self.served.items())]
        return cls(version=version, error_code=error.code, api_keys=keys, throttle_time_ms=0,
                   supported_features=[], finalized_features_epoch=self.cluster.image.next_offset,
                   finalized_features=[cls.FinalizedFeatureKey(
                       name="metadata.version",
                       max_version_level=self.cluster.controller.metadata_version,
                       min_version_level=self.cluster.controller.metadata_version)],
                   zk_migration_ready=False)

    # -- Metadata ----------------------------------------------------------------------------------
    def metadata(self, request: Any, version: int, session: Session) -> Any:
        cls = apis.RESPONSES[3]
        image = self.cluster.image
        brokers = [cls.MetadataResponseBroker(node_id=b.id, host=self.endpoints[b.id].host,
                                              port=self.endpoints[b.id].port, rack=b.rack)
                   for b in sorted(image.brokers.values(), key=lambda b: b.id)
                   if not b.fenced and b.id in self.endpoints]
        may_describe = self._allowed(session, Operation.DESCRIBE)
        fenced = {b.id for b in image.brokers.values() if b.fenced}
        by_id = {t.topic_id: name for name, t in image.topics.items()}
        wanted: list[tuple[str | None, uuid.UUID | None]]
        if request.topics is None:
            wanted = [(n, None) for n in image.topics] if may_describe else []
        else:
            wanted = [(t.name, getattr(t, "topic_id", None)) for t in request.topics]
        topics = []
        for name, topic_id in wanted:
            if name is None and topic_id is not None:
                name = by_id.get(str(topic_id))
                if name is None:
                    topics.append(cls.MetadataResponseTopic(
                        error_code=UNKNOWN_TOPIC_ID.code, name=None, topic_id=topic_id,
                        partitions=[]))
                    continue
            assert name is not None
            if not may_describe:
                topics.append(cls.MetadataResponseTopic(
                    error_code=TOPIC_AUTHORIZATION_FAILED.code, name=name, partitions=[],
                    topic_id=_ZERO_UUID))
                continue
            t = image.topics.get(name)
            if t is None:
                topics.append(cls.MetadataResponseTopic(
                    error_code=errors.UNKNOWN_TOPIC_OR_PARTITION.code, name=name, partitions=[],
                    topic_id=_ZERO_UUID))
                continue
            parts = [cls.MetadataResponseTopic.MetadataResponsePartition(
                error_code=LEADER_NOT_AVAILABLE.code if p.leader == NO_LEADER else 0,
                partition_index=i, leader_id=p.leader, leader_epoch=p.leader_epoch,
                replica_nodes=list(p.replicas), isr_nodes=list(p.isr),
                offline_replicas=[r for r in p.replicas if r in fenced] if fenced else [])
                for i, p in enumerate(t.partitions)]
            topics.append(cls.MetadataResponseTopic(
                error_code=0, name=name, topic_id=uuid.UUID(t.topic_id), is_internal=False,
                partitions=parts, authorized_operations=self._authorized_ops(
                    session, bool(getattr(request, "include_topic_authorized_operations", 0)),
                    topic=True)))
        cluster_ops = self._authorized_ops(
            session, bool(getattr(request, "include_cluster_authorized_operations", False)))
        return cls(version=version, throttle_time_ms=0, brokers=brokers,
                   cluster_id=image.cluster_id, controller_id=self.controller_id(),
                   topics=topics, authorized_operations=cluster_ops, error_code=0)

    # -- DescribeTopicPartitions (KIP-966) ---------------------------------------------------------
    def describe_topic_partitions(self, request: Any, version: int, session: Session) -> Any:
        """Kafka 4's DescribeTopicPartitionsRequestHandler over KRaftMetadataCache: the named
        topics (every topic for none) from the cursor's on, in name order, at most
        max(1, min(limit, max.request.partition.size.limit)) partitions; the cursor's topic
        starts at its partition index, every later one at 0; ``next_cursor`` names the first
        partition left out, or the next topic once the limit is spent exactly. Unknown topics are
        answered UNKNOWN_TOPIC_OR_PARTITION (not when listing every topic); topics the
        principal may not describe come last, TOPIC_AUTHORIZATION_FAILED."""
        cls = apis.RESPONSES[75]
        topic_cls = cls.DescribeTopicPartitionsResponseTopic
        part_cls = topic_cls.DescribeTopicPartitionsResponsePartition

        def invalid() -> Any:  # Kafka's error answer: every named topic INVALID_REQUEST
            return cls(version=version, throttle_time_ms=0, next_cursor=None, topics=[
                topic_cls(error_code=errors.INVALID_REQUEST.code, name=t.name,
                          topic_id=_ZERO_UUID, is_internal=False, partitions=[],
                          topic_authorized_operations=_NO_AUTHORIZED_OPERATIONS)
                for t in request.topics])

        image = self.cluster.image
        cursor = request.cursor
        every = not request.topics
        after = cursor.topic_name if cursor is not None else None
        if every:
            names = {n for n in image.topics if after is None or n >= after}
            if after is not None:
                names.add(after)  # Kafka keeps the cursor's topic even if it is gone
        else:
            names = {t.name for t in request.topics if after is None or t.name >= after}
            if after is not None and after not in names:  # InvalidRequestException
                return invalid()
        if cursor is not None and cursor.partition_index < 0:  # InvalidRequestException
            return invalid()
        allowed = self._allowed(session, Operation.DESCRIBE)
        bits = sum(1 << bit for bit in self._authorized_ops(session, True, topic=True) or ())
        fenced = {b.id for b in image.brokers.values() if b.fenced}
        remaining = max(min(MAX_REQUEST_PARTITION_SIZE_LIMIT,
                            request.response_partition_limit), 1)
        topics: list[Any] = []
        next_cursor = None
        for name in sorted(names) if allowed else ():
            if remaining == 0:
                next_cursor = cls.Cursor(topic_name=name, partition_index=0)
                break
            t = image.topics.get(name)
            if t is None:
                if not every:
                    error = (errors.UNKNOWN_TOPIC_OR_PARTITION if _LEGAL_TOPIC.fullmatch(name)
                             and name not in (".", "..") else INVALID_TOPIC)
                    topics.append(topic_cls(error_code=error.code, name=name,
                                            topic_id=_ZERO_UUID, is_internal=False,
                                            partitions=[], topic_authorized_operations=bits))
                continue
            first = cursor.partition_index if cursor is not None and name == after else 0
            upper = min(len(t.partitions), first + remaining)
            parts = [part_cls(
                error_code=0, partition_index=i, leader_id=p.leader,
                leader_epoch=p.leader_epoch, replica_nodes=list(p.replicas),
                isr_nodes=list(p.isr), eligible_leader_replicas=list(p.elr),
                last_known_elr=list(p.last_known_elr),
                offline_replicas=[r for r in p.replicas if r in fenced] if fenced else [])
                for i, p in enumerate(t.partitions[first:upper], start=first)] \
                if first < upper else []
            topics.append(topic_cls(error_code=0, name=name, topic_id=uuid.UUID(t.topic_id),
                                    is_internal=False, partitions=parts,
                                    topic_authorized_operations=bits))
            if upper < len(t.partitions):
                next_cursor = cls.Cursor(topic_name=name, partition_index=upper)
                break
            remaining -= len(parts)
        if not allowed and not every:
            topics += [topic_cls(error_code=TOPIC_AUTHORIZATION_FAILED.code, name=name,
                                 topic_id=_ZERO_UUID, is_internal=False, partitions=[],
                                 topic_authorized_operations=_NO_AUTHORIZED_OPERATIONS)
                       for name in sorted(names)]
        return cls(version=version, throttle_time_ms=0, topics=topics, next_cursor=next_cursor)

    # -- DescribeCluster ---------------------------------------------------------------------------
    def describe_cluster(self, request: Any, version: int, session: Session) -> Any:
        cls = apis.RESPONSES[60]

        def fail(error: ErrorCode, message: str) -> Any:
            return cls(version=version, throttle_time_ms=0, error_code=error.code,
                       error_message=message, endpoint_type=1, cluster_id="",
                       controller_id=-1, brokers=[], authorized_operations=None)

        if not self._allowed(session, Operation.DESCRIBE):
            return fail(errors.CLUSTER_AUTHORIZATION_FAILED,
                        "DescribeCluster needs DESCRIBE on CLUSTER")
        if version >= 1 and request.endpoint_type != 1:
            return fail(UNSUPPORTED_ENDPOINT_TYPE,
                        "this listener describes brokers only (endpoint type 1)")
        include_fenced = version >= 2 and bool(request.include_fenced_brokers)
        image = self.cluster.image
        brokers = [cls.DescribeClusterBroker(
            broker_id=b.id, host=self.endpoints[b.id].host, port=self.endpoints[b.id].port,
            rack=b.rack, is_fenced=b.fenced)
            for b in sorted(image.brokers.values(), key=lambda b: b.id)
            if b.id in self.endpoints and (include_fenced or not b.fenced)]
        return cls(version=version, throttle_time_ms=0, error_code=0, error_message=None,
                   endpoint_type=1, cluster_id=image.cluster_id,
                   controller_id=self.controller_id(), brokers=brokers,
                   authorized_operations=self._authorized_ops(
                       session, bool(request.include_cluster_authorized_operations)))

    # -- CreateTopics ------------------------------------------------------------------------------
    def create_topics(self, request: Any, version: int, session: Session) -> Any:
        cls = apis.RESPONSES[19]
        allowed = self._allowed(session, Operation.CREATE)
        results = []
        seen: set[str] = set()
        created = False
        for t in request.topics:
            error, message = self._create_one(t, allowed, seen, bool(request.validate_only))
            seen.add(t.name)
            created |= error.ok and not request.validate_only
            topic = self.cluster.image.topics.get(t.name) if error.ok else None
            results.append(cls.CreatableTopicResult(
                name=t.name, topic_id=uuid.UUID(topic.topic_id) if topic else _ZERO_UUID,
                error_code=error.code, error_message=message or None, topic_config_error_code=0,
                num_partitions=len(topic.partitions) if topic else -1,
                replication_factor=len(topic.partitions[0].replicas)
                if topic and topic.partitions else -1,
                configs=[] if error.ok else None))
        if created:
            self.cluster.checkpoint()  # makes the new topics' records durable before answering
        return cls(version=version, throttle_time_ms=0, topics=results)

    def _create_one(self, t: Any, allowed: bool, seen: set[str],
                    validate_only: bool) -> tuple[ErrorCode, str]:
        if not allowed:
            return TOPIC_AUTHORIZATION_FAILED, "CreateTopics needs CREATE on CLUSTER"
        if t.name in seen:
            return errors.INVALID_REQUEST, f"topic {t.name!r} is listed more than once"
        if t.name in self.cluster.image.topics:
            return TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists."
        configs: dict[str, str] = {}
        for c in t.configs or ():
            if c.value is None:  # Kafka's ControllerConfigurationValidator
                return errors.INVALID_REQUEST, ("Null value not supported for topic configs: "
                                                f"{c.name}")
            configs[c.name] = c.value
        brokers = len(self.cluster.image.brokers)
        assignment = None
        if t.assignments:
            if t.num_partitions != -1 or t.replication_factor != -1:
                return errors.INVALID_REQUEST, ("give either assignments or numPartitions/"
                                                "replicationFactor, not both")
            # ReplicationControlManager.createTopic's checks of the partition indexes; the
            # controller checks every replica list (validateManualPartitionAssignment).
            by_index: dict[int, list[int]] = {}
            for a in t.assignments:
                if a.partition_index in by_index:
                    return errors.INVALID_REPLICA_ASSIGNMENT, (
                        "Found multiple manual partition assignments for partition "
                        f"{a.partition_index}")
                by_index[a.partition_index] = list(a.broker_ids)
            if sorted(by_index) != list(range(len(by_index))):
                return errors.INVALID_REPLICA_ASSIGNMENT, (
                    "partitions should be a consecutive 0-based integer sequence")
            assignment = [by_index[i] for i in range(len(by_index))]
            partitions, rf = len(assignment), -1
        else:
            partitions = 1 if t.num_partitions == -1 else t.num_partitions
            rf = min(3, brokers) if t.replication_factor == -1 else t.replication_factor
            if partitions <= 0:
                return errors.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
            if rf <= 0 or rf > brokers:
                return errors.INVALID_REPLICATION_FACTOR, (
                    f"Replication factor: {rf} must be between 1 and the {brokers} brokers")
        try:
            result = self.cluster.controller.create_topic(
                t.name, partitions, rf, rng=self.cluster.rng, assignment=assignment,
                validate_only=validate_only, configs=configs)
        except ValueError as e:
            return INVALID_TOPIC, str(e)
        return result.error, result.message

    # -- UnregisterBroker --------------------------------------------------------------------------
    def unregister_broker(self, request: Any, version: int, session: Session) -> Any:
        """ControllerApis.handleUnregisterBroker: ALTER on CLUSTER, then the controller's
        answer (the twin's, as Kafka's: a running broker is unregistered too)."""
        if not self._allowed(session, Operation.ALTER):
            return self._response(64, version, throttle_time_ms=0,
                                  error_code=errors.CLUSTER_AUTHORIZATION_FAILED.code,
                                  error_message="UnregisterBroker needs ALTER on CLUSTER")
        r = self.cluster.unregister_broker(int(request.broker_id))
        return self._response(64, version, throttle_time_ms=0, error_code=r.error.code,
                              error_message=r.message or None)

    # -- ElectLeaders ------------------------------------------------------------------------------
    def elect_leaders(self, request: Any, version: int, session: Session) -> Any:
        cls = apis.RESPONSES[43]
        wanted = None if request.topic_partitions is None else [
            TopicPartition(t.topic, p) for t in request.topic_partitions for p in t.partitions]
        kind = 0 if version == 0 else request.election_type

        def respond(top: ErrorCode, results: dict[TopicPartition, ApiResult]) -> Any:
            grouped: dict[str, list[Any]] = defaultdict(list)
            for tp_, r in results.items():
                grouped[tp_.topic].append(cls.ReplicaElectionResult.PartitionResult(
                    partition_id=tp_.partition, error_code=r.error.code,
                    error_message=r.message or None))
            return cls(version=version, throttle_time_ms=0, error_code=top.code,
                       replica_election_results=[
                           cls.ReplicaElectionResult(topic=t, partition_result=ps)
                           for t, ps in grouped.items()])

        def everywhere(error: ErrorCode, message: str) -> Any:
            return respond(error, {tp_: ApiResult(error, message) for tp_ in wanted or ()})

        if not self._allowed(session, Operation.ALTER):
            return everywhere(errors.CLUSTER_AUTHORIZATION_FAILED,
                              "ElectLeaders needs ALTER on CLUSTER")
        if kind not in (0, 1):
            return everywhere(errors.INVALID_REQUEST, f"unknown election type {kind}")
        try:
            outcome = self.cluster.elect_leaders(
                ElectionType.PREFERRED if kind == 0 else ElectionType.UNCLEAN, wanted)
        except KafkaApiError as e:
            return everywhere(e.error, e.message)
        return respond(errors.NONE, outcome.results)

    # -- reassignments -----------------------------------------------------------------------------
    def alter_partition_reassignments(self, request: Any, version: int, session: Session) -> Any:
        cls = apis.RESPONSES[45]
        changes: dict[TopicPartition, list[int] | None] = {}
        for t in request.topics:
            for p in t.partitions:
                changes[TopicPartition(t.name, p.partition_index)] = (
                    None if p.replicas is None else list(p.replicas))
        allow_rf_change = version < 1 or bool(request.allow_replication_factor_change)

        def respond(top: ErrorCode, top_message: str,
                    results: dict[TopicPartition, ApiResult]) -> Any:
            grouped: dict[str, list[Any]] = defaultdict(list)
            for tp_, r in results.items():
                grouped[tp_.topic].append(
                    cls.ReassignableTopicResponse.ReassignablePartitionResponse(
                        partition_index=tp_.partition, error_code=r.error.code,
                        error_message=r.message or None))
            return cls(version=version, throttle_time_ms=0,
                       allow_replication_factor_change=allow_rf_change, error_code=top.code,
                       error_message=top_message or None, responses=[
                           cls.ReassignableTopicResponse(name=t, partitions=ps)
                           for t, ps in grouped.items()])

        if not self._allowed(session, Operation.ALTER):
            msg = "AlterPartitionReassignments needs ALTER on CLUSTER"
            return respond(errors.CLUSTER_AUTHORIZATION_FAILED, msg,
                           {tp_: ApiResult(errors.CLUSTER_AUTHORIZATION_FAILED, msg)
                            for tp_ in changes})
        refused: dict[TopicPartition, ApiResult] = {}
        if not allow_rf_change:
            for tp_, target in changes.items():
                p = self.cluster.image.partition(tp_)
                if target is not None and p is not None and len(target) != len(p.original):
                    refused[tp_] = ApiResult(errors.INVALID_REPLICATION_FACTOR, (
                        f"{tp_}: the target changes the replication factor from "
                        f"{len(p.original)} to {len(target)} and the request forbids that"))
        try:
            results = self.cluster.alter_partition_reassignments(
                {tp_: t for tp_, t in changes.items() if tp_ not in refused})
        except KafkaApiError as e:
            return respond(e.error, e.message, {tp_: ApiResult(e.error, e.message)
                                                for tp_ in changes})
        results.update(refused)
        return respond(errors.NONE, "", {tp_: results[tp_] for tp_ in changes})

    def list_partition_reassignments(self, request: Any, version: int, session: Session) -> Any:
        cls = apis.RESPONSES[46]

        def respond(error: ErrorCode, message: str, topics: list[Any]) -> Any:
            return cls(version=version, throttle_time_ms=0, error_code=error.code,
                       error_message=message or None, topics=topics)

        if not self._allowed(session, Operation.DESCRIBE):
            return respond(errors.CLUSTER_AUTHORIZATION_FAILED,
                           "ListPartitionReassignments needs DESCRIBE on CLUSTER", [])
        wanted = None if request.topics is None else [
            TopicPartition(t.name, p) for t in request.topics for p in t.partition_indexes]
        try:
            listing = self.cluster.list_partition_reassignments(wanted)
        except KafkaApiError as e:
            return respond(e.error, e.message, [])
        grouped: dict[str, list[Any]] = defaultdict(list)
        part_cls = cls.OngoingTopicReassignment.OngoingPartitionReassignment
        for tp_, o in listing.items():
            grouped[tp_.topic].append(part_cls(
                partition_index=tp_.partition, replicas=list(o.replicas),
                adding_replicas=list(o.adding), removing_replicas=list(o.removing)))
        return respond(errors.NONE, "", [cls.OngoingTopicReassignment(name=t, partitions=ps)
                                         for t, ps in grouped.items()])

    # -- DescribeLogDirs / AlterReplicaLogDirs (KIP-113) ------------------------------------------
    def describe_log_dirs(self, request: Any, version: int, session: Session) -> Any:
        cls = apis.RESPONSES[35]
        result_cls = cls.DescribeLogDirsResult
        part_cls = result_cls.DescribeLogDirsTopic.DescribeLogDirsPartition
        if not self._allowed(session, Operation.DESCRIBE):
            return cls(version=version, throttle_time_ms=0,
                       error_code=errors.CLUSTER_AUTHORIZATION_FAILED.code, results=[])
        broker = session.broker_id
        wanted = None if request.topics is None else [
            TopicPartition(t.topic, i) for t in request.topics for i in t.partitions]
        try:
            dirs = self.cluster.describe_log_dirs([broker], wanted).get(broker, ())
        except KafkaApiError as e:
            return cls(version=version, throttle_time_ms=0, error_code=e.error.code, results=[])
        results = []
        for d in dirs:
            grouped: dict[str, list[Any]] = defaultdict(list)
            for r in d.replicas:
                grouped[r.tp.topic].append(part_cls(
                    partition_index=r.tp.partition, partition_size=r.size_bytes,
                    offset_lag=r.offset_lag, is_future_key=r.future))
            results.append(result_cls(
                error_code=0, log_dir=d.path, topics=[
                    result_cls.DescribeLogDirsTopic(name=t, partitions=ps)
                    for t, ps in grouped.items()],
                total_bytes=-1 if d.total_bytes is None else d.total_bytes,
                usable_bytes=-1 if d.usable_bytes is None else d.usable_bytes,
                is_cordoned=d.cordoned))
        return cls(version=version, throttle_time_ms=0, error_code=0, results=results)

    def alter_replica_log_dirs(self, request: Any, version: int, session: Session) -> Any:
        """Asked of the broker this listener stands for; ALTER on CLUSTER, as Kafka's
        KafkaApis.handleAlterReplicaLogDirsRequest (every partition refused without it)."""
        cls = apis.RESPONSES[34]
        moves = {(TopicPartition(t.name, i), session.broker_id): d.path
                 for d in request.dirs for t in d.topics for i in t.partitions}
        if not self._allowed(session, Operation.ALTER):
            results = dict.fromkeys(moves, ApiResult(errors.CLUSTER_AUTHORIZATION_FAILED))
        else:
            try:
                results = self.cluster.alter_replica_log_dirs(moves)
            except KafkaApiError as e:
                results = dict.fromkeys(moves, ApiResult(e.error, e.message))
        grouped: dict[str, list[Any]] = defaultdict(list)
        topic_cls = cls.AlterReplicaLogDirTopicResult
        for (tp_, _), r in results.items():
            grouped[tp_.topic].append(topic_cls.AlterReplicaLogDirPartitionResult(
                partition_index=tp_.partition, error_code=r.error.code))
        return cls(version=version, throttle_time_ms=0, results=[
            topic_cls(topic_name=t, partitions=ps) for t, ps in grouped.items()])

    # -- configs -----------------------------------------------------------------------------------
    def _config_denied(self, rtype: str, session: Session, *ops: Operation) -> ErrorCode | None:
        if self._allowed(session, *ops):
            return None
        return errors.CLUSTER_AUTHORIZATION_FAILED if rtype == "BROKER" \
            else TOPIC_AUTHORIZATION_FAILED

    def _resource_problem(self, rtype: str | None, name: str) -> ApiResult | None:
        if rtype is None:
            return ApiResult(errors.INVALID_REQUEST, "only TOPIC (2) and BROKER (4) resources "
                                                     "are supported")
        if rtype == "TOPIC" and name not in self.cluster.image.topics:
            return ApiResult(errors.UNKNOWN_TOPIC_OR_PARTITION,
                             f"The topic '{name}' does not exist.")
        if rtype == "BROKER" and name and (not is_whole_number(name)
                                           or int(name) not in self.cluster.image.brokers):
            return ApiResult(errors.INVALID_REQUEST, f"broker {name!r} is not registered")
        return None

    def describe_configs(self, request: Any, version: int, session: Session) -> Any:
        cls = apis.RESPONSES[32]
        results = []
        for res in request.resources:
            rtype = _RESOURCE_TYPES.get(res.resource_type)
            denied = self._config_denied(rtype or "BROKER", session, Operation.DESCRIBE,
                                         Operation.DESCRIBE_CONFIGS)
            problem = ApiResult(denied, "DescribeConfigs needs DESCRIBE_CONFIGS (or DESCRIBE)") \
                if denied is not None else self._resource_problem(rtype, res.resource_name)
            configs = []
            if problem is None:
                assert rtype is not None
                try:
                    values = self.cluster.describe_configs([(rtype, res.resource_name)])
                except KafkaApiError as e:
                    problem = ApiResult(e.error, e.message)
                    values = {}
                keys = None if res.configuration_keys is None else set(res.configuration_keys)
                source = _SOURCE_TOPIC if rtype == "TOPIC" else (
                    _SOURCE_BROKER if res.resource_name else _SOURCE_DEFAULT_BROKER)
                dynamic = values.get((rtype, res.resource_name), {})
                for key in sorted(set(ALTERABLE_CONFIGS[rtype]) | set(dynamic)):
                    if keys is not None and key not in keys:
                        continue
                    if is_sensitive_config(rtype, key):
                        # Kafka takes a broker config name it does not know as a custom one,
                        # and hides it as sensitive: read-only, of unknown type, value null
                        configs.append(cls.DescribeConfigsResult.DescribeConfigsResourceResult(
                            name=key, value=None, read_only=True, config_source=source,
                            is_default=False, is_sensitive=True, synonyms=[],
                            config_type=_TYPE_UNKNOWN, documentation=None))
                        continue
                    value = dynamic.get(key)
                    configs.append(cls.DescribeConfigsResult.DescribeConfigsResourceResult(
                        name=key, value=value if value is not None else _DEFAULTS[key],
                        read_only=False,
                        config_source=source if value is not None else _SOURCE_DEFAULT,
                        is_default=value is None, is_sensitive=False, synonyms=[],
                        config_type=_CONFIG_TYPES.get(key, _TYPE_STRING),
                        documentation=None))
            results.append(cls.DescribeConfigsResult(
                error_code=problem.error.code if problem else 0,
                error_message=problem.message if problem else None,
                resource_type=res.resource_type, resource_name=res.resource_name,
                configs=configs))
        return cls(version=version, throttle_time_ms=0, results=results)

    def incremental_alter_configs(self, request: Any, version: int, session: Session) -> Any:
        cls = apis.RESPONSES[44]
        out: list[tuple[Any, ApiResult]] = []
        for res in request.resources:
            rtype = _RESOURCE_TYPES.get(res.resource_type)
            out.append((res, self._alter_one(rtype, res, session, bool(request.validate_only))))
        return cls(version=version, throttle_time_ms=0, responses=[
            cls.AlterConfigsResourceResponse(
                error_code=r.error.code, error_message=r.message or None,
                resource_type=res.resource_type, resource_name=res.resource_name)
            for res, r in out])

    def _alter_one(self, rtype: str | None, res: Any, session: Session,
                   validate_only: bool) -> ApiResult:
        denied = self._config_denied(rtype or "BROKER", session, Operation.ALTER,
                                     Operation.ALTER_CONFIGS)
        if denied is not None:
            return ApiResult(denied, "IncrementalAlterConfigs needs ALTER (or ALTER_CONFIGS) "
                                     "on CLUSTER")
        problem = self._resource_problem(rtype, res.resource_name)
        if problem is not None:
            return problem
        assert rtype is not None
        names = [c.name for c in res.configs]
        if len(set(names)) != len(names):
            return ApiResult(errors.INVALID_REQUEST, "Error due to duplicate config keys")
        if validate_only:
            return ApiResult(errors.INVALID_REQUEST, "validateOnly is not supported here")
        current = self.cluster.describe_configs([(rtype, res.resource_name)]).get(
            (rtype, res.resource_name), {})
        entries: dict[str, str | None] = {}
        for c in res.configs:
            op = c.config_operation
            if op == 0:
                entries[c.name] = c.value
            elif op == 1:
                entries[c.name] = None
            elif op in (2, 3):
                edited = _list_edit(rtype, c.name, op, c.value,
                                    entries.get(c.name, current.get(c.name)))
                if isinstance(edited, ApiResult):
                    return edited
                entries[c.name] = edited
            else:
                return ApiResult(errors.INVALID_REQUEST, f"{c.name}: unknown config operation {op}")
        try:
            return self.cluster.incremental_alter_configs(
                {(rtype, res.resource_name): entries})[(rtype, res.resource_name)]
        except KafkaApiError as e:
            return ApiResult(e.error, e.message)

    # -- the metadata quorum (KIP-595 DescribeQuorum, KIP-853 voter changes) ---------------------
    def describe_quorum(self, request: Any, version: int, session: Session) -> Any:
        cls = apis.RESPONSES[55]
        topic_cls = cls.TopicData
        part_cls = topic_cls.PartitionData
        state_cls = part_cls.ReplicaState if hasattr(part_cls, "ReplicaState") else None
        if not self._allowed(session, Operation.DESCRIBE):
            return cls(version=version, error_code=errors.CLUSTER_AUTHORIZATION_FAILED.code,
                       error_message="DescribeQuorum needs DESCRIBE on CLUSTER", topics=[],
                       nodes=[])
        topics = []
        for t in request.topics:
            parts = []
            for p in t.partitions:
                parts.append(self._quorum_partition(part_cls, state_cls, t.topic_name,
                                                    p.partition_index))
            topics.append(topic_cls(topic_name=t.topic_name, partitions=parts))
        nodes = []
        for node_id, ep in sorted(self.endpoints.items()):
            nodes.append(cls.Node(node_id=node_id, listeners=[
                cls.Node.Listener(name="PLAINTEXT", host=ep.host, port=ep.port)]))
        return cls(version=version, error_code=0, error_message=None, topics=topics,
                   nodes=nodes)

    def _quorum_partition(self, part_cls: Any, state_cls: Any, topic: str, index: int) -> Any:
        def failed(error: ErrorCode, message: str, leader: int = -1, epoch: int = -1) -> Any:
            return part_cls(partition_index=index, error_code=error.code, error_message=message,
                            leader_id=leader, leader_epoch=epoch, high_watermark=-1,
                            current_voters=[], observers=[])

        if topic != METADATA_TOPIC or index != 0:
            return failed(errors.UNKNOWN_TOPIC_OR_PARTITION,
                          f"the metadata quorum is {METADATA_TOPIC}-0, not {topic}-{index}")
        try:
            q = self.cluster.describe_quorum()
        except KafkaApiError as e:
            return failed(e.error, e.message)
        voters = set(q.current_voters)

        def state(r: Any) -> Any:
            return state_cls(replica_id=r.replica_id, replica_directory_id=_ZERO_UUID,
                             log_end_offset=r.log_end_offset,
                             last_fetch_timestamp=r.last_fetch_timestamp,
                             last_caught_up_timestamp=r.last_caught_up_timestamp)

        return part_cls(partition_index=index, error_code=0, error_message=None,
                        leader_id=q.leader_id, leader_epoch=q.leader_epoch,
                        high_watermark=q.high_watermark,
                        current_voters=[state(r) for r in q.replicas if r.replica_id in voters],
                        observers=[state(r) for r in q.replicas if r.replica_id not in voters])

    def add_raft_voter(self, request: Any, version: int, session: Session) -> Any:
        return self._voter_change(80, version, session, request,
                                  lambda: self.cluster.add_raft_voter(request.voter_id))

    def remove_raft_voter(self, request: Any, version: int, session: Session) -> Any:
        return self._voter_change(
            81, version, session, request,
            lambda: self.cluster.remove_raft_voter(request.voter_id))

    def _voter_change(self, key: int, version: int, session: Session, request: Any,
                      call: Callable[[], ApiResult]) -> Any:
        def respond(r: ApiResult) -> Any:
            return self._response(key, version, throttle_time_ms=0, error_code=r.error.code,
                                  error_message=r.message or None)

        if not self._allowed(session, Operation.ALTER):
            return respond(ApiResult(errors.CLUSTER_AUTHORIZATION_FAILED,
                                     "voter changes need ALTER on CLUSTER"))
        cid = request.cluster_id
        if cid is not None and cid != self.cluster.image.cluster_id:
            return respond(ApiResult(errors.INCONSISTENT_CLUSTER_ID,
                                     f"cluster id {cid!r} is not this cluster's"))
        try:
            return respond(call())
        except KafkaApiError as e:
            return respond(ApiResult(e.error, e.message))


QUORUM_APIS = {55: "describe_quorum", 80: "add_raft_voter", 81: "remove_raft_voter"}


def served_apis(cluster: object) -> dict[int, tuple[int, int]]:
    """Advertise only what this cluster can answer: the quorum APIs need its quorum methods."""
    return {k: v for k, v in apis.SERVED.items()
            if k not in QUORUM_APIS or callable(getattr(cluster, QUORUM_APIS[k], None))}


def iter_topics(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for tp_ in tps:
        out[tp_.topic].append(tp_.partition)
    return out


def _list_edit(rtype: str, key: str, op: int, value: str | None,
               current: str | None) -> str | ApiResult:
    """IncrementalAlterConfigs APPEND (2) / SUBTRACT (3) as Kafka's ConfigurationControlManager
    does them: the current items (or the default's) in their order, each new one appended
    once, each subtracted one removed; what is left is the value, even "" (kept as set)."""
    name = "APPEND" if op == 2 else "SUBTRACT"
    if rtype == "BROKER":
        # The twin models no broker config of LIST type; Kafka's answer for the throttle
        # rates (dynamic-only, so outside the brokers' config definition) is this one.
        return ApiResult(errors.INVALID_CONFIG, f"Unknown config name: {key}")
    if _CONFIG_TYPES.get(key) != _TYPE_LIST:
        return ApiResult(errors.INVALID_CONFIG,
                         f"Can't {name} to key {key} because its type is not LIST.")
    base = _DEFAULTS[key] if current is None else current
    items = [v for v in base.split(",") if v]
    for v in _java_split(value or ""):
        if op == 2 and v not in items:
            items.append(v)
        elif op == 3 and v in items:
            items.remove(v)
    return ",".join(items)


def _java_split(text: str) -> list[str]:
    """Java's ``String.split(",")``: trailing empty strings dropped."""
    parts = text.split(",")
    while parts and not parts[-1]:
        parts.pop()
    return parts
