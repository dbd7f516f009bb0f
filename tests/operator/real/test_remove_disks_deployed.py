"""KafkaRebalance remove-disks on a real Kafka 4.4 (two log directories per broker) through
the deployed operator, its planner Job's own command played as the kubelet would: the
planner's snapshot records the brokers' directories (DescribeLogDirs), the proposal moves
every replica of the named directory into the broker's other one, and the steps copy them
there (AlterReplicaLogDirs) — Kafka's DescribeLogDirs then lists nothing in it, and no
log-dir throttle is left."""

from __future__ import annotations

from typing import Any

from harness import Api, cond_is
from real_install import chart
from test_rebalance_deployed import Kubelet, phase

from controller_core.metadata.controller import ALTER_LOG_DIRS_RATE
from tests.real.fixtures import Session
from tests.real.test_cli_real_kafka import topic
from tests.realk8s.apiserver import RealServer


async def test_a_log_directory_is_emptied_through_a_kafkarebalance(
        api: Api, deployed: Any, real_server: RealServer, real_kafka: Session,
        tmp_path: Any) -> None:
    c = real_kafka.cluster
    name = topic(real_kafka, [[0, 1, 2], [0, 2, 3], [0, 3, 1], [0, 1, 3]], mb=1)
    with c.admin() as a:
        held = {d.path: [r.tp for r in d.replicas if r.tp.topic == name]
                for d in a.describe_log_dirs([0])[0]}
    emptied = max(held, key=lambda path: len(held[path]))  # the one holding more of them
    assert held[emptied], held
    op = await deployed(chart())
    await api.create("KafkaCluster", "prod", {"bootstrapServers": c.bootstrap()})
    await api.wait("KafkaCluster", "prod", cond_is("Ready", "True"), timeout=120)
    kubelet = Kubelet(api, op, real_server, tmp_path / "kubelet")
    await api.create("KafkaRebalance", "disks", {
        "clusterRef": {"name": "prod"}, "goal": "remove-disks",
        "disks": [{"broker": 0, "logDir": emptied}],
        "throttleBytesPerSecond": 50_000_000, "approval": "Approved"})
    try:
        done = await kubelet.play("disks-plan-1")
        assert done.returncode == 0, done.stderr
        obj = await api.wait("KafkaRebalance", "disks", phase("Ready"), timeout=300)
        proposal = obj["status"]["proposal"]
        assert proposal["replicasToMoveBetweenDirs"] >= len(held[emptied]), proposal
        assert [s["state"] for s in obj["status"]["steps"]] == \
            ["Completed"] * len(obj["status"]["steps"])
        with c.admin() as a:
            after = {d.path: [r for r in d.replicas if r.tp.topic == name]
                     for d in a.describe_log_dirs([0])[0]}
            cfg = a.describe_configs([("BROKER", "0")])[("BROKER", "0")]
            replicas = {d.tp.partition: d.replicas for d in a.describe_partitions(topics=[name])}
        assert after[emptied] == [], after  # Kafka's own view: nothing of the topic left there
        assert not any(r.future for rs in after.values() for r in rs)
        assert ALTER_LOG_DIRS_RATE not in cfg, cfg
        assert all(0 in r for r in replicas.values()), replicas  # no replica left broker 0
    finally:
        await api.delete("KafkaRebalance", "disks")
