"""The data plane of the embedded cluster: replica logs, producers and follower fetching.

A leader's log end offset (LEO, in messages) grows with its producer rate, computed on
demand from a base offset and time, so an idle million-partition cluster costs nothing per
step. Followers in the ISR track their leader; only replicas that are behind — new replicas
of a reassignment, replicas of a broker that failed or came back — are simulated, each
fetching an equal share of its broker's bandwidth, capped by the replication throttles in
force (``follower.replication.throttled.rate`` of the fetching broker and
``leader.replication.throttled.rate`` of the leader's, for the replicas listed in the topic's
``*.replication.throttled.replicas``). Steady-state replication of in-sync followers is not
charged against bandwidth — a simplification stated in the README.

JBOD (KIP-113): a replica moving to another log directory of its broker gets a *future
replica* there that copies the current one's messages at the broker's
``replica.alter.log.dirs.io.max.bytes.per.second`` (shared by the broker's futures; else its
bandwidth — a disk copy, not charged against fetching) until it has caught up, when the
broker swaps it in. Futures and the directories asked for replicas a broker does not host yet
are broker-local state: they live here, not in the metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from controller_core.metadata.controller import ALTER_LOG_DIRS_RATE, parse_throttled_replicas
from controller_core.metadata.image import MetadataImage
from controller_core.model import NO_LEADER, PartitionRegistration, TopicPartition


@dataclass(slots=True)
class Lagging:
    leo: float  # messages this replica holds
    caught_up_at: float  # the last time (s) it was caught up
    in_isr: bool = False  # an ISR member that fell behind (subject to replica.lag.time.max)


class FetchPlan(NamedTuple):
    """(A named tuple: a frozen dataclass' __init__ cost as much as planning the fetch.)"""

    tp: TopicPartition
    broker: int
    lag: Lagging
    rate: float  # messages/s this replica fetches
    produce: float  # messages/s its leader appends (0 while stalled)


_new_plan = tuple.__new__  # a FetchPlan without the named tuple's Python-level __new__


@dataclass(slots=True)
class FutureReplica:
    """KIP-113: the copy of a replica its broker makes in another of its log directories."""

    path: str  # the destination directory
    leo: float  # messages copied so far


Replica = tuple[TopicPartition, int]  # (partition, broker)


@dataclass(slots=True)
class LogBase:
    """LEO(t) = offset + rate * (t - time), or just ``offset`` while the partition is stalled."""

    offset: float
    time: float
    stalled: bool = False


class DataPlane:
    def __init__(self, image: MetadataImage, bandwidth: Callable[[int], float]) -> None:
        self.image = image
        self.bandwidth = bandwidth
        self.topic_base: dict[str, LogBase] = {}
        self.bases: dict[TopicPartition, LogBase] = {}
        self.lagging: dict[TopicPartition, dict[int, Lagging]] = {}
        self.down: dict[int, float] = {}  # brokers that are down, and since when
        self._plans: list[FetchPlan] | None = None
        self.futures: dict[Replica, FutureReplica] = {}
        # AlterReplicaLogDirs for a replica the broker does not host yet: where to create it
        # (Kafka's LogManager.preferredLogDirs, in the broker's memory)
        self.preferred: dict[Replica, str] = {}

    # -- logs ---------------------------------------------------------------------------------
    def base(self, tp: TopicPartition) -> LogBase:
        b = self.bases.get(tp)
        return b if b is not None else self.topic_base[tp.topic]

    def rate_msgs(self, topic: str) -> float:
        t = self.image.topics[topic]
        return t.produce_bytes_per_second / t.message_bytes

    def leader_leo(self, tp: TopicPartition, now: float) -> float:
        b = self.base(tp)
        if b.stalled:
            return b.offset
        return b.offset + self.rate_msgs(tp.topic) * (now - b.time)

    def replica_leo(self, tp: TopicPartition, p: PartitionRegistration, broker: int,
                    now: float) -> float | None:
        """Messages the replica on ``broker`` holds; None if the broker hosts no replica."""
        if broker not in p.replicas:
            return None
        lag = self.lagging.get(tp, {}).get(broker)
        if lag is not None:
            return lag.leo
        return self.leader_leo(tp, now)

    def high_watermark(self, tp: TopicPartition, p: PartitionRegistration, now: float) -> float:
        hw = self.leader_leo(tp, now)
        lagging = self.lagging.get(tp)
        if lagging:
            for r in p.isr:
                lag = lagging.get(r)
                if lag is not None and lag.leo < hw:
                    hw = lag.leo
        return hw

    def create_topic(self, topic: str, initial_messages: float, now: float) -> None:
        self.topic_base[topic] = LogBase(initial_messages, now)

    def _freeze(self, tp: TopicPartition, now: float, *, stalled: bool) -> None:
        self.bases[tp] = LogBase(self.leader_leo(tp, now), now, stalled)

    def _lag(self, tp: TopicPartition, broker: int, leo: float, now: float,
             in_isr: bool = False) -> None:
        self.lagging.setdefault(tp, {})[broker] = Lagging(leo, now, in_isr)
        self._plans = None

    def _unlag(self, tp: TopicPartition, broker: int) -> None:
        self._plans = None
        lagging = self.lagging.get(tp)
        if lagging is not None:
            lagging.pop(broker, None)
            if not lagging:
                del self.lagging[tp]

    # -- reacting to metadata changes -----------------------------------------------------------
    def on_partition_change(self, tp: TopicPartition, before: PartitionRegistration | None,
                            after: PartitionRegistration, now: float) -> None:
        if before is not None and before.replicas != after.replicas:  # most changes keep them
            old_replicas = set(before.replicas)
            for r in after.replicas:
                if r not in old_replicas:
                    self._lag(tp, r, 0.0, now)  # a new replica starts with an empty log
            for r in old_replicas - set(after.replicas):
                self._unlag(tp, r)  # a removed replica stops; its log is deleted
                self.futures.pop((tp, r), None)  # ... and its future replica with it
        if before is None:
            if after.leader == NO_LEADER:
                self._freeze(tp, now, stalled=True)
            return
        if after.leader != before.leader:
            self._on_leader_change(tp, after, now)
        if before.isr != after.isr:
            lagging = self.lagging.get(tp, {})
            for r in set(before.isr) - set(after.isr):
                if r in after.replicas and r not in lagging:
                    self._lag(tp, r, self.leader_leo(tp, now), now)
            for r, lag in self.lagging.get(tp, {}).items():
                lag.in_isr = r in after.isr

    def _on_leader_change(self, tp: TopicPartition, after: PartitionRegistration,
                          now: float) -> None:
        if after.leader == NO_LEADER or after.leader in self.down:
            self._freeze(tp, now, stalled=True)
            return
        lag = self.lagging.get(tp, {}).get(after.leader)
        if lag is None:
            if self.base(tp).stalled:
                self._freeze(tp, now, stalled=False)  # writes resume from where they stopped
            return
        # The new leader was behind (an unclean election, or an in-sync replica that had not
        # fetched the uncommitted tail): its log becomes the partition's; others truncate.
        self._adopt_log_of(tp, after.leader, lag, now)

    def _adopt_log_of(self, tp: TopicPartition, leader: int, lag: Lagging, now: float) -> None:
        self.bases[tp] = LogBase(lag.leo, now)
        self._unlag(tp, leader)
        for other in self.lagging.get(tp, {}).values():
            other.leo = min(other.leo, lag.leo)

    def on_broker_down(self, broker: int, now: float) -> None:
        if broker in self.down:
            return
        self.down[broker] = now
        # the preferred directories were in the dead process's memory; futures are on disk
        for key in [k for k in self.preferred if k[1] == broker]:
            del self.preferred[key]
        for tp, p in self.image.partitions_on(broker):
            if p.leader == broker:
                self._freeze(tp, now, stalled=True)
            elif broker not in self.lagging.get(tp, {}):
                self._lag(tp, broker, self.replica_leo(tp, p, broker, now) or 0.0, now,
                          in_isr=broker in p.isr)

    def on_broker_up(self, broker: int, now: float) -> None:
        if self.down.pop(broker, None) is None:
            return
        for tp, p in self.image.partitions_on(broker):
            lag = self.lagging.get(tp, {}).get(broker)
            if p.leader == broker and lag is not None:
                # Elected while it was still down (its restart took it out of the ISR, then
                # the controller chose it again): the leader change found it down and left
                # its replica log aside; now it leads, that log is the partition's. Left as a
                # lagging replica of itself, it held the high watermark back for good.
                self._adopt_log_of(tp, broker, lag, now)
            elif p.leader == broker:
                base = self.base(tp)
                self.bases[tp] = LogBase(base.offset, now, stalled=False)
            elif lag is not None:
                self.lagging[tp][broker].caught_up_at = now

    # -- fetching -----------------------------------------------------------------------------
    def fetchers(self) -> Iterator[tuple[TopicPartition, int, Lagging]]:
        for tp, replicas in self.lagging.items():
            for broker, lag in replicas.items():
                yield tp, broker, lag

    def invalidate(self) -> None:
        """Metadata, configs or brokers changed: fetch rates must be worked out again."""
        self._plans = None

    def _plan_fetches(self) -> list[FetchPlan]:
        """Each fetching replica with its rate in messages/s; rates are constant until the
        next change, so this runs once per change, not once per step."""
        image = self.image
        found: list[tuple[TopicPartition, int, Lagging, int, bool]] = []
        per_broker: dict[int, int] = {}
        per_broker_throttled: dict[int, int] = {}
        per_leader_throttled: dict[int, int] = {}
        throttle_cache: dict[str, tuple[Any, Any]] = {}
        down = self.down
        # every lagging replica (100,000 in a big reassignment): its partition looked up
        # once for all its fetching replicas, in fetchers()' order
        for tp, replicas in self.lagging.items():
            p = image.partition(tp)
            for broker, lag in replicas.items():
                if broker in down:
                    continue
                if p is None or p.leader == NO_LEADER or p.leader == broker or p.leader in down:
                    continue
                # a topic that throttles no replica (both lists empty) is not asked per replica
                known = throttle_cache.get(tp.topic)
                throttled = (known is None or bool(known[0] or known[1])) \
                    and self._throttled(tp, broker, p.leader, throttle_cache)
                found.append((tp, broker, lag, p.leader, throttled))
                per_broker[broker] = per_broker.get(broker, 0) + 1
                if throttled:
                    per_broker_throttled[broker] = per_broker_throttled.get(broker, 0) + 1
                    per_leader_throttled[p.leader] = per_leader_throttled.get(p.leader, 0) + 1
        plans = []
        share = {b: self.bandwidth(b) / n for b, n in per_broker.items()}
        # base(), rate_msgs() and the message size inlined, the last two once per topic
        topics, bases, topic_base = image.topics, self.bases, self.topic_base
        per_topic: dict[str, tuple[float, int]] = {}  # topic -> (rate_msgs, message_bytes)
        for tp, broker, lag, leader, throttled in found:
            rate = share[broker]
            if throttled:
                f_limit = self._rate(broker, "follower.replication.throttled.rate")
                if f_limit is not None:
                    rate = min(rate, f_limit / per_broker_throttled[broker])
                l_limit = self._rate(leader, "leader.replication.throttled.rate")
                if l_limit is not None:
                    rate = min(rate, l_limit / per_leader_throttled[leader])
            b = bases.get(tp)
            if b is None:
                b = topic_base[tp.topic]
            sizes = per_topic.get(tp.topic)
            if sizes is None:
                t = topics[tp.topic]
                sizes = per_topic[tp.topic] = (t.produce_bytes_per_second / t.message_bytes,
                                               t.message_bytes)
            plans.append(_new_plan(FetchPlan, (tp, broker, lag, rate / sizes[1],
                                               0.0 if b.stalled else sizes[0])))
        return plans

    def fetch(self, dt: float, now: float) -> tuple[list[tuple[TopicPartition, int]], float]:
        """Advance every fetching replica by ``dt`` seconds ending at ``now``.

        Returns the replicas that caught up and the time (s) until the next one would.
        """
        if self._plans is None:
            self._plans = self._plan_fetches()
        caught_up: list[tuple[TopicPartition, int]] = []
        next_eta = float("inf")
        bases, topic_base = self.bases, self.topic_base
        # every fetching replica, every step (100,000 in a big reassignment): base() and
        # leader_leo() inlined; plan.produce is rate_msgs() of the topic unless stalled
        for tp, broker, lag, rate, produce in self._plans:  # (unpacked: no attribute reads)
            b = bases.get(tp)
            if b is None:
                b = topic_base[tp.topic]
            target = b.offset if b.stalled or not produce else \
                b.offset + self.rate_msgs(tp.topic) * (now - b.time)
            leo = lag.leo + rate * dt
            if leo >= target - 1e-9:
                lag.leo = target
                caught_up.append((tp, broker))
            else:
                lag.leo = leo
                gain = rate - produce
                if gain > 0:
                    eta = (target - leo) / gain
                    if eta < next_eta:
                        next_eta = eta
        return caught_up, next_eta

    # -- future replicas (KIP-113) -------------------------------------------------------------
    def copy_rate(self, broker: int) -> float:
        """Bytes/s the broker copies into its future replicas, all of them together."""
        limit = self._rate(broker, ALTER_LOG_DIRS_RATE)
        bandwidth = self.bandwidth(broker)
        return bandwidth if limit is None else min(limit, bandwidth)

    def copy_futures(self, dt: float, now: float) -> tuple[list[Replica], float]:
        """Advance every future replica of a running broker by ``dt`` seconds ending at
        ``now``. Returns the futures that caught up with their current replica (size and log
        end) and the time (s) until the next one would."""
        image = self.image
        per_broker: dict[int, int] = {}
        for (_, broker) in self.futures:
            per_broker[broker] = per_broker.get(broker, 0) + 1
        caught_up: list[Replica] = []
        next_eta = float("inf")
        for (tp, broker), future in list(self.futures.items()):
            p = image.partition(tp)
            if p is None or broker not in p.replicas:
                del self.futures[(tp, broker)]  # the replica is gone, its future with it
                continue
            if broker in self.down:
                continue  # a dead broker copies nothing
            target = self.replica_leo(tp, p, broker, now)
            assert target is not None
            topic = image.topics[tp.topic]
            speed = self.copy_rate(broker) / per_broker[broker] / topic.message_bytes
            leo = future.leo + speed * dt
            if leo >= target - 1e-9:
                future.leo = target
                caught_up.append((tp, broker))
                continue
            future.leo = leo
            growth = 0.0 if self.base(tp).stalled else self.rate_msgs(tp.topic)
            if speed > growth:
                next_eta = min(next_eta, (target - leo) / (speed - growth))
        return caught_up, next_eta

    def _rate(self, broker: int, key: str) -> float | None:
        """A broker's rate config: its own, else the cluster default (resource "")."""
        value = self.image.config("BROKER", str(broker)).get(key)
        if value is None:
            value = self.image.config("BROKER", "").get(key)
        return float(value) if value is not None else None

    def _throttled(self, tp: TopicPartition, broker: int, leader: int,
                   cache: dict[str, tuple[Any, Any]]) -> bool:
        parsed = cache.get(tp.topic)
        if parsed is None:
            cfg = self.image.config("TOPIC", tp.topic)
            parsed = (
                parse_throttled_replicas(cfg.get("follower.replication.throttled.replicas", "")),
                parse_throttled_replicas(cfg.get("leader.replication.throttled.replicas", "")),
            )
            cache[tp.topic] = parsed
        follower, leader_side = parsed
        return bool(
            follower == "*" or (isinstance(follower, set) and (tp.partition, broker) in follower)
            or leader_side == "*"
            or (isinstance(leader_side, set) and (tp.partition, leader) in leader_side))

    def caught_up_now(self, tp: TopicPartition, broker: int) -> None:
        self._unlag(tp, broker)

    # -- persistence ----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "topic_base": {t: [b.offset, b.time, b.stalled] for t, b in self.topic_base.items()},
            "bases": [[tp.topic, tp.partition, b.offset, b.time, b.stalled]
                      for tp, b in self.bases.items()],
            "lagging": [[tp.topic, tp.partition, broker, lag.leo, lag.caught_up_at, lag.in_isr]
                        for tp, replicas in self.lagging.items()
                        for broker, lag in replicas.items()],
            "down": {str(b): t for b, t in self.down.items()},
            "futures": [[tp.topic, tp.partition, broker, f.path, f.leo]
                        for (tp, broker), f in self.futures.items()],
            "preferred": [[tp.topic, tp.partition, broker, path]
                          for (tp, broker), path in self.preferred.items()],
        }

    def load_json(self, doc: dict[str, Any]) -> None:
        self._plans = None
        self.topic_base = {t: LogBase(float(o), float(tm), bool(s))
                           for t, (o, tm, s) in doc["topic_base"].items()}
        self.bases = {TopicPartition(t, int(p)): LogBase(float(o), float(tm), bool(s))
                      for t, p, o, tm, s in doc["bases"]}
        self.lagging = {}
        for t, p, broker, leo, at, in_isr in doc["lagging"]:
            self.lagging.setdefault(TopicPartition(t, int(p)), {})[int(broker)] = Lagging(
                float(leo), float(at), bool(in_isr))
        self.down = {int(b): float(t) for b, t in doc["down"].items()}
        # checkpoints from before JBOD have neither
        self.futures = {(TopicPartition(t, int(p)), int(b)): FutureReplica(str(path), float(leo))
                        for t, p, b, path, leo in doc.get("futures", ())}
        self.preferred = {(TopicPartition(t, int(p)), int(b)): str(path)
                          for t, p, b, path in doc.get("preferred", ())}
