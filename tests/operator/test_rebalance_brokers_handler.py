"""The KafkaRebalance handler removing brokers, against kmock and an embedded cluster: the
cordon is on the cluster from approval on and gone after a reject, the last step is followed
by a fresh look at what the brokers hold (Drained, or Failed naming what is left), and with
spec.unregister a Drained broker is unregistered once its process is gone. Every call the
cluster refuses, or a cluster that is not open, keeps the phase and says why."""

from __future__ import annotations

import random
from typing import Any

from handler_driver import condition

from controller_core import errors
from controller_core.errors import ApiResult
from controller_core.model import TopicPartition
from kraftsman.rebalance_flow import ANNOTATION
from tests.helpers import run_until
from tests.operator.test_rebalance_handler import PREAS, Env, env  # noqa: F401 (fixture)

HOLDS = ("broker 2 still holds orders-0 (replica), orders-1 (replica), orders-2 (replica, "
         "leader), orders-3 (replica), orders-4 (replica) and 1 more partition(s) — not Drained")


def cluster(e: Env) -> Any:
    return e.d.rt.clusters[("default", "demo")].cluster


def removal(e: Env, **extra: Any) -> dict[str, Any]:
    return e.d.create("KafkaRebalance", "rb", {"clusterRef": {"name": "demo"},
                                               "goal": "remove-brokers", "brokers": [2], **extra})


async def approved(e: Env, **extra: Any) -> dict[str, Any]:
    rb = removal(e, **extra)
    await e.d.call(rb, "reconcile")
    await e.plan(rb, 1)
    await e.d.call(rb, "reconcile")
    assert rb["status"]["phase"] == "ProposalReady", rb["status"]
    await e.approve(rb)
    assert rb["status"]["phase"] == "Rebalancing", rb["status"]
    return rb


def drain_broker_2(e: Env) -> None:
    """What the steps would have done: every replica on broker 2 moves to broker 3+."""
    c = cluster(e)
    moves = {}
    for d in c.describe_partitions(topics=["orders"]):
        moves[d.tp] = [3 if r == 2 else r for r in d.replicas]
    assert all(r.ok for r in c.alter_partition_reassignments(moves).values())
    run_until(c, lambda: not c.list_partition_reassignments())


async def complete_steps(e: Env, rb: dict[str, Any]) -> None:
    await e.step_ends("rb-1-0001", "Completed")
    await e.d.call(rb, "reconcile")
    await e.step_ends("rb-1-0002", "Completed")
    await e.d.call(rb, "reconcile")


def events(e: Env) -> list[str]:
    return [reason for _, reason, _ in e.d.events]


async def test_approval_cordons_and_the_last_step_reports_drained(env: Env) -> None:  # noqa: F811
    rb = await approved(env)
    assert cluster(env).image.cordoned(2)
    assert rb["status"]["brokers"] == [{"id": 2, "state": "Cordoned", "message": "no new "
                                        "replica is placed on it while it drains"}]
    assert "Cordoned" in events(env)
    created = cluster(env).controller.create_topic("late", 1, 1, rng=random.Random(1),
                                                   assignment=[[2]])
    assert created.message.endswith("but all its log directories are cordoned.")
    drain_broker_2(env)
    await complete_steps(env, rb)
    assert rb["status"]["phase"] == "Ready", rb["status"]
    assert rb["status"]["brokers"] == [{"id": 2, "state": "Drained", "message": "broker 2: "
                                        "Drained (no replica, leads nothing)"}]
    assert condition(rb, "BrokersDrained")["status"] == "True"
    assert "Drained" in events(env)


async def test_a_broker_left_holding_replicas_is_not_drained(env: Env) -> None:  # noqa: F811
    rb = await approved(env)
    await complete_steps(env, rb)
    assert rb["status"]["phase"] == "Failed"
    assert rb["status"]["brokers"][0] == {"id": 2, "state": "NotDrained", "message": HOLDS}
    degraded = condition(rb, "Degraded")
    assert (degraded["reason"], degraded["message"]) == (
        "NotDrained", f"{HOLDS}; annotate {ANNOTATION}=refresh for a proposal that moves the "
                      "rest")
    assert cluster(env).image.cordoned(2)  # still to drain: stays cordoned


async def test_reject_uncordons(env: Env) -> None:  # noqa: F811
    rb = await approved(env)
    rb["metadata"]["annotations"] = {ANNOTATION: "reject"}
    await env.d.call(rb, "reconcile")
    assert rb["status"]["phase"] == "Rejected"
    assert not cluster(env).image.cordoned(2)
    assert rb["status"]["brokers"][0]["state"] == "Draining"
    assert "Uncordoned" in events(env)


async def test_deleting_a_draining_rebalance_uncordons(env: Env) -> None:  # noqa: F811
    rb = await approved(env)
    await env.d.call(rb, "cleanup")
    assert not cluster(env).image.cordoned(2)
    assert "Uncordoned" in events(env)


async def test_unregister_waits_for_the_broker_to_stop(env: Env) -> None:  # noqa: F811
    rb = await approved(env, unregister=True)
    drain_broker_2(env)
    await complete_steps(env, rb)
    assert rb["status"]["phase"] == "Ready"
    await env.d.call(rb, "reconcile")
    assert rb["status"]["brokers"][0]["state"] == "WaitingForShutdown"
    assert "WaitingForShutdown" in events(env)
    c = cluster(env)
    c.fail_broker(2)
    run_until(c, lambda: any(b.id == 2 and b.fenced for b in c.describe_cluster().brokers))
    await env.d.call(rb, "reconcile")
    assert rb["status"]["brokers"][0]["state"] == "Unregistered"
    assert 2 not in [b.id for b in c.describe_cluster().brokers]
    assert condition(rb, "BrokersUnregistered")["status"] == "True"


async def test_a_cluster_that_is_not_open_keeps_the_phase_and_says_so(env: Env) -> None:  # noqa: F811
    rb = await approved(env)
    opened = env.d.rt.clusters.pop(("default", "demo"))
    await complete_steps(env, rb)
    assert rb["status"]["phase"] == "Rebalancing"
    degraded = condition(rb, "Degraded")
    assert (degraded["reason"], degraded["message"]) == (
        "ClusterUnavailable", "checking brokers [2]: KafkaCluster demo is not Ready; the next "
                              "pass tries again")
    env.d.rt.clusters[("default", "demo")] = opened
    drain_broker_2(env)
    await env.d.call(rb, "reconcile")
    assert rb["status"]["phase"] == "Ready"


async def test_a_controller_that_does_not_answer_keeps_the_phase(env: Env) -> None:  # noqa: F811
    rb = await approved(env, unregister=True)
    drain_broker_2(env)
    await complete_steps(env, rb)
    cluster(env).controller_available = False
    await env.d.call(rb, "reconcile")
    degraded = condition(rb, "Degraded")
    assert degraded["reason"] == "ClusterUnavailable"
    assert degraded["message"].startswith("describing the cluster: KafkaCluster demo: ")
    assert rb["status"]["brokers"][0]["state"] == "Drained"
    cluster(env).controller_available = True


async def test_an_unregister_the_guard_refuses_is_said(env: Env) -> None:  # noqa: F811
    """A broker fenced but holding a replica again (a move back by hand): not unregistered."""
    rb = await approved(env, unregister=True)
    drain_broker_2(env)
    await complete_steps(env, rb)
    c = cluster(env)
    tp = TopicPartition("orders", 0)
    assert c.alter_partition_reassignments({tp: [2, 1, 3]})[tp] == ApiResult(
        errors.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes broker 2, "
        "but all its log directories are cordoned.")
    c.set_cordoned({2: False})
    assert c.alter_partition_reassignments({tp: [2, 1, 3]})[tp].ok
    run_until(c, lambda: not c.list_partition_reassignments())
    c.fail_broker(2)
    run_until(c, lambda: any(b.id == 2 and b.fenced for b in c.describe_cluster().brokers))
    await env.d.call(rb, "reconcile")
    b = rb["status"]["brokers"][0]
    assert b["state"] == "Drained"
    assert b["message"].startswith("cannot unregister: broker 2 still holds orders-0 (replica)")
    assert "UnregisterFailed" in events(env)
    assert 2 in [x.id for x in c.describe_cluster().brokers]
