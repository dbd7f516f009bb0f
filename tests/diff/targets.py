"""The two clusters a differential scenario runs on, shaped alike: brokers 0-3 on racks
a, b, c, a, and a three-controller quorum (100-102), as ``tests/real/kafka.py`` starts Kafka."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from controller_core.config import EmbeddedClusterSpec
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.errors import KafkaApiError
from controller_core.model import TopicPartition
from tests.diff.scenario import Topic
from tests.real.fixtures import Session
from tests.real.kafka import BROKERS, CONTROLLERS, RACKS, SPARE_CONTROLLERS

MESSAGE_BYTES = 10_000
SESSION_TIMEOUT_MS = 9_000  # broker.session.timeout.ms of the real cluster
# How long the brokers' view must stay the same at a settle point: a broker holding the
# newest records may learn they are committed only with its next fetch, which the leader
# answers within 500 ms when nothing new comes (KafkaRaftClient's fetch max wait).
STABLE_S = 0.6


def twin_log_dirs(broker: int) -> list[str]:
    """The twin's log directories of a broker, named as the real Kafka's end (``data``,
    ``data-b``): a scenario compares directories by their last path component."""
    return [f"/kraftsman/node-{broker}/data", f"/kraftsman/node-{broker}/data-b"]


class Twin:
    """The embedded cluster: simulated time moves only in ``settle``."""

    name = "twin"

    def log_dirs(self, broker: int) -> list[str]:
        return twin_log_dirs(broker)

    def __init__(self, directory: Path, topics: Sequence[Topic]) -> None:
        spec = EmbeddedClusterSpec.model_validate({
            "brokers": [{"id": b, "rack": RACKS[b], "logDirs": [
                {"path": path} for path in twin_log_dirs(b)]} for b in BROKERS],
            "controllers": list(CONTROLLERS),
            "spareControllers": list(SPARE_CONTROLLERS),
            "brokerSessionTimeoutMs": SESSION_TIMEOUT_MS,
            "replicationBytesPerSecond": 50_000_000,
            "topics": [{"name": t.name, "partitions": len(t.assignment),
                        "replicationFactor": len(t.assignment[0]),
                        "assignment": [list(r) for r in t.assignment],
                        "sizeBytesPerPartition": t.size_bytes,
                        "messageBytes": MESSAGE_BYTES, "configs": dict(t.configs)}
                       for t in topics],
        })
        self.cluster = EmbeddedCluster.open(directory, spec, fsync=False)
        self.admin: Any = self.cluster
        self.refused: list[str] = []

    def kill_broker(self, broker: int) -> None:
        self.cluster.fail_broker(broker)

    def start_broker(self, broker: int) -> None:
        """A refused registration (Kafka 4.4's controller fault) leaves the broker fenced,
        as the real broker process keeps failing to register; the settle point shows it."""
        try:
            self.cluster.restore_broker(broker)
        except KafkaApiError as e:
            self.refused.append(str(e))

    def start_controller(self, node: int) -> None:
        """The twin's spare controllers run from the start (spec.spareControllers)."""

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     assignment: Sequence[Sequence[int]] | None = None) -> Any:
        result = self.cluster.controller.create_topic(
            name, partitions, replication_factor, rng=self.cluster.rng, assignment=assignment)
        self.cluster.checkpoint()
        return result

    def add_voter(self, node: int) -> Any:
        return self.cluster.add_raft_voter(node)

    def settle(self, what: str, done: Callable[[], bool], timeout: float) -> None:
        start = self.cluster.now
        while not done():
            if self.cluster.now - start > timeout:
                raise AssertionError(f"twin: {what}: not reached within {timeout} simulated s")
            self.cluster.advance(0.25)

    def close(self) -> None:
        self.cluster.close()


class Real:
    """The session's real Kafka (tests/real/fixtures.py), the scenario's topics made anew."""

    name = "real"

    def __init__(self, session: Session, topics: Sequence[Topic]) -> None:
        self.session = session
        self.cluster = session.cluster
        self.topics = [t.name for t in topics]
        self._admin_cm = self.cluster.admin()
        self.admin: Any = self._admin_cm
        _create(self.cluster.bootstrap(), topics)
        self.settle("the topics' replicas in sync", lambda: self._in_sync(topics), 60)

    def _in_sync(self, topics: Sequence[Topic]) -> bool:
        parts = self.admin.describe_partitions(topics=[t.name for t in topics])
        want = sum(len(t.assignment) for t in topics)
        return len(parts) == want and all(set(d.isr) == set(d.replicas) for d in parts)

    def log_dirs(self, broker: int) -> list[str]:
        return self.cluster.log_dirs(broker)

    def kill_broker(self, broker: int) -> None:
        self.cluster.kill(broker)

    def start_broker(self, broker: int) -> None:
        self.cluster.start(broker)

    def start_controller(self, node: int) -> None:
        self.cluster.start(node)

    def add_voter(self, node: int) -> Any:
        return self.admin.add_raft_voter(node, [self.cluster.controller_endpoint(node)])

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     assignment: Sequence[Sequence[int]] | None = None) -> Any:
        """CreateTopics to the controller, as kafka-topics --create sends it."""
        from kafka.protocol.admin import CreateTopicsRequest

        from controller_core.errors import ApiResult, ErrorCode
        _T = CreateTopicsRequest.CreatableTopic
        manual = [_T.CreatableReplicaAssignment(partition_index=i, broker_ids=list(r))
                  for i, r in enumerate(assignment or ())]
        request = CreateTopicsRequest(topics=[_T(
            name=name, num_partitions=-1 if manual else partitions,
            replication_factor=-1 if manual else replication_factor, assignments=manual,
            configs=[])], timeout_ms=30_000, validate_only=False)
        t = self.admin._call("CreateTopics",
                             lambda: self.admin._send_to_controller(request)).topics[0]
        self.topics.append(name)
        return ApiResult(ErrorCode.for_code(t.error_code), t.error_message or "")

    def settle(self, what: str, done: Callable[[], bool], timeout: float) -> None:
        """Until ``done()`` holds and the brokers serve the metadata the controller has
        committed, the same for a while (see :meth:`view`): brokers learn metadata a moment
        after the controller commits it — seconds on a busy machine — so a describe right
        after ``done()`` could show an earlier moment (CI saw a finished move's old replicas
        with the controller listing nothing)."""
        deadline = time.monotonic() + timeout
        seen: tuple[float, Any] | None = None  # since when, what
        while True:
            try:
                view = self.view() if done() else None
            except Exception as e:  # a node restarting: ask again
                view, last = None, f"{type(e).__name__}: {e}"
            else:
                last = "condition false" if view is None else "metadata still changing"
            now = time.monotonic()
            if view is None or seen is None or seen[1] != view:
                seen = None if view is None else (now, view)
            elif now - seen[0] >= STABLE_S:
                return
            if now > deadline:
                raise AssertionError(f"real: {what}: not reached within {timeout} s ({last})")
            time.sleep(0.2)

    def view(self) -> Any:
        """What every live broker serves for the scenario's topics, once each has fetched
        all the controller has committed and they agree with each other and with the
        controller's listing of moves; None before."""
        from kafka.protocol.metadata import MetadataRequest
        listing = self.admin.list_partition_reassignments()
        quorum = self.admin.describe_quorum()  # its high watermark covers the listing
        fetched = {r.replica_id: r.log_end_offset for r in quorum.replicas}
        live = [b.id for b in self.admin.describe_cluster().brokers if not b.fenced]
        if any(fetched.get(b, -1) < quorum.high_watermark for b in live):
            return None
        request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t)
                                          for t in self.topics], allow_auto_topic_creation=False)
        views = []
        for broker in live:
            # through the backend's retries: a restarted broker is unknown to the client's
            # metadata until its next refresh, which the retry asks for
            r = self.admin._call("Metadata", lambda b=broker: self.admin._send(request, b))
            views.append(sorted((t.name, p.partition_index, tuple(p.replica_nodes),
                                 tuple(p.isr_nodes), p.leader_id, p.leader_epoch)
                                for t in r.topics for p in t.partitions))
        if any(v != views[0] for v in views):
            return None
        for topic, part, replicas, *_ in views[0] if views else ():
            moving = listing.get(TopicPartition(topic, part))
            if moving is not None and moving.replicas != replicas:
                return None
        return (tuple(live), tuple(views[0]) if views else (),
                tuple(sorted((str(tp), tuple(o.replicas)) for tp, o in listing.items())))

    def close(self) -> None:
        self._admin_cm.close()


def _create(bootstrap: str, topics: Sequence[Topic]) -> None:
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(t.name, -1, -1, replica_assignments={
            i: list(r) for i, r in enumerate(t.assignment)}, topic_configs=dict(t.configs))
            for t in topics], timeout_ms=30_000)
    finally:
        admin.close()
    if not any(t.size_bytes for t in topics):
        return
    # Small batches: a follower fetch takes at least one whole batch, so big ones would let
    # a move through a throttle in bursts (the real cluster fetches 64 KiB at a time).
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                             batch_size=32 * 1024)
    try:
        value = os.urandom(MESSAGE_BYTES)
        for t in topics:
            for p in range(len(t.assignment)):
                for _ in range(t.size_bytes // MESSAGE_BYTES):
                    producer.send(t.name, value, partition=p)
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=10)


@contextmanager
def targets(tmp: Path, session: Session, topics: Sequence[Topic]) -> Iterator[tuple[Twin, Real]]:
    twin = Twin(tmp / "twin", topics)
    real = Real(session, topics)
    try:
        yield twin, real
    finally:
        twin.close()
        real.close()
