"""manifests/: valid for Kubernetes, least-privilege RBAC, a locked-down Deployment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from k8s_schemas import ROOT, k8s_errors, load_docs

MANIFESTS = sorted((ROOT / "manifests").glob("*.yaml"))


def _all() -> list[dict[str, Any]]:
    return [d for p in MANIFESTS for d in load_docs(p)]


def _one(kind: str) -> dict[str, Any]:
    found = [d for d in _all() if d["kind"] == kind]
    assert len(found) == 1, kind
    return found[0]


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifests_validate_against_official_schemas(path: Path, validate_cr: Any) -> None:
    for doc in load_docs(path):
        if doc["apiVersion"].startswith("kopf.dev/"):
            assert validate_cr(doc) == []  # a custom resource: checked against its CRD
        else:
            assert k8s_errors(doc) == []


def test_install_set_is_complete() -> None:
    kinds = {d["kind"] for d in _all()}
    assert {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment",
            "ClusterKopfPeering", "PersistentVolumeClaim", "Service"} <= kinds


EXPECTED_RULES = {  # every verb used: tests/operator/test_rbac_verbs.py names the calls
    ("kraftsman.io", "kafkaclusters"): {"list", "watch", "patch"},
    ("kraftsman.io", "kafkaclusters/status"): {"patch"},
    # a KafkaRebalance creates its steps and deletes the running one with itself
    ("kraftsman.io", "partitionreassignments"): {"get", "list", "watch", "patch", "create",
                                                 "delete"},
    # a KafkaCluster's spec.autoRebalance.addBrokers creates one (get: after a 409, whose?)
    ("kraftsman.io", "kafkarebalances"): {"list", "watch", "patch", "get", "create"},
    # proposals: read them, delete a superseded one's
    ("", "configmaps"): {"get", "list", "delete"},
    ("", "events"): {"create"},
    ("kopf.dev", "clusterkopfpeerings"): {"list", "watch", "patch"},
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
}
KRAFTSMAN_KINDS = {"kafkaclusters", "kafkaquorums", "partitionreassignments", "leaderelections",
                   "kafkarebalances"}
# The planner Jobs' ServiceAccount: its KafkaRebalance and KafkaCluster, the proposal
# ConfigMaps; nothing else cluster-wide (Secrets only through rbac.secretNamespaces).
PLANNER_RULES = {
    ("kraftsman.io", "kafkarebalances"): {"get"},
    ("kraftsman.io", "kafkaclusters"): {"get"},
    ("", "configmaps"): {"get", "create", "patch"},
}
# The operator's Role in its own namespace: the planner Jobs.
PLANNER_JOBS_RULES = {("batch", "jobs"): {"get", "list", "create", "delete"}}


def rbac_grants(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    grants: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
        assert "*" not in rule["apiGroups"] and "nonResourceURLs" not in rule
        assert "resourceNames" not in rule or rule["resourceNames"]
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                grants.setdefault((group, res), set()).update(rule["verbs"])
    return grants


def check_least_privilege(rules: list[dict[str, Any]]) -> None:
    grants = rbac_grants(rules)
    for (group, res), verbs in grants.items():
        base = res.split("/")[0]
        sub = res.split("/")[1] if "/" in res else ""
        if (group, res) in EXPECTED_RULES:
            assert verbs == EXPECTED_RULES[(group, res)], (group, res, verbs)
        elif group == "kraftsman.io":
            assert base in KRAFTSMAN_KINDS, res
            template = EXPECTED_RULES[("kraftsman.io", "kafkaclusters" + (f"/{sub}" if sub
                                                                          else ""))]
            assert verbs == template, (res, verbs)
        else:
            raise AssertionError(f"unexpected grant {group}/{res}: {verbs}")
    assert len(grants) == 5 * 2 + 4  # 5 kinds x (resource, status) + the rest
    for (group, res), verbs in grants.items():
        assert not verbs & {"deletecollection", "escalate", "bind", "impersonate"}
        if "delete" in verbs:
            assert (group, res) in {("kraftsman.io", "partitionreassignments"),
                                    ("", "configmaps")}, (group, res)


def _named(kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in _all() if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def test_rbac_is_least_privilege() -> None:
    role = _named("ClusterRole", "kraftsman")
    check_least_privilege(role["rules"])
    binding = _named("ClusterRoleBinding", "kraftsman")
    sa = _named("ServiceAccount", "kraftsman")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": sa["metadata"]["namespace"]}]


def test_planner_rbac_is_least_privilege() -> None:
    planner = _named("ClusterRole", "kraftsman-planner")
    assert rbac_grants(planner["rules"]) == PLANNER_RULES
    binding = _named("ClusterRoleBinding", "kraftsman-planner")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kraftsman-planner",
                                    "namespace": "kraftsman-system"}]
    jobs = _named("Role", "kraftsman-planner-jobs")
    assert jobs["metadata"]["namespace"] == "kraftsman-system"
    assert rbac_grants(jobs["rules"]) == PLANNER_JOBS_RULES
    assert _named("RoleBinding", "kraftsman-planner-jobs")["subjects"][0]["name"] == "kraftsman"
    secrets = _named("RoleBinding", "kraftsman-secret-reader")
    assert {s["name"] for s in secrets["subjects"]} == {"kraftsman", "kraftsman-planner"}
    args = _one("Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--planner-service-account=kraftsman-planner" in args
    assert "--planner-state-claim=kraftsman-state" in args


def check_restricted_pod(pod: dict[str, Any]) -> None:
    """The restricted Pod Security Standard, plus our own rules (read-only fs, limits)."""
    psc = pod.get("securityContext", {})
    assert psc.get("runAsNonRoot") is True
    assert psc.get("seccompProfile", {}).get("type") == "RuntimeDefault"
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    for vol in pod.get("volumes", []):
        assert set(vol) - {"name"} <= {"emptyDir", "persistentVolumeClaim", "configMap",
                                       "secret", "projected", "downwardAPI", "ephemeral"}
    for c in pod["containers"]:
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert not sc["capabilities"].get("add")
        assert sc.get("privileged", False) is False
        assert sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True
        assert {"cpu", "memory"} <= set(c["resources"]["requests"])
        assert {"cpu", "memory"} <= set(c["resources"]["limits"])
        probe = c["livenessProbe"]["httpGet"]
        liveness = next(a for a in c["args"] if a.startswith("--liveness="))
        assert liveness.endswith(probe["path"])
        port = probe["port"]
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert f":{ports.get(port, port)}/" in liveness
        mounts = {m["mountPath"] for m in c["volumeMounts"]}
        state = next(a for a in c["args"] if a.startswith("--state-dir="))
        assert state.split("=", 1)[1] in mounts and "/tmp" in mounts


def test_deployment_is_locked_down() -> None:
    dep = _one("Deployment")
    check_restricted_pod(dep["spec"]["template"]["spec"])
    assert dep["spec"]["strategy"]["type"] == "Recreate"
    pvc = _one("PersistentVolumeClaim")
    claims = [v["persistentVolumeClaim"]["claimName"]
              for v in dep["spec"]["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert claims == [pvc["metadata"]["name"]]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--peering={_one('ClusterKopfPeering')['metadata']['name']}" in args


def test_dockerfile_runs_non_root_and_installs_the_operator() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "USER 65532:65532" in text
    assert 'ENTRYPOINT ["kraftsman"]' in text
    for copied in ("controller_core", "operator", "pyproject.toml"):
        assert (ROOT / copied).exists()


def test_the_image_carries_what_the_planner_job_runs() -> None:
    """The KafkaRebalance planner Job runs `kraftsman rebalance propose` from the operator's
    own image: PySpark (the `plan` extra) and a Java runtime Spark accepts must be in it."""
    import re

    from controller_core.planning.spark_job import MIN_JAVA

    text = (ROOT / "Dockerfile").read_text()
    installs = re.findall(r'pip install [^\n]*"\.\[([a-z,]+)\]"', text)
    assert installs and {"operator", "plan"} <= set(installs[-1].split(","))
    jre = re.search(r"apt-get install [^\n]*openjdk-(\d+)-jre-headless", text)
    assert jre is not None and int(jre.group(1)) >= MIN_JAVA
    final_stage = text.rsplit("\nFROM ", 1)[1]
    assert "openjdk" in final_stage  # the runtime stage, not only the build stage
    # the class archive is recorded at build, where the planner's JVM looks for it, and
    # before the image drops root (the runtime root filesystem is read-only)
    archive = re.search(r"ENV KRAFTSMAN_SPARK_CLASS_ARCHIVE=(\S+)", final_stage)
    assert archive is not None and archive.group(1).startswith("/usr/local/")
    recorded = final_stage.index("RUN kraftsman spark-archive")
    assert archive.start() < recorded < final_stage.index("USER ")
