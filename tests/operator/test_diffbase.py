"""kopf's diff base as a digest in the status (kraftsman.handlers.diffbase): no diff while the
essence is unchanged, a diff after a spec change, and what earlier versions stored in
annotations (a digest, or a full copy) is read then dropped."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import kopf

from kraftsman.handlers.diffbase import DigestDiffBaseStorage, essence_digest
from kraftsman.status import LeaderElectionStatus


def body(spec: dict[str, Any], annotations: dict[str, str],
         status: dict[str, Any] | None = None) -> Any:
    return kopf.Body({"apiVersion": "kraftsman.io/v1alpha1", "kind": "LeaderElection",
                      "metadata": {"name": "e", "namespace": "default",
                                   "annotations": annotations}, "spec": spec,
                      **({"status": status} if status is not None else {})})


def test_digest_round_trip_tells_a_change_from_no_change() -> None:
    storage = DigestDiffBaseStorage(prefix="kraftsman.io")
    first = body({"topics": ["orders"] * 1000}, {})
    assert storage.fetch(body=first) is None  # never handled: a creation
    patch = kopf.Patch()
    storage.store(body=first, patch=patch, essence=storage.build(body=first))
    status = dict(patch["status"])
    assert len(status["handledDigest"]) == 64  # not the spec
    same = body({"topics": ["orders"] * 1000}, {}, status)
    assert storage.fetch(body=same) == storage.build(body=same)  # no diff
    changed = body({"topics": ["orders"] * 999}, {}, status)
    assert storage.fetch(body=changed) != storage.build(body=changed)  # a diff


def test_store_writes_only_the_status_one_request_not_two() -> None:
    """kopf sends metadata and the status subresource as separate PATCH requests: the digest
    alone in the status keeps a handled change to one write (no annotation, no marker)."""
    storage = DigestDiffBaseStorage(prefix="kraftsman.io")
    b = body({"topics": ["orders"]}, {})
    patch = kopf.Patch()
    storage.store(body=b, patch=patch, essence=storage.build(body=b))
    assert dict(patch) == {"status": {"handledDigest": essence_digest(storage.build(body=b))}}


def test_an_earlier_version_s_annotation_digest_is_read_then_moved() -> None:
    storage = DigestDiffBaseStorage(prefix="kraftsman.io")
    essence = storage.build(body=body({"topics": ["orders"]}, {}))
    old = body({"topics": ["orders"]}, {"kraftsman.io/last-handled-digest":
                                        essence_digest(essence) + "\n",
                                        "kraftsman.io/kopf-managed": "yes", "note": "kept"})
    assert storage.build(body=old) == {**essence, "metadata": {"annotations": {"note": "kept"}}}
    plain = body({"topics": ["orders"]}, {"kraftsman.io/last-handled-digest":
                                          essence_digest(essence) + "\n"})
    assert storage.fetch(body=plain) == storage.build(body=plain)  # no change after upgrade
    patch = kopf.Patch()
    storage.store(body=plain, patch=patch, essence=storage.build(body=plain))
    assert patch["metadata"]["annotations"] == {"kraftsman.io/last-handled-digest": None}
    assert patch["status"]["handledDigest"] == essence_digest(essence)
    # the status wins over a stale annotation
    both = body({"topics": ["x"]}, {"kraftsman.io/last-handled-digest": essence_digest(essence)},
                {"handledDigest": essence_digest(storage.build(body=body({"topics": ["x"]}, {})))})
    assert storage.fetch(body=both) == storage.build(body=both)


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


def test_a_differing_digest_reads_as_a_change_marker() -> None:
    storage = DigestDiffBaseStorage(prefix="kraftsman.io")
    b = body({"topics": ["orders"]}, {"note": "kept"}, {"handledDigest": " abc\n"})
    assert storage.fetch(body=b) == {"kraftsman.io/last-handled-digest": "abc"}
    good = essence_digest(storage.build(body=b))
    same = body({"topics": ["orders"]}, {"note": "kept"}, {"handledDigest": good})
    assert storage.fetch(body=same) == storage.build(body=same)
    assert storage.build(body=same)["metadata"]["annotations"] == {"note": "kept"}


def test_the_essence_holds_the_extra_fields_kopf_asks_for() -> None:
    storage = DigestDiffBaseStorage(prefix="kraftsman.io")
    b = kopf.Body({"apiVersion": "v1", "kind": "X", "metadata": {"name": "e"},
                   "spec": {"a": 1}, "status": {"phase": "Ready", "other": 2}})
    assert storage.build(body=b, extra_fields=["status.phase"]) == {
        "spec": {"a": 1}, "status": {"phase": "Ready"}}


def test_the_operator_s_status_writes_never_carry_the_digest() -> None:
    """A status write merges field by field: read with the status, the digest is never
    written back (a stale copy would undo kopf's newer one)."""
    st = LeaderElectionStatus.model_validate({"handledDigest": "a" * 64, "phase": "Succeeded"})
    assert st.handled_digest == "a" * 64
    assert "handledDigest" not in st.model_dump(by_alias=True, mode="json")


def test_kopf_s_progress_goes_without_its_marker_and_stays_out_of_the_essence() -> None:
    """The marker was one metadata PATCH per new object (kopf stores, then purges, a
    progress record even for a handler that succeeds at once)."""
    from kraftsman.handlers.progress import UnmarkedAnnotationsProgressStorage

    progress = UnmarkedAnnotationsProgressStorage(prefix="kraftsman.io")
    b = body({"topics": ["orders"]}, {})
    patch = kopf.Patch()
    progress.store(key="run", record={"started": "2026-11-28T00:00:00", "retries": 1},
                   body=b, patch=patch)
    assert dict(patch["metadata"]["annotations"]) == {
        "kraftsman.io/run": '{"started":"2026-11-28T00:00:00","retries":1}'}
    storage = DigestDiffBaseStorage(prefix="kraftsman.io")
    waiting = body({"topics": ["orders"]}, dict(patch["metadata"]["annotations"]))
    assert storage.build(body=waiting) == storage.build(body=b)  # no change to kopf
