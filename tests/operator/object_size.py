"""What a PartitionReassignment weighs in the API server: for tests and bench/api_size_bench.py.

The stored object is the spec a user applied, plus what the API server and the operator add:
``metadata.managedFields`` (one entry per manager, listing every field it set: for
``spec.partitions``, a list-type map keyed by topic and partition, one key per entry), for a
client-side ``kubectl apply`` the whole object again in the
``kubectl.kubernetes.io/last-applied-configuration`` annotation, the operator's finalizer, kopf's
annotations and the status (capped at 100 partition rows, failures first).
"""

from __future__ import annotations

import json
from typing import Any

from kraftsman.status import PartitionProgress, PartitionReassignmentStatus

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
LIST_MAP_KEYS = {"partitions": ("partition", "topic")}  # the CRD's x-kubernetes-list-map-keys
LIST_SETS = {"replicas"}


def fields_v1(value: Any, name: str = "") -> Any:
    """The FieldsV1 set the API server records for a manager that set ``value``."""
    if isinstance(value, dict):
        return {f"f:{k}": fields_v1(v, k) for k, v in value.items()}
    if isinstance(value, list) and name in LIST_MAP_KEYS:
        keys = LIST_MAP_KEYS[name]
        return {"k:" + json.dumps({k: item[k] for k in keys}, separators=(",", ":")):
                {".": {}, **fields_v1(item)} for item in value}
    if isinstance(value, list) and name in LIST_SETS:
        return {"v:" + json.dumps(v): {} for v in value}
    return {}


def reassignment(name: str, partitions: int, *, topic: str = "orders", brokers: int = 6,
                 namespace: str = "default", dry_run: bool = True,
                 client_side_apply: bool = False) -> dict[str, Any]:
    """A PartitionReassignment of ``partitions`` entries (RF 3) as a user creates it, with the
    managedFields the API server records for kubectl (and, for a client-side apply, the
    last-applied annotation)."""
    spec = {"clusterRef": {"name": "demo"}, "dryRun": dry_run,
            "partitions": [{"topic": topic, "partition": p,
                            "replicas": [(p + 3 + i) % brokers for i in range(3)]}
                           for p in range(partitions)]}
    obj: dict[str, Any] = {"apiVersion": "kraftsman.io/v1alpha1",
                           "kind": "PartitionReassignment",
                           "metadata": {"name": name, "namespace": namespace}, "spec": spec}
    return as_created(obj, client_side_apply=client_side_apply)


def as_created(obj: dict[str, Any], *, client_side_apply: bool = False) -> dict[str, Any]:
    """``obj`` as the API server stores it when kubectl creates it: with the managedFields it
    records and, for a client-side apply, the last-applied annotation."""
    obj = json.loads(json.dumps(obj))
    if client_side_apply:
        obj["metadata"].setdefault("annotations", {})[LAST_APPLIED] = json.dumps(
            obj, separators=(",", ":")) + "\n"
    fields = fields_v1({k: v for k, v in obj.items() if k in ("metadata", "spec")})
    fields["f:metadata"].pop("f:name", None)
    fields["f:metadata"].pop("f:namespace", None)
    if not fields["f:metadata"]:
        del fields["f:metadata"]
    obj["metadata"]["managedFields"] = [{
        "manager": "kubectl-client-side-apply" if client_side_apply else "kubectl-create",
        "operation": "Update", "apiVersion": "kraftsman.io/v1alpha1",
        "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields}]
    return obj


def worst_status(partitions: int) -> dict[str, Any]:
    """The largest status the operator writes for this many partitions: every row failed with
    a message, so the 100 kept rows are the longest they get."""
    st = PartitionReassignmentStatus()
    st.set_progress(PartitionProgress(
        topic="orders", partition=p, state="Failed", current_replicas=[0, 1, 2],
        target_replicas=[3, 4, 5], adding_replicas=[3, 4, 5], removing_replicas=[0, 1, 2],
        bytes_to_move=10**12, bytes_moved=10**11, error="REASSIGNMENT_FAILED",
        message=f"orders-{p}: the reassignment did not complete: replica 3 fell out of the "
                "ISR and never caught up")
        for p in range(partitions))
    return dict(st.model_dump(by_alias=True, mode="json"))


def as_stored(obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """The object once the operator has handled it: its finalizer, kopf's annotations (as a
    real run leaves them), the status, and the status writer's managedFields entry."""
    stored = json.loads(json.dumps(obj))
    meta = stored["metadata"]
    meta["finalizers"] = ["kraftsman.io/finalizer"]
    meta.setdefault("annotations", {}).update({
        "kraftsman.io/last-handled-digest": "0" * 64, "kraftsman.io/kopf-managed": "yes"})
    meta["managedFields"].append({
        "manager": "kopf", "operation": "Update", "apiVersion": "kraftsman.io/v1alpha1",
        "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1", "subresource": "status",
        "fieldsV1": fields_v1({"status": status})})
    stored["status"] = status
    return stored


def object_bytes(obj: dict[str, Any]) -> int:
    return len(json.dumps(obj, separators=(",", ":")).encode())
