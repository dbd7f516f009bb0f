"""Timers write nothing until kopf's finalizer is stored (handlers/common.py ``finalized``).

kopf spawns a new object's timers while its finalizer's JSON patch (which tests the
resourceVersion) is on its way: a status write landing first made that patch fail (422) and be
sent again, each attempt a full write of the object — seconds for a large PartitionReassignment
on a real API server, and a deployed operator did not plan a large one within 120 s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from handler_driver import CLUSTER, REF, Driver

from kraftsman.handlers.common import FINALIZER

MOVES = [{"topic": "orders", "partition": p, "replicas": [3, 4, 5]} for p in range(6)]


@pytest.mark.parametrize("kind,spec", [
    ("KafkaCluster", CLUSTER),
    ("PartitionReassignment", {**REF, "partitions": MOVES}),
    ("KafkaQuorum", {**REF, "voters": [0, 1, 2]}),
    ("LeaderElection", {**REF, "mode": "Continuous", "allTopicPartitions": True}),
    ("KafkaRebalance", REF),
])
async def test_a_timer_writes_nothing_before_kopfs_finalizer_is_stored(
        tmp_path: Path, kind: str, spec: dict[str, Any]) -> None:
    d = Driver(tmp_path)
    if kind != "KafkaCluster":
        await d.ready_cluster()
    obj = d.create(kind, "x", spec)
    obj["metadata"]["finalizers"] = []
    await d.call(obj, "reconcile")
    assert obj["status"] == {} and d.status_patch == {}
    obj["metadata"]["finalizers"] = [FINALIZER]
    await d.call(obj, "reconcile")
    assert obj["status"].get("conditions") or obj["status"].get("phase"), obj["status"]
