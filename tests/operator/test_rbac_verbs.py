"""Every verb the chart and manifests/ grant is used, and by which call: least privilege that
cannot drift. A grant with no call below fails (remove the verb); a call whose grant is gone
fails (and against the real API server, tests/operator/real/, the operator logged in with its
ServiceAccount's token gets a 403 for it). Each call is named by a line of the source that
makes it, which must still be there.

Paths starting with ``kopf/`` are in the installed kopf package: the calls kopf makes for the
operator (watching, patching, peering, posting Events, scanning CRDs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kopf
import pytest
from deployed import ROOT, manifests, render_chart

KOPF = Path(kopf.__file__).parent
KINDS = ("kafkaclusters", "kafkaquorums", "leaderelections", "kafkarebalances",
         "partitionreassignments")

# kopf's calls for every resource it handles: list then watch (fetching.py, watching.py);
# merge- and JSON-patches of finalizers, annotations and status (patching.py).
_LIST = ("kopf/_cogs/clients/fetching.py", "rsp = await api.get(")
_WATCH = ("kopf/_cogs/clients/watching.py", "params['watch'] = 'true'")
_PATCH = ("kopf/_cogs/clients/patching.py", "'application/merge-patch+json'")
_STATUS = ("kopf/_cogs/clients/patching.py", "subresource='status'")

# The operator's ServiceAccount: (apiGroup, resource, verb) -> (file, a line of the call).
OPERATOR: dict[tuple[str, str, str], tuple[str, str]] = {
    **{("kraftsman.io", kind, "list"): _LIST for kind in KINDS},
    **{("kraftsman.io", kind, "watch"): _WATCH for kind in KINDS},
    **{("kraftsman.io", kind, "patch"): _PATCH for kind in KINDS},
    **{("kraftsman.io", f"{kind}/status", "patch"): _STATUS for kind in KINDS},
    # A KafkaRebalance creates its steps one after another, reads the running one, cancels
    # it (merge patch: handled above), deletes it when the KafkaRebalance goes.
    ("kraftsman.io", "partitionreassignments", "create"): (
        "operator/kraftsman/handlers/rebalance.py",
        "if not await kube.create(path, body, what, self.settings, self.logger):"),
    ("kraftsman.io", "partitionreassignments", "get"): (
        "operator/kraftsman/handlers/rebalance.py",
        "obj = await kube.get(kube.url(API_VERSION, PREAS, self.namespace, running.name),"),
    ("kraftsman.io", "partitionreassignments", "delete"): (
        "operator/kraftsman/handlers/rebalance.py",
        "await kube.delete(kube.url(API_VERSION, PREAS, self.namespace, name),"),
    # KafkaCluster spec.autoRebalance.addBrokers: the KafkaRebalance for newly registered
    # brokers, and (its create answered 409) whether the one there is the cluster's.
    ("kraftsman.io", "kafkarebalances", "create"): (
        "operator/kraftsman/handlers/auto_rebalance.py",
        "if await kube.create(path, body, what, rt.settings, logger):"),
    ("kraftsman.io", "kafkarebalances", "get"): (
        "operator/kraftsman/handlers/auto_rebalance.py",
        "existing = await kube.get(f\"{path}/{body['metadata']['name']}\", what, rt.settings,"),
    # The proposal the planner Job wrote: read, listed by label, deleted when superseded.
    ("", "configmaps", "get"): (
        "operator/kraftsman/handlers/rebalance.py",
        'obj = await kube.get(kube.url("v1", "configmaps", self.namespace, cm),'),
    ("", "configmaps", "list"): (
        "operator/kraftsman/handlers/rebalance.py",
        "for cm in await kube.list_names(path, labels, f\"ConfigMaps in {self.namespace}\","),
    ("", "configmaps", "delete"): (
        "operator/kraftsman/handlers/rebalance.py",
        'await kube.delete(f"{path}/{cm}", f"ConfigMap {self.namespace}/{cm}",'),
    # Milestone Events (the outbox) and kopf's own.
    ("", "events", "create"): ("operator/kraftsman/handlers/opstate.py",
                               "await kopf_api.post(url, payload=event, settings=settings,"),
    # Peering: kopf watches the peering object and announces itself by patching it.
    ("kopf.dev", "clusterkopfpeerings", "list"): _LIST,
    ("kopf.dev", "clusterkopfpeerings", "watch"): _WATCH,
    ("kopf.dev", "clusterkopfpeerings", "patch"): ("kopf/_core/engines/peering.py",
                                                   "await patching.patch_obj("),
    # kopf's scan of what exists (its resources appearing, CRDs changing).
    ("apiextensions.k8s.io", "customresourcedefinitions", "list"): _LIST,
    ("apiextensions.k8s.io", "customresourcedefinitions", "watch"): _WATCH,
    # Planner Jobs (a Role in the operator's namespace).
    ("batch", "jobs", "create"): ("operator/kraftsman/handlers/rebalance.py",
                                  'await kube.create(kube.url("batch/v1", "jobs", ns), body,'),
    ("batch", "jobs", "get"): ("operator/kraftsman/handlers/rebalance.py",
                               'job = await kube.get(kube.url("batch/v1", "jobs", jns, jname)'),
    ("batch", "jobs", "list"): ("operator/kraftsman/handlers/rebalance.py",
                                "for job in await kube.list_names(path, labels, f\"Jobs in "),
    ("batch", "jobs", "delete"): ("operator/kraftsman/handlers/rebalance.py",
                                  'await kube.delete(f"{path}/{job}", f"Job {jns}/{job}",'),
    # spec.authSecretRef (a Role per listed namespace).
    ("", "secrets", "get"): ("operator/kraftsman/handlers/secrets.py",
                             'response = await kopf_api.request("get", url,'),
}

# The planner Jobs' ServiceAccount (kraftsman rebalance propose).
PLANNER: dict[tuple[str, str, str], tuple[str, str]] = {
    ("kraftsman.io", "kafkarebalances", "get"): (
        "operator/kraftsman/rebalance_propose.py",
        "rb = kube.get_custom(REBALANCE_PLURAL, ns, name)"),
    ("kraftsman.io", "kafkaclusters", "get"): ("operator/kraftsman/rebalance_propose.py",
                                               'kc = kube.get_custom(PLURALS["KafkaCluster"], '
                                               "ns, cname)"),
    ("", "configmaps", "create"): ("operator/kraftsman/kube_client.py",
                                   "self._call(self.core.create_namespaced_config_map, ns, "
                                   "dict(obj))"),
    ("", "configmaps", "get"): ("operator/kraftsman/kube_client.py",
                                "current = _json(self._call(self.core.read_namespaced_config_map"),
    ("", "configmaps", "patch"): ("operator/kraftsman/kube_client.py",
                                  "self._call(self.core.patch_namespaced_config_map, name, ns, "
                                  "patch,"),
    ("", "secrets", "get"): ("operator/kraftsman/kube_client.py",
                             "raw = self._call(self.core.read_namespaced_secret, name, namespace,"),
}


def grants(docs: list[dict[str, Any]], account: str) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) granted to ServiceAccount ``account`` by these objects."""
    bound = set()  # (kind, name, namespace of a Role; None for a ClusterRole)
    for b in docs:
        if b["kind"] in ("RoleBinding", "ClusterRoleBinding") and any(
                s["kind"] == "ServiceAccount" and s["name"] == account for s in b["subjects"]):
            ref = b["roleRef"]
            bound.add((ref["kind"], ref["name"],
                       b["metadata"].get("namespace") if ref["kind"] == "Role" else None))
    return {(group, resource, verb)
            for role in docs if role["kind"] in ("Role", "ClusterRole")
            and (role["kind"], role["metadata"]["name"],
                 role["metadata"].get("namespace") if role["kind"] == "Role" else None) in bound
            for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def source(path: str) -> str:
    if path.startswith("kopf/"):
        return (KOPF / path.removeprefix("kopf/")).read_text()
    return (ROOT / path).read_text()


INSTALLS = {
    "chart": (render_chart({"rbac": {"secretNamespaces": ["team-a"]}}), "kraftsman",
              "kraftsman-planner"),
    "manifests": (manifests(), "kraftsman", "kraftsman-planner"),
}


@pytest.mark.parametrize("install", sorted(INSTALLS))
@pytest.mark.parametrize("who", ["operator", "planner"])
def test_every_granted_verb_is_used_and_every_used_verb_granted(install: str,
                                                                who: str) -> None:
    docs, operator_sa, planner_sa = INSTALLS[install]
    table = OPERATOR if who == "operator" else PLANNER
    granted = grants(docs, operator_sa if who == "operator" else planner_sa)
    unused = sorted(granted - set(table))
    assert not unused, f"{install} grants the {who} verbs no call uses: {unused}; remove them"
    missing = sorted(set(table) - granted)
    assert not missing, f"{install} does not grant the {who} {missing}; the calls get a 403"


@pytest.mark.parametrize("table", ["operator", "planner"])
def test_each_call_named_is_still_in_the_source(table: str) -> None:
    for key, (path, line) in (OPERATOR if table == "operator" else PLANNER).items():
        assert line in source(path), f"{key}: {path} no longer makes the call {line!r}"
