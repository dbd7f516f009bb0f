"""What a write of a large PartitionReassignment costs a real kube-apiserver, and why: the
server of tests/realk8s (build it with tools/build-real-apiserver) in a temporary directory,
the CRD of crds/ as shipped (``spec.partitions`` an atomic list) beside the same CRD with
``spec.partitions`` a list-map keyed by topic and partition (what kraftsman shipped before),
each under a group of its own.

For each size and schema, the writes the operator makes for a new object, timed from request
to response: the user's create (``?fieldManager=kubectl-create``), kopf's finalizer (a JSON
patch testing the resourceVersion, as kopf sends it), the operator's first status (the largest
it writes, tests/operator/object_size.py) and small status patches (a heartbeat); and what
the server keeps: the object's bytes and its ``metadata.managedFields`` bytes before and after
the first status write. The schemas alternate, so load on a shared machine hits both alike.

    nice -n 10 .venv/bin/python bench/api_write_bench.py [--sizes 1000,8266,20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import ssl
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "operator")]
from object_size import worst_status  # noqa: E402

from tests.realk8s.apiserver import RealServer, up  # noqa: E402

SCHEMAS = ("atomic", "list-map")
STEPS = ("create", "finalizer", "first status", "heartbeat")


def crd_variant(schema: str) -> tuple[dict[str, Any], str]:
    """The shipped CRD, or the list-map variant, under a group of its own."""
    crd = yaml.safe_load((ROOT / "crds" / "partitionreassignments.kraftsman.io.yaml").read_text())
    crd = copy.deepcopy(crd)
    group = f"{schema.replace('-', '')}.bench.kraftsman.io"
    crd["metadata"]["name"] = f"partitionreassignments.{group}"
    crd["spec"]["group"] = group
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    partitions = spec["properties"]["partitions"]
    partitions.pop("x-kubernetes-validations", None)  # sizes beyond the CRD's own limit
    if schema == "list-map":
        partitions["x-kubernetes-list-type"] = "map"
        partitions["x-kubernetes-list-map-keys"] = ["topic", "partition"]
    return crd, group


class Client:
    def __init__(self, server: RealServer) -> None:
        self.base = server.url
        self.ctx: ssl.SSLContext = server.ssl_context()

    def request(self, method: str, path: str, body: Any = None,
                ctype: str = "application/json") -> tuple[int, float, bytes]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": ctype})
        began = time.monotonic()
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=300) as r:
                out, code = r.read(), r.status
        except urllib.error.HTTPError as e:
            out, code = e.read(), e.code
        return code, time.monotonic() - began, out


def spec(partitions: int) -> dict[str, Any]:
    return {"clusterRef": {"name": "demo"}, "dryRun": True,
            "partitions": [{"topic": "orders", "partition": p,
                            "replicas": [(p + 3 + i) % 6 for i in range(3)]}
                           for p in range(partitions)]}


def sizes_of(client: Client, url: str) -> tuple[int, int]:
    """(object bytes, managedFields bytes) as the server returns them."""
    code, _, out = client.request("GET", url)
    assert code == 200, out[:300]
    obj = json.loads(out)
    managed = obj["metadata"].get("managedFields") or []
    return len(out), len(json.dumps(managed, separators=(",", ":")))


def one_round(client: Client, group: str, name: str, n: int, status: dict[str, Any]
              ) -> dict[str, Any]:
    path = f"/apis/{group}/v1alpha1/namespaces/default/partitionreassignments"
    url = f"{path}/{name}"
    out: dict[str, Any] = {}
    code, took, body = client.request("POST", f"{path}?fieldManager=kubectl-create", {
        "apiVersion": f"{group}/v1alpha1", "kind": "PartitionReassignment",
        "metadata": {"name": name, "namespace": "default"}, "spec": spec(n)})
    assert code == 201, body[:300]
    out["create"] = took
    version = json.loads(body)["metadata"]["resourceVersion"]
    out["bytes"], out["managed"] = sizes_of(client, url)
    code, took, body = client.request("PATCH", f"{url}?fieldManager=kopf", [
        {"op": "test", "path": "/metadata/resourceVersion", "value": version},
        {"op": "add", "path": "/metadata/finalizers", "value": ["kraftsman.io/finalizer"]}],
        "application/json-patch+json")
    assert code == 200, body[:300]
    out["finalizer"] = took
    code, took, body = client.request("PATCH", f"{url}/status?fieldManager=kopf",
                                      {"status": status}, "application/merge-patch+json")
    assert code == 200, body[:300]
    out["first status"] = took
    out["bytes after"], out["managed after"] = sizes_of(client, url)
    beats = []
    for i in range(3):
        code, took, body = client.request(
            "PATCH", f"{url}/status?fieldManager=kopf",
            {"status": {"lastReconcileTime": f"2026-01-01T00:00:0{i}Z"}},
            "application/merge-patch+json")
        assert code == 200, body[:300]
        beats.append(took)
    out["heartbeat"] = statistics.median(beats)
    client.request("PATCH", url, {"metadata": {"finalizers": None}},
                   "application/merge-patch+json")
    client.request("DELETE", url)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,8266,20000",
                        help="partitions per object, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="api-write-") as tmp:
        server = up(Path(tmp))
        try:
            client = Client(server)
            groups = {}
            for schema in SCHEMAS:
                crd, groups[schema] = crd_variant(schema)
                server.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(crd))
            server.kubectl("wait", "--for=condition=Established", "crd", "--all")
            time.sleep(2)  # the new groups' discovery
            print(f"Writes of one PartitionReassignment on kube-apiserver "
                  f"{server.layout.version} + etcd (topic 'orders', RF 3; seconds from request "
                  f"to response, median of {args.repeat}; the operator's largest status)")
            print(f"  {'partitions':>10} {'schema':9} " + " ".join(f"{s:>12}" for s in STEPS)
                  + f" {'object':>9} {'managed':>9} {'after status':>22}")
            for n in sizes:
                status = worst_status(n)
                rounds: dict[str, list[dict[str, Any]]] = {s: [] for s in SCHEMAS}
                for r in range(args.repeat):
                    for schema in SCHEMAS:
                        rounds[schema].append(one_round(client, groups[schema],
                                                        f"w{n}-{r}", n, status))
                        loads.append(os.getloadavg()[0])
                for schema in SCHEMAS:
                    got = rounds[schema]
                    times = " ".join(f"{statistics.median(g[s] for g in got):12.2f}"
                                     for s in STEPS)
                    last = got[-1]
                    after = (f"{last['bytes after']:>9} / {last['managed after']:>9}"
                             if last["managed after"] else f"{last['bytes after']:>9} / dropped")
                    print(f"  {n:>10} {schema:9} {times} {last['bytes']:>9} "
                          f"{last['managed']:>9} {after:>22}", flush=True)
            print(f"  (1-min load average {min(loads):.1f}-{max(loads):.1f} on "
                  f"{os.cpu_count()} cores)")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
