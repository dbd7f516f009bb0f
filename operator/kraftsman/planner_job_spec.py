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

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kraftsman.proposal import LABEL_PROPOSAL, LABEL_REBALANCE, owner_reference
from kraftsman.rebalance_flow import LABEL_NAMESPACE, JobState, job_name
from kraftsman.resources import K8S_NAME_PATTERN

STATE_DIR = "/var/lib/kraftsman"
# As the operator's own pod: the restricted Pod Security Standard.
RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                  "fsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                        "runAsNonRoot": True, "privileged": False,
                        "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "RuntimeDefault"}}

# The planner runs Spark in local mode inside its pod: a 2g driver heap (spark.driver.memory,
# controller_core/planning/spark_job.make_session) plus the JVM's own memory (metaspace, code
# cache, threads, Arrow buffers) and the Python driver: 3Gi, requested and limited alike so the
# pod is not the first one evicted. Spark local[*] takes the CPU limit as its core count.
DEFAULT_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "500m", "memory": "3Gi"},
    "limits": {"cpu": "2", "memory": "3Gi"},
}
# What the pod needs beyond Spark's driver heap: the JVM's own memory and the Python driver.
# The Job sizes the heap (spark.driver.memory) as the memory limit minus this, so raising the
# limit gives Spark the memory (the default 3Gi gives make_session's own 2g).
NON_HEAP_BYTES = 1 << 30
MIN_HEAP_BYTES = 512 << 20
# Kubernetes' resource.Quantity syntax (as in the chart's values schema).
QUANTITY = re.compile(r"^[+-]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
                      r"(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")


_SCALE = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
          "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
          "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


DEFAULT_ACTIVE_DEADLINE_SECONDS = 3600  # a planner Job's pod: pulled, scheduled and done

def quantity_bytes(text: str) -> int:
    """A memory quantity in bytes (``3Gi``, ``3000M``, ``3e9``); the text matches QUANTITY."""
    match = re.fullmatch(r"([+-]?[0-9.]+)([eE][+-]?[0-9.]+|[KMGTPE]i|[numkMGTPE])?", text)
    if match is None:
        raise PlannerConfigError(f"{text!r} is not a Kubernetes quantity")
    number, suffix = Decimal(match[1]), match[2] or ""
    if suffix[:1] in ("e", "E"):
        return int(number * Decimal(10) ** Decimal(suffix[1:]))
    return int(number * _SCALE[suffix])


def driver_memory(resources: Mapping[str, Mapping[str, str]]) -> str | None:
    """``spark.driver.memory`` for the Job's memory limit (None without a limit: Spark's own
    default of make_session stays)."""
    limit = (resources.get("limits") or {}).get("memory")
    if limit is None:
        return None
    heap = max(quantity_bytes(str(limit)) - NON_HEAP_BYTES, MIN_HEAP_BYTES)
    return f"{heap >> 20}m"


class PlannerConfigError(ValueError):
    """A ``--planner-*`` setting the Job cannot use; the message names it and the fix."""


def parse_resources(text: str) -> dict[str, dict[str, str]]:
    """``--planner-resources``: the container's resources as Kubernetes JSON, e.g.
    ``{"requests": {"cpu": "500m", "memory": "3Gi"}, "limits": {"memory": "3Gi"}}``."""
    fix = ('give JSON like {"requests": {"cpu": "500m", "memory": "3Gi"}, "limits": '
           '{"cpu": "2", "memory": "3Gi"}}')
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise PlannerConfigError(f"--planner-resources: not JSON ({e}); {fix}") from None
    if not isinstance(doc, dict) or not doc or not set(doc) <= {"requests", "limits"}:
        raise PlannerConfigError(f"--planner-resources: an object with requests and/or "
                                 f"limits; {fix}")
    out: dict[str, dict[str, str]] = {}
    for part, quantities in doc.items():
        if not isinstance(quantities, dict):
            raise PlannerConfigError(f"--planner-resources: {part} must be an object of "
                                     f"quantities; {fix}")
        for name, value in quantities.items():
            if isinstance(value, bool) or not QUANTITY.match(str(value)):
                raise PlannerConfigError(f"--planner-resources: {part}.{name} {value!r} is not "
                                         "a Kubernetes quantity (e.g. 500m, 3Gi, 2)")
        out[part] = {str(k): str(v) for k, v in quantities.items()}
    limit = out.get("limits", {}).get("memory")
    if limit is not None and quantity_bytes(limit) < NON_HEAP_BYTES + MIN_HEAP_BYTES:
        raise PlannerConfigError(f"--planner-resources: limits.memory {limit}: the planner runs "
                                 "Spark in its pod and needs at least 1536Mi (a 512m driver "
                                 "heap and 1Gi beside it); 3Gi is the default")
    return out


def check_secret_names(names: list[str]) -> None:
    for name in names:
        if not re.match(K8S_NAME_PATTERN, name):
            raise PlannerConfigError(f"--planner-image-pull-secret {name!r}: not a Secret name "
                                     "(lowercase letters, digits, '-' and '.'); give the name "
                                     "of a docker-registry Secret in the operator's namespace")


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
    resources: Mapping[str, Mapping[str, str]] = field(
        default_factory=lambda: copy.deepcopy(DEFAULT_RESOURCES))
    image_pull_secrets: tuple[str, ...] = ()  # the operator's own (the image is the same)
    problem: str | None = None  # a --planner-* setting the operator could not use
    # A Job whose pod never runs (an image that cannot be pulled, no node fits) fails after
    # this long instead of leaving its KafkaRebalance in PendingProposal for good.
    active_deadline_seconds: int = DEFAULT_ACTIVE_DEADLINE_SECONDS

    def job_namespace(self, rebalance_namespace: str) -> str:
        return self.namespace or rebalance_namespace


def job_failure(job: dict[str, Any] | None) -> str:
    """Why the job controller failed a Job (its Failed condition: ``DeadlineExceeded: Job was
    active longer than specified deadline``), or ""."""
    for c in ((job or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "Failed" and c.get("status") == "True":
            return ": ".join(str(x) for x in (c.get("reason"), c.get("message")) if x)
    return ""


class PlannerUnavailable(Exception):
    """The Job cannot be built; the message names the setting and the fix."""


def planner_job(config: PlannerConfig, *, name: str, namespace: str, uid: str,
                proposal_id: int, embedded: bool, spark_master: str | None) -> dict[str, Any]:
    """The batch/v1 Job that computes proposal ``proposal_id`` of KafkaRebalance
    ``namespace/name``."""
    if config.problem:
        raise PlannerUnavailable(
            f"the operator's planner settings are invalid: {config.problem}; fix the chart "
            "value (planner.resources, imagePullSecrets) and upgrade the release")
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
    heap = driver_memory(config.resources)
    if heap is not None:
        args += ["--spark-conf", f"spark.driver.memory={heap}"]
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
            "resources": {k: dict(v) for k, v in config.resources.items()},
            "volumeMounts": mounts,
        }],
        "volumes": volumes,
    }
    if config.service_account:
        pod["serviceAccountName"] = config.service_account
    if config.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in config.image_pull_secrets]
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
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": config.active_deadline_seconds,
                 "template": {"metadata": {"labels": labels}, "spec": pod}},
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
