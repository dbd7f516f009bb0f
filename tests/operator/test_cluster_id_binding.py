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
    d.rt.kafka_retry = RetryPolicy(total_seconds=10.0, request_timeout_ms=5000)  # busy machines
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


async def test_a_quorum_of_another_cluster_is_not_walked_until_accepted_and_events_are_true(
        tmp_path: Path) -> None:
    """The KafkaCluster now reaches another cluster (here: its embedded state lost and the
    cluster recreated with other voters). The KafkaQuorum's status showed voters [0, 1, 2] of
    the old one; the Events compared them with the new cluster's [0, 1, 3] and named nodes
    that never joined or left. Now nothing is walked there until the user accepts the new
    cluster id, and the Events then name the real changes."""
    from dataclasses import replace

    from handler_driver import CLUSTER

    from controller_core.config import EmbeddedClusterSpec
    from controller_core.embedded.cluster import EmbeddedCluster

    d = Driver(tmp_path / "op")
    await d.ready_cluster()
    kq = d.create("KafkaQuorum", "q", {**REF, "voters": [0, 1, 2]})
    await d.call(kq, "reconcile")
    old_id = kq["status"]["clusterId"]
    assert kq["status"]["phase"] == "Ready" and old_id
    assert kq["status"]["currentVoters"] == [0, 1, 2]

    spec = EmbeddedClusterSpec.model_validate({**CLUSTER["embedded"], "controllers": [0, 1, 3]})
    other = EmbeddedCluster.open(tmp_path / "other", spec, fsync=False)
    opened = d.rt.clusters[("default", "demo")]
    d.rt.clusters[("default", "demo")] = replace(opened, cluster=other, cluster_id=None)
    new_id = other.describe_cluster().cluster_id
    assert new_id != old_id
    before = len(d.events)
    for _ in range(2):
        await d.call(kq, "reconcile")
    st = kq["status"]
    assert st["phase"] == "ClusterChanged" and st["clusterId"] == old_id
    ready = conds(kq)["Ready"]
    assert ready[:2] == ("False", "ClusterIdChanged") and old_id in ready[2] and new_id in ready[2]
    assert f"kraftsman.io/accept-cluster-id={new_id}" in ready[2]
    assert [e[:2] for e in d.events[before:]] == [("Warning", "ClusterChanged")], d.events
    assert sorted(other.describe_quorum().current_voters) == [0, 1, 3]  # nothing walked

    kq["metadata"]["annotations"] = {"kraftsman.io/accept-cluster-id": new_id}
    for _ in range(30):
        await d.call(kq, "reconcile")
        other.advance(1)
        if kq["status"]["phase"] == "Ready":
            break
    assert kq["status"]["phase"] == "Ready" and kq["status"]["clusterId"] == new_id
    assert sorted(other.describe_quorum().current_voters) == [0, 1, 2]
    voters = [e[2].split(" ")[1] + " " + e[1] for e in d.events[before:]
              if e[1] in ("VoterAdded", "VoterRemoved")]
    assert voters == ["2 VoterAdded", "3 VoterRemoved"], d.events[before:]
    other.close()
