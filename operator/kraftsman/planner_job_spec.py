"""The planner Job of a KafkaRebalance as the operator creates it (REBALANCE-CONTRACT.md): a
pure function of the rebalance, the proposal number and how the operator was installed.

The Job runs ``kraftsman rebalance propose`` from the operator's own image under the chart's
planner ServiceAccount, in the operator's namespace: that is where the ServiceAccount and the
state volume's claim live (a pod can use neither across namespaces). For an embedded cluster
the operator's state volume is mounted read-only at the same path, and with a ReadWriteOnce
claim the pod is pinned to the operator's node (the only node that may mount it). Without a
claim (an ``emptyDir`` state volume) no other pod can read an embedded cluster: the operator
says so in status instead of starting a Job that cannot work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kraftsman.proposal import LABEL_PROPOSAL, LABEL_REBALANCE, owner_reference
from kraftsman.rebalance_flow import LABEL_NAMESPACE, JobState, job_name

STATE_DIR = "/var/lib/kraftsman"
# As the operator's own pod: the restricted Pod Security Standard.
RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                  "fsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                        "runAsNonRoot": True, "privileged": False,
                        "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "RuntimeDefault"}}


@dataclass(frozen=True)
class PlannerConfig:
    """How the operator was installed, as the chart passes it (``--planner-*`` options and the
    downward API)."""

    image: str | None
    service_account: str | None = None
    namespace: str | None = None  # the operator's namespace (POD_NAMESPACE)
    state_claim: str | None = None  # the state volume's PersistentVolumeClaim, if any
    node_name: str | None = None  # the operator's node (NODE_NAME)
    image_pull_policy: str = "IfNotPresent"
    scratch_size: str = "2Gi"  # Spark's local directory (/tmp)

    def job_namespace(self, rebalance_namespace: str) -> str:
        return self.namespace or rebalance_namespace


class PlannerUnavailable(Exception):
    """The Job cannot be built; the message names the setting and the fix."""


def planner_job(config: PlannerConfig, *, name: str, namespace: str, uid: str,
                proposal_id: int, embedded: bool, spark_master: str | None) -> dict[str, Any]:
    """The batch/v1 Job that computes proposal ``proposal_id`` of KafkaRebalance
    ``namespace/name``."""
    if not config.image:
        raise PlannerUnavailable(
            "the operator was started without --planner-image, so it cannot start the planner "
            "Job; install it with the Helm chart or manifests/ (they pass the operator's own "
            "image), or add --planner-image=IMAGE to `kraftsman operator run`")
    if embedded and not config.state_claim:
        raise PlannerUnavailable(
            "spec.clusterRef names an embedded KafkaCluster, whose state lives on the "
            "operator's state volume, and that volume is an emptyDir no planner Job can mount; "
            "install the chart with state.type=persistentVolumeClaim (or plan a KafkaCluster "
            "with bootstrapServers)")
    job_ns = config.job_namespace(namespace)
    jname = job_name(name, proposal_id)
    labels = {"app.kubernetes.io/name": "kraftsman", "app.kubernetes.io/component": "planner",
              LABEL_REBALANCE: name, LABEL_NAMESPACE: namespace,
              LABEL_PROPOSAL: str(proposal_id)}
    args = ["rebalance", "propose", "--namespace", namespace, "--name", name,
            "--proposal-id", str(proposal_id), "--state-dir", STATE_DIR]
    if spark_master:
        args += ["--master", spark_master]
    volumes: list[dict[str, Any]] = [
        {"name": "tmp", "emptyDir": {"sizeLimit": config.scratch_size}}]
    mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": RESTRICTED_POD,
        "containers": [{
            "name": "planner",
            "image": config.image,
            "imagePullPolicy": config.image_pull_policy,
            "command": ["kraftsman"],
            "args": args,
            # Spark and Java write under HOME and the temp dir; the root filesystem is
            # read-only.
            "env": [{"name": "HOME", "value": "/tmp"},
                    {"name": "SPARK_LOCAL_DIRS", "value": "/tmp"},
                    {"name": "PYTHONUNBUFFERED", "value": "1"}],
            "securityContext": RESTRICTED_CONTAINER,
            "volumeMounts": mounts,
        }],
        "volumes": volumes,
    }
    if config.service_account:
        pod["serviceAccountName"] = config.service_account
    if embedded:
        volumes.append({"name": "state", "persistentVolumeClaim": {
            "claimName": config.state_claim, "readOnly": True}})
        mounts.append({"name": "state", "mountPath": STATE_DIR, "readOnly": True})
        if config.node_name:
            # matchFields on the node's name, as the DaemonSet controller pins its pods.
            pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{
                    "key": "metadata.name", "operator": "In",
                    "values": [config.node_name]}]}]}}}
    meta: dict[str, Any] = {"name": jname, "namespace": job_ns, "labels": labels}
    if job_ns == namespace:
        # Owner references never cross namespaces: in another namespace the garbage collector
        # would take the owner for gone and delete the Job at once. Such Jobs are deleted by
        # the operator (by label) with their KafkaRebalance.
        meta["ownerReferences"] = [owner_reference(name, uid)]
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
        "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": labels}, "spec": pod}},
    }


def job_state(job: dict[str, Any] | None) -> JobState:
    """missing | running | succeeded | failed, from a Job's status (the job controller sets
    ``succeeded``/``failed`` pod counts and the Complete/Failed conditions)."""
    if job is None:
        return "missing"
    st = job.get("status") or {}
    for c in st.get("conditions") or []:
        if c.get("status") == "True" and c.get("type") in ("Complete", "SuccessCriteriaMet"):
            return "succeeded"
        if c.get("status") == "True" and c.get("type") in ("Failed", "FailureTarget"):
            return "failed"
    if int(st.get("succeeded") or 0) > 0:
        return "succeeded"
    if int(st.get("failed") or 0) > 0:
        return "failed"
    return "running"
