"""The emulator refuses what a real API server refuses, as it answers (harness.Emulator):
annotations over 256 KiB in total (apimachinery's ValidateAnnotationsSize: 422 Invalid), an
object over etcd's 1.5 MiB ("etcdserver: request is too large": 413) and a request body over
the apiserver's 3 MiB (413)."""

from __future__ import annotations

from typing import Any

from harness import MAX_ANNOTATIONS, MAX_OBJECT, MAX_REQUEST_BODY, Api

URL = "/apis/kraftsman.io/v1alpha1/namespaces/default/leaderelections"


def election(name: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "kraftsman.io/v1alpha1", "kind": "LeaderElection",
            "metadata": {"name": name, "namespace": "default", **meta},
            "spec": {"clusterRef": {"name": "demo"}, "topics": ["orders"]}}


async def post(api: Api, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async with api.session.post(api.base + URL, json=body) as r:
        return r.status, dict(await r.json())


async def merge(api: Api, name: str, doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async with api.session.patch(f"{api.base}{URL}/{name}", json=doc, headers={
            "Content-Type": "application/merge-patch+json"}) as r:
        return r.status, dict(await r.json())


async def test_annotations_over_256_kib_are_invalid_on_create_and_patch(api: Api) -> None:
    key = "kraftsman.io/last-handled-configuration"
    fits = "x" * (MAX_ANNOTATIONS - len(key))
    code, _ = await post(api, election("fits", annotations={key: fits}))
    assert code < 300
    code, status = await post(api, election("over", annotations={key: fits + "x"}))
    assert (code, status["reason"]) == (422, "Invalid")
    # as kube-apiserver v1.37 words it (tests/operator/real/test_large_resource.py)
    assert "metadata.annotations: Too long: may not be more than 262144 bytes" in \
        status["message"]
    # A patch is checked on the object it would produce: one more annotation tips it over.
    code, status = await merge(api, "fits", {"metadata": {"annotations": {"a": "b"}}})
    assert (code, status["reason"]) == (422, "Invalid")
    assert await api.get("LeaderElection", "fits") is not None


async def test_objects_over_1_5_mib_and_bodies_over_3_mib_are_too_large(api: Api) -> None:
    code, _ = await post(api, election("small"))
    assert code < 300
    big = {"status": {"results": ["p" * 1000] * (MAX_OBJECT // 1000)}}
    code, status = await merge(api, "small", big)
    assert (code, status["reason"]) == (413, "RequestEntityTooLarge")
    assert status["message"] == "etcdserver: request is too large"
    assert "results" not in ((await api.get("LeaderElection", "small")) or {}).get("status", {})
    huge = election("huge")
    huge["spec"]["topics"] = ["t" * 1000] * (MAX_REQUEST_BODY // 1000)
    code, status = await post(api, huge)
    assert (code, status["reason"]) == (413, "RequestEntityTooLarge")
    assert status["message"] == f"Request entity too large: limit is {MAX_REQUEST_BODY}"
    assert await api.get("LeaderElection", "huge") is None
