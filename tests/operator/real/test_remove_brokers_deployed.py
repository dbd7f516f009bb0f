"""KafkaRebalance remove-brokers on a real Kafka 4.4 through the deployed operator (the
chart's Deployment on the real kube-apiserver, logged in with its ServiceAccount's token),
its planner Job's own command played as the kubelet would (test_rebalance_deployed.Kubelet):
approved in its spec, the broker is cordoned (Kafka's own config shows it), drained by the
proposal's reassignments, reported Drained only once Kafka lists nothing on it, waits for its
process to stop, and is unregistered — Kafka's describe cluster no longer lists it. The
broker is started again at the end (it registers anew) and its cordon deleted."""

from __future__ import annotations

import time
from typing import Any

from harness import Api, cond_is
from real_install import chart
from test_rebalance_deployed import Kubelet, phase

from tests.real.fixtures import Session
from tests.real.test_cli_real_kafka import topic
from tests.realk8s.apiserver import RealServer

CORDON = "cordoned.log.dirs"


def brokers_of(obj: dict[str, Any]) -> dict[int, str]:
    return {b["id"]: b["state"] for b in (obj.get("status") or {}).get("brokers") or []}


async def test_a_broker_is_removed_through_a_kafkarebalance(
        api: Api, deployed: Any, real_server: RealServer, real_kafka: Session,
        tmp_path: Any) -> None:
    c = real_kafka.cluster
    name = topic(real_kafka, [[3, 1, 2], [0, 3, 1], [1, 2, 0]], mb=1)
    op = await deployed(chart())
    await api.create("KafkaCluster", "prod", {"bootstrapServers": c.bootstrap()})
    await api.wait("KafkaCluster", "prod", cond_is("Ready", "True"), timeout=120)
    kubelet = Kubelet(api, op, real_server, tmp_path / "kubelet")
    await api.create("KafkaRebalance", "rb", {
        "clusterRef": {"name": "prod"}, "goal": "remove-brokers", "brokers": [3],
        "throttleBytesPerSecond": 50_000_000, "approval": "Approved", "unregister": True})
    try:
        done = await kubelet.play("rb-plan-1")
        assert done.returncode == 0, done.stderr
        # Approved in the spec: cordoned as the proposal is taken, then drained.
        obj = await api.wait("KafkaRebalance", "rb", lambda o: brokers_of(o).get(3) in (
            "Cordoned", "Drained", "WaitingForShutdown"), timeout=120)
        with c.admin() as a:
            configs = a.describe_configs([("BROKER", "3")])
        assert configs[("BROKER", "3")].get(CORDON) == "*", configs
        # Drained, then waiting: broker 3's process still runs, so it is not unregistered.
        obj = await api.wait("KafkaRebalance", "rb", lambda o: brokers_of(o).get(3) ==
                             "WaitingForShutdown", timeout=300)
        with c.admin() as a:
            held = [str(d.tp) for d in a.describe_partitions()
                    if 3 in d.replicas or d.leader == 3]
            assert held == []  # Kafka's own view: nothing on broker 3
            mine = {d.tp.partition: d.replicas for d in a.describe_partitions(topics=[name])}
            assert len(mine) == 3 and all(len(r) == 3 for r in mine.values()), mine
            assert 3 in [b.id for b in a.describe_cluster().brokers]
        assert [s["state"] for s in obj["status"]["steps"]] == \
            ["Completed"] * len(obj["status"]["steps"])
        c.kill(3)  # the user stops the broker's process
        obj = await api.wait("KafkaRebalance", "rb", lambda o: brokers_of(o).get(3) ==
                             "Unregistered" and phase("Ready")(o), timeout=180)
        assert cond_is("BrokersUnregistered", "True")(obj), obj["status"]["conditions"]
        with c.admin() as a:
            assert [b.id for b in a.describe_cluster().brokers] == [0, 1, 2]
        reasons = [e["reason"] for e in await api.wait_events(
            "rb", "Cordoned", "Drained", "Unregistered")]
        assert reasons.count("Unregistered") == 1
    finally:
        if not c.running(3):
            c.start(3)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with c.admin() as a:
                if any(b.id == 3 and not b.fenced for b in a.describe_cluster().brokers):
                    a.incremental_alter_configs({("BROKER", "3"): {CORDON: None}})
                    break
            time.sleep(0.5)
        await api.delete("KafkaRebalance", "rb")
