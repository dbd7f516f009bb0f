"""The largest PartitionReassignment a real API server stores: kube-apiserver and etcd as the
tests run them (tests/realk8s; build them with tools/build-real-apiserver), in a temporary
directory, with the CRDs of crds/ less their own size rule (spec.partitions at most
MAX_PARTITIONS_PER_RESOURCE, which this bench measures).

The object measured is the one stored once the operator handled it: the spec (topic "orders",
RF 3) as a user creates it — `kubectl create` (as `kubectl apply --server-side` and
`kraftsman apply` send it), or a client-side `kubectl apply` (Argo CD's default), which copies
the object into the last-applied-configuration annotation — with the managedFields the server
records, the operator's finalizer and kopf's annotations, and the largest status the operator
writes for that many partitions (tests/operator/object_size.py), written through the status
subresource (tests/operator/real/real_install.py).

    .venv/bin/python bench/api_size_bench.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "operator"),
                str(ROOT / "tests" / "operator" / "real")]
from real_install import store_reassignment  # noqa: E402

from kraftsman.crdgen import MAX_PARTITIONS_PER_RESOURCE  # noqa: E402
from tests.realk8s.apiserver import RealServer, up  # noqa: E402

NAMESPACE = "sizes"


def without_size_rule(crd: dict[str, Any]) -> dict[str, Any]:
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    partitions = spec["properties"]["partitions"]
    partitions.pop("x-kubernetes-validations", None)
    return crd


def fits(server: RealServer, partitions: int, client_side_apply: bool) -> tuple[bool, str]:
    name = f"p{partitions}{'c' if client_side_apply else 's'}"
    ok, said = store_reassignment(server, NAMESPACE, name, partitions,
                                  client_side_apply=client_side_apply)
    server.kubectl("delete", "partitionreassignment", name, "-n", NAMESPACE,
                   "--ignore-not-found", "--wait=false")
    server.kubectl("patch", "partitionreassignment", name, "-n", NAMESPACE, "--type=merge",
                   "-p", '{"metadata": {"finalizers": null}}', check=False)
    lines = [ln.strip("* ") for ln in said.splitlines() if ln.strip("* ")]
    useful = [ln for ln in lines if "some validation rules were not checked" not in ln]
    return ok, (useful or lines or ["(kubectl said nothing)"])[-1]


def largest(server: RealServer, client_side_apply: bool) -> int:
    lo, hi = 1, 50_000  # lo fits, hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        ok, _ = fits(server, mid, client_side_apply)
        lo, hi = (mid, hi) if ok else (lo, mid)
    return lo


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="api-size-") as tmp:
        server = up(Path(tmp))
        try:
            crd = yaml.safe_load((ROOT / "crds" / "partitionreassignments.kraftsman.io.yaml")
                                 .read_text())
            server.kubectl("apply", "--server-side", "-f", "-",
                           input=json.dumps(without_size_rule(crd)))
            server.kubectl("wait", "--for=condition=Established", "crd", "--all")
            server.kubectl("create", "namespace", NAMESPACE)
            print(f"Largest PartitionReassignment stored by kube-apiserver "
                  f"{server.layout.version} + etcd (topic 'orders', RF 3, the operator's "
                  "largest status and its annotations included)")
            for label, csa in (("kubectl create / apply --server-side / kraftsman apply",
                                False), ("client-side kubectl apply (Argo CD default)", True)):
                n = largest(server, csa)
                _, refused = fits(server, n + 1, csa)
                print(f"  {label:56s} {n:>6} partitions ({n + 1}: {refused})")
            print(f"  (the CRD's own rule: at most {MAX_PARTITIONS_PER_RESOURCE})")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
