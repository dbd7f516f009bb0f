"""Operation state in the API server, and milestone Events posted exactly once.

What an operation must remember between passes (the reassignment executor's state, a one-shot
election's spec digest, a continuous election's last run) lives in the resource's own
``status.operationState``, not on the operator's disk: a pod replacement (helm upgrade, node
drain, a wiped ``emptyDir``) loses nothing, and whichever replica acts next resumes from what
the API server holds. The value is compact (zlib + base64 of JSON) so it stays small beside
the status a user reads; it is the operator's private bookkeeping, not an API.

Events of a milestone (``Started``, ``Completed``, ...) are posted exactly once across
restarts: each gets a sequence number from the state and a name derived from the resource's
uid, that number and its reason. A pass posts its Events before its status is written; if
the operator dies in between, the pass runs again from the previous state, numbers its
milestones the same way, and the API server refuses the repeated names as AlreadyExists
(409) — one Event each. An Event the API server could not take stays in the state's outbox
and is posted by the next pass.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import itertools
import logging
import re
import time
import zlib
from collections.abc import Callable, Mapping
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
        orjson.dumps(_pack(doc), option=orjson.OPT_SORT_KEYS))).decode()


_PAIR = re.compile(r"^\d+:\d+$")


def _deltas(values: list[int]) -> list[int]:
    return [b - a for a, b in itertools.pairwise([0, *sorted(values)])]


def _undeltas(deltas: list[int]) -> list[int]:
    out, total = [], 0
    for d in deltas:
        total += d
        out.append(total)
    return out


def _pack(node: Any) -> Any:
    """Long lists of ``"partition:broker"`` (throttled replicas) and of ``[topic, partition]``
    become per-broker / per-topic delta-coded partition numbers, which compress to a few
    bytes each: a state with 100,000 moves in flight stays far below the object limit."""
    if isinstance(node, Mapping):
        return {k: _pack(v) for k, v in node.items()}
    if isinstance(node, list) and len(node) > 8:
        if all(isinstance(e, str) and _PAIR.match(e) for e in node):
            by_broker: dict[str, list[int]] = {}
            for e in node:
                part, broker = e.split(":")
                by_broker.setdefault(broker, []).append(int(part))
            return {"~pb": {b: _deltas(ps) for b, ps in by_broker.items()}}
        if all(isinstance(e, list) and len(e) == 2 and isinstance(e[0], str)
               and isinstance(e[1], int) for e in node):
            by_topic: dict[str, list[int]] = {}
            for t, part in node:
                by_topic.setdefault(t, []).append(part)
            return {"~tp": {t: _deltas(ps) for t, ps in by_topic.items()}}
    if isinstance(node, list):
        return [_pack(v) for v in node]
    return node


def _unpack(node: Any) -> Any:
    if isinstance(node, dict):
        if set(node) == {"~pb"}:
            return sorted(f"{p}:{b}" for b, ds in node["~pb"].items() for p in _undeltas(ds))
        if set(node) == {"~tp"}:
            return sorted([t, p] for t, ds in node["~tp"].items() for p in _undeltas(ds))
        return {k: _unpack(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_unpack(v) for v in node]
    return node


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
        doc = _unpack(orjson.loads(zlib.decompress(base64.b64decode(text[len(PREFIX):]))))
    except (ValueError, zlib.error, TypeError, AttributeError):
        return None
    return doc if isinstance(doc, dict) else None


def saved_state(status: Any) -> dict[str, Any] | None:
    return decode((status or {}).get(STATE_FIELD))


@functools.lru_cache(maxsize=4096)
def _has_outbox(text: str) -> bool:
    return bool((decode(text) or {}).get("outbox"))


def has_outbox(status: Any) -> bool:
    """Whether the stored state still has Events to post (kopf asks on every event of every
    resource: the answer is cached per stored state)."""
    text = (status or {}).get(STATE_FIELD)
    return isinstance(text, str) and _has_outbox(text)


class Outbox:
    """The milestone Events of one resource: numbered in the state, posted by :func:`post`,
    kept in the state's outbox until the API server has them."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state
        state.setdefault("outbox", [])
        state.setdefault("eventSeq", 0)

    def add(self, reason: str, message: str, warning: bool = False) -> None:
        self.state["eventSeq"] = int(self.state["eventSeq"]) + 1
        self.state["outbox"].append([self.state["eventSeq"], reason, message[:MAX_EVENT_MESSAGE],
                                     warning])

    async def post(self, body: Mapping[str, Any], settings: kopf.OperatorSettings | None,
                   logger: logging.Logger | logging.LoggerAdapter[Any]) -> None:
        """Post the outbox; what the API server took (or had already) leaves it."""
        if not self.state["outbox"] or settings is None:
            return
        posted = await post_events(body, self.state["outbox"], settings, logger)
        self.state["outbox"] = [e for e in self.state["outbox"] if int(e[0]) not in posted]


def event_name(body: Mapping[str, Any], seq: int, reason: str) -> str:
    meta = body.get("metadata") or {}
    return f"{meta.get('name')}.{str(meta.get('uid'))[:8]}.{seq}.{reason}".lower()[:253]


def event_times(t: float) -> dict[str, str]:
    """An Event's timestamps at ``t`` (seconds since the epoch) in the forms the API server
    parses: ``firstTimestamp``/``lastTimestamp`` are ``metav1.Time`` (RFC 3339), ``eventTime``
    a ``metav1.MicroTime``, whose layout ``2006-01-02T15:04:05.000000Z07:00`` takes exactly six
    fraction digits (``datetime.isoformat`` drops them at a whole second: a 400 Bad Request)."""
    when = dt.datetime.fromtimestamp(t, dt.UTC)
    seconds = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"firstTimestamp": seconds, "lastTimestamp": seconds,
            "eventTime": when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}


async def post_events(body: Mapping[str, Any], outbox: list[Any],
                      settings: kopf.OperatorSettings,
                      logger: logging.Logger | logging.LoggerAdapter[Any],
                      clock: Callable[[], float] = time.time) -> set[int]:
    """Post the events (core/v1 Events, timestamped by ``clock``); returns the sequence
    numbers the API server now holds."""
    posted: set[int] = set()
    meta = body.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    ref = {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"),
           "name": meta.get("name"), "namespace": namespace, "uid": meta.get("uid")}
    url = f"/api/v1/namespaces/{quote(namespace)}/events"
    for seq, reason, message, warning in outbox:
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": event_name(body, int(seq), reason), "namespace": namespace},
            "type": "Warning" if warning else "Normal", "reason": reason, "message": message,
            "involvedObject": ref, "action": reason,
            "reportingComponent": settings.posting.reporting_component,
            "reportingInstance": settings.posting.reporting_instance,
            "source": {"component": settings.posting.reporting_component},
            **event_times(clock()), "count": 1}
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
