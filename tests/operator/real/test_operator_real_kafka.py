"""The deployed operator (the chart's Deployment, logged in with its ServiceAccount's token on
the real kube-apiserver) driving a real Apache Kafka 4.4 cluster through a KafkaCluster with
`bootstrapServers` on the SASL_SSL listener and a Secret with SCRAM credentials and the CA:
a controller added to the dynamic quorum and a voter removed (KafkaQuorum), a throttled
reassignment, and a preferred election — each checked on the Kafka side."""

from __future__ import annotations

from typing import Any

from harness import Api, cond_is
from real_install import chart

from controller_core.model import TopicPartition
from tests.real.fixtures import Session
from tests.real.kafka import ADMIN_PASSWORD, ADMIN_USER


def _topic(session: Session) -> str:
    from kafka.admin import KafkaAdminClient, NewTopic
    name = session.topic("op")
    admin = KafkaAdminClient(bootstrap_servers=session.cluster.bootstrap())
    try:
        admin.create_topics([NewTopic(name, -1, -1, replica_assignments={
            0: [0, 1, 2], 1: [1, 2, 3]})], timeout_ms=30_000)
    finally:
        admin.close()
    return name


async def test_the_deployed_operator_drives_a_real_kafka(api: Api, deployed: Any,
                                                         namespace: str,
                                                         real_kafka: Session) -> None:
    c = real_kafka.cluster
    name = _topic(real_kafka)
    await api.put_secret("kafka-admin", {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": ADMIN_USER, "sasl.password": ADMIN_PASSWORD,
        "ca.crt": c.ca.read_text()})
    # As a user grants it: the chart may read Secrets in this namespace only.
    await deployed(chart({"rbac": {"secretNamespaces": [namespace]}}))
    await api.create("KafkaCluster", "prod", {"bootstrapServers": c.bootstrap("SASL_SSL"),
                                               "authSecretRef": {"name": "kafka-admin"}})
    kc = await api.wait("KafkaCluster", "prod", cond_is("Ready", "True"), timeout=120)
    assert (kc["status"]["backend"], kc["status"]["brokers"]) == ("kafka", 4)
    assert kc["status"]["clusterId"] == c.cluster_id
    ref = {"clusterRef": {"name": "prod"}}

    # KIP-853 on the real quorum: controller 103 joins, then voter 100 leaves.
    c.start(103)
    c.wait_observing(103)  # (failing, it says why: the JVM's state and log)
    await api.create("KafkaQuorum", "q", {**ref, "voters": [100, 101, 102, 103],
                                          "controllers": [{"id": 103, "endpoints": [
                                              c.controller_endpoint(103)]}]})
    q = await api.wait("KafkaQuorum", "q", cond_is("Ready", "True"), timeout=180)
    assert q["status"]["currentVoters"] == [100, 101, 102, 103]
    with c.admin() as a:
        assert sorted(a.describe_quorum().current_voters) == [100, 101, 102, 103]
    await api.set_spec("KafkaQuorum", "q", {"voters": [101, 102, 103]})
    q = await api.wait("KafkaQuorum", "q", lambda o: (o.get("status") or {}).get(
        "currentVoters") == [101, 102, 103] and cond_is("Ready", "True")(o), timeout=180)

    # A throttled reassignment, completed and checked with Kafka's own view.
    await api.create("PartitionReassignment", "move", {**ref, "partitions": [
        {"topic": name, "partition": 0, "replicas": [3, 1, 2]}],
        "throttleBytesPerSecond": 50_000_000, "electPreferredLeaders": True})
    done = await api.wait("PartitionReassignment", "move", cond_is("Succeeded", "True"),
                          timeout=180)
    assert done["status"]["done"] == 1
    with c.admin() as a:
        (p0,) = a.describe_partitions(partitions=[TopicPartition(name, 0)])
    assert (p0.replicas, p0.leader) == ((3, 1, 2), 3)

    # KIP-113 through the resource: partition 1's replica on broker 1 into its other log
    # directory (Kafka's brokers here have two), checked with Kafka's DescribeLogDirs.
    p1 = TopicPartition(name, 1)
    with c.admin() as a:
        (here,) = [d.path for d in a.describe_log_dirs([1], [p1])[1]
                   for r in d.replicas if r.tp == p1]
    there = next(path for path in c.log_dirs(1) if path != here)
    await api.create("PartitionReassignment", "jbod", {**ref, "partitions": [
        {"topic": name, "partition": 1, "replicas": [1, 2, 3],
         "log_dirs": [there, "any", "any"]}], "throttleBytesPerSecond": 50_000_000})
    done = await api.wait("PartitionReassignment", "jbod", cond_is("Succeeded", "True"),
                          timeout=180)
    assert done["status"]["done"] == 1
    with c.admin() as a:
        assert [(d.path, r.future) for d in a.describe_log_dirs([1], [p1])[1]
                for r in d.replicas if r.tp == p1] == [(there, False)]
        cfg = a.describe_configs([("BROKER", "1")])[("BROKER", "1")]
    assert "replica.alter.log.dirs.io.max.bytes.per.second" not in cfg

    # A preferred election of the topic (partition 1 is led by its preferred replica already).
    await api.create("LeaderElection", "pref", {**ref, "topics": [name],
                                                "electionType": "PREFERRED"})
    obj = await api.wait("LeaderElection", "pref", cond_is("Succeeded", "True"), timeout=120)
    assert obj["status"]["counts"]["total"] == 2
    for kind, obj_name in [("PartitionReassignment", "move"),
                           ("PartitionReassignment", "jbod"), ("LeaderElection", "pref"),
                           ("KafkaQuorum", "q")]:
        await api.delete(kind, obj_name)
