"""Operation state in the API server, and milestone Events posted exactly once.

What an operation must remember between passes (the reassignment executor's state, a one-shot
election's spec digest, a continuous election's last run) lives in the resource's own
``status.operationState``, not on the operator's disk: a pod replacement (helm upgrade, node
drain, a wiped ``emptyDir``) loses nothing, and whichever replica acts next resumes from what
the API server holds. The value is compact (zlib + base64 of JSON) so it stays small beside
the status a user reads; it is the operator's private bookkeeping, not an API.

Events of a milestone (``Started``, ``Completed``, ...) go through an outbox in the same
state: a pass records them in the status it writes; the next pass posts the ones the API
server has stored, each under a name derived from the resource's uid and a sequence number,
so a re-post after a crash is refused as AlreadyExists (409) — one Event, however often the
operator restarts — and then drops them from the outbox.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import zlib
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import kopf
import orjson
from kopf._cogs.clients import api as kopf_api  # kopf's authenticated request (its vault)
from kopf._cogs.clients import errors as kopf_errors

STATE_FIELD = "operationState"
PREFIX = "z1:"
MAX_EVENT_MESSAGE = 1024

Pending = list[Any]  # [seq, reason, message, warning]


def encode(doc: Mapping[str, Any]) -> str:
    return PREFIX + base64.b64encode(zlib.compress(
        orjson.dumps(doc, option=orjson.OPT_SORT_KEYS), 6)).decode()


def bump(doc: dict[str, Any], before: Mapping[str, Any]) -> str:
    """The encoded state, with a new revision (``rev``) when it differs from ``before``: the
    revision tells which of two copies (this process's, the API server's) is newer."""
    rev = int(before.get("rev", 0))
    doc["rev"] = rev
    if {k: v for k, v in doc.items() if k != "rev"} != {
            k: v for k, v in before.items() if k != "rev"}:
        doc["rev"] = rev + 1
    return encode(doc)


def decode(text: Any) -> dict[str, Any] | None:
    """The saved state, or None when there is none or it is unreadable (a hand edit)."""
    if not isinstance(text, str) or not text.startswith(PREFIX):
        return None
    try:
        doc = orjson.loads(zlib.decompress(base64.b64decode(text[len(PREFIX):])))
    except (ValueError, zlib.error):
        return None
    return doc if isinstance(doc, dict) else None


def saved_state(status: Any) -> dict[str, Any] | None:
    return decode((status or {}).get(STATE_FIELD))


class Outbox:
    """The milestone Events of one resource not yet known to be posted.

    ``add`` appends to the state's outbox (persisted with the status of this pass);
    :func:`post_stored` posts those the API server already holds."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state
        state.setdefault("outbox", [])
        state.setdefault("eventSeq", 0)

    def add(self, reason: str, message: str, warning: bool = False) -> None:
        self.state["eventSeq"] = int(self.state["eventSeq"]) + 1
        self.state["outbox"].append([self.state["eventSeq"], reason, message[:MAX_EVENT_MESSAGE],
                                     warning])

    def drop(self, seqs: set[int]) -> None:
        self.state["outbox"] = [e for e in self.state["outbox"] if int(e[0]) not in seqs]


def event_name(body: Mapping[str, Any], seq: int) -> str:
    meta = body.get("metadata") or {}
    return f"{meta.get('name')}.{str(meta.get('uid'))[:8]}.{seq}".lower()[:253]


async def post_stored(body: Mapping[str, Any], stored: Mapping[str, Any] | None,
                      settings: kopf.OperatorSettings | None,
                      logger: logging.Logger | logging.LoggerAdapter[Any]) -> set[int]:
    """Post the outbox events of the stored state; returns the sequence numbers now posted
    (including those the API server already had)."""
    posted: set[int] = set()
    if not stored or not stored.get("outbox") or settings is None:
        return posted
    meta = body.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    ref = {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"),
           "name": meta.get("name"), "namespace": namespace, "uid": meta.get("uid")}
    url = f"/api/v1/namespaces/{quote(namespace)}/events"
    for seq, reason, message, warning in stored["outbox"]:
        now = dt.datetime.now(dt.UTC).isoformat()
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": event_name(body, int(seq)), "namespace": namespace},
            "type": "Warning" if warning else "Normal", "reason": reason, "message": message,
            "involvedObject": ref, "action": reason,
            "reportingComponent": settings.posting.reporting_component,
            "reportingInstance": settings.posting.reporting_instance,
            "source": {"component": settings.posting.reporting_component},
            "firstTimestamp": now, "lastTimestamp": now, "eventTime": now, "count": 1}
        try:
            await kopf_api.post(url, payload=event, settings=settings, logger=logger,
                                backoffs=[])
        except kopf_errors.APIConflictError:
            pass  # posted before a restart: exactly one Event
        except (kopf_errors.APIError, OSError, TimeoutError) as e:
            logger.warning(f"could not post Event {reason}; retrying next pass: {e}")
            break  # keep the order: later ones wait for this one
        posted.add(int(seq))
    return posted
