"""Which cluster a command acts on: a local embedded cluster, or a real one over the `kafka`
backend (``--bootstrap-server HOST:PORT [--command-config FILE]``, or a KafkaCluster with
``spec.bootstrapServers`` applied before).

Both answer the same ``ClusterAdmin`` calls; a real cluster's time is the wall clock
(``advance`` waits). Operation state of a real cluster (a PartitionReassignment's executor,
…) lives in ``STATE_DIR/kafka/<cluster id>/``, so the next invocation — from any directory
name given to it for the same cluster — finds it and resumes, changes or cancels it.
"""

from __future__ import annotations

import argparse
import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from controller_core.backends.client_properties import load_command_config
from controller_core.backends.kafka_admin import KafkaAdmin, RetryPolicy, open_kafka_admin
from controller_core.backends.security import SecretError
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.errors import KafkaApiError
from controller_core.storage.framing import write_atomically
from kraftsman.cli_errors import UsageError
from kraftsman.local_store import LocalStore

REGISTRY_DIR = "kafka-clusters"  # <state-dir>/kafka-clusters/<name>.json: applied KafkaClusters
STATE_SUBDIR = "kafka"  # <state-dir>/kafka/<cluster id>/: operation state of real clusters
LIVE_WINDOW_MS = 10_000  # a quorum node that fetched this recently counts as live
_HOST_PORT = re.compile(r"^[^\s,:]+:\d{1,5}$|^\[[0-9a-fA-F:]+\]:\d{1,5}$")


def add_target_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap-server", default=None, metavar="HOST:PORT[,HOST:PORT]",
                   help="act on a real Kafka cluster (KRaft) instead of a local embedded one")
    p.add_argument("--command-config", type=Path, default=None, metavar="FILE",
                   help="client properties for --bootstrap-server, as the Kafka tools take "
                        "(security.protocol, sasl.mechanism, sasl.jaas.config, ssl.* PEM)")
    p.add_argument("--connect-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="give up reaching --bootstrap-server, and retrying a call, after this "
                        "long (default 30)")


class RealCluster(KafkaAdmin):
    """The kafka backend plus what the CLI asks of any cluster: a clock and the quorum's
    candidate and live nodes."""

    def __init__(self, admin: KafkaAdmin, name: str) -> None:
        super().__init__(admin.client, admin.bootstrap_servers, retry=admin.retry)
        self.name = name
        self._t0 = time.monotonic()
        self._woke = self._t0

    @property
    def now(self) -> float:
        """Seconds since this command connected (the executor's ETAs need only deltas)."""
        return time.monotonic() - self._t0

    def advance(self, seconds: float) -> None:
        """A real cluster moves by itself: wait until ``seconds`` after the last wake-up, so
        a pass starts every tick whatever the pass itself took (as the Kafka tools' --verify
        loop is run: the time of one request does not add to the poll interval)."""
        time.sleep(max(0.0, self._woke + seconds - time.monotonic()))
        self._woke = time.monotonic()

    def topic_partition_counts(self) -> dict[str, int]:
        """Partitions per topic from Metadata alone (describe_partitions would also ask every
        leader for sizes, which validation does not need)."""
        def go() -> dict[str, int]:
            return {t.name: len(t.partitions) for t in self._metadata(None).topics
                    if t.error_code == 0}
        return self._call("Metadata", go)

    def quorum_node_ids(self) -> set[int]:
        q = self.describe_quorum()
        return {b.id for b in self.describe_cluster().brokers} | {
            r.replica_id for r in q.replicas}

    def live_quorum_nodes(self) -> set[int]:
        q = self.describe_quorum()
        newest = max((r.last_fetch_timestamp for r in q.replicas), default=-1)
        live = {r.replica_id for r in q.replicas if r.replica_id == q.leader_id
                or (r.last_fetch_timestamp >= 0
                    and newest - r.last_fetch_timestamp <= LIVE_WINDOW_MS)}
        return live | {b.id for b in self.describe_cluster().brokers if not b.fenced}


Cluster = EmbeddedCluster | RealCluster


def cluster_id_of(c: Cluster) -> str:
    return c.image.cluster_id if isinstance(c, EmbeddedCluster) else (
        c.describe_cluster().cluster_id)


def topic_names(c: Cluster) -> list[str]:
    return sorted(c.image.topics if isinstance(c, EmbeddedCluster) else c.topic_partition_counts())


def resource_store(args: argparse.Namespace, c: Cluster) -> LocalStore:
    """Where the applied resources of this cluster keep their state."""
    if isinstance(c, RealCluster):
        return state_store(args.state_dir, cluster_id_of(c))
    return LocalStore(args.state_dir)


@dataclass(frozen=True, slots=True)
class Registered:
    """A KafkaCluster with ``bootstrapServers`` applied through the CLI."""

    name: str
    bootstrap_servers: str
    auth_secret: str | None


def register_real_cluster(state_dir: Path, entry: Registered) -> None:
    d = state_dir / REGISTRY_DIR
    d.mkdir(parents=True, exist_ok=True)
    write_atomically(d / f"{entry.name}.json", orjson.dumps({
        "bootstrapServers": entry.bootstrap_servers, "authSecretRef": entry.auth_secret}))


def registered(state_dir: Path, name: str) -> Registered | None:
    path = state_dir / REGISTRY_DIR / f"{name}.json"
    if not path.is_file():
        return None
    doc = orjson.loads(path.read_bytes())
    return Registered(name, doc["bootstrapServers"], doc.get("authSecretRef"))


def registered_names(state_dir: Path) -> list[str]:
    d = state_dir / REGISTRY_DIR
    return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []


def check_bootstrap(text: str, flag: str = "--bootstrap-server") -> str:
    servers = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in servers if not _HOST_PORT.match(s) or int(s.rsplit(":", 1)[1]) > 65535]
    if not servers or bad:
        raise UsageError(f"{flag} {text!r}: expected HOST:PORT[,HOST:PORT...], "
                         "e.g. kafka-0:9092")
    return ",".join(servers)


def connect(bootstrap: str, command_config: Path | None, name: str,
            *, retry: RetryPolicy | None = None) -> RealCluster:
    """Open the kafka backend; bad settings and refusals become one-line errors (exit 2)."""
    # kafka-python logs every failed attempt; the CLI reports the outcome once, itself
    logging.getLogger("kafka").addHandler(logging.NullHandler())
    logging.getLogger("kafka").propagate = False
    try:
        data = load_command_config(command_config) if command_config is not None else None
        admin = open_kafka_admin(bootstrap, data, retry=retry or RetryPolicy(),
                                 client_id="kraftsman-cli")
    except SecretError as e:
        text = str(e)
        if command_config is not None and not text.startswith("--command-config"):
            # the shared checks speak of the Secret's keys; here they are properties
            text = (f"--command-config {command_config}: "
                    + text.replace("secret key ", "key ").replace("secret: ", ""))
        raise UsageError(text) from None
    except KafkaApiError as e:
        hint = ("; check sasl.jaas.config in --command-config"
                if e.error.name == "SASL_AUTHENTICATION_FAILED" else "")
        message = e.message.replace("; check the Secret's sasl.username/sasl.password", "")
        raise UsageError(f"{e.error.name}: {message}{hint}") from None
    return RealCluster(admin, name)


def retry_of(args: argparse.Namespace) -> RetryPolicy:
    seconds = getattr(args, "connect_timeout", 30.0)
    if seconds <= 0:
        raise UsageError("--connect-timeout: must be positive")
    return RetryPolicy(total_seconds=seconds)


def state_store(state_dir: Path, cluster_id: str) -> LocalStore:
    """Where operation state of the real cluster ``cluster_id`` lives."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", cluster_id) or "unknown"
    return LocalStore(state_dir / STATE_SUBDIR / safe)


def wants_real(args: argparse.Namespace) -> Registered | None:
    """The real cluster the arguments name, or None for the local embedded cluster."""
    bootstrap = getattr(args, "bootstrap_server", None)
    if bootstrap:
        return Registered(args.cluster or "kafka", check_bootstrap(bootstrap), None)
    name = getattr(args, "cluster", None)
    state_dir: Path = args.state_dir
    if name:
        found = registered(state_dir, name)
    else:
        real = registered_names(state_dir)
        only = len(real) == 1 and not LocalStore(state_dir).cluster_names()
        found = registered(state_dir, real[0]) if only else None
    if found is None and getattr(args, "command_config", None) is not None:
        raise UsageError("--command-config: needs --bootstrap-server (or --cluster NAME of a "
                         "KafkaCluster with bootstrapServers applied before)")
    return found


def refuse_real(args: argparse.Namespace, what: str) -> None:
    """Commands that drive the embedded simulation exit 2 on a real cluster."""
    target = wants_real(args)
    if target is not None:
        raise UsageError(f"`kraftsman {what}` drives a local embedded cluster only; "
                         f"{target.bootstrap_servers} is a real Kafka cluster (use the Kafka "
                         "tools or your platform to stop brokers or controllers there)")


@contextmanager
def opened(args: argparse.Namespace) -> Iterator[Any]:
    """The cluster the arguments name, embedded or real; closed on the way out."""
    real = wants_real(args)
    if real is not None:
        if real.auth_secret and getattr(args, "command_config", None) is None:
            raise UsageError(f"cluster {real.name!r}: spec.authSecretRef {real.auth_secret!r} "
                             "is a Kubernetes Secret the CLI cannot read; pass the same "
                             "credentials with --command-config FILE")
        c: Any = connect(real.bootstrap_servers, getattr(args, "command_config", None),
                         real.name, retry=retry_of(args))
    else:
        store = LocalStore(args.state_dir)
        c = store.open_cluster(store.pick_cluster(args.cluster),
                               read_only=getattr(args, "read_only", False))
    try:
        yield c
    finally:
        c.close()
