"""The operator with `bootstrapServers` clusters: the `kafka` backend against `cluster serve`.

An embedded cluster opened here is served over the Kafka protocol (tests/serve/harness.py,
its clock at 50x wall time); the operator reaches it only through the wire, like a real
Kafka cluster. Every wait polls with a deadline; nothing sleeps in place of the core.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import Api, cond_is, condition

from controller_core.wire.auth import AuthFile, Authorizer
from tests.helpers import cluster
from tests.serve.harness import ServedCluster, served

PASSWORD = "s3cr3t-admin-pw"
WRONG = "wr0ng-pw-value"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServedCluster]:
    """Six brokers (racks a/b/c), topic `orders` (6 partitions of 10 MB, RF 3), voters
    0, 1, 2; the simulated clock runs at 50x wall time."""
    with served(cluster(tmp_path / "served"), time_scale=50) as s:
        yield s


async def real_cluster(api: Api, server: ServedCluster, name: str = "real",
                       **extra: Any) -> dict[str, Any]:
    await api.create("KafkaCluster", name, {"bootstrapServers": server.bootstrap, **extra})
    return await api.wait("KafkaCluster", name, cond_is("Ready", "True"))


async def test_reassign_cancel_elect_and_change_voters_over_the_wire(
        api: Api, start_operator: Any, server: ServedCluster) -> None:
    op = start_operator()
    kc = await real_cluster(api, server)
    st = kc["status"]
    assert (st["backend"], st["brokers"], st["topics"], st["partitions"]) == ("kafka", 6, 1, 6)
    assert st["clusterId"] == server.call(lambda: server.cluster.describe_cluster().cluster_id)
    assert not op.rt.clusters[("default", "real")].embedded
    ref = {"clusterRef": {"name": "real"}}

    # A reassignment completes, moved by the served cluster on its own clock.
    await api.create("PartitionReassignment", "move", {**ref, "partitions": [
        {"topic": "orders", "partition": p, "replicas": [3, 4, 5]} for p in (0, 1)],
        "maxConcurrentMoves": 2, "electPreferredLeaders": True})
    done = await api.wait("PartitionReassignment", "move", cond_is("Succeeded", "True"),
                          timeout=60)
    assert done["status"]["done"] == 2 and done["status"]["bytesMoved"] > 0
    parts = server.call(lambda: {d.tp.partition: d for d in
                                 server.cluster.describe_partitions(topics=["orders"])})
    assert parts[0].replicas == (3, 4, 5) and parts[1].replicas == (3, 4, 5)
    assert parts[0].leader == 3  # elected preferred leaders after the move

    # A throttled reassignment is cancelled mid-flight and rolled back.
    await api.create("PartitionReassignment", "slow", {**ref, "partitions": [
        {"topic": "orders", "partition": 2, "replicas": [3, 4, 5]}],
        "throttleBytesPerSecond": 1000})
    await api.wait("PartitionReassignment", "slow",
                   lambda o: (o.get("status") or {}).get("moving", 0) == 1)
    assert server.call(lambda: server.cluster.list_partition_reassignments()) != {}
    await api.set_spec("PartitionReassignment", "slow", {"cancel": True})
    obj = await api.wait("PartitionReassignment", "slow",
                         cond_is("Succeeded", "False", "Cancelled"), timeout=60)
    assert obj["status"]["counts"]["cancelled"] == 1
    assert server.call(lambda: server.cluster.list_partition_reassignments()) == {}
    p2 = server.call(lambda: server.cluster.describe_partitions(topics=["orders"])[2])
    assert sorted(p2.replicas) == [0, 1, 2]  # back to its replicas (the order may differ)

    # An election: move leadership away from the preferred replicas first.
    server.call(lambda: server.cluster.fail_broker(1))
    server.call(lambda: server.cluster.advance(30))
    server.call(lambda: server.cluster.restore_broker(1))
    server.call(lambda: server.cluster.advance(30))
    await api.create("LeaderElection", "pref", {**ref, "topics": ["orders"],
                                                "electionType": "PREFERRED"})
    obj = await api.wait("LeaderElection", "pref", cond_is("Succeeded", "True"), timeout=60)
    assert obj["status"]["counts"]["total"] == 6 and obj["status"]["counts"]["elected"] >= 1
    leaders = server.call(lambda: [d.leader == d.replicas[0] for d in
                                   server.cluster.describe_partitions(topics=["orders"])])
    assert all(leaders)

    # A voter change: replace voter 2 by node 3 through AddRaftVoter / RemoveRaftVoter.
    await api.create("KafkaQuorum", "q", {**ref, "voters": [0, 1, 3]})
    obj = await api.wait("KafkaQuorum", "q", cond_is("Ready", "True"), timeout=90)
    assert obj["status"]["currentVoters"] == [0, 1, 3]
    assert obj["status"]["leaderEpoch"] >= 1 and obj["status"]["highWatermark"] > 0
    q = server.call(lambda: server.cluster.describe_quorum())
    assert sorted(q.current_voters) == [0, 1, 3]
    await api.wait_events("q", "VoterAdded", "VoterRemoved")

    # Deleting the KafkaCluster (once nothing uses it) closes the connection.
    for kind, name in [("PartitionReassignment", "move"), ("PartitionReassignment", "slow"),
                       ("LeaderElection", "pref"), ("KafkaQuorum", "q")]:
        await api.delete(kind, name)
    await api.delete("KafkaCluster", "real")
    await api.wait_gone("KafkaCluster", "real")
    assert ("default", "real") not in op.rt.clusters


async def test_bad_voters_on_a_real_cluster_are_degraded(api: Api, start_operator: Any,
                                                         server: ServedCluster) -> None:
    start_operator()
    await real_cluster(api, server)
    await api.create("KafkaQuorum", "q", {"clusterRef": {"name": "real"}, "voters": [0, 1, 42]})
    obj = await api.wait("KafkaQuorum", "q", cond_is("Degraded", "True", "UnknownNode"))
    assert "spec.voters" in condition(obj, "Degraded")["message"]
    q = server.call(lambda: server.cluster.describe_quorum())
    assert sorted(q.current_voters) == [0, 1, 2]


async def test_unreachable_bootstrap_is_degraded_not_a_crash(api: Api,
                                                             start_operator: Any) -> None:
    start_operator(kafka_retry_seconds=1.0)
    await api.create("KafkaCluster", "gone", {"bootstrapServers": "127.0.0.1:1"})
    obj = await api.wait("KafkaCluster", "gone", cond_is("Degraded", "True",
                                                         "BootstrapUnreachable"))
    msg = condition(obj, "Degraded")["message"]
    assert "127.0.0.1:1" in msg and "spec.bootstrapServers" in msg
    assert condition(obj, "Ready")["status"] == "False"
    assert obj["status"]["backend"] == "kafka"
    # An operation on it waits instead of failing.
    await api.create("LeaderElection", "e", {"clusterRef": {"name": "gone"},
                                             "allTopicPartitions": True})
    await api.wait("LeaderElection", "e", cond_is("Progressing", "True", "WaitingForCluster"))


async def test_credentials_from_the_secret_never_leak(api: Api, start_operator: Any,
                                                      tmp_path: Path) -> None:
    auth = Authorizer.from_file(AuthFile.model_validate({
        "users": [{"name": "admin", "password": PASSWORD}],
        "acls": [{"principal": "User:admin", "operations": ["ALTER"]}]}))
    with served(cluster(tmp_path / "c"), auth, time_scale=50) as s:
        start_operator(kafka_retry_seconds=1.5)
        spec = {"bootstrapServers": s.bootstrap, "authSecretRef": {"name": "kafka-admin"}}
        await api.create("KafkaCluster", "sec", spec)
        obj = await api.wait("KafkaCluster", "sec", cond_is("Degraded", "True",
                                                            "SecretNotFound"))
        assert "spec.authSecretRef.name" in condition(obj, "Degraded")["message"]
        sasl = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.username": "admin"}
        await api.put_secret("kafka-admin", {**sasl, "sasl.passwrd": PASSWORD})
        obj = await api.wait("KafkaCluster", "sec", cond_is("Degraded", "True",
                                                            "InvalidSecret"))
        assert "sasl.passwrd" in condition(obj, "Degraded")["message"]
        await api.put_secret("kafka-admin", {**sasl, "sasl.password": WRONG})
        # refused credentials are reported as such, not as an unreachable cluster
        refused = ("AuthenticationFailed",)
        obj = await api.wait("KafkaCluster", "sec", lambda o: any(
            cond_is("Degraded", "True", r)(o) for r in refused), timeout=60)
        assert s.logs and any("authentication failed" in line for line in s.logs)
        await api.put_secret("kafka-admin", {**sasl, "sasl.password": PASSWORD})
        obj = await api.wait("KafkaCluster", "sec", cond_is("Ready", "True"), timeout=60)
        assert obj["status"]["brokers"] == 6
        assert condition(obj, "Degraded")["status"] == "False"
        events = await api.wait_events("sec", "SecretNotFound", "InvalidSecret",
                                       "ClusterReady", *refused)
        seen = json.dumps(obj) + json.dumps(events)
        assert PASSWORD not in seen and WRONG not in seen


async def test_secret_not_readable_names_the_rbac_fix(api: Api, start_operator: Any,
                                                      kmock: Any) -> None:
    """An API server that forbids reading the Secret (no RBAC for it)."""
    kmock["get", kmock.resource("", "v1", "secrets")] << 403
    start_operator()
    await api.create("KafkaCluster", "locked", {"bootstrapServers": "127.0.0.1:1",
                                                "authSecretRef": {"name": "creds"}})
    obj = await api.wait("KafkaCluster", "locked", cond_is("Degraded", "True",
                                                           "SecretForbidden"))
    msg = condition(obj, "Degraded")["message"]
    assert "spec.authSecretRef.name" in msg and "rbac.secretNamespaces" in msg



async def test_a_cluster_whose_deletion_waits_is_connected_again_after_a_restart(
        api: Api, start_operator: Any, server: ServedCluster, tmp_path: Path) -> None:
    """The operator restarts while a `bootstrapServers` KafkaCluster's deletion waits for a
    throttled reassignment; no timer connects a cluster being deleted, so the new operator
    connects it for the reassignment, which, deleted, is rolled back over the wire."""
    first = start_operator(state_dir=tmp_path / "a")
    await real_cluster(api, server)
    await api.create("PartitionReassignment", "slow", {
        "clusterRef": {"name": "real"}, "throttleBytesPerSecond": 1000,
        "partitions": [{"topic": "orders", "partition": 2, "replicas": [3, 4, 5]}]})
    await api.wait("PartitionReassignment", "slow",
                   lambda o: (o.get("status") or {}).get("moving", 0) == 1)
    await api.delete("KafkaCluster", "real")
    await api.wait("KafkaCluster", "real", cond_is("Ready", "False", "InUse"))
    await first.astop()
    start_operator(state_dir=tmp_path / "b")
    await api.delete("PartitionReassignment", "slow")
    await api.wait_gone("PartitionReassignment", "slow", timeout=30)
    assert server.call(lambda: server.cluster.list_partition_reassignments()) == {}
    p2 = server.call(lambda: server.cluster.describe_partitions(topics=["orders"])[2])
    assert sorted(p2.replicas) == [0, 1, 2]  # back to its replicas (the order may differ)
    await api.wait_gone("KafkaCluster", "real", timeout=30)


async def test_a_refused_deletion_says_when_the_cluster_cannot_be_reached(
        api: Api, start_operator: Any) -> None:
    """The operations a deleted cluster waits for cannot progress while it is unreachable;
    the refusal says why, naming the field, instead of only who uses it."""
    start_operator(kafka_retry_seconds=1.0)
    await api.create("KafkaCluster", "gone", {"bootstrapServers": "127.0.0.1:1"})
    await api.wait("KafkaCluster", "gone", cond_is("Degraded", "True", "BootstrapUnreachable"))
    await api.create("PartitionReassignment", "move", {"clusterRef": {"name": "gone"},
                                                       "partitions": [{"topic": "orders",
                                                                       "partition": 0,
                                                                       "replicas": [3, 4, 5]}]})
    await api.wait("PartitionReassignment", "move",
                   cond_is("Progressing", "True", "WaitingForCluster"))
    await api.delete("KafkaCluster", "gone")
    obj = await api.wait("KafkaCluster", "gone", cond_is("Ready", "False", "InUse"))
    msg = condition(obj, "Ready")["message"]
    assert msg.startswith("still used by PartitionReassignment/move")
    assert "not usable" in msg and "127.0.0.1:1" in msg and "spec.bootstrapServers" in msg

async def test_spec_change_reconnects_and_closes_the_old_connection(
        api: Api, start_operator: Any, server: ServedCluster) -> None:
    op = start_operator(kafka_retry_seconds=1.0)
    await real_cluster(api, server)
    old = op.rt.clusters[("default", "real")].cluster
    await api.set_spec("KafkaCluster", "real", {"bootstrapServers": "127.0.0.1:1"})
    await api.wait("KafkaCluster", "real", cond_is("Degraded", "True", "BootstrapUnreachable"))
    assert ("default", "real") not in op.rt.clusters
    assert old.client._closed  # the previous connection was released
    await api.set_spec("KafkaCluster", "real", {"bootstrapServers": server.bootstrap})
    obj = await api.wait("KafkaCluster", "real", lambda o: cond_is("Ready", "True")(o) and
                         o["status"]["observedGeneration"] == 3)
    assert condition(obj, "Degraded")["status"] == "False"
