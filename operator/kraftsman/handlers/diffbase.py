"""kopf's diff base as a digest, so a resource's size is its own, not twice its spec.

kopf keeps the last handled state of every object (its "essence": spec, labels, annotations)
to tell a real change from a status write. Its stock storages copy the whole spec, into an
annotation (a 100,000-partition PartitionReassignment became an 11 MB object; a real API server
refuses annotations over 256 KiB in total and objects over 1.5 MiB) or into the status (the
object doubles). kraftsman's handlers are timers, indices and deletion handlers: none reads
kopf's ``old``/``diff``, so "changed or not" is all kopf needs. This storage keeps a SHA-256 of
the essence (64 characters) in one annotation; when the digest matches, the current essence
stands for the old one (no diff), otherwise a marker does (a diff, as with a real change).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import kopf

KEY = "last-handled-digest"
LEGACY_KEY = "last-handled-configuration"  # what earlier versions stored (the whole essence)


def essence_digest(essence: Any) -> str:
    encoded = json.dumps(essence, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(encoded.encode()).hexdigest()


class DigestDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):  # type: ignore[misc]
    """The digest of the last handled essence in ``<prefix>/last-handled-digest``."""

    def __init__(self, *, prefix: str) -> None:
        super().__init__(prefix=prefix, key=KEY, v1=False)
        self._legacy = kopf.AnnotationsDiffBaseStorage(prefix=prefix, key=LEGACY_KEY, v1=False)

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        essence = super().build(body=body, extra_fields=extra_fields)
        self._legacy.remove_annotations(essence, set(self._legacy.make_keys(LEGACY_KEY,
                                                                            body=body)))
        self.remove_empty_stanzas(essence)
        return essence

    def fetch(self, *, body: Any) -> Any:
        annotations = body.metadata.annotations
        stored = next((annotations[k] for k in self.make_keys(self.key, body=body)
                       if k in annotations), None)
        if stored is None:
            return self._legacy.fetch(body=body)  # written by an earlier version
        current = self.build(body=body)
        if essence_digest(current) == stored.strip():
            return current
        return {"kraftsman.io/last-handled-digest": stored.strip()}  # differs: a change

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        for key in self.make_keys(self.key, body=body):
            patch.metadata.annotations[key] = essence_digest(essence)
        for key in self._legacy.make_keys(LEGACY_KEY, body=body):
            if key in body.metadata.annotations:
                patch.metadata.annotations[key] = None  # drop the old full copy
        self._store_marker(prefix=self.prefix, patch=patch, body=body)
