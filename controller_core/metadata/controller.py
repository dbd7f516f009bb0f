"""The controller's request logic: validate a request against the image, emit records.

``emit`` applies a record to the image at once and queues it for the log, so later steps of
the same request see its effect; the caller makes the queued records durable (or commits them
through the quorum) before it answers. Concurrent requests are serialised by the caller — one
request runs to completion before the next starts, which is the check-and-set guard KIP-183
asks for.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from random import Random

from controller_core import errors
from controller_core.errors import OK, ApiResult
from controller_core.metadata import partition_change as pc
from controller_core.metadata.image import MetadataImage
from controller_core.metadata.placement import assign_replicas
from controller_core.metadata.records import (
    BrokerFencingRecord,
    ConfigRecord,
    MarkerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    Record,
    RegisterBrokerRecord,
    TopicRecord,
)
from controller_core.model import NO_LEADER, ElectionType, TopicPartition, is_whole_number

Emit = Callable[[Record], None]

THROTTLE_RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
# Kafka's DynamicConfig.Broker defines both rates as LONG, atLeast(0): a rate is a whole
# number of bytes/second from 0 to Long.MAX_VALUE (its default: unthrottled).
MAX_THROTTLE_RATE = 2**63 - 1
THROTTLE_REPLICA_KEYS = (
    "leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
CLEANUP_POLICY = "cleanup.policy"
_THROTTLED_REPLICA = re.compile(r"([0-9]+):([0-9]+)")  # Kafka's ThrottledReplicaListValidator
# The dynamic configs the embedded cluster models. Like Kafka, a broker takes any other config
# name as a custom one (kept, and described as sensitive with a null value), while a topic
# refuses a name that is no topic config of Kafka's.
ALTERABLE_CONFIGS = {"BROKER": set(THROTTLE_RATE_KEYS),
                     "TOPIC": {*THROTTLE_REPLICA_KEYS, CLEANUP_POLICY}}
# Kafka 4.4's topic config names (DescribeConfigs of a topic): the ones not modelled here are
# refused with the embedded cluster's own words, the rest with Kafka's.
KAFKA_TOPIC_CONFIGS = frozenset({
    "cleanup.policy", "compression.gzip.level", "compression.lz4.level", "compression.type",
    "compression.zstd.level", "delete.retention.ms", "errors.deadletterqueue.group.enable",
    "file.delete.delay.ms", "flush.messages", "flush.ms",
    "follower.replication.throttled.replicas", "index.interval.bytes",
    "leader.replication.throttled.replicas", "local.retention.bytes", "local.retention.ms",
    "max.compaction.lag.ms", "max.decompressed.message.bytes", "max.message.bytes",
    "message.timestamp.after.max.ms", "message.timestamp.before.max.ms",
    "message.timestamp.type", "min.cleanable.dirty.ratio", "min.compaction.lag.ms",
    "min.insync.replicas", "preallocate", "remote.copy.lag.bytes", "remote.copy.lag.ms",
    "remote.log.copy.disable", "remote.log.delete.on.disable", "remote.storage.enable",
    "retention.bytes", "retention.ms", "segment.bytes", "segment.index.bytes",
    "segment.jitter.ms", "segment.ms", "unclean.leader.election.enable"})
# Kafka's default max.message.bytes: the largest record batch a topic takes.
MAX_MESSAGE_BYTES = 1_048_588


def is_sensitive_config(resource_type: str, name: str) -> bool:
    """Kafka describes a broker config it does not know as sensitive (its value null)."""
    return resource_type == "BROKER" and name not in ALTERABLE_CONFIGS["BROKER"]


class Controller:
    def __init__(self, image: MetadataImage, emit: Emit) -> None:
        self.image = image
        self._emit = emit

    def _change(self, record: PartitionChangeRecord | None) -> None:
        """Emit a partition change, then finish the partition's move if that change made it
        finishable. As in KRaft's PartitionChangeBuilder, any change — an election, an ISR
        change — may be what completes a reassignment; nothing else would retry it."""
        if record is None:
            return
        tp = TopicPartition(record.topic, record.partition)
        p = self.image.partition(tp)
        if p is not None:
            record = pc.then_complete(tp, p, record, self.image.live_brokers())
        self._emit(record)

    # -- brokers and topics --------------------------------------------------------------------
    def register_broker(self, broker_id: int, rack: str | None) -> None:
        existing = self.image.brokers.get(broker_id)
        if existing is None or existing.rack != rack:
            self._emit(RegisterBrokerRecord(broker_id, rack, fenced=False))

    def create_topic(self, name: str, partitions: int, replication_factor: int, *,
                     rng: Random, assignment: Sequence[Sequence[int]] | None = None,
                     message_bytes: int = 1024, produce_bytes_per_second: float = 0.0,
                     validate_only: bool = False,
                     configs: Mapping[str, str] | None = None) -> ApiResult:
        """Create a topic, placed by ``assign_replicas`` or on the given ``assignment`` (one
        replica list per partition, ``partitions`` and ``replication_factor`` then unused),
        with the topic ``configs`` given. ``validate_only`` runs every check and writes
        nothing (CreateTopics validateOnly)."""
        if name in self.image.topics:
            return ApiResult(errors.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        refused = _config_values_problem("TOPIC", name, dict(configs or {}))
        if refused is not None:
            return refused
        live = {b.id: b.rack for b in self.image.brokers.values() if not b.fenced}
        manual = assignment is not None
        if assignment is None:
            if replication_factor > len(live):
                return ApiResult(errors.INVALID_REPLICATION_FACTOR,
                                 f"replication factor {replication_factor} exceeds the "
                                 f"{len(live)} live brokers")
            if validate_only:
                return OK  # placing draws from the cluster's seeded RNG: not for a dry run
            assignment = assign_replicas(live, partitions, replication_factor, rng)
        # As ReplicationControlManager.createTopic, partition by partition: the replica list
        # is valid (validateManualPartitionAssignment, each as long as the one before), and
        # some replica is live — the ISR is the live replicas and the first of them leads; a
        # partition none of whose brokers is live is refused, not created leaderless.
        isrs: list[tuple[int, ...]] = []
        for i, replicas in enumerate(assignment):
            problem = self._manual_assignment_problem(
                replicas, len(assignment[i - 1]) if i else None) if manual else None
            if problem is not None:
                return ApiResult(errors.INVALID_REPLICA_ASSIGNMENT,
                                 f"topic {name!r}, partition {i}: {problem}")
            isr = tuple(r for r in replicas if r in live)
            if not isr:
                return ApiResult(errors.INVALID_REPLICA_ASSIGNMENT,
                                 f"topic {name!r}: all brokers specified in the manual partition "
                                 f"assignment for partition {i} are fenced {list(replicas)}; "
                                 "assign live brokers")
            isrs.append(isr)
        if validate_only:
            return OK
        topic_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        self._emit(TopicRecord(name, topic_id, message_bytes, produce_bytes_per_second))
        for i, isr in enumerate(isrs):
            self._emit(PartitionRecord(name, i, tuple(assignment[i]), isr, isr[0]))
        for key, value in sorted((configs or {}).items()):
            self._emit(ConfigRecord("TOPIC", name, key, value))
        return OK

    def _manual_assignment_problem(self, replicas: Sequence[int],
                                   replication_factor: int | None) -> str | None:
        """ReplicationControlManager.validateManualPartitionAssignment, in its order: an empty
        list; then, walking the ids in ascending order, the first one not registered or seen
        twice (so a negative id is an unregistered broker); then a replica count unlike
        ``replication_factor`` (the previous partition's). Kafka's wording, with the way out."""
        if not replicas:
            return ("the manual partition assignment includes an empty replica list; give every "
                    "partition at least one broker")
        brokers = self.image.brokers
        previous = None
        for b in sorted(replicas):
            if b not in brokers:
                return (f"the manual partition assignment includes broker {b}, but no such "
                        f"broker is registered; the cluster has {sorted(brokers)}")
            if b == previous:
                return (f"the manual partition assignment includes the broker {b} more than "
                        "once; list each broker once")
            previous = b
        if replication_factor is not None and len(replicas) != replication_factor:
            return (f"the manual partition assignment includes a partition with {len(replicas)} "
                    "replica(s), but this is not consistent with previous partitions, which "
                    f"have {replication_factor} replica(s); give every partition the same "
                    "number of replicas")
        return None

    def fence_broker(self, broker_id: int) -> None:
        """A broker stopped heartbeating: out of every ISR, leadership moves to in-sync peers."""
        b = self.image.brokers.get(broker_id)
        if b is None or b.fenced:
            return
        self._emit(BrokerFencingRecord(broker_id, fenced=True))
        live = self.image.live_brokers()
        for tp, p in self.image.partitions_in_isr_of(broker_id):
            self._change(pc.shrink_isr(tp, p, broker_id, live))

    def unfence_broker(self, broker_id: int) -> None:
        b = self.image.brokers.get(broker_id)
        if b is None or not b.fenced:
            return
        self._emit(BrokerFencingRecord(broker_id, fenced=False))
        live = self.image.live_brokers()
        for tp, p in self.image.partitions_in_isr_of(broker_id):
            if p.leader == NO_LEADER:
                self._change(pc.elect_if_leaderless(tp, p, live))

    # -- ISR (AlterPartition from partition leaders) -------------------------------------------
    def replica_caught_up(self, tp: TopicPartition, broker: int) -> None:
        p = self.image.partition(tp)
        if p is None:
            return
        self._change(pc.expand_isr(tp, p, broker, self.image.live_brokers()))

    def replica_fell_behind(self, tp: TopicPartition, broker: int) -> None:
        p = self.image.partition(tp)
        if p is None or broker == p.leader:
            return
        self._change(pc.shrink_isr(tp, p, broker, self.image.live_brokers()))

    # -- KIP-455 ------------------------------------------------------------------------------
    def validate_target(self, tp: TopicPartition, target: Sequence[int] | None) -> ApiResult:
        p = self.image.partition(tp)
        if p is None:
            what = "topic" if tp.topic not in self.image.topics else "partition"
            return ApiResult(errors.UNKNOWN_TOPIC_OR_PARTITION, f"{tp}: unknown {what}")
        if target is None:
            if not p.is_reassigning:
                return ApiResult(errors.NO_REASSIGNMENT_IN_PROGRESS,
                                 f"{tp}: no reassignment in progress to cancel")
            return OK
        if not target:
            return ApiResult(errors.INVALID_REPLICA_ASSIGNMENT,
                             f"{tp}: the target replica list is empty")
        if min(target) < 0:
            return ApiResult(errors.INVALID_REPLICA_ASSIGNMENT,
                             f"{tp}: negative broker id(s) {sorted(r for r in target if r < 0)}")
        if len(set(target)) != len(target):
            dup = sorted({r for r in target if list(target).count(r) > 1})
            return ApiResult(errors.INVALID_REPLICA_ASSIGNMENT,
                             f"{tp}: broker id(s) {dup} listed more than once")
        brokers = self.image.brokers
        unknown = sorted(r for r in target if r not in brokers)
        if unknown:
            return ApiResult(errors.INVALID_REPLICA_ASSIGNMENT,
                             f"{tp}: unknown broker id(s) {unknown}; the cluster has "
                             f"{sorted(self.image.brokers)}")
        return OK

    def alter_partition_reassignments(
        self, changes: Mapping[TopicPartition, Sequence[int] | None]
    ) -> dict[TopicPartition, ApiResult]:
        results: dict[TopicPartition, ApiResult] = {}
        for tp, target in changes.items():
            check = self.validate_target(tp, target)
            if not check.ok:
                results[tp] = check
                continue
            p = self.image.partition(tp)
            assert p is not None
            live = self.image.live_brokers()
            outcome = (pc.cancel_reassignment(tp, p, live) if target is None
                       else pc.start_reassignment(tp, p, target, live))
            if isinstance(outcome, ApiResult):
                results[tp] = outcome
                continue
            self._change(outcome)  # a move that copies nothing completes in the same pass
            results[tp] = OK
        return results

    # -- KIP-183 / KIP-460 -----------------------------------------------------------------------
    def elect_leaders(self, election_type: ElectionType,
                      partitions: Iterable[TopicPartition] | None
                      ) -> tuple[dict[TopicPartition, ApiResult], list[TopicPartition]]:
        """Returns the per-partition results and the partitions an election was attempted for.

        With no partition set, ELECTION_NOT_NEEDED results are not returned (Kafka's answer to
        an ElectLeaders request without partitions)."""
        live = self.image.live_brokers()
        preferred = election_type is ElectionType.PREFERRED
        elect = pc.elect_preferred if preferred else pc.elect_unclean
        results: dict[TopicPartition, ApiResult] = {}
        if partitions is None:
            # Every partition. As ReplicationControlManager.electLeaders, partitions that
            # already have the desired leader (ELECTION_NOT_NEEDED) are left out of the answer;
            # skipping them without a per-partition call keeps a million partitions fast.
            attempted: list[TopicPartition] = []
            for name, topic in self.image.topics.items():
                for i, reg in enumerate(topic.partitions):
                    tp = TopicPartition(name, i)
                    attempted.append(tp)
                    if preferred and reg.leader == reg.preferred:
                        continue
                    if not preferred and reg.leader != NO_LEADER:
                        continue
                    outcome = elect(tp, reg, live)
                    if isinstance(outcome, ApiResult):
                        results[tp] = outcome
                    else:
                        self._change(outcome)
                        results[tp] = OK
            return results, attempted
        targets = list(dict.fromkeys(partitions))  # a duplicate is not an error
        for tp in targets:
            p = self.image.partition(tp)
            if p is None:
                results[tp] = ApiResult(errors.UNKNOWN_TOPIC_OR_PARTITION,
                                        f"{tp}: unknown topic or partition")
                continue
            outcome = elect(tp, p, live)
            if isinstance(outcome, ApiResult):
                results[tp] = outcome
            else:
                self._change(outcome)
                results[tp] = OK
        return results, targets

    # -- configs (throttles) ---------------------------------------------------------------------
    def incremental_alter_configs(
        self, changes: Mapping[tuple[str, str], Mapping[str, str | None]]
    ) -> dict[tuple[str, str], ApiResult]:
        """Set (value) or delete (None) dynamic configs; all keys of a resource or none."""
        results: dict[tuple[str, str], ApiResult] = {}
        for (rtype, rname), entries in changes.items():
            problem = self._validate_config(rtype, rname, entries)
            if problem is not None:
                results[(rtype, rname)] = problem
                continue
            current = self.image.config(rtype, rname)
            for key, value in entries.items():
                if current.get(key) != value:
                    self._emit(ConfigRecord(rtype, rname, key, value))
            results[(rtype, rname)] = OK
        return results

    def _validate_config(self, rtype: str, rname: str,
                         entries: Mapping[str, str | None]) -> ApiResult | None:
        if rtype == "BROKER":
            if not is_whole_number(rname) or int(rname) not in self.image.brokers:
                return ApiResult(errors.INVALID_REQUEST, f"broker {rname!r} is not registered")
        elif rtype == "TOPIC":
            if rname not in self.image.topics:
                return ApiResult(errors.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {rname!r}")
        else:
            return ApiResult(errors.INVALID_REQUEST, f"unsupported resource type {rtype!r}")
        return _config_values_problem(rtype, rname, entries)

    # -- the throttle-marker topic's data -----------------------------------------------------
    def append_markers(self, records: Sequence[tuple[str, str | None]]) -> int:
        """Append records (key, value or None for a tombstone) to the marker topic's log;
        returns the offset of the first."""
        base = self.image.marker_end
        for i, (key, value) in enumerate(records):
            self._emit(MarkerRecord(key, value, base + i))
        return base


def _config_values_problem(rtype: str, rname: str,
                           entries: Mapping[str, str | None]) -> ApiResult | None:
    """Kafka's answer to the names and values of ``entries`` (a value None deletes)."""
    for key, value in entries.items():
        if rtype == "TOPIC" and key not in ALTERABLE_CONFIGS["TOPIC"]:
            if value is None:
                continue  # Kafka deletes a config it does not know without complaint
            if key not in KAFKA_TOPIC_CONFIGS:
                return ApiResult(errors.INVALID_CONFIG, f"Unknown topic config name: {key}")
            return ApiResult(errors.INVALID_CONFIG,
                             f"topic {rname}: {key!r} is not a dynamic config here; "
                             f"supported: {sorted(ALTERABLE_CONFIGS['TOPIC'])}")
        if value is None:
            continue
        if key in THROTTLE_RATE_KEYS:
            if not is_whole_number(value):
                return ApiResult(errors.INVALID_CONFIG,
                                 f"{key}={value!r}: must be a whole number of bytes/second")
            if int(value) > MAX_THROTTLE_RATE:
                return ApiResult(errors.INVALID_CONFIG,
                                 f"{key}={value!r}: must be at most {MAX_THROTTLE_RATE} "
                                 "bytes/second (a LONG)")
        elif key in THROTTLE_REPLICA_KEYS and parse_throttled_replicas(value) is None:
            return ApiResult(errors.INVALID_CONFIG,
                             f"{key}={value!r}: expected '*' or 'partition:broker,...'")
        elif key == CLEANUP_POLICY and not _cleanup_policy_ok(value):
            return ApiResult(errors.INVALID_CONFIG,
                             f"Invalid value {value} for configuration {key}: String must be "
                             "one of: compact, delete")
    return None


def _cleanup_policy_ok(value: str) -> bool:
    items = [v.strip() for v in value.split(",")]
    return bool(items) and all(v in ("compact", "delete") for v in items)


def parse_throttled_replicas(value: str) -> set[tuple[int, int]] | str | None:
    """``"0:1,0:2"`` → {(0, 1), (0, 2)}; ``"*"`` → "*"; malformed → None."""
    value = value.strip()
    if value == "*":
        return "*"
    if not value:
        return set()
    out: set[tuple[int, int]] = set()
    for item in value.split(","):
        match = _THROTTLED_REPLICA.fullmatch(item.strip())
        if match is None:
            return None
        out.add((int(match[1]), int(match[2])))
    return out


def format_throttled_replicas(entries: Iterable[tuple[int, int]]) -> str:
    return ",".join(f"{p}:{b}" for p, b in sorted(entries))
