"""charts/kraftsman: rendered and linted with Helm's own engine; every object is valid."""

from __future__ import annotations

import json
from typing import Any

import helm_python as helm
import pytest
import yaml
from k8s_schemas import ROOT, k8s_errors, load_docs
from test_argocd_health import SCRIPTS
from test_manifests import (
    MANIFESTS,
    PLANNER_JOBS_RULES,
    PLANNER_RULES,
    check_least_privilege,
    check_restricted_pod,
    rbac_grants,
)

CHART = ROOT / "charts" / "kraftsman"

VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "pvc": {"state": {"type": "persistentVolumeClaim",
                      "persistentVolumeClaim": {"storageClassName": "fast", "size": "5Gi"}}},
    "existing-claim": {"state": {"type": "persistentVolumeClaim",
                                 "persistentVolumeClaim": {"existingClaim": "mine"}}},
    "standalone-no-crds": {"peering": {"enabled": False}, "crds": {"install": False}},
    "argocd-and-two-replicas": {"argocd": {"healthChecksConfigMap": True}, "replicaCount": 2,
                                "state": {"type": "persistentVolumeClaim",
                                          "persistentVolumeClaim": {
                                              "accessModes": ["ReadWriteMany"]}}},
}


@pytest.fixture(scope="module")
def chart() -> helm.Chart:
    return helm.Chart.load(CHART)


def render(chart: helm.Chart, values: dict[str, Any]) -> list[dict[str, Any]]:
    out = chart.render(values, name="kraftsman", namespace="kraftsman-system", is_install=True)
    docs = []
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def test_lint_is_clean_in_strict_mode() -> None:
    for values in VARIANTS.values():
        report = helm.lint(CHART, values, strict=True, kube_version="v1.30.0")
        assert report["errors"] == []
        assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_rendered_object_is_valid(chart: helm.Chart, variant: str,
                                        validate_cr: Any) -> None:
    docs = render(chart, VARIANTS[variant])
    assert docs
    for doc in docs:
        if doc["apiVersion"].startswith("kopf.dev/"):
            assert validate_cr(doc) == []
        else:
            assert k8s_errors(doc) == [], doc["kind"]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_rendered_pod_is_restricted_and_rbac_least_privilege(chart: helm.Chart,
                                                             variant: str) -> None:
    docs = render(chart, VARIANTS[variant])
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    (dep,) = by_kind["Deployment"]
    pod = dep["spec"]["template"]["spec"]
    check_restricted_pod(pod)
    roles = {r["metadata"]["name"]: r for r in by_kind["ClusterRole"]}
    assert set(roles) == {"kraftsman", "kraftsman-planner"}
    role = roles["kraftsman"]
    assert rbac_grants(roles["kraftsman-planner"]["rules"]) == PLANNER_RULES
    (jobs,) = by_kind["Role"]
    assert rbac_grants(jobs["rules"]) == PLANNER_JOBS_RULES
    assert jobs["metadata"]["namespace"] == "kraftsman-system"
    peering = VARIANTS[variant].get("peering", {}).get("enabled", True)
    if peering:
        check_least_privilege(role["rules"])
        assert "--peering=kraftsman" in pod["containers"][0]["args"]
        assert [p["metadata"]["name"] for p in by_kind["ClusterKopfPeering"]] == ["kraftsman"]
    else:
        assert "--standalone" in pod["containers"][0]["args"]
        assert "ClusterKopfPeering" not in by_kind
        assert all("kopf.dev" not in r["apiGroups"] for r in role["rules"])
    accounts = {a["metadata"]["name"] for a in by_kind["ServiceAccount"]}
    assert accounts == {"kraftsman", "kraftsman-planner"}
    assert pod["serviceAccountName"] == "kraftsman"
    args = pod["containers"][0]["args"]
    assert "--planner-service-account=kraftsman-planner" in args
    assert f"--planner-image={pod['containers'][0]['image']}" in args
    claim = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]
             if "persistentVolumeClaim" in v]
    assert [a.split("=", 1)[1] for a in args if a.startswith("--planner-state-claim=")] == claim


def test_manifests_are_the_chart_rendered_with_a_claim(chart: helm.Chart) -> None:
    """manifests/ and the chart install the same thing (the manifests use a claim): the
    operator's args and env, and every RBAC rule."""
    rendered = render(chart, VARIANTS["pvc"])
    committed = [d for p in MANIFESTS for d in load_docs(p)]

    def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
        (dep,) = [d for d in docs if d["kind"] == "Deployment"]
        return dict(dep["spec"]["template"]["spec"]["containers"][0])

    assert container(rendered)["args"] == container(committed)["args"]
    assert container(rendered)["env"] == container(committed)["env"]

    def rules(docs: list[dict[str, Any]]) -> dict[str, Any]:
        # (the manifests' Secret reader in `default` is the chart's rbac.secretNamespaces)
        return {(d["kind"], d["metadata"]["name"]): rbac_grants(d["rules"]) for d in docs
                if d["kind"] in ("ClusterRole", "Role")
                and not d["metadata"]["name"].endswith("-secret-reader")}

    assert rules(rendered) == rules(committed)


def test_state_volume_is_a_value(chart: helm.Chart) -> None:
    def state_volume(values: dict[str, Any]) -> dict[str, Any]:
        dep = next(d for d in render(chart, values) if d["kind"] == "Deployment")
        return next(v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "state")

    assert "emptyDir" in state_volume({})
    pvc_docs = [d for d in render(chart, VARIANTS["pvc"]) if d["kind"] == "PersistentVolumeClaim"]
    assert [d["spec"]["resources"]["requests"]["storage"] for d in pvc_docs] == ["5Gi"]
    assert pvc_docs[0]["spec"]["storageClassName"] == "fast"
    assert state_volume(VARIANTS["pvc"])["persistentVolumeClaim"]["claimName"] == \
        pvc_docs[0]["metadata"]["name"]
    assert state_volume(VARIANTS["existing-claim"])["persistentVolumeClaim"] == {
        "claimName": "mine"}
    assert not [d for d in render(chart, VARIANTS["existing-claim"])
                if d["kind"] == "PersistentVolumeClaim"]


def test_crds_are_templates_upgraded_with_the_release_and_kept(chart: helm.Chart) -> None:
    rendered = {d["metadata"]["name"]: d for d in render(chart, {})
                if d["kind"] == "CustomResourceDefinition"}
    committed = {d["metadata"]["name"]: d for p in (ROOT / "crds").glob("*.kraftsman.io.yaml")
                 for d in load_docs(p)}
    assert set(rendered) == set(committed) and len(committed) == 5
    for name, crd in rendered.items():
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert crd["spec"] == committed[name]["spec"]
    no_keep = [d for d in render(chart, {"crds": {"keep": False}})
               if d["kind"] == "CustomResourceDefinition"]
    assert no_keep and all("annotations" not in d["metadata"] for d in no_keep)
    assert not [d for d in render(chart, {"crds": {"install": False}})
                if d["kind"] == "CustomResourceDefinition"]
    # kopf's peering CRD sits in the chart's crds/ (installed before templates).
    assert [c["name"].rsplit("/", 1)[-1] for c in chart.crds] == [
        "kopfpeerings.kopf.dev.yaml"]


def test_argocd_configmap_ships_the_health_scripts(chart: helm.Chart) -> None:
    cm = next(d for d in render(chart, VARIANTS["argocd-and-two-replicas"])
              if d["kind"] == "ConfigMap")
    for kind in ("KafkaCluster", "KafkaQuorum", "PartitionReassignment", "LeaderElection",
                 "KafkaRebalance"):
        script = cm["data"][f"resource.customizations.health.kraftsman.io_{kind}"]
        assert script.strip() == (SCRIPTS / kind / "health.lua").read_text().strip()


def planner_settings(chart: helm.Chart, values: dict[str, Any]) -> tuple[Any, list[str]]:
    """What the rendered Deployment tells the operator about its planner Jobs' pods: the
    resources (JSON) and the pull secrets."""
    dep = next(d for d in render(chart, values) if d["kind"] == "Deployment")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    (resources,) = [json.loads(a.split("=", 1)[1]) for a in args
                    if a.startswith("--planner-resources=")]
    return resources, [a.split("=", 1)[1] for a in args
                       if a.startswith("--planner-image-pull-secret=")]


def test_planner_jobs_get_the_resources_and_pull_secrets_of_the_values(
        chart: helm.Chart) -> None:
    """The defaults are the operator's own (what it uses without the chart), and what the
    operator parses from the rendered args is what the values say."""
    from kraftsman.planner_job_spec import DEFAULT_RESOURCES, parse_resources

    defaults = yaml.safe_load((CHART / "values.yaml").read_text())["planner"]["resources"]
    assert defaults == DEFAULT_RESOURCES
    assert planner_settings(chart, {}) == (DEFAULT_RESOURCES, [])
    big = {"requests": {"cpu": 1, "memory": "6Gi"}, "limits": {"cpu": "4", "memory": "6Gi"}}
    resources, secrets = planner_settings(chart, {
        "planner": {"resources": big}, "imagePullSecrets": [{"name": "regcred"},
                                                            {"name": "mirror"}]})
    assert parse_resources(json.dumps(resources)) == {
        "requests": {"cpu": "1", "memory": "6Gi"}, "limits": {"cpu": "4", "memory": "6Gi"}}
    assert secrets == ["regcred", "mirror"]


@pytest.mark.parametrize(("values", "where"), [
    ({"state": {"type": "hostPath"}}, "/state/type"),
    ({"replicaCount": 0}, "/replicaCount"),
    ({"replicaCount": 2, "peering": {"enabled": False}}, "/peering/enabled"),
    ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    ({"resources": {"limits": None}}, "limits"),
    ({"health": {"port": 80}}, "/health/port"),
    ({"metrics": {"enabled": True, "port": 80}}, "/metrics/port"),
    ({"metrics": {"enabled": True, "port": 9090,
                  "serviceMonitor": {"enabled": True, "interval": "often"}}},
     "/metrics/serviceMonitor/interval"),
    ({"extraArgs": ["--metrics=http://0.0.0.0:9191/metrics"]}, "/extraArgs/0"),
    ({"unknownKey": 1}, "unknownKey"),
])
def test_values_schema_rejects_bad_values(chart: helm.Chart, values: dict[str, Any],
                                          where: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=where):
        chart.validate_schema(values)
    chart.validate_schema({})


RWX = {"type": "persistentVolumeClaim", "persistentVolumeClaim": {"accessModes": ["ReadWriteMany"]}}


@pytest.mark.parametrize(("values", "where"), [
    ({"replicaCount": 2}, "/state/type"),  # per-pod emptyDir: replicas would not share state
    ({"replicaCount": 2, "state": {"type": "persistentVolumeClaim"}},
     "/state/persistentVolumeClaim/accessModes"),  # ReadWriteOnce: one pod mounts it
    ({"replicaCount": 2, "state": RWX, "peering": {"enabled": False}}, "/peering/enabled"),
    ({"replicaCount": 2, "state": RWX, "extraArgs": ["--priority=5"]}, "/extraArgs/0"),
    ({"resources": {"requests": {"cpu": "100m", "memory": "lots"},
                    "limits": {"cpu": "1", "memory": "1Gi"}}}, "/resources/requests/memory"),
    ({"planner": {"resources": {"requests": {"cpu": "1", "memory": "3Gi"},
                                "limits": {"cpu": "2", "memory": "3 GB"}}}},
     "/planner/resources/limits/memory"),
    ({"state": {"type": "emptyDir", "emptyDir": {"sizeLimit": "big"}}},
     "/state/emptyDir/sizeLimit"),
    ({"extraArgs": ["--tick=0"]}, "/extraArgs/0"),
    ({"extraArgs": ["--time-scale=-2"]}, "/extraArgs/0"),
    ({"extraArgs": ["--tick", "0"]}, "/extraArgs/0"),  # only --tick=SECONDS is checkable
    ({"extraArgs": ["--standalone"]}, "/extraArgs/0"),  # peering.enabled says it
    ({"extraArgs": ["--log-level=debug", "--peering=other"]}, "/extraArgs/0"),
    ({"extraArgs": ["--namespace=apps"]}, "/extraArgs/0"),  # the chart sets --all-namespaces
    ({"extraArgs": ["--planner-image=mine:1"]}, "/extraArgs/0"),  # image.* says it
], ids=["replicas-emptydir", "replicas-rwo", "replicas-no-peering", "replicas-priority",
        "memory-lots", "planner-memory-3-GB", "sizelimit-big", "tick-0", "time-scale-negative",
        "tick-split",
        "standalone-with-peering", "peering-arg", "namespace-arg", "planner-arg"])
def test_values_that_cannot_work_are_refused(chart: helm.Chart, values: dict[str, Any],
                                             where: str) -> None:
    with pytest.raises(helm.HelmValuesError) as refused:
        render(chart, values)
    assert f"at '{where}'" in str(refused.value)


@pytest.mark.parametrize("values", [
    {"replicaCount": 2, "state": RWX},
    {"replicaCount": 3, "state": {**RWX, "persistentVolumeClaim": {
        "existingClaim": "shared", "accessModes": ["ReadWriteMany"]}}},
    {"extraArgs": ["--tick=0.5", "--time-scale=2", "--priority=5", "--peering-lifetime=30"]},
    {"resources": {"requests": {"cpu": 0.5, "memory": "512Mi"},
                   "limits": {"cpu": "2", "memory": "1.5Gi"}}},
], ids=["two-replicas-rwx", "existing-rwx-claim", "tuning-args", "numeric-quantities"])
def test_values_that_work_render(chart: helm.Chart, values: dict[str, Any]) -> None:
    (dep,) = [d for d in render(chart, values) if d["kind"] == "Deployment"]
    assert dep["spec"]["replicas"] == values.get("replicaCount", 1)


@pytest.mark.parametrize("state", ["emptyDir", "persistentVolumeClaim"])
def test_the_notes_say_when_the_rebalance_example_cannot_run(chart: helm.Chart,
                                                            state: str) -> None:
    """The NOTES suggest applying every example; the KafkaRebalance one needs a state volume
    its planner Job can mount, which the default emptyDir is not."""
    values = {"state": {"type": state}}
    if state == "persistentVolumeClaim":
        values["state"]["persistentVolumeClaim"] = {"storageClassName": "standard"}
    out = chart.render(values, name="kraftsman", namespace="kraftsman-system", is_install=True)
    notes = next(text for path, text in out.items() if path.endswith("NOTES.txt"))
    assert "kubectl apply -f manifests/examples/" in notes
    hint = "40-kafkarebalance.yaml needs --set state.type=persistentVolumeClaim"
    assert (hint in notes) == (state == "emptyDir"), notes


def test_the_operator_runs_with_two_malloc_arenas_in_the_chart_the_manifests_and_the_image(
        chart: helm.Chart) -> None:
    """glibc's per-thread arenas kept what the worker threads freed: 1,387 MiB peak with
    100,000 partitions in flight in 20 resources, 982 MiB with MALLOC_ARENA_MAX=2
    (bench/operator_bench.py memory --chunk 5000). Every way of running it sets it."""
    def env_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
        (dep,) = [d for d in docs if d["kind"] == "Deployment"]
        (container,) = dep["spec"]["template"]["spec"]["containers"]
        return {e["name"]: e.get("value") for e in container["env"]}

    assert env_of(render(chart, {}))["MALLOC_ARENA_MAX"] == "2"
    manifest = yaml.safe_load_all((ROOT / "manifests" / "40-deployment.yaml").read_text())
    assert env_of([d for d in manifest if d])["MALLOC_ARENA_MAX"] == "2"
    assert "MALLOC_ARENA_MAX=2" in (ROOT / "Dockerfile").read_text()


def test_metrics_are_served_on_a_named_port_behind_a_service_and_a_service_monitor_on_demand(
        chart: helm.Chart) -> None:
    docs = render(chart, {})
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert "--metrics=http://0.0.0.0:9090/metrics" in container["args"]
    assert {"name": "metrics", "containerPort": 9090, "protocol": "TCP"} in container["ports"]
    (svc,) = [d for d in docs if d["kind"] == "Service"]
    assert svc["metadata"]["name"] == "kraftsman-metrics"
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics",
                                     "protocol": "TCP"}]
    assert not [d for d in docs if d["kind"] == "ServiceMonitor"]

    docs = render(chart, {"metrics": {"enabled": True, "port": 9191, "serviceMonitor": {
        "enabled": True, "interval": "15s", "labels": {"release": "prometheus"}}}})
    (svc,) = [d for d in docs if d["kind"] == "Service"]
    (sm,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert sm["metadata"]["labels"]["release"] == "prometheus"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    # honorLabels: the series' own `namespace` (the resource's) is not renamed
    assert sm["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics",
                                        "interval": "15s", "honorLabels": True}]
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["kraftsman-system"]}
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    assert "--metrics=http://0.0.0.0:9191/metrics" in dep["spec"]["template"]["spec"][
        "containers"][0]["args"]

    docs = render(chart, {"metrics": {"enabled": False, "port": 9090}})
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert not [a for a in container["args"] if a.startswith("--metrics")]
    assert [p["name"] for p in container["ports"]] == ["health"]
    assert not [d for d in docs if d["kind"] in ("Service", "ServiceMonitor")]


def test_the_grafana_dashboard_is_a_config_map_for_grafana_s_sidecar_on_demand(
        chart: helm.Chart) -> None:
    assert not [d for d in render(chart, {}) if d["kind"] == "ConfigMap"
                and d["metadata"]["name"] == "kraftsman-dashboard"]
    docs = render(chart, {"metrics": {"enabled": True, "port": 9090, "grafanaDashboard": {
        "enabled": True, "namespace": "monitoring"}}})
    (cm,) = [d for d in docs if d["metadata"]["name"] == "kraftsman-dashboard"]
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    board = json.loads(cm["data"]["kraftsman-dashboard.json"])
    assert board == json.loads((ROOT / "manifests" / "grafana" /
                                "kraftsman-dashboard.json").read_text())
    assert board["uid"] == "kraftsman-operations" and len(board["panels"]) >= 7


def test_the_alerting_rules_are_a_prometheus_rule_on_demand(chart: helm.Chart) -> None:
    assert not [d for d in render(chart, {}) if d["kind"] == "PrometheusRule"]
    docs = render(chart, {"metrics": {"enabled": True, "port": 9090, "prometheusRule": {
        "enabled": True, "labels": {"release": "prometheus"}}}})
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    assert rule["spec"] == yaml.safe_load((ROOT / "manifests" / "prometheus" /
                                           "kraftsman-alerts.yaml").read_text())
    alerts = [r["alert"] for r in rule["spec"]["groups"][0]["rules"]]
    assert "KraftsmanMoveStalled" in alerts
    # Helm leaves Prometheus' own templates alone
    assert "{{ $labels.kind }}" in rule["spec"]["groups"][0]["rules"][0]["annotations"]["summary"]
