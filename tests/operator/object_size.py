"""The largest status the operator writes for a PartitionReassignment, and an object's size as
the API server counts it: for the real-server tests and bench/api_size_bench.py, which store
them on a real kube-apiserver (the server adds metadata.managedFields; a client-side
``kubectl apply`` copies the object into an annotation)."""

from __future__ import annotations

import json
from typing import Any

from kraftsman.handlers.opstate import encode
from kraftsman.status import PartitionProgress, PartitionReassignmentStatus


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
    # The operator's resume state at its largest: the most failures it records, each with
    # its message, and a full batch of moves in flight with their throttled replicas.
    moving = range(min(partitions, 100))
    st.operation_state = encode({
        "digest": "0" * 16, "rev": 10**6, "eventSeq": 10**6, "outbox": [], "cluster": "demo",
        "inFlight": [["orders", p] for p in moving],
        "executor": {"failed": {f"orders-{p}": f"orders-{p}: the move ended outside "
                                f"kraftsman with replicas [0, 1, {p % 6}], not [3, 4, 5]"
                                for p in range(min(partitions, 1000))},
                     "placed_replicas": {"orders": {
                         "leader.replication.throttled.replicas":
                             sorted(f"{p}:{b}" for p in moving for b in (0, 1, 2)),
                         "follower.replication.throttled.replicas":
                             sorted(f"{p}:{b}" for p in moving for b in (3, 4, 5))}}}})
    st.last_reconcile_time = "2026-01-01T00:00:00Z"
    # kopf's diff base (handlers/diffbase.py), which the operator's own writes leave out
    return {**st.model_dump(by_alias=True, mode="json"), "handledDigest": "0" * 64}


def object_bytes(obj: dict[str, Any]) -> int:
    return len(json.dumps(obj, separators=(",", ":")).encode())
