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

from controller_core import bitmaps, errors
from controller_core.admin import CORDON_ALL, CORDONED_LOG_DIRS
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
    UnregisterBrokerRecord,
)
from controller_core.metadata.versions import CORDON_MIN_LEVEL, LATEST_PRODUCTION, name_of
from controller_core.model import (
    NO_LEADER,
    ElectionType,
    PartitionRegistration,
    TopicPartition,
    TopicsPartitions,
    is_whole_number,
)

Emit = Callable[[Record], None]
_NO_BROKER: frozenset[int] = frozenset()

THROTTLE_RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
# KIP-113: the bytes/s a broker copies into future replicas (another log directory of its own);
# a dynamic broker config of the same type and default as the replication throttles.
ALTER_LOG_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
RATE_KEYS = (*THROTTLE_RATE_KEYS, ALTER_LOG_DIRS_RATE)
# Kafka's DynamicConfig.Broker defines both rates as LONG, atLeast(0): a rate is a whole
# number of bytes/second from 0 to Long.MAX_VALUE (its default: unthrottled).
MAX_THROTTLE_RATE = 2**63 - 1
THROTTLE_REPLICA_KEYS = (
    "leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
CLEANUP_POLICY = "cleanup.policy"
MIN_ISR_KEY = "min.insync.replicas"
UNCLEAN_KEY = "unclean.leader.election.enable"
DEFAULT_MIN_ISR = "1"  # the brokers' default, as Kafka ships it
# The dynamic configs the embedded cluster models. Like Kafka, a broker takes any other config
# name as a custom one (kept, and described as sensitive with a null value), while a topic
# refuses a name that is no topic config of Kafka's.
ALTERABLE_CONFIGS = {"BROKER": {*RATE_KEYS, CORDONED_LOG_DIRS},
                     "TOPIC": {*THROTTLE_REPLICA_KEYS, CLEANUP_POLICY, MIN_ISR_KEY,
                               UNCLEAN_KEY}}
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
    """ReplicationControlManager's request logic over the image (see partition_change.py for
    the Kafka 4.4 rules it follows). ``elr``: eligible.leader.replicas.version >= 1, the
    default of a new Kafka 4.x cluster; ``metadata_version``: the finalized metadata.version
    feature level (what cordoning needs)."""

    def __init__(self, image: MetadataImage, emit: Emit, *, elr: bool = True,
                 metadata_version: int = LATEST_PRODUCTION,
                 log_dirs: Callable[[int], Sequence[str]] | None = None) -> None:
        self.image = image
        self._emit = emit
        self.elr = elr
        self.metadata_version = metadata_version
        # each broker's log.dirs (what a broker checks cordoned.log.dirs against); unknown:
        # a broker of one unnamed directory, which any entry cordons
        self.log_dirs: Callable[[int], Sequence[str]] = log_dirs or (lambda broker: ())

    def _change(self, record: PartitionChangeRecord | None) -> None:
        if record is not None:
            self._emit(record)

    # -- what the rules read -------------------------------------------------------------------
    def cordoned(self, broker: int) -> bool:
        """Every log directory of ``broker`` is cordoned (KIP-1066): no new replica lands on
        it. "*" cordons all; so do entries naming each of its directories."""
        if not self.image.cordoned(broker):
            return False
        value = self.image.config("BROKER", str(broker))[CORDONED_LOG_DIRS]
        entries = {e.strip() for e in value.split(",")}
        dirs = self.log_dirs(broker)
        return CORDON_ALL in entries or not dirs or set(dirs) <= entries

    def active(self, broker: int) -> bool:
        """ClusterControlManager.isActive: registered and not fenced."""
        return broker in self.image.live_brokers()

    def rules(self, topic: str) -> pc.Rules:
        """The topic's effective min.insync.replicas (capped at its replication factor), ELR,
        and unclean.leader.election.enable (topic config over the brokers' default)."""
        cfg = self.image.config("TOPIC", topic)
        t = self.image.topics[topic]
        rf = len(t.partitions[0].replicas) if t.partitions else 1
        min_isr = int(cfg.get(MIN_ISR_KEY, DEFAULT_MIN_ISR))
        unclean = cfg.get(UNCLEAN_KEY, "false").lower() == "true"
        return pc.Rules(min(min_isr, rf), self.elr, unclean)

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
            return ApiResult(errors.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        refused = _config_values_problem("TOPIC", name, dict(configs or {}))
        if refused is not None:
            return refused
        live = {b.id: b.rack for b in self.image.brokers.values() if not b.fenced}
        manual = assignment is not None
        if assignment is None:
            # Kafka 4.4's StripedReplicaPlacer counts fenced brokers too (and places replicas
            # on them after the unfenced ones); kraftsman places on live brokers only. A
            # broker whose log directories are all cordoned is no candidate at all
            # (BrokerHeartbeatManager.UsableBrokerIterator skips it), and the count in the
            # message is of the candidates.
            usable = {b: r for b, r in live.items() if not self.cordoned(b)}
            if replication_factor > len(usable):
                return ApiResult(errors.INVALID_REPLICATION_FACTOR,
                                 f"Unable to replicate the partition {replication_factor} "
                                 f"time(s): The target replication factor of "
                                 f"{replication_factor} cannot be reached because only "
                                 f"{len(usable)} broker(s) are registered or some brokers "
                                 "have all their log directories cordoned.")
            if validate_only:
                return OK  # placing draws from the cluster's seeded RNG: not for a dry run
            assignment = assign_replicas(usable, partitions, replication_factor, rng)
        # As ReplicationControlManager.createTopic, partition by partition: the replica list
        # is valid (validateManualPartitionAssignment, each as long as the one before), and
        # some replica is active — the ISR is the active replicas and the first of them leads.
        # With every registered broker live, the ISR is the (validated) replica list itself.
        all_live = len(live) == len(self.image.brokers)
        isrs: list[tuple[int, ...]] = []
        for i, replicas in enumerate(assignment):
            problem = pc.manual_assignment_problem(
                replicas, self.image.brokers, len(assignment[i - 1]) if i else None,
                cordoned=self.cordoned) if manual else None
            if problem is not None:
                return ApiResult(errors.INVALID_REPLICA_ASSIGNMENT, problem)
            isr = tuple(replicas) if all_live else tuple(r for r in replicas if r in live)
            if not isr:
                return ApiResult(errors.INVALID_REPLICA_ASSIGNMENT,
                                 "All brokers specified in the manual partition assignment for "
                                 f"partition {i} are fenced or in controlled shutdown.")
            isrs.append(isr)
        if validate_only:
            return OK
        topic_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        self._emit(TopicRecord(name, topic_id, message_bytes, produce_bytes_per_second))
        for key, value in (configs or {}).items():
            self._emit(ConfigRecord("TOPIC", name, key, value))
        for i, isr in enumerate(isrs):
            self._emit(PartitionRecord(name, i, tuple(assignment[i]), isr, isr[0]))
        for key, value in sorted((configs or {}).items()):
            self._emit(ConfigRecord("TOPIC", name, key, value))
        return OK

    # -- broker lifecycle (ReplicationControlManager.handleBroker*) ----------------------------
    def _leader_and_isr_updates(self, partitions: Iterable[tuple[TopicPartition,
                                                                 PartitionRegistration]],
                                **who: int) -> None:
        for tp, p in partitions:
            self._change(pc.leader_and_isr_update(tp, p, self.active, self.rules(tp.topic),
                                                  **who))

    def fence_broker(self, broker_id: int) -> None:
        """A broker stopped heartbeating: it leaves every ISR and leadership, then is fenced."""
        b = self.image.brokers.get(broker_id)
        if b is None or b.fenced:
            return
        self._leader_and_isr_updates(self.image.partitions_in_isr_of(broker_id),
                                     remove=broker_id)
        self._emit(BrokerFencingRecord(broker_id, fenced=True))

    def unfence_broker(self, broker_id: int) -> None:
        """A registered broker caught up: unfenced, then every leaderless partition it can
        lead gets a leader (it may lead before the image shows it unfenced)."""
        b = self.image.brokers.get(broker_id)
        if b is None or not b.fenced:
            return
        self._emit(BrokerFencingRecord(broker_id, fenced=False))
        self._leader_and_isr_updates(self.image.partitions_without_leader(), add=broker_id)

    def restart_broker(self, broker_id: int, *, clean: bool) -> None:
        """A new incarnation registers (fenced until it catches up): what the previous one
        held is cleaned up first (handleBrokerShutdown) — after a crash, with ELR, it leaves
        the ISRs and ELRs it was in, its data not trusted; otherwise it leaves the ISRs."""
        b = self.image.brokers.get(broker_id)
        if b is None:
            return
        if self.elr and not clean:
            self._leader_and_isr_updates(self.image.partitions_in_isr_of(broker_id),
                                         unclean_shutdown=broker_id)
            self._leader_and_isr_updates(self.image.partitions_in_elr_of(broker_id),
                                         unclean_shutdown=broker_id)
        else:
            self._leader_and_isr_updates(self.image.partitions_in_isr_of(broker_id),
                                         remove=broker_id)
        if not self.image.brokers[broker_id].fenced:
            self._emit(BrokerFencingRecord(broker_id, fenced=True))

    def unregister_broker(self, broker_id: int) -> ApiResult:
        """ReplicationControlManager.unregisterBroker: an unknown id is refused; otherwise the
        broker leaves every ISR, ELR and leadership (handleBrokerUnregistered) and its
        registration goes. Kafka 4.4 does not ask whether the broker still runs."""
        if broker_id not in self.image.brokers:
            return ApiResult(errors.BROKER_ID_NOT_REGISTERED,
                             f"Broker ID {broker_id} is not currently registered")
        self._leader_and_isr_updates(self.image.partitions_in_isr_of(broker_id),
                                     remove=broker_id)
        self._leader_and_isr_updates(self.image.partitions_in_elr_of(broker_id),
                                     unclean_shutdown=broker_id)
        self._emit(UnregisterBrokerRecord(broker_id))
        return OK

    # -- ISR (AlterPartition from partition leaders) -------------------------------------------
    def replica_caught_up(self, tp: TopicPartition, broker: int,
                          rules_of: dict[str, pc.Rules] | None = None) -> None:
        """The leader adds a caught-up follower (its new ISR in its set's order).
        ``rules_of``: the topics' rules as a caller handling many catch-ups in a row keeps
        them (see :meth:`_rules_in`): a reassignment ends with 100,000 of these."""
        p = self.image.partition(tp)
        live = self.image.live_brokers()  # no broker record comes in between: one lookup
        if (p is None or p.leader == NO_LEADER or broker not in p.replicas or broker in p.isr
                or broker not in live):
            return
        rules = self.rules(tp.topic) if rules_of is None else self._rules_in(rules_of, tp)
        outcome = pc.alter_isr(tp, p, pc.hash_order([*p.isr, broker]), live.__contains__, rules)
        if outcome is not None and not isinstance(outcome, ApiResult):
            self._emit(outcome)
            if rules_of and tp.partition == 0:
                rules_of.pop(tp.topic, None)

    def _rules_in(self, rules_of: dict[str, pc.Rules], tp: TopicPartition) -> pc.Rules:
        """A topic's rules from a cache a caller keeps while it changes only partitions: they
        read the topic's configs and partition 0's replica count, so a change of partition 0
        drops its topic's entry."""
        rules = rules_of.get(tp.topic)
        if rules is None:
            rules = rules_of[tp.topic] = self.rules(tp.topic)
        return rules

    def replica_fell_behind(self, tp: TopicPartition, broker: int) -> None:
        """The leader drops a follower that lagged past replica.lag.time.max.ms."""
        p = self.image.partition(tp)
        if p is None or p.leader in (NO_LEADER, broker) or broker not in p.isr:
            return
        self._alter_isr(tp, p, pc.hash_order([r for r in p.isr if r != broker]))

    def _alter_isr(self, tp: TopicPartition, p: PartitionRegistration,
                   isr: Sequence[int]) -> None:
        outcome = pc.alter_isr(tp, p, isr, self.active, self.rules(tp.topic))
        if not isinstance(outcome, ApiResult):
            self._change(outcome)

    # -- KIP-455 ------------------------------------------------------------------------------
    def validate_target(self, tp: TopicPartition, target: Sequence[int] | None) -> ApiResult:
        """AlterPartitionReassignments' checks of one partition, in Kafka's order and words."""
        if tp.topic not in self.image.topics:
            return ApiResult(errors.UNKNOWN_TOPIC_OR_PARTITION,
                             f"Unable to find a topic named {tp.topic}.")
        p = self.image.partition(tp)
        if p is None:
            return ApiResult(errors.UNKNOWN_TOPIC_OR_PARTITION,
                             f"Unable to find partition {tp.topic}:{tp.partition}.")
        if target is None:
            if not p.is_reassigning:
                return ApiResult(errors.NO_REASSIGNMENT_IN_PROGRESS, "")  # see partition_change
            return OK
        # The whole target is validated, the replicas it keeps too: a partition that keeps
        # a replica on a cordoned broker cannot be re-targeted (a cancel, above, can).
        # no broker cordoned (the usual case): no rule to read per replica
        problem = pc.manual_assignment_problem(
            target, self.image.brokers,
            cordoned=self.cordoned if self.image.any_cordoned() else _NO_BROKER.__contains__)
        if problem is not None:
            return ApiResult(errors.INVALID_REPLICA_ASSIGNMENT, problem)
        return OK

    def alter_partition_reassignments(
        self, changes: Mapping[TopicPartition, Sequence[int] | None]
    ) -> dict[TopicPartition, ApiResult]:
        results: dict[TopicPartition, ApiResult] = {}
        # A topic's rules read its configs (unchanged by this request) and its replication
        # factor (partition 0's replica count): worked out once per topic, again only after
        # partition 0 itself changed. A 100,000-partition plan spends no time re-reading them.
        rules_of: dict[str, pc.Rules] = {}
        for tp, target in changes.items():
            check = self.validate_target(tp, target)
            if not check.ok:
                results[tp] = check
                continue
            p = self.image.topics[tp.topic].partitions[tp.partition]  # validated: it exists
            rules = self._rules_in(rules_of, tp)
            outcome = (pc.cancel_reassignment(tp, p, self.active, rules) if target is None
                       else pc.change_reassignment(tp, p, target, self.active, rules))
            if isinstance(outcome, ApiResult):
                results[tp] = outcome
                continue
            self._change(outcome)  # a move that copies nothing completes in the same record
            if tp.partition == 0:
                rules_of.pop(tp.topic, None)
            results[tp] = OK
        return results

    # -- KIP-183 / KIP-460 -----------------------------------------------------------------------
    def elect_leaders(self, election_type: ElectionType,
                      partitions: Iterable[TopicPartition] | None
                      ) -> tuple[dict[TopicPartition, ApiResult], Sequence[TopicPartition]]:
        """Returns the per-partition results and the partitions an election was attempted for.

        With no partition set, ELECTION_NOT_NEEDED results are not returned (Kafka's answer to
        an ElectLeaders request without partitions)."""
        preferred = election_type is ElectionType.PREFERRED
        results: dict[TopicPartition, ApiResult] = {}
        if partitions is None:
            # Every partition. As ReplicationControlManager.electLeaders, partitions that
            # already have the desired leader (ELECTION_NOT_NEEDED) are left out of the answer;
            # a comprehension finds the others without building anything for the rest, and
            # the attempted partitions are a lazy sequence: a million partitions stay fast.
            spans: list[tuple[str, int]] = []
            for name, topic in self.image.topics.items():
                regs = topic.partitions
                spans.append((name, len(regs)))
                if preferred:
                    due = [i for i, reg in enumerate(regs)
                           if reg.leader != (reg.replicas[0] if reg.replicas else NO_LEADER)]
                else:
                    due = [i for i, reg in enumerate(regs) if reg.leader == NO_LEADER]
                if not due:
                    continue
                rules = self.rules(name)
                for i in due:
                    tp = TopicPartition(name, i)
                    outcome = pc.elect_leader(tp, regs[i], preferred, self.active, rules)
                    if isinstance(outcome, ApiResult):
                        results[tp] = outcome
                    else:
                        self._change(outcome)
                        results[tp] = OK
            return results, TopicsPartitions(spans)
        targets = list(dict.fromkeys(partitions))  # a duplicate is not an error
        for tp in targets:
            p = self.image.partition(tp)
            if p is None:
                results[tp] = ApiResult(
                    errors.UNKNOWN_TOPIC_OR_PARTITION,
                    f"No such topic as {tp.topic}" if tp.topic not in self.image.topics
                    else f"No such partition as {tp.topic}-{tp.partition}")
                continue
            outcome = pc.elect_leader(tp, p, preferred, self.active, self.rules(tp.topic))
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
        if rtype == "BROKER" and CORDONED_LOG_DIRS in entries:
            problem = self._cordon_problem(rname, entries[CORDONED_LOG_DIRS])
            if problem is not None:
                return problem
        if rtype == "BROKER":
            if rname == "":
                pass  # the cluster default of every broker (Kafka's <default> entity)
            elif not is_whole_number(rname) or int(rname) not in self.image.brokers:
                return ApiResult(errors.INVALID_REQUEST, f"broker {rname!r} is not registered")
        elif rtype == "TOPIC":
            if rname not in self.image.topics:
                return ApiResult(errors.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {rname!r}")
        else:
            return ApiResult(errors.INVALID_REQUEST, f"unsupported resource type {rtype!r}")
        return _config_values_problem(rtype, rname, entries)

    def _cordon_problem(self, rname: str, value: str | None) -> ApiResult | None:
        """Kafka's checks of ``cordoned.log.dirs``, in its order: per broker only
        (DynamicBrokerConfig), the value (KafkaConfig.validateCordonedLogDirs on the broker),
        then the metadata.version (ConfigurationControlManager, which refuses a delete too).
        Entries are "*" or paths of the broker's log directories."""
        if rname == "":
            return ApiResult(errors.INVALID_REQUEST,
                             "Cannot update these configs at default cluster level, broker id "
                             f"must be specified: [{CORDONED_LOG_DIRS}]")
        entries = [e.strip() for e in (value or "").split(",") if e.strip()]
        if CORDON_ALL in entries and len(entries) > 1:
            return ApiResult(errors.INVALID_REQUEST,
                             f"requirement failed: When {CORDONED_LOG_DIRS} is set to *, it must "
                             "not contain other values")
        dirs = self.log_dirs(int(rname)) if is_whole_number(rname) else ()
        missing = [e for e in entries if e != CORDON_ALL and e not in dirs]
        if missing:
            return ApiResult(errors.INVALID_REQUEST,
                             f"requirement failed: All entries in {CORDONED_LOG_DIRS} must be "
                             "present in log.dirs or log.dir. Missing entries : "
                             + ", ".join(missing))
        if self.metadata_version < CORDON_MIN_LEVEL:
            return ApiResult(errors.INVALID_CONFIG,
                             f"The {CORDONED_LOG_DIRS} configuration value cannot be set because "
                             f"it requires metadata.version >= {name_of(CORDON_MIN_LEVEL)}")
        return None

    # -- log directories (KIP-858) -------------------------------------------------------------
    def assign_replicas_to_dirs(self, assignments: Mapping[tuple[TopicPartition, int], str]
                                ) -> None:
        """AssignReplicasToDirs: a broker says which of its log directories holds each of its
        replicas (a new one placed, a future one swapped in); one PartitionChangeRecord with
        the partition's ``directories`` per partition. Replicas no longer there are skipped,
        as Kafka's controller answers those with an error the broker drops."""
        by_tp: dict[TopicPartition, dict[int, str]] = {}
        for (tp, broker), path in assignments.items():
            by_tp.setdefault(tp, {})[broker] = path
        for tp, dirs in by_tp.items():
            p = self.image.partition(tp)
            if p is None:
                continue
            current = p.directories or ("",) * len(p.replicas)
            new = tuple(dirs.get(r, d) for r, d in zip(p.replicas, current, strict=True))
            if new != current:
                self._emit(PartitionChangeRecord(tp.topic, tp.partition, directories=new))

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
        if key in RATE_KEYS:
            if not is_whole_number(value):
                return ApiResult(errors.INVALID_CONFIG,
                                 f"{key}={value!r}: must be a whole number of bytes/second")
            if int(value) > MAX_THROTTLE_RATE:
                return ApiResult(errors.INVALID_CONFIG,
                                 f"{key}={value!r}: must be at most {MAX_THROTTLE_RATE} "
                                 "bytes/second (a LONG)")
        elif key in THROTTLE_REPLICA_KEYS and parse_throttled_replicas(value) is None:
            # Kafka's ThrottledReplicaListValidator, the value shown as the parsed LIST
            items = ", ".join(v.strip() for v in value.split(","))
            return ApiResult(errors.INVALID_CONFIG,
                             f"Invalid value [{items}] for configuration {key}: {key} must be "
                             "the literal '*' or a list of replicas in the following format: "
                             "[partitionId]:[brokerId],[partitionId]:[brokerId],...")
        elif key in (MIN_ISR_KEY, UNCLEAN_KEY):
            problem = _topic_config_problem(key, value)
            if problem is not None:
                return ApiResult(errors.INVALID_CONFIG, problem)
        elif key == CLEANUP_POLICY and not _cleanup_policy_ok(value):
            return ApiResult(errors.INVALID_CONFIG,
                             f"Invalid value {value} for configuration {key}: String must be "
                             "one of: compact, delete")
    return None


def _cleanup_policy_ok(value: str) -> bool:
    items = [v.strip() for v in value.split(",")]
    return bool(items) and all(v in ("compact", "delete") for v in items)


def _topic_config_problem(key: str, value: str) -> str | None:
    """The topic configs the controller reads, checked as Kafka's LogConfig checks them."""
    invalid = f"Invalid value {value} for configuration {key}:"
    if key == MIN_ISR_KEY:
        if not is_whole_number(value.strip()):
            return f"{invalid} Not a number of type INT"
        if int(value) < 1:
            return f"{invalid} Value must be at least 1"
    elif key == UNCLEAN_KEY and value.strip().lower() not in ("true", "false"):
        return f"{invalid} Expected value to be either true or false"
    return None


def parse_throttled_replicas(value: str) -> set[tuple[int, int]] | str | None:
    """``"0:1,0:2"`` → {(0, 1), (0, 2)}; ``"*"`` → "*"; malformed → None."""
    pairs = _throttled_pairs(value)
    return pairs if pairs is None or isinstance(pairs, str) else set(zip(*pairs, strict=True))


def parse_throttled_replicas_by_broker(value: str) -> dict[int, int] | str | None:
    """As :func:`parse_throttled_replicas`, as broker → the bitmap of its partitions (a list
    names every replica in flight, 10^5 items: as tuples they cost 80 bytes each, so a plain
    list is read item by item straight into bits)."""
    if _PLAIN_LIST.fullmatch(value):  # as kraftsman writes it
        bufs: dict[int, bytearray] = {}
        for item in _PAIR.finditer(value):
            broker = int(item[2])
            buf = bufs.get(broker)
            if buf is None:  # not setdefault: that builds a bytearray for every item
                buf = bufs[broker] = bytearray()
            bitmaps.add(buf, int(item[1]))
        return {b: bitmaps.from_buffer(buf) for b, buf in bufs.items()}
    pairs = _throttled_pairs(value)
    if pairs is None or isinstance(pairs, str):
        return pairs
    groups: dict[int, list[int]] = {}
    for p, b in zip(*pairs, strict=True):
        groups.setdefault(b, []).append(p)
    return {b: bitmaps.from_members(ps) for b, ps in groups.items()}


# possessive: a plain * keeps a backtracking mark per item (24 MiB at 120,000 items)
_PLAIN_LIST = re.compile(r"[0-9]+:[0-9]+(?:,[0-9]+:[0-9]+)*+")
_PAIR = re.compile(r"([0-9]+):([0-9]+)")


def _throttled_pairs(value: str) -> tuple[list[int], list[int]] | str | None:
    """A list's partitions and brokers, item by item; "*" (every replica); None: malformed
    (Kafka's ThrottledReplicaListValidator: items ``[0-9]+:[0-9]+``, trimmed)."""
    value = value.strip()
    if value == "*":
        return "*"
    if not value:
        return [], []
    if _PLAIN_LIST.fullmatch(value):  # as kraftsman writes it: no item to look at alone
        numbers = [int(n) for n in re.split("[:,]", value)]
        return numbers[0::2], numbers[1::2]
    partitions, brokers = [], []
    for item in value.split(","):
        partition, colon, broker = item.strip().partition(":")
        if not (colon and is_whole_number(partition) and is_whole_number(broker)):
            return None
        partitions.append(int(partition))
        brokers.append(int(broker))
    return partitions, brokers


def format_throttled_replicas(entries: Iterable[tuple[int, int]]) -> str:
    return ",".join(f"{p}:{b}" for p, b in sorted(entries))


_FORMAT_SLICE = 8192


def format_throttled_replicas_by_broker(by_broker: Mapping[int, int]) -> str:
    """:func:`format_throttled_replicas` of broker → bitmap of partitions (sorted as one int
    per item, not a tuple)."""
    span = max(by_broker, default=0) + 1
    keys = sorted(p * span + b for b, bits in by_broker.items() for p in bitmaps.members(bits))
    # joined a slice at a time: a list of every item's string would be 12 MB at 240,000
    return ",".join(",".join(f"{k // span}:{k % span}" for k in keys[i:i + _FORMAT_SLICE])
                    for i in range(0, len(keys), _FORMAT_SLICE))
