"""Reading authSecretRef Secrets is granted as narrowly as it can be: `get` on secrets only,
only in the namespaces named (chart value rbac.secretNamespaces; manifests/21-rbac-secrets.yaml),
never in the operator's ClusterRole. (The rest of the RBAC: tests/manifests.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    out = helm.Chart.load(ROOT / "charts" / "kraftsman").render(
        values, name="kraftsman", namespace="kraftsman-system", is_install=True)
    return [d for path, text in sorted(out.items()) if not path.endswith("NOTES.txt")
            for d in yaml.safe_load_all(text) if d]


def secret_grants(docs: list[dict[str, Any]]) -> list[tuple[str, str, list[str]]]:
    return [(d["kind"], d["metadata"].get("namespace", ""), r["verbs"])
            for d in docs if d["kind"] in ("Role", "ClusterRole")
            for r in d["rules"] if "secrets" in r["resources"]]


def check_pairs(docs: list[dict[str, Any]], namespaces: list[str], sa: tuple[str, str]) -> None:
    """Each listed namespace: a Role with `get` on secrets, bound to the operator's and the
    KafkaRebalance planner's ServiceAccounts (the planner reaches the same clusters)."""
    assert secret_grants(docs) == [("Role", ns, ["get"]) for ns in namespaces]
    secret_roles = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs
                    if d["kind"] == "Role" and any("secrets" in r["resources"]
                                                   for r in d["rules"])}
    bindings = [d for d in docs if d["kind"] == "RoleBinding"
                and (d["metadata"]["namespace"], d["roleRef"]["name"]) in secret_roles]
    assert len(bindings) == len(namespaces)
    planner = (f"{sa[0]}-planner", sa[1])
    for b in bindings:
        assert b["roleRef"]["kind"] == "Role"
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": ns}
                                 for name, ns in (sa, planner)]
    for d in docs:
        if d["kind"] in ("Role", "RoleBinding"):
            kubernetes_validate.validate(d, "1.30", strict=True)


def test_chart_grants_get_on_secrets_only_in_the_listed_namespaces() -> None:
    assert secret_grants(render({})) == []  # by default the operator reads no Secret
    docs = render({"rbac": {"secretNamespaces": ["kafka-apps", "payments"]}})
    dep = next(d for d in docs if d["kind"] == "Deployment")
    sa = dep["spec"]["template"]["spec"]["serviceAccountName"]
    check_pairs(docs, ["kafka-apps", "payments"], (sa, "kraftsman-system"))


def test_manifests_grant_get_on_secrets_only_in_default() -> None:
    docs = [d for p in sorted((ROOT / "manifests").glob("*.yaml"))
            for d in yaml.safe_load_all(p.read_text()) if d]
    check_pairs(docs, ["default"], ("kraftsman", "kraftsman-system"))
