"""kopf's diff base as a digest (kraftsman.handlers.diffbase): no diff while the essence is
unchanged, a diff after a spec change, and an earlier version's full copy is read then dropped."""

from __future__ import annotations

import json
from typing import Any

import kopf

from kraftsman.handlers.diffbase import DigestDiffBaseStorage


def body(spec: dict[str, Any], annotations: dict[str, str]) -> Any:
    return kopf.Body({"apiVersion": "kraftsman.io/v1alpha1", "kind": "LeaderElection",
                      "metadata": {"name": "e", "namespace": "default",
                                   "annotations": annotations}, "spec": spec})


def test_digest_round_trip_tells_a_change_from_no_change() -> None:
    storage = DigestDiffBaseStorage(prefix="kraftsman.io")
    first = body({"topics": ["orders"] * 1000}, {})
    assert storage.fetch(body=first) is None  # never handled: a creation
    patch = kopf.Patch()
    storage.store(body=first, patch=patch, essence=storage.build(body=first))
    annotations = dict(patch["metadata"]["annotations"])
    assert len(annotations["kraftsman.io/last-handled-digest"]) == 64  # not the spec
    same = body({"topics": ["orders"] * 1000}, annotations)
    assert storage.fetch(body=same) == storage.build(body=same)  # no diff
    changed = body({"topics": ["orders"] * 999}, annotations)
    assert storage.fetch(body=changed) != storage.build(body=changed)  # a diff


def test_a_legacy_full_copy_is_read_then_dropped() -> None:
    storage = DigestDiffBaseStorage(prefix="kraftsman.io")
    legacy = {"kraftsman.io/last-handled-configuration":
              json.dumps({"spec": {"topics": ["orders"]}}) + "\n"}
    old = body({"topics": ["orders"]}, legacy)
    assert storage.fetch(body=old) == {"spec": {"topics": ["orders"]}}
    assert storage.build(body=old) == {"spec": {"topics": ["orders"]}}  # not in the essence
    patch = kopf.Patch()
    storage.store(body=old, patch=patch, essence=storage.build(body=old))
    assert patch["metadata"]["annotations"]["kraftsman.io/last-handled-configuration"] is None
