"""KafkaRebalance end to end: the operator as its Deployment runs it (deployed.py) against a
real kube-apiserver (conftest.py), the planner Job's own command (`kraftsman rebalance
propose`) run as a subprocess.

The server runs no kubelet and no job controller, so the test plays them (:class:`Kubelet`):
when the operator's Job appears, its container's command and args run as a subprocess with the
Job's env, the Job's volumes mapped onto local directories (the state claim is the operator's
``--state-dir``) and KUBECONFIG holding a token of the Job's ServiceAccount (the planner's: its
RBAC is real too); then the Job's status is written as the job controller writes it (the
server validates it).
"""

from __future__ import annotations

import asyncio
import datetime
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from deployed import OperatorProcess
from harness import Api, cond_is
from real_install import CHART_NAMESPACE, RELEASE, chart
from test_operator_kmock import CLUSTER, REF

from controller_core.config import EmbeddedClusterSpec
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.planning.fingerprint import assignment_fingerprint
from kraftsman.handlers.runtime import embedded_cluster_dir
from kraftsman.proposal import proposal_config_maps
from tests.realk8s.apiserver import RealServer

PVC = {"state": {"type": "persistentVolumeClaim"}}  # the planner Job mounts the state claim
CLAIM = f"{RELEASE}-state"
NAMESPACE = CHART_NAMESPACE  # the operator's, where its planner Jobs run
REBALANCE = {**REF, "goal": "rebalance", "throttleBytesPerSecond": 50_000_000,
             "maxConcurrentMoves": 2, "maxPartitionsPerResource": 2}


class Kubelet:
    """Runs a planner Job's pod as a subprocess, then records its end in the Job's status."""

    def __init__(self, api: Api, op: OperatorProcess, server: RealServer,
                 workdir: Path) -> None:
        self.api, self.op, self.server, self.workdir = api, op, server, workdir

    def _url(self, name: str | None = None, ns: str = NAMESPACE) -> str:
        url = f"{self.api.base}/apis/batch/v1/namespaces/{ns}/jobs"
        return f"{url}/{name}" if name else url

    async def get(self, name: str) -> dict[str, Any] | None:
        async with self.api.session.get(self._url(name)) as r:
            if r.status == 404:
                return None
            assert r.status < 300, await r.text()
            job = dict(await r.json())
            return None if job.get("metadata", {}).get("deletionTimestamp") else job

    async def wait_job(self, name: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = await self.get(name)
            if job is not None:
                return job
            await asyncio.sleep(0.1)
        raise AssertionError(f"no Job {name} after {timeout}s:\n{self.op.log()[-3000:]}")

    def _volumes(self, job: dict[str, Any]) -> dict[str, str]:
        """mountPath -> local directory, for each of the container's volume mounts."""
        pod = job["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod.get("volumes") or []}
        (container,) = pod["containers"]
        out = {}
        for mount in container.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] == CLAIM
                assert mount.get("readOnly") and volume["persistentVolumeClaim"]["readOnly"]
                out[mount["mountPath"]] = str(self.op.state_dir)
            else:
                assert "emptyDir" in volume, volume
                local = self.workdir / job["metadata"]["name"] / mount["name"]
                local.mkdir(parents=True, exist_ok=True)
                out[mount["mountPath"]] = str(local)
        return out

    async def run(self, job: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        """The pod: the container's command and args, as the kubelet starts it."""
        (container,) = job["spec"]["template"]["spec"]["containers"]
        mounts = self._volumes(job)

        def local(value: str) -> str:
            for path, there in mounts.items():
                if value == path or value.startswith(path + "/"):
                    return there + value[len(path):]
            return value

        command = list(container["command"])
        assert command == ["kraftsman"]
        argv = [str(Path(sys.executable).parent / "kraftsman"),
                *[local(a) for a in container.get("args") or []]]
        pod = job["spec"]["template"]["spec"]
        self.workdir.mkdir(parents=True, exist_ok=True)
        kubeconfig = self.server.token_kubeconfig(  # the pod's mounted token, as a file
            self.workdir / f"{job['metadata']['name']}.kubeconfig",
            pod["serviceAccountName"], job["metadata"]["namespace"])
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
               "KUBECONFIG": str(kubeconfig)}
        for var in container.get("env") or []:
            env[var["name"]] = local(str(var["value"]))
        return await asyncio.to_thread(
            subprocess.run, argv, env=env, cwd=self.workdir, capture_output=True, text=True,
            timeout=600)

    async def finish(self, name: str, succeeded: bool) -> None:
        """What the job controller writes when the pod ends (backoffLimit 0: one pod); the API
        server checks it as it checks the job controller's (a finished Job needs its start
        and, complete, its completion time and the interim condition)."""
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        kinds = ["SuccessCriteriaMet", "Complete"] if succeeded else ["FailureTarget", "Failed"]
        status: dict[str, Any] = {
            "startTime": now, "active": 0, "ready": 0, "terminating": 0,
            "succeeded" if succeeded else "failed": 1,
            "conditions": [{"type": kind, "status": "True", "lastProbeTime": now,
                            "lastTransitionTime": now} for kind in kinds]}
        if succeeded:
            status["completionTime"] = now
        async with self.api.session.patch(
                f"{self._url(name)}/status", json={"status": status},
                headers={"Content-Type": "application/merge-patch+json"}) as r:
            assert r.status < 300, await r.text()

    async def play(self, name: str) -> subprocess.CompletedProcess[str]:
        """Wait for Job ``name``, run its pod, record how it ended."""
        job = await self.wait_job(name)
        assert job["spec"]["backoffLimit"] == 0
        assert job["spec"]["template"]["spec"]["serviceAccountName"] == f"{RELEASE}-planner"
        done = await self.run(job)
        await self.finish(name, done.returncode == 0)
        return done


@pytest.fixture
async def kubelet(api: Api, deployed: Any, real_server: RealServer, tmp_path: Path) -> Kubelet:
    op = await deployed(chart(PVC))
    await api.create("KafkaCluster", "demo", CLUSTER)
    await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"))
    return Kubelet(api, op, real_server, tmp_path / "kubelet")


async def annotate(api: Api, name: str, value: str) -> None:
    await api.patch("KafkaRebalance", name,
                    {"metadata": {"annotations": {"kraftsman.io/rebalance": value}}})


def phase(value: str) -> Any:
    return lambda o: (o.get("status") or {}).get("phase") == value


def annotation_gone(o: dict[str, Any]) -> bool:
    return "kraftsman.io/rebalance" not in (o["metadata"].get("annotations") or {})


async def preas_of(api: Api) -> dict[str, dict[str, Any]]:
    async with api.session.get(f"{api.base}/apis/kraftsman.io/v1alpha1/namespaces/"
                               f"{api.namespace}/partitionreassignments") as r:
        items = (await r.json()).get("items") or []
    return {o["metadata"]["name"]: o for o in items
            if (o["metadata"].get("labels") or {}).get("kraftsman.io/rebalance") == "rb"
            and not o["metadata"].get("deletionTimestamp")}


async def propose(api: Api, kubelet: Kubelet, job: str, proposal_id: int) -> dict[str, Any]:
    """Play the planner Job (the real command, on Spark) and wait for its proposal."""
    done = await kubelet.play(job)
    assert done.returncode == 0, done.stderr
    obj = await api.wait("KafkaRebalance", "rb", lambda o: phase("ProposalReady")(o)
                         and o["status"]["proposalId"] == proposal_id and annotation_gone(o))
    st = obj["status"]
    assert st["moves"] > 0 and st["data"].endswith("B") and st["eta"]
    assert st["proposal"]["fingerprint"] and st["proposal"]["partitionsTotal"] == 6
    assert st["proposal"]["balance"]["replicas"]["after"] < \
        st["proposal"]["balance"]["replicas"]["before"]
    assert len(st["steps"]) == st["proposal"]["resources"] >= 2
    assert cond_is("ProposalReady", "True", "ProposalReady")(obj)
    return obj


async def execute(api: Api, steps: list[str]) -> dict[str, Any]:
    """Watch the approved proposal run: never two of its reassignments unfinished at once,
    created in the proposal's order; returns the KafkaRebalance once it ends."""
    deadline = time.monotonic() + 120
    seen: list[str] = []
    while time.monotonic() < deadline:
        obj = await api.get("KafkaRebalance", "rb")
        assert obj is not None
        created = await preas_of(api)
        running = [n for n, o in created.items()
                   if (o.get("status") or {}).get("phase") != "Completed"]
        assert len(running) <= 1, running  # never two at once
        seen += [n for n in sorted(created) if n not in seen]
        if obj["status"].get("phase") in ("Ready", "Failed"):
            break
        await asyncio.sleep(0.05)
    st = obj["status"]
    steps_now = {n: (o.get("status") or {}).get("phase") for n, o in created.items()}
    assert st["phase"] == "Ready", (st, steps_now)
    assert seen == steps and [s["state"] for s in st["steps"]] == ["Completed"] * len(steps)
    assert st["progress"] == f"{len(steps)}/{len(steps)}"
    assert all(o["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
               for o in (await preas_of(api)).values())
    return obj


async def leadership(api: Api, kubelet: Kubelet) -> dict[tuple[str, int], tuple[int, ...]]:
    """(topic, partition) -> replicas and, last, the leader: the operator's embedded cluster
    read as the planner Job reads it (read-only, no lock)."""
    kc = await api.get("KafkaCluster", "demo")
    assert kc is not None
    where = embedded_cluster_dir(kubelet.op.state_dir, (api.namespace, "demo"),
                                 kc["metadata"]["uid"])
    c = EmbeddedCluster.open_read_only(where, EmbeddedClusterSpec.model_validate(
        CLUSTER["embedded"]))
    try:
        return {(d.tp.topic, d.tp.partition): (*d.replicas, d.leader)
                for d in c.describe_partitions()}
    finally:
        c.close()


async def test_proposal_approved_by_annotation_executes_in_order(api: Api,
                                                                 kubelet: Kubelet) -> None:
    """Propose (the real planner on Spark), figures in status, nothing before approval;
    `kraftsman.io/rebalance=approve` passes the staleness check (the planner's and the
    operator's fingerprints agree) and the reassignments run one at a time, to Ready.
    Then a demote-brokers rebalance, approved in its spec: its steps reorder broker 0's
    partitions, elect their preferred leaders, and broker 0 leads nothing, no replica moved."""
    await api.create("KafkaRebalance", "rb", REBALANCE)
    obj = await propose(api, kubelet, "rb-plan-1", 1)
    assert await preas_of(api) == {}  # nothing happens before approval
    steps = [s["name"] for s in obj["status"]["steps"]]
    assert steps[0] == "rb-1-0001"
    await annotate(api, "rb", "approve")
    obj = await execute(api, steps)
    assert annotation_gone(obj) and obj["status"]["decidedBy"] == "annotation"
    events = await api.wait_events("rb", "ProposalReady", "Approved", "Completed")
    assert [e["reason"] for e in events].count("ReassignmentCreated") == len(steps)

    before = await leadership(api, kubelet)
    assert any(v[0] == 0 for v in before.values())  # broker 0 is a preferred leader
    await api.create("KafkaRebalance", "demote", {**REF, "goal": "demote-brokers",
                                                  "brokers": [0], "approval": "Approved"})
    done = await kubelet.play("demote-plan-1")  # the driver engine: no JVM
    assert done.returncode == 0, done.stderr
    obj = await api.wait("KafkaRebalance", "demote", phase("Ready"), timeout=120)
    assert obj["status"]["moves"] == 0 and obj["status"]["proposal"]["bytesToMove"] == 0
    after = await leadership(api, kubelet)
    assert {tp: sorted(v[:-1]) for tp, v in after.items()} == \
        {tp: sorted(v[:-1]) for tp, v in before.items()}  # the same replicas
    assert [tp for tp, v in after.items() if 0 in (v[0], v[-1])] == []
    assert {tp for tp, v in after.items() if v != before[tp]} == \
        {tp for tp, v in before.items() if v[0] == 0}  # those partitions only


@pytest.mark.slow  # two Spark runs: minutes on a loaded 2-core machine (--soak runs it)
async def test_stale_proposal_refresh_and_gitops_approval(api: Api, kubelet: Kubelet) -> None:
    """A proposal the cluster moved away from is refused as stale; refresh makes a new one
    from the cluster as it is; `spec.approval: Approved` (GitOps) executes it."""
    await api.create("KafkaRebalance", "rb", REBALANCE)
    await propose(api, kubelet, "rb-plan-1", 1)
    await api.create("PartitionReassignment", "manual", {
        **REF, "partitions": [{"topic": "orders", "partition": 0, "replicas": [2, 1, 0]}]})
    await api.wait("PartitionReassignment", "manual", cond_is("Succeeded", "True"), timeout=60)
    await annotate(api, "rb", "approve")
    obj = await api.wait("KafkaRebalance", "rb", lambda o: phase("Stale")(o)
                         and annotation_gone(o))
    assert cond_is("Degraded", "True", "StaleProposal")(obj)
    assert await preas_of(api) == {}
    # A second annotation is ignored with a warning and the rebalance stays Degraded: Argo CD
    # showed Progressing (and a sync wave waited) once it lost Degraded.
    await annotate(api, "rb", "approve")
    obj = await api.wait("KafkaRebalance", "rb", annotation_gone)
    assert phase("Stale")(obj) and cond_is("Degraded", "True", "StaleProposal")(obj)

    await annotate(api, "rb", "refresh")  # a new proposal; the old Job goes
    obj = await propose(api, kubelet, "rb-plan-2", 2)
    assert await kubelet.get("rb-plan-1") is None
    steps = [s["name"] for s in obj["status"]["steps"]]
    assert steps[0] == "rb-2-0001"
    await api.set_spec("KafkaRebalance", "rb", {"approval": "Approved"})
    obj = await execute(api, steps)
    assert obj["status"]["decidedBy"] == "spec.approval"
    await api.wait_events("rb", "Stale", "ProposalRequested", "Approved", "Completed")


async def test_planner_error_lands_in_status(api: Api, kubelet: Kubelet) -> None:
    """The planner's one-line error (exit 2, ConfigMap `error`) becomes the status message."""
    await api.create("KafkaRebalance", "rb", {**REF, "goal": "remove-brokers", "brokers": [9]})
    done = await kubelet.play("rb-plan-1")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    line = done.stderr.strip().removeprefix("error: ")
    obj = await api.wait("KafkaRebalance", "rb", phase("Failed"))
    c = next(c for c in obj["status"]["conditions"] if c["type"] == "Degraded")
    assert (c["status"], c["reason"]) == ("True", "PlannerFailed")
    assert c["message"] == f"planner Job {NAMESPACE}/rb-plan-1: {line}"
    assert "9" in c["message"]


async def test_a_failed_job_without_proposal_and_a_missing_cluster(api: Api,
                                                                  kubelet: Kubelet) -> None:
    await api.create("KafkaRebalance", "nocluster", {"clusterRef": {"name": "nope"}})
    obj = await api.wait("KafkaRebalance", "nocluster", phase("Invalid"))
    assert cond_is("Degraded", "True", "UnknownCluster")(obj)
    assert "spec.clusterRef.name: no KafkaCluster 'nope'" in str(obj["status"]["conditions"])
    assert await kubelet.get("nocluster-plan-1") is None

    await api.create("KafkaRebalance", "rb", REBALANCE)
    await kubelet.wait_job("rb-plan-1")
    await kubelet.finish("rb-plan-1", succeeded=False)  # the pod died (OOM, node lost)
    obj = await api.wait("KafkaRebalance", "rb", phase("Failed"))
    message = next(c for c in obj["status"]["conditions"] if c["type"] == "Degraded")["message"]
    assert f"kubectl logs -n {NAMESPACE} job/rb-plan-1" in message


async def test_embedded_cluster_on_an_emptydir_is_refused(api: Api, deployed: Any) -> None:
    await deployed(chart())  # state.type emptyDir: no Job can mount the state
    await api.create("KafkaCluster", "demo", CLUSTER)
    await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"))
    await api.create("KafkaRebalance", "rb", REBALANCE)
    obj = await api.wait("KafkaRebalance", "rb", cond_is("Degraded", "True",
                                                          "PlannerUnavailable"))
    assert "state.type=persistentVolumeClaim" in str(obj["status"]["conditions"])


async def test_a_bad_planner_value_is_reported_by_the_rebalance_not_a_crash_loop(
        api: Api, deployed: Any) -> None:
    """planner.resources with a memory limit Spark cannot run in: the operator started as the
    chart deploys it keeps serving (the KafkaCluster becomes Ready) and the KafkaRebalance
    names the value to fix."""
    small = {"limits": {"memory": "1Gi"}}
    await deployed(chart({**PVC, "planner": {"resources": small}}))
    await api.create("KafkaCluster", "demo", CLUSTER)
    await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"))
    await api.create("KafkaRebalance", "rb", REBALANCE)
    obj = await api.wait("KafkaRebalance", "rb", cond_is("Degraded", "True",
                                                          "PlannerUnavailable"))
    message = next(c for c in obj["status"]["conditions"] if c["type"] == "Degraded")["message"]
    assert "limits.memory 1Gi" in message and "at least 1536Mi" in message, message


async def test_the_job_gets_the_charts_planner_resources_and_pull_secrets(
        api: Api, deployed: Any, real_server: RealServer, tmp_path: Path) -> None:
    """From the chart's values through the operator's args to the Job's pod: the image is the
    operator's, so are its pull secrets; the resources are planner.resources."""
    big = {"requests": {"cpu": "1", "memory": "6Gi"}, "limits": {"cpu": "4", "memory": "6Gi"}}
    op = await deployed(chart({**PVC, "imagePullSecrets": [{"name": "regcred"}],
                               "planner": {"resources": big}}))
    await api.create("KafkaCluster", "demo", CLUSTER)
    await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"))
    await api.create("KafkaRebalance", "rb", REBALANCE)
    job = await Kubelet(api, op, real_server, tmp_path).wait_job("rb-plan-1")
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"] == big
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]


# ---------------------------------------------------------------- stopping a running rebalance
# These tests are about what happens to the PartitionReassignments, not about the plan: the
# proposal is written with the planner's own ConfigMap builder (kraftsman.proposal) instead of
# a Spark run, one partition per step under a low throttle so the first step is still moving.
STEP = """\
apiVersion: kraftsman.io/v1alpha1
kind: PartitionReassignment
metadata: {{name: plan-001}}
spec:
  clusterRef: {{name: demo}}
  throttleBytesPerSecond: 20000
  partitions:
  - {{topic: orders, partition: {p}, replicas: [3, 4, 5]}}
"""


async def write_proposal(api: Api, kubelet: Kubelet, name: str, steps: int) -> None:
    """Play the Job of proposal 1: the ConfigMaps it writes, then 'succeeded'."""
    await kubelet.wait_job(f"{name}-plan-1")
    rb = await api.get("KafkaRebalance", name)
    assert rb is not None
    assignment = CLUSTER["embedded"]["topics"][0]["assignment"]  # type: ignore[index]
    summary = {"goal": "test", "partitionsTotal": 6, "partitionsInPlan": steps,
               "replicasToMove": 3 * steps, "bytesToMove": 60_000_000 * steps,
               "resources": steps, "fingerprint": assignment_fingerprint(
                   ("orders", p, r) for p, r in enumerate(assignment))}
    maps = proposal_config_maps(api.namespace, name, "1", rb["metadata"]["uid"], summary,
                                [STEP.format(p=p) for p in range(steps)])
    for cm in maps:
        async with api.session.post(f"{api.base}/api/v1/namespaces/{api.namespace}/configmaps",
                                    json=cm) as r:
            assert r.status < 300, await r.text()
    await kubelet.finish(f"{name}-plan-1", succeeded=True)


def first_moving(o: dict[str, Any]) -> bool:
    return (o.get("status") or {}).get("phase") == "Moving"


async def test_reject_while_rebalancing_cancels_the_running_step(api: Api,
                                                                 kubelet: Kubelet) -> None:
    await api.create("KafkaRebalance", "rb", {**REF, "approval": "Approved"})
    await write_proposal(api, kubelet, "rb", steps=2)
    await api.wait("KafkaRebalance", "rb", phase("Rebalancing"))
    await api.wait("PartitionReassignment", "rb-1-0001", first_moving)
    await annotate(api, "rb", "reject")
    obj = await api.wait("KafkaRebalance", "rb", lambda o: phase("Rejected")(o)
                         and annotation_gone(o))
    assert [s["state"] for s in obj["status"]["steps"]] == ["Cancelled", "Pending"]
    preas = await api.wait("PartitionReassignment", "rb-1-0001", phase("Cancelled"),
                           timeout=60)
    assert preas["spec"]["cancel"] is True
    assert set(await preas_of(api)) == {"rb-1-0001"}  # the next one is never created


async def test_deleting_while_rebalancing_rolls_the_running_step_back(
        api: Api, kubelet: Kubelet) -> None:
    """Deleting the KafkaRebalance deletes its running PartitionReassignment (whose finalizer
    rolls its moves in flight back) and its planner Jobs; no further step is created."""
    await api.create("KafkaRebalance", "rb", {**REF, "approval": "Approved"})
    await write_proposal(api, kubelet, "rb", steps=2)
    await api.wait("PartitionReassignment", "rb-1-0001", first_moving)
    await api.delete("KafkaRebalance", "rb")
    await api.wait_gone("KafkaRebalance", "rb")
    await api.wait_gone("PartitionReassignment", "rb-1-0001")  # after its rollback
    assert await preas_of(api) == {}
    assert await kubelet.get("rb-plan-1") is None
    await api.wait_events("rb-1-0001", "Cancelled")  # the rollback (reassignment.py)
