"""Deleting a KafkaCluster on the real API server, as a user does: refused while an active
operation uses it (the condition names them), and gone once they are; operations that are
finished or invalid do not hold it."""

from __future__ import annotations

import time
from typing import Any

from harness import Api, cond_is, condition
from real_install import chart
from test_operator_kmock import CLUSTER, MOVES, REF

# Embedded clusters at 1/100 of wall time: a reassignment stays in flight for the test.
SLOW = ["--tick=0.2", "--time-scale=0.01"]


async def test_cluster_in_use_waits_for_its_reassignment_then_goes(api: Api,
                                                                   deployed: Any) -> None:
    op = await deployed(chart(extra_args=SLOW))
    await api.create("KafkaCluster", "demo", CLUSTER)
    await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"))
    await api.create("PartitionReassignment", "move", {**REF, "partitions": MOVES})
    await api.wait("PartitionReassignment", "move",
                   lambda o: (o.get("status") or {}).get("phase") == "Moving")
    await api.delete("KafkaCluster", "demo")
    kc = await api.wait("KafkaCluster", "demo", cond_is("Ready", "False", "InUse"))
    assert "PartitionReassignment/move" in condition(kc, "Ready")["message"]
    began = time.monotonic()
    await api.delete("PartitionReassignment", "move")
    await api.wait_gone("PartitionReassignment", "move")
    rolled_back = time.monotonic() - began
    await api.wait_gone("KafkaCluster", "demo")
    events = await api.wait_events("move", "Cancelled")
    assert any("rolled back" in e["message"] for e in events), events
    await api.wait_events("demo", "ClusterDeleted")
    assert rolled_back < 30, f"the rollback took {rolled_back:.1f} s"
    assert op.alive()
    # At the default level: no line per object per timer tick, and waiting is no ERROR.
    log = op.log()
    for name in ("demo", "move"):  # once per object, not once per tick
        assert log.count(f"{api.namespace}/{name}] Timer 'reconcile' succeeded") <= 1, name
    assert "failed temporarily" not in log, [
        line for line in log.splitlines() if "failed temporarily" in line][:5]
    assert log.count("Handler 'teardown' waits: still used by PartitionReassignment/move") == 1


async def test_invalid_operations_do_not_hold_a_cluster_being_deleted(api: Api,
                                                                      deployed: Any) -> None:
    """docs/operator.md: invalid operations do not hold a KafkaCluster. A quorum naming an
    unknown node and a continuous election listing a partition twice (the CRD's atomic list
    admits it; the operator refuses it) held it for good, with ERROR lines every 1-2 s."""
    op = await deployed(chart())
    await api.create("KafkaCluster", "demo", CLUSTER)
    await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"))
    await api.create("KafkaQuorum", "unknown", {**REF, "voters": [0, 1, 42]})
    twice = [{"topic": "orders", "partition": 0}] * 2
    await api.create("LeaderElection", "twice", {**REF, "mode": "Continuous",
                                                 "partitions": twice})
    for kind, name in (("KafkaQuorum", "unknown"), ("LeaderElection", "twice")):
        await api.wait(kind, name, lambda o: (o.get("status") or {}).get("phase") == "Invalid")
    began = time.monotonic()
    await api.delete("KafkaCluster", "demo")
    await api.wait_gone("KafkaCluster", "demo", timeout=30)
    assert time.monotonic() - began < 15
    await api.wait_events("demo", "ClusterDeleted")
    assert "still used by" not in op.log()
    assert op.alive()
