"""pytest fixtures for the real Apache Kafka: one cluster per test session, made whole again
after every test that used it.

A test may kill brokers or controllers, change the quorum, or leave moves and throttles
behind when it fails; ``real_kafka`` restores the cluster before the next test (every node
started, the original voters, nothing moving, no replication throttle and no topic of the
test left) instead of starting a new cluster, which costs half a minute of two cores. A test
that fails gets the tail of every node's log in its report, and the session's directory
(pytest's tmp dir, kept for the last runs) holds the whole logs.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from controller_core.admin import CORDONED_LOG_DIRS
from tests.real.kafka import CONTROLLERS, RealKafka, RealKafkaError, install

THROTTLE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate",
                 "leader.replication.throttled.replicas",
                 "follower.replication.throttled.replicas",
                 "replica.alter.log.dirs.io.max.bytes.per.second")
_names = itertools.count()


class Session:
    """The session's cluster plus what the tests of the session need around it."""

    def __init__(self, cluster: RealKafka) -> None:
        self.cluster = cluster
        self.failed: list[str] = []

    def topic(self, stem: str = "t") -> str:
        """A topic name no other test of the session uses."""
        return f"{stem}-{os.getpid()}-{next(_names)}"

    def restore(self) -> None:
        """Every node running, the original voters, nothing moving, no throttle (nor a live
        marker of kraftsman's), no broker cordoned, and no topic but the internal ones."""
        c = self.cluster
        for node in (*c.controllers, *c.brokers):
            if c.pid_file(node).exists() and not c.running(node):
                c.pid_file(node).unlink()  # it exited on its own (a refused registration)
        for node in CONTROLLERS:
            c.start(node)
        # The test's topics go first: a partition left in some states keeps a broker from
        # registering again (Kafka 4.4's controller fault after an unclean revert), and such
        # a broker is restarted once they are gone.
        c.wait_ready(timeout=120, brokers=[])
        with c.admin() as a:
            listing = a.list_partition_reassignments()
            if listing:
                a.alter_partition_reassignments({tp: None for tp in listing})
            topics = [t for t in _topic_names(a) if not t.startswith("__")]
            if topics:
                _delete_topics(a, topics)
            stuck = [b.id for b in a.describe_cluster().brokers
                     if b.fenced and c.running(b.id)]
        for node in stuck:
            c.kill(node)
        for node in c.brokers:
            c.start(node)
        c.wait_ready(timeout=120)
        with c.admin() as a:
            self._restore_voters(a)
            resources = ([("BROKER", str(b)) for b in c.brokers] + [("BROKER", "")]
                         + [("TOPIC", t) for t in _topic_names(a)])
            configs = a.describe_configs(resources)
            changes = {res: {k: None for k in cfg if k in THROTTLE_KEYS or k.startswith(
                "kraftsman") or k == CORDONED_LOG_DIRS} for res, cfg in configs.items()}
            changes = {res: ch for res, ch in changes.items() if ch}
            if changes:
                a.incremental_alter_configs(changes)
            live = a.read_throttle_markers()  # kraftsman's topic stays, as on a real cluster
            if live:
                problems = a.write_throttle_markers(dict.fromkeys(live))
                if problems:
                    raise RealKafkaError(f"throttle markers left: {problems}")
        for node in c.controllers:
            if node not in CONTROLLERS:
                c.kill(node)
        self._forget_stopped_spares()

    def _forget_stopped_spares(self) -> None:
        """A spare controller that a test started and that is stopped now stays in the
        leader's DescribeQuorum as an observer, its offset frozen, until Kafka's observer
        session times out (minutes): the next test would find a node it never started, and
        `quorum alter` waits for it to catch up instead of refusing an unknown node. A new
        leader begins with no observers: the leader is restarted (a controlled shutdown)."""
        c = self.cluster
        spares = {n for n in c.controllers if n not in CONTROLLERS}
        with c.admin() as a:
            q = a.describe_quorum()
        stale = sorted(spares & {r.replica_id for r in q.replicas})
        if not stale:
            return
        c.kill(q.leader_id, signal.SIGTERM)
        c.start(q.leader_id)
        c.wait_ready(timeout=120)
        with c.admin() as a:
            q = a.describe_quorum()
        left = sorted(spares & {r.replica_id for r in q.replicas})
        if left:
            raise RealKafkaError(f"stopped spare controllers {left} still listed by leader "
                                 f"{q.leader_id} after a new election: {q}")

    def _restore_voters(self, a: Any) -> None:
        """Back to voters 100-102 with kraftsman's own walker (one voter at a time, each new
        one caught up first), as a user would; any spare controller is stopped after."""
        from controller_core.orchestration.voters import VoterChangeWalker, WalkPhase
        c = self.cluster
        walker = VoterChangeWalker(a, CONTROLLERS,
                                   {n: [c.controller_endpoint(n)] for n in CONTROLLERS})
        deadline = time.monotonic() + 120
        while walker.step().phase is not WalkPhase.COMPLETED:
            if time.monotonic() > deadline:
                raise RealKafkaError(f"the voters did not return to {list(CONTROLLERS)}: "
                                     f"{a.describe_quorum()}")
            time.sleep(0.5)


def _topic_names(a: Any) -> list[str]:
    return sorted({d.tp.topic for d in a.describe_partitions()})


def _delete_topics(a: Any, topics: list[str]) -> None:
    """DeleteTopics with kafka-python's client, which sends it to a broker it picks — one a
    test killed or just restarted may refuse the connection (CI saw ECONNREFUSED here): a
    new client, another pick, for up to a minute."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaConnectionError, KafkaTimeoutError, NodeNotReadyError
    deadline = time.monotonic() + 60
    while True:
        try:
            client = KafkaAdminClient(bootstrap_servers=a.bootstrap_servers)
            try:
                client.delete_topics(topics, timeout_ms=30_000)
            finally:
                client.close()
            return
        except (KafkaConnectionError, KafkaTimeoutError, NodeNotReadyError):
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)
            # (the refused attempt may have deleted some: ask again only for the others)
            topics = [t for t in _topic_names(a) if t in topics]
            if not topics:
                return


@pytest.fixture(scope="session")
def real_kafka_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """The session's real Kafka, started on first use. A missing install is an error, never
    a skip: ``.ci/run`` installs it, and a run that did not test it must not look green."""
    cluster = RealKafka(tmp_path_factory.mktemp("real-kafka"))
    try:
        install()
        cluster.up()
    except BaseException as e:
        cluster.down()  # the nodes that did start (a busy machine can miss the deadline)
        if isinstance(e, RealKafkaError):
            pytest.fail(f"the real Kafka could not start: {e}", pytrace=False)
        raise
    session = Session(cluster)
    try:
        yield session
    finally:
        cluster.down()


@pytest.fixture
def real_kafka(real_kafka_session: Session, request: pytest.FixtureRequest) -> Iterator[Session]:
    yield real_kafka_session
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        _attach_logs(real_kafka_session.cluster, request)
    try:
        real_kafka_session.restore()
    except Exception as e:  # the next test must not inherit a broken cluster
        pytest.fail(f"the real Kafka could not be restored after {request.node.nodeid}: {e}",
                    pytrace=False)


def _attach_logs(cluster: RealKafka, request: pytest.FixtureRequest) -> None:
    from tests.real.kafka import _tail
    parts = [f"logs: {cluster.dir}/node-*/server.log"]
    for node in (*cluster.controllers, *cluster.brokers):
        with contextlib.suppress(Exception):
            parts.append(f"--- node {node} ---\n{_tail(cluster.log(node), 25)}")
    request.node.add_report_section("teardown", "real kafka logs", "\n".join(parts))


def twin_fixture(observe: Callable[[str, str], dict[str, Any]],
                 **cluster_kw: Any) -> Any:
    """A ``twin`` fixture: ``twin(name)`` runs ``observe(bootstrap, name)`` on an embedded
    cluster served by ``cluster serve``'s code (``tests.helpers.cluster(**cluster_kw)``), so a
    differential test can compare it with the same ``observe`` on the real cluster."""
    from tests.helpers import cluster
    from tests.serve.harness import served

    @pytest.fixture
    def twin(tmp_path: Path) -> Iterator[Callable[[str], dict[str, Any]]]:
        with served(cluster(tmp_path / "twin", **cluster_kw), time_scale=0) as s:
            yield lambda name: observe(s.bootstrap, name)
    return twin
