"""kopf's diff base as a digest (kraftsman.handlers.diffbase): no diff while the essence is
unchanged, a diff after a spec change, and an earlier version's full copy is read then dropped."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import kopf

from kraftsman.handlers.diffbase import DigestDiffBaseStorage, essence_digest


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


def test_the_digest_is_sha256_of_the_compact_sorted_utf8_json() -> None:
    """Digests stored by one operator version are compared by the next: the encoding is
    part of the contract (compact separators, sorted keys, UTF-8 rather than \\u escapes)."""
    essence = {"spec": {"b": ["é", 1], "a": {"y": 2, "x": None}}}
    canonical = '{"spec":{"a":{"x":null,"y":2},"b":["é",1]}}'.encode()
    assert essence_digest(essence) == hashlib.sha256(canonical).hexdigest()


def test_store_writes_only_the_digest_and_kopf_s_marker() -> None:
    storage = DigestDiffBaseStorage(prefix="kraftsman.io")
    b = body({"topics": ["orders"]}, {})
    patch = kopf.Patch()
    storage.store(body=b, patch=patch, essence=storage.build(body=b))
    assert patch["metadata"]["annotations"] == {
        "kraftsman.io/last-handled-digest": essence_digest(storage.build(body=b)),
        "kraftsman.io/kopf-managed": "yes"}  # no v1 (kopf.zalando.org-style) copies


def test_a_differing_digest_reads_as_a_change_marker() -> None:
    storage = DigestDiffBaseStorage(prefix="kraftsman.io")
    b = body({"topics": ["orders"]}, {"kraftsman.io/last-handled-digest": " abc\n",
                                      "note": "kept"})
    assert storage.fetch(body=b) == {"kraftsman.io/last-handled-digest": "abc"}
    good = essence_digest(storage.build(body=b))
    same = body({"topics": ["orders"]}, {"kraftsman.io/last-handled-digest": good + "\n",
                                         "note": "kept"})
    assert storage.fetch(body=same) == storage.build(body=same)
    assert storage.build(body=same)["metadata"]["annotations"] == {"note": "kept"}


def test_the_essence_holds_the_extra_fields_kopf_asks_for() -> None:
    storage = DigestDiffBaseStorage(prefix="kraftsman.io")
    b = kopf.Body({"apiVersion": "v1", "kind": "X", "metadata": {"name": "e"},
                   "spec": {"a": 1}, "status": {"phase": "Ready", "other": 2}})
    assert storage.build(body=b, extra_fields=["status.phase"]) == {
        "spec": {"a": 1}, "status": {"phase": "Ready"}}
