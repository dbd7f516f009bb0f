"""Operations are bound to the cluster id they started on (issue 21): a KafkaCluster whose
``bootstrapServers`` is repointed mid-move made the operator re-issue the moves on the new
cluster, left the old one's moves and throttles for good, and changed status.clusterId with
no warning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from handler_driver import REF, Driver, outbox

from controller_core.backends import RetryPolicy
from tests.helpers import cluster as embedded
from tests.serve.harness import served

MOVE = [{"topic": "orders", "partition": 0, "replicas": [3, 4, 5]}]


def conds(obj: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"])
            for c in obj["status"]["conditions"]}


async def test_a_repointed_cluster_gets_no_moves_and_the_run_waits_for_a_decision(
        tmp_path: Path) -> None:
    d = Driver(tmp_path / "op")
    d.rt.kafka_retry = RetryPolicy(total_seconds=1.0, request_timeout_ms=1000)
    with served(embedded(tmp_path / "a"), time_scale=50) as a, \
            served(embedded(tmp_path / "b"), time_scale=50) as b:
        a_id = a.call(lambda: a.cluster.describe_cluster().cluster_id)
        b_id = b.call(lambda: b.cluster.describe_cluster().cluster_id)
        kc = d.create("KafkaCluster", "demo", {"bootstrapServers": a.bootstrap})
        await d.call(kc, "reconcile")
        assert kc["status"]["clusterId"] == a_id
        pr = d.create("PartitionReassignment", "move", {
            **REF, "partitions": MOVE, "throttleBytesPerSecond": 1000})  # 10 MB: hours
        await d.call(pr, "reconcile")
        assert pr["status"]["phase"] == "Moving"
        assert set(a.call(lambda: a.cluster.list_partition_reassignments())) != set()

        d.set_spec(kc, {"bootstrapServers": b.bootstrap})
        await d.call(kc, "reconcile")
        assert kc["status"]["clusterId"] == b_id
        warned = [e for e in d.events if e[1] == "ClusterIdChanged"]
        assert warned and warned[0][0] == "Warning" and a_id in warned[0][2], d.events

        await d.call(pr, "reconcile")
        await d.call(pr, "reconcile")
        assert pr["status"]["phase"] == "ClusterChanged"
        degraded = conds(pr)["Degraded"]
        assert degraded[:2] == ("True", "ClusterIdChanged")
        assert a_id in degraded[2] and b_id in degraded[2] and "1 move in flight" in degraded[2]
        assert [r for r, _, w in outbox(pr) if r == "ClusterChanged"] == ["ClusterChanged"]
        # nothing was re-issued on the new cluster; the old one keeps its move
        assert b.call(lambda: b.cluster.list_partition_reassignments()) == {}
        assert set(a.call(lambda: a.cluster.list_partition_reassignments())) != set()

        await d.call(pr, "rollback")  # deleted: nothing to roll back on the new cluster
        assert d.events[-1][:2] == ("Warning", "RollbackSkipped")
        assert a_id in d.events[-1][2] and b_id in d.events[-1][2]
        assert b.call(lambda: b.cluster.list_partition_reassignments()) == {}
        d.delete(pr)
        await d.call(kc, "teardown")
