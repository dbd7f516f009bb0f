"""KafkaCluster spec.autoRebalance.addBrokers on the real kube-apiserver: the operator as the
chart deploys it, logged in with its ServiceAccount's token (so the `create` on
kafkarebalances it needs is the chart's real RBAC), an embedded cluster to which a broker is
added (spec.embedded.brokers: the twin registers it). The KafkaRebalance it creates goes
through the usual flow; the test plays kubelet and job controller for its planner Job as
test_rebalance_deployed.py does (the real `kraftsman rebalance propose`, with the planner's
own token). And a real Apache Kafka 4.4 behind `bootstrapServers`, where a broker stopped,
unregistered (UnregisterBroker) and started again registers anew."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from deployed import OperatorProcess
from harness import Api, cond_is
from real_install import chart
from test_operator_kmock import CLUSTER
from test_rebalance_deployed import PVC, Kubelet, phase

from controller_core.config import EmbeddedClusterSpec
from controller_core.embedded.cluster import EmbeddedCluster
from kraftsman.handlers.runtime import embedded_cluster_dir
from tests.real.fixtures import Session
from tests.real.test_cli_real_kafka import wait_for
from tests.realk8s.apiserver import RealServer

TEMPLATE = {"maxConcurrentMoves": 2, "maxPartitionsPerResource": 2,
            "throttleBytesPerSecond": 0}


def with_policy(**kw: Any) -> dict[str, Any]:
    spec = copy.deepcopy(CLUSTER)
    spec["autoRebalance"] = {"addBrokers": {"template": TEMPLATE, **kw}}
    return spec


def known(value: list[int]) -> Any:
    return lambda o: (o.get("status") or {}).get("knownBrokers") == value


async def add_broker(api: Api, broker: int) -> dict[str, Any]:
    kc = await api.get("KafkaCluster", "demo")
    assert kc is not None
    embedded = copy.deepcopy(kc["spec"]["embedded"])
    embedded["brokers"].append({"id": broker, "rack": "abc"[broker % 3]})
    await api.set_spec("KafkaCluster", "demo", {"embedded": embedded})
    return embedded


def replicas_on(op: OperatorProcess, namespace: str, uid: str, embedded: dict[str, Any],
                broker: int) -> int:
    """Replicas broker ``broker`` holds, the embedded cluster read as the planner reads it."""
    c = EmbeddedCluster.open_read_only(
        embedded_cluster_dir(op.state_dir, (namespace, "demo"), uid),
        EmbeddedClusterSpec.model_validate(embedded))
    try:
        return sum(broker in d.replicas for d in c.describe_partitions())
    finally:
        c.close()


async def test_a_new_broker_gets_an_auto_approved_rebalance_that_executes(
        api: Api, deployed: Any, real_server: RealServer, tmp_path: Path) -> None:
    op = await deployed(chart(PVC))
    kc = await api.create("KafkaCluster", "demo", with_policy(autoApprove=True))
    kc = await api.wait("KafkaCluster", "demo", lambda o: cond_is("Ready", "True")(o)
                        and known([0, 1, 2, 3, 4, 5])(o))
    uid = kc["metadata"]["uid"]
    embedded = await add_broker(api, 6)
    kr = await api.wait("KafkaRebalance", "demo-add-brokers-6", lambda o: True, timeout=60)
    assert kr["spec"] == {"clusterRef": {"name": "demo"}, "goal": "add-brokers",
                          "brokers": [6], "approval": "Approved", "balance": False,
                          "unregister": False, **TEMPLATE}  # the CRD's defaults
    assert [(o["kind"], o["name"], o["uid"], o.get("controller")) for o in
            kr["metadata"]["ownerReferences"]] == [("KafkaCluster", "demo", uid, True)]
    kc = await api.wait("KafkaCluster", "demo", known(list(range(7))))
    assert kc["status"]["autoRebalance"]["rebalance"] == "demo-add-brokers-6"
    events = await api.wait_events("demo", "RebalanceCreated")
    assert any("brokers [6] registered: created KafkaRebalance "
               f"{api.namespace}/demo-add-brokers-6" in e["message"] for e in events)

    assert replicas_on(op, api.namespace, uid, embedded, 6) == 0
    kubelet = Kubelet(api, op, real_server, tmp_path / "kubelet")
    done = await kubelet.play("demo-add-brokers-6-plan-1")
    assert done.returncode == 0, done.stderr
    kr = await api.wait("KafkaRebalance", "demo-add-brokers-6", phase("Ready"), timeout=180)
    assert kr["status"]["decidedBy"] == "spec.approval" and kr["status"]["moves"] > 0
    assert replicas_on(op, api.namespace, uid, embedded, 6) > 0  # broker 6 was filled
    kc = await api.get("KafkaCluster", "demo")
    assert kc is not None and cond_is("Degraded", "False")(kc)
    assert [e["reason"] for e in await api.events("demo")].count("RebalanceCreated") == 1


async def test_without_auto_approve_it_stops_at_proposal_ready_and_the_next_broker_waits(
        api: Api, deployed: Any, real_server: RealServer, tmp_path: Path) -> None:
    """Off by default: the proposal waits for a person; a broker that registers meanwhile
    waits for it (no second plan made from the same assignment) and gets its own
    rebalance once the first is rejected."""
    op = await deployed(chart(PVC))
    await api.create("KafkaCluster", "demo", with_policy())
    await api.wait("KafkaCluster", "demo", known([0, 1, 2, 3, 4, 5]))
    await add_broker(api, 6)
    await api.wait("KafkaRebalance", "demo-add-brokers-6", lambda o: True, timeout=60)
    kubelet = Kubelet(api, op, real_server, tmp_path / "kubelet")
    done = await kubelet.play("demo-add-brokers-6-plan-1")
    assert done.returncode == 0, done.stderr
    kr = await api.wait("KafkaRebalance", "demo-add-brokers-6", phase("ProposalReady"),
                        timeout=120)
    assert kr["spec"]["approval"] == "Pending"
    await add_broker(api, 7)
    kc = await api.wait("KafkaCluster", "demo", lambda o: (
        (o.get("status") or {}).get("autoRebalance") or {}).get("waitingBrokers") == [7],
        timeout=60)
    assert "wait for KafkaRebalance demo-add-brokers-6" in kc["status"]["autoRebalance"][
        "message"]
    assert await api.get("KafkaRebalance", "demo-add-brokers-7") is None
    await api.patch("KafkaRebalance", "demo-add-brokers-6",
                    {"metadata": {"annotations": {"kraftsman.io/rebalance": "reject"}}})
    kr = await api.wait("KafkaRebalance", "demo-add-brokers-7", lambda o: True, timeout=60)
    assert kr["spec"]["brokers"] == [7]
    await api.wait("KafkaCluster", "demo", known(list(range(8))))


def test_the_crd_refuses_a_template_field_the_operator_owns(real_server: RealServer,
                                                            namespace: str) -> None:
    """`goal` in the template is refused at admission (kubectl's strict field validation),
    saying which field."""
    spec = with_policy()
    spec["autoRebalance"]["addBrokers"]["template"]["goal"] = "rebalance"
    obj = {"apiVersion": "kraftsman.io/v1alpha1", "kind": "KafkaCluster",
           "metadata": {"name": "bad", "namespace": namespace}, "spec": spec}
    done = real_server.kubectl("create", "-f", "-", input=json.dumps(obj), check=False)
    assert done.returncode != 0
    assert 'unknown field "spec.autoRebalance.addBrokers.template.goal"' in done.stderr, \
        done.stderr


async def test_a_real_kafka_broker_that_registers_anew_gets_its_rebalance(
        api: Api, deployed: Any, real_kafka: Session) -> None:
    """Real Kafka: broker 3 is stopped, fenced, unregistered — it leaves knownBrokers —
    and started again: it registers anew (DescribeCluster lists it unfenced) and the
    operator, with its ServiceAccount's token, creates prod-add-brokers-3."""
    c = real_kafka.cluster
    await deployed(chart())
    await api.create("KafkaCluster", "prod", {
        "bootstrapServers": c.bootstrap(brokers=[0, 1, 2]),
        "autoRebalance": {"addBrokers": {"template": {"balance": True}}}})
    await api.wait("KafkaCluster", "prod", known([0, 1, 2, 3]), timeout=120)
    c.kill(3)
    with c.admin() as a:
        wait_for(lambda: any(b.id == 3 and b.fenced for b in a.describe_cluster().brokers),
                 "broker 3 fenced")
        assert a.unregister_broker(3).ok
    await api.wait("KafkaCluster", "prod", known([0, 1, 2]), timeout=60)
    assert await api.get("KafkaRebalance", "prod-add-brokers-3") is None
    c.start(3)
    kr = await api.wait("KafkaRebalance", "prod-add-brokers-3", lambda o: True, timeout=180)
    assert (kr["spec"]["goal"], kr["spec"]["brokers"], kr["spec"]["balance"],
            kr["spec"]["approval"]) == ("add-brokers", [3], True, "Pending")
    await api.wait("KafkaCluster", "prod", known([0, 1, 2, 3]), timeout=60)
    await api.wait_events("prod", "RebalanceCreated")
