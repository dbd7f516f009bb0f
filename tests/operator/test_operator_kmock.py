"""The operator end to end: real kopf, kmock over HTTP, embedded clusters in-process."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from harness import Api, cond_is, condition

CLUSTER = {"embedded": {
    "brokers": [{"id": i, "rack": "abc"[i % 3]} for i in range(6)],
    "controllers": [0, 1, 2],
    "topics": [{"name": "orders", "partitions": 6, "replicationFactor": 3,
                "assignment": [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2], [1, 2, 0],
                               [2, 0, 1]],
                "sizeBytesPerPartition": 20_000_000}],
    "replicationBytesPerSecond": 10_000_000,
}}
REF = {"clusterRef": {"name": "demo"}}
MOVES = [{"topic": "orders", "partition": p, "replicas": [3, 4, 5]} for p in range(6)]


async def ready_cluster(api: Api, name: str = "demo") -> dict[str, Any]:
    await api.create("KafkaCluster", name, CLUSTER)
    return await api.wait("KafkaCluster", name, cond_is("Ready", "True"))


async def test_cluster_becomes_ready_with_figures(api: Api, start_operator: Any) -> None:
    start_operator()
    kc = await ready_cluster(api)
    st = kc["status"]
    assert (st["backend"], st["brokers"], st["topics"], st["partitions"]) == (
        "embedded", 6, 1, 6)
    assert st["phase"] == "Ready" and st["observedGeneration"] == 1
    assert {c["type"] for c in st["conditions"]} >= {"Ready", "Progressing", "Degraded"}
    assert "kopf" not in st  # kopf's progress, when it keeps one, is in annotations
    # its diff base: a digest in the status, no annotation (one write per handled change)
    kc = await api.wait("KafkaCluster", "demo", lambda o: len(
        (o.get("status") or {}).get("handledDigest") or "") == 64)
    assert "kopf" not in kc["status"]
    assert not any(k.startswith("kraftsman.io/") for k in kc["metadata"].get("annotations", {}))
    assert "kraftsman.io/finalizer" in kc["metadata"]["finalizers"]


async def test_reassignment_completes_and_elects(api: Api, start_operator: Any) -> None:
    start_operator()
    await ready_cluster(api)
    await api.create("PartitionReassignment", "move", {
        **REF, "partitions": MOVES, "maxConcurrentMoves": 2, "electPreferredLeaders": True,
        "throttleBytesPerSecond": 50_000_000})
    seen_moving = await api.wait("PartitionReassignment", "move",
                                 lambda o: (o.get("status") or {}).get("phase") == "Moving")
    assert seen_moving["status"]["moving"] <= 2
    done = await api.wait("PartitionReassignment", "move", cond_is("Succeeded", "True"),
                          timeout=60)
    st = done["status"]
    assert (st["phase"], st["done"], st["counts"]["total"], st["percent"]) == (
        "Completed", 6, 6, 100.0)
    assert st["bytesToMove"] == st["bytesMoved"] > 0
    assert "preferred leaders elected" in condition(done, "Succeeded")["message"]
    assert condition(done, "Progressing")["status"] == "False"


async def test_dry_run_moves_nothing(api: Api, start_operator: Any) -> None:
    start_operator()
    await ready_cluster(api)
    await api.create("PartitionReassignment", "review", {**REF, "partitions": MOVES,
                                                         "dryRun": True,
                                                         "throttleBytesPerSecond": 10_000_000})
    obj = await api.wait("PartitionReassignment", "review", cond_is("Succeeded", "True"))
    plan = obj["status"]["plan"]
    assert plan["replicaMovements"] == 18 and plan["bytesToMove"] > 0
    assert plan["estimatedSeconds"] > 0 and plan["leaderMovements"] == 6
    kc = await api.get("KafkaCluster", "demo")
    assert kc is not None and kc["status"]["underReplicatedPartitions"] == 0


async def test_cancel_by_spec_rolls_back(api: Api, start_operator: Any) -> None:
    start_operator(time_scale=1.0)  # slow: the moves are still in flight when cancelled
    await ready_cluster(api)
    await api.create("PartitionReassignment", "move", {**REF, "partitions": MOVES,
                                                       "maxConcurrentMoves": 6})
    await api.wait("PartitionReassignment", "move",
                   lambda o: (o.get("status") or {}).get("moving", 0) > 0)
    await api.set_spec("PartitionReassignment", "move", {"cancel": True})
    obj = await api.wait("PartitionReassignment", "move", cond_is("Succeeded", "False",
                                                                  "Cancelled"))
    assert obj["status"]["phase"] == "Cancelled" and obj["status"]["counts"]["cancelled"] == 6
    assert obj["status"]["done"] == 0


async def test_delete_in_flight_rolls_back_then_releases(api: Api, start_operator: Any) -> None:
    op = start_operator(time_scale=1.0)
    await ready_cluster(api)
    await api.create("PartitionReassignment", "move", {**REF, "partitions": MOVES,
                                                       "maxConcurrentMoves": 6})
    obj = await api.wait("PartitionReassignment", "move",
                         lambda o: (o.get("status") or {}).get("moving", 0) > 0)
    assert "kraftsman.io/finalizer" in obj["metadata"]["finalizers"]
    await api.delete("PartitionReassignment", "move")
    await api.wait_gone("PartitionReassignment", "move")
    opened = op.rt.clusters[("default", "demo")]
    reassigning = await asyncio.to_thread(
        lambda: opened.cluster.list_partition_reassignments())
    assert reassigning == {}  # rolled back: nothing left in flight
    assert not op.rt.op_path("uid-PartitionReassignment-default-move").exists()


async def test_restart_mid_reassignment_finishes_once(api: Api, start_operator: Any,
                                                      tmp_path: Any) -> None:
    state = tmp_path / "volume"
    first = start_operator(state_dir=state, time_scale=2.0)
    await ready_cluster(api)
    await api.create("PartitionReassignment", "move", {**REF, "partitions": MOVES,
                                                       "maxConcurrentMoves": 2})
    await api.wait("PartitionReassignment", "move",
                   lambda o: (o.get("status") or {}).get("moving", 0) > 0)
    await first.astop()
    mid = await api.get("PartitionReassignment", "move")
    assert mid is not None and mid["status"]["phase"] == "Moving"
    start_operator(state_dir=state, time_scale=50.0)
    done = await api.wait("PartitionReassignment", "move", cond_is("Succeeded", "True"),
                          timeout=60)
    assert done["status"]["done"] == 6 and done["status"]["counts"]["failed"] == 0
    await api.wait_events("move", "Started", "Completed")
    events = await api_events(api, "move")
    assert [e for e in events if e == "Started"] == ["Started"]  # started once
    assert events.count("Completed") == 1


async def api_events(api: Api, name: str) -> list[str]:
    async with api.session.get(f"{api.base}/api/v1/events") as r:
        if r.status >= 300:
            return []
        items = (await r.json()).get("items", [])
    return [e["reason"] for e in items if e.get("involvedObject", {}).get("name") == name]


async def test_leader_election_completes(api: Api, start_operator: Any) -> None:
    start_operator()
    await ready_cluster(api)
    await api.create("LeaderElection", "pref", {**REF, "topics": ["orders"], "runId": "1"})
    obj = await api.wait("LeaderElection", "pref", cond_is("Succeeded", "True"))
    st = obj["status"]
    assert st["phase"] == "Completed" and st["counts"]["total"] == 6
    assert st["counts"]["notNeeded"] + st["counts"]["elected"] == 6


async def test_bad_resources_are_degraded_with_the_field_named(api: Api,
                                                               start_operator: Any) -> None:
    start_operator()
    await ready_cluster(api)
    await api.create("PartitionReassignment", "nocluster", {
        "clusterRef": {"name": "nope"}, "partitions": MOVES})
    await api.create("PartitionReassignment", "badbroker", {
        **REF, "partitions": [{"topic": "orders", "partition": 0, "replicas": [0, 1, 9]}]})
    await api.create("PartitionReassignment", "badtopic", {
        **REF, "partitions": [{"topic": "nosuch", "partition": 0, "replicas": [0, 1, 2]}]})
    await api.create("LeaderElection", "missing", {**REF, "topics": ["nosuch"]})
    await api.create("LeaderElection", "schemaless", {**REF})  # what CEL would reject
    await api.create("KafkaCluster", "real", {"bootstrapServers": "127.0.0.1:1"})
    await api.create("KafkaQuorum", "q", {**REF, "voters": [0, 1, 42]})
    expect = [
        ("PartitionReassignment", "nocluster", "UnknownCluster", "spec.clusterRef.name"),
        ("PartitionReassignment", "badbroker", "InvalidReplicaAssignment",
         "spec.partitions[0]"),
        ("PartitionReassignment", "badtopic", "UnknownTopicOrPartition", "spec.partitions[0]"),
        ("LeaderElection", "missing", "UnknownTopic", "spec.topics"),
        ("LeaderElection", "schemaless", "InvalidSpec", "exactly one of spec.partitions"),
        ("KafkaCluster", "real", "BootstrapUnreachable", "spec.bootstrapServers"),
        ("KafkaQuorum", "q", "UnknownNode", "spec.voters"),
    ]
    for kind, name, reason, field in expect:
        obj = await api.wait(kind, name, cond_is("Degraded", "True", reason))
        assert field in condition(obj, "Degraded")["message"], (name, condition(obj, "Degraded"))


async def test_quorum_ready_then_voter_change_end_to_end(api: Api, start_operator: Any) -> None:
    op = start_operator()
    await ready_cluster(api)
    await api.create("KafkaQuorum", "q", {**REF, "voters": [0, 1, 2]})
    obj = await api.wait("KafkaQuorum", "q", cond_is("Ready", "True", "QuorumReady"))
    st = obj["status"]
    assert st["currentVoters"] == [0, 1, 2] and st["leaderId"] in (0, 1, 2)
    assert st["leaderEpoch"] >= 1 and st["highWatermark"] > 0
    assert {r["nodeId"] for r in st["replicas"]} >= {0, 1, 2}
    await api.set_spec("KafkaQuorum", "q", {"voters": [0, 1, 3]})
    obj = await api.wait("KafkaQuorum", "q", lambda o: cond_is("Ready", "True")(o) and
                         o["status"]["observedGeneration"] == 2, timeout=60)
    st = obj["status"]
    assert st["currentVoters"] == [0, 1, 3] and st["targetVoters"] == [0, 1, 3]
    assert condition(obj, "Degraded")["status"] == "False"
    opened = op.rt.clusters[("default", "demo")]
    q = await op.rt.run(opened, lambda c: c.describe_quorum())
    assert sorted(q.current_voters) == [0, 1, 3]  # the cluster's quorum, not just the status
    events = await api.wait_events("q", "VoterAdded", "VoterRemoved", "VotersChanged")
    messages = [e["message"] for e in events]
    assert any("node 3 joined" in m for m in messages)
    assert any("node 2 left" in m for m in messages)


async def test_quorum_walk_shows_progress_and_takes_a_new_target_mid_walk(
        api: Api, start_operator: Any) -> None:
    start_operator(tick=1.0)  # one step per second: the walk is visible between steps
    await ready_cluster(api)
    await api.create("KafkaQuorum", "q", {**REF, "voters": [0, 1, 2]})
    await api.wait("KafkaQuorum", "q", cond_is("Ready", "True"))
    await api.set_spec("KafkaQuorum", "q", {"voters": [0, 1, 3]})
    mid = await api.wait("KafkaQuorum", "q", lambda o: 3 in (o.get("status") or {}).get(
        "currentVoters", []) and cond_is("Progressing", "True", "WalkingVoters")(o))
    assert "adding voter 3" in condition(mid, "Progressing")["message"]
    assert mid["status"]["phase"] == "Changing"
    # The new target replaces the pending one: 3 goes again, 4 comes in.
    await api.set_spec("KafkaQuorum", "q", {"voters": [0, 1, 4]})
    obj = await api.wait("KafkaQuorum", "q", lambda o: cond_is("Ready", "True")(o) and
                         o["status"]["observedGeneration"] == 3, timeout=60)
    assert obj["status"]["currentVoters"] == [0, 1, 4]
    wanted = ("node 3 joined", "node 3 left", "node 4 joined")
    await api.wait_events("q", where=lambda es: all(any(w in e["message"] for e in es)
                                                    for w in wanted))


async def test_bad_voters_are_degraded_and_nothing_changes(api: Api,
                                                           start_operator: Any) -> None:
    op = start_operator()
    await ready_cluster(api)
    opened = op.rt.clusters[("default", "demo")]
    await op.rt.run(opened, lambda c: (c.fail_broker(3), c.fail_broker(4)))
    await api.create("KafkaQuorum", "dead", {**REF, "voters": [0, 3, 4]})
    obj = await api.wait("KafkaQuorum", "dead", cond_is("Degraded", "True", "VotersNotLive"))
    msg = condition(obj, "Degraded")["message"]
    assert "spec.voters" in msg and "majority" in msg and "set spec.voters" in msg
    assert obj["status"]["phase"] == "Invalid"
    assert condition(obj, "Ready")["status"] == "False"
    assert obj["status"]["currentVoters"] == [0, 1, 2]
    await api.set_spec("KafkaQuorum", "dead", {"voters": [0, 1, 42]})
    obj = await api.wait("KafkaQuorum", "dead", cond_is("Degraded", "True", "UnknownNode"))
    assert "[42]" in condition(obj, "Degraded")["message"]
    q = await op.rt.run(opened, lambda c: c.describe_quorum())
    assert sorted(q.current_voters) == [0, 1, 2]  # nothing changed
    await api.set_spec("KafkaQuorum", "dead", {"voters": [0, 1, 2]})  # the fix
    obj = await api.wait("KafkaQuorum", "dead", cond_is("Ready", "True"))
    assert condition(obj, "Degraded")["status"] == "False"


async def test_cluster_in_use_is_not_torn_down(api: Api, start_operator: Any) -> None:
    start_operator(time_scale=0.01)  # the reassignment stays in flight
    await ready_cluster(api)
    await api.create("PartitionReassignment", "move", {**REF, "partitions": MOVES})
    await api.wait("PartitionReassignment", "move",
                   lambda o: (o.get("status") or {}).get("phase") == "Moving")
    await api.delete("KafkaCluster", "demo")
    obj = await api.wait("KafkaCluster", "demo", cond_is("Ready", "False", "InUse"))
    assert "PartitionReassignment/move" in condition(obj, "Ready")["message"]
    await api.delete("PartitionReassignment", "move")
    await api.wait_gone("PartitionReassignment", "move")
    await api.wait_gone("KafkaCluster", "demo")


async def test_two_instances_with_peering_never_both_act(api: Api, start_operator: Any,
                                                         tmp_path: Any) -> None:
    async with api.session.post(f"{api.base}/apis/kopf.dev/v1/clusterkopfpeerings", json={
            "apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering",
            "metadata": {"name": "kraftsman"}}) as r:
        assert r.status < 300, await r.text()
    high = start_operator(state_dir=tmp_path / "a", peering="kraftsman", priority=10)
    low = start_operator(state_dir=tmp_path / "b", peering="kraftsman", priority=5)
    await asyncio.sleep(1.0)  # let both announce themselves and see each other
    await ready_cluster(api)
    await asyncio.sleep(1.0)
    assert ("default", "demo") in high.rt.clusters
    assert low.rt.clusters == {}  # the lower-priority peer paused: it never touched it
    await high.astop()
    deadline = asyncio.get_running_loop().time() + 30
    while ("default", "demo") not in low.rt.clusters:
        assert asyncio.get_running_loop().time() < deadline, "the standby never took over"
        await asyncio.sleep(0.2)


async def test_pause_finishes_in_flight_then_resume_with_new_limits(api: Api,
                                                                   start_operator: Any) -> None:
    start_operator(time_scale=5.0)
    await ready_cluster(api)
    await api.create("PartitionReassignment", "move", {**REF, "partitions": MOVES,
                                                       "maxConcurrentMoves": 1})
    await api.wait("PartitionReassignment", "move",
                   lambda o: (o.get("status") or {}).get("moving", 0) == 1)
    await api.set_spec("PartitionReassignment", "move", {"paused": True})
    paused = await api.wait("PartitionReassignment", "move", lambda o: (
        o["status"].get("phase") == "Paused" and o["status"]["moving"] == 0), timeout=60)
    assert paused["status"]["done"] < 6 and condition(paused, "Progressing")["status"] == "False"
    await asyncio.sleep(0.6)  # paused: nothing new starts
    still = await api.get("PartitionReassignment", "move")
    assert still is not None and still["status"]["done"] == paused["status"]["done"]
    assert still["status"]["moving"] == 0
    await api.set_spec("PartitionReassignment", "move", {"paused": False,
                                                         "maxConcurrentMoves": 6,
                                                         "throttleBytesPerSecond": 10**9})
    running = await api.wait("PartitionReassignment", "move", lambda o: (
        o["status"].get("moving", 0) > 1 or o["status"].get("phase") == "Completed"))
    assert running["status"].get("throttleBytesPerSecond") == 10**9
    await api.wait("PartitionReassignment", "move", cond_is("Succeeded", "True"), timeout=60)


async def test_continuous_election_keeps_preferred_leaders(api: Api,
                                                           start_operator: Any) -> None:
    op = start_operator()
    await ready_cluster(api)
    opened = op.rt.clusters[("default", "demo")]
    # A rolling restart: broker 0 goes away long enough to be fenced, then comes back; the
    # partitions it led now have other leaders.
    await op.rt.run(opened, lambda c: c.fail_broker(0))
    await op.rt.run(opened, lambda c: c.advance(30))
    await op.rt.run(opened, lambda c: c.restore_broker(0))
    await op.rt.run(opened, lambda c: c.advance(30))
    await api.create("LeaderElection", "keep", {**REF, "allTopicPartitions": True,
                                                "mode": "Continuous",
                                                "imbalanceThresholdPercent": 10,
                                                "intervalSeconds": 5})
    obj = await api.wait("LeaderElection", "keep", lambda o: (
        (o.get("status") or {}).get("runs", 0) >= 2))
    st = obj["status"]
    first = st["recentRuns"][0]
    assert first["imbalancePercent"] > 10 and first["elected"] > 0
    assert st["recentRuns"][-1]["imbalancePercent"] == 0.0
    assert cond_is("Succeeded", "True", "Balanced")(obj)


async def test_kubectl_get_columns_answer_where_it_stands(api: Api, start_operator: Any) -> None:
    """The examples of docs/operator.md: `kubectl get` columns rendered from live objects
    (AGE is not emulated; shown as a placeholder)."""
    from harness import kubectl_get

    start_operator()
    await ready_cluster(api)
    await api.create("KafkaQuorum", "demo", {**REF, "voters": [0, 1, 2]})
    await api.create("PartitionReassignment", "orders-to-new-brokers", {
        **REF, "partitions": MOVES[:3], "maxConcurrentMoves": 2, "electPreferredLeaders": True})
    kq = await api.wait("KafkaQuorum", "demo", cond_is("Ready", "True"))
    pr = await api.wait("PartitionReassignment", "orders-to-new-brokers",
                        cond_is("Succeeded", "True"), timeout=60)
    # A later sync wave: elect once the moves are done (during them, a preferred replica
    # that is still catching up is not eligible: PREFERRED_LEADER_NOT_AVAILABLE).
    await api.create("LeaderElection", "orders-preferred", {**REF, "topics": ["orders"],
                                                            "electionType": "PREFERRED"})
    le = await api.wait("LeaderElection", "orders-preferred", cond_is("Succeeded", "True"))
    kc = await api.get("KafkaCluster", "demo")
    assert kc is not None
    tables = {kind: kubectl_get([o], kind) for kind, o in [
        ("KafkaCluster", kc), ("KafkaQuorum", kq), ("PartitionReassignment", pr),
        ("LeaderElection", le)]}
    print("\n\n".join(tables.values()))
    assert tables["PartitionReassignment"].splitlines()[1].split()[1:6] == [
        "demo", "Completed", "100%", "0", "3"]
    assert tables["KafkaQuorum"].splitlines()[1].split()[1:2] == ["demo"]
    assert "[0,1,2]" in tables["KafkaQuorum"]
    le_row = tables["LeaderElection"].splitlines()[1].split()
    assert le_row[1:4] == ["demo", "PREFERRED", "Completed"] and le_row[5] == "0"
    assert tables["KafkaCluster"].splitlines()[1].split()[1:7] == [
        "embedded", "6", "6", "0", "0", "True"]


async def test_changed_target_mid_flight_retargets(api: Api, start_operator: Any) -> None:
    op = start_operator(time_scale=0.5)  # slow: the first target is still in flight
    await ready_cluster(api)
    await api.create("PartitionReassignment", "move", {**REF, "partitions": MOVES[:1]})
    await api.wait("PartitionReassignment", "move",
                   lambda o: (o.get("status") or {}).get("moving", 0) == 1)
    new = [{"topic": "orders", "partition": 0, "replicas": [4, 5, 3]}]
    await api.set_spec("PartitionReassignment", "move", {"partitions": new})
    opened = op.rt.clusters[("default", "demo")]
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        ongoing = await op.rt.run(opened, lambda c: c.list_partition_reassignments())
        target = next(iter(ongoing.values())).target if ongoing else None
        if target == (4, 5, 3):
            break
        assert asyncio.get_running_loop().time() < deadline, f"not re-targeted: {target}"
        await asyncio.sleep(0.1)
    # The status of the pass that re-targeted is written after the cluster answered.
    obj = await api.wait("PartitionReassignment", "move",
                         lambda o: (o.get("status") or {}).get("observedGeneration") == 2)
    assert obj["status"]["counts"]["failed"] == 0


async def test_examples_reach_ready_or_succeeded_in_file_order(api: Api,
                                                               start_operator: Any) -> None:
    """What tests/e2e/kind-e2e.sh does on a real cluster, here against the emulator."""
    import yaml
    from harness import kubectl_get

    root = Path(__file__).resolve().parents[2] / "manifests" / "examples"
    start_operator()
    done = {"KafkaCluster": "Ready", "KafkaQuorum": "Ready"}
    seen: list[tuple[str, dict[str, Any]]] = []
    for path in sorted(root.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc["kind"] == "KafkaRebalance":
                continue  # its planner Job needs a kubelet: test_rebalance_deployed.py plays one
            meta = doc["metadata"]
            await api.create(doc["kind"], meta["name"], doc["spec"],
                             annotations=meta.get("annotations", {}))
            obj = await api.wait(doc["kind"], meta["name"],
                                 cond_is(done.get(doc["kind"], "Succeeded"), "True"), timeout=60)
            seen.append((doc["kind"], obj))
    assert {k for k, _ in seen} == {"KafkaCluster", "KafkaQuorum", "PartitionReassignment",
                                    "LeaderElection"}
    print("\n".join(kubectl_get([o], k) for k, o in seen))


async def test_quorum_leader_change_is_an_event(api: Api, start_operator: Any) -> None:
    op = start_operator()
    await ready_cluster(api)
    await api.create("KafkaQuorum", "q", {**REF, "voters": [0, 1, 2]})
    obj = await api.wait("KafkaQuorum", "q", cond_is("Ready", "True"))
    leader = obj["status"]["leaderId"]
    opened = op.rt.clusters[("default", "demo")]
    await op.rt.run(opened, lambda c: c.fail_controller(leader))
    obj = await api.wait("KafkaQuorum", "q", lambda o: o["status"].get("leaderId") not in (
        None, leader) and cond_is("Ready", "True")(o), timeout=60)
    new = obj["status"]["leaderId"]
    await api.wait_events("q", "LeaderChanged", where=lambda es: any(
        f"quorum leader {leader} -> {new}" in e["message"] for e in es
        if e["reason"] == "LeaderChanged"))
