"""A pod replacement mid-move: the operator as its Deployment runs it, killed with SIGKILL and
its state volume wiped, resumes from what the API server holds.

The cluster is real as far as the operator can tell: an embedded cluster served over the
Kafka protocol by `cluster serve`'s server (tests/serve/harness.py, its clock at 50x wall
time), reached only through `bootstrapServers`. The operator is the chart's Deployment pod
started by tests/operator/deployed.py (its command and args, a token of its ServiceAccount),
against the real kube-apiserver (conftest.py).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import Api, cond_is

from controller_core.metadata.controller import THROTTLE_RATE_KEYS
from controller_core.orchestration.throttles import FOLLOWER_REPLICAS, LEADER_REPLICAS
from tests.helpers import cluster
from tests.serve.harness import ServedCluster, served

PARTITIONS = (0, 1, 2)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServedCluster]:
    """Six brokers, topic `orders` (6 partitions of 10 MB, RF 3) at 50x wall time."""
    with served(cluster(tmp_path / "served"), time_scale=50) as s:
        yield s


def throttles(server: ServedCluster) -> dict[str, str]:
    """Every replication throttle the cluster holds: broker rates, topic replica lists."""
    def read() -> dict[str, str]:
        c = server.cluster
        brokers = c.describe_configs([("BROKER", str(b)) for b in range(6)])
        topic = c.describe_configs([("TOPIC", "orders")])[("TOPIC", "orders")]
        out = {f"broker {r[1]} {k}": v for r, cfg in brokers.items() for k, v in cfg.items()
               if k in THROTTLE_RATE_KEYS and v}
        out.update({k: topic[k] for k in (LEADER_REPLICAS, FOLLOWER_REPLICAS)
                    if topic.get(k)})
        return out

    return server.call(read)


async def test_kill_9_mid_move_with_the_state_volume_wiped_finishes_once(
        api: Api, deployed: Any, server: ServedCluster) -> None:
    first = await deployed()
    await api.create("KafkaCluster", "real", {"bootstrapServers": server.bootstrap})
    await api.wait("KafkaCluster", "real", cond_is("Ready", "True"), timeout=60)
    # 10 MB per adding replica at 20 kB/s: ~500 simulated s, ~10 s of wall time per move.
    await api.create("PartitionReassignment", "move", {
        "clusterRef": {"name": "real"}, "maxConcurrentMoves": 3,
        "throttleBytesPerSecond": 20_000,
        "partitions": [{"topic": "orders", "partition": p, "replicas": [3, 4, 5]}
                       for p in PARTITIONS]})
    mid = await api.wait("PartitionReassignment", "move", lambda o: (
        (o.get("status") or {}).get("moving", 0) == 3 and o["status"].get("operationState")),
        timeout=60)
    placed = throttles(server)
    assert any("follower.replication.throttled.rate" in k for k in placed), placed
    assert FOLLOWER_REPLICAS in placed

    first.kill()  # SIGKILL: no goodbye, no cleanup
    assert not first.alive()
    shutil.rmtree(first.state_dir, ignore_errors=True)  # the pod's emptyDir goes with it
    assert mid["status"]["phase"] == "Moving"

    await deployed()  # the replacement pod: a fresh, empty state volume
    done = await api.wait("PartitionReassignment", "move", cond_is("Succeeded", "True"),
                          timeout=120)
    assert done["status"]["done"] == 3 and done["status"]["counts"]["failed"] == 0
    events = await api.wait_events("move", "Started", "Completed")
    reasons = [e["reason"] for e in events]
    assert reasons.count("Started") == 1 and reasons.count("Completed") == 1, reasons
    assert throttles(server) == {}  # every throttle the first pod placed is gone
    parts = server.call(lambda: server.cluster.describe_partitions(topics=["orders"]))
    assert [parts[p].replicas for p in PARTITIONS] == [(3, 4, 5)] * 3
    assert server.call(lambda: server.cluster.list_partition_reassignments()) == {}


async def test_deleted_mid_move_rolls_back_through_its_finalizer(
        api: Api, deployed: Any, server: ServedCluster) -> None:
    """Deleting a PartitionReassignment mid-move: the API server keeps it (the operator's
    finalizer) until the operator has cancelled the moves in flight on the cluster and
    removed its throttles; then it goes, with a Cancelled Event."""
    await deployed()
    await api.create("KafkaCluster", "real", {"bootstrapServers": server.bootstrap})
    await api.wait("KafkaCluster", "real", cond_is("Ready", "True"), timeout=60)
    before = server.call(lambda: server.cluster.describe_partitions(topics=["orders"]))
    await api.create("PartitionReassignment", "move", {
        "clusterRef": {"name": "real"}, "maxConcurrentMoves": 3,
        "throttleBytesPerSecond": 20_000,
        "partitions": [{"topic": "orders", "partition": p, "replicas": [3, 4, 5]}
                       for p in PARTITIONS]})
    await api.wait("PartitionReassignment", "move", lambda o: (
        o.get("status") or {}).get("moving", 0) == 3, timeout=60)
    assert server.call(lambda: server.cluster.list_partition_reassignments())
    await api.delete("PartitionReassignment", "move")
    await api.wait_gone("PartitionReassignment", "move", timeout=60)
    events = await api.wait_events("move", "Cancelled")
    assert "RollbackSkipped" not in {e["reason"] for e in events}
    assert server.call(lambda: server.cluster.list_partition_reassignments()) == {}
    after = server.call(lambda: server.cluster.describe_partitions(topics=["orders"]))
    # Kafka 4.4 lists a move's removing replicas in ascending order (a TreeSet in
    # PartitionReassignmentReplicas) and a cancel keeps them so: the original replicas come
    # back, sorted, when the target shares none of them
    assert [after[p].replicas for p in PARTITIONS] == [tuple(sorted(before[p].replicas))
                                                       for p in PARTITIONS]
    assert throttles(server) == {}
