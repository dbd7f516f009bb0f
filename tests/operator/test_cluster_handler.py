"""The KafkaCluster handlers' rules, called in-process (handler_driver.py): an embedded
cluster opens and reports its figures, a ``bootstrapServers`` cluster connects over the Kafka
protocol (``cluster serve`` in a thread) or is Degraded with the reason, and a cluster still
in use is not torn down. test_operator_kmock.py and test_operator_kafka_backend.py run the
same handlers under kopf."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kopf
import pytest
from handler_driver import CLUSTER, REF, Driver

from controller_core.backends import RetryPolicy
from controller_core.wire.auth import AuthFile, Authorizer
from kraftsman import local_store
from kraftsman.handlers import cluster as cluster_handlers
from kraftsman.handlers import runtime
from kraftsman.handlers.secrets import SecretUnavailable
from tests.helpers import cluster as embedded
from tests.serve.harness import ServedCluster, served


def conds(obj: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"])
            for c in obj["status"]["conditions"]}


READY_MSG = "6 brokers, 1 topic, 6 partitions, 0 under-replicated"  # not "1 topics"


async def test_an_embedded_cluster_opens_and_reports_its_figures(tmp_path: Path) -> None:
    d = Driver(tmp_path)
    kc = await d.ready_cluster()
    st = kc["status"]
    assert (st["backend"], st["brokers"], st["fencedBrokers"], st["topics"],
            st["partitions"], st["underReplicatedPartitions"], st["offlinePartitions"]) == (
        "embedded", 6, 0, 1, 6, 0, 0)
    assert st["quorumLeaderId"] in (0, 1, 2) and st["clusterId"]
    assert conds(kc) == {"Ready": ("True", "ClusterReady", READY_MSG),
                         "Progressing": ("False", "Idle", ""),
                         "Degraded": ("False", "AsExpected", "")}
    assert d.events == [("Normal", "ClusterReady", f"embedded cluster is running: {READY_MSG}")]
    assert (tmp_path / "clusters" / "default").is_dir()
    await d.call(kc, "reconcile")
    assert len(d.events) == 1  # announced once
    assert await d.index("kafkaclusters") == {("default", "demo"): ["embedded"]}


async def test_a_second_operator_on_the_same_state_volume_does_not_open_the_cluster_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two replicas on one ReadWriteMany claim: kopf's peering is eventually consistent, so
    both can act for a moment when they start together. The embedded cluster's directory is
    held (flock) while a replica has it open: the other reports StateDirectoryBusy, naming
    the holder, and opens it once the first lets go — never two writers on one log."""
    first, second = Driver(tmp_path), Driver(tmp_path)
    await first.ready_cluster()
    kc = second.create("KafkaCluster", "demo", dict(first.objects[("KafkaCluster", "demo")]
                                                     ["spec"]))

    def no_waiting(seconds: float) -> None:
        raise AssertionError("the handler waited for the other process's hold")

    monkeypatch.setattr(local_store.time, "sleep", no_waiting)  # asks once, never blocks
    await second.call(kc, "reconcile")
    status, reason, message = conds(kc)["Ready"]
    assert (kc["status"]["phase"], status, reason) == ("Unavailable", "False",
                                                       "StateDirectoryBusy")
    directory = runtime.embedded_cluster_dir(tmp_path, ("default", "demo"),
                                             "uid-KafkaCluster-demo")
    assert message == (
        f"another kraftsman (pid {os.getpid()}) is using {directory}: `operator: KafkaCluster "
        "default/demo`; not opened here, so that it has one writer: retrying until that "
        "process lets go of it"), message  # the CLI's advice (KRAFTSMAN_LOCK_WAIT) left out
    assert ("default", "demo") not in second.rt.clusters
    first.rt.close_all()  # the first replica stops (or its KafkaCluster goes)
    await second.call(kc, "reconcile")
    assert conds(kc)["Ready"] == ("True", "ClusterReady", READY_MSG)
    second.rt.close_all()


async def test_a_changed_spec_reopens_the_cluster_under_the_same_hold(tmp_path: Path) -> None:
    """Re-opening (a spec change) lets go of the directory before taking it again: the
    operator never locks itself out."""
    d = Driver(tmp_path)
    kc = await d.ready_cluster()
    opened = d.rt.clusters[("default", "demo")]
    kc["spec"] = {**kc["spec"], "embedded": {**kc["spec"]["embedded"],
                                             "replicationBytesPerSecond": 123_000_000}}
    kc["metadata"]["generation"] = 2
    await d.call(kc, "reconcile")
    assert conds(kc)["Ready"][1] == "ClusterReady", conds(kc)
    assert d.rt.clusters[("default", "demo")] is not opened
    d.rt.close_all()


async def test_a_cluster_that_fails_to_open_lets_go_of_its_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster that cannot be opened as it is (the embedded cluster refuses: Invalid)
    leaves no hold on its directory behind: the next pass opens it."""
    d = Driver(tmp_path)
    real_open = runtime.EmbeddedCluster.open
    calls = []

    def refuse_once(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0])
        if len(calls) == 1:
            raise ValueError("topics[orders]: refused")  # as _create_topic raises
        return real_open(*args, **kwargs)

    monkeypatch.setattr(runtime.EmbeddedCluster, "open", refuse_once)
    kc = d.create("KafkaCluster", "demo", CLUSTER)
    await d.call(kc, "reconcile")
    assert conds(kc)["Ready"] == ("False", "InvalidSpec", "spec.embedded: topics[orders]: "
                                  "refused")
    await d.call(kc, "reconcile")
    assert conds(kc)["Ready"] == ("True", "ClusterReady", READY_MSG)
    assert len(calls) == 2
    d.rt.close_all()


async def test_a_fenced_broker_shows_in_the_figures(tmp_path: Path) -> None:
    d = Driver(tmp_path)
    kc = await d.ready_cluster()
    d.rt.clusters[("default", "demo")].cluster.fail_broker(0)
    d.now += 30  # the operator runs the embedded cluster's clock: broker 0 gets fenced
    await d.call(kc, "reconcile")
    st = kc["status"]
    assert (st["fencedBrokers"], st["underReplicatedPartitions"]) == (1, 6)
    assert conds(kc)["Ready"] == ("True", "ClusterReady",
                                  "6 brokers, 1 topic, 6 partitions, 6 under-replicated")


async def test_partitions_without_a_live_replica_are_offline(tmp_path: Path) -> None:
    d = Driver(tmp_path)
    kc = await d.ready_cluster()
    for broker in (0, 1, 2):  # every partition's replicas
        d.rt.clusters[("default", "demo")].cluster.fail_broker(broker)
    d.now += 30
    await d.call(kc, "reconcile")
    st = kc["status"]
    assert (st["fencedBrokers"], st["offlinePartitions"], st["partitions"]) == (3, 6, 6)


async def test_an_invalid_spec_names_the_field(tmp_path: Path) -> None:
    d = Driver(tmp_path)
    kc = d.create("KafkaCluster", "demo", {"embedded": {"brokers": []}})
    await d.call(kc, "reconcile")
    assert kc["status"]["phase"] == "Invalid"
    ready, degraded = conds(kc)["Ready"], conds(kc)["Degraded"]
    assert ready[:2] == ("False", "InvalidSpec") and degraded[:2] == ("True", "InvalidSpec")
    assert ready[2] == degraded[2] and ready[2].startswith("spec.embedded.brokers")
    assert d.rt.clusters == {}


async def test_a_cluster_without_a_controller_is_unavailable(tmp_path: Path) -> None:
    d = Driver(tmp_path)
    kc = await d.ready_cluster()
    c = d.rt.clusters[("default", "demo")].cluster
    for node in (0, 1, 2):
        c.fail_controller(node)
    d.now += 5
    await d.call(kc, "reconcile")
    assert kc["status"]["phase"] == "Unavailable"
    assert conds(kc)["Ready"][:2] == ("False", "ControllerUnavailable")


async def test_a_cluster_in_use_is_not_torn_down(tmp_path: Path) -> None:
    d = Driver(tmp_path)
    kc = await d.ready_cluster()
    opened = d.rt.clusters[("default", "demo")]
    for i in range(6):
        d.create("PartitionReassignment", f"m{i}", {**REF, "partitions": [
            {"topic": "orders", "partition": 0, "replicas": [3, 4, 5]}]})
    with pytest.raises(kopf.TemporaryError) as held:
        await d.call(kc, "teardown")
    assert d.rt.clusters[("default", "demo")] is opened  # kept in service, not re-opened
    msg = ("still used by PartitionReassignment/m0, PartitionReassignment/m1, "
           "PartitionReassignment/m2, PartitionReassignment/m3, PartitionReassignment/m4 "
           "and more; delete or finish those first")
    assert str(held.value) == msg and held.value.delay == 1.0
    assert conds(kc)["Ready"] == ("False", "InUse", msg)
    assert conds(kc)["Degraded"] == ("True", "DeletionBlocked", msg)
    assert kc["status"]["referencedBy"] == [f"PartitionReassignment/m{i}" for i in range(6)]
    assert ("default", "demo") in d.rt.clusters
    for i in range(1, 6):
        d.delete(d.objects[("PartitionReassignment", f"m{i}")])
    d.create("LeaderElection", "el", {**REF, "allTopicPartitions": True})
    d.create("KafkaQuorum", "q", {**REF, "voters": [0, 1, 2]})
    with pytest.raises(kopf.TemporaryError) as held:
        await d.call(kc, "teardown")
    assert str(held.value) == ("still used by KafkaQuorum/q, LeaderElection/el, "
                               "PartitionReassignment/m0; delete or finish those first")


async def test_invalid_operations_do_not_hold_a_cluster_being_deleted(
        tmp_path: Path) -> None:
    """docs/operator.md: invalid operations do not hold a KafkaCluster. A quorum whose spec
    the model refuses (voters: []) and a continuous election with an unknown field, before any
    pass; a quorum found invalid on the cluster and a continuous election listing a partition
    twice, after one: the deletion goes at once."""
    d = Driver(tmp_path)
    kc = await d.ready_cluster()
    d.create("KafkaQuorum", "empty", {**REF, "voters": []})
    d.create("LeaderElection", "typo", {**REF, "mode": "Continuous", "topic": ["orders"]})
    unknown = d.create("KafkaQuorum", "unknown", {**REF, "voters": [0, 1, 42]})
    await d.call(unknown, "reconcile")
    assert unknown["status"]["phase"] == "Invalid"
    twice = [{"topic": "orders", "partition": 0}] * 2  # the CRD's atomic list admits it
    le = d.create("LeaderElection", "twice", {**REF, "mode": "Continuous", "partitions": twice})
    await d.call(le, "reconcile")
    assert le["status"]["phase"] == "Invalid"
    assert await d.index("kq_users") == {} and await d.index("le_users") == {}
    await d.call(kc, "teardown")
    assert ("Normal", "ClusterDeleted", "embedded cluster stopped and its state removed") in \
        d.events


async def test_a_cluster_whose_deletion_waits_is_kept_open_with_its_clock_running(
        tmp_path: Path) -> None:
    """kopf runs no timer for a KafkaCluster being deleted, so each refused teardown keeps
    the cluster in service for the operations it waits for: it opens it (an operator
    restarted meanwhile had not) and runs its clock, that they can finish or roll back."""
    d = Driver(tmp_path)
    kc = await d.ready_cluster()
    d.create("PartitionReassignment", "m", {**REF, "partitions": [
        {"topic": "orders", "partition": 0, "replicas": [3, 4, 5]}]})
    d.rt.close_all()
    restarted = Driver(tmp_path)  # a new operator process on the same state volume
    restarted.objects = d.objects
    with pytest.raises(kopf.TemporaryError):
        await restarted.call(kc, "teardown")
    opened = restarted.rt.clusters[("default", "demo")]
    before = opened.cluster.now_ms()
    restarted.now += 7.0
    with pytest.raises(kopf.TemporaryError):
        await restarted.call(kc, "teardown")
    assert restarted.rt.clusters[("default", "demo")] is opened  # the same, not re-opened
    assert opened.cluster.now_ms() - before == 7000
    assert "not usable" not in conds(kc)["Ready"][2]

async def test_an_unused_embedded_cluster_is_stopped_and_its_state_removed(
        tmp_path: Path) -> None:
    d = Driver(tmp_path)
    kc = await d.ready_cluster()
    state = d.rt.cluster_dir(("default", "demo"), kc["metadata"]["uid"])
    assert state.is_dir()
    await d.call(kc, "teardown")
    assert d.rt.clusters == {} and not state.exists()
    assert d.events[-1] == ("Normal", "ClusterDeleted",
                            "embedded cluster stopped and its state removed")


async def test_a_stopping_operator_saves_its_embedded_clusters_where_they_stood(
        tmp_path: Path) -> None:
    d = Driver(tmp_path)  # checkpoints every hour: only closing saves the clock here
    kc = await d.ready_cluster()
    cluster = d.rt.clusters[("default", "demo")].cluster
    d.now += 100
    await d.call(kc, "reconcile")  # the cluster runs 100 s
    stood = cluster.now
    await d.stop()
    assert d.rt.clusters == {}
    again = Driver(tmp_path)  # the next operator process, on the same state volume
    await again.ready_cluster()
    assert again.rt.clusters[("default", "demo")].cluster.now == stood


async def test_work_queued_on_a_cluster_being_closed_never_waits_forever(
        tmp_path: Path) -> None:
    """A pass that picked up the cluster before its KafkaCluster was deleted still gets its
    turn (and finds the cluster closed) instead of waiting for the cluster's lock forever:
    closing leaves the lock free. (Asked with a bounded wait: a worker thread blocked on the
    lock could not be cancelled.)"""
    d = Driver(tmp_path)
    await d.ready_cluster()
    opened = d.rt.clusters[("default", "demo")]
    d.rt.close_cluster(("default", "demo"))
    assert await asyncio.to_thread(opened.lock.acquire, timeout=5)
    opened.lock.release()


async def test_a_cluster_is_closed_under_its_lock(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """No pass works on the cluster while it closes (passes run under the same lock)."""
    d = Driver(tmp_path)
    await d.ready_cluster()
    opened = d.rt.clusters[("default", "demo")]
    close = opened.cluster.close
    locked_while_closing: list[bool] = []

    def recording_close() -> None:
        locked_while_closing.append(opened.lock.locked())
        close()

    monkeypatch.setattr(opened.cluster, "close", recording_close)
    d.rt.close_cluster(("default", "demo"))
    assert locked_while_closing == [True]


async def test_closing_gives_up_waiting_for_a_hung_pass(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass that never ends does not stop the cluster's deletion (or the operator's
    shutdown) for good: closing waits CLOSE_WAIT_SECONDS for it, then closes anyway."""
    monkeypatch.setattr(runtime, "CLOSE_WAIT_SECONDS", 0.05)
    d = Driver(tmp_path)
    await d.ready_cluster()
    opened = d.rt.clusters[("default", "demo")]
    order: list[str] = []
    close = opened.cluster.close
    monkeypatch.setattr(opened.cluster, "close", lambda: (order.append("closed"), close()))
    holding, let_go = threading.Event(), threading.Event()

    def hung(_: Any) -> None:
        holding.set()
        let_go.wait(5)  # bounded: were closing to wait for it, the test still ends
        order.append("pass ended")

    stuck = asyncio.create_task(d.rt.run(opened, hung))
    assert await asyncio.to_thread(holding.wait, 5)
    await asyncio.to_thread(d.rt.close_cluster, ("default", "demo"))
    let_go.set()
    await stuck
    assert order == ["closed", "pass ended"]


async def test_deleting_a_cluster_that_never_opened_is_released_at_once(
        tmp_path: Path) -> None:
    d = Driver(tmp_path)
    kc = d.create("KafkaCluster", "demo", {"embedded": {"brokers": []}})
    await d.call(kc, "reconcile")
    assert kc["status"]["phase"] == "Invalid"
    await d.call(kc, "teardown")  # nothing open, no state on the volume: nothing to wait for
    assert d.events[-1] == ("Normal", "ClusterDeleted",
                            "embedded cluster stopped and its state removed")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServedCluster]:
    with served(embedded(tmp_path / "served"), time_scale=50) as s:
        yield s


def kafka_driver(tmp_path: Path, budget: float = 10.0) -> Driver:
    """``budget``: seconds a Kafka call may take with its retries. A test that waits for a
    cluster to be out of reach keeps it short; every other needs room for a busy machine
    (at 1 s, an authorization refusal by a served cluster timed out under a load of 20)."""
    d = Driver(tmp_path / "op")
    d.rt.kafka_retry = RetryPolicy(total_seconds=budget,
                                   request_timeout_ms=int(min(budget, 5.0) * 1000))
    d.rt.settings = d.settings  # as the operator's startup handler sets them (Secrets need them)
    return d


async def test_a_bootstrap_servers_cluster_connects_and_reports(tmp_path: Path,
                                                                server: ServedCluster) -> None:
    d = kafka_driver(tmp_path)
    kc = d.create("KafkaCluster", "real", {"bootstrapServers": server.bootstrap})
    await d.call(kc, "reconcile")
    st = kc["status"]
    assert (st["phase"], st["backend"], st["brokers"], st["partitions"]) == (
        "Ready", "kafka", 6, 6)
    msg = f"{READY_MSG} (via {server.bootstrap})"
    assert conds(kc) == {"Ready": ("True", "ClusterReady", msg),
                         "Progressing": ("False", "Idle", ""),
                         "Degraded": ("False", "AsExpected", "")}
    assert d.events == [("Normal", "ClusterReady", f"connected to {server.bootstrap}: {msg}")]
    opened = d.rt.clusters[("default", "real")]
    assert not opened.embedded
    assert kc["status"]["observedGeneration"] == 1
    await d.call(kc, "reconcile")  # connected: kept, not announced again
    assert d.rt.clusters[("default", "real")] is opened and len(d.events) == 1
    assert d.status_patch == {}  # nothing changed: nothing written
    d.now += 31  # the Secret (none here) is looked at again: same digest, same connection
    await d.call(kc, "reconcile")
    assert d.rt.clusters[("default", "real")] is opened
    assert opened.opened_at == d.now
    assert await d.index("kafkaclusters") == {("default", "real"): ["kafka"]}
    await d.call(kc, "teardown")
    assert d.rt.clusters == {}
    assert d.events[-1] == ("Normal", "ClusterDeleted", "connection to the cluster closed")


async def test_a_cluster_pass_counts_the_partitions_and_describes_none(
        tmp_path: Path, server: ServedCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """The figures of a KafkaCluster are counted: a pass that described every partition of
    a 100,000-partition cluster, with its log size, made the operator's resident size jump
    by ~100 MiB each time (docs/operator.md). Either backend."""
    from controller_core.backends.kafka_admin import KafkaAdmin
    from controller_core.embedded.cluster import EmbeddedCluster

    def described(*_: Any, **__: Any) -> Any:
        raise AssertionError("a KafkaCluster pass described the partitions")

    for backend in (KafkaAdmin, EmbeddedCluster):
        monkeypatch.setattr(backend, "describe_partitions", described)
    d = kafka_driver(tmp_path)
    kc = d.create("KafkaCluster", "real", {"bootstrapServers": server.bootstrap})
    await d.call(kc, "reconcile")
    assert (kc["status"]["phase"], kc["status"]["partitions"],
            kc["status"]["underReplicatedPartitions"]) == ("Ready", 6, 0)
    embedded_kc = await Driver(tmp_path / "embedded").ready_cluster()
    assert (embedded_kc["status"]["partitions"], embedded_kc["status"]["topics"]) == (6, 1)


async def test_a_bootstrap_servers_cluster_whose_deletion_waits_is_connected_meanwhile(
        tmp_path: Path, server: ServedCluster) -> None:
    """As for an embedded cluster: an operator restarted while the deletion waits for an
    operation connects the real cluster again, that the operation can finish or roll back."""
    d = kafka_driver(tmp_path)
    kc = d.create("KafkaCluster", "real", {"bootstrapServers": server.bootstrap})
    await d.call(kc, "reconcile")
    d.create("PartitionReassignment", "m", {"clusterRef": {"name": "real"}, "partitions": [
        {"topic": "orders", "partition": 0, "replicas": [3, 4, 5]}]})
    d.rt.close_all()
    restarted = kafka_driver(tmp_path)  # a new operator process: nothing connected
    restarted.objects = d.objects
    with pytest.raises(kopf.TemporaryError):
        await restarted.call(kc, "teardown")
    opened = restarted.rt.clusters[("default", "real")]
    assert not opened.embedded and opened.cluster.describe_cluster().brokers
    assert conds(kc)["Ready"][:2] == ("False", "InUse")
    assert "not usable" not in conds(kc)["Ready"][2]


async def test_an_unreachable_cluster_is_degraded_and_retried_with_backoff(
        tmp_path: Path) -> None:
    d = kafka_driver(tmp_path, budget=1.0)
    kc = d.create("KafkaCluster", "real", {"bootstrapServers": "127.0.0.1:1"})
    await d.call(kc, "reconcile")
    st = kc["status"]
    assert (st["phase"], st["backend"]) == ("Degraded", "kafka")
    ready = conds(kc)["Ready"]
    assert ready[:2] == ("False", "BootstrapUnreachable") and "127.0.0.1:1" in ready[2]
    assert conds(kc)["Degraded"] == ("True", "BootstrapUnreachable", ready[2])
    assert conds(kc)["Progressing"] == ("True", "Retrying", "retrying in 1s")
    assert d.events == [("Warning", "BootstrapUnreachable", ready[2])]
    assert st["observedGeneration"] == 1
    before = dict(kc["status"])
    await d.call(kc, "reconcile")  # within the backoff: nothing is tried
    assert kc["status"] == before
    d.now += 1
    await d.call(kc, "reconcile")
    assert conds(kc)["Progressing"] == ("True", "Retrying", "retrying in 2s")
    assert len(d.events) == 1  # the same reason is not announced again
    assert d.rt.clusters == {}


async def test_a_non_numeric_port_is_an_invalid_spec_naming_the_field(
        tmp_path: Path) -> None:
    """Stored before the CRD had its pattern (or by a server that skips it): the timer said
    nothing in the status and raised from kafka-python's address parsing every 60 s."""
    d = kafka_driver(tmp_path)
    kc = d.create("KafkaCluster", "real", {"bootstrapServers": "kafka-0:9092,kafka-1:90x2"})
    await d.call(kc, "reconcile")
    st = kc["status"]
    assert st["phase"] == "Invalid"
    ready = conds(kc)["Ready"]
    assert ready[:2] == ("False", "InvalidSpec")
    assert ready[2].startswith("spec.bootstrapServers: 'kafka-1:90x2' is not HOST:PORT with a "
                               "numeric port"), ready
    assert "e.g. kafka-0:9092" in ready[2]
    assert conds(kc)["Degraded"][:2] == ("True", "InvalidSpec")
    assert d.rt.clusters == {}


async def test_voters_of_a_bootstrap_servers_cluster_are_checked_against_its_nodes(
        tmp_path: Path, server: ServedCluster) -> None:
    """On a real cluster the nodes that may be voters are its brokers and the quorum's
    replicas from DescribeQuorum (KIP-853: an unknown id cannot be added)."""
    d = kafka_driver(tmp_path)
    kc = d.create("KafkaCluster", "demo", {"bootstrapServers": server.bootstrap})
    await d.call(kc, "reconcile")
    kq = d.create("KafkaQuorum", "q", {**REF, "voters": [0, 1, 42]})
    await d.call(kq, "reconcile")
    assert kq["status"]["phase"] == "Invalid"
    assert conds(kq)["Ready"] == (
        "False", "UnknownNode", "spec.voters: unknown node id(s) [42]; nodes are [0, 1, 2, 3, "
        "4, 5] (a new controller must be running and fetching the metadata log first); set "
        "spec.voters to live node ids (current voters: [0, 1, 2])")
    d.set_spec(kq, {"voters": [0, 1]})
    await d.call(kq, "reconcile")
    st = kq["status"]
    assert (st["phase"], st["nextStep"], st["currentVoters"]) == (
        "Changing", "removing voter 2", [0, 1])


async def test_a_real_cluster_without_a_controller_is_unavailable(
        tmp_path: Path, server: ServedCluster) -> None:
    d = kafka_driver(tmp_path, budget=1.0)
    kc = d.create("KafkaCluster", "real", {"bootstrapServers": server.bootstrap})
    await d.call(kc, "reconcile")
    for node in (0, 1, 2):
        server.call(lambda node=node: server.cluster.fail_controller(node))
    d.now += 5
    await d.call(kc, "reconcile")
    assert kc["status"]["phase"] == "Degraded"
    reason, message = conds(kc)["Degraded"][1:]
    assert reason == "ClusterUnavailable" and message.startswith("NOT_CONTROLLER: ")
    assert d.events[-1] == ("Warning", "ClusterUnavailable", message)
    await d.call(kc, "teardown")


async def test_changed_bootstrap_servers_connect_anew_and_close_the_old_connection(
        tmp_path: Path, server: ServedCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    d = kafka_driver(tmp_path)
    kc = d.create("KafkaCluster", "real", {"bootstrapServers": server.bootstrap})
    await d.call(kc, "reconcile")
    old = d.rt.clusters[("default", "real")]
    assert old.opened_at == d.now  # the Secret is looked at again 30 s from here
    closed: list[bool] = []
    close = old.cluster.close
    monkeypatch.setattr(old.cluster, "close", lambda: (closed.append(True), close()))
    with served(embedded(tmp_path / "other"), time_scale=50) as other:
        d.set_spec(kc, {"bootstrapServers": other.bootstrap})
        await d.call(kc, "reconcile")
        assert closed == [True] and d.rt.clusters[("default", "real")] is not old
        other_id = other.call(lambda: other.cluster.describe_cluster().cluster_id)
        assert kc["status"]["clusterId"] == other_id
        assert conds(kc)["Ready"][2].endswith(f"(via {other.bootstrap})")
        await d.call(kc, "teardown")


def test_a_real_cluster_is_reached_with_the_credentials_of_its_secret(tmp_path: Path) -> None:
    auth = Authorizer.from_file(AuthFile.model_validate({
        "users": [{"name": "admin", "password": "pw-1"}],
        "acls": [{"principal": "User:admin", "operations": ["ALTER"]}]}))
    with served(embedded(tmp_path / "c"), auth, time_scale=50) as s:
        rt = kafka_driver(tmp_path).rt
        secret = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                  "sasl.username": "admin", "sasl.password": "pw-1"}
        opened = rt.open_kafka(("default", "sasl"), "u", s.bootstrap, secret, "d")
        served_id = s.call(lambda: s.cluster.describe_cluster().cluster_id)
        assert opened.cluster.describe_cluster().cluster_id == served_id
        rt.close_all()


async def test_an_unchanged_cluster_writes_no_status(tmp_path: Path) -> None:
    d = Driver(tmp_path)
    kc = await d.ready_cluster()
    d.now += 1
    await d.call(kc, "reconcile")  # the cluster ran 1 s; its figures are the same
    assert d.status_patch == {}


class Secrets:
    """The Secrets of the test's API server, read as the operator reads them (read_secret is
    replaced: the driver has no API server); counts the reads."""

    def __init__(self) -> None:
        self.data: dict[str, dict[str, str]] = {}
        self.reads = 0

    async def read(self, namespace: str, name: str, settings: Any, logger: Any
                   ) -> dict[str, str]:
        # what the real read_secret needs: kopf's settings (its API session) and a logger
        assert isinstance(settings, kopf.OperatorSettings) and isinstance(
            logger, logging.Logger | logging.LoggerAdapter), (settings, logger)
        self.reads += 1
        if name not in self.data:
            raise SecretUnavailable("SecretNotFound", f"spec.authSecretRef.name: Secret "
                                    f"{name!r} in namespace {namespace} does not exist; "
                                    "create it or fix the name")
        return dict(self.data[name])


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> Secrets:
    store = Secrets()
    monkeypatch.setattr(cluster_handlers, "read_secret", store.read)
    return store


def secret_cluster(tmp_path: Path, server: ServedCluster, budget: float = 10.0
                   ) -> tuple[Driver, dict[str, Any]]:
    """A driver and KafkaCluster "real" on ``server`` with the credentials of Secret "creds"."""
    d = kafka_driver(tmp_path, budget)
    return d, d.create("KafkaCluster", "real", {"bootstrapServers": server.bootstrap,
                                               "authSecretRef": {"name": "creds"}})


async def test_a_missing_then_a_malformed_secret_are_named_with_the_fix(
        tmp_path: Path, server: ServedCluster, secrets: Secrets) -> None:
    d, kc = secret_cluster(tmp_path, server)
    await d.call(kc, "reconcile")
    assert conds(kc)["Degraded"] == (
        "True", "SecretNotFound", "spec.authSecretRef.name: Secret 'creds' in namespace "
        "default does not exist; create it or fix the name")
    secrets.data["creds"] = {"sasl.passwrd": "pw"}
    d.now += 1
    await d.call(kc, "reconcile")
    status, reason, message = conds(kc)["Degraded"]
    assert (status, reason) == ("True", "InvalidSecret")
    assert message.startswith("spec.authSecretRef.name: Secret 'creds': ")
    assert "sasl.passwrd" in message and message.endswith(
        "; fix the Secret (keys: docs/real-clusters.md)")
    assert [e[1] for e in d.events] == ["SecretNotFound", "InvalidSecret"]


async def test_a_connected_cluster_reads_its_secret_again_every_30_seconds(
        tmp_path: Path, server: ServedCluster, secrets: Secrets) -> None:
    secrets.data["creds"] = {"security.protocol": "PLAINTEXT"}
    d, kc = secret_cluster(tmp_path, server)
    await d.call(kc, "reconcile")
    opened = d.rt.clusters[("default", "real")]
    assert kc["status"]["phase"] == "Ready" and secrets.reads == 1
    d.now += 29
    await d.call(kc, "reconcile")
    assert secrets.reads == 1
    d.now += 1
    await d.call(kc, "reconcile")  # 30 s: read again; unchanged, so the connection stays
    assert secrets.reads == 2 and d.rt.clusters[("default", "real")] is opened
    await d.call(kc, "teardown")


async def test_a_changed_secret_connects_anew_when_it_is_read_again(
        tmp_path: Path, server: ServedCluster, secrets: Secrets) -> None:
    """The connection's digest covers the Secret's data: new credentials are used from the
    next read of the Secret (30 s), not from the next operator restart."""
    secrets.data["creds"] = {"security.protocol": "PLAINTEXT"}
    d, kc = secret_cluster(tmp_path, server)
    await d.call(kc, "reconcile")
    opened = d.rt.clusters[("default", "real")]
    secrets.data["creds"] = {}  # PLAINTEXT by default: other data, same reach
    d.now += 30
    await d.call(kc, "reconcile")
    assert secrets.reads == 2 and d.rt.clusters[("default", "real")] is not opened
    assert kc["status"]["phase"] == "Ready"
    await d.call(kc, "teardown")


async def test_the_backoff_starts_again_after_a_success(
        tmp_path: Path, server: ServedCluster, secrets: Secrets) -> None:
    """Failures before a success do not lengthen the wait after a later failure."""
    d, kc = secret_cluster(tmp_path, server, budget=1.0)
    await d.call(kc, "reconcile")
    d.now += 1
    await d.call(kc, "reconcile")
    assert conds(kc)["Progressing"] == ("True", "Retrying", "retrying in 2s")
    secrets.data["creds"] = {"security.protocol": "PLAINTEXT"}
    d.now += 2
    await d.call(kc, "reconcile")
    assert kc["status"]["phase"] == "Ready"
    for node in (0, 1, 2):
        server.call(lambda node=node: server.cluster.fail_controller(node))
    d.now += 30
    await d.call(kc, "reconcile")
    assert kc["status"]["phase"] == "Degraded"
    assert conds(kc)["Progressing"] == ("True", "Retrying", "retrying in 1s")
    await d.call(kc, "teardown")


async def test_a_restarted_operator_does_not_announce_a_ready_cluster_again(
        tmp_path: Path, server: ServedCluster) -> None:
    """ClusterReady is an Event for the first connection whose status changed; a restart
    that finds the status as it was connects quietly."""
    d = kafka_driver(tmp_path)
    kc = d.create("KafkaCluster", "real", {"bootstrapServers": server.bootstrap})
    await d.call(kc, "reconcile")
    assert [e[1] for e in d.events] == ["ClusterReady"]
    d.rt.close_all()
    restarted = kafka_driver(tmp_path)
    restarted.objects = d.objects
    await restarted.call(kc, "reconcile")
    assert ("default", "real") in restarted.rt.clusters
    assert restarted.events == []
    await restarted.call(kc, "teardown")


async def test_credentials_the_cluster_refuses_to_describe_with_are_dropped(
        tmp_path: Path, secrets: Secrets) -> None:
    """CLUSTER_AUTHORIZATION_FAILED: the connection is closed, so the next try reads the
    Secret and connects again (fixed ACLs or credentials are picked up)."""
    auth = Authorizer.from_file(AuthFile.model_validate({
        "users": [{"name": "maker", "password": "pw"}],
        "acls": [{"principal": "User:maker", "operations": ["CREATE"]}]}))
    secrets.data["creds"] = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                             "sasl.username": "maker", "sasl.password": "pw"}
    with served(embedded(tmp_path / "c"), auth, time_scale=50) as s:
        d, kc = secret_cluster(tmp_path, s)
        await d.call(kc, "reconcile")
        assert kc["status"]["phase"] == "Degraded"
        assert "DESCRIBE on CLUSTER" in conds(kc)["Degraded"][2], conds(kc)
        assert ("default", "real") not in d.rt.clusters
        d.rt.close_all()


async def test_a_real_cluster_whose_deletion_waits_keeps_its_connection(
        tmp_path: Path, server: ServedCluster, secrets: Secrets) -> None:
    """A refused teardown keeps the cluster in service on the connection the reconcile
    opened (same object, its Secret read again after 30 s), not a new one per retry."""
    secrets.data["creds"] = {"security.protocol": "PLAINTEXT"}
    d, kc = secret_cluster(tmp_path, server)
    await d.call(kc, "reconcile")
    opened = d.rt.clusters[("default", "real")]
    d.create("PartitionReassignment", "m", {"clusterRef": {"name": "real"}, "partitions": [
        {"topic": "orders", "partition": 0, "replicas": [3, 4, 5]}]})
    with pytest.raises(kopf.TemporaryError):
        await d.call(kc, "teardown")
    d.now += 31
    with pytest.raises(kopf.TemporaryError):
        await d.call(kc, "teardown")
    assert secrets.reads == 2 and d.rt.clusters[("default", "real")] is opened
    assert "not usable" not in conds(kc)["Ready"][2]
    d.rt.close_all()


async def test_a_refused_deletion_says_why_an_unreachable_cluster_is_not_usable(
        tmp_path: Path) -> None:
    d = kafka_driver(tmp_path, budget=1.0)
    kc = d.create("KafkaCluster", "gone", {"bootstrapServers": "127.0.0.1:1"})
    d.create("PartitionReassignment", "m", {"clusterRef": {"name": "gone"}, "partitions": [
        {"topic": "orders", "partition": 0, "replicas": [3, 4, 5]}]})
    with pytest.raises(kopf.TemporaryError):
        await d.call(kc, "teardown")
    message = conds(kc)["Ready"][2]
    assert message.startswith("still used by PartitionReassignment/m; delete or finish those "
                              "first (meanwhile the cluster is not usable: "), message
    assert "127.0.0.1:1" in message.split("not usable: ", 1)[1]
