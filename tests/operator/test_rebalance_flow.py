"""KafkaRebalance's pure parts: the state machine (rebalance_flow.decide), the proposal
ConfigMaps as the planner writes them (kraftsman.proposal), the planner Job the operator
creates (planner_job_spec) and the PartitionReassignments made from the proposal's documents."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from kraftsman.handlers.common import parse_spec
from kraftsman.handlers.rebalance import ProposalError, active, reassignment_body
from kraftsman.planner_job_spec import (
    DEFAULT_RESOURCES,
    PlannerConfig,
    PlannerUnavailable,
    job_state,
    parse_resources,
    planner_job,
)
from kraftsman.proposal import proposal_config_maps
from kraftsman.rebalance_flow import (
    ANNOTATION,
    CancelReassignment,
    CreateJob,
    CreateReassignment,
    Decision,
    DeleteProposal,
    Observed,
    StepSeen,
    decide,
    figures_of,
    parse_index,
    plan_digest,
    steps_of,
)
from kraftsman.resources import KafkaRebalanceSpec
from kraftsman.status import KafkaRebalanceStatus

NOW = "2026-01-01T00:00:00Z"
FP = "a" * 64
SUMMARY: dict[str, Any] = {
    "goal": "rebalance", "partitionsTotal": 6, "partitionsInPlan": 3, "replicasToMove": 4,
    "bytesToMove": 2_500_000_000, "resources": 2, "throttleBytesPerSecond": 50_000_000,
    "estimatedSeconds": 125.0,
    "maxOverMean": {"replicas": {"before": 1.5, "after": 1.0},
                    "leaders": {"before": 2.0, "after": 1.0},
                    "disk_bytes": {"before": 1.8, "after": 1.02}},
    "violations": [], "targetsNotReached": [], "fingerprint": FP,
    "createdAt": NOW, "sources": {"sizes": "DescribeLogDirs"}}
DOC = """\
apiVersion: kraftsman.io/v1alpha1
kind: PartitionReassignment
metadata:
  name: plan-abc-001
  labels: {kraftsman.io/plan: abc}
  annotations: {argocd.argoproj.io/sync-wave: "1", kraftsman.io/plan-step: "1/2"}
spec:
  clusterRef: {name: demo}
  throttleBytesPerSecond: 50000000
  maxConcurrentMoves: 10
  partitions:
  - {topic: orders, partition: 0, replicas: [3, 1, 2]}
"""


def spec(**kw: Any) -> KafkaRebalanceSpec:
    return KafkaRebalanceSpec.model_validate({"clusterRef": {"name": "demo"}, **kw})


def obs(s: KafkaRebalanceSpec | None = None, **kw: Any) -> Observed:
    base: dict[str, Any] = {"name": "rb", "namespace": "default", "generation": 1,
                            "spec": s if s is not None else spec(),
                            "planner_namespace": "kraftsman-system"}
    return Observed(**{**base, **kw})


def proposal_maps(summary: dict[str, Any] | None = None, docs: int = 2) -> list[dict[str, Any]]:
    return proposal_config_maps("default", "rb", "1", "uid-1", summary or SUMMARY,
                                [DOC] * docs)


def ready_observation(s: KafkaRebalanceSpec | None = None, **kw: Any) -> Observed:
    """The pending proposal 1 as the planner wrote it (contract format), job succeeded."""
    maps = proposal_maps()
    index = maps[-1]
    proposal = parse_index(index["metadata"]["name"], index["data"])
    parts = [(m["metadata"]["name"], m["data"]) for m in maps[:-1]]
    return obs(s, job="succeeded", proposal=proposal, steps=steps_of("rb", 1, parts), **kw)


def step(st: KafkaRebalanceStatus, o: Observed) -> Decision:
    return decide(st, o, NOW)


def cond(st: KafkaRebalanceStatus, type_: str) -> tuple[str, str, str]:
    c = st.condition(type_)
    assert c is not None, type_
    return c.status, c.reason, c.message


def proposal_ready(s: KafkaRebalanceSpec | None = None) -> KafkaRebalanceStatus:
    first = step(KafkaRebalanceStatus(), obs(s)).status
    return step(first, ready_observation(s)).status


def rebalancing(s: KafkaRebalanceSpec | None = None) -> KafkaRebalanceStatus:
    d = step(proposal_ready(s), obs(s, annotation="approve", fingerprint=FP))
    assert d.status.phase == "Rebalancing"
    return d.status


# ---------------------------------------------------------------- proposing

def test_a_new_rebalance_starts_planner_job_1() -> None:
    d = step(KafkaRebalanceStatus(), obs())
    st = d.status
    assert (st.phase, st.proposal_id) == ("PendingProposal", 1)
    assert d.actions == [CreateJob(1)]
    assert st.job == "kraftsman-system/rb-plan-1"
    assert st.proposal_config_map == "rb-proposal-1"
    assert cond(st, "ProposalReady")[:2] == ("False", "Planning")
    assert [e.reason for e in d.events] == ["ProposalRequested"]


def test_pending_waits_for_the_job_and_recreates_a_deleted_one() -> None:
    st = step(KafkaRebalanceStatus(), obs()).status
    running = step(st, obs(job="running"))
    assert running.actions == [] and running.status.phase == "PendingProposal"
    missing = step(st, obs(job="missing"))
    assert missing.actions == [CreateJob(1)]


def test_proposal_figures_land_in_status() -> None:
    st = step(KafkaRebalanceStatus(), obs()).status
    d = step(st, ready_observation())
    s = d.status
    assert s.phase == "ProposalReady"
    assert s.proposal is not None
    assert (s.moves, s.data, s.eta) == (4, "2.5 GB", "2:05")
    assert s.proposal.balance["disk_bytes"].before == 1.8
    assert s.proposal.balance["disk_bytes"].after == 1.02
    assert s.proposal.fingerprint == FP
    assert [x.name for x in s.steps] == ["rb-1-0001", "rb-1-0002"]
    assert all(x.state == "Pending" for x in s.steps)
    assert s.progress == "0/2"
    status, reason, message = cond(s, "ProposalReady")
    assert (status, reason) == ("True", "ProposalReady")
    assert "3 of 6 partitions move (4 replicas, 2.5 GB, ETA 2:05)" in message
    assert "disk_bytes 1.8 -> 1.02" in message
    assert d.actions == [] and [e.reason for e in d.events] == ["ProposalReady"]


def test_planner_error_is_failed_with_its_line() -> None:
    st = step(KafkaRebalanceStatus(), obs()).status
    error = ("spec.brokers: broker 9 is not in cluster demo (brokers 0-5); list brokers the "
             "cluster has")
    maps = proposal_config_maps("default", "rb", "1", "uid-1", {}, [])
    index = {**maps[-1], "data": {"error": error}}
    d = step(st, obs(job="failed", proposal=parse_index("rb-proposal-1", index["data"])))
    assert d.status.phase == "Failed"
    status, reason, message = cond(d.status, "Degraded")
    assert (status, reason) == ("True", "PlannerFailed")
    assert message == f"planner Job kraftsman-system/rb-plan-1: {error}"
    assert d.events[0].warning


def test_a_job_that_failed_without_a_proposal_points_at_its_logs() -> None:
    st = step(KafkaRebalanceStatus(), obs()).status
    d = step(st, obs(job="failed"))
    assert d.status.phase == "Failed"
    message = cond(d.status, "Degraded")[2]
    assert "kubectl logs -n kraftsman-system job/rb-plan-1" in message
    assert f"{ANNOTATION}=refresh" in message


def test_a_missing_part_is_failed_naming_the_config_map() -> None:
    st = step(KafkaRebalanceStatus(), obs()).status
    maps = proposal_maps()
    proposal = parse_index("rb-proposal-1", maps[-1]["data"])
    d = step(st, obs(job="succeeded", proposal=proposal,
                     steps="ConfigMap default/rb-proposal-1-1, part of proposal 1, is missing"))
    assert d.status.phase == "Failed"
    assert cond(d.status, "Degraded")[1:] == (
        "ProposalIncomplete", "ConfigMap default/rb-proposal-1-1, part of proposal 1, is missing")


@pytest.mark.parametrize(("data", "expected"), [
    ({"summary.json": "{}"}, "ConfigMap rb-proposal-1: no parts in data"),
    ({"summary.json": "{", "parts": "[]"}, "summary.json or parts is not JSON"),
    ({"summary.json": "[]", "parts": "[]"}, "summary.json must be an object"),
    ({"summary.json": json.dumps({"bytesToMove": "lots"}), "parts": "[]"},
     "ConfigMap rb-proposal-1: summary.json: invalid literal"),
])
def test_malformed_index_is_an_error_naming_the_config_map(data: dict[str, str],
                                                           expected: str) -> None:
    proposal = parse_index("rb-proposal-1", data)
    assert proposal.figures is None and proposal.error is not None
    assert expected in proposal.error


# ---------------------------------------------------------------- spec problems

@pytest.mark.parametrize(("raw", "field", "fix"), [
    ({"clusterRef": {"name": "demo"}, "goal": "add-brokers"}, "spec.brokers",
     "list the broker ids to add, remove or demote"),
    ({"clusterRef": {"name": "demo"}, "goal": "rebalance", "brokers": [1]}, "spec.brokers",
     "remove spec.brokers or change spec.goal"),
    ({"clusterRef": {"name": "demo"}, "goal": "shuffle"}, "spec.goal",
     "'rebalance', 'add-brokers', 'remove-brokers', 'leader-balance', 'demote-brokers' or "
     "'remove-disks'"),
    ({"clusterRef": {"name": "demo"}, "approval": "Yes"}, "spec.approval", "'Approved'"),
])
def test_invalid_spec_names_the_field_and_the_fix(raw: dict[str, Any], field: str,
                                                  fix: str) -> None:
    model, problems = parse_spec("KafkaRebalance", raw)
    assert model is None
    d = step(KafkaRebalanceStatus(), obs(None, spec=None, problems=problems))
    assert d.status.phase == "Invalid" and d.actions == []
    status, reason, message = cond(d.status, "Degraded")
    assert (status, reason) == ("True", "InvalidSpec")
    assert field in message and fix in message, message


def test_unknown_cluster_names_clusterref() -> None:
    d = step(KafkaRebalanceStatus(), obs(cluster_known=False))
    assert d.status.phase == "Invalid" and d.actions == []
    assert cond(d.status, "Degraded")[1:] == (
        "UnknownCluster", "spec.clusterRef.name: no KafkaCluster 'demo' in namespace default; "
        "create it or fix the name")
    # Once the cluster exists the first proposal is made.
    again = step(d.status, obs())
    assert again.actions == [CreateJob(1)] and again.status.phase == "PendingProposal"
    assert cond(again.status, "Degraded")[0] == "False"


def test_a_name_too_long_for_the_job_is_refused() -> None:
    d = step(KafkaRebalanceStatus(), obs(name="r" * 60))
    assert d.status.phase == "Invalid" and d.actions == []
    reason, message = cond(d.status, "Degraded")[1:]
    assert reason == "NameTooLong" and message.startswith("metadata.name:")
    assert "at most 54 characters" in message


def test_unknown_annotation_value_is_reported_and_not_acted_on() -> None:
    st = proposal_ready()
    d = step(st, obs(annotation="aprove", fingerprint=FP))
    assert d.status.phase == "ProposalReady" and d.actions == []
    assert cond(d.status, "Degraded")[1:] == (
        "UnknownAnnotation", f"metadata.annotations[{ANNOTATION}]: unknown value 'aprove'; "
        "use approve, refresh or reject (or remove the annotation)")


# ---------------------------------------------------------------- approval, staleness

def test_approval_by_annotation_checks_the_fingerprint_then_creates_step_1() -> None:
    st = proposal_ready()
    asks = step(st, obs(annotation="approve"))
    assert asks.need_fingerprint and asks.actions == [] and not asks.remove_annotation
    d = step(st, obs(annotation="approve", fingerprint=FP))
    s = d.status
    assert s.phase == "Rebalancing" and s.decided_by == "annotation"
    assert d.remove_annotation
    assert len(d.actions) == 1 and isinstance(d.actions[0], CreateReassignment)
    assert d.actions[0].step.name == "rb-1-0001" and d.actions[0].proposal_id == 1
    assert [x.state for x in s.steps] == ["Created", "Pending"]
    assert (s.current, s.progress) == ("rb-1-0001", "0/2")
    assert cond(s, "Approved")[:2] == ("True", "Approved")


def test_approval_by_spec_is_the_gitops_switch() -> None:
    st = proposal_ready()
    pending = step(st, obs())
    assert pending.status.phase == "ProposalReady" and not pending.need_fingerprint
    approved = spec(approval="Approved")
    d = step(st, obs(approved, generation=2, fingerprint=FP))
    assert d.status.phase == "Rebalancing" and d.status.decided_by == "spec.approval"
    assert not d.remove_annotation
    # approval is not a planning input: the same proposal is executed
    assert plan_digest(approved) == plan_digest(spec())


def test_a_stale_proposal_is_not_executed() -> None:
    st = proposal_ready()
    d = step(st, obs(annotation="approve", fingerprint="b" * 64))
    s = d.status
    assert s.phase == "Stale" and d.actions == [] and d.remove_annotation
    assert cond(s, "Stale")[:2] == ("True", "AssignmentChanged")
    status, reason, message = cond(s, "Degraded")
    assert (status, reason) == ("True", "StaleProposal")
    assert "nothing was executed" in message and f"{ANNOTATION}=refresh" in message
    assert d.events[0].reason == "Stale" and d.events[0].warning
    # refresh: a new proposal; the old Job and ConfigMaps go
    r = step(s, obs(annotation="refresh"))
    assert r.actions == [DeleteProposal(1), CreateJob(2)] and r.remove_annotation
    assert (r.status.phase, r.status.proposal_id, r.status.proposal) == (
        "PendingProposal", 2, None)
    assert cond(r.status, "Stale")[0] == "False"


def test_an_empty_proposal_is_ready_on_approval() -> None:
    st = step(KafkaRebalanceStatus(), obs()).status
    empty = dict(SUMMARY, resources=0, partitionsInPlan=0, replicasToMove=0, bytesToMove=0)
    maps = proposal_config_maps("default", "rb", "1", "uid-1", empty, [])
    st = step(st, obs(job="succeeded", proposal=parse_index("rb-proposal-1", maps[-1]["data"]),
                      steps=[])).status
    d = step(st, obs(annotation="approve", fingerprint=FP))
    assert d.status.phase == "Ready" and d.actions == []
    assert cond(d.status, "Ready")[:2] == ("True", "Completed")


# ---------------------------------------------------------------- rebalancing

def test_steps_run_one_after_another_until_ready() -> None:
    st = rebalancing()
    moving = step(st, obs(current=StepSeen("Moving", "40%", "")))
    assert moving.actions == [] and moving.status.current_progress == "40%"
    d = step(moving.status, obs(current=StepSeen("Completed", "100%", "")))
    assert [a.step.name for a in d.actions if isinstance(a, CreateReassignment)] == ["rb-1-0002"]
    assert [x.state for x in d.status.steps] == ["Completed", "Created"]
    assert d.status.progress == "1/2"
    last = step(d.status, obs(current=StepSeen("Completed", "100%", "")))
    s = last.status
    assert s.phase == "Ready" and last.actions == []
    assert [x.state for x in s.steps] == ["Completed", "Completed"]
    assert (s.progress, s.current) == ("2/2", None)
    assert cond(s, "Ready")[:2] == ("True", "Completed")
    assert "Completed" in [e.reason for e in last.events]


def test_a_failed_step_fails_the_rebalance_and_creates_no_more() -> None:
    st = rebalancing()
    d = step(st, obs(current=StepSeen("Failed", "50%", "2 partitions failed")))
    assert d.status.phase == "Failed" and d.actions == []
    message = cond(d.status, "Degraded")[2]
    assert message.startswith("PartitionReassignment rb-1-0001 ended Failed: 2 partitions "
                              "failed; 0 of 2 had completed")
    assert "kubectl describe preas rb-1-0001" in message


def test_a_deleted_step_fails_the_rebalance() -> None:
    d = step(rebalancing(), obs(current=None))
    assert d.status.phase == "Failed"
    assert cond(d.status, "Degraded")[1] == "ReassignmentDeleted"


STUCK = "no byte progress: orders-0 (adding on broker 3; 0 B copied in 600 s)"


def test_a_stalled_step_is_said_on_the_rebalance_once_and_cleared_when_it_copies() -> None:
    """Alerts and Argo CD read the KafkaRebalance: its running step's Stalled shows there,
    with one warning Event when it starts and one Event when it clears."""
    st = rebalancing()
    assert st.condition("Stalled") is None  # never stalled: no condition at all
    d = step(st, obs(current=StepSeen("Moving", "10%", "", STUCK)))
    assert cond(d.status, "Stalled") == ("True", "StepStalled",
                                         f"PartitionReassignment rb-1-0001: {STUCK}")
    assert [(e.reason, e.warning) for e in d.events] == [("Stalled", True)]
    again = step(d.status, obs(current=StepSeen("Moving", "10%", "", STUCK)))
    assert again.events == [] and cond(again.status, "Stalled")[0] == "True"
    moving = step(again.status, obs(current=StepSeen("Moving", "20%", "")))
    assert cond(moving.status, "Stalled")[:2] == ("False", "ProgressResumed")
    assert [e.reason for e in moving.events] == ["ProgressResumed"]
    assert moving.status.phase == "Rebalancing"


def test_a_stalled_step_that_ends_clears_the_rebalance_s_stalled() -> None:
    stalled = step(rebalancing(), obs(current=StepSeen("Moving", "10%", "", STUCK))).status
    done = step(stalled, obs(current=StepSeen("Completed", "100%", "", STUCK)))
    assert cond(done.status, "Stalled")[:2] == ("False", "ProgressResumed")
    failed = step(stalled, obs(current=StepSeen("Failed", "10%", "broker 3 is gone", STUCK)))
    assert failed.status.phase == "Failed"
    assert cond(failed.status, "Stalled")[:2] == ("False", "ProgressResumed")


def test_a_rebalance_stopped_while_stalled_is_not_left_stalled() -> None:
    stalled = step(rebalancing(), obs(current=StepSeen("Moving", "10%", "", STUCK))).status
    rejected = step(stalled, obs(annotation="reject", current=StepSeen("Moving", "10%", "",
                                                                       STUCK)))
    assert rejected.status.phase == "Rejected"
    assert cond(rejected.status, "Stalled") == ("False", "ExecutionEnded",
                                                "the execution ended (Rejected)")
    deleted = step(stalled, obs(current=None))
    assert deleted.status.phase == "Failed"
    assert cond(deleted.status, "Stalled")[:2] == ("False", "ExecutionEnded")


def test_reject_while_rebalancing_cancels_the_running_step() -> None:
    d = step(rebalancing(), obs(annotation="reject", current=StepSeen("Moving", "10%", "")))
    assert d.actions == [CancelReassignment("rb-1-0001")]
    s = d.status
    assert s.phase == "Rejected" and d.remove_annotation
    assert [x.state for x in s.steps] == ["Cancelled", "Pending"]
    assert "rb-1-0001 cancelled" in cond(s, "Ready")[2]


def test_refresh_while_rebalancing_is_refused() -> None:
    d = step(rebalancing(), obs(annotation="refresh", current=StepSeen("Moving", "10%", "")))
    assert d.status.phase == "Rebalancing" and d.actions == [] and d.remove_annotation
    assert d.events[0].reason == "AnnotationIgnored" and "reject" in d.events[0].message


def test_a_spec_change_while_rebalancing_waits_for_the_end() -> None:
    d = step(rebalancing(), obs(spec(maxConcurrentMoves=2), generation=2,
                                current=StepSeen("Moving", "10%", "")))
    assert d.status.phase == "Rebalancing" and d.actions == []
    assert "a new proposal is made when it ends" in cond(d.status, "Progressing")[2]


# ---------------------------------------------------------------- reject, refresh, spec

def test_reject_before_execution_and_spec_rejected() -> None:
    d = step(proposal_ready(), obs(annotation="reject"))
    assert d.status.phase == "Rejected" and d.actions == [] and d.remove_annotation
    by_spec = step(proposal_ready(), obs(spec(approval="Rejected")))
    assert by_spec.status.phase == "Rejected"
    assert by_spec.status.decided_by == "spec.approval"
    # GitOps: Rejected -> Approved in Git plans afresh (and executes when ready)
    again = step(by_spec.status, obs(spec(approval="Approved"), generation=2))
    assert again.actions == [DeleteProposal(1), CreateJob(2)]


def test_reject_while_planning_deletes_the_job() -> None:
    st = step(KafkaRebalanceStatus(), obs()).status
    d = step(st, obs(annotation="reject", job="running"))
    assert d.status.phase == "Rejected" and d.actions == [DeleteProposal(1)]


def test_a_spec_change_makes_a_new_proposal() -> None:
    d = step(proposal_ready(), obs(spec(goal="leader-balance"), generation=2))
    assert d.actions == [DeleteProposal(1), CreateJob(2)]
    assert d.status.phase == "PendingProposal"


@pytest.mark.parametrize("second", ["approve", "reject", "bogus"])
def test_a_stale_rebalance_stays_degraded_whatever_annotation_comes_next(second: str) -> None:
    """Argo CD reads Degraded: a Stale rebalance that lost it showed Progressing, and a sync
    wave waited instead of stopping."""
    stale = step(proposal_ready(), obs(annotation="approve", fingerprint="b" * 64)).status
    was = cond(stale, "Degraded")
    assert was[:2] == ("True", "StaleProposal")
    d = step(stale, obs(annotation=second))
    assert d.status.phase == "Stale" and d.actions == []
    if second == "bogus":
        assert cond(d.status, "Degraded")[:2] == ("True", "UnknownAnnotation")
        d = step(d.status, obs(annotation="approve"))  # then a known one
    assert cond(d.status, "Degraded") == was
    assert cond(d.status, "Ready")[:2] == ("False", "Stale")


def test_a_failed_rebalance_stays_degraded_when_annotated() -> None:
    first = step(KafkaRebalanceStatus(), obs()).status
    failed = step(first, obs(job="failed")).status
    assert failed.phase == "Failed"
    was = cond(failed, "Degraded")
    assert was[:2] == ("True", "PlannerFailed")
    d = step(failed, obs(annotation="approve"))
    assert d.events[0].reason == "AnnotationIgnored"
    assert cond(d.status, "Degraded") == was


def test_approve_after_the_end_is_ignored_with_a_warning() -> None:
    st = rebalancing()
    st = step(st, obs(current=StepSeen("Completed", "100%", ""))).status
    st = step(st, obs(current=StepSeen("Completed", "100%", ""))).status
    d = step(st, obs(annotation="approve"))
    assert d.status.phase == "Ready" and d.actions == [] and d.remove_annotation
    assert d.events[0].reason == "AnnotationIgnored" and d.events[0].warning


def test_the_timer_idles_while_waiting_for_the_user() -> None:
    meta = {"generation": 1}
    waiting = {"phase": "ProposalReady", "observedGeneration": 1}
    assert not active({"approval": "Pending"}, waiting, meta)
    assert not active({}, waiting, meta) and not active(None, waiting, meta)  # the default
    assert active({"approval": "Approved"}, waiting, meta)
    assert active({}, waiting, {"generation": 1, "annotations": {ANNOTATION: "approve"}})
    assert not active({}, {"phase": "Ready", "observedGeneration": 1}, meta)
    assert active({}, {"phase": "Ready", "observedGeneration": 1}, {"generation": 2})
    assert active({}, {"phase": "Rebalancing", "observedGeneration": 1}, meta)


# ---------------------------------------------------------------- the Job

CONFIG = PlannerConfig(image="ghcr.io/kraftsman/kraftsman:1.2.3",
                       service_account="kraftsman-planner", namespace="kraftsman-system",
                       state_claim="kraftsman-state", node_name="node-a")


def test_the_planner_job_follows_the_contract() -> None:
    job = planner_job(CONFIG, name="rb", namespace="default", uid="uid-1", proposal_id=3,
                      embedded=True, spark_master=None)
    meta, pod = job["metadata"], job["spec"]["template"]["spec"]
    assert (meta["name"], meta["namespace"]) == ("rb-plan-3", "kraftsman-system")
    assert "ownerReferences" not in meta  # never across namespaces
    assert job["spec"]["backoffLimit"] == 0 and pod["restartPolicy"] == "Never"
    # a pod that never runs (image not pullable, no node) fails the Job within the hour
    assert job["spec"]["activeDeadlineSeconds"] == 3600
    assert pod["serviceAccountName"] == "kraftsman-planner"
    (c,) = pod["containers"]
    assert c["image"] == CONFIG.image and c["command"] == ["kraftsman"]
    assert c["args"] == ["rebalance", "propose", "--namespace", "default", "--name", "rb",
                         "--proposal-id", "3", "--state-dir", "/var/lib/kraftsman",
                         "--spark-conf", "spark.driver.memory=2048m"]
    state = next(v for v in pod["volumes"] if v["name"] == "state")
    assert state["persistentVolumeClaim"] == {"claimName": "kraftsman-state", "readOnly": True}
    assert {"name": "state", "mountPath": "/var/lib/kraftsman", "readOnly": True} in \
        c["volumeMounts"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["node-a"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert meta["labels"]["kraftsman.io/rebalance"] == "rb"
    assert meta["labels"]["kraftsman.io/proposal-id"] == "3"


def test_a_kafka_cluster_job_mounts_no_state_and_passes_the_master() -> None:
    config = PlannerConfig(image="img:1", service_account="sa")  # no POD_NAMESPACE: same ns
    job = planner_job(config, name="rb", namespace="team-a", uid="uid-1", proposal_id=1,
                      embedded=False, spark_master="spark://spark:7077")
    pod = job["spec"]["template"]["spec"]
    assert [v["name"] for v in pod["volumes"]] == ["tmp"]
    assert pod["containers"][0]["args"][-2:] == ["--master", "spark://spark:7077"]
    assert job["metadata"]["namespace"] == "team-a"
    assert job["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert "affinity" not in pod


def test_the_planner_pod_has_resources_for_spark_local_mode_by_default() -> None:
    """Spark's local driver heap is 2g (make_session): the default limit leaves the JVM and
    the Python driver about 1Gi more, and the memory request equals it (not evicted first)."""
    (c,) = planner_job(CONFIG, name="rb", namespace="default", uid="u", proposal_id=1,
                       embedded=True, spark_master=None)["spec"]["template"]["spec"][
        "containers"]
    assert c["resources"] == DEFAULT_RESOURCES
    memory = c["resources"]["limits"]["memory"]
    assert c["resources"]["requests"]["memory"] == memory
    gib = {"Gi": 2**30, "Mi": 2**20}
    assert int(memory[:-2]) * gib[memory[-2:]] >= 2 * 2**30 + 2**30  # 2g heap + 1Gi
    assert c["resources"]["limits"]["cpu"]  # Spark local[*]: as many cores as the limit


@pytest.mark.parametrize(("limit", "heap"), [
    ("3Gi", "2048m"), ("6Gi", "5120m"), ("8000M", "6605m"), ("1536Mi", "512m"), (None, None)])
def test_the_spark_driver_heap_follows_the_memory_limit(limit: str | None,
                                                        heap: str | None) -> None:
    """Raising the limit gives Spark the memory: its driver heap is the limit less 1Gi for
    the JVM's own memory and the Python driver (the default 3Gi: make_session's 2g)."""
    resources = {"requests": {"cpu": "1"}, **({"limits": {"memory": limit}} if limit else {})}
    args = planner_job(PlannerConfig(image="i", resources=resources), name="rb",
                       namespace="d", uid="u", proposal_id=1, embedded=False,
                       spark_master=None)["spec"]["template"]["spec"]["containers"][0]["args"]
    confs = [args[i + 1] for i, a in enumerate(args) if a == "--spark-conf"]
    assert confs == ([f"spark.driver.memory={heap}"] if heap else [])


def test_a_memory_limit_spark_cannot_run_in_is_refused() -> None:
    with pytest.raises(ValueError, match=r"limits\.memory 1Gi: .* at least 1536Mi"):
        parse_resources('{"limits": {"memory": "1Gi"}}')


def test_the_planner_pod_takes_the_configured_resources_and_pull_secrets() -> None:
    resources = parse_resources('{"requests": {"cpu": 1, "memory": "6Gi"}, '
                                '"limits": {"memory": "6Gi", "ephemeral-storage": "4Gi"}}')
    config = PlannerConfig(image="img:1", resources=resources,
                           image_pull_secrets=("regcred", "mirror"))
    job = planner_job(config, name="rb", namespace="d", uid="u", proposal_id=1,
                      embedded=False, spark_master=None)
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"] == {
        "requests": {"cpu": "1", "memory": "6Gi"},
        "limits": {"memory": "6Gi", "ephemeral-storage": "4Gi"}}
    assert pod["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}]
    no_secrets = planner_job(CONFIG, name="rb", namespace="d", uid="u", proposal_id=1,
                             embedded=False, spark_master=None)
    assert "imagePullSecrets" not in no_secrets["spec"]["template"]["spec"]


def test_no_image_or_an_emptydir_state_volume_is_a_clear_error() -> None:
    with pytest.raises(PlannerUnavailable, match="--planner-image"):
        planner_job(PlannerConfig(image=None), name="rb", namespace="d", uid="u",
                    proposal_id=1, embedded=False, spark_master=None)
    with pytest.raises(PlannerUnavailable, match=r"state\.type=persistentVolumeClaim"):
        planner_job(PlannerConfig(image="i"), name="rb", namespace="d", uid="u",
                    proposal_id=1, embedded=True, spark_master=None)


@pytest.mark.parametrize(("status", "state"), [
    (None, "running"), ({"active": 1}, "running"), ({"succeeded": 1}, "succeeded"),
    ({"failed": 1}, "failed"),
    ({"conditions": [{"type": "Failed", "status": "True"}]}, "failed"),
    ({"conditions": [{"type": "Complete", "status": "True"}]}, "succeeded"),
])
def test_job_state(status: dict[str, Any] | None, state: str) -> None:
    assert job_state({"status": status}) == state
    assert job_state(None) == "missing"


# ---------------------------------------------------------------- the reassignments

def test_a_step_is_the_planner_document_on_this_cluster_owned_by_the_rebalance() -> None:
    body = reassignment_body(DOC.replace("name: demo", "name: elsewhere"), "ConfigMap x key y",
                             "rb-1-0001", "default", "rb", "uid-1", 1, spec())
    assert body["metadata"]["name"] == "rb-1-0001"
    assert body["spec"]["clusterRef"] == {"name": "demo"}
    assert body["spec"]["partitions"] == [{"topic": "orders", "partition": 0,
                                           "replicas": [3, 1, 2]}]
    assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert body["metadata"]["labels"]["kraftsman.io/proposal-id"] == "1"
    assert "argocd.argoproj.io/sync-wave" not in body["metadata"]["annotations"]


def test_a_step_labelled_with_a_number_by_an_older_planner_gets_string_labels() -> None:
    """Proposals a planner wrote before its plan ids were quoted: `kraftsman.io/plan:
    15165527` is a YAML number, which the API server refuses as a label value (400)."""
    text = DOC.replace("kraftsman.io/plan: abc", "kraftsman.io/plan: 15165527").replace(
        'kraftsman.io/plan-step: "1/2"', "kraftsman.io/plan-step: 1")
    assert yaml.safe_load(text)["metadata"]["labels"]["kraftsman.io/plan"] == 15165527
    body = reassignment_body(text, "ConfigMap x key y", "rb-1-0001", "default", "rb", "uid-1",
                             1, spec())
    assert body["metadata"]["labels"]["kraftsman.io/plan"] == "15165527"
    assert body["metadata"]["annotations"]["kraftsman.io/plan-step"] == "1"


@pytest.mark.parametrize(("text", "expected"), [
    ("{", "ConfigMap rb-proposal-1-1 key resource-0001.yaml: not YAML"),
    ("kind: KafkaCluster\n", "not a PartitionReassignment document"),
    (DOC.replace("partition: 0,", "partition: -1,"), "spec.partitions.0.partition"),
])
def test_a_bad_document_names_the_config_map_and_key(text: str, expected: str) -> None:
    with pytest.raises(ProposalError, match=expected.replace(".", r"\.")):
        reassignment_body(text, "ConfigMap rb-proposal-1-1 key resource-0001.yaml",
                          "rb-1-0001", "default", "rb", "uid-1", 1, spec())


def test_an_api_refusal_names_the_call_and_the_grant() -> None:
    """What lands in status (Degraded, ApiError) when the API server refuses a call."""
    from kopf._cogs.clients import errors as kopf_errors

    from kraftsman.handlers.kube import _explain

    forbidden = kopf_errors.APIForbiddenError("jobs.batch is forbidden", status=403, headers={})
    assert str(_explain("create", "Job kraftsman-system/rb-plan-1", forbidden)) == (
        "create Job kraftsman-system/rb-plan-1: forbidden; grant the operator's ServiceAccount "
        "`create` on it (the chart's and manifests/' RBAC do)")
    other = kopf_errors.APIServerError("etcd timeout", status=500, headers={})
    assert str(_explain("get", "ConfigMap default/rb-proposal-1", other)).startswith(
        "get ConfigMap default/rb-proposal-1: APIServerError:")


# ---------------------------------------------------------------- the conditions, exactly

def conditions(st: KafkaRebalanceStatus) -> dict[str, tuple[str, str, str]]:
    return {c.type: (c.status, c.reason, c.message) for c in st.conditions}


def test_a_new_proposal_sets_every_condition_and_clears_the_last_run() -> None:
    """kubectl wait and Argo CD read these conditions: each pass sets all of them."""
    d = step(KafkaRebalanceStatus(), obs())
    msg = "proposal 1 requested (created): planner Job kraftsman-system/rb-plan-1 started"
    assert conditions(d.status) == {
        "Ready": ("False", "Planning", msg), "Degraded": ("False", "AsExpected", ""),
        "ProposalReady": ("False", "Planning", msg),
        "Approved": ("False", "Pending", "no proposal to approve yet"),
        "Stale": ("False", "Fresh", ""), "Progressing": ("True", "Planning", msg)}
    assert [(e.reason, e.message, e.warning) for e in d.events] == [
        ("ProposalRequested", msg, False)]
    assert d.remove_annotation is False
    # a spec change after a finished run: the old run's figures and decision are cleared
    done = rebalancing()
    done.phase, done.moves, done.data, done.eta = "Ready", 4, "2.3 GiB", "2m5s"
    done.decided_by, done.approved_at, done.completed_at = "annotation", NOW, NOW
    again = step(done, obs(spec(goal="rebalance", maxConcurrentMoves=3))).status
    assert (again.moves, again.data, again.eta) == (None, None, None)
    assert (again.decided_by, again.approved_at, again.completed_at) == (None, None, None)
    assert again.steps == [] and again.current is None and again.progress is None
    assert "(spec)" in again.condition("Ready").message  # type: ignore[union-attr]


def test_refresh_while_the_planner_runs_starts_a_new_proposal() -> None:
    """A planner Job that never runs (an image that cannot be pulled, no node) left the
    rebalance in PendingProposal, and refresh was dropped without effect or Event: it now
    replaces the Job with a new proposal, and says so."""
    st = step(KafkaRebalanceStatus(), obs()).status
    d = step(st, obs(annotation="refresh", job="running"))
    assert d.remove_annotation is True
    assert d.actions == [DeleteProposal(1), CreateJob(2)]
    assert d.status.phase == "PendingProposal" and d.status.proposal_id == 2
    assert d.events[0].message == ("proposal 2 requested (refresh): planner Job "
                                   "kraftsman-system/rb-plan-2 started")
    assert conditions(d.status)["Degraded"] == ("False", "AsExpected", "")
    # after a proposal is ready, refresh makes proposal 2 and says why
    d = step(proposal_ready(), obs(annotation="refresh"))
    assert d.remove_annotation is True and d.status.proposal_id == 2
    assert d.actions == [DeleteProposal(1), CreateJob(2)]
    assert d.events[0].message.startswith("proposal 2 requested (refresh)")


def test_a_planner_job_past_its_deadline_fails_the_rebalance_saying_so() -> None:
    st = step(KafkaRebalanceStatus(), obs()).status
    d = step(st, obs(job="failed", job_failure="DeadlineExceeded: Job was active longer "
                                               "than specified deadline"))
    assert d.status.phase == "Failed"
    assert cond(d.status, "Degraded")[2].startswith(
        "planner Job kraftsman-system/rb-plan-1 failed (DeadlineExceeded: Job was active "
        "longer than specified deadline) without writing its proposal")


def test_an_invalid_rebalance_plans_afresh_once_fixed() -> None:
    bad = step(KafkaRebalanceStatus(), obs(spec=None, problems=("spec.goal: bad", "x: y")))
    assert bad.status.phase == "Invalid"
    assert conditions(bad.status)["Ready"] == ("False", "InvalidSpec", "spec.goal: bad; x: y")
    assert conditions(step(KafkaRebalanceStatus(), obs(spec=None)).status)["Degraded"] == (
        "True", "InvalidSpec", "spec: invalid")
    st = proposal_ready()
    st.phase = "Invalid"  # e.g. the cluster was missing for a while
    d = step(st, obs())
    assert d.status.phase == "PendingProposal" and d.status.proposal_id == 2
    assert d.actions == [DeleteProposal(1), CreateJob(2)]


def test_a_name_that_just_fits_the_job_name_is_accepted() -> None:
    fits = "r" * (63 - len("-plan-999"))
    assert step(KafkaRebalanceStatus(), obs(name=fits)).status.phase == "PendingProposal"


def test_planner_failures_say_failed_on_every_condition() -> None:
    st = step(KafkaRebalanceStatus(), obs()).status
    d = step(st, obs(job="failed"))
    msg = ("planner Job kraftsman-system/rb-plan-1 failed without writing its proposal "
           "(ConfigMap rb-proposal-1); see `kubectl logs -n kraftsman-system job/rb-plan-1`; "
           f"annotate {ANNOTATION}=refresh to plan again")
    c = conditions(d.status)
    assert c["Degraded"] == ("True", "PlannerFailed", msg)
    assert c["Ready"] == ("False", "PlannerFailed", msg)
    assert c["Progressing"] == ("False", "PlannerFailed", msg)
    assert c["ProposalReady"] == ("False", "PlannerFailed", msg)
    assert [(e.reason, e.warning) for e in d.events] == [("PlannerFailed", True)]
    d = step(st, obs(job="succeeded"))
    msg = ("planner Job kraftsman-system/rb-plan-1 succeeded but wrote no ConfigMap "
           f"rb-proposal-1; annotate {ANNOTATION}=refresh to plan again")
    assert conditions(d.status)["Ready"] == ("False", "PlannerFailed", msg)
    assert conditions(d.status)["Degraded"] == ("True", "PlannerFailed", msg)
    d = step(st, obs(job="succeeded", proposal=ready_observation().proposal, steps="part x"))
    assert conditions(d.status)["Ready"] == ("False", "PlannerFailed", "part x")
    assert conditions(d.status)["ProposalReady"] == ("False", "ProposalIncomplete", "part x")
    err = parse_index("cm", {"error": "no brokers\nTraceback"})
    d = step(st, obs(job="failed", proposal=err))
    assert conditions(d.status)["Ready"] == (
        "False", "PlannerFailed", "planner Job kraftsman-system/rb-plan-1: no brokers")


def events(d: Decision) -> list[tuple[str, str, bool]]:
    return [(e.reason, e.message, e.warning) for e in d.events]


def test_a_ready_proposal_says_what_moves_and_how_to_approve() -> None:
    st = step(KafkaRebalanceStatus(), obs()).status
    d = step(st, ready_observation())
    # the balance in the summary's key order (the planner writes it sorted)
    msg = ("proposal 1: 3 of 6 partitions move (4 replicas, 2.5 GB, ETA 2:05) in 2 "
           "PartitionReassignment(s); max/mean disk_bytes 1.8 -> 1.02, leaders 2 -> 1, "
           "replicas 1.5 -> 1")
    assert conditions(d.status) == {
        "Ready": ("False", "ProposalReady", "waiting for approval"),
        "Degraded": ("False", "AsExpected", ""), "ProposalReady": ("True", "ProposalReady", msg),
        "Approved": ("False", "Pending", "approve with spec.approval: Approved or annotate "
                     f"{ANNOTATION}=approve"),
        "Stale": ("False", "Fresh", ""), "Progressing": ("False", "WaitingForApproval", msg)}
    assert events(d) == [("ProposalReady", msg, False)]
    assert (d.status.proposal is not None and d.status.proposal.created_at == NOW
            and d.status.proposal.fingerprint == FP)


def test_approval_and_each_step_are_reported_on_the_conditions_and_events() -> None:
    d = step(proposal_ready(), obs(annotation="approve", fingerprint=FP))
    c = conditions(d.status)
    created = "PartitionReassignment rb-1-0001 (1 of 2) created"
    assert c["Approved"] == ("True", "Approved", "approved by annotation")
    assert c["Ready"] == ("False", "Rebalancing", created)
    assert c["Progressing"] == ("True", "Rebalancing", created)
    assert events(d) == [("Approved", "proposal 1 approved by annotation", False),
                         ("ReassignmentCreated", created, False)]
    assert d.status.approved_at == NOW
    second = step(d.status, obs(current=StepSeen("Completed", "100%", "")))
    assert events(second) == [("ReassignmentCreated",
                               "PartitionReassignment rb-1-0002 (2 of 2) created", False)]
    last = step(second.status, obs(current=StepSeen("Completed", "100%", "")))
    done = "proposal 1 executed: 2 PartitionReassignment(s) Completed, 4 replicas (2.5 GB) moved"
    assert conditions(last.status)["Ready"] == ("True", "Completed", done)
    assert conditions(last.status)["Progressing"] == ("False", "Completed", done)
    assert events(last) == [("Completed", done, False)]
    assert last.status.completed_at == NOW and last.status.current_progress is None


def test_an_approval_by_spec_on_a_ready_proposal_needs_no_annotation_to_remove() -> None:
    st = proposal_ready(spec(approval="Approved"))
    d = step(st, obs(spec(approval="Approved"), fingerprint=FP))
    assert d.status.decided_by == "spec.approval" and d.remove_annotation is False
    # an approve annotation on a spec-rejected proposal is the user's reject: nothing runs
    d = step(proposal_ready(spec(approval="Rejected")), obs(spec(approval="Rejected")))
    assert d.status.decided_by == "spec.approval" and d.remove_annotation is False


def test_stale_is_said_on_every_condition_with_both_fingerprints() -> None:
    d = step(proposal_ready(), obs(annotation="approve", fingerprint="b" * 64))
    msg = ("proposal 1 is stale: the cluster's replica assignment changed since it was "
           "computed (fingerprint aaaaaaaaaaaa -> bbbbbbbbbbbb); nothing was executed; annotate "
           f"{ANNOTATION}=refresh (or change the spec) for a new proposal")
    c = conditions(d.status)
    assert c["Stale"] == ("True", "AssignmentChanged", msg)
    assert c["Degraded"] == ("True", "StaleProposal", msg)
    assert c["Ready"] == ("False", "Stale", msg)
    assert events(d) == [("Stale", msg, True)]
    st = proposal_ready()
    st.proposal = None  # a status without figures: nothing to compare, so stale
    d = step(st, obs(annotation="approve", fingerprint="b" * 64))
    assert "(fingerprint None -> bbbbbbbbbbbb)" in conditions(d.status)["Ready"][2]


def test_an_empty_proposal_completes_on_approval_with_its_reason() -> None:
    st = proposal_ready()
    st.steps = []
    d = step(st, obs(annotation="approve", fingerprint=FP))
    assert conditions(d.status)["Ready"] == (
        "True", "Completed", "nothing to move: the proposal is empty")


def test_an_unknown_annotation_on_a_ready_proposal_is_removed() -> None:
    d = step(proposal_ready(), obs(annotation="refreshh"))
    assert d.remove_annotation is False  # an unknown value stays, Degraded says why
    assert conditions(d.status)["Degraded"][:2] == ("True", "UnknownAnnotation")
    d = step(proposal_ready(), obs())
    assert d.remove_annotation is False and d.events == []


def test_rejections_say_when_and_by_whom() -> None:
    def said(d: Decision) -> tuple[tuple[str, str, str], ...]:
        c = conditions(d.status)
        return c["Approved"], c["Ready"], c["Progressing"]

    d = step(proposal_ready(), obs(annotation="reject"))
    msg = "proposal 1 rejected before execution (by annotation)"
    assert said(d) == (("False", "Rejected", msg),) * 3
    assert events(d) == [("Rejected", msg, False)] and d.status.decided_by == "annotation"
    d = step(step(KafkaRebalanceStatus(), obs()).status, obs(spec(approval="Rejected")))
    msg = "proposal 1 rejected while the planner ran (by spec.approval)"
    assert said(d) == (("False", "Rejected", msg),) * 3 and d.remove_annotation is False
    assert d.actions == [DeleteProposal(1)]
    d = step(rebalancing(), obs(annotation="reject", current=StepSeen("Moving", "10%", "")))
    msg = ("proposal 1 rejected while rebalancing: rb-1-0001 cancelled (its moves in flight "
           "roll back), 0 of 2 reassignments had completed (by annotation)")
    assert said(d) == (("False", "Rejected", msg),) * 3
    st = rebalancing()
    st.steps[0].state, st.steps[1].state = "Completed", "Created"
    d = step(st, obs(spec(approval="Rejected"), current=StepSeen("Moving", "10%", "")))
    assert "rb-1-0002 cancelled (its moves in flight roll back), 1 of 2 reassignments had " \
        "completed (by spec.approval)" in conditions(d.status)["Ready"][2]


def test_a_finished_rebalance_rejected_then_approved_in_git_plans_afresh() -> None:
    st = proposal_ready(spec(approval="Rejected"))
    rejected = step(st, obs(spec(approval="Rejected"))).status
    assert rejected.phase == "Rejected"
    d = step(rejected, obs(spec(approval="Approved")))
    assert d.status.phase == "PendingProposal" and d.status.proposal_id == 2
    assert d.actions == [DeleteProposal(1), CreateJob(2)]
    assert events(d)[0][1].startswith("proposal 2 requested (approval changed to Approved)")
    assert step(d.status, obs(spec(approval="Approved"), job="running")).actions == []
    # rejected by annotation: an Approved spec does not undo it
    by_hand = step(proposal_ready(spec(approval="Approved")),
                   obs(spec(approval="Approved"), annotation="reject")).status
    assert step(by_hand, obs(spec(approval="Approved"))).actions == []
    # Ready with spec.approval Approved and decided by spec: nothing to do either
    done = rebalancing(spec(approval="Approved"))
    done.phase = "Ready"
    assert step(done, obs(spec(approval="Approved"))).actions == []


def test_a_status_edited_by_hand_goes_on_with_the_next_step_or_ends() -> None:
    st = rebalancing()
    st.steps[0].state = "Completed"  # none Created, one Pending
    d = step(st, obs(current=StepSeen("", "", "")))
    assert d.actions == [CreateReassignment(st.steps[1].model_copy(update={"state": "Created"}),
                                            1)]
    st.steps[1].state = "Completed"
    d = step(st, obs(current=StepSeen("", "", "")))
    assert d.status.phase == "Ready" and d.actions == []
    assert conditions(d.status)["Ready"][2] == (
        "proposal 1 executed: 2 PartitionReassignment(s) Completed, 4 replicas (2.5 GB) moved")


def test_step_failures_name_the_step_what_completed_and_the_fix() -> None:
    st = rebalancing()
    d = step(st, obs(current=StepSeen("Failed", "40%", "broker 5 is gone")))
    msg = ("PartitionReassignment rb-1-0001 ended Failed: broker 5 is gone; 0 of 2 had "
           "completed, the rest were not created; see `kubectl describe preas rb-1-0001`, then "
           f"annotate {ANNOTATION}=refresh for a new proposal")
    c = conditions(d.status)
    assert c["Degraded"] == ("True", "ReassignmentFailed", msg)
    assert c["Ready"] == ("False", "Failed", msg)
    assert c["Progressing"] == ("False", "ReassignmentFailed", msg)
    assert c["ProposalReady"][1] == "ProposalReady"  # the proposal itself was fine
    assert events(d) == [("ReassignmentFailed", msg, True)]
    assert [x.state for x in d.status.steps] == ["Failed", "Pending"]
    d = step(st, obs(current=StepSeen("Cancelled", "40%", "")))
    assert [x.state for x in d.status.steps] == ["Cancelled", "Pending"]
    assert "ended Cancelled; 0 of 2 had completed" in conditions(d.status)["Ready"][2]
    d = step(st, obs(current=None))
    assert [x.state for x in d.status.steps] == ["Failed", "Pending"]
    assert conditions(d.status)["Ready"] == (
        "False", "Failed", "PartitionReassignment rb-1-0001 was deleted while it ran (its "
        f"moves in flight were rolled back); annotate {ANNOTATION}=refresh for a new proposal")


def test_annotations_while_rebalancing_or_after_are_ignored_with_a_warning() -> None:
    d = step(rebalancing(), obs(annotation="approve", current=StepSeen("Moving", "10%", "")))
    assert events(d) == [("AnnotationIgnored", f"{ANNOTATION}=approve ignored while "
                          f"rebalancing; annotate {ANNOTATION}=reject to stop, then refresh",
                          True)]
    st = rebalancing()
    st.plan_digest = "other"
    d = step(st, obs(current=StepSeen("Moving", "10%", "")))
    assert conditions(d.status)["Progressing"] == (
        "True", "Rebalancing", "the spec changed while proposal 1 runs: a new proposal is made "
        "when it ends")
    assert (d.status.current, d.status.current_progress) == ("rb-1-0001", "10%")
    d = step(st, obs(current=StepSeen("Moving", "", "")))
    assert d.status.current_progress == "0%"
    done = rebalancing()
    done.phase = "Ready"
    d = step(done, obs(annotation="approve"))
    assert d.remove_annotation is True
    assert events(d) == [("AnnotationIgnored", f"{ANNOTATION}=approve: nothing to approve in "
                          f"phase Ready; annotate {ANNOTATION}=refresh for a new proposal",
                          True)]


def test_a_spec_rejection_wins_over_an_approve_annotation_and_drops_it() -> None:
    d = step(proposal_ready(), obs(spec(approval="Rejected"), annotation="approve"))
    assert d.status.phase == "Rejected"
    assert d.status.decided_by == "spec.approval" and d.remove_annotation is True


def test_a_run_whose_figures_were_lost_still_ends_with_a_summary() -> None:
    st = rebalancing()
    st.proposal = None
    st.steps[0].state, st.steps[1].state = "Completed", "Created"
    d = step(st, obs(current=StepSeen("Completed", "100%", "")))
    assert conditions(d.status)["Ready"] == (
        "True", "Completed", "proposal 1 executed: 2 PartitionReassignment(s) Completed, done")


def test_the_summary_s_figures_details_and_defaults_reach_the_status() -> None:
    f = figures_of({"goal": "spread", "throttleBytesPerSecond": 5, "sources": {
        "sizes": "DescribeLogDirs", "window": {"h": 1}},
        "maxOverMean": {"replicas": {"before": 2, "after": 1}, "leaders": {"before": 1},
                        "disk": "x"},
        "violations": [{"constraint": "rack", "subject": "orders-0", "reason": "one rack"},
                       {"constraint": "rf", "reason": None}, "plain"],
        "shortfalls": ["leaders 1.2 > 1.1"]})
    assert (f.goal, f.throttle_bytes_per_second, f.estimated_seconds) == ("spread", 5, None)
    assert f.sources == {"sizes": "DescribeLogDirs", "window": '{"h": 1}'}
    assert list(f.balance) == ["replicas"]
    assert f.violations == ["rack: orders-0: one rack", "rf", "plain"]
    assert f.targets_not_reached == ["leaders 1.2 > 1.1"]  # the planner's older key
    assert figures_of({"targetsNotReached": ["x"], "shortfalls": ["y"]}).targets_not_reached \
        == ["x"]
    empty = figures_of({})
    assert (empty.goal, empty.partitions_in_plan, empty.partitions_total,
            empty.replicas_to_move, empty.bytes_to_move, empty.resources,
            empty.throttle_bytes_per_second) == ("?", 0, 0, 0, 0, 0, None)


def test_the_bytes_between_log_dirs_reach_the_status_only_when_planned() -> None:
    """A JBOD plan's copies between log directories (no network) are their own figures;
    a plan without log dirs leaves them out of the status (exclude_none)."""
    f = figures_of({"goal": "remove-disks 3:/d1", "bytesToMove": 0,
                    "replicasToMoveBetweenDirs": 4, "bytesToMoveBetweenDirs": 800})
    assert (f.bytes_to_move, f.replicas_to_move_between_dirs,
            f.bytes_to_move_between_dirs) == (0, 4, 800)
    dumped = f.model_dump(by_alias=True, mode="json", exclude_none=True)
    assert (dumped["replicasToMoveBetweenDirs"], dumped["bytesToMoveBetweenDirs"]) == (4, 800)
    plain = figures_of({"goal": "rebalance", "bytesToMove": 5}).model_dump(
        by_alias=True, mode="json", exclude_none=True)
    assert "bytesToMoveBetweenDirs" not in plain and "replicasToMoveBetweenDirs" not in plain


def test_only_resource_yaml_keys_of_a_part_are_steps() -> None:
    got = steps_of("rb", 1, [("cm", {"resource-0002.yaml": "", "resource-0001.yaml": "",
                                     "notes.yaml": "", "resource-0003.json": ""})])
    assert [(s.name, s.key) for s in got] == [("rb-1-0001", "resource-0001.yaml"),
                                              ("rb-1-0002", "resource-0002.yaml")]


def test_progress_counts_the_completed_steps_while_the_next_one_runs() -> None:
    st = rebalancing()
    st.steps[0].state = "Completed"
    st.steps.append(st.steps[1].model_copy(update={"name": "rb-1-0003"}))
    st.steps[1].state = "Created"
    d = step(st, obs(current=StepSeen("Moving", "10%", "")))
    assert d.status.progress == "1/3"
    failed = step(st, obs(current=StepSeen("Failed", "10%", "")))
    assert "; 1 of 3 had completed" in conditions(failed.status)["Ready"][2]
    created = step(proposal_ready(), obs(annotation="approve", fingerprint=FP)).status
    assert created.current_progress == "0%"


@pytest.mark.parametrize(("data", "message"), [
    ({"parts": "[]"}, "ConfigMap cm: no summary.json in data; the planner wrote an incomplete "
     "proposal: refresh to plan again"),
    ({}, "ConfigMap cm: no summary.json or parts in data; the planner wrote an incomplete "
     "proposal: refresh to plan again"),
    ({"summary.json": "{", "parts": "[]"}, "ConfigMap cm: summary.json or parts is not JSON "
     "(Expecting property name enclosed in double quotes: line 1 column 2 (char 1)); refresh "
     "to plan again"),
    ({"summary.json": "{}", "parts": "[1]"}, "ConfigMap cm: summary.json must be an object and "
     "parts a list of ConfigMap names; refresh to plan again")])
def test_a_malformed_index_says_exactly_what_is_wrong(data: dict[str, str], message: str) -> None:
    assert parse_index("cm", data).error == message


def test_a_reject_annotation_while_planning_is_the_user_s_and_is_dropped() -> None:
    st = step(KafkaRebalanceStatus(), obs()).status
    d = step(st, obs(annotation="reject", job="running"))
    assert d.status.phase == "Rejected" and d.actions == [DeleteProposal(1)]
    assert d.status.decided_by == "annotation" and d.remove_annotation is True


def test_a_rebalancing_pass_with_the_same_spec_keeps_the_step_s_progress_message() -> None:
    d = step(rebalancing(), obs(current=StepSeen("Moving", "10%", "")))
    assert conditions(d.status)["Progressing"] == (
        "True", "Rebalancing", "PartitionReassignment rb-1-0001 (1 of 2) created")
