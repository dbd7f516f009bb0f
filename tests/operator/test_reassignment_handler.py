"""The PartitionReassignment handlers' rules, called in-process (handler_driver.py): phases,
conditions and their messages, milestone Events, throttle warnings, re-targets, cancel and
the rollback on delete. test_operator_kmock.py runs the same handlers under kopf."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kopf
import pytest
from handler_driver import CLUSTER, REF, Driver, condition, deliver_events, outbox

from controller_core import errors
from controller_core.errors import ApiResult
from controller_core.model import TopicPartition
from controller_core.orchestration.reassignment import METADATA_PROPAGATION_MS
from kraftsman.handlers import reassignment as reassignment_handlers
from kraftsman.handlers.opstate import saved_state
from kraftsman.reconcile import plan_of
from tests.helpers import configs_in

MOVES = [{"topic": "orders", "partition": p, "replicas": [3, 4, 5]} for p in range(6)]
TP0 = TopicPartition("orders", 0)


@pytest.fixture
async def d(tmp_path: Path) -> Driver:
    drv = Driver(tmp_path)
    await drv.ready_cluster()
    return drv


async def run_until(d: Driver, obj: dict[str, Any], phases: set[str], limit: int = 40) -> None:
    for _ in range(limit):
        await d.tick(obj)
        if obj["status"].get("phase") in phases:
            return
    raise AssertionError(f"never reached {phases}: {obj['status']}")


def conds(obj: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"])
            for c in obj["status"]["conditions"]}


async def test_a_reassignment_moves_in_batches_and_completes_with_its_milestones(
        d: Driver) -> None:
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES,
                                                    "maxConcurrentMoves": 2})
    await d.tick(pr)
    st = pr["status"]
    assert (st["phase"], st["moving"], st["done"], st["cluster"]) == ("Moving", 2, 0, "demo")
    assert conds(pr) == {
        "Succeeded": ("Unknown", "InProgress", "2 moving, 0 done, 4 pending of 6"),
        "Progressing": ("True", "Moving", "2 moving, 0 done, 4 pending of 6"),
        "Degraded": ("False", "AsExpected", "")}
    assert st["counts"] == {"total": 6, "done": 0, "moving": 2, "pending": 4, "failed": 0,
                            "cancelled": 0}
    assert st["startedAt"] and "completedAt" not in st and st["batchesCompleted"] == 0
    assert st["bytesToMove"] == 18_000_000 and st["percent"] == 0.0 and st["progress"] == "0%"
    rows = {r["partition"]: r for r in st["partitions"]}
    assert set(rows) == {0, 1} and st["partitionsOmitted"] == 4
    assert rows[0]["addingReplicas"] == [3, 4, 5] and rows[0]["removingReplicas"] == [0, 1, 2]
    assert rows[0]["currentReplicas"] == [0, 1, 2, 3, 4, 5]
    assert rows[0]["targetReplicas"] == [3, 4, 5] and rows[0]["state"] == "Moving"
    assert rows[0]["bytesToMove"] == 3_000_000 and rows[0]["bytesMoved"] == 0
    await d.tick(pr, 0.5)  # half-way through the first batch: the copied bytes show per row
    row = {r["partition"]: r for r in pr["status"]["partitions"]}[0]
    assert 0 < row["bytesMoved"] < row["bytesToMove"] == 3_000_000
    assert row["currentReplicas"] == [0, 1, 2, 3, 4, 5] and "error" not in row
    await run_until(d, pr, {"Completed"})
    st = pr["status"]
    msg = "6 partitions moved (18000000 bytes)"
    assert conds(pr) == {"Succeeded": ("True", "Completed", msg),
                         "Progressing": ("False", "Completed", msg),
                         "Degraded": ("False", "AsExpected", "")}
    assert (st["done"], st["moving"], st["percent"], st["progress"]) == (6, 0, 100.0, "100%")
    assert st["batchesCompleted"] == 3 and st["completedAt"] and st["partitions"] == []
    assert st["observedGeneration"] == 1
    assert outbox(pr) == [
        ("Started", "reassignment of 6 partitions started (18000000 bytes to move)", False),
        ("BatchDone", "2/6 partitions moved", False),
        ("BatchDone", "4/6 partitions moved", False), ("Completed", msg, False)]
    leaders = d.rt.clusters[("default", "demo")].cluster.describe_partitions()
    assert {tuple(p.replicas) for p in leaders} == {(3, 4, 5)}


async def test_progress_mid_move_sums_the_rows_bytes_and_rounds_to_a_tenth(d: Driver) -> None:
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES,
                                                    "maxConcurrentMoves": 6,
                                                    "throttleBytesPerSecond": 700_000})
    await d.tick(pr)
    await d.tick(pr, 0.35)
    st = pr["status"]
    rows = st["partitions"]
    assert (len(rows), st["partitionsOmitted"], st["moving"]) == (6, 0, 6)
    assert sum(r["bytesMoved"] for r in rows) == st["bytesMoved"] > 0
    assert all(r["bytesMoved"] == rows[0]["bytesMoved"] for r in rows)  # the same throttle
    # 0.35 s at the 700,000 B/s throttle into each of brokers 3, 4 and 5 (whole messages)
    assert st["bytesMoved"] == 734_994
    assert st["percent"] == round(100 * st["bytesMoved"] / 18_000_000, 1) == 4.1
    assert st["progress"] == "4.1%"
    assert st["etaSeconds"] == 8.2  # 17,265,006 bytes left at 2.1 MB/s, to a tenth


async def test_a_move_that_keeps_some_replicas_adds_and_removes_only_the_others(
        d: Driver) -> None:
    """As Kafka's PartitionReassignmentReplicas: adding = target - original, removing =
    original - target, and the replica set while moving is the original plus the adding."""
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": [
        {"topic": "orders", "partition": 0, "replicas": [0, 1, 3]}]})
    await d.tick(pr)
    await d.tick(pr, 0.5)
    (row,) = pr["status"]["partitions"]
    assert (row["currentReplicas"], row["targetReplicas"]) == ([0, 1, 2, 3], [0, 1, 3])
    assert (row["addingReplicas"], row["removingReplicas"]) == ([3], [2])
    copied = d.rt.clusters[("default", "demo")].cluster.replica_log_sizes([(TP0, 3)])
    assert row["bytesToMove"] == 1_000_000 and row["bytesMoved"] == copied[(TP0, 3)] > 0


async def test_a_restarted_operator_still_reports_a_partition_that_failed_before(
        d: Driver, tmp_path: Path) -> None:
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES[:2],
                                                    "throttleBytesPerSecond": 50_000})
    await d.tick(pr)
    cluster = d.rt.clusters[("default", "demo")].cluster
    cluster.alter_partition_reassignments({TP0: None})  # someone cancels one move
    await d.tick(pr, 0.1)  # (a broker trailing the controller could show the same a while)
    assert (pr["status"]["phase"], pr["status"]["counts"]["failed"]) == ("Moving", 0)
    await d.tick(pr, METADATA_PROPAGATION_MS / 1000)
    assert (pr["status"]["phase"], pr["status"]["counts"]["failed"]) == ("Moving", 1)
    d.exit()
    fresh = Driver(tmp_path)  # a new operator process: the executor is rebuilt from status
    fresh.objects, fresh.now = d.objects, d.now
    await fresh.tick(pr, 0.1)
    st = pr["status"]
    assert (st["phase"], st["counts"]["failed"], st["counts"]["moving"]) == ("Moving", 1, 1)
    failed = [r for r in st["partitions"] if r["state"] == "Failed"]
    assert [(r["partition"], r["error"], r["addingReplicas"]) for r in failed] == [
        (0, "REASSIGNMENT_FAILED", [])]
    assert "orders-0: the move ended outside kraftsman" in failed[0]["message"]


async def test_a_pass_reads_the_copies_sizes_once(
        d: Driver, monkeypatch: pytest.MonkeyPatch) -> None:
    """The executor's pass reads the adding replicas' sizes (DescribeLogDirs on Kafka, of
    every broker receiving one); the rows' bytes and the stall watch use that read. Before,
    a pass asked three times: for the done count, for the pass, for the rows."""
    cluster = d.rt.clusters[("default", "demo")].cluster
    sizes = cluster.replica_log_sizes
    asked: list[int] = []

    def counted(replicas: Any) -> dict[Any, int]:
        asked.append(1)
        return sizes(replicas)

    monkeypatch.setattr(cluster, "replica_log_sizes", counted)
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES[:2]})
    await d.tick(pr)
    asked.clear()
    await d.tick(pr, 0.5)
    assert pr["status"]["phase"] == "Moving" and len(asked) == 1
    rows = pr["status"]["partitions"]
    assert rows and all(r["bytesMoved"] > 0 for r in rows), rows


async def test_a_replica_without_a_log_yet_counts_as_nothing_copied(
        d: Driver, monkeypatch: pytest.MonkeyPatch) -> None:
    """DescribeLogDirs (the kafka backend) leaves out a replica whose broker has not created
    its log yet; its row counts the other adding replicas' bytes."""
    cluster = d.rt.clusters[("default", "demo")].cluster
    sizes = cluster.replica_log_sizes

    def no_log_on_broker_5(replicas: Any) -> dict[Any, int]:
        return {k: v for k, v in sizes(replicas).items() if k[1] != 5}

    monkeypatch.setattr(cluster, "replica_log_sizes", no_log_on_broker_5)
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES[:1]})
    await d.tick(pr)
    await d.tick(pr, 0.5)
    (row,) = pr["status"]["partitions"]
    copied = sizes([(TP0, 3), (TP0, 4)])
    assert row["addingReplicas"] == [3, 4, 5]
    assert row["bytesMoved"] == copied[(TP0, 3)] + copied[(TP0, 4)] > 0


async def test_a_finished_reassignment_writes_nothing_more(d: Driver) -> None:
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES[:1]})
    await run_until(d, pr, {"Completed"})
    before = dict(pr["status"])
    await d.tick(pr, 5.0)
    assert pr["status"] == before  # same state revision, no milestone again
    assert [r for r, _, _ in outbox(pr)].count("Completed") == 1


async def test_preferred_leaders_are_elected_after_the_moves(d: Driver) -> None:
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES,
                                                    "electPreferredLeaders": True})
    await run_until(d, pr, {"Completed"})
    # The leaders moved with the replicas: the election finds nothing to do, and says so.
    assert condition(pr, "Succeeded")["message"] == (
        "6 partitions moved (18000000 bytes); 0 preferred leaders elected")
    parts = d.rt.clusters[("default", "demo")].cluster.describe_partitions()
    assert {p.leader for p in parts} == {3}


async def test_an_invalid_spec_names_the_field(d: Driver) -> None:
    pr = d.create("PartitionReassignment", "bad", {**REF, "partitions": [
        {"topic": "orders", "partition": 0, "replicas": "three"}]})
    await d.tick(pr)
    assert pr["status"]["phase"] == "Invalid"
    deg = condition(pr, "Degraded")
    assert (deg["status"], deg["reason"]) == ("True", "InvalidSpec")
    assert deg["message"].startswith("spec.partitions[0].replicas")
    assert condition(pr, "Succeeded")["reason"] == "InvalidSpec"
    assert condition(pr, "Succeeded")["message"] == "the spec is invalid"


async def test_an_unknown_cluster_is_named_with_the_fix(d: Driver) -> None:
    pr = d.create("PartitionReassignment", "move", {"clusterRef": {"name": "nope"},
                                                    "partitions": MOVES})
    await d.tick(pr)
    assert pr["status"]["phase"] == "Invalid" and pr["status"]["cluster"] == "nope"
    assert conds(pr)["Degraded"] == (
        "True", "UnknownCluster",
        "spec.clusterRef.name: no KafkaCluster 'nope' in namespace default; create it or fix "
        "the name")
    assert saved_state(pr["status"]) is not None


async def test_a_cluster_not_ready_yet_is_waited_for(tmp_path: Path) -> None:
    d = Driver(tmp_path)
    d.create("KafkaCluster", "demo", {"embedded": {"brokers": [{"id": 0}]}})  # no pass yet
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES})
    await d.call(pr, "reconcile")
    assert pr["status"]["phase"] == "Pending"
    assert conds(pr)["Progressing"] == ("True", "WaitingForCluster",
                                        "KafkaCluster demo is not Ready yet")
    assert conds(pr)["Succeeded"] == ("Unknown", "Pending", "not started")
    assert conds(pr)["Degraded"] == ("False", "AsExpected", "")


async def test_a_spec_is_parsed_and_planned_once_per_generation(
        d: Driver, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 100,000-partition spec is not validated and planned again on every pass."""
    planned: list[int] = []

    def counting_plan_of(spec: Any, **kw: Any) -> Any:
        planned.append(len(spec.partitions))
        return plan_of(spec, **kw)

    monkeypatch.setattr(reassignment_handlers, "plan_of", counting_plan_of)
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES,
                                                    "throttleBytesPerSecond": 1})
    for _ in range(3):
        await d.tick(pr)
    assert pr["status"]["phase"] == "Moving" and planned == [6]
    d.set_spec(pr, {"throttleBytesPerSecond": 2})  # a new generation: parsed again
    await d.tick(pr)
    await d.tick(pr)
    assert planned == [6, 6]


async def test_a_plan_the_cluster_refuses_names_each_partition(d: Driver) -> None:
    moves = [{"topic": "orders", "partition": p, "replicas": [3, 4, 99]} for p in range(6)]
    pr = d.create("PartitionReassignment", "bad", {**REF, "partitions": moves})
    await d.tick(pr)
    assert pr["status"]["phase"] == "Invalid"
    status, reason, message = conds(pr)["Degraded"]
    assert (status, reason) == ("True", "InvalidReplicaAssignment")
    assert message.startswith("spec.partitions[0] (orders-0): ")
    assert "[INVALID_REPLICA_ASSIGNMENT]" in message
    assert message.endswith(" (and 1 more); fix the plan")
    assert message.count("spec.partitions[") == 5 and "spec.partitions[4]" in message
    assert conds(pr)["Succeeded"] == ("False", "InvalidPlan", "the plan is invalid")


async def test_a_dry_run_reports_the_plan_once_and_moves_nothing(d: Driver) -> None:
    pr = d.create("PartitionReassignment", "review", {
        **REF, "partitions": MOVES, "dryRun": True, "throttleBytesPerSecond": 1_000_000})
    await d.tick(pr)
    st = pr["status"]
    assert st["phase"] == "DryRunComplete"
    assert st["plan"] == {"replicaMovements": 18, "leaderMovements": 6,
                          "bytesToMove": 18_000_000, "estimatedSeconds": 6.0,
                          "brokersAdded": [3, 4, 5], "brokersRemoved": []}
    msg = ("dry run: 6 partitions would move (18 replicas, 18000000 bytes, ~6s at the "
           "throttle), 6 leader moves; nothing was moved")
    assert conds(pr) == {"Succeeded": ("True", "DryRunComplete", msg),
                         "Progressing": ("False", "DryRunComplete", msg),
                         "Degraded": ("False", "AsExpected", "")}
    assert outbox(pr) == [("DryRunComplete", msg, False)]
    state = saved_state(st)
    assert state is not None and state["dryRun"] is True and state["cluster"] == "demo"
    await d.tick(pr)
    assert outbox(pr) == [("DryRunComplete", msg, False)]  # reviewed already: not again
    assert d.rt.clusters[("default", "demo")].cluster.list_partition_reassignments() == {}
    d.set_spec(pr, {"partitions": MOVES[:1]})  # a new plan to review
    await d.tick(pr)
    assert [r for r, _, _ in outbox(pr)] == ["DryRunComplete", "DryRunComplete"]
    assert pr["status"]["plan"]["replicaMovements"] == 3


async def test_a_dry_run_without_a_throttle_says_unthrottled(d: Driver) -> None:
    pr = d.create("PartitionReassignment", "review", {**REF, "dryRun": True,
                                                      "partitions": MOVES[:1]})
    await d.tick(pr)
    assert pr["status"]["plan"]["estimatedSeconds"] is None
    assert conds(pr)["Succeeded"] == ("True", "DryRunComplete", "dry run: 1 partition would "
                                      "move (3 replicas, 3000000 bytes, unthrottled), 1 leader "
                                      "moves; nothing was moved")


async def test_a_dry_run_of_a_refused_plan_is_invalid(d: Driver) -> None:
    pr = d.create("PartitionReassignment", "review", {**REF, "dryRun": True, "partitions": [
        {"topic": "orders", "partition": 0, "replicas": [3, 4, 99]}]})
    await d.tick(pr)
    assert pr["status"]["phase"] == "Invalid"
    assert conds(pr)["Degraded"][1] == "InvalidPlan"
    assert conds(pr)["Degraded"][2].startswith("spec.partitions[0] (orders-0): ")
    assert conds(pr)["Succeeded"] == ("False", "InvalidPlan", "the plan is invalid")
    assert outbox(pr) == []


async def test_cancelled_before_it_started_moves_nothing(d: Driver) -> None:
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES, "cancel": True})
    await d.tick(pr)
    assert pr["status"]["phase"] == "Cancelled"
    assert conds(pr)["Succeeded"] == ("False", "Cancelled", "cancelled before it started")
    assert conds(pr)["Progressing"] == ("False", "Cancelled", "")
    assert d.rt.clusters[("default", "demo")].cluster.list_partition_reassignments() == {}


async def test_cancel_in_flight_rolls_back_and_says_how_many(d: Driver) -> None:
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES,
                                                    "maxConcurrentMoves": 2})
    await d.tick(pr)
    await d.tick(pr)
    await d.tick(pr)  # 2 done, 2 moving
    assert (pr["status"]["done"], pr["status"]["moving"]) == (2, 2)
    d.set_spec(pr, {"cancel": True})
    await run_until(d, pr, {"Cancelled"})
    # the 2 in flight were rolled back; the 2 pending never started (not "4 rolled back")
    msg = "cancelled: 2 moves rolled back, 2 moves never started, 2 had completed"
    assert conds(pr)["Succeeded"] == ("False", "Cancelled", msg)
    assert conds(pr)["Progressing"] == ("False", "Cancelled", msg)
    assert pr["status"]["completedAt"] and pr["status"]["counts"]["cancelled"] == 4
    assert outbox(pr)[-1] == ("Cancelled", msg, False)
    await d.tick(pr)
    assert [r for r, _, _ in outbox(pr)].count("Cancelled") == 1
    assert d.rt.clusters[("default", "demo")].cluster.list_partition_reassignments() == {}


async def test_a_cancellation_the_cluster_refuses_for_now_shows_cancelling_and_is_retried(
        d: Driver, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancel request the controller refuses (here REQUEST_TIMED_OUT, once) leaves the
    moves in flight: the phase is Cancelling, with the reason, until a later pass gets them
    rolled back (ReassignPartitionsCommand --cancel reports such partitions as not cancelled)."""
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES,
                                                    "maxConcurrentMoves": 2})
    for _ in range(3):
        await d.tick(pr)
    assert pr["status"]["moving"] == 2
    cluster = d.rt.clusters[("default", "demo")].cluster
    alter = cluster.alter_partition_reassignments
    refusals = [1]

    def refuse_cancel_once(changes: Any) -> Any:
        if refusals and all(target is None for target in changes.values()):
            refusals.pop()
            return {tp: ApiResult(errors.REQUEST_TIMED_OUT, "try again") for tp in changes}
        return alter(changes)

    monkeypatch.setattr(cluster, "alter_partition_reassignments", refuse_cancel_once)
    d.set_spec(pr, {"cancel": True})
    await d.tick(pr)
    assert pr["status"]["phase"] == "Cancelling"
    status, reason, message = conds(pr)["Progressing"]
    assert (status, reason) == ("True", "Cancelling")
    assert "2 move(s) cannot be rolled back yet; retrying: orders-" in message
    await d.tick(pr)
    assert pr["status"]["phase"] == "Cancelled"
    assert cluster.list_partition_reassignments() == {}


async def test_a_paused_reassignment_starts_no_new_moves(d: Driver) -> None:
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES,
                                                    "maxConcurrentMoves": 2, "paused": True})
    await d.tick(pr)
    assert pr["status"]["phase"] == "Paused" and pr["status"]["moving"] == 0
    assert conds(pr)["Progressing"] == ("False", "Paused", "0 moving, 0 done, 6 pending of 6")
    d.set_spec(pr, {"paused": False})
    await d.tick(pr)
    assert pr["status"]["phase"] == "Moving" and pr["status"]["moving"] == 2
    assert conds(pr)["Progressing"][0] == "True"


async def test_a_throttle_too_low_for_a_week_and_a_replication_factor_change_warn(
        d: Driver) -> None:
    moves = [{"topic": "orders", "partition": p, "replicas": [3, 4]} for p in range(7)]
    moves[6] = {"topic": "orders", "partition": 5, "replicas": [3, 4, 5]}
    del moves[5]
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": moves[:6],
                                                    "throttleBytesPerSecond": 1})
    await d.tick(pr)
    warnings = pr["status"]["warnings"]
    assert warnings == [
        "replication factor changes: spec.partitions[0] (orders-0) 3 -> 2, spec.partitions[1] "
        "(orders-1) 3 -> 2, spec.partitions[2] (orders-2) 3 -> 2, spec.partitions[3] (orders-3) "
        "3 -> 2, spec.partitions[4] (orders-4) 3 -> 2; if unintended, give each partition as "
        "many replicas as it has",
        "spec.throttleBytesPerSecond: 1 B/s moves the 13000000 bytes left in ~150 days; raise "
        "the throttle"]
    assert [e for e in outbox(pr) if e[0] == "PlanWarning"] == [
        ("PlanWarning", w, True) for w in warnings]
    assert "; " + "; ".join(warnings) in condition(pr, "Progressing")["message"]
    d.set_spec(pr, {"throttleBytesPerSecond": 2})  # still absurd: warned again, throttle only
    await d.tick(pr)
    again = [e for e in outbox(pr) if e[0] == "PlanWarning"][2:]
    assert again == [("PlanWarning", "spec.throttleBytesPerSecond: 2 B/s moves the 13000000 "
                      "bytes left in ~75 days; raise the throttle", True)]
    await d.tick(pr)  # the same throttle on the next pass: not warned again
    assert len([e for e in outbox(pr) if e[0] == "PlanWarning"]) == 3
    assert pr["status"]["throttleBytesPerSecond"] == 2
    d.set_spec(pr, {"throttleBytesPerSecond": 1_000_000_000})
    await d.tick(pr)
    assert len([e for e in outbox(pr) if e[0] == "PlanWarning"]) == 3
    assert pr["status"]["warnings"] == warnings[:1]


async def test_a_throttle_changed_mid_run_is_judged_by_the_bytes_still_to_move(
        d: Driver) -> None:
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES,
                                                    "maxConcurrentMoves": 1,
                                                    "throttleBytesPerSecond": 10_000_000})
    await run_until_done(d, pr, 1)
    d.set_spec(pr, {"throttleBytesPerSecond": 1})
    await d.tick(pr, 0.01)
    assert pr["status"]["warnings"] == [
        "spec.throttleBytesPerSecond: 1 B/s moves the 15000000 bytes left in ~174 days; "
        "raise the throttle"]  # 18 MB planned, 3 MB of them moved


async def run_until_done(d: Driver, obj: dict[str, Any], done: int, limit: int = 40) -> None:
    for _ in range(limit):
        await d.tick(obj, 0.1)
        if obj["status"].get("done", 0) >= done:
            return
    raise AssertionError(f"never {done} done: {obj['status']}")


# One partition of each size, so that moving it onto one new broker at 1 B/s takes exactly
# a week (604,800 s) or 7.5 days (648,000 s).
WEEK = {"embedded": {**CLUSTER["embedded"], "topics": [
    {"name": name, "partitions": 1, "replicationFactor": 3, "assignment": [[0, 1, 2]],
     "sizeBytesPerPartition": size} for name, size in (("week", 604_800),
                                                       ("longer", 648_000))]}}


async def test_a_throttle_is_warned_about_past_a_week_in_rounded_days(tmp_path: Path) -> None:
    d = Driver(tmp_path)
    await d.ready_cluster(spec=WEEK)
    week = d.create("PartitionReassignment", "week", {**REF, "throttleBytesPerSecond": 1,
                                                      "partitions": [{"topic": "week",
                                                                      "partition": 0,
                                                                      "replicas": [0, 1, 3]}]})
    await d.tick(week)
    assert week["status"]["warnings"] == []  # a week exactly is not more than a week
    longer = d.create("PartitionReassignment", "longer", {
        **REF, "throttleBytesPerSecond": 1, "additional": True,  # beside the first one
        "partitions": [{"topic": "longer", "partition": 0, "replicas": [0, 1, 3]}]})
    await d.tick(longer)
    assert longer["status"]["warnings"] == [
        "spec.throttleBytesPerSecond: 1 B/s moves the 648000 bytes left in ~8 days; raise "
        "the throttle"]  # 7.5 days


async def test_more_than_five_replication_factor_changes_are_summed_up(d: Driver) -> None:
    moves = [{"topic": "orders", "partition": p, "replicas": [3, 4]} for p in range(6)]
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": moves})
    await d.tick(pr)
    assert pr["status"]["warnings"][0].endswith(
        "(orders-4) 3 -> 2 (and 1 more); if unintended, give each partition as many replicas "
        "as it has")


async def test_a_changed_spec_cancels_the_moves_it_no_longer_names(d: Driver) -> None:
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES[:2]})
    await d.tick(pr)
    cluster = d.rt.clusters[("default", "demo")].cluster
    assert set(cluster.list_partition_reassignments()) == {TP0, TopicPartition("orders", 1)}
    d.set_spec(pr, {"partitions": [MOVES[1], MOVES[2]]})
    await d.tick(pr, 0.1)
    assert set(cluster.list_partition_reassignments()) == {TopicPartition("orders", 1),
                                                           TopicPartition("orders", 2)}
    assert pr["status"]["phase"] == "Moving"
    await run_until(d, pr, {"Completed"})
    parts = {p.tp: p.replicas for p in cluster.describe_partitions()}
    assert parts[TP0] == (0, 1, 2) and parts[TopicPartition("orders", 2)] == (3, 4, 5)
    assert pr["status"]["counts"]["total"] == 2


async def test_a_finished_reassignment_runs_again_for_new_moves(d: Driver) -> None:
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES[:1]})
    await run_until(d, pr, {"Completed"})
    d.set_spec(pr, {"partitions": [{"topic": "orders", "partition": 0,
                                    "replicas": [0, 1, 2]}]})
    await d.tick(pr)
    assert pr["status"]["phase"] == "Moving"
    await run_until(d, pr, {"Completed"})
    assert [r for r, _, _ in outbox(pr)].count("Completed") == 2


async def test_a_move_ended_by_another_tool_fails_the_reassignment_and_degrades(
        d: Driver) -> None:
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES[:2]})
    await d.tick(pr)
    cluster = d.rt.clusters[("default", "demo")].cluster
    cluster.alter_partition_reassignments({TP0: None})  # someone cancels one move
    await run_until(d, pr, {"Failed"})
    st = pr["status"]
    succeeded, progressing, degraded = (conds(pr)[k] for k in
                                        ("Succeeded", "Progressing", "Degraded"))
    assert succeeded[:2] == ("False", "Failed") and progressing[:2] == ("False", "Failed")
    assert degraded == ("True", "PartitionsFailed", succeeded[2] + "; see status.partitions")
    assert succeeded[2] == "1 partition(s) failed; 1 moved"
    assert st["counts"]["failed"] == 1 and st["completedAt"]
    failed = [r for r in st["partitions"] if r["state"] == "Failed"]
    assert failed[0]["error"] == "REASSIGNMENT_FAILED" and failed[0]["addingReplicas"] == []
    assert failed[0]["removingReplicas"] == [] and failed[0]["partition"] == 0
    assert failed[0]["currentReplicas"] == [0, 1, 2]  # what it was before the move
    assert "bytesMoved" not in failed[0] and failed[0]["bytesToMove"] == 3_000_000
    assert "orders-0: the move ended outside kraftsman" in failed[0]["message"]
    assert ("Failed", succeeded[2], True) in outbox(pr)
    await d.tick(pr)
    assert [r for r, _, _ in outbox(pr)].count("Failed") == 1


async def test_the_cluster_ref_cannot_change_while_moves_run(d: Driver) -> None:
    await d.ready_cluster("other")
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES[:1]})
    await d.tick(pr)
    d.set_spec(pr, {"clusterRef": {"name": "other"}})
    await d.tick(pr)
    assert conds(pr)["Degraded"] == (
        "True", "ClusterRefChanged", "spec.clusterRef.name: changed from 'demo' while the "
        "reassignment runs there; set it back to 'demo', or delete this resource (rolls back) "
        "and create a new one")
    assert pr["status"]["phase"] == "Moving"


async def test_the_cluster_ref_of_a_finished_reassignment_may_change(d: Driver) -> None:
    """Only a reassignment whose moves still run is tied to its cluster; once it ended,
    pointing it at another cluster is a new reassignment there (no ClusterRefChanged)."""
    await d.ready_cluster("other")
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES[:1]})
    await run_until(d, pr, {"Completed"})
    d.set_spec(pr, {"clusterRef": {"name": "other"}})
    await d.tick(pr)
    assert conds(pr)["Degraded"][:2] == ("False", "AsExpected"), conds(pr)
    assert pr["status"]["cluster"] == "other"


async def test_an_operator_restart_resumes_from_the_status_without_repeating_events(
        d: Driver, tmp_path: Path) -> None:
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES,
                                                    "maxConcurrentMoves": 2})
    await d.tick(pr)
    await d.tick(pr)
    await d.tick(pr)
    d.exit()
    fresh = Driver(tmp_path)  # the same state volume, a new process: nothing in memory
    fresh.now = d.now
    fresh.objects = d.objects
    await fresh.call(d.objects[("KafkaCluster", "demo")], "reconcile")
    await run_until(fresh, pr, {"Completed"})
    reasons = [r for r, _, _ in outbox(pr)]
    assert reasons == ["Started", "BatchDone", "BatchDone", "Completed"]


async def test_deleting_says_what_was_rolled_back_and_what_never_started(d: Driver) -> None:
    """A deployed operator said "5000 moves rolled back" when 4,500 of them never started."""
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES,
                                                    "maxConcurrentMoves": 1})
    await d.tick(pr)
    await d.call(pr, "rollback")
    assert d.events[-1] == ("Normal", "Cancelled",
                            "deleted: 1 move rolled back, 5 moves never started, 0 had "
                            "completed")


async def test_deleting_an_in_flight_reassignment_rolls_it_back(d: Driver) -> None:
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES,
                                                    "maxConcurrentMoves": 6})
    await d.tick(pr)
    cluster = d.rt.clusters[("default", "demo")].cluster
    assert len(cluster.list_partition_reassignments()) == 6
    await d.call(pr, "rollback")  # KIP-455 cancellation: back to the original replicas
    assert cluster.list_partition_reassignments() == {}
    assert d.events[-1] == ("Normal", "Cancelled",
                            "deleted: 6 moves rolled back, 0 moves never started, 0 had "
                            "completed")
    parts = {p.tp: p.replicas for p in cluster.describe_partitions()}
    assert parts[TP0] == (0, 1, 2)



async def test_a_pass_that_waited_for_the_cluster_starts_nothing_the_rollback_cancelled(
        d: Driver) -> None:
    """A reconcile pass invoked before the deletion may get the cluster's lock only after the
    rollback cancelled the moves; kopf's body (live) then has a deletionTimestamp, and the
    pass must not start them again: the resource goes and nothing would cancel them."""
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES,
                                                    "maxConcurrentMoves": 2})
    await d.tick(pr)
    cluster = d.rt.clusters[("default", "demo")].cluster
    assert len(cluster.list_partition_reassignments()) == 2
    pr["metadata"]["deletionTimestamp"] = "2026-11-26T16:00:00Z"
    await d.call(pr, "rollback")
    assert cluster.list_partition_reassignments() == {}
    await d.call(pr, "reconcile")  # the pass that waited for the lock
    assert cluster.list_partition_reassignments() == {}

async def test_deleting_a_finished_or_dry_run_reassignment_releases_at_once(d: Driver) -> None:
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES[:1]})
    await run_until(d, pr, {"Completed"})
    d.rt.save_op(pr["metadata"]["uid"], {"old": True})
    await d.call(pr, "rollback")
    assert not d.rt.op_path(pr["metadata"]["uid"]).exists()
    dry = d.create("PartitionReassignment", "dry", {**REF, "partitions": MOVES, "dryRun": True})
    await d.tick(dry)
    await d.call(dry, "rollback")
    assert d.events[-1][1] == "ClusterReady"  # no rollback Event


async def test_a_restarted_operator_releases_a_deleted_finished_reassignment_at_once(
        d: Driver, tmp_path: Path) -> None:
    """The process that deletes it never worked on it (its state is only in the status)."""
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES[:1]})
    await run_until(d, pr, {"Completed"})
    restarted = Driver(tmp_path)
    restarted.objects = d.objects
    await restarted.call(pr, "rollback")
    assert restarted.events == []  # nothing rolled back, nothing announced


async def test_deleting_when_the_cluster_is_gone_skips_the_rollback(d: Driver) -> None:
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES})
    await d.tick(pr)
    d.rt.close_cluster(("default", "demo"))
    with pytest.raises(kopf.TemporaryError, match="waiting for KafkaCluster demo to roll back"):
        await d.call(pr, "rollback")  # the KafkaCluster still exists: wait for it
    d.delete(d.objects[("KafkaCluster", "demo")])
    await d.call(pr, "rollback")
    assert d.events[-1] == ("Warning", "RollbackSkipped", "KafkaCluster demo no longer exists")


async def test_the_index_lists_only_running_reassignments(d: Driver) -> None:
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES[:1]})
    assert await d.index("preas_users") == {("default", "demo"): [
        "PartitionReassignment/move"]}
    await run_until(d, pr, {"Completed"})
    assert await d.index("preas_users") == {}
    d.create("PartitionReassignment", "noref", {"partitions": MOVES[:1]})
    bad = d.create("PartitionReassignment", "bad", {**REF, "partitions": []})
    bad["status"]["phase"] = "Invalid"
    assert await d.index("preas_users") == {}


NO_CONTROLLER = ("NOT_CONTROLLER: no controller is active: the metadata quorum has no leader "
                 "(a majority of controllers may be down)")


async def test_a_cluster_without_a_controller_is_retried_with_backoff(d: Driver) -> None:
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES[:2]})
    await d.tick(pr)
    cluster = d.rt.clusters[("default", "demo")].cluster
    for node in (0, 1, 2):
        cluster.fail_controller(node)
    await d.call(pr, "reconcile")
    assert pr["status"]["phase"] == "Moving"
    assert conds(pr)["Progressing"] == ("True", "Retrying", f"{NO_CONTROLLER}; retrying in 1s")
    before = dict(pr["status"])
    await d.call(pr, "reconcile")  # within the backoff: not tried
    assert pr["status"] == before
    d.now += 1
    await d.call(pr, "reconcile")
    assert conds(pr)["Progressing"][2] == f"{NO_CONTROLLER}; retrying in 2s"
    for node in (0, 1, 2):
        cluster.restore_controller(node)
    d.now += 2
    await run_until(d, pr, {"Completed"})  # resumed where it stood
    assert [r for r, _, _ in outbox(pr)] == ["Started", "Completed"]
    assert d.rt.backoff.failures == {}


async def test_a_newer_state_in_the_status_wins_over_the_operator_s_own_copy(
        d: Driver) -> None:
    """After a hand-over another replica may have gone on (here: posted the Events); the state
    it stored, with a later revision, is the one to go on from."""
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES[:1]})
    await d.tick(pr)
    assert [r for r, _, _ in outbox(pr)] == ["Started"]
    deliver_events(pr)
    await d.tick(pr, 0.1)
    assert outbox(pr) == []


async def test_a_state_file_of_an_older_version_is_resumed(d: Driver, tmp_path: Path) -> None:
    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES[:1]})
    await d.tick(pr)
    state = saved_state(pr["status"])
    assert state is not None
    d.exit()
    fresh = Driver(tmp_path)  # the old version kept the state on the volume, not in status
    fresh.objects, fresh.now = d.objects, d.now
    fresh.rt.save_op(pr["metadata"]["uid"], state)
    del pr["status"]["operationState"]
    await fresh.call(d.objects[("KafkaCluster", "demo")], "reconcile")
    await run_until(fresh, pr, {"Completed"})
    assert [r for r, _, _ in outbox(pr)] == ["Started", "Completed"]


async def test_a_pass_on_a_body_older_than_its_own_last_write_writes_nothing(
        d: Driver) -> None:
    """kopf runs the timer on the last body its watch delivered; on a busy API server the
    event of this process's own status write can come seconds later (a real kube-apiserver
    took 20 s per write of an 8,266-partition object), and a pass on the older body put a
    Succeeded dry run back to Pending. Such a pass writes nothing; once the watch has
    delivered the write, passes go on; past STALE_BODY_WAIT (the write may be lost) a pass
    goes on from the API server's copy and writes the whole status again."""
    import copy

    pr = d.create("PartitionReassignment", "move", {**REF, "partitions": MOVES,
                                                    "dryRun": True})
    before = copy.deepcopy(pr)  # the body as created: no status
    await d.tick(pr)
    assert cond(pr, "Succeeded") == "True" and pr["status"]["phase"] == "DryRunComplete"
    await d.tick(pr)  # another write, and again a body from before it
    stale = copy.deepcopy(before)
    reassignment_handlers.STALE_BODY_WAIT, wait = 0.0, reassignment_handlers.STALE_BODY_WAIT
    try:
        await d.call(stale, "reconcile")
    finally:
        reassignment_handlers.STALE_BODY_WAIT = wait
    assert d.status_patch.get("phase") == "DryRunComplete", d.status_patch
    assert cond(stale, "Succeeded") == "True"
    stale = copy.deepcopy(before)
    await d.call(stale, "reconcile")  # the watch has not delivered the write yet
    assert d.status_patch == {} and stale["status"] == {}
    await d.tick(pr)  # it has: a pass on the written body goes on as usual
    assert cond(pr, "Succeeded") == "True" and pr["status"]["phase"] == "DryRunComplete"


def cond(obj: dict[str, Any], type_: str) -> str:
    return str(condition(obj, type_)["status"])


async def test_a_plan_colliding_with_another_resource_s_moves_waits_naming_it(
        d: Driver) -> None:
    """It was Invalid for good, naming the other resource's partition as spec.partitions[?]."""
    first = d.create("PartitionReassignment", "first", {**REF, "partitions": MOVES[:2],
                                                        "maxConcurrentMoves": 1})
    await d.tick(first, 0.01)  # a move takes the embedded cluster 1 s
    assert first["status"]["phase"] == "Moving"
    second = d.create("PartitionReassignment", "second", {**REF, "partitions": MOVES[4:5]})
    await d.tick(second, 0.01)
    assert second["status"]["phase"] == "Waiting", second["status"]
    progressing = conds(second)["Progressing"]
    assert progressing[:2] == ("True", "WaitingForReassignments")
    assert progressing[2] == ("waiting for PartitionReassignment/first to finish before "
                              "starting; or set spec.additional: true to move on top of them")
    assert conds(second)["Degraded"][0] == "False" and "[?]" not in str(second["status"])
    await run_until(d, first, {"Completed"})
    await run_until(d, second, {"Moving", "Completed"})
    await run_until(d, second, {"Completed"})
    assert outbox(second)[0][0] == "Started"


async def test_a_plan_waits_for_a_reassignment_started_outside_kraftsman(d: Driver) -> None:
    await d.ready_cluster()
    cluster = d.rt.clusters[("default", "demo")].cluster
    cluster.alter_partition_reassignments({TopicPartition("orders", 5): [3, 4, 5]})
    pr = d.create("PartitionReassignment", "mine", {**REF, "partitions": MOVES[:1]})
    await d.tick(pr, 0.01)
    assert pr["status"]["phase"] == "Waiting"
    assert conds(pr)["Progressing"][2].startswith(
        "waiting for a reassignment of orders-5 started outside kraftsman's resources to "
        "finish before starting")


async def test_a_finished_run_restores_the_rate_of_a_broker_fenced_when_it_ended(
        d: Driver) -> None:
    """The status says what is owed, and the finished resource keeps reconciling until the
    broker is back and its rate is what it was before kraftsman."""
    cluster = d.rt.clusters[("default", "demo")].cluster
    old = cluster.describe_partitions(partitions=[TP0])[0].replicas
    pr = d.create("PartitionReassignment", "move", {
        **REF, "partitions": [{"topic": "orders", "partition": 0, "replicas": [3, 4, 5]}],
        "throttleBytesPerSecond": 100_000})  # 3 MB: ~30 s, time enough to fence a broker
    await d.tick(pr)
    assert pr["status"]["phase"] == "Moving"
    gone = old[-1]  # holds the data, leads nothing: the move completes without it
    cluster.fail_broker(gone)
    await run_until(d, pr, {"Completed"}, limit=120)
    assert any(b.id == gone and b.fenced for b in cluster.describe_cluster().brokers)
    owed = (f"the throttle rate on broker(s) [{gone}] is restored once they are back")
    assert owed in conds(pr)["Succeeded"][2], conds(pr)
    cluster.restore_broker(gone)
    await d.tick(pr)
    assert pr["status"]["phase"] == "Completed" and owed not in conds(pr)["Succeeded"][2]
    assert configs_in(cluster) == {}
    assert ("Completed" in [r for r, _, _ in outbox(pr)]) and [
        r for r, _, _ in outbox(pr)].count("Completed") == 1


async def test_a_move_that_copies_nothing_is_stalled_with_an_event_until_it_copies_again(
        d: Driver) -> None:
    """Broker 3 dies as it starts copying orders-0: nothing fails, nothing moves. After
    spec.stalledAfterSeconds of the cluster's clock the resource says Stalled, naming the
    partition and the broker, once with a warning Event; back up, it copies again and the
    condition clears with an Event, and the move completes."""
    pr = d.create("PartitionReassignment", "move", {
        **REF, "partitions": [{"topic": "orders", "partition": 0, "replicas": [0, 1, 3]}],
        "throttleBytesPerSecond": 100_000, "stalledAfterSeconds": 5})
    await d.tick(pr)
    cluster = d.rt.clusters[("default", "demo")].cluster
    cluster.fail_broker(3)
    stalled: dict[str, Any] | None = None
    for _ in range(40):
        await d.tick(pr)
        assert pr["status"]["phase"] == "Moving", pr["status"]
        if any(c["type"] == "Stalled" for c in pr["status"]["conditions"]):
            stalled = condition(pr, "Stalled")
            break
    assert stalled is not None, pr["status"]
    assert (stalled["status"], stalled["reason"]) == ("True", "NoProgress")
    assert stalled["message"].startswith("no byte progress: orders-0 (adding on broker 3; ")
    assert pr["status"]["stalledMoves"] == 1
    assert [(r, w) for r, _, w in outbox(pr) if r == "Stalled"] == [("Stalled", True)]
    deliver_events(pr)
    await d.tick(pr)  # still stalled: no second Event
    assert condition(pr, "Stalled")["status"] == "True"
    assert not [r for r, _, _ in outbox(pr) if r == "Stalled"]
    cluster.restore_broker(3)
    for _ in range(40):
        await d.tick(pr)
        if condition(pr, "Stalled")["status"] == "False":
            break
    assert (condition(pr, "Stalled")["status"], condition(pr, "Stalled")["reason"]) == (
        "False", "ProgressResumed")
    assert pr["status"]["stalledMoves"] == 0
    assert [r for r, _, _ in outbox(pr)].count("ProgressResumed") == 1
    await run_until(d, pr, {"Completed"}, limit=200)
    assert condition(pr, "Stalled")["status"] == "False"


async def test_a_stalled_move_past_the_detailed_rows_is_reported(
        d: Driver, monkeypatch: pytest.MonkeyPatch) -> None:
    """The status details at most 100 rows (here 1); the stall watch sees every move in
    flight. Before, it saw only the rows: a stalled move past the first 100 partitions was
    never reported."""
    from controller_core.orchestration import reassignment as executor_module

    monkeypatch.setattr(executor_module, "MAX_DETAILS", 1)
    cluster = d.rt.clusters[("default", "demo")].cluster
    [one] = cluster.describe_partitions(partitions=[TopicPartition("orders", 1)])
    kept = [r for r in one.replicas if r != 4][:2]
    gains = next(b for b in range(6) if b not in (*one.replicas, 3))
    pr = d.create("PartitionReassignment", "move", {
        **REF, "partitions": [{"topic": "orders", "partition": 0, "replicas": [0, 1, 3]},
                              {"topic": "orders", "partition": 1,
                               "replicas": [*kept, gains]}],
        "throttleBytesPerSecond": 100_000, "stalledAfterSeconds": 5})
    await d.tick(pr)
    cluster.fail_broker(gains)  # only orders-1's new replica: orders-0 copies on
    for _ in range(40):
        await d.tick(pr)
        if any(c["type"] == "Stalled" for c in pr["status"]["conditions"]):
            break
    assert [r["partition"] for r in pr["status"]["partitions"]] == [0]  # the one row
    assert condition(pr, "Stalled")["message"].startswith(
        f"no byte progress: orders-1 (adding on broker {gains}; "), pr["status"]
    assert pr["status"]["stalledMoves"] == 1


async def test_a_move_that_copies_never_says_stalled(d: Driver) -> None:
    pr = d.create("PartitionReassignment", "move", {
        **REF, "partitions": [{"topic": "orders", "partition": 0, "replicas": [0, 1, 3]}],
        "throttleBytesPerSecond": 100_000, "stalledAfterSeconds": 5})
    await run_until(d, pr, {"Completed"}, limit=200)
    assert not [c for c in pr["status"]["conditions"] if c["type"] == "Stalled"]
    assert pr["status"]["stalledMoves"] == 0
