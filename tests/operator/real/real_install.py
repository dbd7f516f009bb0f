"""The operator's install on the real API server (tests/realk8s), and the cleaning up after a
test: shared by conftest.py and the tests of this directory."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml
from deployed import PodTemplate, from_chart

from kraftsman.handlers.common import PLURALS
from kraftsman.resources import GROUP
from tests.realk8s.apiserver import RealServer, ServerError

RELEASE = CHART_NAMESPACE = "kraftsman-chart"  # the chart's release, apart from manifests/


def chart(values: dict[str, Any] | None = None, **kw: Any) -> PodTemplate:
    """The chart's pod as installed on the real server (release kraftsman-chart)."""
    return from_chart(values, release=RELEASE, namespace=CHART_NAMESPACE, **kw)


class Installer:
    """Applies an install's objects with real kubectl, once per distinct set of objects."""

    def __init__(self, server: RealServer) -> None:
        self.server = server
        self.applied: set[str] = set()

    def apply(self, objects: list[dict[str, Any]], manager: str) -> None:
        text = yaml.safe_dump_all(objects)
        key = f"{manager}\n{text}"
        if key in self.applied:
            return
        namespaces = {o["metadata"].get("namespace") for o in objects} - {None}
        for ns in sorted(namespaces):  # `helm install --create-namespace`
            if self.server.kubectl("get", "namespace", ns, check=False).returncode != 0:
                self.server.kubectl("create", "namespace", ns)
        # manifests/ as README says (`kubectl apply -f`), the chart as Helm applies it.
        args = (("apply", "-f", "-") if manager == "kubectl" else
                ("apply", "--server-side", f"--field-manager={manager}", "-f", "-"))
        try:
            self.server.kubectl(*args, input=text)
        except ServerError as e:
            # A claim's spec is immutable: `helm upgrade` to another state.accessModes fails
            # the same way. Here the claim goes (no controller manager removes its
            # pvc-protection finalizer, so the test does) and the install is applied again.
            if "immutable" not in str(e):
                raise
            for obj in objects:
                if obj["kind"] == "PersistentVolumeClaim":
                    meta = obj["metadata"]
                    self.server.kubectl("delete", "pvc", meta["name"], "-n", meta["namespace"],
                                        "--wait=false")
                    self.server.kubectl("patch", "pvc", meta["name"], "-n", meta["namespace"],
                                        "--type=merge", "-p",
                                        '{"metadata": {"finalizers": null}}', check=False)
            self.server.kubectl(*args, input=text)
        self.applied.add(key)


_counter = iter(range(1, 10**6))


def namespace_for(test: str) -> str:
    """A fresh namespace for each test (no namespace is ever deleted: no controller
    manager runs to finish it)."""
    words = re.sub(r"[^a-z0-9]+", "-", test.lower().removeprefix("test_")).strip("-")
    return f"t{next(_counter)}-{words}"[:63].rstrip("-")


def cleanup(server: RealServer, namespace: str | None, job_namespaces: set[str]) -> None:
    """What the test created: its objects (finalizers dropped — the operator is stopped),
    the planner Jobs, kopf's peering entries."""
    for plural in PLURALS.values() if namespace is not None else ():
        resource = f"{plural}.{GROUP}"
        names = server.kubectl("get", resource, "-n", namespace, "-o", "name").stdout.split()
        for name in names:
            server.kubectl("patch", name, "-n", namespace, "--type=merge", "-p",
                           json.dumps({"metadata": {"finalizers": None}}), check=False)
        if names:
            server.kubectl("delete", resource, "--all", "-n", namespace, "--wait=false")
    for ns in job_namespaces:
        server.kubectl("delete", "jobs", "--all", "-n", ns, "--wait=false")
    for peering in server.kubectl("get", "clusterkopfpeerings", "-o", "name").stdout.split():
        # kopf's peers are its status (no subresource); a killed replica's entry would
        # outlive the test and pause the next test's operator until it expires.
        server.kubectl("patch", peering, "--type=merge", "-p", '{"status": null}')




def store_reassignment(server: RealServer, namespace: str, name: str, partitions: int, *,
                       client_side_apply: bool = False) -> tuple[bool, str]:
    """Store a PartitionReassignment of ``partitions`` entries (topic "orders", RF 3) as a user
    does — `kubectl create`, or a client-side `kubectl apply` (Argo CD's default) — then the
    largest status the operator writes for it (object_size.worst_status, through the status
    subresource as kopf writes it). (True, "") when the server stored both; else (False, what
    kubectl said)."""
    from object_size import worst_status

    obj = {"apiVersion": "kraftsman.io/v1alpha1", "kind": "PartitionReassignment",
           "metadata": {"name": name, "namespace": namespace},
           "spec": {"clusterRef": {"name": "demo"}, "dryRun": True,
                    "partitions": [{"topic": "orders", "partition": p,
                                    "replicas": [(p + 3 + i) % 6 for i in range(3)]}
                                   for p in range(partitions)]}}
    verb = ["apply"] if client_side_apply else ["create"]
    done = server.kubectl(*verb, "-f", "-", input=json.dumps(obj), check=False)
    if done.returncode != 0:
        return False, done.stderr.strip()
    # kopf's metadata at its largest: the finalizer, and the progress record of the deletion
    # handler while it waits (its diff base is in the status, worst_status has it)
    kopf = {"metadata": {"finalizers": ["kraftsman.io/finalizer"], "annotations": {
        "kraftsman.io/rollback": json.dumps({
            "started": "2026-11-28T13:34:32.123456+00:00",
            "delayed": "2026-11-28T13:34:42.123456+00:00", "purpose": "delete",
            "retries": 999, "success": False, "failure": False,
            "message": "waiting for KafkaCluster demo to roll back"},
            separators=(",", ":"))}}}
    for patch, sub in ((kopf, []), ({"status": worst_status(partitions)},
                                    ["--subresource=status"])):
        done = server.kubectl("patch", "partitionreassignment", name, "-n", namespace, *sub,
                              "--type=merge", "--field-manager=kopf", "-p", json.dumps(patch),
                              check=False)
        if done.returncode != 0:
            return False, done.stderr.strip()
    return True, ""
