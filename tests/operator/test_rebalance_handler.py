"""The KafkaRebalance handler (handlers/rebalance.py) called in-process through
handler_driver.py, its API calls (handlers/kube.py) going over HTTP to kmock: the planner Job
and the proposal ConfigMaps are read and written where the contract says, the
PartitionReassignments are created, cancelled and deleted, and a refused call keeps the phase
and says why. The test plays the job controller (the Job's status) and the planner (the
ConfigMaps); test_rebalance_deployed.py runs the same flow with the real planner."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import kopf
import pytest
from handler_driver import CLUSTER, Driver, condition
from harness import Api
from kopf._cogs.clients import auth  # kopf's authenticated requests read this vault
from kopf._cogs.structs import credentials

from controller_core.planning.fingerprint import admin_fingerprint
from kraftsman.handlers import kube
from kraftsman.handlers.rebalance import ProposalError, reassignment_body
from kraftsman.planner_job_spec import PlannerConfig
from kraftsman.proposal import (
    LABEL_PROPOSAL,
    LABEL_REBALANCE,
    owner_reference,
    proposal_config_maps,
)
from kraftsman.rebalance_flow import ANNOTATION, LABEL_NAMESPACE
from kraftsman.resources import API_VERSION, KafkaRebalanceSpec

DOC = """\
apiVersion: kraftsman.io/v1alpha1
kind: PartitionReassignment
metadata:
  name: plan-abc-{n}
  labels: {{kraftsman.io/plan: abc}}
  annotations: {{argocd.argoproj.io/sync-wave: "{n}", kraftsman.io/plan-step: "{n}/2"}}
spec:
  clusterRef: {{name: demo}}
  partitions:
  - {{topic: orders, partition: {n}, replicas: [3, 4, 5]}}
"""
PREAS = f"/apis/{API_VERSION}/namespaces/default/partitionreassignments"
JOBS = "/apis/batch/v1/namespaces/default/jobs"
CMS = "/api/v1/namespaces/default/configmaps"


class Env:
    def __init__(self, d: Driver, api: Api) -> None:
        self.d, self.api = d, api

    async def get(self, path: str) -> dict[str, Any] | None:
        async with self.api.session.get(self.api.base + path) as r:
            if r.status == 404:
                return None
            assert r.status < 300, await r.text()
            obj = dict(await r.json())
            return None if obj.get("metadata", {}).get("deletionTimestamp") else obj

    async def post(self, path: str, body: dict[str, Any]) -> None:
        async with self.api.session.post(self.api.base + path, json=body) as r:
            assert r.status < 300, await r.text()

    async def merge(self, path: str, body: dict[str, Any]) -> None:
        async with self.api.session.patch(self.api.base + path, json=body, headers={
                "Content-Type": "application/merge-patch+json"}) as r:
            assert r.status < 300, await r.text()

    async def fingerprint(self) -> str:
        rt = self.d.rt
        return str(await rt.run(rt.clusters[("default", "demo")], admin_fingerprint))

    async def plan(self, rb: dict[str, Any], proposal_id: int, *, fingerprint: str | None = None,
                   docs: int = 2) -> None:
        """The planner: the proposal's ConfigMaps, then the Job succeeds."""
        summary = {"goal": "rebalance", "partitionsTotal": 6, "partitionsInPlan": docs,
                   "replicasToMove": 3 * docs, "bytesToMove": 3_000_000 * docs,
                   "resources": docs, "estimatedSeconds": 9.0,
                   "fingerprint": fingerprint or await self.fingerprint()}
        for cm in proposal_config_maps("default", "rb", str(proposal_id), rb["metadata"]["uid"],
                                       summary, [DOC.format(n=n) for n in range(docs)]):
            await self.post(CMS, cm)
        await self.merge(f"{JOBS}/rb-plan-{proposal_id}/status", {"status": {
            "succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}})

    async def step_ends(self, name: str, phase: str) -> None:
        """The PartitionReassignment's own handler reports its end."""
        await self.merge(f"{PREAS}/{name}/status", {"status": {
            "phase": phase, "progress": "100%" if phase == "Completed" else "40%",
            "conditions": [{"type": "Degraded", "status": "True", "reason": "X",
                            "message": "broker 5 is gone"}] if phase == "Failed" else []}})

    async def approve(self, rb: dict[str, Any]) -> None:
        rb["metadata"]["annotations"] = {ANNOTATION: "approve"}
        await self.d.call(rb, "reconcile")
        assert self.d.patch["metadata"]["annotations"][ANNOTATION] is None
        rb["metadata"]["annotations"] = {}


@pytest.fixture
async def env(kmock: Any, api: Api, tmp_path: Path) -> AsyncIterator[Env]:
    vault = credentials.Vault()
    await vault.populate({"test": credentials.ConnectionInfo(server=str(kmock.url),
                                                             insecure=True)})
    token = auth.vault_var.set(vault)
    d = Driver(tmp_path)
    d.rt.planner = PlannerConfig(image="kraftsman:test", state_claim="kraftsman-state")
    d.rt.settings = d.settings
    await d.ready_cluster("demo", CLUSTER)
    try:
        yield Env(d, api)
    finally:
        await d.stop()
        auth.vault_var.reset(token)
        await vault.close()


def rebalance(d: Driver) -> dict[str, Any]:
    return d.create("KafkaRebalance", "rb", {"clusterRef": {"name": "demo"}, "goal": "rebalance"})


async def proposal_ready(env: Env, **plan: Any) -> dict[str, Any]:
    rb = rebalance(env.d)
    await env.d.call(rb, "reconcile")
    await env.plan(rb, 1, **plan)
    await env.d.call(rb, "reconcile")
    assert rb["status"]["phase"] == "ProposalReady", rb["status"]
    return rb


async def test_the_planner_job_is_created_and_waited_for_then_its_proposal_is_read(
        env: Env) -> None:
    rb = rebalance(env.d)
    await env.d.call(rb, "reconcile")
    assert rb["status"]["phase"] == "PendingProposal"
    job = await env.get(f"{JOBS}/rb-plan-1")
    assert job is not None
    assert job["metadata"]["ownerReferences"] == [owner_reference("rb", rb["metadata"]["uid"])]
    assert "--master" not in job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert job["metadata"]["labels"][LABEL_REBALANCE] == "rb"
    assert job["metadata"]["labels"][LABEL_NAMESPACE] == "default"
    assert job["metadata"]["labels"][LABEL_PROPOSAL] == "1"
    await env.d.call(rb, "reconcile")  # the Job runs: still planning, nothing new
    assert rb["status"]["phase"] == "PendingProposal"
    assert condition(rb, "ProposalReady")["reason"] == "Planning"
    await env.plan(rb, 1)
    await env.d.call(rb, "reconcile")
    st = rb["status"]
    assert st["phase"] == "ProposalReady", st
    assert [(s["name"], s["configMap"], s["key"]) for s in st["steps"]] == [
        ("rb-1-0001", "rb-proposal-1-1", "resource-0001.yaml"),
        ("rb-1-0002", "rb-proposal-1-1", "resource-0002.yaml")]
    assert st["moves"] == 6
    assert ("Normal", "ProposalReady") in [(t, r) for t, r, _ in env.d.events]


async def test_a_planner_job_that_cannot_be_built_is_unavailable_and_says_why(
        env: Env) -> None:
    """A KafkaRebalance whose first Job cannot be built had no phase at all (kubectl get
    showed an empty PHASE): it is Unavailable, and goes on once the operator is fixed."""
    env.d.rt.planner = PlannerConfig(image="kraftsman:test")  # state on an emptyDir
    rb = rebalance(env.d)
    await env.d.call(rb, "reconcile")
    assert rb["status"].get("phase") == "Unavailable"
    degraded = condition(rb, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "PlannerUnavailable")
    assert "install the chart with state.type=persistentVolumeClaim" in degraded["message"]
    assert condition(rb, "Ready")["reason"] == "PlannerUnavailable"
    assert await env.get(f"{JOBS}/rb-plan-1") is None
    env.d.rt.planner = PlannerConfig(image="kraftsman:test", state_claim="kraftsman-state")
    await env.d.call(rb, "reconcile")
    assert rb["status"]["phase"] == "PendingProposal"
    assert condition(rb, "Degraded")["status"] == "False"
    assert await env.get(f"{JOBS}/rb-plan-1") is not None


async def test_a_proposal_part_not_written_yet_is_waited_for_while_the_job_runs(
        env: Env) -> None:
    rb = rebalance(env.d)
    await env.d.call(rb, "reconcile")
    summary = {"goal": "rebalance", "resources": 1, "fingerprint": "f"}
    maps = proposal_config_maps("default", "rb", "1", rb["metadata"]["uid"], summary,
                                [DOC.format(n=0)])
    await env.post(CMS, maps[-1])  # the index only (a planner writes it last; here not)
    await env.d.call(rb, "reconcile")
    assert rb["status"]["phase"] == "PendingProposal"
    await env.merge(f"{JOBS}/rb-plan-1/status", {"status": {"failed": 1}})
    await env.d.call(rb, "reconcile")
    assert rb["status"]["phase"] == "Failed"
    message = condition(rb, "Degraded")["message"]
    assert message == ("ConfigMap default/rb-proposal-1-1, part of proposal 1, is missing; "
                       f"annotate {ANNOTATION}=refresh to plan again")


async def test_a_proposal_whose_parts_hold_fewer_reassignments_than_counted_fails(
        env: Env) -> None:
    rb = rebalance(env.d)
    await env.d.call(rb, "reconcile")
    summary = {"goal": "rebalance", "resources": 3, "fingerprint": "f"}
    for cm in proposal_config_maps("default", "rb", "1", rb["metadata"]["uid"], summary,
                                   [DOC.format(n=0), DOC.format(n=1)]):
        await env.post(CMS, cm)
    await env.d.call(rb, "reconcile")
    assert rb["status"]["phase"] == "Failed"
    assert ("summary.json counts 3 reassignments but its parts hold 2"
            in condition(rb, "Degraded")["message"])


async def test_config_maps_owned_by_another_rebalance_are_not_read(env: Env) -> None:
    rb = rebalance(env.d)
    await env.d.call(rb, "reconcile")
    for cm in proposal_config_maps("default", "rb", "1", "someone-else", {"resources": 0},
                                   []):
        await env.post(CMS, cm)
    await env.merge(f"{JOBS}/rb-plan-1/status", {"status": {"succeeded": 1}})
    await env.d.call(rb, "reconcile")
    assert rb["status"]["phase"] == "Failed"
    assert "succeeded but wrote no ConfigMap rb-proposal-1" in condition(rb, "Degraded")["message"]


async def test_approval_runs_the_steps_one_after_another_until_ready(env: Env) -> None:
    rb = await proposal_ready(env)
    await env.approve(rb)
    assert rb["status"]["phase"] == "Rebalancing"
    first = await env.get(f"{PREAS}/rb-1-0001")
    assert first is not None and await env.get(f"{PREAS}/rb-1-0002") is None
    assert first["spec"]["clusterRef"] == {"name": "demo"}
    assert first["spec"]["partitions"][0]["partition"] == 0
    assert first["metadata"]["ownerReferences"] == [owner_reference("rb", rb["metadata"]["uid"])]
    assert first["metadata"]["namespace"] == "default"
    # the document's own labels and annotations stay; Argo CD's sync wave goes
    assert first["metadata"]["labels"] == {"kraftsman.io/plan": "abc", LABEL_REBALANCE: "rb",
                                           LABEL_PROPOSAL: "1"}
    assert first["metadata"]["annotations"] == {"kraftsman.io/plan-step": "0/2"}
    await env.d.call(rb, "reconcile")  # the step runs
    assert rb["status"]["currentProgress"] == "0%"
    await env.merge(f"{PREAS}/rb-1-0001/status", {"status": {"phase": "Running",
                                                            "progress": "40%"}})
    await env.d.call(rb, "reconcile")
    assert rb["status"]["currentProgress"] == "40%"
    await env.step_ends("rb-1-0001", "Completed")
    await env.d.call(rb, "reconcile")
    second = await env.get(f"{PREAS}/rb-1-0002")
    assert second is not None and second["spec"]["partitions"][0]["partition"] == 1
    await env.step_ends("rb-1-0002", "Completed")
    await env.d.call(rb, "reconcile")
    assert rb["status"]["phase"] == "Ready"
    assert rb["status"]["progress"] == "2/2"


async def test_the_running_step_s_stalled_condition_is_read_onto_the_rebalance(
        env: Env) -> None:
    rb = await proposal_ready(env)
    await env.approve(rb)
    stuck = "no byte progress: orders-0 (adding on broker 3; 0 B copied in 600 s)"
    await env.merge(f"{PREAS}/rb-1-0001/status", {"status": {"phase": "Running", "conditions": [
        {"type": "Stalled", "status": "True", "reason": "NoProgress", "message": stuck}]}})
    await env.d.call(rb, "reconcile")
    assert condition(rb, "Stalled")["message"] == f"PartitionReassignment rb-1-0001: {stuck}"
    assert ("Warning", "Stalled") in [(t, r) for t, r, _ in env.d.events]
    await env.merge(f"{PREAS}/rb-1-0001/status", {"status": {"conditions": [
        {"type": "Stalled", "status": "False", "reason": "ProgressResumed", "message": ""}]}})
    await env.d.call(rb, "reconcile")
    assert condition(rb, "Stalled")["status"] == "False"


async def test_a_failed_step_fails_the_rebalance_with_the_step_s_degraded_message(
        env: Env) -> None:
    rb = await proposal_ready(env)
    await env.approve(rb)
    await env.step_ends("rb-1-0001", "Failed")
    await env.d.call(rb, "reconcile")
    assert rb["status"]["phase"] == "Failed"
    assert ("PartitionReassignment rb-1-0001 ended Failed: broker 5 is gone"
            in condition(rb, "Degraded")["message"])


async def test_a_completed_step_s_message_is_its_succeeded_condition(env: Env) -> None:
    """With no Degraded condition, the message is the Succeeded one (here: of a Cancelled
    step, which ends the rebalance and shows it)."""
    rb = await proposal_ready(env)
    await env.approve(rb)
    await env.merge(f"{PREAS}/rb-1-0001/status", {"status": {"phase": "Cancelled", "conditions": [
        {"type": "Degraded", "status": "False", "message": "not this"},
        {"type": "Succeeded", "status": "False", "message": "cancelled by the user"}]}})
    await env.d.call(rb, "reconcile")
    assert ("ended Cancelled: cancelled by the user;"
            in condition(rb, "Degraded")["message"])


async def test_a_deleted_step_fails_the_rebalance(env: Env) -> None:
    rb = await proposal_ready(env)
    await env.approve(rb)
    async with env.api.session.delete(f"{env.api.base}{PREAS}/rb-1-0001") as r:
        assert r.status < 300
    await env.d.call(rb, "reconcile")
    assert rb["status"]["phase"] == "Failed"
    assert condition(rb, "Degraded")["reason"] == "ReassignmentDeleted", rb["status"]


async def test_a_stale_proposal_is_not_executed(env: Env) -> None:
    rb = await proposal_ready(env, fingerprint="0" * 64)
    await env.approve(rb)
    assert rb["status"]["phase"] == "Stale"
    assert await env.get(f"{PREAS}/rb-1-0001") is None


async def test_a_pass_that_ends_degraded_counts_one_reconcile_error(env: Env) -> None:
    """The flow sets its own conditions (no common.degrade), and a pass that consumes an
    annotation writes its status twice: still one error per pass for /metrics."""
    from kraftsman.metrics import RECONCILE_ERRORS

    def count() -> float:
        return RECONCILE_ERRORS.labels(kind="KafkaRebalance",
                                       reason="StaleProposal")._value.get()

    rb = await proposal_ready(env, fingerprint="0" * 64)
    before = count()
    await env.approve(rb)
    assert rb["status"]["phase"] == "Stale"
    assert count() == before + 1


async def test_approval_waits_while_the_cluster_is_not_open(env: Env) -> None:
    rb = await proposal_ready(env)
    env.d.rt.clusters.pop(("default", "demo"))
    rb["metadata"]["annotations"] = {ANNOTATION: "approve"}
    await env.d.call(rb, "reconcile")
    assert rb["status"]["phase"] == "ProposalReady"
    approved = condition(rb, "Approved")
    assert (approved["status"], approved["reason"]) == ("False", "WaitingForCluster")
    assert approved["message"] == ("approved; waiting for KafkaCluster demo to be Ready to "
                                   "check that the proposal is not stale")
    assert await env.get(f"{PREAS}/rb-1-0001") is None


async def test_reject_while_rebalancing_cancels_the_running_step(env: Env) -> None:
    rb = await proposal_ready(env)
    await env.approve(rb)
    rb["metadata"]["annotations"] = {ANNOTATION: "reject"}
    await env.d.call(rb, "reconcile")
    assert rb["status"]["phase"] == "Rejected"
    running = await env.get(f"{PREAS}/rb-1-0001")
    assert running is not None and running["spec"].get("cancel") is True


async def test_refresh_deletes_the_old_proposal_s_job_and_config_maps(env: Env) -> None:
    rb = await proposal_ready(env)
    rb["metadata"]["annotations"] = {ANNOTATION: "refresh"}
    await env.d.call(rb, "reconcile")
    assert rb["status"]["phase"] == "PendingProposal"
    assert rb["status"]["proposalId"] == 2
    assert await env.get(f"{JOBS}/rb-plan-1") is None
    assert await env.get(f"{CMS}/rb-proposal-1") is None
    assert await env.get(f"{CMS}/rb-proposal-1-1") is None
    assert await env.get(f"{JOBS}/rb-plan-2") is not None


async def test_deleting_a_rebalancing_rebalance_deletes_its_running_step_and_its_jobs(
        env: Env) -> None:
    rb = await proposal_ready(env)
    await env.approve(rb)
    await env.d.call(rb, "cleanup")
    assert await env.get(f"{PREAS}/rb-1-0001") is None
    assert await env.get(f"{JOBS}/rb-plan-1") is None
    assert [(r, m) for _, r, m in env.d.events if r == "Deleted"] == [
        ("Deleted", "deleted while rebalancing: PartitionReassignment rb-1-0001 deleted (its "
         "moves in flight roll back)")]


async def test_a_deletion_the_api_refuses_is_retried_naming_the_call(env: Env) -> None:
    rb = await proposal_ready(env)
    await env.approve(rb)
    closed = credentials.Vault()  # nothing listens there: the API server is unreachable
    await closed.populate({"closed": credentials.ConnectionInfo(
        server="http://127.0.0.1:9", insecure=True)})
    token = auth.vault_var.set(closed)
    try:
        with pytest.raises(kopf.TemporaryError,
                           match=r"^delete PartitionReassignment default/rb-1-0001: \w*Error"):
            await env.d.call(rb, "cleanup")
        rb["status"]["steps"] = []  # nothing running: only the Jobs are listed
        with pytest.raises(kopf.TemporaryError, match=r"^list Jobs in default: \w*Error"):
            await env.d.call(rb, "cleanup")
    finally:
        auth.vault_var.reset(token)
        await closed.close()


async def test_a_step_name_taken_by_another_resource_is_an_api_error_naming_it(
        env: Env) -> None:
    rb = await proposal_ready(env)
    await env.post(PREAS, {"apiVersion": API_VERSION, "kind": "PartitionReassignment",
                           "metadata": {"name": "rb-1-0001", "namespace": "default"},
                           "spec": {"clusterRef": {"name": "demo"}, "partitions": []}})
    rb["metadata"]["annotations"] = {ANNOTATION: "approve"}
    await env.d.call(rb, "reconcile")
    assert rb["status"]["phase"] == "ProposalReady"  # the old status, and why
    degraded = condition(rb, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "ApiError")
    assert degraded["message"] == (
        "PartitionReassignment default/rb-1-0001 exists and is not part of this "
        "KafkaRebalance; delete it, or rename this KafkaRebalance")


async def test_a_proposal_document_that_is_not_a_reassignment_is_proposal_invalid(
        env: Env) -> None:
    rb = await proposal_ready(env)
    await env.merge(f"{CMS}/rb-proposal-1-1", {"data": {"resource-0001.yaml": "kind: Pod\n"}})
    rb["metadata"]["annotations"] = {ANNOTATION: "approve"}
    await env.d.call(rb, "reconcile")
    degraded = condition(rb, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "ProposalInvalid")
    assert degraded["message"].startswith(
        "ConfigMap default/rb-proposal-1-1 key resource-0001.yaml: not a PartitionReassignment")


async def test_the_kube_calls_say_which_call_failed_and_tolerate_a_missing_object(
        env: Env, kmock: Any) -> None:
    """Also what goes over the wire: a merge patch's media type (the API server refuses a
    plain JSON patch body), DeleteOptions with background propagation (a Job deleted without
    it keeps its pods: batch/v1's default is orphan), the label selector of a list."""
    log = logging.getLogger("test")
    s = env.d.settings
    kmock.recorded = []
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "x", "namespace": "default", "labels": {"a": "1", "b": "2"}}}
    assert await kube.create(kube.url("v1", "configmaps", "default"), cm, "cm", s, log)
    assert not await kube.create(kube.url("v1", "configmaps", "default"), cm, "cm", s, log)
    other = {**cm, "metadata": {**cm["metadata"], "name": "y", "labels": {"a": "1"}}}
    assert await kube.create(kube.url("v1", "configmaps", "default"), other, "cm", s, log)
    assert await kube.list_names(kube.url("v1", "configmaps", "default"), {"a": "1", "b": "2"},
                                 "cms", s, log) == ["x"]
    await kube.patch(kube.url("v1", "configmaps", "default", "x"), {"data": {"k": "v"}}, "cm",
                     s, log)
    got = await kube.get(kube.url("v1", "configmaps", "default", "x"), "cm", s, log)
    assert got is not None and got["data"] == {"k": "v"}
    await kube.delete(kube.url("v1", "configmaps", "default", "x"), "cm", s, log)
    assert await kube.get(kube.url("v1", "configmaps", "default", "x"), "cm", s, log) is None
    sent = {str(getattr(r.method, "name", r.method)).upper(): r for r in kmock.recorded}
    assert {k.lower(): v for k, v in sent["PATCH"].headers.items()}["content-type"] == (
        "application/merge-patch+json")
    assert sent["DELETE"].data == {"propagationPolicy": "Background"}
    listed = [r for r in kmock.recorded if "labelSelector" in r.params]
    assert [dict(r.params) for r in listed] == [{"labelSelector": "a=1,b=2"}]
    kmock.recorded = None
    # gone already: no error
    await kube.delete(kube.url("v1", "configmaps", "default", "x"), "cm", s, log)
    await kube.patch(kube.url("v1", "configmaps", "default", "x"), {"data": {}}, "cm", s, log)
    # nothing listens on this port: every call fails with a connection error
    closed = credentials.Vault()
    await closed.populate({"closed": credentials.ConnectionInfo(
        server="http://127.0.0.1:9", insecure=True)})
    token = auth.vault_var.set(closed)
    try:
        path = kube.url("v1", "configmaps", "default", "x")
        for method, call in [("get", kube.get(path, "ConfigMap x", s, log)),
                             ("create", kube.create(path, {}, "ConfigMap x", s, log)),
                             ("patch", kube.patch(path, {}, "ConfigMap x", s, log)),
                             ("delete", kube.delete(path, "ConfigMap x", s, log)),
                             ("list", kube.list_names(path, {}, "ConfigMap x", s, log))]:
            with pytest.raises(kube.KubeError, match=rf"^{method} ConfigMap x: \w*Error: "):
                await call
    finally:
        auth.vault_var.reset(token)
        await closed.close()
    with pytest.raises(kube.KubeError, match=r"^create Thing t: APINotFoundError: "):
        await kube.create("/api/v1/namespaces/default/secrets/x/y", {}, "Thing t", s, log)
    with pytest.raises(kube.KubeError, match=r"^list Things: APINotFoundError: "):
        await kube.list_names("/api/v1/namespaces/default/secrets/x/y", {}, "Things", s, log)
    assert kube.url("batch/v1", "jobs", "ns", "a b") == "/apis/batch/v1/namespaces/ns/jobs/a%20b"
    assert kube.url("v1", "configmaps", "ns") == "/api/v1/namespaces/ns/configmaps"
    assert isinstance(s, kopf.OperatorSettings)


def refuse(kmock: Any, method: str, path: str, code: int = 500) -> None:
    """The API server answers ``method path`` with ``code`` from now on."""
    def matches(request: Any) -> bool:
        return (str(getattr(request.method, "name", request.method)).upper() == method
                and request.url.path == path)
    kmock[matches] << code


async def until_created(env: Env) -> dict[str, Any]:
    rb = rebalance(env.d)
    await env.d.call(rb, "reconcile")  # the Job exists; the next pass reads it
    return rb


async def until_approved(env: Env) -> dict[str, Any]:
    rb = await proposal_ready(env)
    await env.approve(rb)
    return rb


def annotated(value: str) -> Callable[[Env, dict[str, Any]], None]:
    def annotate(env: Env, rb: dict[str, Any]) -> None:
        rb["metadata"]["annotations"] = {ANNOTATION: value}
    return annotate


def nothing(env: Env, rb: dict[str, Any]) -> None:
    return None


async def _fresh(env: Env) -> dict[str, Any]:
    return rebalance(env.d)


Stage = Callable[[Env], Awaitable[dict[str, Any]]]
FAILED_CALLS: list[tuple[str, Stage, Callable[[Env, dict[str, Any]], None],
                         list[tuple[str, str, int]], str]] = [
    ("create-job", _fresh, nothing, [("POST", JOBS, 500)], r"create Job default/rb-plan-1"),
    ("get-job", until_created, nothing, [("GET", f"{JOBS}/rb-plan-1", 500)],
     r"get Job default/rb-plan-1"),
    ("get-index", until_created, nothing, [("GET", f"{CMS}/rb-proposal-1", 500)],
     r"get ConfigMap default/rb-proposal-1"),
    ("get-running-step", until_approved, nothing, [("GET", f"{PREAS}/rb-1-0001", 500)],
     r"get PartitionReassignment default/rb-1-0001"),
    ("cancel-running-step", until_approved, annotated("reject"),
     [("PATCH", f"{PREAS}/rb-1-0001", 500)], r"patch PartitionReassignment default/rb-1-0001"),
    ("list-old-config-maps", proposal_ready, annotated("refresh"), [("GET", CMS, 500)],
     r"list ConfigMaps in default"),
    ("delete-old-config-map", proposal_ready, annotated("refresh"),
     [("DELETE", f"{CMS}/rb-proposal-1", 500), ("DELETE", f"{CMS}/rb-proposal-1-1", 500)],
     r"delete ConfigMap default/rb-proposal-1(-1)?"),
    ("delete-old-job", proposal_ready, annotated("refresh"),
     [("DELETE", f"{JOBS}/rb-plan-1", 500)], r"delete Job default/rb-plan-1"),
    ("create-step", proposal_ready, annotated("approve"), [("POST", PREAS, 500)],
     r"create PartitionReassignment default/rb-1-0001"),
    ("read-step-after-conflict", proposal_ready, annotated("approve"),
     [("POST", PREAS, 409), ("GET", f"{PREAS}/rb-1-0001", 500)],
     r"get PartitionReassignment default/rb-1-0001"),
]


@pytest.mark.parametrize(("stage", "then", "refused", "call"),
                         [case[1:] for case in FAILED_CALLS],
                         ids=[case[0] for case in FAILED_CALLS])
async def test_every_refused_api_call_keeps_the_status_and_names_the_call_and_object(
        env: Env, kmock: Any, stage: Stage, then: Callable[[Env, dict[str, Any]], None],
        refused: list[tuple[str, str, int]], call: str) -> None:
    """Each of the handler's API calls, refused by the API server (500): the pass publishes
    the status it had with Degraded=ApiError naming the call and the object, not a crash."""
    rb = await stage(env)
    before = rb["status"].get("phase")
    then(env, rb)
    for method, path, code in refused:
        refuse(kmock, method, path, code)
    await env.d.call(rb, "reconcile")
    assert rb["status"].get("phase") == before
    degraded = condition(rb, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "ApiError")
    assert re.match(rf"^{call}: APIServerError: ", degraded["message"]), degraded["message"]


async def test_a_step_an_earlier_pass_created_is_taken_as_this_rebalance_s(env: Env) -> None:
    """A pass created the step, then its status was lost (a restart): the next pass finds it
    by name, owned by this KafkaRebalance, and goes on with it."""
    rb = await proposal_ready(env)
    await env.post(PREAS, {"apiVersion": API_VERSION, "kind": "PartitionReassignment",
                           "metadata": {"name": "rb-1-0001", "namespace": "default",
                                        "ownerReferences": [
                                            owner_reference("rb", rb["metadata"]["uid"])]},
                           "spec": {"clusterRef": {"name": "demo"}, "partitions": []}})
    await env.approve(rb)
    assert rb["status"]["phase"] == "Rebalancing"
    assert condition(rb, "Degraded")["status"] == "False"


async def test_a_step_that_exists_then_is_gone_at_once_is_not_an_error(
        env: Env, kmock: Any) -> None:
    """Create answers 409 but the object is gone when read back (deleted meanwhile): nothing
    to refuse; the next pass sees the step missing and says so."""
    rb = await proposal_ready(env)
    refuse(kmock, "POST", PREAS, 409)
    refuse(kmock, "GET", f"{PREAS}/rb-1-0001", 404)
    await env.approve(rb)
    assert rb["status"]["phase"] == "Rebalancing"
    assert condition(rb, "Degraded")["status"] == "False"
    await env.d.call(rb, "reconcile")
    assert condition(rb, "Degraded")["reason"] == "ReassignmentDeleted", rb["status"]


async def test_a_proposal_part_deleted_before_approval_is_proposal_invalid(env: Env) -> None:
    rb = await proposal_ready(env)
    async with env.api.session.delete(f"{env.api.base}{CMS}/rb-proposal-1-1") as r:
        assert r.status < 300
    rb["metadata"]["annotations"] = {ANNOTATION: "approve"}
    await env.d.call(rb, "reconcile")
    assert rb["status"]["phase"] == "ProposalReady"
    degraded = condition(rb, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "ProposalInvalid")
    assert degraded["message"] == (
        "ConfigMap default/rb-proposal-1-1 key resource-0001.yaml: missing; annotate "
        f"{ANNOTATION}=refresh (or reject) for a new proposal")
    assert await env.get(f"{PREAS}/rb-1-0001") is None


async def test_the_planner_job_connects_to_the_spark_master_of_the_spec(env: Env) -> None:
    rb = env.d.create("KafkaRebalance", "rb", {"clusterRef": {"name": "demo"},
                                               "sparkMaster": "spark://spark:7077"})
    await env.d.call(rb, "reconcile")
    job = await env.get(f"{JOBS}/rb-plan-1")
    assert job is not None
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--master") + 1] == "spark://spark:7077"


async def test_a_proposal_index_that_is_not_json_fails_naming_its_config_map(env: Env) -> None:
    rb = await until_created(env)
    for cm in proposal_config_maps("default", "rb", "1", rb["metadata"]["uid"],
                                   {"resources": 1}, [DOC.format(n=0)]):
        await env.post(CMS, cm)
    await env.merge(f"{CMS}/rb-proposal-1", {"data": {"summary.json": "{"}})
    await env.d.call(rb, "reconcile")
    assert rb["status"]["phase"] == "Failed"
    assert "ConfigMap rb-proposal-1: summary.json or parts is not JSON" in condition(
        rb, "Degraded")["message"]


@pytest.mark.parametrize(("counted", "phase"), [(None, "ProposalReady"), (2, "ProposalReady"),
                                                (1, "Failed"), (3, "Failed")])
async def test_a_summary_without_a_count_takes_the_parts_as_they_are(
        env: Env, counted: int | None, phase: str) -> None:
    """`resources` in summary.json is checked against the parts when the planner wrote it."""
    rb = await until_created(env)
    summary: dict[str, Any] = {"goal": "rebalance", "fingerprint": "f"}
    if counted is not None:
        summary["resources"] = counted
    for cm in proposal_config_maps("default", "rb", "1", rb["metadata"]["uid"], summary,
                                   [DOC.format(n=0), DOC.format(n=1)]):
        await env.post(CMS, cm)
    await env.merge(f"{JOBS}/rb-plan-1/status", {"status": {"succeeded": 1}})
    await env.d.call(rb, "reconcile")
    assert rb["status"]["phase"] == phase, rb["status"]
    if phase == "ProposalReady":
        assert len(rb["status"]["steps"]) == 2


async def test_a_status_without_a_running_step_goes_on_with_the_next(env: Env) -> None:
    """A status edited by hand (the running step marked Completed): no step to read; the
    next one is created."""
    rb = await until_approved(env)
    rb["status"]["steps"][0]["state"] = "Completed"
    await env.d.call(rb, "reconcile")
    assert rb["status"]["phase"] == "Rebalancing"
    assert await env.get(f"{PREAS}/rb-1-0002") is not None


@pytest.mark.parametrize(("conditions", "says"), [
    ([{"type": "Degraded", "status": "True", "reason": "X"},
      {"type": "Succeeded", "status": "False", "message": "broker 5 is gone"}],
     "ended Failed: broker 5 is gone; 0 of 2 had completed"),
    ([{"type": "Succeeded", "status": "False", "reason": "X"}],
     "ended Failed; 0 of 2 had completed"),
    ([], "ended Failed; 0 of 2 had completed"),
], ids=["degraded-without-message", "succeeded-without-message", "no-conditions"])
async def test_a_failed_step_s_message_is_the_first_condition_that_says_something(
        env: Env, conditions: list[dict[str, Any]], says: str) -> None:
    rb = await until_approved(env)
    await env.merge(f"{PREAS}/rb-1-0001/status", {"status": {"phase": "Failed",
                                                            "conditions": conditions}})
    await env.d.call(rb, "reconcile")
    assert rb["status"]["phase"] == "Failed"
    assert f"PartitionReassignment rb-1-0001 {says}" in condition(rb, "Degraded")["message"]


def test_a_proposal_document_becomes_a_reassignment_of_this_rebalance() -> None:
    spec = KafkaRebalanceSpec.model_validate({"clusterRef": {"name": "demo"}})
    body = reassignment_body(DOC.format(n=1), "ConfigMap x key k", "rb-7-0002", "team-a", "rb",
                             "u-1", 7, spec)
    assert body == {
        "apiVersion": API_VERSION, "kind": "PartitionReassignment",
        "metadata": {"name": "rb-7-0002", "namespace": "team-a",
                     "labels": {"kraftsman.io/plan": "abc", LABEL_REBALANCE: "rb",
                                LABEL_PROPOSAL: "7"},
                     "annotations": {"kraftsman.io/plan-step": "1/2"},
                     "ownerReferences": [owner_reference("rb", "u-1")]},
        "spec": {"clusterRef": {"name": "demo"},
                 "partitions": [{"topic": "orders", "partition": 1, "replicas": [3, 4, 5]}]}}
    bare = reassignment_body("kind: PartitionReassignment\nspec: {partitions: [{topic: t, "
                             "partition: 0, replicas: [1]}]}\n", "w", "n",
                             "ns", "rb", "u", 1, spec)
    assert bare["metadata"]["labels"] == {LABEL_REBALANCE: "rb", LABEL_PROPOSAL: "1"}
    assert bare["metadata"]["annotations"] == {}
    with pytest.raises(ProposalError, match=r"^w: not YAML \((Scanner|Parser)Error\); annotate "
                       rf"{ANNOTATION}=refresh for a new proposal$"):
        reassignment_body("spec: [", "w", "n", "ns", "rb", "u", 1, spec)
