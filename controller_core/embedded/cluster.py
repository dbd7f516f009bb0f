"""The embedded cluster: a durable, in-process Kafka cluster on a simulated clock.

It is the system of the KIPs, not a stub: a controller that turns requests into metadata
records (:mod:`controller_core.metadata.controller`), a metadata log made durable before any
answer (:mod:`controller_core.storage.metadata_log`), and a data plane whose replicas fetch
at a configured bandwidth (:mod:`controller_core.embedded.replication`). Time only moves in
:meth:`EmbeddedCluster.advance`, so a multi-terabyte reassignment runs in seconds and tests
never sleep.
"""

from __future__ import annotations

import base64
import dataclasses
import random
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from controller_core import errors
from controller_core.admin import (
    CORDON_ALL,
    CORDONED_LOG_DIRS,
    IN_SYNC,
    LEADERLESS,
    LEGACY_MARKER_CONFIG,
    MARKER_TOPIC_CONFIGS,
    NOT_HOSTED,
    OFFLINE,
    THROTTLE_MARKER_TOPIC,
    UNKNOWN_BROKER,
    UNKNOWN_PARTITION,
    UNKNOWN_TOPIC,
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
from controller_core.config import DEFAULT_LOG_DIR, EmbeddedClusterSpec, LogDirSpec, TopicSpec
from controller_core.errors import NOT_LEADER_OR_FOLLOWER, OK, ApiResult, KafkaApiError
from controller_core.gc_pause import gc_paused
from controller_core.metadata.controller import Controller, is_sensitive_config
from controller_core.metadata.image import MetadataImage
from controller_core.metadata.partition_change import ControllerFault, Rules
from controller_core.metadata.records import (
    ClusterRecord,
    PartitionChangeRecord,
    PartitionRecord,
    Record,
    TopicRecord,
    decode_record,
    encode_record,
)
from controller_core.model import (
    NO_LEADER,
    ElectionType,
    PartitionRegistration,
    TopicPartition,
    is_whole_number,
)
from controller_core.raft.describe import QuorumStatus
from controller_core.raft.describe import ReplicaStatus as QuorumReplica
from controller_core.raft.snapshot import RaftSnapshot
from controller_core.storage.framing import write_atomically
from controller_core.storage.metadata_log import MetadataLog, Recovered

from .log_dirs import cordoned_paths, next_log_dir
from .metadata_quorum import MetadataQuorum
from .replication import DataPlane, FutureReplica, LogBase, Replica

MIN_STEP = 0.05  # s: the finest step, so a burst of catch-ups costs a bounded number of steps
STEPS_PER_ADVANCE = 100  # ... and at most about this many steps per advance() call
QUORUM_CHUNK = 20_000  # metadata records per quorum entry
QUORUM_POLL = 0.1  # s between looks at a quorum that has no leader
DATAPLANE_FILE = "dataplane.json"


class EmbeddedCluster:
    def __init__(self, spec: EmbeddedClusterSpec, state_dir: Path, *, fsync: bool = True) -> None:
        self.spec = spec
        self.state_dir = state_dir
        self.now = 0.0  # seconds of simulated time
        self.rng = random.Random(spec.seed)
        self.image = MetadataImage()
        self._bandwidth = {b.id: b.replication_bytes_per_second or spec.replication_bytes_per_second
                           for b in spec.brokers}
        self._log_dirs = {b.id: b.directories() for b in spec.brokers}
        self._multi_dir = frozenset(b for b, dirs in self._log_dirs.items() if len(dirs) > 1)
        self._unplaced: set[Replica] = set()  # new replicas whose broker has not chosen a dir
        self.data = DataPlane(self.image, self._broker_bandwidth)
        self.controller = self._new_controller()
        self.log = MetadataLog(state_dir / "metadata", fsync=fsync)
        self._pending: list[Record] = []
        self._since_snapshot = 0
        self._since_snapshot_bytes = 0
        self._next_event_in = 0.0  # s until the next catch-up or timer; 0: recompute now
        self.controller_available = True  # fault injection: the controller cannot be reached
        self._pending_change = False
        self.recovered_torn_bytes = 0
        self._fsync = fsync
        self.quorum: MetadataQuorum  # set by open()
        self._quorum_end = 0  # quorum offset up to which committed entries are applied
        self.down_controllers: set[int] = set()  # killed quorum nodes stay down across restarts
        self.read_only = False
        self._last_quorum: QuorumStatus | None = None  # as the last command left it
        self._quorum_recorded = False

    def _new_controller(self) -> Controller:
        return Controller(self.image, self._emit, elr=self.spec.eligible_leader_replicas,
                          metadata_version=self.spec.metadata_version_level,
                          log_dirs=self.log_dir_paths)

    # -- lifecycle ------------------------------------------------------------------------------
    @classmethod
    @gc_paused
    def open(cls, state_dir: Path, spec: EmbeddedClusterSpec, *,
             fsync: bool = True) -> EmbeddedCluster:
        """Recover the cluster from ``state_dir``, or create it there; then adopt new brokers
        and topics of ``spec``."""
        state_dir.mkdir(parents=True, exist_ok=True)
        cluster = cls(spec, state_dir, fsync=fsync)
        cluster._recover()
        cluster._start_quorum()
        cluster._reconcile_data_plane()
        cluster._reconcile_log_dirs()
        cluster._reconcile_spec()
        cluster.checkpoint()
        return cluster

    @classmethod
    @gc_paused
    def open_read_only(cls, state_dir: Path, spec: EmbeddedClusterSpec) -> EmbeddedCluster:
        """The cluster as the last command left it, for views: the image and the data plane
        are recovered, the controllers are not started — no election, no epoch bump, no
        write. The quorum is described as it was at the last checkpoint; entries it committed
        that the local log lacks (a crash between the two) show after the next full open."""
        cluster = cls(spec, state_dir, fsync=False)
        cluster.read_only = True
        cluster._recover()
        if not cluster._quorum_recorded:  # a state dir from before read-only views: upgrade it
            cluster.log.close()
            return cls.open(state_dir, spec)
        cluster._reconcile_data_plane()
        return cluster

    def _start_quorum(self) -> None:
        """Boot the controller quorum from its directory and apply what it committed that the
        local metadata log does not hold yet (a crash between commit and local append)."""
        cluster_id = self.image.cluster_id or new_cluster_id()
        self._cluster_id = cluster_id
        self.quorum = MetadataQuorum(
            self.state_dir / "quorum", self.spec.voters, cluster_id=cluster_id,
            seed=self.spec.seed, now_s=self.now, link_delay_ms=self.spec.controller_link_delay_ms,
            fsync=self._fsync, spare=self.spec.spare_controllers)
        for node in sorted(self.down_controllers):
            if self.quorum.alive(node):
                self.quorum.crash(node, lose_unflushed=False)
        self.quorum.wait_caught_up(self.spec.controller_request_timeout_ms)
        # The controllers came back and elected a leader before the brokers' clock resumes:
        # a restart does not move the cluster's time.
        self.quorum.rebase(self.now)
        self._apply_committed()

    def _load_image(self) -> Recovered:
        """Rebuild the image from the local metadata log (snapshot + batches)."""
        rec = self.log.recover()
        self._quorum_end = rec.quorum_end
        self.image.apply_rows(rec.snapshot_rows)
        self.image.next_offset = rec.snapshot_offset
        for _, rows in rec.batches:
            self.image.apply_rows(rows)
        return rec

    def _recover(self) -> None:
        rec = self._load_image()
        self.recovered_torn_bytes = rec.torn_bytes
        image = self.image
        self.now = rec.last_timestamp_ms / 1000.0
        dp = self.state_dir / DATAPLANE_FILE
        if dp.exists():
            doc = orjson.loads(dp.read_bytes())
            self.data.load_json(doc["data"])
            # The checkpoint's clock is exact, the log's is rounded to the millisecond (up to
            # 0.5 ms ahead): trust the checkpoint unless the log moved on after it was taken.
            current = int(doc.get("offset", -1)) >= image.next_offset
            self.now = float(doc["now"]) if current else max(self.now, float(doc["now"]))
            self.rng.setstate(_rng_state(doc["rng"]))
            self.down_controllers = set(doc.get("down_controllers", []))
            self._last_quorum = _quorum_of_json(doc.get("quorum"))
            self._quorum_recorded = "quorum" in doc

    def _reconcile_data_plane(self) -> None:
        """Bring a data-plane checkpoint older than the metadata log in line with it: replicas
        the log added since are empty, replicas it removed are gone."""
        data, image, now = self.data, self.image, self.now
        for b in image.brokers.values():
            if b.fenced and b.id not in data.down:
                # Only a failed broker is fenced; a checkpoint taken before it failed does not
                # know, and a fenced broker the data plane thinks up would never rejoin.
                data.on_broker_down(b.id, now)
        for name in image.topics:
            data.topic_base.setdefault(name, LogBase(0.0, now))
        for tp in [tp for tp in data.lagging if image.partition(tp) is None]:
            del data.lagging[tp]
        for tp, lagging in list(data.lagging.items()):
            p = image.partition(tp)
            assert p is not None
            for r in [r for r in lagging if r not in p.replicas]:
                data.caught_up_now(tp, r)
        for tp in [tp for tp in data.bases if image.partition(tp) is None]:
            del data.bases[tp]
        down = data.down
        for name, topic in image.topics.items():
            topic_stalled = data.topic_base[name].stalled
            parts = topic.partitions
            # the few partitions that need a look, found by one comprehension (a restart of a
            # million healthy partitions builds nothing for them)
            due = range(len(parts)) if topic_stalled else [
                i for i, p in enumerate(parts)
                if p.leader == NO_LEADER or p.leader in down or len(p.isr) != len(p.replicas)]
            for i in due:
                p = parts[i]
                stalled = p.leader == NO_LEADER or p.leader in down
                tp = TopicPartition(name, i)
                lagging = data.lagging.get(tp, {})
                if data.base(tp).stalled != stalled:
                    end = data.leader_leo(tp, now)
                    if stalled and lagging and all(r in lagging for r in p.replicas):
                        # The log has no fence time for the dead leader, only the checkpoint's
                        # replica logs: the partition holds no more than its longest one.
                        end = min(end, max(lag.leo for lag in lagging.values()))
                    data.bases[tp] = LogBase(end, now, stalled)
                for r in p.replicas:
                    if r not in p.isr and r not in lagging:
                        # A replica the log added since the checkpoint is empty; one in the
                        # (last known) ELR left the ISR since, holding everything committed.
                        held = r in p.elr or r in p.last_known_elr
                        data._lag(tp, r, data.leader_leo(tp, now) if held else 0.0, now)
        for tp, base in list(data.bases.items()):
            p = image.partition(tp)
            assert p is not None
            if base.stalled and p.leader != NO_LEADER and p.leader not in down:
                data.bases[tp] = LogBase(base.offset, now, stalled=False)

    def _reconcile_log_dirs(self) -> None:
        """After a restart the brokers look at their directories again: a replica of a JBOD
        broker with no directory recorded (a state directory from before JBOD, or a spec that
        gave the broker more directories since) or one the spec no longer lists is placed
        anew; a future replica or preferred directory whose path went away is dropped."""
        data = self.data
        for key in [k for k, f in data.futures.items() if f.path not in self.log_dir_paths(k[1])]:
            del data.futures[key]
        for key in [k for k, d in data.preferred.items() if d not in self.log_dir_paths(k[1])]:
            del data.preferred[key]
        if not self._multi_dir:
            return
        for tp, p in self.image.iter_partitions():
            for r in p.replicas:
                if r in self._multi_dir and p.directory_of(r) not in self.log_dir_paths(r):
                    self._unplaced.add((tp, r))

    def _reconcile_spec(self) -> None:
        if not self.image.cluster_id:
            self._emit(ClusterRecord(self._cluster_id))
        for b in self.spec.brokers:
            if b.id not in self.image.brokers and b.id in self.data.down:
                continue  # unregistered while its process was down: it stays out until restored
            self.controller.register_broker(b.id, b.rack)
        for t in self.spec.topics:
            if t.name not in self.image.topics:
                self._create_topic(t)
        self._flush()
        self._migrate_legacy_markers()

    def _migrate_legacy_markers(self) -> None:
        """kraftsman's throttle markers were once the broker config ``kraftsman.throttle``;
        a state directory of those versions gets them as records of the marker topic (a
        real cluster hides that config's value, so only here can it be carried over)."""
        legacy = {int(name): cfg[LEGACY_MARKER_CONFIG]
                  for (kind, name), cfg in self.image.configs.items()
                  if kind == "BROKER" and LEGACY_MARKER_CONFIG in cfg}
        if not legacy:
            return
        have = self.read_throttle_markers()
        problems = self.write_throttle_markers(
            {b: v for b, v in legacy.items() if b not in have})
        if problems:
            return  # the brokers' configs stay until the topic takes them
        self.controller.incremental_alter_configs(
            {("BROKER", str(b)): {LEGACY_MARKER_CONFIG: None} for b in legacy})
        self._flush()

    def _create_topic(self, t: TopicSpec) -> None:
        result = self.controller.create_topic(
            t.name, t.partitions, t.replication_factor, rng=self.rng, assignment=t.assignment,
            message_bytes=t.message_bytes, produce_bytes_per_second=t.produce_bytes_per_second,
            configs=t.configs)
        if not result.ok:
            raise ValueError(f"topics[{t.name}]: {result.message}")
        self.data.topic_base[t.name].offset = t.size_bytes_per_partition / t.message_bytes

    def checkpoint(self) -> None:
        """Persist the data plane and the clock (the metadata log is always durable)."""
        self._flush()
        try:
            self._last_quorum = self._with_broker_observers(self.quorum.describe())
        except KafkaApiError:
            self._last_quorum = None  # no leader: read-only views say so
        doc = {"now": self.now, "offset": self.log.next_offset, "data": self.data.to_json(),
               "rng": _rng_json(self.rng.getstate()),
               "down_controllers": sorted(self.down_controllers),
               "quorum": _quorum_json(self._last_quorum)}
        write_atomically(self.state_dir / DATAPLANE_FILE, orjson.dumps(doc))

    @gc_paused
    def snapshot(self) -> Path:
        """Snapshot the committed image: into the local metadata log, and as the KIP-630
        snapshot of the metadata quorum at the same offset, so that the quorum drops its log
        below it (the same rows, in the payload format the quorum commits)."""
        self._flush()
        rows = list(self.image.snapshot_rows())
        path = self.log.write_snapshot(rows, timestamp_ms=self.now_ms())
        self.quorum.snapshot(self._quorum_end, _payloads(rows))
        self._since_snapshot = 0
        self._since_snapshot_bytes = 0
        self.checkpoint()
        return path

    def _maybe_snapshot(self) -> None:
        # after a whole flush, never between its chunks: the image holds all of them then
        if self._since_snapshot >= self.spec.snapshot_every_records \
                or self._since_snapshot_bytes >= self.spec.snapshot_every_bytes:
            self.snapshot()

    def close(self, *, checkpoint: bool = True) -> None:
        """Release the files; ``checkpoint=False`` after a failure mid-advance (the state on
        disk stays as the last checkpoint and the durable metadata log left it)."""
        if self.read_only:
            self.log.close()
            return
        if checkpoint:
            self.checkpoint()
        self.log.close()
        self.quorum.close()

    # -- the metadata pipeline ------------------------------------------------------------------
    def _emit(self, record: Record) -> None:
        """A record from the controller: it takes effect here at once (the controller needs
        to see its own changes) and is committed through the quorum before any answer."""
        self._apply(record)
        self._pending.append(record)

    def _apply(self, record: Record) -> None:
        self._pending_change = True  # rates may have changed: recompute the next event
        self._next_event_in = 0.0
        self.data.invalidate()
        if isinstance(record, PartitionChangeRecord):  # the most frequent one first
            tp = TopicPartition(record.topic, record.partition)  # built once for all three
            before, reg = self.image.apply_change(record, tp)
            self.data.on_partition_change(tp, before, reg, self.now)
            if self._multi_dir:
                self._note_unplaced(tp, reg)
        elif isinstance(record, PartitionRecord):
            # A new (or replaced) partition: the data plane only cares about one that has no
            # leader (stalled from the start). A create of a million partitions comes here.
            reg = self.image.apply_partition_record(record)
            if reg.leader == NO_LEADER:
                self.data.on_partition_change(TopicPartition(record.topic, record.partition),
                                              None, reg, self.now)
            if self._multi_dir:
                self._note_unplaced(TopicPartition(record.topic, record.partition), reg)
        else:
            self.image.apply(record)
            if isinstance(record, TopicRecord) and record.name not in self.data.topic_base:
                self.data.topic_base[record.name] = LogBase(0.0, self.now)

    def _flush(self) -> None:
        """Commit the records of this step through the quorum, then keep them in the local
        metadata log — before anything is answered. If the quorum cannot commit them in
        time, the speculative state is rolled back to what is committed. Then the brokers
        place the new replicas those records gave them (KIP-858 AssignReplicasToDirs)."""
        self._commit()
        if self._unplaced and not self.read_only:
            self._place_new_replicas()
            self._commit()

    def _commit(self) -> None:
        if not self._pending:
            return
        if self.read_only:
            raise RuntimeError("a cluster opened read-only cannot change")
        records, self._pending = self._pending, []
        chunks = [records[i:i + QUORUM_CHUNK] for i in range(0, len(records), QUORUM_CHUNK)]
        payloads = _payloads([encode_record(r) for r in records])
        first = (self.quorum.commit(payloads, self.spec.controller_request_timeout_ms)
                 if self.controller_available else None)
        self.now = max(self.now, self.quorum.now_s())
        if first is None:
            self._roll_back()
            raise KafkaApiError(errors.REQUEST_TIMED_OUT,
                                "the metadata quorum did not commit the change within "
                                f"{self.spec.controller_request_timeout_ms} ms; nothing changed")
        for i, payload in enumerate(payloads):
            self._keep(payload, len(chunks[i]), first + i + 1)
        self._maybe_snapshot()

    def _keep(self, payload: bytes, count: int, quorum_end: int) -> None:
        """Append a committed entry to the local metadata log (and snapshot when due)."""
        self.log.append_encoded(payload, count, epoch=0, timestamp_ms=self.now_ms(),
                                quorum_end=quorum_end)
        self._quorum_end = quorum_end
        self._since_snapshot += count
        self._since_snapshot_bytes += len(payload)

    def _apply_committed(self) -> None:
        """Apply committed entries this process has not applied (after a restart, or a
        commit that arrived after its request had timed out)."""
        if self.quorum.committed_end <= self._quorum_end:
            return
        snap = self.quorum.latest_snapshot()
        if (snap is not None and snap.end_offset > self._quorum_end
                and self.quorum.committed_start() > self._quorum_end):
            self._load_quorum_snapshot(snap)
        for off, payload in list(self.quorum.committed_from(self._quorum_end)):
            rows = orjson.loads(payload)
            for row in rows:
                self._apply(decode_record(row))
            self._keep(payload, len(rows), off + 1)
        self._maybe_snapshot()

    def _load_quorum_snapshot(self, snap: RaftSnapshot) -> None:
        """The local metadata log is behind the quorum's snapshot (its log below is gone):
        rebuild the image from the snapshot (KIP-630 handleLoadSnapshot) and keep it as the
        local snapshot too."""
        self.image = MetadataImage()
        self.data.image = self.image
        self.controller = self._new_controller()
        for payload in snap.records:
            self.image.apply_rows(orjson.loads(payload))
        self.data.invalidate()
        self._quorum_end = snap.end_offset
        self.log.quorum_end = snap.end_offset
        self.log.write_snapshot(self.image.snapshot_rows(), timestamp_ms=self.now_ms())
        self._since_snapshot = 0
        self._since_snapshot_bytes = 0

    def _roll_back(self) -> None:
        """Forget uncommitted changes: rebuild the image from the committed metadata."""
        self.log.close()
        self.log = MetadataLog(self.state_dir / "metadata", fsync=self._fsync)
        self.image = MetadataImage()
        self.data.image = self.image
        self.controller = self._new_controller()
        self._load_image()
        self._apply_committed()
        self._reconcile_data_plane()
        self.data.invalidate()

    def controller_reachable(self) -> bool:
        return self.controller_available and self._leader() is not None

    def _leader(self) -> int | None:
        if self.read_only:
            return self._last_quorum.leader_id if self._last_quorum is not None else None
        return self.quorum.leader()

    def _require_controller(self) -> None:
        """Like an admin client, wait (in simulated time) for a controller to answer."""
        if self.read_only:
            if self._last_quorum is None:
                raise KafkaApiError(errors.NOT_CONTROLLER,
                                    "no controller is active: the metadata quorum had no leader "
                                    "when the cluster was last changed (a majority of "
                                    "controllers may be down)")
            return
        if not self.controller_available:
            raise KafkaApiError(errors.REQUEST_TIMED_OUT,
                                "the controller did not answer within the request timeout")
        deadline = self.now + self.spec.controller_request_timeout_ms / 1000.0
        while self.quorum.leader() is None and self.now < deadline:
            self.advance(0.1)
        if self.quorum.leader() is None:
            raise KafkaApiError(errors.NOT_CONTROLLER,
                                "no controller is active: the metadata quorum has no leader "
                                "(a majority of controllers may be down)")

    # -- time -------------------------------------------------------------------------------------
    def now_ms(self) -> int:
        return round(self.now * 1000)

    def _broker_bandwidth(self, broker: int) -> float:
        return self._bandwidth.get(broker, self.spec.replication_bytes_per_second)

    @gc_paused
    def advance(self, seconds: float) -> None:
        """Run the cluster for ``seconds`` of simulated time.

        Event-driven: between two events (a replica catching up, a lag or session timer
        firing, a metadata change) every rate is constant, so one step covers the whole
        stretch. A catch-up is noticed at most max(MIN_STEP, seconds/STEPS_PER_ADVANCE) late.
        """
        if self.read_only:
            raise RuntimeError("a cluster opened read-only does not run")
        end = self.now + seconds
        floor = max(MIN_STEP, seconds / STEPS_PER_ADVANCE)
        while self.now < end - 1e-9:
            step = min(end - self.now, max(floor, self._next_event_in))
            self.now += step
            self._step(step)
        self.now = max(self.now, end)

    def _step(self, dt: float) -> None:
        self.quorum.advance_to(self.now)
        self._apply_committed()
        now = self.now
        caught_up, next_catch_up = self.data.fetch(dt, now)
        copied, next_copied = self.data.copy_futures(dt, now)
        next_catch_up = min(next_catch_up, next_copied)
        if not self.controller_reachable():
            # No active controller: replicas keep fetching, but ISR changes and fencing wait
            # (a caught-up replica stays listed and is noticed again once a leader is back).
            self._next_event_in = QUORUM_POLL
            return
        rules_of: dict[str, Rules] = {}  # only partitions change in this loop
        for tp, broker in caught_up:
            self.data.caught_up_now(tp, broker)
            self.controller.replica_caught_up(tp, broker, rules_of)
        if copied:
            self._swap_in_futures(copied)
        lag_max = self.spec.replica_lag_time_max_ms / 1000.0
        next_timer = float("inf")
        behind_too_long = []
        for tp, replicas in self.data.lagging.items():  # DataPlane.fetchers, without a generator
            for broker, lag in replicas.items():
                if lag.in_isr:
                    expires = lag.caught_up_at + lag_max
                    if now > expires:
                        behind_too_long.append((tp, broker))
                    else:
                        next_timer = min(next_timer, expires)
        for tp, broker in behind_too_long:
            self.controller.replica_fell_behind(tp, broker)
        session = self.spec.broker_session_timeout_ms / 1000.0
        for broker, since in list(self.data.down.items()):
            reg = self.image.brokers.get(broker)
            if reg is not None and not reg.fenced:
                if now - since >= session:
                    self.controller.fence_broker(broker)
                else:
                    next_timer = min(next_timer, since + session)
        try:
            self._flush()
        except KafkaApiError:
            self._next_event_in = QUORUM_POLL  # rolled back; the conditions are seen again
            return
        if not self._pending_change:
            self._next_event_in = min(next_catch_up, next_timer - now)
        self._pending_change = False

    # -- fault injection ------------------------------------------------------------------------
    def fail_broker(self, broker: int) -> None:
        """The broker process dies; the controller fences it after the session timeout. A
        broker of the spec unregistered while it ran (Kafka lets that be) has a process too."""
        if all(b.id != broker for b in self.spec.brokers):
            self._known_broker(broker)
        self.data.on_broker_down(broker, self.now)
        self.data.invalidate()
        self._next_event_in = 0.0

    def restore_broker(self, broker: int) -> None:
        """The crashed broker restarts: its new incarnation registers — which takes it out of
        the ISRs (and ELRs) the crashed one was in, as Kafka does after an unclean shutdown —
        is unfenced once caught up on metadata, and its replicas catch up to rejoin."""
        spec = next((b for b in self.spec.brokers if b.id == broker), None)
        if broker not in self.image.brokers and spec is not None:
            # unregistered: the restarted process registers anew, fenced until it has caught
            # up, as a real broker does
            self.controller.register_broker(broker, spec.rack)
            self.controller.fence_broker(broker)
        self._known_broker(broker)
        try:
            self.controller.restart_broker(broker, clean=False)
            self.controller.unfence_broker(broker)
        except ControllerFault as e:
            self._pending.clear()
            self._roll_back()
            raise KafkaApiError(errors.UNKNOWN_SERVER_ERROR, (
                f"broker {broker} cannot register: the controller fails with \"{e}\" — Kafka "
                "4.4 fails the same way after an unclean revert left a partition's last known "
                "leader outside its replicas; delete or reassign that partition first"
            )) from None
        self.data.on_broker_up(broker, self.now)
        self.data.invalidate()
        self._next_event_in = 0.0
        self._flush()

    def fail_controller(self, node: int, *, lose_unflushed: bool = True) -> None:
        """Hard-kill a node of the metadata quorum (with its unflushed writes, by default)."""
        if node not in self.quorum.nodes():
            raise ValueError(f"node {node} is not a controller; quorum nodes are "
                             f"{self.quorum.nodes()}")
        if not self.quorum.alive(node):
            raise ValueError(f"controller {node} is already down")
        self.quorum.crash(node, lose_unflushed=lose_unflushed)
        self.down_controllers.add(node)

    def restore_controller(self, node: int) -> None:
        if node not in self.quorum.nodes():
            raise ValueError(f"node {node} is not a controller; quorum nodes are "
                             f"{self.quorum.nodes()}")
        if self.quorum.alive(node):
            raise ValueError(f"controller {node} is already running")
        self.quorum.restart(node)
        self.down_controllers.discard(node)

    def _known_broker(self, broker: int) -> None:
        if broker not in self.image.brokers:
            raise ValueError(f"unknown broker {broker}; brokers are {sorted(self.image.brokers)}")

    def alive(self, broker: int) -> bool:
        return broker in self.image.brokers and broker not in self.data.down

    # -- admin operations (the ClusterAdmin port) -------------------------------------------
    def describe_cluster(self) -> ClusterDescription:
        self._require_controller()
        leader = self._leader()
        return ClusterDescription(
            self.image.cluster_id, leader if leader is not None else -1,
            tuple(BrokerDescription(b.id, b.rack, b.fenced)
                  for b in sorted(self.image.brokers.values(), key=lambda b: b.id)))

    @gc_paused
    def describe_partitions(self, topics: Iterable[str] | None = None,
                            partitions: Iterable[TopicPartition] | None = None
                            ) -> list[PartitionDescription]:
        self._require_controller()
        if partitions is not None:
            pairs = [(tp, self.image.partition(tp)) for tp in partitions]
        elif topics is not None:
            wanted = set(topics)
            pairs = [(tp, p) for tp, p in self.image.iter_partitions() if tp.topic in wanted]
        else:
            pairs = list(self.image.iter_partitions())
        fenced = {b.id for b in self.image.brokers.values() if b.fenced}
        out = []
        # DataPlane.leader_leo inlined (same arithmetic): a plan of 100,000 partitions is
        # described in one call, and three method calls per partition were half of it
        topics, bases, topic_base, now = self.image.topics, self.data.bases, \
            self.data.topic_base, self.now
        for tp, p in pairs:
            if p is None:
                continue
            topic = topics[tp.topic]
            b = bases.get(tp)
            if b is None:
                b = topic_base[tp.topic]
            leo = b.offset if b.stalled else \
                b.offset + topic.produce_bytes_per_second / topic.message_bytes * (now - b.time)
            out.append(PartitionDescription(
                tp, p.replicas, p.isr, p.leader, p.leader_epoch, p.adding, p.removing,
                int(leo * topic.message_bytes), topic.produce_bytes_per_second,
                tuple(r for r in p.replicas if r in fenced) if fenced else ()))
        return out

    def partition_counts(self) -> PartitionCounts:
        self._require_controller()
        topics: set[str] = set()
        partitions = under = offline = 0
        for tp, p in self.image.iter_partitions():
            topics.add(tp.topic)
            partitions += 1
            under += under_replicated(len(p.isr), len(p.replicas), len(p.adding))
            if p.leader < 0:
                offline += 1
        return PartitionCounts(len(topics), partitions, under, offline)

    @gc_paused
    def alter_partition_reassignments(self, changes: Mapping[TopicPartition, Sequence[int] | None]
                                      ) -> dict[TopicPartition, ApiResult]:
        self._require_controller()
        results = self.controller.alter_partition_reassignments(changes)
        self._flush()
        return results

    @gc_paused
    def list_partition_reassignments(self, partitions: Iterable[TopicPartition] | None = None
                                     ) -> dict[TopicPartition, OngoingReassignment]:
        self._require_controller()
        reassigning, topics = self.image.reassigning, self.image.topics
        out = {}
        # an executor's pass asks this of every move in flight (100,000): one loop, no
        # lookup through image.partition, the named tuple built by tuple.__new__
        for tp in sorted(reassigning) if partitions is None else partitions:
            if tp in reassigning:
                p = topics[tp.topic].partitions[tp.partition]  # a moving partition exists
                out[tp] = _new_ongoing(OngoingReassignment, (p.replicas, p.adding, p.removing))
        return out

    @gc_paused
    def replica_status(self, replicas: Iterable[tuple[TopicPartition, int]] | None = None
                       ) -> list[ReplicaStatus]:
        self._require_controller()
        if replicas is None:
            replicas = [(tp, r) for tp in sorted(self.image.reassigning)
                        for r in self.image.partition(tp).replicas]  # type: ignore[union-attr]
        now_ms = self.now_ms()
        out = []
        for tp, broker in replicas:
            topic = self.image.topics.get(tp.topic)
            p = self.image.partition(tp)
            if topic is None:
                out.append(ReplicaStatus(tp, broker, UNKNOWN_TOPIC, time_ms=now_ms))
            elif p is None:
                out.append(ReplicaStatus(tp, broker, UNKNOWN_PARTITION, time_ms=now_ms))
            elif broker not in self.image.brokers:
                out.append(ReplicaStatus(tp, broker, UNKNOWN_BROKER, time_ms=now_ms))
            elif broker not in p.replicas:
                out.append(ReplicaStatus(tp, broker, NOT_HOSTED, time_ms=now_ms))
            else:
                leo = self.data.replica_leo(tp, p, broker, self.now) or 0.0
                lag = max(0, int(self.data.leader_leo(tp, self.now)) - int(leo))
                # A fenced (dead) broker's replica is never "in sync", even with nothing new
                # to fetch (no producer): the controller took it out of the ISR (KIP-179).
                if p.leader == NO_LEADER and not self.image.brokers[broker].fenced:
                    # no leader's log to measure a lag against (as on a real cluster)
                    out.append(ReplicaStatus(tp, broker, LEADERLESS, None, None,
                                             int(leo * topic.message_bytes), now_ms))
                    continue
                word = (OFFLINE if self.image.brokers[broker].fenced
                        else IN_SYNC if lag == 0 else behind(lag))
                out.append(ReplicaStatus(
                    tp, broker, word, lag,
                    lag * topic.message_bytes, int(leo * topic.message_bytes), now_ms))
        return out

    @gc_paused
    def replica_log_sizes(self, replicas: Iterable[tuple[TopicPartition, int]]
                          ) -> dict[tuple[TopicPartition, int], int]:
        self._require_controller()
        out: dict[tuple[TopicPartition, int], int] = {}
        lagging, topics, now = self.data.lagging, self.image.topics, self.now
        bases, topic_base = self.data.bases, self.data.topic_base
        down = self.data.down  # asked of the broker itself, which is dead: no answer
        # a pass of the executor asks this of every replica in flight (100,000): lookups
        # and DataPlane.leader_leo inlined, the same arithmetic
        for key in replicas:
            tp, broker = key
            if broker in down:
                continue
            topic = topics.get(tp.topic)
            if topic is None:
                continue
            regs, i = topic.partitions, tp.partition
            if not 0 <= i < len(regs) or broker not in regs[i].replicas:
                continue
            fetching = lagging.get(tp)
            lag = fetching.get(broker) if fetching is not None else None
            if lag is not None:
                leo = lag.leo
            else:
                b = bases.get(tp)
                if b is None:
                    b = topic_base[tp.topic]
                leo = b.offset if b.stalled else b.offset + (
                    topic.produce_bytes_per_second / topic.message_bytes) * (now - b.time)
            out[key] = int(leo * topic.message_bytes)
        return out

    @gc_paused
    def elect_leaders(self, election_type: ElectionType,
                      partitions: Iterable[TopicPartition] | None = None) -> ElectionOutcome:
        self._require_controller()
        results, attempted = self.controller.elect_leaders(election_type, partitions)
        self._flush()  # the answer comes only once the new leaders are committed
        return ElectionOutcome(results, attempted if partitions is None else ())

    def describe_configs(self, resources: Iterable[ConfigResource]
                         ) -> dict[ConfigResource, dict[str, str | None]]:
        self._require_controller()
        return {r: {k: None if is_sensitive_config(r[0], k) else v
                    for k, v in self.image.config(*r).items()} for r in resources}

    def incremental_alter_configs(self, changes: Mapping[ConfigResource, Mapping[str, str | None]]
                                  ) -> dict[ConfigResource, ApiResult]:
        self._require_controller()
        results = self.controller.incremental_alter_configs(changes)
        self._flush()
        return results

    def unregister_broker(self, broker_id: int) -> ApiResult:
        self._require_controller()
        result = self.controller.unregister_broker(broker_id)
        self._flush()
        return result

    def metadata_version(self) -> int | None:
        return self.controller.metadata_version

    def set_cordoned(self, brokers: Mapping[int, bool]) -> dict[int, ApiResult]:
        """The twin's controller reads the broker's config itself: cordoned at once."""
        self._require_controller()
        results = self.controller.incremental_alter_configs(
            {("BROKER", str(b)): {CORDONED_LOG_DIRS: CORDON_ALL if yes else None}
             for b, yes in brokers.items()})
        self._flush()
        return {int(name): r for (_, name), r in results.items()}

    # -- the throttle-marker topic -----------------------------------------------------------
    def read_throttle_markers(self) -> dict[int, str]:
        self._require_controller()
        if self._marker_partition() is None:
            return {}
        problem = self._wait_for_marker_leader()
        if problem is not None:
            raise KafkaApiError(NOT_LEADER_OR_FOLLOWER, problem)
        return {int(k): v for k, (_, v) in self.image.markers.items()
                if v is not None and is_whole_number(k)}

    def write_throttle_markers(self, changes: Mapping[int, str | None]) -> list[str]:
        self._require_controller()
        if not changes:
            return []
        if THROTTLE_MARKER_TOPIC not in self.image.topics:
            live = len(self.image.live_brokers())
            created = self.controller.create_topic(
                THROTTLE_MARKER_TOPIC, 1, marker_replication_factor(live), rng=self.rng,
                configs=MARKER_TOPIC_CONFIGS)
            if not created.ok:
                return [f"topic {THROTTLE_MARKER_TOPIC}: {created.message}"]
        problem = self._wait_for_marker_leader()
        if problem is not None:
            return [problem]
        try:
            self.produce_markers([(str(b), v) for b, v in sorted(changes.items())])
        except KafkaApiError as e:
            return [f"topic {THROTTLE_MARKER_TOPIC}: {e.message}"]
        return []

    def produce_markers(self, records: Sequence[tuple[str, str | None]]) -> int:
        """Append records to the marker topic and commit them (acks=all): the offset of the
        first. Raises :class:`KafkaApiError` when the metadata quorum cannot commit them."""
        base = self.controller.append_markers(records)
        self._flush()
        return base

    def _marker_partition(self) -> PartitionRegistration | None:
        return self.image.partition(TopicPartition(THROTTLE_MARKER_TOPIC, 0))

    def _wait_for_marker_leader(self) -> str | None:
        """Like a client retrying NOT_LEADER_OR_FOLLOWER within its request timeout, wait (in
        simulated time) until the marker topic's leader is a running broker; else say why."""
        deadline = self.now + self.spec.controller_request_timeout_ms / 1000.0
        while True:
            p = self._marker_partition()
            if p is None:
                return f"topic {THROTTLE_MARKER_TOPIC} does not exist"
            if p.leader != NO_LEADER and self.alive(p.leader):
                return None
            if self.now >= deadline or self.read_only:
                return (f"topic {THROTTLE_MARKER_TOPIC}: no running leader for its partition "
                        f"(replicas {list(p.replicas)}) within "
                        f"{self.spec.controller_request_timeout_ms} ms")
            self.advance(QUORUM_POLL)

    # -- the metadata quorum (KIP-595 DescribeQuorum / AlterQuorum, KIP-853) -----------------
    def describe_quorum(self) -> QuorumStatus:
        self._require_controller()
        if self.read_only:
            assert self._last_quorum is not None
            return self._last_quorum
        return self._with_broker_observers(self.quorum.describe())

    def _with_broker_observers(self, q: QuorumStatus) -> QuorumStatus:
        """Kafka lists its brokers as observers of the metadata log. Here a broker that is
        not a quorum node yet applies each committed record at once, so it shows as a
        caught-up observer; naming it in a voter change starts it as a quorum node, which
        then catches up through the quorum's own fetches before it is promoted."""
        started = set(self.quorum.nodes())
        now_ms = next((r.last_fetch_timestamp for r in q.replicas if r.replica_id == q.leader_id),
                      int(self.now * 1000))  # the quorum's clock, as the leader's row
        rows = tuple(QuorumReplica(b, q.high_watermark, 0, 0, "Observer", False, now_ms, now_ms)
                     for b in sorted(self.image.brokers)
                     if b not in started and self.alive(b))
        return dataclasses.replace(q, replicas=q.replicas + rows) if rows else q

    def quorum_node_ids(self) -> set[int]:
        """Node ids that can be voters: brokers, controllers, and nodes already started."""
        return set(self.image.brokers) | set(self.spec.voters) | set(self.quorum.nodes())

    def live_quorum_nodes(self) -> set[int]:
        started = set(self.quorum.nodes())
        live = {n for n in started if self.quorum.alive(n)}
        # a broker that is not yet a quorum node starts when a change names it
        return live | {b for b in self.image.brokers if b not in started and self.alive(b)}

    def alter_quorum(self, voters: Sequence[int] | None) -> ApiResult:
        """AlterQuorum: set TargetVoters; None (or the current voters) cancels a pending one."""
        self._require_controller()
        result = self.quorum.alter(voters, known=self.quorum_node_ids(),
                                   live=self.live_quorum_nodes())
        self.now = max(self.now, self.quorum.now_s())
        return result

    def add_raft_voter(self, node_id: int, endpoints: Sequence[str] = ()) -> ApiResult:
        """KIP-853 AddRaftVoter: answers once the new voter set is committed. (The simulated
        network needs no endpoints; Kafka's leader connects to the ones given.)"""
        self._require_controller()
        current = self.quorum.describe().current_voters
        if node_id in current:
            voters = ", ".join(self._replica_key(v) for v in sorted(current))
            return ApiResult(errors.DUPLICATE_VOTER,
                             f"The voter id for {self._replica_key(node_id)} is already part "
                             f"of the set of voters [{voters}].")
        return self._change_voters([*current, node_id])

    def remove_raft_voter(self, node_id: int) -> ApiResult:
        """KIP-853 RemoveRaftVoter: answers once the new voter set is committed."""
        self._require_controller()
        current = self.quorum.describe().current_voters
        if node_id not in current:
            # A client learns a voter's directory id from DescribeQuorum; for a node that is
            # no voter it sends none, and Kafka refuses that before looking the voter up.
            return ApiResult(errors.INVALID_REQUEST,
                             "Remove voter request didn't include a valid voter")
        return self._change_voters([n for n in current if n != node_id])

    def _replica_key(self, node: int) -> str:
        """Kafka's ReplicaKey: the node and its metadata log directory's id (KIP-853), here
        derived from the cluster id, as a real directory's is random at format time."""
        raw = uuid.uuid5(uuid.NAMESPACE_OID, f"{self._cluster_id}/{node}").bytes
        directory = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        return f"ReplicaKey(id={node}, directoryId={directory})"

    def _change_voters(self, voters: list[int]) -> ApiResult:
        result = self.alter_quorum(voters)
        if not result.ok:
            return result
        want = set(voters)
        deadline = self.now + self.spec.controller_request_timeout_ms / 1000.0
        while self.now < deadline:
            try:
                q = self.quorum.describe()
                if set(q.current_voters) == want and q.target_voters is None:
                    return OK  # Kafka answers a committed change with no message
            except KafkaApiError:
                pass  # an election is under way (the leader removed itself)
            self.advance(QUORUM_POLL)
        return ApiResult(errors.REQUEST_TIMED_OUT,
                         f"the voter change to {sorted(want)} did not commit within "
                         f"{self.spec.controller_request_timeout_ms} ms; it goes on")

    # -- log directories (JBOD: KIP-113, KIP-858) ----------------------------------------------
    def log_dirs(self, broker: int) -> tuple[LogDirSpec, ...]:
        """The broker's log directories (one default directory for a broker not in the spec)."""
        dirs = self._log_dirs.get(broker)
        if dirs is None:
            dirs = (LogDirSpec(path=DEFAULT_LOG_DIR.format(id=broker)),)
        return dirs

    def log_dir_paths(self, broker: int) -> tuple[str, ...]:
        return tuple(d.path for d in self.log_dirs(broker))

    def replica_dir(self, tp: TopicPartition, p: PartitionRegistration, broker: int) -> str:
        """The directory that holds ``broker``'s replica: the one recorded in the partition,
        else (unassigned, as on a broker of one directory) the broker's first."""
        paths = self.log_dir_paths(broker)
        recorded = p.directory_of(broker)
        return recorded if recorded in paths else paths[0]

    def _cordoned_dirs(self, broker: int) -> frozenset[str]:
        value = self.image.config("BROKER", str(broker)).get(CORDONED_LOG_DIRS, "")
        return cordoned_paths(value, self.log_dir_paths(broker))

    def _note_unplaced(self, tp: TopicPartition, reg: PartitionRegistration) -> None:
        for r in reg.replicas:
            if r in self._multi_dir and not reg.directory_of(r):
                self._unplaced.add((tp, r))

    def _place_new_replicas(self) -> None:
        """Each running JBOD broker creates its new replicas in a directory — the one an
        AlterReplicaLogDirs asked for before it hosted them, else the least-loaded one — and
        tells the controller (AssignReplicasToDirs). A broker that is down does it when it
        is back."""
        todo = sorted(k for k in self._unplaced if k[1] not in self.data.down)
        self._unplaced.difference_update(todo)
        todo = [(tp, b) for tp, b in todo
                if (p := self.image.partition(tp)) is not None and b in p.replicas
                and p.directory_of(b) not in self.log_dir_paths(b)]
        if not todo:
            return
        counts = self._partitions_per_dir({b for _, b in todo})
        assignments: dict[Replica, str] = {}
        for tp, b in todo:
            paths = self.log_dir_paths(b)
            path = self.data.preferred.pop((tp, b), None)
            if path not in paths:
                path = next_log_dir(paths, counts[b], self._cordoned_dirs(b))
            counts[b][path] = counts[b].get(path, 0) + 1
            assignments[(tp, b)] = path
        self.controller.assign_replicas_to_dirs(assignments)

    def _partitions_per_dir(self, brokers: set[int]) -> dict[int, dict[str, int]]:
        """Replicas (future ones included) per directory of each broker: one scan."""
        counts: dict[int, dict[str, int]] = {b: {} for b in brokers}
        for _, p in self.image.iter_partitions():
            for r, d in zip(p.replicas, p.directories, strict=False):
                if r in counts and d:
                    counts[r][d] = counts[r].get(d, 0) + 1
        for (_, b), f in self.data.futures.items():
            if b in counts:
                counts[b][f.path] = counts[b].get(f.path, 0) + 1
        return counts

    def _swap_in_futures(self, copied: list[Replica]) -> None:
        """Futures that caught up replace their current replicas: the broker renames the
        future log and tells the controller the replica's new directory."""
        assignments = {}
        for key in copied:
            future = self.data.futures.pop(key, None)
            if future is not None:
                assignments[key] = future.path
        self.controller.assign_replicas_to_dirs(assignments)

    @gc_paused
    def describe_log_dirs(self, brokers: Iterable[int],
                          partitions: Iterable[TopicPartition] | None = None
                          ) -> dict[int, tuple[LogDir, ...]]:
        self._require_controller()
        wanted = None if partitions is None else set(partitions)
        out: dict[int, tuple[LogDir, ...]] = {}
        for b in brokers:
            if not self.alive(b):
                continue  # a broker that is down (or unknown) does not answer
            hosted = self.image.partitions_on(b) if wanted is None else [
                (tp, p) for tp in sorted(wanted)
                if (p := self.image.partition(tp)) is not None and b in p.replicas]
            held: dict[str, list[LogDirReplica]] = {path: [] for path in self.log_dir_paths(b)}
            # sizes and lags as replica_status reports them, for the current replicas
            for (tp, p), s in zip(hosted, self.replica_status([(tp, b) for tp, _ in hosted]),
                                  strict=True):
                held[self.replica_dir(tp, p, b)].append(
                    LogDirReplica(tp, s.size_bytes or 0, s.lag_messages or 0))
            for (tp, fb), f in sorted(self.data.futures.items()):
                if fb == b and (wanted is None or tp in wanted) and f.path in held:
                    held[f.path].append(self._future_entry(tp, b, f))
            cordoned = self._cordoned_dirs(b)
            out[b] = tuple(
                LogDir(b, d.path, tuple(held[d.path]), None, d.capacity_bytes,
                       None if d.capacity_bytes is None else
                       max(0, d.capacity_bytes - sum(r.size_bytes for r in held[d.path])),
                       d.path in cordoned)
                for d in self.log_dirs(b))
        return out

    def _future_entry(self, tp: TopicPartition, broker: int, f: FutureReplica) -> LogDirReplica:
        """A future replica: its own size, and its lag behind the current replica's log end
        (DescribeLogDirs' offset_lag of a future key)."""
        p = self.image.partition(tp)
        assert p is not None
        message_bytes = self.image.topics[tp.topic].message_bytes
        current = self.data.replica_leo(tp, p, broker, self.now) or 0.0
        return LogDirReplica(tp, int(f.leo * message_bytes),
                             max(0, int(current) - int(f.leo)), future=True)

    def alter_replica_log_dirs(self, moves: Mapping[tuple[TopicPartition, int], str]
                               ) -> dict[tuple[TopicPartition, int], ApiResult]:
        """ReplicaManager.alterReplicaLogDirs, asked of each replica's broker, in its order:
        the directory must be one of the broker's; a future under way to another directory
        is dropped; a replica the broker does not host is REPLICA_NOT_AVAILABLE (a partition
        it does not know at all, UNKNOWN_TOPIC_OR_PARTITION), the directory kept for it;
        else a future replica is started unless the replica or its future is there."""
        self._require_controller()
        out: dict[tuple[TopicPartition, int], ApiResult] = {}
        for (tp, b), path in moves.items():
            out[(tp, b)] = self._alter_replica_log_dir(tp, b, path)
        self._next_event_in = 0.0
        return out

    def _alter_replica_log_dir(self, tp: TopicPartition, broker: int, path: str) -> ApiResult:
        if not self.alive(broker):
            return ApiResult(errors.BROKER_NOT_AVAILABLE, f"broker {broker} is not available")
        if path not in self.log_dir_paths(broker):
            return ApiResult(errors.LOG_DIR_NOT_FOUND,
                             f"Log dir {path} is not found in the config.")
        p = self.image.partition(tp)
        if p is None or broker not in p.replicas:
            # remembered (LogManager.maybeUpdatePreferredLogDir, before Kafka looks the
            # partition up): the replica is created there once the broker comes to host it
            self.data.preferred[(tp, broker)] = path
            if p is None:  # not in the broker's metadata at all
                return ApiResult(errors.UNKNOWN_TOPIC_OR_PARTITION,
                                 "This server does not host this topic-partition.")
            return ApiResult(errors.REPLICA_NOT_AVAILABLE,
                             f"Replica {broker} of partition {tp} is not available")
        key = (tp, broker)
        future = self.data.futures.get(key)
        if future is not None and future.path != path:
            del self.data.futures[key]  # re-targeted: the copy under way is dropped
            future = None
        if future is None and self.replica_dir(tp, p, broker) != path:
            self.data.futures[key] = FutureReplica(path, 0.0)
        return OK

    # -- views ------------------------------------------------------------------------------------
    def high_watermark(self, tp: TopicPartition) -> int:
        p = self.image.partition(tp)
        if p is None:
            raise KeyError(str(tp))
        return int(self.data.high_watermark(tp, p, self.now))



_new_ongoing = tuple.__new__  # the named tuple without its Python-level __new__


def _payloads(rows: list[Any]) -> list[bytes]:
    """Encoded rows as quorum records: JSON lists of up to QUORUM_CHUNK rows.

    Each an exact copy of orjson's output: orjson keeps the buffer it grew, which for rows
    with long strings (a topic's throttled-replica list, a throttle marker) is up to four
    times the JSON's length — and the quorum's log holds these until the next snapshot (at
    40,000 partitions in flight: 87 MiB held for 20 MiB of records)."""
    return [bytes(memoryview(orjson.dumps(rows[i:i + QUORUM_CHUNK])))
            for i in range(0, len(rows), QUORUM_CHUNK)]


def new_cluster_id() -> str:
    """A fresh id in Kafka's form (``kafka-storage random-uuid``: a UUID in URL-safe base64,
    22 characters), so two clusters never share one."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _quorum_json(q: QuorumStatus | None) -> dict[str, Any] | None:
    return None if q is None else dataclasses.asdict(q)


def _quorum_of_json(doc: dict[str, Any] | None) -> QuorumStatus | None:
    if not doc:
        return None
    target = doc["target_voters"]
    return QuorumStatus(**{
        **doc, "current_voters": tuple(doc["current_voters"]),
        "target_voters": None if target is None else tuple(target),
        "replicas": tuple(QuorumReplica(**r) for r in doc["replicas"])})


def _rng_json(state: tuple[Any, ...]) -> list[Any]:
    return [state[0], list(state[1]), state[2]]


def _rng_state(doc: list[Any]) -> tuple[Any, ...]:
    return (doc[0], tuple(doc[1]), doc[2])
