"""The largest PartitionReassignment, on a real kube-apiserver and etcd: the largest stated in
docs/operator.md (measured by bench/api_size_bench.py against the same server) is stored with
the largest status the operator writes, one partition more is refused with a message that
says why, and the largest round-trips through the operator as deployed."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml
from deployed import ROOT
from harness import MAX_ANNOTATIONS, MAX_OBJECT, Api, annotations_size, cond_is
from object_size import object_bytes
from real_install import chart, cleanup, store_reassignment

from tests.realk8s.apiserver import RealServer


def documented_limits() -> tuple[int, int]:
    """(create / server-side apply, client-side apply) from docs/operator.md."""
    text = (ROOT / "docs" / "operator.md").read_text()
    found = re.search(r"at most \*\*([\d,]+) partitions\*\* .*? \*\*([\d,]+)\*\* with a "
                      r"client-side", text, re.S)
    assert found, "docs/operator.md no longer states the largest PartitionReassignment"
    return int(found[1].replace(",", "")), int(found[2].replace(",", ""))


def test_documented_largest_reassignment_is_stored_and_one_more_is_refused_saying_why(
        real_server: RealServer) -> None:
    """In a namespace as short as `default`: a client-side apply copies the object, its
    namespace and name included, into an annotation of at most 256 KiB."""
    created, client_side = documented_limits()
    namespace = "sizes"
    real_server.kubectl("create", "namespace", namespace)
    try:
        check_limits(real_server, namespace, created, client_side)
    finally:  # no operator of a later test should reconcile these (each write costs seconds)
        cleanup(real_server, namespace, set())


def check_limits(real_server: RealServer, namespace: str, created: int,
                 client_side: int) -> None:
    ok, said = store_reassignment(real_server, namespace, "fits", created)
    assert ok, said
    ok, said = store_reassignment(real_server, namespace, "over", created + 1)
    assert not ok
    assert "spec.partitions" in said and f"at most {created:,} partitions" in said, said
    assert "split" in said, said
    ok, said = store_reassignment(real_server, namespace, "csa-fits", client_side,
                                  client_side_apply=True)
    assert ok, said
    ok, said = store_reassignment(real_server, namespace, "csa-over", client_side + 1,
                                  client_side_apply=True)
    assert not ok
    assert "metadata.annotations: Too long: may not be more than 262144 bytes" in said, said


async def test_largest_reassignment_round_trips_through_the_deployed_operator(
        api: Api, deployed: Any, real_server: RealServer) -> None:
    """kopf's diff base is a digest: with kopf's stock annotation storage (a copy of the spec,
    ~450 KB here) the operator's first patch is refused (422: annotations over 256 KiB)."""
    n, _ = documented_limits()
    op = await deployed(chart())
    await api.create("KafkaCluster", "demo", {"embedded": {
        "brokers": [{"id": i} for i in range(6)], "controllers": [0, 1, 2],
        "topics": [{"name": "orders", "partitions": n, "replicationFactor": 3}]}})
    await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"), timeout=60)
    spec = {"clusterRef": {"name": "demo"}, "dryRun": True,
            "partitions": [{"topic": "orders", "partition": p,
                            "replicas": [(p + 3 + i) % 6 for i in range(3)]}
                           for p in range(n)]}
    real_server.kubectl("create", "-f", "-", input=json.dumps({
        "apiVersion": "kraftsman.io/v1alpha1", "kind": "PartitionReassignment",
        "metadata": {"name": "big", "namespace": api.namespace}, "spec": spec}))
    done = await api.wait("PartitionReassignment", "big", cond_is("Succeeded", "True"),
                          timeout=120)
    assert done["status"]["plan"]["replicaMovements"] >= n  # the operator read every entry
    assert len(done["spec"]["partitions"]) == n  # nothing was lost on the way
    # kopf stored its finalizer and its diff base (and so will not take the next event for
    # a new object): on a real server possibly after the status (its JSON patch tests the
    # resourceVersion, which the status writes move on)...
    # Each write of this object takes the server 20-30 s on the loaded 2-core machine, and a
    # JSON patch that loses the race with a status write is refused (422) and made again.
    done = await api.wait("PartitionReassignment", "big", lambda o: len(
        (o.get("status") or {}).get("handledDigest") or "") == 64 and
        "kraftsman.io/finalizer" in o["metadata"].get("finalizers", []), timeout=180)
    assert object_bytes(done) < MAX_OBJECT and annotations_size(done) < 1024 < MAX_ANNOTATIONS
    # ...and the API server refused none of the operator's writes.
    assert "Too long" not in op.log() and "RequestEntityTooLarge" not in op.log()
    assert "too large" not in op.log()


def test_kraftsman_plan_resources_fit_even_client_side_applied(real_server: RealServer,
                                                               namespace: str) -> None:
    """`kraftsman plan`'s split (render.py defaults: 1,000 partitions, 200,000 bytes per
    resource) stays within both limits stated in docs/operator.md, even with the longest
    topic names Kafka allows: each resource is stored by the real server after a client-side
    kubectl apply, with the largest status the operator writes."""
    from object_size import worst_status

    from controller_core.planning import render
    from controller_core.planning.result import PartitionMove

    _, client_side = documented_limits()
    assert client_side >= render.DEFAULT_MAX_PARTITIONS
    text = (ROOT / "docs" / "operator.md").read_text()
    assert f"{render.DEFAULT_MAX_PARTITIONS:,} partitions" in text
    assert f"{render.DEFAULT_MAX_BYTES:,} bytes" in text
    for topic in ("orders", "t" * 249):
        moves = [PartitionMove(topic, p, (0, 1, 2), (3, 4, 5), 10**9, 0) for p in range(2500)]
        resources = render.render(moves, render.RenderOptions(cluster="demo", goal="drain"))
        assert len(resources) >= 3
        for res in resources:
            obj = yaml.safe_load(res.text)
            obj["metadata"]["namespace"] = namespace
            name = obj["metadata"]["name"] = f"{res.name}-{len(topic)}"
            real_server.kubectl("apply", "-f", "-", input=json.dumps(obj))
            real_server.kubectl(
                "patch", "partitionreassignment", name, "-n", namespace,
                "--subresource=status", "--type=merge", "--field-manager=kopf", "-p",
                json.dumps({"status": worst_status(len(obj["spec"]["partitions"]))}))
