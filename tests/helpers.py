"""Small builders shared by the tests."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from controller_core.admin import MARKER_TOPIC_CONFIGS, THROTTLE_MARKER_TOPIC, ClusterAdmin
from controller_core.config import EmbeddedClusterSpec
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.model import TopicPartition
from controller_core.orchestration.reassignment import Progress, ReassignmentExecutor


class PassThrough:
    """The embedded cluster behind a test double: a subclass overrides the ClusterAdmin calls
    it fakes, refuses or records; every other call goes to ``self.c``."""

    def __init__(self, c: EmbeddedCluster) -> None:
        self.c = c

    def __getattr__(self, name: str) -> object:
        return getattr(self.c, name)


def spec(brokers: int = 6, racks: str = "abc", topics: list[dict[str, Any]] | None = None,
         **extra: Any) -> EmbeddedClusterSpec:
    doc: dict[str, Any] = {
        "brokers": [{"id": i, "rack": racks[i % len(racks)]} for i in range(brokers)],
        "topics": topics if topics is not None else [
            {"name": "orders", "partitions": 6, "replicationFactor": 3,
             "sizeBytesPerPartition": 10_000_000,
             "assignment": [[0, 1, 2], [1, 2, 0], [2, 0, 1]] * 2}],
        "replicationBytesPerSecond": 1_000_000,
    }
    doc.update(extra)
    return EmbeddedClusterSpec.model_validate(doc)


def cluster(path: Path, **kw: Any) -> EmbeddedCluster:
    return EmbeddedCluster.open(path, spec(**kw), fsync=False)


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def run_until(c: EmbeddedCluster, done: Any, limit: float = 3600.0, step: float = 1.0) -> None:
    """Advance simulated time until ``done()``; fail loudly instead of spinning forever."""
    start = c.now
    while not done():
        assert c.now - start < limit, f"condition not reached within {limit} simulated seconds"
        c.advance(step)


def drive(c: EmbeddedCluster, ex: ReassignmentExecutor, limit: int = 10_000) -> Progress:
    """Step the executor once per simulated second until the run ends."""
    for _ in range(limit):
        p = ex.step()
        if p.phase.terminal:
            return p
        c.advance(1)
    raise AssertionError("the plan did not finish")


def configs_in(admin: ClusterAdmin, brokers: Iterable[int] | None = None,
               topics: Iterable[str] | None = None) -> dict[tuple[str, str], dict[str, Any]]:
    """Every dynamic config of the brokers and topics (default: all), but the marker topic's
    own ``cleanup.policy=compact``: what a throttle left behind shows here."""
    ids = [b.id for b in admin.describe_cluster().brokers] if brokers is None else brokers
    names = (sorted({d.tp.topic for d in admin.describe_partitions()}) if topics is None
             else topics)
    res = [("BROKER", str(b)) for b in ids] + [("TOPIC", t) for t in names]
    out = {}
    for r, cfg in admin.describe_configs(res).items():
        if r == ("TOPIC", THROTTLE_MARKER_TOPIC):
            cfg = {k: v for k, v in cfg.items() if MARKER_TOPIC_CONFIGS.get(k) != v}
        if cfg:
            out[r] = cfg
    return out


def cluster_yaml(*topics: str, metadata_version: str | None = None) -> str:
    """The KafkaCluster ``demo`` the command-line tests create: four embedded brokers (racks
    a, b, c, a) replicating at 1 MB/s, with ``topics`` — each a YAML flow mapping, as a user
    writes one line of ``topics:``."""
    version = [f"    metadataVersion: {metadata_version}"] if metadata_version else []
    return "\n".join([
        "apiVersion: kraftsman.io/v1alpha1", "kind: KafkaCluster", "metadata: {name: demo}",
        "spec:", "  embedded:",
        "    brokers: [{id: 0, rack: a}, {id: 1, rack: b}, {id: 2, rack: c}, {id: 3, rack: a}]",
        *version, "    replicationBytesPerSecond: 1000000", "    topics:",
        *(f"      - {t}" for t in topics)]) + "\n"


class SlowClient(logging.Handler):
    """Holds kafka-python's IO thread for a second after it sends a SaslAuthenticate, as a
    busy machine does: a refusing broker's answer and its close are then read together (both
    cores busy, real Kafka 4.4: 3 of 6 logins ended in "cannot reach bootstrap servers" after
    30 s). Install with :meth:`on`; :meth:`off` restores the loggers."""

    LOGGERS = ("kafka.net.connection", "kafka.net.transport")

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.levels: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == "kafka.net.connection" and "SaslAuthenticateRequest(" in str(
                record.args):
            self.armed = True
        elif self.armed and str(record.msg).endswith("sent %d bytes"):
            self.armed = False
            time.sleep(1.0)

    def on(self) -> SlowClient:
        for name in self.LOGGERS:
            logger = logging.getLogger(name)
            self.levels[name] = logger.level
            logger.addHandler(self)
            logger.setLevel(logging.DEBUG)
        return self

    def off(self) -> None:
        for name, level in self.levels.items():
            logger = logging.getLogger(name)
            logger.removeHandler(self)
            logger.setLevel(level)
