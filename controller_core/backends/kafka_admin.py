"""The ``kafka`` backend: the ClusterAdmin port over kafka-python's KafkaAdminClient.

Requests are built with kafka-python's protocol classes (and the KIP-853 classes of
:mod:`controller_core.wire.raft_voter_messages`) and sent through the admin client's
connection manager, so per-partition error messages reach the caller intact. Top-level
transient failures (NOT_CONTROLLER, REQUEST_TIMED_OUT, leadership moving, disconnects) are
retried with exponential backoff within a bounded total time; then, and for every other
top-level failure, a :class:`KafkaApiError` with Kafka's code and a message naming the
bootstrap servers is raised. Secrets never appear in a message or a log line.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import ssl
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import kafka.errors as kerr
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    AlterReplicaLogDirsRequest,
    CreateTopicsRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeLogDirsRequest,
    DescribeQuorumRequest,
    DescribeTopicPartitionsRequest,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
    ListPartitionReassignmentsRequest,
)
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest
from kafka.record import MemoryRecords, MemoryRecordsBuilder

from controller_core import errors
from controller_core.admin import (
    CORDON_ALL,
    CORDONED_LOG_DIRS,
    IN_SYNC,
    LEADERLESS,
    MARKER_TOPIC_ACLS,
    MARKER_TOPIC_CONFIGS,
    NOT_HOSTED,
    OFFLINE,
    THROTTLE_MARKER_TOPIC,
    UNKNOWN_BROKER,
    UNKNOWN_PARTITION,
    UNKNOWN_TOPIC,
    UNREACHABLE,
    BrokerDescription,
    ClusterDescription,
    ConfigResource,
    ElectionOutcome,
    LogDir,
    LogDirReplica,
    OngoingReassignment,
    PartitionCounts,
    PartitionDescription,
    ReplicaStatus,
    behind,
    marker_replication_factor,
    under_replicated,
)
from controller_core.backends import last_words  # noqa: F401  (a kafka-python fix, on import)
from controller_core.backends.security import connection_settings
from controller_core.errors import ApiResult, ErrorCode, KafkaApiError
from controller_core.model import ElectionType, TopicPartition, is_whole_number, parse_endpoint
from controller_core.raft.describe import QuorumStatus
from controller_core.raft.describe import ReplicaStatus as QuorumReplica
from controller_core.wire.broker_messages import UnregisterBrokerRequest
from controller_core.wire.raft_voter_messages import AddRaftVoterRequest, RemoveRaftVoterRequest

T = TypeVar("T")
METADATA_TOPIC = "__cluster_metadata"
NETWORK_EXCEPTION = ErrorCode.of(kerr.NetworkExceptionError)
SASL_AUTHENTICATION_FAILED = ErrorCode.of(kerr.SaslAuthenticationFailedError)
UNSUPPORTED_SASL_MECHANISM = ErrorCode.of(kerr.UnsupportedSaslMechanismError)
LEADER_NOT_AVAILABLE = ErrorCode.of(kerr.LeaderNotAvailableError)
NOT_LEADER_OR_FOLLOWER = ErrorCode.of(kerr.NotLeaderForPartitionError)
TOPIC_AUTHORIZATION_FAILED = ErrorCode.of(kerr.TopicAuthorizationFailedError)
# Top-level errors worth another attempt: the request was not acted on, or leadership moved.
RETRIABLE = frozenset(e.code for e in (errors.NOT_CONTROLLER, errors.REQUEST_TIMED_OUT,
                                       LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER,
                                       NETWORK_EXCEPTION))
_RESOURCE_CODES = {"TOPIC": 2, "BROKER": 4}
_DYNAMIC_SOURCE = {"TOPIC": 1, "BROKER": 2}  # TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG
_DEFAULT_BROKER_SOURCE = 3  # DYNAMIC_DEFAULT_BROKER_CONFIG (resource name "")
DESCRIBE_TOPIC_PARTITIONS = int(DescribeTopicPartitionsRequest.API_KEY)  # 75, KIP-966
# Partitions per DescribeTopicPartitions answer: Kafka caps it at its
# max.request.partition.size.limit (2,000 by default) anyway.
PARTITION_PAGE = 2000
REASSIGNMENT_SLICE = 10_000  # partitions per ListPartitionReassignments of a count
_NO_SUCH_TOPIC = frozenset((errors.UNKNOWN_TOPIC_OR_PARTITION.code,
                            ErrorCode.of(kerr.InvalidTopicError).code))


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    total_seconds: float = 30.0
    initial_backoff_seconds: float = 0.1
    max_backoff_seconds: float = 2.0
    request_timeout_ms: int = 10_000


class _Retry(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def _check(code: int, message: str | None, what: str) -> None:
    """Raise for a top-level error: retriable ones as _Retry, the rest as KafkaApiError."""
    if code == 0:
        return
    error = ErrorCode.for_code(code)
    text = f"{what}: {message or error.name}"
    if code in RETRIABLE:
        raise _Retry(error, text)
    raise KafkaApiError(error, text)


class KafkaAdmin:
    """ClusterAdmin over the Kafka protocol. ``client`` is a connected KafkaAdminClient."""

    def __init__(self, client: Any, bootstrap_servers: str, *,
                 retry: RetryPolicy = RetryPolicy(),
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.client = client
        self.bootstrap_servers = bootstrap_servers
        self.retry = retry
        self._sleep = sleep
        self._clock = clock
        self._wall_ms = wall_ms
        self._cluster_id: str | None = None
        self.partition_page = PARTITION_PAGE  # partitions per DescribeTopicPartitions answer

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> KafkaAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport ---------------------------------------------------------------------------------
    def _send(self, request: Any, node_id: int | None = None) -> Any:
        manager = self.client._manager
        return manager.run(manager.send, request, node_id, self.retry.request_timeout_ms)

    def _send_to_controller(self, request: Any) -> Any:
        async def send() -> Any:
            return await self.client._send_request_to_controller(request)
        return self.client._manager.run(send)

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` with retries on transient failures, within the policy's total time."""
        deadline = self._clock() + self.retry.total_seconds
        backoff = self.retry.initial_backoff_seconds
        attempts = 0
        while True:
            attempts += 1
            try:
                return fn()
            except _Retry as e:
                error, message = e.error, e.message
                if error == errors.NOT_CONTROLLER:
                    self.client._controller_id = None  # ask again who the controller is
            except kerr.SaslAuthenticationFailedError as e:
                raise KafkaApiError(SASL_AUTHENTICATION_FAILED, (
                    f"{what}: authentication to {self.bootstrap_servers} failed: {e}; check "
                    "the Secret's sasl.username/sasl.password")) from None
            except kerr.AuthorizationError as e:
                raise KafkaApiError(ErrorCode.for_code(int(e.errno)), f"{what}: {e}") from None
            except (kerr.KafkaConnectionError, kerr.NodeNotReadyError, kerr.KafkaTimeoutError,
                    kerr.RequestTimedOutError, kerr.NotControllerError,
                    kerr.UnknownBrokerIdError) as e:
                error = errors.REQUEST_TIMED_OUT if isinstance(
                    e, kerr.KafkaTimeoutError | kerr.RequestTimedOutError) else NETWORK_EXCEPTION
                message = f"{what}: {type(e).__name__}: {e}"
                # Ask again where controller-bound requests go: in KRaft a broker answers
                # DescribeCluster with a random live broker as "controller", and that broker
                # may be the one that just died (it stays unknown to the client's metadata).
                self.client._controller_id = None
                # A broker that restarted, or one the client never met, is unknown to its
                # metadata until the next refresh: ask for one now, not at metadata.max.age.
                with contextlib.suppress(Exception):
                    self.client._manager.cluster.request_update()
            except kerr.BrokerResponseError as e:
                raise KafkaApiError(ErrorCode.for_code(int(e.errno)), f"{what}: {e}") from None
            now = self._clock()
            if now + backoff > deadline:
                raise KafkaApiError(error, (
                    f"{message} (gave up after {attempts} attempt(s) over "
                    f"{self.retry.total_seconds:.0f} s against {self.bootstrap_servers})"))
            self._sleep(backoff)
            backoff = min(backoff * 2, self.retry.max_backoff_seconds)

    def _refresh_metadata(self) -> None:
        """Ask for new metadata at the next request: a broker that did not answer may be
        back by then under a new registration, which the client's metadata (refreshed every
        metadata.max.age.ms, 5 minutes) would not know of."""
        with contextlib.suppress(Exception):
            self.client._manager.cluster.request_update()

    # -- cluster -----------------------------------------------------------------------------------
    def now_ms(self) -> int:
        return self._wall_ms()

    def describe_cluster(self) -> ClusterDescription:
        def go() -> ClusterDescription:
            r = self._send(DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                  endpoint_type=1, include_fenced_brokers=True))
            _check(r.error_code, r.error_message, "DescribeCluster")
            self._cluster_id = r.cluster_id
            return ClusterDescription(r.cluster_id, r.controller_id, tuple(
                BrokerDescription(b.broker_id, b.rack, bool(getattr(b, "is_fenced", False)))
                for b in sorted(r.brokers, key=lambda b: b.broker_id)))
        return self._call("DescribeCluster", go)

    def _metadata(self, topics: list[str] | None) -> Any:
        _Topic = MetadataRequest.MetadataRequestTopic
        request = MetadataRequest(
            topics=None if topics is None else [_Topic(name=t) for t in topics],
            allow_auto_topic_creation=False)
        r = self._send(request)
        _check(getattr(r, "error_code", 0) or 0, None, "Metadata")
        for t in r.topics:
            if t.error_code == TOPIC_AUTHORIZATION_FAILED.code:
                raise KafkaApiError(TOPIC_AUTHORIZATION_FAILED,
                                    f"Metadata: not authorized to describe topic {t.name!r}")
        return r

    def _offers(self, api_key: int) -> bool:
        """Whether the brokers offer an API (their ApiVersions, as the client learnt it)."""
        known = getattr(self.client._manager, "broker_version_data", None)
        versions = getattr(known, "api_versions", None)
        return api_key in (versions or {})

    def _pages(self, names: list[str] | None, wanted: set[TopicPartition] | None
               ) -> Iterator[tuple[TopicPartition, Any]]:
        """The partitions of ``names`` (every topic for None; only the ``wanted`` partitions,
        if given) by KIP-966's DescribeTopicPartitions, at most ``partition_page`` partitions
        per request: no answer holds a whole 100,000-partition topic. Kafka pages in
        topic-name order and by partition index within a topic; its cursor names the first
        partition of the next page. A wanted topic's paging starts at its lowest wanted
        partition and ends once past its highest."""
        span: dict[str, tuple[int, int]] = {}
        for tp in wanted or ():
            lo, hi = span.get(tp.topic, (tp.partition, tp.partition))
            span[tp.topic] = (min(lo, tp.partition), max(hi, tp.partition))
        pending = None if names is None else sorted(set(names))
        _Topic = DescribeTopicPartitionsRequest.TopicRequest
        _Cursor = DescribeTopicPartitionsRequest.Cursor
        cursor = None
        if pending:
            cursor = _Cursor(topic_name=pending[0], partition_index=span.get(pending[0], (0,))[0])
        while pending is None or pending:
            r = self._send(DescribeTopicPartitionsRequest(
                topics=[_Topic(name=t) for t in pending or ()],
                response_partition_limit=self.partition_page, cursor=cursor))
            for t in r.topics:
                if t.error_code == TOPIC_AUTHORIZATION_FAILED.code:
                    raise KafkaApiError(TOPIC_AUTHORIZATION_FAILED, (
                        f"DescribeTopicPartitions: not authorized to describe topic {t.name!r}"))
                if t.error_code in _NO_SUCH_TOPIC:
                    continue  # unknown topics are omitted, as the port says
                _check(t.error_code, None, f"DescribeTopicPartitions of topic {t.name!r}")
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if wanted is None or tp in wanted:
                        yield tp, p
            nxt = r.next_cursor
            if nxt is None:
                break
            topic, start = nxt.topic_name, nxt.partition_index
            if pending is not None:  # the topics before the cursor's are done
                pending = [t for t in pending if t >= topic]
                if topic in span and start > span[topic][1]:  # past the last one wanted
                    pending = [t for t in pending if t != topic]
                    if not pending:
                        break
                    topic, start = pending[0], 0
                if topic in span:
                    start = max(start, span[topic][0])
            if cursor is not None and (topic, start) <= (cursor.topic_name,
                                                         cursor.partition_index):
                raise KafkaApiError(errors.UNKNOWN_SERVER_ERROR, (
                    f"DescribeTopicPartitions: the broker's next cursor ({topic!r}, {start}) "
                    f"does not move past ({cursor.topic_name!r}, {cursor.partition_index})"))
            cursor = _Cursor(topic_name=topic, partition_index=start)

    def _metadata_partitions(self, names: list[str] | None, wanted: set[TopicPartition] | None
                             ) -> list[tuple[TopicPartition, Any]]:
        """The same rows from a Metadata answer, which holds every partition of each topic."""
        meta = self._metadata(names)
        rows = []
        for t in meta.topics:
            if t.error_code not in (0, LEADER_NOT_AVAILABLE.code):
                continue  # unknown topics are omitted, as the port says
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if wanted is None or tp in wanted:
                    rows.append((tp, p))
        return rows

    def describe_partitions(self, topics: Iterable[str] | None = None,
                            partitions: Iterable[TopicPartition] | None = None
                            ) -> list[PartitionDescription]:
        wanted: set[TopicPartition] | None = None
        if partitions is not None:
            wanted = set(partitions)
            names: list[str] | None = sorted({tp.topic for tp in wanted})
        else:
            names = None if topics is None else list(dict.fromkeys(topics))
        if names == []:
            return []

        paged = self._offers(DESCRIBE_TOPIC_PARTITIONS)

        def go() -> list[PartitionDescription]:
            rows = (list(self._pages(names, wanted)) if paged
                    else self._metadata_partitions(names, wanted))
            ongoing = self._list_reassignments([tp for tp, _ in rows] if wanted else None)
            sizes = self._leader_sizes([(tp, p.leader_id) for tp, p in rows])
            out = []
            for tp, p in sorted(rows, key=lambda row: row[0]):
                o = ongoing.get(tp)
                out.append(PartitionDescription(
                    tp, tuple(p.replica_nodes), tuple(p.isr_nodes), p.leader_id,
                    p.leader_epoch, o.adding if o else (), o.removing if o else (),
                    sizes.get(tp), None, tuple(p.offline_replicas or ())))
            return out
        return self._call("DescribeTopicPartitions" if paged else "Metadata", go)

    def partition_counts(self) -> PartitionCounts:
        """Counted page by page (DescribeTopicPartitions where offered), with no log sizes
        and no row kept: a 100,000-partition cluster is never held whole."""
        paged = self._offers(DESCRIBE_TOPIC_PARTITIONS)

        def go() -> PartitionCounts:
            topics: set[str] = set()
            partitions = under = offline = 0
            # (partition, ISR size, replicas): under-replicated unless a move adds enough
            short: list[tuple[TopicPartition, int, int]] = []
            rows = self._pages(None, None) if paged else iter(
                self._metadata_partitions(None, None))
            for tp, p in rows:
                topics.add(tp.topic)
                partitions += 1
                if under_replicated(len(p.isr_nodes), len(p.replica_nodes), 0):
                    short.append((tp, len(p.isr_nodes), len(p.replica_nodes)))
                if p.leader_id < 0:
                    offline += 1
            # the moves of those partitions alone, a slice at a time: every reassignment of
            # a busy cluster (80,000) decoded at once was ~40 MiB a pass. With none short the
            # controller is still asked (for every move, so none): a cluster whose quorum is
            # gone answers with an error, and so the pass sees it.
            slices = [short[i:i + REASSIGNMENT_SLICE]
                      for i in range(0, len(short), REASSIGNMENT_SLICE)] or [[]]
            for part in slices:
                ongoing = self._list_reassignments([tp for tp, _, _ in part] if part else None)
                under += sum(under_replicated(
                    isr, replicas, len(ongoing[tp].adding) if tp in ongoing else 0)
                    for tp, isr, replicas in part)
            return PartitionCounts(len(topics), partitions, under, offline)
        return self._call("DescribeTopicPartitions" if paged else "Metadata", go)

    # -- log dirs ----------------------------------------------------------------------------------
    def _log_dirs(self, broker: int, tps: Iterable[TopicPartition]) -> dict[TopicPartition, Any]:
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in tps:
            by_topic[tp.topic].append(tp.partition)
        if not by_topic:
            return {}
        _Topic = DescribeLogDirsRequest.DescribableLogDirTopic
        r = self._send(DescribeLogDirsRequest(topics=[
            _Topic(topic=t, partitions=ps) for t, ps in by_topic.items()]), node_id=broker)
        _check(getattr(r, "error_code", 0) or 0, None, f"DescribeLogDirs on broker {broker}")
        out: dict[TopicPartition, Any] = {}
        for result in r.results:
            if result.error_code:
                continue
            for t in result.topics:
                for p in t.partitions:
                    if not p.is_future_key:
                        out[TopicPartition(t.name, p.partition_index)] = p
        return out

    def describe_log_dirs(self, brokers: Iterable[int],
                          partitions: Iterable[TopicPartition] | None = None
                          ) -> dict[int, tuple[LogDir, ...]]:
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = defaultdict(list)
            for tp in partitions:
                by_topic[tp.topic].append(tp.partition)
            _Topic = DescribeLogDirsRequest.DescribableLogDirTopic
            topics = [_Topic(topic=t, partitions=sorted(ps)) for t, ps in by_topic.items()]
        wanted = list(dict.fromkeys(brokers))

        def go() -> dict[int, tuple[LogDir, ...]]:
            out: dict[int, tuple[LogDir, ...]] = {}
            for broker in wanted:
                try:
                    r = self._send(DescribeLogDirsRequest(topics=topics), node_id=broker)
                except kerr.KafkaError:
                    self._refresh_metadata()  # it may be back (registered anew) next time
                    continue  # down (or gone): it has nothing to say, as the port says
                _check(getattr(r, "error_code", 0) or 0, None,
                       f"DescribeLogDirs on broker {broker}")
                out[broker] = tuple(sorted((_log_dir(broker, d) for d in r.results),
                                           key=lambda d: d.path))
            return out
        return self._call("DescribeLogDirs", go)

    def alter_replica_log_dirs(self, moves: Mapping[tuple[TopicPartition, int], str]
                               ) -> dict[tuple[TopicPartition, int], ApiResult]:
        by_broker: dict[int, dict[str, list[TopicPartition]]] = defaultdict(
            lambda: defaultdict(list))
        for (tp, broker), path in moves.items():
            by_broker[broker][path].append(tp)
        _Dir = AlterReplicaLogDirsRequest.AlterReplicaLogDir
        _Topic = _Dir.AlterReplicaLogDirTopic

        def request(dirs: Mapping[str, list[TopicPartition]]) -> Any:
            out = []
            for path, tps in dirs.items():
                topics: dict[str, list[int]] = defaultdict(list)
                for tp in tps:
                    topics[tp.topic].append(tp.partition)
                out.append(_Dir(path=path, topics=[_Topic(name=t, partitions=sorted(ps))
                                                   for t, ps in topics.items()]))
            return AlterReplicaLogDirsRequest(dirs=out)

        def go() -> dict[tuple[TopicPartition, int], ApiResult]:
            out: dict[tuple[TopicPartition, int], ApiResult] = {}
            for broker, dirs in by_broker.items():
                try:
                    r = self._send(request(dirs), node_id=broker)
                except kerr.KafkaError as e:  # down (or gone)
                    self._refresh_metadata()
                    unavailable = ApiResult(errors.BROKER_NOT_AVAILABLE, (
                        f"broker {broker} did not answer AlterReplicaLogDirs "
                        f"({type(e).__name__})"))
                    out.update({(tp, broker): unavailable
                                for tps in dirs.values() for tp in tps})
                    continue
                for t in r.results:
                    for p in t.partitions:
                        error = ErrorCode.for_code(p.error_code)
                        out[(TopicPartition(t.topic_name, p.partition_index), broker)] = \
                            ApiResult(error, "" if error.ok else _log_dir_problem(error, broker))
            return out
        if not by_broker:
            return {}
        return self._call("AlterReplicaLogDirs", go)

    def _leader_sizes(self, led: Iterable[tuple[TopicPartition, int]]) -> dict[TopicPartition, int]:
        by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp, leader in led:
            if leader >= 0:
                by_leader[leader].append(tp)
        sizes: dict[TopicPartition, int] = {}
        for leader, tps in by_leader.items():
            try:
                found = self._log_dirs(leader, tps)
            except (kerr.KafkaError, _Retry):
                continue  # a size is a nicety: an unreachable leader leaves it unknown
            sizes.update({tp: int(p.partition_size) for tp, p in found.items()})
        return sizes

    def replica_log_sizes(self, replicas: Iterable[tuple[TopicPartition, int]]
                          ) -> dict[tuple[TopicPartition, int], int]:
        by_broker: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp, broker in replicas:
            by_broker[broker].append(tp)

        def go() -> dict[tuple[TopicPartition, int], int]:
            out = {}
            for broker, tps in by_broker.items():
                try:
                    found = self._log_dirs(broker, tps)
                except (kerr.KafkaError, _Retry):
                    # DescribeLogDirs goes to the broker itself: a dead one (the very case a
                    # stall watch is for) answers nothing, and must not fail the whole pass
                    self._refresh_metadata()  # back under a new registration: reach it
                    continue
                for tp, p in found.items():
                    out[(tp, broker)] = int(p.partition_size)
            return out
        return self._call("DescribeLogDirs", go)

    def replica_status(self, replicas: Iterable[tuple[TopicPartition, int]] | None = None
                       ) -> list[ReplicaStatus]:
        def go() -> list[ReplicaStatus]:
            pairs: list[tuple[TopicPartition, int]]
            if replicas is None:
                pairs = [(tp, r) for tp, o in sorted(self._list_reassignments(None).items())
                         for r in o.replicas]
            else:
                pairs = list(replicas)
            meta = self._metadata(sorted({tp.topic for tp, _ in pairs})) if pairs else None
            parts: dict[TopicPartition, Any] = {}
            known_topics: set[str] = set()
            for t in meta.topics if meta else ():
                if t.error_code in (0, LEADER_NOT_AVAILABLE.code):
                    known_topics.add(t.name)
                    for p in t.partitions:
                        parts[TopicPartition(t.name, p.partition_index)] = p
            brokers = {b.node_id for b in meta.brokers} if meta else set()
            now = self._wall_ms()
            def offline(tp: TopicPartition, b: int) -> bool:  # on a fenced broker
                return b in (parts[tp].offline_replicas or ())

            hosted = [(tp, b) for tp, b in pairs if tp in parts and b in parts[tp].replica_nodes
                      and not offline(tp, b)]
            by_broker: dict[int, list[TopicPartition]] = defaultdict(list)
            for tp, b in hosted:
                by_broker[b].append(tp)
                leader = parts[tp].leader_id
                if leader >= 0:
                    by_broker[leader].append(tp)
            dirs: dict[int, dict[TopicPartition, Any]] = {}
            unreachable: set[int] = set()
            for b, tps in by_broker.items():
                try:
                    dirs[b] = self._log_dirs(b, set(tps))
                except (kerr.KafkaError, _Retry):
                    unreachable.add(b)  # died, not fenced yet: say so, not fail the rest
                    self._refresh_metadata()
            out = []
            for tp, b in pairs:
                if tp.topic not in known_topics:
                    out.append(ReplicaStatus(tp, b, UNKNOWN_TOPIC, time_ms=now))
                elif tp not in parts:
                    out.append(ReplicaStatus(tp, b, UNKNOWN_PARTITION, time_ms=now))
                elif b not in brokers and b not in parts[tp].replica_nodes:
                    out.append(ReplicaStatus(tp, b, UNKNOWN_BROKER, time_ms=now))
                elif b not in parts[tp].replica_nodes:
                    out.append(ReplicaStatus(tp, b, NOT_HOSTED, time_ms=now))
                elif offline(tp, b):
                    out.append(ReplicaStatus(tp, b, OFFLINE, time_ms=now))
                elif b in unreachable:
                    out.append(ReplicaStatus(tp, b, UNREACHABLE, time_ms=now))
                elif parts[tp].leader_id < 0:
                    mine = dirs.get(b, {}).get(tp)
                    out.append(ReplicaStatus(
                        tp, b, LEADERLESS, size_bytes=None if mine is None
                        else int(mine.partition_size), time_ms=now))
                else:
                    mine = dirs.get(b, {}).get(tp)
                    lead = dirs.get(parts[tp].leader_id, {}).get(tp)
                    size = int(mine.partition_size) if mine is not None else None
                    lag = int(mine.offset_lag) if mine is not None else None
                    lag_bytes = (max(0, int(lead.partition_size) - size)
                                 if lead is not None and size is not None else None)
                    status = IN_SYNC if lag == 0 and not lag_bytes else behind(lag or 0)
                    out.append(ReplicaStatus(tp, b, status, lag, lag_bytes, size, now))
            return out
        return self._call("DescribeLogDirs", go)

    # -- reassignments -----------------------------------------------------------------------------
    def alter_partition_reassignments(self, changes: Mapping[TopicPartition, Sequence[int] | None]
                                      ) -> dict[TopicPartition, ApiResult]:
        if not changes:
            return {}
        _Topic = AlterPartitionReassignmentsRequest.ReassignableTopic
        _Part = _Topic.ReassignablePartition
        grouped: dict[str, list[Any]] = defaultdict(list)
        for tp, target in changes.items():
            grouped[tp.topic].append(_Part(partition_index=tp.partition,
                                           replicas=None if target is None else list(target)))

        def go() -> dict[TopicPartition, ApiResult]:
            r = self._send_to_controller(AlterPartitionReassignmentsRequest(
                timeout_ms=self.retry.request_timeout_ms, allow_replication_factor_change=True,
                topics=[_Topic(name=t, partitions=ps) for t, ps in grouped.items()]))
            _check(r.error_code, r.error_message, "AlterPartitionReassignments")
            return {TopicPartition(t.name, p.partition_index):
                    ApiResult(ErrorCode.for_code(p.error_code), p.error_message or "")
                    for t in r.responses for p in t.partitions}
        return self._call("AlterPartitionReassignments", go)

    def _list_reassignments(self, partitions: Iterable[TopicPartition] | None
                            ) -> dict[TopicPartition, OngoingReassignment]:
        _Topic = ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics
        topics = None
        if partitions is not None:
            grouped: dict[str, list[int]] = defaultdict(list)
            for tp in partitions:
                grouped[tp.topic].append(tp.partition)
            if not grouped:
                return {}
            topics = [_Topic(name=t, partition_indexes=ps) for t, ps in grouped.items()]
        r = self._send_to_controller(ListPartitionReassignmentsRequest(
            timeout_ms=self.retry.request_timeout_ms, topics=topics))
        _check(r.error_code, r.error_message, "ListPartitionReassignments")
        return {TopicPartition(t.name, p.partition_index): OngoingReassignment(
            tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas))
            for t in r.topics for p in t.partitions}

    def list_partition_reassignments(self, partitions: Iterable[TopicPartition] | None = None
                                     ) -> dict[TopicPartition, OngoingReassignment]:
        wanted = None if partitions is None else list(partitions)
        listing = self._call("ListPartitionReassignments",
                             lambda: self._list_reassignments(wanted))
        return dict(sorted(listing.items()))

    # -- elections ---------------------------------------------------------------------------------
    def elect_leaders(self, election_type: ElectionType,
                      partitions: Iterable[TopicPartition] | None = None) -> ElectionOutcome:
        _Topic = ElectLeadersRequest.TopicPartitions
        wanted = None if partitions is None else list(dict.fromkeys(partitions))
        topics = None
        if wanted is not None:
            grouped: dict[str, list[int]] = defaultdict(list)
            for tp in wanted:
                grouped[tp.topic].append(tp.partition)
            topics = [_Topic(topic=t, partitions=ps) for t, ps in grouped.items()]
            if not topics:
                return ElectionOutcome({})
        kind = 0 if election_type is ElectionType.PREFERRED else 1

        def go() -> ElectionOutcome:
            r = self._send_to_controller(ElectLeadersRequest(
                election_type=kind, topic_partitions=topics,
                timeout_ms=self.retry.request_timeout_ms))
            _check(getattr(r, "error_code", 0) or 0, None, "ElectLeaders")
            results = {TopicPartition(t.topic, p.partition_id):
                       ApiResult(ErrorCode.for_code(p.error_code), p.error_message or "")
                       for t in r.replica_election_results for p in t.partition_result}
            return ElectionOutcome(results, tuple(results) if wanted is None else ())
        return self._call("ElectLeaders", go)

    # -- configs -----------------------------------------------------------------------------------
    @staticmethod
    def _node_for(resource: ConfigResource) -> int | None:
        """A broker's own dynamic configs are read and written on that broker."""
        rtype, name = resource
        return int(name) if rtype == "BROKER" and is_whole_number(name) else None

    def describe_configs(self, resources: Iterable[ConfigResource]
                         ) -> dict[ConfigResource, dict[str, str | None]]:
        by_node: dict[int | None, list[ConfigResource]] = defaultdict(list)
        for res in dict.fromkeys(resources):
            if res[0] not in _RESOURCE_CODES:
                raise KafkaApiError(errors.INVALID_REQUEST,
                                    f"DescribeConfigs: unsupported resource type {res[0]!r}")
            by_node[self._node_for(res)].append(res)
        _Res = DescribeConfigsRequest.DescribeConfigsResource

        def go() -> dict[ConfigResource, dict[str, str | None]]:
            out: dict[ConfigResource, dict[str, str | None]] = {}
            for node, group in by_node.items():
                r = self._send(DescribeConfigsRequest(resources=[
                    _Res(resource_type=_RESOURCE_CODES[t], resource_name=n,
                         configuration_keys=None) for t, n in group],
                    include_synonyms=False), node_id=node)
                for res, result in zip(group, r.results, strict=True):
                    if result.error_code == errors.UNKNOWN_TOPIC_OR_PARTITION.code:
                        out[res] = {}
                        continue
                    _check(result.error_code, result.error_message,
                           f"DescribeConfigs {res[0].lower()} {res[1]!r}")
                    source = _DYNAMIC_SOURCE[res[0]] if res[1] else _DEFAULT_BROKER_SOURCE
                    # a sensitive config shows its name with a null value (Kafka hides every
                    # broker config it does not know that way): listed, value None
                    out[res] = {c.name: c.value for c in result.configs
                                if c.config_source == source
                                and (c.value is not None or c.is_sensitive)}
            return out
        return self._call("DescribeConfigs", go)

    def incremental_alter_configs(self, changes: Mapping[ConfigResource, Mapping[str, str | None]]
                                  ) -> dict[ConfigResource, ApiResult]:
        by_node: dict[int | None, list[ConfigResource]] = defaultdict(list)
        out: dict[ConfigResource, ApiResult] = {}
        for res in changes:
            if res[0] not in _RESOURCE_CODES:
                out[res] = ApiResult(errors.INVALID_REQUEST,
                                     f"unsupported resource type {res[0]!r}")
            else:
                by_node[self._node_for(res)].append(res)
        _Res = IncrementalAlterConfigsRequest.AlterConfigsResource
        _Cfg = _Res.AlterableConfig

        def go() -> dict[ConfigResource, ApiResult]:
            for node, group in by_node.items():
                r = self._send(IncrementalAlterConfigsRequest(resources=[
                    _Res(resource_type=_RESOURCE_CODES[t], resource_name=n, configs=[
                        _Cfg(name=k, config_operation=0 if v is not None else 1, value=v)
                        for k, v in changes[(t, n)].items()]) for t, n in group],
                    validate_only=False), node_id=node)
                for res, result in zip(group, r.responses, strict=True):
                    if result.error_code in RETRIABLE:
                        _check(result.error_code, result.error_message, "IncrementalAlterConfigs")
                    out[res] = ApiResult(ErrorCode.for_code(result.error_code),
                                         result.error_message or "")
            return out
        return self._call("IncrementalAlterConfigs", go)

    # -- removing brokers (KIP-1066 cordoning, UnregisterBroker) ---------------------------------
    def unregister_broker(self, broker_id: int) -> ApiResult:
        def go() -> ApiResult:
            r = self._send(UnregisterBrokerRequest(broker_id=broker_id))
            if r.error_code in RETRIABLE:
                _check(r.error_code, r.error_message, "UnregisterBroker")
            return ApiResult(ErrorCode.for_code(r.error_code), r.error_message or "")
        return self._call("UnregisterBroker", go)

    def metadata_version(self) -> int | None:
        def go() -> int | None:
            r = self._send(ApiVersionsRequest(client_software_name="kraftsman",
                                              client_software_version="1"))
            _check(r.error_code, None, "ApiVersions")
            for f in getattr(r, "finalized_features", None) or ():
                if f.name == "metadata.version":
                    return int(f.max_version_level)
            return None
        return self._call("ApiVersions", go)

    def set_cordoned(self, brokers: Mapping[int, bool]) -> dict[int, ApiResult]:
        """The config is set on each broker, which checks the value and forwards it to the
        controller; the broker then reports its cordoned directories in its next heartbeat
        (every broker.heartbeat.interval.ms), and only that moves the controller's placement.
        A validate-only CreateTopics placing one replica on the broker is the probe: the
        controller refuses it exactly while it sees every log directory of the broker
        cordoned."""
        results = self.incremental_alter_configs(
            {("BROKER", str(b)): {CORDONED_LOG_DIRS: CORDON_ALL if yes else None}
             for b, yes in brokers.items()})
        out = {int(name): r for (_, name), r in results.items()}
        waiting = {b: yes for b, yes in brokers.items() if out[b].ok}
        deadline = self._clock() + self.retry.total_seconds
        while waiting:
            waiting = {b: yes for b, yes in waiting.items() if self._sees_cordoned(b) != yes}
            if not waiting:
                break
            if self._clock() >= deadline:
                for b, yes in waiting.items():
                    out[b] = ApiResult(errors.REQUEST_TIMED_OUT, (
                        f"broker {b} is {'cordoned' if yes else 'uncordoned'} in its config, but "
                        f"the controller did not see it within {self.retry.total_seconds:.0f} s: "
                        "a broker reports it in its heartbeats; is it running?"))
                break
            self._sleep(self.retry.initial_backoff_seconds)
        return out

    def _sees_cordoned(self, broker: int) -> bool:
        """Whether the controller sees every log directory of ``broker`` cordoned."""
        _T = CreateTopicsRequest.CreatableTopic
        request = CreateTopicsRequest(topics=[_T(
            name=f"__kraftsman_cordon_probe_{broker}", num_partitions=-1, replication_factor=-1,
            assignments=[_T.CreatableReplicaAssignment(partition_index=0, broker_ids=[broker])],
            configs=[])], timeout_ms=self.retry.request_timeout_ms, validate_only=True)

        def go() -> bool:
            t = self._send_to_controller(request).topics[0]
            if t.error_code in RETRIABLE:
                _check(t.error_code, t.error_message, "CreateTopics")
            return "log directories are cordoned" in (t.error_message or "")
        return self._call("CreateTopics (validate only)", go)

    # -- the throttle-marker topic -----------------------------------------------------------------
    def read_throttle_markers(self) -> dict[int, str]:
        """The marker topic read from its log start to its high watermark, as a consumer
        without a group would: the latest record of each key wins, a tombstone removes it."""
        def go() -> dict[int, str]:
            where = self._marker_leader()
            if where is None:
                return {}
            leader, topic_id = where
            offset = self._marker_offset(leader, EARLIEST)
            end = self._marker_offset(leader, LATEST)
            latest: dict[bytes, bytes | None] = {}
            while offset < end:
                offset = self._fetch_markers(leader, topic_id, offset, latest)
            return {int(k): v.decode() for k, v in latest.items()
                    if v is not None and k.isdigit()}
        return self._call(f"reading {THROTTLE_MARKER_TOPIC}", go)

    def write_throttle_markers(self, changes: Mapping[int, str | None]) -> list[str]:
        if not changes:
            return []
        records = [(str(b).encode(), None if v is None else v.encode())
                   for b, v in sorted(changes.items())]
        try:
            if self._call(f"reading {THROTTLE_MARKER_TOPIC}", self._marker_leader) is None:
                problem = self._create_marker_topic()
                if problem is not None:
                    return [problem]
            for batch in _marker_batches(records):
                problem = self._call(f"writing {THROTTLE_MARKER_TOPIC}",
                                     functools.partial(self._produce_markers, batch))
                if problem is not None:
                    return [problem]
        except KafkaApiError as e:
            return [e.message]
        return []

    def _marker_leader(self) -> tuple[int, uuid.UUID] | None:
        """The marker partition's leader and the topic's id; None: no such topic."""
        _Topic = MetadataRequest.MetadataRequestTopic
        r = self._send(MetadataRequest(topics=[_Topic(name=THROTTLE_MARKER_TOPIC)],
                                       allow_auto_topic_creation=False))
        t = r.topics[0]
        if t.error_code == errors.UNKNOWN_TOPIC_OR_PARTITION.code:
            return None
        _marker_check(t.error_code, "Metadata")
        p = next((p for p in t.partitions if p.partition_index == 0), None)
        if p is None or p.error_code or p.leader_id < 0:
            raise _Retry(LEADER_NOT_AVAILABLE, f"Metadata: {THROTTLE_MARKER_TOPIC}-0 has no "
                                               "leader yet")
        return int(p.leader_id), t.topic_id

    def _create_marker_topic(self) -> str | None:
        """CreateTopics of the marker topic (one compacted partition); a concurrent creator
        winning is as good. The problem, if the cluster refuses it."""
        brokers = [b for b in self.describe_cluster().brokers if not b.fenced]
        _T = CreateTopicsRequest.CreatableTopic
        request = CreateTopicsRequest(topics=[_T(
            name=THROTTLE_MARKER_TOPIC, num_partitions=1,
            replication_factor=marker_replication_factor(len(brokers)), assignments=[],
            configs=[_T.CreatableTopicConfig(name=k, value=v)
                     for k, v in MARKER_TOPIC_CONFIGS.items()])],
            timeout_ms=self.retry.request_timeout_ms, validate_only=False)

        def go() -> str | None:
            r = self._send_to_controller(request)
            t = r.topics[0]
            if t.error_code in (0, errors.TOPIC_ALREADY_EXISTS.code):
                return None
            if t.error_code in RETRIABLE:
                _check(t.error_code, t.error_message, "CreateTopics")
            if t.error_code in (TOPIC_AUTHORIZATION_FAILED.code,
                                errors.CLUSTER_AUTHORIZATION_FAILED.code):
                return (f"cannot create topic {THROTTLE_MARKER_TOPIC} "
                        f"({ErrorCode.for_code(t.error_code).name}), where kraftsman keeps its "
                        f"throttle markers: grant {MARKER_TOPIC_ACLS}")
            return (f"cannot create topic {THROTTLE_MARKER_TOPIC}: "
                    f"{t.error_message or ErrorCode.for_code(t.error_code).name}")
        return self._call("CreateTopics", go)

    def _produce_markers(self, records: list[tuple[bytes, bytes | None]]) -> str | None:
        """One Produce of one compressed batch, acks=all, to the partition's leader."""
        where = self._marker_leader()
        if where is None:  # just created: not in this broker's metadata yet
            raise _Retry(errors.UNKNOWN_TOPIC_OR_PARTITION,
                         f"Produce: {THROTTLE_MARKER_TOPIC} does not exist")
        leader, topic_id = where
        builder = MemoryRecordsBuilder(magic=2, compression_type=_GZIP, batch_size=2**31 - 1)
        now = self._wall_ms()
        for key, value in records:
            builder.append(now, key, value)
        builder.close()
        _P = ProduceRequest.TopicProduceData
        r = self._send(ProduceRequest(
            transactional_id=None, acks=-1, timeout_ms=self.retry.request_timeout_ms,
            topic_data=[_P(name=THROTTLE_MARKER_TOPIC, topic_id=topic_id, partition_data=[
                _P.PartitionProduceData(index=0, records=bytes(builder.buffer()))])]),
            node_id=leader)
        p = r.responses[0].partition_responses[0]
        if p.error_code == errors.MESSAGE_TOO_LARGE.code:
            keys = ", ".join(k.decode() for k, _ in records)
            return (f"the throttle marker of broker(s) {keys} is {builder.size_in_bytes()} "
                    f"bytes compressed, more than max.message.bytes of "
                    f"{THROTTLE_MARKER_TOPIC} allows; raise it (kafka-configs --alter "
                    f"--entity-type topics --entity-name {THROTTLE_MARKER_TOPIC} --add-config "
                    "max.message.bytes=...)")
        _marker_check(p.error_code, "Produce", p.error_message)
        return None

    def _marker_offset(self, leader: int, spec: int) -> int:
        _T = ListOffsetsRequest.ListOffsetsTopic
        r = self._send(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[_T(
            name=THROTTLE_MARKER_TOPIC, partitions=[_T.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=spec)])],
            timeout_ms=self.retry.request_timeout_ms), node_id=leader)
        p = r.topics[0].partitions[0]
        _marker_check(p.error_code, "ListOffsets")
        return int(p.offset)

    def _fetch_markers(self, leader: int, topic_id: uuid.UUID, offset: int,
                       latest: dict[bytes, bytes | None]) -> int:
        """One Fetch from ``offset`` into ``latest``; the offset to fetch from next."""
        _T = FetchRequest.FetchTopic
        r = self._send(FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=MARKER_FETCH_BYTES,
            isolation_level=0, session_id=0, session_epoch=-1, topics=[_T(
                topic=THROTTLE_MARKER_TOPIC, topic_id=topic_id, partitions=[_T.FetchPartition(
                    partition=0, current_leader_epoch=-1, fetch_offset=offset,
                    log_start_offset=-1, partition_max_bytes=MARKER_FETCH_BYTES)])],
            forgotten_topics_data=[], rack_id=""), node_id=leader)
        _check(r.error_code, None, "Fetch")
        p = r.responses[0].partitions[0]
        if p.error_code == errors.OFFSET_OUT_OF_RANGE.code:  # compaction moved the log start
            raise _Retry(errors.OFFSET_OUT_OF_RANGE, f"Fetch: offset {offset} of "
                                                     f"{THROTTLE_MARKER_TOPIC} is gone; again")
        _marker_check(p.error_code, "Fetch")
        following = offset
        for batch in MemoryRecords(bytes(p.records or b"")):
            for record in batch:
                if record.offset >= offset:  # a batch may begin before the offset asked
                    key = bytes(record.key) if record.key is not None else b""
                    latest[key] = None if record.value is None else bytes(record.value)
            following = max(following, int(batch.base_offset) + int(batch.last_offset_delta) + 1)
        if following == offset:
            raise KafkaApiError(errors.CORRUPT_MESSAGE, (
                f"Fetch: {THROTTLE_MARKER_TOPIC} returned no record at offset {offset}, below "
                "its high watermark"))
        return following

    # -- the metadata quorum -----------------------------------------------------------------------
    def _describe_quorum_raw(self) -> tuple[Any, Any]:
        _Topic = DescribeQuorumRequest.TopicData
        r = self._send(DescribeQuorumRequest(topics=[_Topic(
            topic_name=METADATA_TOPIC, partitions=[_Topic.PartitionData(partition_index=0)])]))
        _check(r.error_code, getattr(r, "error_message", None), "DescribeQuorum")
        p = r.topics[0].partitions[0]
        _check(p.error_code, getattr(p, "error_message", None), "DescribeQuorum")
        return r, p

    def describe_quorum(self) -> QuorumStatus:
        def go() -> QuorumStatus:
            _, p = self._describe_quorum_raw()
            # Lag times against the leader's clock (its own row is caught up "now"), so skew
            # between this host and the controllers does not distort them.
            stamps = [int(getattr(v, "last_caught_up_timestamp", -1))
                      for v in [*p.current_voters, *p.observers]]
            now = max(stamps, default=-1)
            if now < 0:
                now = self._wall_ms()
            leader_leo = max((v.log_end_offset for v in p.current_voters
                              if v.replica_id == p.leader_id), default=p.high_watermark)

            def row(v: Any, role: str) -> QuorumReplica:
                caught = int(getattr(v, "last_caught_up_timestamp", -1))
                return QuorumReplica(
                    v.replica_id, v.log_end_offset, max(0, leader_leo - v.log_end_offset),
                    max(0, now - caught) if caught >= 0 else -1, role, False,
                    int(getattr(v, "last_fetch_timestamp", -1)), caught)

            voters = [row(v, "Leader" if v.replica_id == p.leader_id else "Follower")
                      for v in sorted(p.current_voters,
                                      key=lambda v: (v.replica_id != p.leader_id, v.replica_id))]
            observers = [row(o, "Observer") for o in p.observers]
            followers = [v for v in voters if v.status == "Follower"]
            return QuorumStatus(
                p.leader_id, p.leader_epoch, p.high_watermark,
                max((v.lag for v in followers), default=0),
                max((v.lag_time_ms for v in followers), default=0),
                tuple(v.replica_id for v in voters), None, tuple(voters + observers))
        return self._call("DescribeQuorum", go)

    def add_raft_voter(self, node_id: int, endpoints: Sequence[str] = ()) -> ApiResult:
        """AddRaftVoter for ``node_id`` with its directory id (from DescribeQuorum, where it
        fetches as an observer) and its controller ``endpoints`` ("NAME://host:port", as
        kafka-metadata-quorum add-controller reads them from the new controller's config).
        A broker never lists a controller that is not a voter, so they cannot be looked up."""
        _L = AddRaftVoterRequest.Listener
        given = []
        for text in endpoints:
            parsed = parse_endpoint(text)
            if parsed is None:
                return ApiResult(errors.INVALID_REQUEST, (
                    f"voter {node_id}: endpoint {text!r} is not NAME://host:port (the "
                    "controller's advertised CONTROLLER listener)"))
            given.append(_L(name=parsed[0], host=parsed[1], port=parsed[2]))

        def go() -> ApiResult:
            r, p = self._describe_quorum_raw()
            replica = next((o for o in [*p.observers, *p.current_voters]
                            if o.replica_id == node_id), None)
            directory = getattr(replica, "replica_directory_id", None) or uuid.UUID(int=0)
            node = next((n for n in getattr(r, "nodes", None) or () if n.node_id == node_id),
                        None)
            listeners = given or [_L(name=ln.name, host=ln.host, port=ln.port)
                                  for ln in (node.listeners if node is not None else ())]
            if not listeners:
                return ApiResult(errors.INVALID_REQUEST, (
                    f"voter {node_id}: its controller endpoint is unknown (a broker only "
                    "lists the voters'); give it as spec.controllers[].endpoints of the "
                    f"KafkaQuorum, or --controller {node_id}=CONTROLLER://HOST:PORT"))
            resp = self._send(AddRaftVoterRequest(
                cluster_id=self._known_cluster_id(), timeout_ms=self.retry.request_timeout_ms,
                voter_id=node_id, voter_directory_id=directory, listeners=listeners,
                ack_when_committed=True))
            return self._voter_result(resp, "AddRaftVoter")
        return self._call("AddRaftVoter", go)

    def remove_raft_voter(self, node_id: int) -> ApiResult:
        def go() -> ApiResult:
            _, p = self._describe_quorum_raw()
            replica = next((v for v in p.current_voters if v.replica_id == node_id), None)
            directory = getattr(replica, "replica_directory_id", None) or uuid.UUID(int=0)
            resp = self._send(RemoveRaftVoterRequest(
                cluster_id=self._known_cluster_id(), voter_id=node_id,
                voter_directory_id=directory))
            return self._voter_result(resp, "RemoveRaftVoter")
        return self._call("RemoveRaftVoter", go)

    def _known_cluster_id(self) -> str | None:
        if self._cluster_id is None:
            self.describe_cluster()
        return self._cluster_id

    @staticmethod
    def _voter_result(resp: Any, what: str) -> ApiResult:
        if resp.error_code in RETRIABLE:
            _check(resp.error_code, resp.error_message, what)
        return ApiResult(ErrorCode.for_code(resp.error_code), resp.error_message or "")


# The marker topic's records go in batches of at most this many bytes before compression, so
# that each compressed batch fits Kafka's default max.message.bytes (1,048,588): JSON never
# grows under gzip. (All six markers of 100,000 moving partitions on six brokers are 8 MB
# of JSON, 1.07 MB in one gzip batch — above the limit; one batch per marker is 180 kB.)
MARKER_BATCH_RAW_BYTES = 1_000_000
MARKER_FETCH_BYTES = 64 * 1024 * 1024
EARLIEST, LATEST = -2, -1
_GZIP = 1
# Answers about the marker partition that another attempt (after a new Metadata) can change.
_MARKER_RETRIABLE = frozenset({
    *RETRIABLE, errors.UNKNOWN_TOPIC_OR_PARTITION.code, 19, 20, 78})
# 19/20 NOT_ENOUGH_REPLICAS(_AFTER_APPEND), 78 OFFSET_NOT_AVAILABLE (a new leader's high
# watermark not known yet); UNKNOWN_TOPIC_OR_PARTITION right after the topic was created


def _marker_check(code: int, what: str, message: str | None = None) -> None:
    """An error about the marker partition: retried, or one message naming the ACLs."""
    if code == 0:
        return
    error = ErrorCode.for_code(code)
    if code == TOPIC_AUTHORIZATION_FAILED.code:
        raise KafkaApiError(error, (
            f"{what}: not authorized on topic {THROTTLE_MARKER_TOPIC}, where kraftsman keeps "
            f"its throttle markers; grant {MARKER_TOPIC_ACLS}"))
    text = f"{what} {THROTTLE_MARKER_TOPIC}: {message or error.name}"
    if code in _MARKER_RETRIABLE:
        raise _Retry(error, text)
    raise KafkaApiError(error, text)


def _marker_batches(records: list[tuple[bytes, bytes | None]]
                    ) -> list[list[tuple[bytes, bytes | None]]]:
    """Records grouped in order, each group at most MARKER_BATCH_RAW_BYTES of keys and values
    (a larger record alone)."""
    out: list[list[tuple[bytes, bytes | None]]] = []
    size = 0
    for key, value in records:
        n = len(key) + len(value or b"")
        if not out or size + n > MARKER_BATCH_RAW_BYTES:
            out.append([])
            size = 0
        out[-1].append((key, value))
        size += n
    return out


class _FatalBootstrap(Exception):
    """Raised through kafka-python's bootstrap loop to stop it at the first refusal."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


# Answers that another attempt cannot change: kafka-python's bootstrap loop would retry them
# until its timeout (and then report "Unable to bootstrap"); they are the real answer.
_FATAL = (kerr.SaslAuthenticationFailedError, kerr.UnsupportedSaslMechanismError,
          ssl.SSLCertVerificationError)


class _AuthFailureWatch(logging.Filter):
    """Notices the refusals kafka-python's bootstrap loop only logs, and stops the loop."""

    LOGGER = "kafka.net.manager"

    def __init__(self) -> None:
        super().__init__()
        self.failure: BaseException | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        for arg in args:
            cause = arg.__cause__ or arg.__context__ if isinstance(arg, BaseException) else None
            for e in (arg, cause):
                if isinstance(e, _FATAL) and self.failure is None:
                    self.failure = e
        # Raise only inside the bootstrap loop itself (its "Bootstrap connection to ... failed"
        # line): that ends the loop with this error. Raising from another callback would
        # leave a connection future unresolved.
        if self.failure is not None and str(record.msg).startswith("Bootstrap connection"):
            raise _FatalBootstrap(self.failure)
        return True

    def __enter__(self) -> _AuthFailureWatch:
        logging.getLogger(self.LOGGER).addFilter(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger(self.LOGGER).removeFilter(self)


def _refusal(bootstrap_servers: str, failure: BaseException) -> KafkaApiError:
    if isinstance(failure, ssl.SSLCertVerificationError):
        # Kafka has no wire code for a TLS refusal (its SslAuthenticationException is local)
        return KafkaApiError(NETWORK_EXCEPTION, (
            f"TLS to {bootstrap_servers}: the server's certificate was not accepted "
            f"({failure.verify_message}); check ca.crt (ssl.truststore.*) and "
            "ssl.check.hostname (ssl.endpoint.identification.algorithm)"))
    if isinstance(failure, kerr.UnsupportedSaslMechanismError):
        return KafkaApiError(UNSUPPORTED_SASL_MECHANISM, (
            f"{bootstrap_servers}: {failure}; set sasl.mechanism to one the brokers enable"))
    return KafkaApiError(SASL_AUTHENTICATION_FAILED, (
        f"authentication to {bootstrap_servers} failed ({_server_words(failure)}); check the "
        "Secret's sasl.username/sasl.password"))


def _server_words(e: BaseException) -> str:
    """The broker's own message, without kafka-python's "[Error 58] ClassName: " prefixes."""
    return re.sub(r"^(\[Error \d+\] )?(\w+Error: )*", "", str(e)) or type(e).__name__


def _stop_half_built(client: Any) -> None:
    """Stop what a KafkaAdminClient whose bootstrap failed had started (its metrics, its
    connections and its IO thread, as ``close()`` would). Left running, every failed connect
    keeps a thread reconnecting for the life of the process, and a process that forks later
    (a worker, a test runner) can inherit a lock that thread held and block forever."""
    for part in ("_metrics", "_client"):
        if hasattr(client, part):
            with contextlib.suppress(Exception):
                getattr(client, part).close()
    if hasattr(client, "_net"):
        with contextlib.suppress(Exception):
            client._net.stop(timeout_ms=5000)  # joins the IO thread (bounded)


def open_kafka_admin(bootstrap_servers: str, secret_data: Mapping[str, str | bytes] | None = None,
                     *, retry: RetryPolicy = RetryPolicy(), client_id: str = "kraftsman",
                     **client_options: Any) -> KafkaAdmin:
    """Connect to ``bootstrap_servers`` with the TLS/SASL settings of ``secret_data``.

    Raises :class:`SecretError` for bad Secret data and :class:`KafkaApiError` when the
    servers cannot be reached (NETWORK_EXCEPTION) or refuse the credentials
    (SASL_AUTHENTICATION_FAILED) — both naming the bootstrap servers.
    """
    settings = connection_settings(secret_data)
    timeout_ms = int(retry.total_seconds * 1000)
    watch = _AuthFailureWatch()
    # kafka-python starts the client's IO thread before bootstrapping and leaves it running
    # when bootstrapping fails: build the client in two steps so a failure can stop it.
    client = KafkaAdminClient.__new__(KafkaAdminClient)
    try:
        with watch:
            try:
                client.__init__(
                    bootstrap_servers=bootstrap_servers, client_id=client_id,
                    request_timeout_ms=retry.request_timeout_ms, bootstrap_timeout_ms=timeout_ms,
                    retry_backoff_ms=int(retry.initial_backoff_seconds * 1000),
                    reconnect_backoff_max_ms=int(retry.max_backoff_seconds * 1000),
                    **settings, **client_options)
            except BaseException:
                _stop_half_built(client)
                raise
    except kerr.SaslAuthenticationFailedError as e:
        raise _refusal(bootstrap_servers, e) from None
    except (_FatalBootstrap, kerr.KafkaTimeoutError, kerr.KafkaConnectionError) as e:
        if watch.failure is not None:
            raise _refusal(bootstrap_servers, watch.failure) from None
        raise KafkaApiError(NETWORK_EXCEPTION, (
            f"cannot reach bootstrap servers {bootstrap_servers} within "
            f"{retry.total_seconds:.0f} s ({type(e).__name__}); check spec.bootstrapServers, "
            "the network path and security.protocol")) from None
    return KafkaAdmin(client, bootstrap_servers, retry=retry)


def _log_dir(broker: int, d: Any) -> LogDir:
    """One DescribeLogDirs result as the port's value (-1 bytes: the broker does not say)."""
    replicas = tuple(sorted((LogDirReplica(TopicPartition(t.name, p.partition_index),
                                           int(p.partition_size), int(p.offset_lag),
                                           bool(p.is_future_key))
                             for t in d.topics for p in t.partitions),
                            key=lambda r: (r.tp, r.future)))
    total = int(getattr(d, "total_bytes", -1))
    usable = int(getattr(d, "usable_bytes", -1))
    return LogDir(broker, d.log_dir, replicas,
                  None if d.error_code == 0 else ErrorCode.for_code(d.error_code).name,
                  total if total >= 0 else None, usable if usable >= 0 else None,
                  bool(getattr(d, "is_cordoned", False)))


def _log_dir_problem(error: ErrorCode, broker: int) -> str:
    """What a per-replica AlterReplicaLogDirs error means to the person moving it."""
    if error == errors.LOG_DIR_NOT_FOUND:
        return f"broker {broker} has no log directory at that path (see describe log dirs)"
    if error == errors.KAFKA_STORAGE_ERROR:
        return f"the log directory is offline on broker {broker}"
    if error == errors.REPLICA_NOT_AVAILABLE:
        return (f"broker {broker} does not host the replica yet; it keeps the directory for "
                "when it does")
    return error.name
