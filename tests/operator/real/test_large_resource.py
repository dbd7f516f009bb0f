"""A large PartitionReassignment round-trips through the operator as deployed, against the
emulator with the API server's size limits (harness.Emulator); the largest that fits, stated in
docs/operator.md, is measured by bench/api_size_bench.py and checked here."""

from __future__ import annotations

import re
from typing import Any

import yaml
from deployed import ROOT, from_chart
from harness import MAX_ANNOTATIONS, MAX_OBJECT, Api, annotations_size, cond_is
from object_size import as_created, as_stored, object_bytes, reassignment, worst_status

URL = "/apis/kraftsman.io/v1alpha1/namespaces/default/partitionreassignments"


def documented_limits() -> tuple[int, int]:
    """(create / server-side apply, client-side apply) from docs/operator.md."""
    text = (ROOT / "docs" / "operator.md").read_text()
    found = re.search(r"at most \*\*([\d,]+) partitions\*\* .*? \*\*([\d,]+)\*\* with a "
                      r"client-side", text, re.S)
    assert found, "docs/operator.md no longer states the largest PartitionReassignment"
    return int(found[1].replace(",", "")), int(found[2].replace(",", ""))


async def stored(api: Api, obj: dict[str, Any]) -> int:
    async with api.session.post(api.base + URL, json=obj) as r:
        return r.status


async def test_documented_largest_reassignment_fits_and_one_more_does_not(api: Api) -> None:
    created, client_side = documented_limits()
    for n, csa in ((created, False), (client_side, True)):
        fits = as_stored(reassignment(f"fits-{n}", n, client_side_apply=csa), worst_status(n))
        over = as_stored(reassignment(f"over-{n}", n + 1, client_side_apply=csa),
                         worst_status(n + 1))
        assert await stored(api, fits) < 300
        assert await stored(api, over) in (413, 422)


async def test_largest_reassignment_round_trips_through_the_deployed_operator(
        api: Api, deployed: Any) -> None:
    """kopf's diff base is a digest: with kopf's stock annotation storage (a copy of the spec,
    ~450 KB here) the operator's first patch is refused (422: annotations over 256 KiB)."""
    n, _ = documented_limits()
    op = await deployed(from_chart())
    await api.create("KafkaCluster", "demo", {"embedded": {
        "brokers": [{"id": i} for i in range(6)], "controllers": [0, 1, 2],
        "topics": [{"name": "orders", "partitions": n, "replicationFactor": 3}]}})
    await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"), timeout=60)
    obj = reassignment("big", n)  # as kubectl create sends it (managedFields aside)
    del obj["metadata"]["managedFields"]
    obj["metadata"]["uid"] = "uid-big"
    assert await stored(api, obj) < 300
    done = await api.wait("PartitionReassignment", "big", cond_is("Succeeded", "True"),
                          timeout=120)
    assert done["status"]["plan"]["replicaMovements"] >= n  # the operator read every entry
    assert len(done["spec"]["partitions"]) == n  # nothing was lost on the way
    assert object_bytes(done) < MAX_OBJECT and annotations_size(done) < 1024 < MAX_ANNOTATIONS
    assert "kraftsman.io/finalizer" in done["metadata"]["finalizers"]
    # kopf stored its diff base (and so will not take the next event for a new object)...
    done = await api.wait("PartitionReassignment", "big", lambda o: "kraftsman.io/last-handled"
                          "-digest" in o["metadata"].get("annotations", {}))
    # ...and the API server refused none of the operator's writes.
    assert "Too long" not in op.log() and "RequestEntityTooLarge" not in op.log()


async def test_kraftsman_plan_resources_fit_even_client_side_applied(api: Api) -> None:
    """`kraftsman plan`'s split (render.py defaults: 1,000 partitions, 200,000 bytes per
    resource) stays within both limits stated in docs/operator.md, even with the longest
    topic names Kafka allows, each resource stored after a client-side kubectl apply."""
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
            obj["metadata"]["namespace"] = "default"
            n = len(obj["spec"]["partitions"])
            stored_obj = as_stored(as_created(obj, client_side_apply=True), worst_status(n))
            assert await stored(api, stored_obj) < 300, (topic[:10], res.name, n)


