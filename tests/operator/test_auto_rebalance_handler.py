"""KafkaCluster spec.autoRebalance.addBrokers through the KafkaCluster's own handler, called
in-process (handler_driver.py) with its API calls going over HTTP to kmock: a broker added to
the embedded cluster (spec.embedded.brokers: the twin registers it) gets one KafkaRebalance
add-brokers from the template, owned by the KafkaCluster; a create the API server refuses, a
bad template and a name taken by someone else's KafkaRebalance are conditions and Events,
never an exception out of the pass. The decisions themselves: test_auto_rebalance.py."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from handler_driver import CLUSTER, Driver, condition
from harness import Api, Emulator, status_error
from kopf._cogs.clients import auth  # kopf's authenticated requests read this vault
from kopf._cogs.structs import credentials

from controller_core.backends import RetryPolicy
from kraftsman import auto_rebalance as ar
from kraftsman.resources import API_VERSION
from tests.helpers import cluster as embedded_cluster
from tests.serve.harness import served

KRS = f"/apis/{API_VERSION}/namespaces/default/kafkarebalances"
TEMPLATE = {"balance": True, "maxConcurrentMoves": 4, "throttleBytesPerSecond": 20_000_000}


def policy(**kw: Any) -> dict[str, Any]:
    return {"addBrokers": {"template": TEMPLATE, **kw}}


class Refusing(Emulator):
    """The emulator, refusing KafkaRebalance requests of the methods in ``refusing`` with
    that status (a Status body, as kube-apiserver answers; nothing stored)."""

    refusing: dict[str, int] = {}

    async def _serve(self, request: Any) -> Any:
        method = str(getattr(request.method, "name", request.method)).upper()
        if method in self.refusing and request.url.path.startswith(KRS):
            code = self.refusing[method]
            reason = {403: "Forbidden", 422: "Invalid"}.get(code, "InternalError")
            return status_error(code, reason, f"refused by the test ({code})")
        return await super()._serve(request)


@pytest.fixture
def kmock_options() -> dict[str, Any]:
    Refusing.refusing = {}
    return {"cls": Refusing}


class Env:
    def __init__(self, d: Driver, api: Api, kmock: Any) -> None:
        self.d, self.api, self.kmock = d, api, kmock
        self.refusing = Refusing.refusing
        self.index_lags = False  # the operator's watch has not seen the KafkaRebalances yet

    async def rebalances(self) -> dict[str, dict[str, Any]]:
        async with self.api.session.get(self.api.base + KRS) as r:
            assert r.status == 200, await r.text()
            items = (await r.json()).get("items") or []
        return {o["metadata"]["name"]: o for o in items}

    async def post(self, body: dict[str, Any]) -> None:
        async with self.api.session.post(self.api.base + KRS, json=body) as r:
            assert r.status < 300, await r.text()

    async def set_phase(self, name: str, phase: str) -> None:
        async with self.api.session.patch(
                f"{self.api.base}{KRS}/{name}/status", json={"status": {"phase": phase}},
                headers={"Content-Type": "application/merge-patch+json"}) as r:
            assert r.status < 300, await r.text()

    async def index(self) -> dict[Any, list[Any]]:
        """What the operator's index of KafkaRebalances holds (kopf's, from its watch)."""
        out: dict[Any, list[Any]] = {}
        if self.index_lags:
            return out
        for name, o in (await self.rebalances()).items():
            for key, seen in ar.index_entry("default", name, o["metadata"], o["spec"],
                                            o.get("status")).items():
                out.setdefault(key, []).append(seen)
        return out

    async def tick(self, kc: dict[str, Any], seconds: float = 1.0) -> None:
        self.d.now += seconds
        await self.d.call(kc, "reconcile", auto_rebalances=await self.index())

    async def add_broker(self, kc: dict[str, Any], broker: int) -> None:
        """A broker joins: listed in spec.embedded.brokers, the twin registers it; the
        passes run until it is unfenced."""
        embedded = copy.deepcopy(kc["spec"]["embedded"])
        embedded["brokers"].append({"id": broker, "rack": "abc"[broker % 3]})
        self.d.set_spec(kc, {"embedded": embedded})
        for _ in range(30):
            await self.tick(kc)
            st = kc["status"]
            if st.get("brokers") == len(embedded["brokers"]) and st.get("fencedBrokers") == 0:
                return
        raise AssertionError(f"broker {broker} never registered unfenced: {kc['status']}")

    def events(self, reason: str) -> list[tuple[str, str, str]]:
        return [e for e in self.d.events if e[1] == reason]


@pytest.fixture
async def env(kmock: Any, api: Api, tmp_path: Path) -> AsyncIterator[Env]:
    vault = credentials.Vault()
    await vault.populate({"test": credentials.ConnectionInfo(server=str(kmock.url),
                                                             insecure=True)})
    token = auth.vault_var.set(vault)
    d = Driver(tmp_path)
    d.rt.settings = d.settings
    try:
        yield Env(d, api, kmock)
    finally:
        await d.stop()
        auth.vault_var.reset(token)
        await vault.close()


async def cluster_with(env: Env, auto: dict[str, Any] | None) -> dict[str, Any]:
    spec = copy.deepcopy(CLUSTER)
    if auto is not None:
        spec["autoRebalance"] = auto
    kc = env.d.create("KafkaCluster", "demo", spec)
    await env.tick(kc)
    assert kc["status"]["phase"] == "Ready", kc["status"]
    return kc


async def test_a_new_broker_gets_one_add_brokers_rebalance_from_the_template(env: Env) -> None:
    kc = await cluster_with(env, policy())
    assert kc["status"]["knownBrokers"] == [0, 1, 2, 3, 4, 5]  # first observation: recorded
    await env.tick(kc)
    assert await env.rebalances() == {}  # the brokers present at creation are not new
    await env.add_broker(kc, 6)
    krs = await env.rebalances()
    assert list(krs) == ["demo-add-brokers-6"]
    kr = krs["demo-add-brokers-6"]
    assert kr["spec"] == {"clusterRef": {"name": "demo"}, "goal": "add-brokers",
                          "brokers": [6], "approval": "Pending", **TEMPLATE}
    assert kr["metadata"]["ownerReferences"] == [
        ar.cluster_owner("demo", "uid-KafkaCluster-demo")]
    assert kr["metadata"]["labels"] == {ar.LABEL_AUTO: "add-brokers", ar.LABEL_CLUSTER: "demo"}
    st = kc["status"]
    assert st["knownBrokers"] == [0, 1, 2, 3, 4, 5, 6]
    assert {k: v for k, v in st["autoRebalance"].items() if v is not None} == {
        "rebalance": "demo-add-brokers-6", "brokers": [6], "waitingBrokers": []}
    assert condition(kc, "Degraded")["status"] == "False"
    (event,) = env.events("RebalanceCreated")
    assert event[0] == "Normal" and "brokers [6] registered: created KafkaRebalance " \
        "default/demo-add-brokers-6" in event[2] and "kraftsman.io/rebalance=approve" in event[2]
    for _ in range(3):  # later passes: nothing more
        await env.tick(kc)
    assert list(await env.rebalances()) == ["demo-add-brokers-6"]
    assert len(env.events("RebalanceCreated")) == 1


async def test_auto_approve_creates_it_approved(env: Env) -> None:
    kc = await cluster_with(env, policy(autoApprove=True))
    await env.add_broker(kc, 6)
    kr = (await env.rebalances())["demo-add-brokers-6"]
    assert kr["spec"]["approval"] == "Approved"
    assert "autoApprove" in env.events("RebalanceCreated")[0][2]


async def test_no_policy_or_disabled_creates_nothing(env: Env) -> None:
    kc = await cluster_with(env, None)
    await env.add_broker(kc, 6)
    assert await env.rebalances() == {}
    assert "knownBrokers" not in kc["status"]
    env.d.set_spec(kc, {"autoRebalance": {"addBrokers": {"enabled": False}}})
    await env.tick(kc)
    await env.add_broker(kc, 7)
    assert await env.rebalances() == {}
    assert kc["status"]["knownBrokers"] == list(range(8))  # recorded, not rebalanced
    env.d.set_spec(kc, {"autoRebalance": policy()})  # switched on: 6 and 7 are not new
    await env.tick(kc)
    assert await env.rebalances() == {}


async def test_brokers_that_register_while_the_last_one_runs_wait_for_it(env: Env) -> None:
    kc = await cluster_with(env, policy())
    await env.add_broker(kc, 6)
    await env.set_phase("demo-add-brokers-6", "ProposalReady")  # waiting for a person
    await env.add_broker(kc, 7)
    assert list(await env.rebalances()) == ["demo-add-brokers-6"]
    st = kc["status"]
    assert st["knownBrokers"] == list(range(7)) and st["autoRebalance"]["waitingBrokers"] == [7]
    assert "wait for KafkaRebalance demo-add-brokers-6" in st["autoRebalance"]["message"]
    assert len(env.events("BrokersWaiting")) == 1
    await env.tick(kc)
    assert len(env.events("BrokersWaiting")) == 1  # said once
    await env.set_phase("demo-add-brokers-6", "Ready")
    await env.tick(kc)
    assert sorted(await env.rebalances()) == ["demo-add-brokers-6", "demo-add-brokers-7"]
    assert kc["status"]["knownBrokers"] == list(range(8))
    assert kc["status"]["autoRebalance"]["waitingBrokers"] == []


async def test_a_bad_template_is_a_condition_naming_the_field_and_nothing_is_created(
        env: Env) -> None:
    """kmock stores what a real server's schema would refuse (an old CRD, an API server
    without validation): the operator says what to fix, the cluster stays Ready, and the
    broker is rebalanced once the template is fixed."""
    kc = await cluster_with(env, {"addBrokers": {"template": {"goal": "rebalance",
                                                              "maxConcurrentMoves": 0}}})
    assert kc["status"]["phase"] == "Ready"
    degraded = condition(kc, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "InvalidAutoRebalance")
    assert "spec.autoRebalance.addBrokers.template.goal: unknown field" in degraded["message"]
    assert "spec.autoRebalance.addBrokers.template.maxConcurrentMoves" in degraded["message"]
    await env.add_broker(kc, 6)
    assert await env.rebalances() == {}
    assert condition(kc, "Ready")["status"] == "True"
    assert kc["status"]["autoRebalance"]["waitingBrokers"] == [6]
    assert len(env.events("InvalidAutoRebalance")) == 1
    env.d.set_spec(kc, {"autoRebalance": policy()})
    await env.tick(kc)
    assert list(await env.rebalances()) == ["demo-add-brokers-6"]
    assert condition(kc, "Degraded")["status"] == "False"


@pytest.mark.parametrize("code", [403, 422])
async def test_a_refused_create_is_a_condition_and_an_event_then_retried(env: Env,
                                                                        code: int) -> None:
    kc = await cluster_with(env, policy())
    env.refusing["POST"] = code
    await env.add_broker(kc, 6)
    assert await env.rebalances() == {}
    degraded = condition(kc, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "AutoRebalanceFailed")
    assert degraded["message"].startswith("spec.autoRebalance.addBrokers: brokers [6] "
                                          "registered but create KafkaRebalance "
                                          "default/demo-add-brokers-6: ")
    if code == 403:
        assert "forbidden; grant the operator's ServiceAccount `create`" in degraded["message"]
    assert kc["status"]["knownBrokers"] == list(range(6))  # 6 is still to be rebalanced
    assert kc["status"]["autoRebalance"]["waitingBrokers"] == [6]
    assert condition(kc, "Ready")["status"] == "True"
    (event,) = env.events("AutoRebalanceFailed")
    assert event[0] == "Warning"
    await env.tick(kc)  # still refused: still Degraded, one Event
    assert condition(kc, "Degraded")["reason"] == "AutoRebalanceFailed"
    assert len(env.events("AutoRebalanceFailed")) == 1
    env.refusing.clear()
    await env.tick(kc, 120)  # past the backoff
    assert list(await env.rebalances()) == ["demo-add-brokers-6"]
    assert condition(kc, "Degraded")["status"] == "False"
    assert kc["status"]["knownBrokers"] == list(range(7))


async def test_one_created_by_another_replica_counts_as_done(env: Env) -> None:
    """Two replicas (or a pass whose status write was lost) create the same name: the
    second create is answered 409 AlreadyExists; the one there is this cluster's, so the
    broker is done and no second Event is posted. (The operator's watch has not shown it
    yet, else the pass would not try: test_auto_rebalance.py's adoption.)"""
    kc = await cluster_with(env, policy())
    env.index_lags = True
    await env.post(ar.rebalance_body(ar.parse_policy(policy())[1],  # type: ignore[arg-type]
                                     "demo", "uid-KafkaCluster-demo", "default",
                                     "demo-add-brokers-6", [6]))
    await env.add_broker(kc, 6)
    assert list(await env.rebalances()) == ["demo-add-brokers-6"]
    assert kc["status"]["knownBrokers"] == list(range(7))
    assert env.events("RebalanceCreated") == [] and env.events("AutoRebalanceFailed") == []


async def test_a_name_taken_by_someone_elses_rebalance_is_reported(env: Env) -> None:
    kc = await cluster_with(env, policy())
    await env.post({"apiVersion": API_VERSION, "kind": "KafkaRebalance",
                    "metadata": {"name": "demo-add-brokers-6"},
                    "spec": {"clusterRef": {"name": "demo"}}})
    await env.add_broker(kc, 6)
    degraded = condition(kc, "Degraded")
    assert degraded["reason"] == "AutoRebalanceFailed"
    assert "KafkaRebalance default/demo-add-brokers-6 exists and is not this KafkaCluster's" \
        in degraded["message"]
    assert kc["status"]["knownBrokers"] == list(range(6))


async def test_an_unregistered_broker_leaves_the_known_set_and_is_new_when_back(
        env: Env) -> None:
    """Broker 5 (it holds nothing) stops and is unregistered (UnregisterBroker, as `kraftsman
    cluster unregister-broker` does): it leaves knownBrokers; started again it registers
    anew and gets a rebalance of its own."""
    kc = await cluster_with(env, policy())
    opened = env.d.rt.clusters[("default", "demo")]
    await env.d.rt.run(opened, lambda c: c.fail_broker(5))
    for _ in range(30):
        await env.tick(kc)
        if kc["status"]["fencedBrokers"] == 1:
            break
    result = await env.d.rt.run(opened, lambda c: c.unregister_broker(5))
    assert result.ok, result
    await env.tick(kc)
    assert kc["status"]["brokers"] == 5 and kc["status"]["knownBrokers"] == [0, 1, 2, 3, 4]
    assert await env.rebalances() == {}
    await env.d.rt.run(opened, lambda c: c.restore_broker(5))
    for _ in range(30):
        await env.tick(kc)
        if kc["status"]["brokers"] == 6 and kc["status"]["fencedBrokers"] == 0:
            break
    await env.tick(kc)
    assert list(await env.rebalances()) == ["demo-add-brokers-5"]
    assert kc["status"]["knownBrokers"] == list(range(6))


async def test_another_cluster_id_is_a_first_observation_again(env: Env) -> None:
    """knownBrokers belong to the cluster they were seen on: when the KafkaCluster reaches
    another cluster (bootstrapServers repointed, an embedded cluster recreated), its brokers
    are recorded, not rebalanced."""
    kc = await cluster_with(env, policy())
    kc["status"]["knownBrokers"] = [0, 1, 2, 3, 4]  # as if 5 were new ...
    kc["status"]["clusterId"] = "an-earlier-cluster"  # ... but on another cluster
    await env.tick(kc)
    assert await env.rebalances() == {}
    assert kc["status"]["knownBrokers"] == list(range(6))
    assert env.events("ClusterIdChanged")
    kc["status"]["knownBrokers"] = [0, 1, 2, 3, 4]  # the same cluster: 5 is new
    await env.tick(kc)
    assert list(await env.rebalances()) == ["demo-add-brokers-5"]


async def test_a_bootstrap_servers_cluster_reads_its_brokers_over_the_kafka_protocol(
        env: Env, tmp_path: Path) -> None:
    """The same policy on a `kafka` backend (an embedded cluster served over the Kafka
    protocol at 50x time): broker 5 stopped and unregistered leaves knownBrokers; started
    again it registers anew (DescribeCluster over the wire) and gets its rebalance."""
    env.d.rt.kafka_retry = RetryPolicy(total_seconds=10.0, request_timeout_ms=5000)
    with served(embedded_cluster(tmp_path / "served"), time_scale=50) as server:
        kc = env.d.create("KafkaCluster", "demo", {"bootstrapServers": server.bootstrap,
                                                   "autoRebalance": policy()})

        async def until(pred: Any) -> None:
            for _ in range(100):
                await env.tick(kc)
                if pred(kc["status"]):
                    return
                server.call(lambda: server.cluster.advance(1.0))  # heartbeats, fencing
            raise AssertionError(kc["status"])

        await until(lambda st: st.get("knownBrokers") == list(range(6)))
        assert kc["status"]["backend"] == "kafka"
        server.call(lambda: server.cluster.fail_broker(5))
        await until(lambda st: st.get("fencedBrokers") == 1)
        assert server.call(lambda: server.cluster.unregister_broker(5)).ok
        await until(lambda st: st.get("knownBrokers") == [0, 1, 2, 3, 4])
        assert await env.rebalances() == {}
        server.call(lambda: server.cluster.restore_broker(5))
        await until(lambda st: st.get("knownBrokers") == list(range(6)))
        kr = (await env.rebalances())["demo-add-brokers-5"]
        assert kr["spec"]["brokers"] == [5] and kr["spec"]["clusterRef"] == {"name": "demo"}
