"""kopf's diff base as a digest in the status, so a resource's size is its own and a handled
change costs one write.

kopf keeps the last handled state of every object (its "essence": spec, labels, annotations)
to tell a real change from a status write. Its stock storages copy the whole spec, into an
annotation (a 100,000-partition PartitionReassignment became an 11 MB object; a real API server
refuses annotations over 256 KiB in total and objects over 1.5 MiB) or into the status (the
object doubles). kraftsman's handlers are timers, indices and deletion handlers: none reads
kopf's ``old``/``diff``, so "changed or not" is all kopf needs. This storage keeps a SHA-256 of
the essence (64 characters) in ``status.handledDigest``; when the digest matches, the current
essence stands for the old one (no diff), otherwise a marker does (a diff, as with a real
change).

In the status, not in an annotation: kopf sends metadata and the status subresource as two
PATCH requests, so a digest in an annotation made every handled creation or change two writes
(and two watch events back to every operator replica) where the status alone is one — a
LeaderElection was four writes to the API server (create, annotation, status, Event), now
three. The operator's own status writes merge field by field and never carry the digest
(``BaseStatus.handled_digest`` is read, not written), so they cannot drop it. Objects written by
earlier versions keep their digest (or full copy) in an annotation: it is read, and removed at
the next store.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import kopf

FIELD = "handledDigest"  # in the status
KEY = "last-handled-digest"  # the annotation of earlier versions
LEGACY_KEY = "last-handled-configuration"  # what still earlier versions stored (the whole essence)


def essence_digest(essence: Any) -> str:
    encoded = json.dumps(essence, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(encoded.encode()).hexdigest()


class DigestDiffBaseStorage(kopf.DiffBaseStorage):  # type: ignore[misc]
    """The digest of the last handled essence in ``status.handledDigest``."""

    def __init__(self, *, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix
        self.key = KEY
        # read (then removed) where an earlier version wrote them
        self._annotation = kopf.AnnotationsDiffBaseStorage(prefix=prefix, key=KEY, v1=False)
        self._legacy = kopf.AnnotationsDiffBaseStorage(prefix=prefix, key=LEGACY_KEY, v1=False)

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        """kopf's essence without this operator's own annotations (``<prefix>/...``: progress,
        the digests of earlier versions), as kopf leaves them out once its marker annotation
        names the prefix — which objects created by this version never get (one metadata
        write less), so the essence is the same either way."""
        essence = super().build(body=body, extra_fields=extra_fields)
        annotations = essence.get("metadata", {}).get("annotations", {})
        for key in [k for k in annotations if k.startswith(f"{self.prefix}/")]:
            del annotations[key]
        self.remove_empty_stanzas(essence)
        return essence

    def fetch(self, *, body: Any) -> Any:
        stored = (body.get("status") or {}).get(FIELD)
        if not isinstance(stored, str):
            annotations = body.metadata.annotations
            stored = next((annotations[k] for k in self._annotation.make_keys(KEY, body=body)
                           if k in annotations), None)
            if stored is None:
                return self._legacy.fetch(body=body)  # written by an earlier version
        current = self.build(body=body)
        if essence_digest(current) == stored.strip():
            return current
        return {f"{self.prefix}/{KEY}": stored.strip()}  # differs: a change

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        patch.status[FIELD] = essence_digest(essence)
        annotations = body.metadata.annotations
        for key in (*self._annotation.make_keys(KEY, body=body),
                    *self._legacy.make_keys(LEGACY_KEY, body=body)):
            if key in annotations:
                patch.metadata.annotations[key] = None  # an earlier version's: now in the status
