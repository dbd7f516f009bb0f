"""What the operator process holds: the clusters it talks to and its durable state.

Embedded clusters live in the operator process; their metadata logs, snapshots and the small
state of each running operation sit under ``state_dir`` (a volume), so a restarted operator
resumes every operation where it stood. A ``bootstrapServers`` cluster is a connected
``kafka`` backend admin (controller_core.backends) held here until its KafkaCluster changes
or goes. Both implement the ClusterAdmin port, so the handlers drive either the same way.
Work on a cluster runs in a worker thread under a per-cluster lock, so the event loop
(watches, peering, liveness) stays responsive.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import orjson

from controller_core.backends import KafkaAdmin, RetryPolicy, open_kafka_admin
from controller_core.config import EmbeddedClusterSpec
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.storage.framing import write_atomically
from kraftsman.local_store import StateBusy, StateLock
from kraftsman.memory import Trimmer
from kraftsman.planner_job_spec import PlannerConfig

T = TypeVar("T")
ClusterKey = tuple[str, str]  # (namespace, name)
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def _safe(part: str) -> str:
    return _SAFE.sub("_", part)


Backend = EmbeddedCluster | KafkaAdmin
# How long closing a cluster waits for a pass working on it (a hung worker must not stop a
# KafkaCluster's deletion, or the operator's shutdown, for good).
CLOSE_WAIT_SECONDS = 10.0
# The kafka backend's retries per admin call: short enough that a timer pass does not sit on
# an unreachable cluster for long (the next pass tries again, with backoff).
KAFKA_RETRY = RetryPolicy(total_seconds=10.0)


class ClusterBusy(Exception):
    """Another process holds the embedded cluster's state directory: a second operator
    replica (kopf's peering can let two act for a moment when both start at once) or a
    ``kraftsman`` command on the same volume. Opening it too would give it two writers."""


@dataclass
class OpenCluster:
    """One cluster the operator talks to. ``cluster`` is the ClusterAdmin: the in-process
    EmbeddedCluster, or a KafkaAdmin connected to a real cluster. ``last_wall`` and
    ``last_checkpoint`` run an embedded cluster's clock; ``opened_at`` dates a connection."""

    cluster: Backend
    spec_digest: str
    uid: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_wall: float = 0.0
    last_checkpoint: float = 0.0
    opened_at: float = 0.0
    # An embedded cluster's state directory, held (flock) while it is open here.
    dir_lock: StateLock | None = None
    cluster_id: str | None = None  # what this connection reaches (cluster_id_of)

    def cluster_id_of(self) -> str:
        """The id of the cluster this connection reaches, asked once (in a worker thread,
        under the lock): a KafkaCluster repointed, or an embedded one recreated under a new
        id, is a new OpenCluster."""
        if self.cluster_id is None:
            self.cluster_id = self.cluster.describe_cluster().cluster_id
        return self.cluster_id

    @property
    def embedded(self) -> bool:
        return isinstance(self.cluster, EmbeddedCluster)


@dataclass
class Backoff:
    """Exponential backoff for temporary errors, per object; deterministic (no jitter)."""

    base: float = 1.0
    cap: float = 60.0
    failures: dict[str, int] = field(default_factory=dict)
    not_before: dict[str, float] = field(default_factory=dict)

    def ready(self, key: str, now: float) -> bool:
        return now >= self.not_before.get(key, 0.0)

    def failed(self, key: str, now: float) -> float:
        n = self.failures.get(key, 0) + 1
        self.failures[key] = n
        delay: float = min(self.cap, self.base * float(2 ** (n - 1)))
        self.not_before[key] = now + delay
        return delay

    def succeeded(self, key: str) -> None:
        self.failures.pop(key, None)
        self.not_before.pop(key, None)


# kopf peering: the live replica with the highest priority acts, the others pause; replicas
# with the same priority all pause ("Pausing all operators, including self"). Every replica of
# a Deployment has the same args, so the default priority comes from the start time: the
# oldest replica acts, a replacement pod stands by instead of preempting the one that took
# over, and a random tiebreak keeps two replicas started in the same millisecond apart.
_PRIORITY_EPOCH_MS = 4_102_444_800_000  # 2100-01-01: priorities stay positive (and < 2**53)


def default_priority(now: float | None = None) -> int:
    started_ms = int((time.time() if now is None else now) * 1000)
    return (_PRIORITY_EPOCH_MS - started_ms) * 1000 + secrets.randbelow(1000)


def embedded_cluster_dir(state_dir: Path, key: ClusterKey, uid: str) -> Path:
    """Where the embedded KafkaCluster ``key`` (namespace, name) with ``uid`` keeps its state
    (the planner Job reads it there, read-only)."""
    return state_dir / "clusters" / _safe(key[0]) / f"{_safe(key[1])}-{_safe(uid)}"


def spec_digest(doc: Any) -> str:
    return hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


class Runtime:
    """Shared by every handler of one operator process."""

    def __init__(self, state_dir: Path, *, tick_seconds: float = 1.0, time_scale: float = 1.0,
                 checkpoint_seconds: float = 5.0, fsync: bool = True,
                 clock: Callable[[], float] = time.monotonic,
                 kafka_retry: RetryPolicy = KAFKA_RETRY,
                 planner: PlannerConfig | None = None) -> None:
        self.state_dir = state_dir
        # How KafkaRebalance planner Jobs are made (the chart passes the image and the rest).
        self.planner = planner or PlannerConfig(image=None)
        # Freed memory back to the kernel after passes (kraftsman/memory.py).
        self.trim_memory = Trimmer()
        self.tick = tick_seconds
        self.time_scale = time_scale
        self.checkpoint_seconds = checkpoint_seconds
        self.fsync = fsync
        self.clock = clock
        self.kafka_retry = kafka_retry  # retries of the kafka backend, per admin call
        self.clusters: dict[ClusterKey, OpenCluster] = {}
        self.settings: Any = None  # kopf's OperatorSettings, set at startup
        # kind -> kopf's index of (namespace, name) -> metrics.Operation, set at startup
        self.operations: dict[str, Any] = {}
        self.backoff = Backoff()
        self.ops_dir = state_dir / "operations"
        # Live reassignment executors by resource uid, with the digest of their plan; rebuilt
        # from the saved state (and the cluster) after a restart.
        self.executors: dict[str, tuple[str, Any]] = {}

    # -- embedded clusters ----------------------------------------------------------------------
    def cluster_dir(self, key: ClusterKey, uid: str) -> Path:
        return embedded_cluster_dir(self.state_dir, key, uid)

    def open_cluster(self, key: ClusterKey, uid: str, spec: EmbeddedClusterSpec,
                     digest: str) -> OpenCluster:
        """Open (recover or create) the cluster; re-open when its spec changed."""
        current = self.clusters.get(key)
        if current is not None and current.uid == uid and current.spec_digest == digest:
            return current
        self.close_cluster(key)
        directory = self.cluster_dir(key, uid)
        dir_lock = StateLock(directory, f"operator: KafkaCluster {key[0]}/{key[1]}",
                             create=True, wait_seconds=0)
        try:
            dir_lock.__enter__()
        except StateBusy as e:
            raise ClusterBusy(f"{e.holder}; not opened here, so that it has one writer: "
                              "retrying until that process lets go of it") from None
        try:
            cluster = EmbeddedCluster.open(directory, spec, fsync=self.fsync)
        except BaseException:
            dir_lock.__exit__(None, None, None)
            raise
        now = self.clock()
        opened = OpenCluster(cluster, digest, uid, last_wall=now, last_checkpoint=now,
                             opened_at=now, dir_lock=dir_lock)
        self.clusters[key] = opened
        return opened

    def open_kafka(self, key: ClusterKey, uid: str, bootstrap_servers: str,
                   secret_data: dict[str, str] | None, digest: str) -> OpenCluster:
        """Connect the kafka backend anew (blocking: call it in a worker thread), closing the
        connection it replaces; the handler calls it when the spec or the Secret (``digest``)
        changed. Raises SecretError / KafkaApiError (see
        :func:`controller_core.backends.open_kafka_admin`); nothing stays open then."""
        self.close_cluster(key)
        admin = open_kafka_admin(bootstrap_servers, secret_data, retry=self.kafka_retry)
        opened = OpenCluster(admin, digest, uid, opened_at=self.clock())
        self.clusters[key] = opened
        return opened

    def close_cluster(self, key: ClusterKey, *, remove_state_of: str | None = None) -> None:
        """Close the cluster ``key`` if open; ``remove_state_of``: the uid of an embedded
        cluster whose state directory goes too (its KafkaCluster was deleted)."""
        current = self.clusters.pop(key, None)
        if current is not None:
            # Not under an operation running in a worker thread (bounded: never hang here).
            locked = current.lock.acquire(timeout=CLOSE_WAIT_SECONDS)
            try:
                current.cluster.close()
            finally:
                if current.dir_lock is not None:
                    current.dir_lock.__exit__(None, None, None)
                if locked:
                    current.lock.release()
        if remove_state_of is not None:
            shutil.rmtree(self.cluster_dir(key, remove_state_of), ignore_errors=True)

    def close_all(self) -> None:
        for key in list(self.clusters):
            self.close_cluster(key)

    def advance(self, opened: OpenCluster) -> float:
        """Run an embedded cluster for the wall time since the last call (times time_scale);
        a real cluster moves on its own."""
        if not isinstance(opened.cluster, EmbeddedCluster):
            return 0.0
        now = self.clock()
        dt = max(0.0, now - opened.last_wall) * self.time_scale
        opened.last_wall = now
        opened.cluster.advance(dt)  # nothing happens in 0 s
        if now - opened.last_checkpoint >= self.checkpoint_seconds:
            opened.cluster.checkpoint()
            opened.last_checkpoint = now
        return dt

    async def run(self, opened: OpenCluster, fn: Callable[[Any], T]) -> T:
        """Run ``fn(cluster)`` in a worker thread, one at a time per cluster (a thread lock:
        callers may live on different event loops)."""
        def locked() -> T:
            try:
                with opened.lock:
                    return fn(opened.cluster)
            finally:
                self.trim_memory()

        return await asyncio.to_thread(locked)

    # -- operation state ------------------------------------------------------------------------
    def op_path(self, uid: str) -> Path:
        return self.ops_dir / f"{_safe(uid)}.json"

    def load_op(self, uid: str) -> dict[str, Any] | None:
        path = self.op_path(uid)
        if not path.exists():
            return None
        try:
            doc = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError:
            return None
        return doc if isinstance(doc, dict) else None

    def save_op(self, uid: str, doc: dict[str, Any]) -> None:
        self.ops_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(self.op_path(uid), orjson.dumps(doc))

    def forget_op(self, uid: str) -> None:
        self.op_path(uid).unlink(missing_ok=True)
