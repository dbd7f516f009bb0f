"""What a user relies on over an operation's life: deletion, edits mid-flight, warnings, and
the operator rules of issue 11 that a one-line change used to break without a failing test.

Real kopf against the kmock emulator over HTTP, embedded clusters in-process (harness.py).
Every wait polls with a deadline; nothing sleeps in place of the core.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness import Api, OperatorThread, cond_is, condition
from test_operator_kmock import CLUSTER, REF

from controller_core.metadata.controller import THROTTLE_RATE_KEYS
from controller_core.model import TopicPartition
from controller_core.orchestration.throttles import FOLLOWER_REPLICAS, LEADER_REPLICAS
from kraftsman.handlers import cluster as cluster_handlers
from kraftsman.handlers import reassignment as reassignment_handlers
from kraftsman.handlers.opstate import has_outbox

TO_NEW = [3, 4, 5]


def moves(*partitions: int) -> list[dict[str, Any]]:
    return [{"topic": "orders", "partition": p, "replicas": TO_NEW} for p in partitions]


async def ready(api: Api, name: str = "demo") -> None:
    await api.create("KafkaCluster", name, CLUSTER)
    await api.wait("KafkaCluster", name, cond_is("Ready", "True"))


async def on_cluster(op: OperatorThread, fn: Any, name: str = "demo") -> Any:
    return await op.rt.run(op.rt.clusters[("default", name)], fn)


def moving(o: dict[str, Any], n: int = 1) -> bool:
    return int((o.get("status") or {}).get("moving", 0)) >= n


def throttles(c: Any) -> dict[str, Any]:
    """Every throttle config the cluster holds: broker rates and topic replica lists."""
    brokers = c.describe_configs([("BROKER", str(b)) for b in range(6)])
    topic = c.describe_configs([("TOPIC", "orders")])[("TOPIC", "orders")]
    out = {f"broker {r[1]} {k}": v for r, cfg in brokers.items() for k, v in cfg.items()
           if k in THROTTLE_RATE_KEYS and v}
    out.update({k: topic[k] for k in (LEADER_REPLICAS, FOLLOWER_REPLICAS) if topic.get(k)})
    return out


# -- deleting a KafkaCluster ----------------------------------------------------------------------

async def test_finished_operations_do_not_block_deleting_the_cluster(
        api: Api, start_operator: Any) -> None:
    """Only active operations hold a KafkaCluster: a Completed reassignment and a Failed
    one-shot election do not (their index entries go when they finish)."""
    start_operator()
    await ready(api)
    await api.create("PartitionReassignment", "done", {**REF, "partitions": moves(0)})
    await api.wait("PartitionReassignment", "done", cond_is("Succeeded", "True"), timeout=60)
    await api.create("LeaderElection", "bad", {**REF, "topics": ["nosuch"]})
    await api.wait("LeaderElection", "bad", cond_is("Succeeded", "False"))
    await api.delete("KafkaCluster", "demo")
    await api.wait_gone("KafkaCluster", "demo", timeout=60)
    assert await api.get("PartitionReassignment", "done") is not None  # left as they were


class PassGate:
    """Holds a reconcile pass inside ``fn`` (in its worker thread, under the cluster's lock)
    until released: a pass in flight at a chosen moment. Only the first call is held."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn, self.entered, self.released = fn, threading.Event(), threading.Event()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.entered.is_set():
            self.entered.set()
            self.released.wait(30)  # bounded: a broken test fails instead of hanging
        return self.fn(*args, **kwargs)

    async def wait_entered(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, 30), "no pass reached the gate"


def when_called(fn: Callable[..., Any], seen: threading.Event) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        seen.set()
        return fn(*args, **kwargs)
    return wrapper


# kopf polls a timer that is still running when its resource is deleted every
# settings.background.cancellation_polling seconds (kopf's default: 60) and keeps the
# finalizer meanwhile; a pass that writes nothing afterwards wakes nobody earlier.
PROMPTLY = 30.0


async def test_a_cluster_deleted_while_its_pass_runs_goes_away_when_the_pass_ends(
        api: Api, start_operator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deletion arrives while the KafkaCluster's reconcile pass is in flight (likely on a
    loaded machine, or with a slow real cluster); that pass changes nothing in the status, so
    no event follows it. The cluster must still go as soon as the pass has ended."""
    op = start_operator()
    await ready(api)
    gate = PassGate(cluster_handlers.figures)
    monkeypatch.setattr(cluster_handlers, "figures", gate)
    await gate.wait_entered()
    tearing_down = threading.Event()
    monkeypatch.setattr(op.rt, "close_cluster", when_called(op.rt.close_cluster, tearing_down))
    await api.delete("KafkaCluster", "demo")
    # teardown runs after kopf asked the timer to stop (and found it still running)
    assert await asyncio.to_thread(tearing_down.wait, 30), "teardown never ran"
    gate.released.set()
    await api.wait_gone("KafkaCluster", "demo", timeout=PROMPTLY)
    assert ("default", "demo") not in op.rt.clusters


async def test_a_reassignment_deleted_while_its_pass_runs_goes_away_when_the_pass_ends(
        api: Api, start_operator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """As above for a PartitionReassignment with moves in flight, which the KafkaCluster's
    teardown waits for. The embedded cluster's clock stands still (time scale 0), so its
    passes change nothing — as under load at 0.01x, when the cluster's own pass had not run
    between two of the reassignment's. Deleted mid-pass, its rollback runs after the pass,
    and it goes; then the cluster can go too."""
    op = start_operator(time_scale=0.0)
    await ready(api)
    await api.create("PartitionReassignment", "move", {**REF, "partitions": moves(0)})
    await api.wait("PartitionReassignment", "move", lambda o: moving(o) and not has_outbox(
        o["status"]))  # its Events posted: the passes write nothing more
    gate = PassGate(reassignment_handlers.fill_progress)
    monkeypatch.setattr(reassignment_handlers, "fill_progress", gate)
    await gate.wait_entered()
    rolling_back = threading.Event()
    run = op.rt.run

    async def watched_run(opened: Any, fn: Callable[[Any], Any]) -> Any:
        if ".rollback." in fn.__qualname__:
            rolling_back.set()
        return await run(opened, fn)

    monkeypatch.setattr(op.rt, "run", watched_run)
    await api.delete("PartitionReassignment", "move")
    assert await asyncio.to_thread(rolling_back.wait, 30), "the rollback never ran"
    gate.released.set()
    await api.wait_gone("PartitionReassignment", "move", timeout=PROMPTLY)
    await api.delete("KafkaCluster", "demo")
    await api.wait_gone("KafkaCluster", "demo", timeout=PROMPTLY)



async def test_moves_in_flight_finish_while_the_cluster_deletion_waits_for_them(
        api: Api, start_operator: Any) -> None:
    """A deleted KafkaCluster waits for the reassignment that uses it, so that reassignment
    must be able to finish: kopf runs no timer for a resource being deleted, and the
    embedded cluster's clock would stand still with the move half done."""
    start_operator(time_scale=5.0)  # 60 MB at 10 MB/s: ~1.2 s of wall time
    await ready(api)
    await api.create("PartitionReassignment", "move", {**REF, "partitions": moves(0)})
    await api.wait("PartitionReassignment", "move", moving)
    await api.delete("KafkaCluster", "demo")
    await api.wait("KafkaCluster", "demo", cond_is("Ready", "False", "InUse"))
    done = await api.wait("PartitionReassignment", "move", cond_is("Succeeded", "True"),
                          timeout=PROMPTLY)
    assert done["status"]["done"] == 1
    await api.wait_gone("KafkaCluster", "demo", timeout=PROMPTLY)


async def test_after_a_restart_a_cluster_whose_deletion_waits_still_serves_its_operations(
        api: Api, start_operator: Any, tmp_path: Path) -> None:
    """The operator restarts while a KafkaCluster's deletion waits for a reassignment in
    flight. No timer opens a cluster being deleted, so the new operator must open it for
    the reassignment: deleted now, it is rolled back (not skipped) and goes, then the
    cluster goes."""
    first = start_operator(state_dir=tmp_path / "volume", time_scale=0.01)
    await ready(api)
    await api.create("PartitionReassignment", "move", {**REF, "partitions": moves(0)})
    await api.wait("PartitionReassignment", "move", moving)
    await api.delete("KafkaCluster", "demo")
    await api.wait("KafkaCluster", "demo", cond_is("Ready", "False", "InUse"))
    await first.astop()
    start_operator(state_dir=tmp_path / "volume", time_scale=0.01)
    await api.delete("PartitionReassignment", "move")
    await api.wait_gone("PartitionReassignment", "move", timeout=PROMPTLY)
    events = await api.wait_events("move", "Cancelled")
    assert "RollbackSkipped" not in {e["reason"] for e in events}
    await api.wait_gone("KafkaCluster", "demo", timeout=PROMPTLY)

# -- edits while a reassignment runs --------------------------------------------------------------

async def test_a_partition_dropped_mid_flight_is_cancelled_and_its_throttles_removed(
        api: Api, start_operator: Any) -> None:
    op = start_operator(time_scale=0.5)
    await ready(api)
    await api.create("PartitionReassignment", "move", {
        **REF, "partitions": moves(0, 1), "maxConcurrentMoves": 2,
        "throttleBytesPerSecond": 1_000_000})
    await api.wait("PartitionReassignment", "move", lambda o: moving(o, 2))
    before = await on_cluster(op, throttles)
    assert "1:3" in before[FOLLOWER_REPLICAS]  # orders-1's adding replica is throttled
    await api.set_spec("PartitionReassignment", "move", {"partitions": moves(0)})

    async def dropped_gone() -> tuple[Any, Any]:
        ongoing = await on_cluster(op, lambda c: c.list_partition_reassignments())
        return ongoing, await on_cluster(op, throttles)

    deadline = asyncio.get_running_loop().time() + 30
    while True:
        ongoing, now = await dropped_gone()
        entries = ",".join(str(now.get(k, "")) for k in (LEADER_REPLICAS, FOLLOWER_REPLICAS))
        if TopicPartition("orders", 1) not in ongoing and "1:" not in entries:
            break
        assert asyncio.get_running_loop().time() < deadline, (ongoing, now)
        await asyncio.sleep(0.1)
    d = await on_cluster(op, lambda c: c.describe_partitions(topics=["orders"])[1])
    # rolled back to the replicas it had; Kafka 4.4 keeps the removing ones sorted while a
    # move runs, so the order may differ (KIP-455), as tests/cli/test_cli.py says
    assert sorted(d.replicas) == [0, 1, 2]
    assert TopicPartition("orders", 0) in ongoing  # the partition still named moves on


async def test_cluster_ref_changed_mid_move_is_refused_and_nothing_moves_elsewhere(
        api: Api, start_operator: Any) -> None:
    """Without the CRD's CEL rule (the emulator has none) the handler refuses it too."""
    op = start_operator(time_scale=0.1)
    await ready(api)
    await ready(api, "other")
    await api.create("PartitionReassignment", "move", {**REF, "partitions": moves(0)})
    await api.wait("PartitionReassignment", "move", moving)
    await api.set_spec("PartitionReassignment", "move", {"clusterRef": {"name": "other"}})
    obj = await api.wait("PartitionReassignment", "move",
                         cond_is("Degraded", "True", "ClusterRefChanged"))
    msg = condition(obj, "Degraded")["message"]
    assert "spec.clusterRef.name" in msg and "'demo'" in msg and "delete" in msg
    assert await on_cluster(op, lambda c: c.list_partition_reassignments(), "other") == {}
    assert await on_cluster(op, lambda c: c.list_partition_reassignments()) != {}


async def test_replication_factor_change_and_absurd_throttle_are_warned(
        api: Api, start_operator: Any) -> None:
    start_operator(time_scale=0.1)
    await ready(api)
    await api.create("PartitionReassignment", "odd", {**REF, "partitions": [
        {"topic": "orders", "partition": 0, "replicas": [3, 4]}],
        "throttleBytesPerSecond": 1})
    obj = await api.wait("PartitionReassignment", "odd", moving)
    warnings = obj["status"]["warnings"]
    assert any("replication factor" in w and "spec.partitions[0] (orders-0) 3 -> 2" in w
               for w in warnings), warnings
    assert any(w.startswith("spec.throttleBytesPerSecond: 1 B/s") and "days" in w
               for w in warnings), warnings
    assert "replication factor" in condition(obj, "Progressing")["message"]
    events = await api.wait_events("odd", "PlanWarning")
    kinds = [(e["type"], e["message"][:20]) for e in events if e["reason"] == "PlanWarning"]
    assert len(kinds) == 2 and all(t == "Warning" for t, _ in kinds)


@pytest.mark.parametrize("throttle", [-5, 0, 2**63])
async def test_a_throttle_the_brokers_would_refuse_moves_nothing(
        api: Api, start_operator: Any, throttle: int) -> None:
    """Without the CRD's minimum/maximum (the emulator checks no schema) the operator refuses
    the spec itself: Degraded naming the field and the fix, and not a replica or a throttle
    placed — the brokers (a Kafka LONG, atLeast(0)) would refuse the rate only after the
    moves had started unthrottled."""
    op = start_operator(time_scale=0.1)
    await ready(api)
    await api.create("PartitionReassignment", "bad", {
        **REF, "partitions": moves(0), "throttleBytesPerSecond": throttle})
    obj = await api.wait("PartitionReassignment", "bad",
                         cond_is("Degraded", "True", "InvalidSpec"))
    assert condition(obj, "Succeeded")["status"] == "False"
    msg = condition(obj, "Degraded")["message"]
    assert msg.startswith("spec.throttleBytesPerSecond: Input should be"), msg
    assert msg.endswith("; give a whole number of bytes per second from 1 to "
                        "9223372036854775807, or leave the field out for no throttle"), msg
    assert await on_cluster(op, lambda c: c.list_partition_reassignments()) == {}
    assert await on_cluster(op, throttles) == {}


async def test_a_rebalance_with_a_throttle_the_brokers_would_refuse_is_invalid(
        api: Api, start_operator: Any) -> None:
    """Its proposal's PartitionReassignments would carry the throttle: refused before a
    planner Job is started."""
    start_operator()
    await ready(api)
    await api.create("KafkaRebalance", "rb", {**REF, "throttleBytesPerSecond": 2**63})
    obj = await api.wait("KafkaRebalance", "rb", cond_is("Degraded", "True", "InvalidSpec"))
    assert obj["status"]["phase"] == "Invalid"
    msg = condition(obj, "Degraded")["message"]
    assert "spec.throttleBytesPerSecond: Input should be less than or equal to " \
        "9223372036854775807; give a whole number of bytes per second from 1 to " \
        "9223372036854775807, 0 for none, or leave the field out for the default " \
        "50000000" in msg, msg
    async with api.session.get(f"{api.base}/apis/batch/v1/jobs") as r:
        assert (await r.json()).get("items") == []  # no planner Job


# -- what the status says -------------------------------------------------------------------------

async def test_a_healthy_move_is_not_under_replicated_and_rows_carry_replicas_and_bytes(
        api: Api, start_operator: Any) -> None:
    """KIP-352: URP counts |original replicas| - |ISR| > 0; adding replicas catching up
    do not make a partition under-replicated."""
    start_operator(time_scale=2.0)
    await ready(api)
    await api.create("PartitionReassignment", "move", {**REF, "partitions": moves(0, 1),
                                                       "maxConcurrentMoves": 1})
    obj = await api.wait("PartitionReassignment", "move", lambda o: moving(o) and any(
        (r.get("bytesMoved") or 0) > 0 for r in o["status"].get("partitions", [])))
    [row] = [r for r in obj["status"]["partitions"] if r["state"] == "Moving"]
    assert row["addingReplicas"] == TO_NEW and row["targetReplicas"] == TO_NEW
    assert sorted(row["currentReplicas"]) == [0, 1, 2, 3, 4, 5]
    assert row["removingReplicas"] and row["bytesToMove"] == 3 * 20_000_000
    assert 0 < row["bytesMoved"] <= row["bytesToMove"]
    kc = await api.wait("KafkaCluster", "demo", lambda o: "lastReconcileTime" in o["status"])
    assert kc["status"]["underReplicatedPartitions"] == 0
    assert "0 under-replicated" in condition(kc, "Ready")["message"]
    done = await api.wait("PartitionReassignment", "move", cond_is("Succeeded", "True"),
                          timeout=60)
    assert done["status"]["batchesCompleted"] == 2  # one partition at a time
    assert done["status"]["lastReconcileTime"]


# -- issue 11: the operator rules ----------------------------------------------------------------

async def test_a_failed_reassignment_is_degraded(api: Api, start_operator: Any) -> None:
    """Another tool re-targets a partition mid-move (kafka-reassign-partitions would): the
    executor leaves it alone and fails it; the resource is Degraded, not just not Succeeded."""
    op = start_operator(time_scale=0.1)
    await ready(api)
    await api.create("PartitionReassignment", "move", {**REF, "partitions": moves(0)})
    await api.wait("PartitionReassignment", "move", moving)
    await on_cluster(op, lambda c: c.alter_partition_reassignments(
        {TopicPartition("orders", 0): [3, 4, 2]}))
    obj = await api.wait("PartitionReassignment", "move", cond_is("Succeeded", "False",
                                                                  "Failed"))
    deg = condition(obj, "Degraded")
    assert deg["status"] == "True" and deg["reason"] == "PartitionsFailed"
    assert "status.partitions" in deg["message"]
    assert obj["status"]["partitions"][0]["state"] == "Failed"


async def test_the_finalizer_holds_until_the_moves_can_be_rolled_back(
        api: Api, start_operator: Any) -> None:
    """A rollback KAFKA-14424 refuses (no original replica alive and in sync) keeps the
    deleted reassignment — and its finalizer — until the originals are back
    (ReplicationControlManager refuses such a cancellation with ELIGIBLE_LEADERS_NOT_AVAILABLE)."""
    op = start_operator(time_scale=0.05)
    await ready(api)
    await api.create("PartitionReassignment", "move", {**REF, "partitions": moves(0),
                                                       "throttleBytesPerSecond": 1000})
    await api.wait("PartitionReassignment", "move", moving)
    for b in (0, 1, 2):
        await on_cluster(op, lambda c, b=b: c.fail_broker(b))
    await on_cluster(op, lambda c: c.advance(30))  # fenced: out of the ISR
    await api.delete("PartitionReassignment", "move")
    # Several rollback attempts pass (each pass refused); the object stays, still moving.
    deadline = asyncio.get_running_loop().time() + 3
    while asyncio.get_running_loop().time() < deadline:
        obj = await api.get("PartitionReassignment", "move")
        assert obj is not None and "kraftsman.io/finalizer" in obj["metadata"]["finalizers"]
        await asyncio.sleep(0.2)
    assert TopicPartition("orders", 0) in await on_cluster(
        op, lambda c: c.list_partition_reassignments())
    for b in (0, 1, 2):
        await on_cluster(op, lambda c, b=b: c.restore_broker(b))
    await on_cluster(op, lambda c: c.advance(30))  # back in sync
    await api.wait_gone("PartitionReassignment", "move", timeout=60)
    assert await on_cluster(op, lambda c: c.list_partition_reassignments()) == {}
    d = await on_cluster(op, lambda c: c.describe_partitions(topics=["orders"])[0])
    assert d.replicas == (0, 1, 2)


async def rolling_restart_of_broker_0(op: OperatorThread) -> None:
    """Broker 0 goes away long enough to be fenced and comes back: orders-0 and orders-3,
    which it led, now have other leaders."""
    await on_cluster(op, lambda c: c.fail_broker(0))
    await on_cluster(op, lambda c: c.advance(30))
    await on_cluster(op, lambda c: c.restore_broker(0))
    await on_cluster(op, lambda c: c.advance(30))


async def test_a_one_shot_election_is_not_run_again_after_a_restart(
        api: Api, start_operator: Any, kmock: Any, tmp_path: Path) -> None:
    """The result and the digest of the spec it ran for are one status write. Here the API
    server refuses its Events at first, so the passes after the election (retrying them) and
    a restarted operator run on it: they see that this spec was elected and do not elect
    again. Nothing of the election is on the state volume (which keeps only the embedded
    cluster itself)."""
    first = start_operator(state_dir=tmp_path / "a")
    await ready(api)
    await rolling_restart_of_broker_0(first)
    kmock.refuse_events = True
    await api.create("LeaderElection", "pref", {**REF, "partitions": [
        {"topic": "orders", "partition": 0}]})
    obj = await api.wait("LeaderElection", "pref", cond_is("Succeeded", "True"))
    assert obj["status"]["counts"]["elected"] == 1
    await rolling_restart_of_broker_0(first)  # orders-0 is off its preferred leader again
    d = await on_cluster(first, lambda c: c.describe_partitions(topics=["orders"])[0])
    assert d.leader != 0
    await asyncio.sleep(3 * first.rt.tick)  # passes retry the Events (refused) meanwhile
    await first.astop()
    assert not (tmp_path / "a" / "operations").exists()
    assert await api.events("pref") == []
    kmock.refuse_events = False
    second = start_operator(state_dir=tmp_path / "a")
    await ready_again(api, second)
    await api.wait_events("pref", "Completed", "LeaderChanged")
    # The operator acts on the election on events (start, retries); give a repeat time to
    # show: well over the retry delay of a pass.
    await asyncio.sleep(10 * second.rt.tick)
    events = await api.events("pref")
    assert sorted(e["reason"] for e in events) == ["Completed", "LeaderChanged"]
    again = await api.get("LeaderElection", "pref")
    assert again is not None and again["status"]["completedAt"] == obj["status"]["completedAt"]
    assert again["status"]["counts"] == obj["status"]["counts"]
    d = await on_cluster(second, lambda c: c.describe_partitions(topics=["orders"])[0])
    assert d.leader != 0  # not elected again


async def ready_again(api: Api, op: OperatorThread) -> None:
    deadline = asyncio.get_running_loop().time() + 30
    while ("default", "demo") not in op.rt.clusters:
        assert asyncio.get_running_loop().time() < deadline, "the cluster was not re-opened"
        await asyncio.sleep(0.1)


async def test_an_election_with_failed_partitions_is_not_succeeded(
        api: Api, start_operator: Any) -> None:
    """kafka-leader-election exits non-zero when a partition fails
    (LeaderElectionCommand: "Error completing leader election"); so is the resource."""
    op = start_operator()
    await ready(api)
    await rolling_restart_of_broker_0(op)
    await on_cluster(op, lambda c: c.fail_broker(0))  # orders-0's preferred leader is gone
    await on_cluster(op, lambda c: c.advance(30))  # ... and fenced
    await api.create("LeaderElection", "pref", {**REF, "topics": ["orders"]})
    obj = await api.wait("LeaderElection", "pref", lambda o: (o.get("status") or {}).get(
        "phase") in ("Completed", "Failed"))
    assert obj["status"]["phase"] == "Failed" and obj["status"]["failed"] >= 1
    assert cond_is("Succeeded", "False", "ElectionFailed")(obj)
    failed = [r for r in obj["status"]["results"] if r["result"] == "Failed"]
    assert failed[0]["error"] == "PREFERRED_LEADER_NOT_AVAILABLE"
    events = await api.wait_events("pref", "ElectionFailed")
    assert "Completed" not in [e["reason"] for e in events]
