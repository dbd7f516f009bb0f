"""Small helpers every handler shares: parsing a spec, publishing status, events."""

from __future__ import annotations

import time
from typing import Any

import kopf
from pydantic import ValidationError

from kraftsman.handlers.opstate import has_outbox
from kraftsman.metrics import count_error
from kraftsman.resources import GROUP, KINDS, VERSION, format_validation_error
from kraftsman.status import (
    DEGRADED,
    HEARTBEAT_SECONDS,
    BaseStatus,
    ConditionStatus,
    now_rfc3339,
    parse_rfc3339,
)

PLURALS = {
    "KafkaCluster": "kafkaclusters",
    "KafkaQuorum": "kafkaquorums",
    "PartitionReassignment": "partitionreassignments",
    "LeaderElection": "leaderelections",
    "KafkaRebalance": "kafkarebalances",
}
FINALIZER = f"{GROUP}/finalizer"


def resource(kind: str) -> dict[str, str]:
    """The kopf resource selector of a kind."""
    return {"group": GROUP, "version": VERSION, "plural": PLURALS[kind]}


def parse_spec(kind: str, spec: Any) -> tuple[Any | None, list[str]]:
    """The spec model, or the problems (each naming the field and the fix)."""
    try:
        return KINDS[kind].model_validate(dict(spec or {})), []
    except ValidationError as e:
        return None, [p.removeprefix(f"{kind}: ")
                      for p in format_validation_error(kind, e, KINDS[kind])]


def generation(meta: Any) -> int:
    return int(meta.get("generation") or 1)


def set_cond(st: BaseStatus, type_: str, status: ConditionStatus, reason: str, message: str,
             gen: int) -> None:
    st.with_condition(type_, status, reason, message, generation=gen, now=now_rfc3339())


def degrade(st: BaseStatus, reason: str, message: str, gen: int) -> None:
    set_cond(st, DEGRADED, "True", reason, message, gen)


def healthy(st: BaseStatus, gen: int) -> None:
    set_cond(st, DEGRADED, "False", "AsExpected", "", gen)


def publish(patch: Any, old: Any, st: BaseStatus, gen: int, *, early: bool = False) -> bool:
    """Patch the status when it changed, or when `lastReconcileTime` is older than the
    heartbeat (so a stalled operator shows without a write on every pass); fields now unset
    are removed (null in the patch).

    Every pass ends here, so a pass that ends Degraded is counted here, whichever way its
    kind degrades (the KafkaRebalance flow sets its own conditions); ``early`` is a write
    ahead of the pass's last, which counts it."""
    degraded = st.condition(DEGRADED)
    if not early and degraded is not None and degraded.status == "True":
        count_error(type(st).__name__.removesuffix("Status"), degraded.reason)
    st.observed_generation = gen
    old_wire = dict(old or {})
    st.last_reconcile_time = old_wire.get("lastReconcileTime")
    wire = {k: _in_list_items_pruned(v) for k, v in
            st.model_dump(by_alias=True, mode="json").items()}
    unchanged = all(_stored(old_wire.get(k)) == _stored(v) for k, v in wire.items())
    last = parse_rfc3339(st.last_reconcile_time)
    if unchanged and last is not None and time.time() - last < HEARTBEAT_SECONDS:
        return False
    st.last_reconcile_time = now_rfc3339()
    wire["lastReconcileTime"] = st.last_reconcile_time
    if unchanged:
        patch.status["lastReconcileTime"] = st.last_reconcile_time
        return False
    for key, value in wire.items():
        patch.status[key] = value
    return True


def _stored(value: Any) -> Any:
    """What the API server keeps of a patched value: a null field is removed (merge patch),
    or pruned (a list item's field: the schema's fields are not nullable)."""
    if isinstance(value, dict):
        return {k: _stored(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_stored(v) for v in value]
    return value


def _in_list_items_pruned(value: Any) -> Any:
    """A status value as patched: a list is replaced whole, so its items carry no nulls (the
    server would prune them, and kopf would warn on every write that the object differs
    from the patch); an object's null stays, to remove the field."""
    if isinstance(value, dict):
        return {k: _in_list_items_pruned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_stored(v) for v in value]
    return value


def emit(body: Any, reason: str, message: str, *, warning: bool = False) -> None:
    """A Kubernetes Event for a milestone (kopf posts it in the background)."""
    if warning:
        kopf.warn(body, reason=reason, message=message)
    else:
        kopf.info(body, reason=reason, message=message)


def finalized(meta: Any) -> bool:
    """Whether kopf's finalizer is stored. kopf spawns timers at once, while it is still
    adding its finalizer (its own JSON patch, guarded by the resourceVersion), so every timer
    pass waits for it: a status write racing that patch makes it fail (422) and be made again
    (on a real API server a write of a large PartitionReassignment costs seconds), and an
    operation started before its finalizer could be deleted with nothing rolled back."""
    return FINALIZER in (meta.get("finalizers") or ())


def settled(*phases: str, continuous_ok: bool = False) -> Any:
    """A kopf `when=` filter: false once the resource sits in one of `phases` for its current
    generation and its milestone Events are posted. kopf stops the timer of a resource that
    stops matching and starts it again on a spec change (new generation), so finished
    operations cost nothing per tick."""
    done = set(phases)

    def active(spec: Any, status: Any, meta: Any, **_: Any) -> bool:
        if continuous_ok and (spec or {}).get("mode") == "Continuous":
            return True
        st = status or {}
        if st.get("phase") in done and st.get("observedGeneration") == generation(meta):
            return has_outbox(st)  # Events still to post
        return True

    return active
