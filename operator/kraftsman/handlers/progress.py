"""kopf's handler progress in annotations, without kopf's "kopf-managed" marker.

kopf writes ``<prefix>/kopf-managed: yes`` with the first progress it stores — for every new
object, since it stores (then purges) a record even for a handler that succeeds at once. The
marker is metadata, and kopf sends metadata and the status subresource as two PATCH requests:
it alone made each object's first handling two writes instead of one. It only serves kopf's
stock diff base, to leave out this prefix's annotations; kraftsman's (diffbase.py) leaves them
out by itself.
"""

from __future__ import annotations

from typing import Any

import kopf


class UnmarkedAnnotationsProgressStorage(kopf.AnnotationsProgressStorage):  # type: ignore[misc]
    def _store_marker(self, prefix: str, patch: Any, body: Any) -> None:
        return None  # see the module docstring
