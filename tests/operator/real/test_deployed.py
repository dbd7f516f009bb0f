"""The operator as its Deployment starts it: a subprocess with the chart's or the manifest's
command and args, against a real kube-apiserver (conftest.py), logged in only with a token of
the install's ServiceAccount (deployed.py)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

from deployed import TWO_REPLICAS, from_manifests
from harness import Api, cond_is
from real_install import chart
from test_metrics import scrape, value
from test_operator_kmock import CLUSTER, MOVES, REF

from kraftsman.handlers.runtime import embedded_cluster_dir
from kraftsman.local_store import StateLock


async def test_chart_default_pod_reconciles_a_cluster_and_an_election(api: Api,
                                                                      deployed: Any) -> None:
    op = await deployed(chart())
    assert "--peering=kraftsman" in op.argv and op.argv[1:3] == ["operator", "run"]
    await api.create("KafkaCluster", "demo", CLUSTER)
    await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"))
    await api.create("LeaderElection", "pref", {**REF, "topics": ["orders"], "runId": "1"})
    obj = await api.wait("LeaderElection", "pref", cond_is("Succeeded", "True"))
    assert obj["status"]["counts"]["total"] == 6
    assert op.alive()


async def test_manifest_pod_reconciles_a_cluster(api: Api, deployed: Any) -> None:
    op = await deployed(from_manifests())
    await api.create("KafkaCluster", "demo", CLUSTER)
    await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"))
    assert op.alive()


async def peers_announced(api: Api, count: int, timeout: float = 30) -> dict[str, Any]:
    """The replicas in the chart's ClusterKopfPeering, as kopf records them."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        async with api.session.get(
                f"{api.base}/apis/kopf.dev/v1/clusterkopfpeerings/kraftsman") as r:
            peers = dict((await r.json()).get("status") or {})
        if len(peers) >= count or asyncio.get_running_loop().time() > deadline:
            return peers
        await asyncio.sleep(0.1)


async def test_two_replicas_one_acts_the_other_stands_by_and_takes_over(
        api: Api, deployed: Any, tmp_path: Path) -> None:
    """replicaCount: 2 as the chart renders it: both replicas run the same args; one acts,
    the other stands by (never "Pausing all operators, including self"); kill -9 of the
    active one hands over to the standby."""
    pod = chart(TWO_REPLICAS)
    assert pod.replicas == 2 and not any(a.startswith("--priority") for a in pod.args)
    volume = tmp_path / "rwx-claim"  # the ReadWriteMany claim both pods mount
    # The Deployment starts both pods at once, on one volume.
    first, second = await asyncio.gather(deployed(pod, state_dir=volume),
                                         deployed(pod, state_dir=volume))
    peers = await peers_announced(api, 2)
    assert set(peers) == {first.pod_name, second.pod_name}  # POD_ID, kopf's identity
    active, standby = sorted((first, second), key=lambda op: -peers[op.pod_name]["priority"])
    assert peers[active.pod_name]["priority"] > peers[standby.pod_name]["priority"]
    await api.create("KafkaCluster", "demo", CLUSTER)
    await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"))
    await api.create("LeaderElection", "before", {**REF, "topics": ["orders"], "runId": "1"})
    await api.wait("LeaderElection", "before", cond_is("Succeeded", "True"))
    for op in (active, standby):
        assert "Pausing all operators" not in op.log()
        assert "Possibly conflicting operators" not in op.log()
    assert "Pausing operations" not in active.log()
    # A standby starts paused. Started at the same instant, it may see the peering object
    # before the active replica has announced itself and resume for that moment (kopf's
    # peering is eventually consistent; the state lock keeps a second actor off the state):
    # what matters is that it is paused again, in favour of the active one, and acted on
    # nothing.
    log = standby.log()
    resumed = log.rfind("Resuming operations")
    assert resumed == -1 or log.rfind("Pausing operations in favour of") > resumed, log
    ns = api.namespace
    assert f"[{ns}/demo]" in active.log() and f"[{ns}/demo]" not in log
    assert f"[{ns}/before]" not in log

    seen = len(standby.log())
    active.kill()
    await api.create("LeaderElection", "after", {**REF, "topics": ["orders"], "runId": "1"})
    obj = await api.wait("LeaderElection", "after", cond_is("Succeeded", "True"), timeout=60)
    assert obj["status"]["counts"]["total"] == 6
    assert "Resuming operations after the pause" in standby.log()[seen:]
    assert f"[{ns}/after]" in standby.log()


async def test_reassignment_completes_through_the_deployed_operator(api: Api,
                                                                    deployed: Any) -> None:
    op = await deployed(chart())
    await api.create("KafkaCluster", "demo", CLUSTER)
    await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"))
    await api.create("PartitionReassignment", "move", {
        **REF, "partitions": MOVES, "maxConcurrentMoves": 2, "electPreferredLeaders": True,
        "throttleBytesPerSecond": 50_000_000})
    done = await api.wait("PartitionReassignment", "move", cond_is("Succeeded", "True"),
                          timeout=90)
    st = done["status"]
    assert (st["phase"], st["done"], st["counts"]["total"]) == ("Completed", 6, 6)
    reasons = [e["reason"] for e in await api.wait_events("move", "Started", "Completed")]
    assert reasons.count("Started") == 1 and reasons.count("Completed") == 1
    annotations = done["metadata"].get("annotations", {})
    assert len(st["handledDigest"]) == 64  # kopf's diff base: a digest, in the status
    assert not any(k.startswith("kraftsman.io/") for k in annotations), annotations
    # each status write is stored as written (a row's unset field once went as a null, which
    # the server prunes: kopf warned of it on every pass, and every pass wrote again)
    assert "Merge-patching finished with inconsistencies" not in op.log()
    # the chart's metrics endpoint says what the status says (test_metrics.py in depth; the
    # operator watches every namespace, where earlier tests' resources may remain)
    kind = "PartitionReassignment"
    here = {"kind": kind, "namespace": api.namespace, "name": "move"}
    for _ in range(100):
        got = await scrape(op.metrics_url)
        if value(got, "kraftsman_operation_bytes_left", **here) == 0:
            break
        await asyncio.sleep(0.1)
    assert value(got, "kraftsman_operation_bytes_left", **here) == \
        st["bytesToMove"] - st["bytesMoved"] == 0, got
    assert (value(got, "kraftsman_operations", kind=kind, phase="Completed") or 0) >= 1
    assert (value(got, "kraftsman_api_request_duration_seconds_count", verb="patch") or 0) > 0


async def test_quorum_voter_change_through_the_deployed_operator(api: Api,
                                                                 deployed: Any) -> None:
    """Then the pod is replaced with its state volume lost: the embedded cluster comes back
    under a new id with its spec's voters [0, 1, 2]. The KafkaQuorum changes no voter there
    until the user accepts that cluster (before, it walked it at once, and its Events compared
    the new quorum with the old cluster's status: "node 2 joined", which never happened)."""
    first = await deployed(chart())
    await api.create("KafkaCluster", "demo", CLUSTER)
    await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"))
    await api.create("KafkaQuorum", "q", {**REF, "voters": [0, 1, 2]})
    obj = await api.wait("KafkaQuorum", "q", cond_is("Ready", "True", "QuorumReady"))
    assert obj["status"]["currentVoters"] == [0, 1, 2]
    await api.set_spec("KafkaQuorum", "q", {"voters": [0, 1, 3]})
    obj = await api.wait("KafkaQuorum", "q", lambda o: cond_is("Ready", "True")(o) and
                         o["status"]["observedGeneration"] == 2, timeout=60)
    assert obj["status"]["currentVoters"] == [0, 1, 3]
    await api.wait_events("q", "VoterAdded", "VoterRemoved")
    old_id = obj["status"]["clusterId"]
    assert old_id == (await api.get("KafkaCluster", "demo") or {})["status"]["clusterId"]

    first.kill()
    shutil.rmtree(first.state_dir, ignore_errors=True)  # the pod's emptyDir goes with it
    await deployed(chart())
    kc = await api.wait("KafkaCluster", "demo", lambda o: cond_is("Ready", "True")(o) and
                        o["status"]["clusterId"] != old_id, timeout=60)
    new_id = kc["status"]["clusterId"]
    held = await api.wait("KafkaQuorum", "q", cond_is("Degraded", "True", "ClusterIdChanged"),
                          timeout=60)
    assert held["status"]["phase"] == "ClusterChanged" and held["status"]["clusterId"] == old_id
    await api.wait_events("q", "ClusterChanged")
    seen = {e["metadata"]["uid"] for e in await api.events("q")}
    await asyncio.sleep(3)  # several ticks: nothing is walked on the new cluster
    assert (await api.get("KafkaQuorum", "q") or {})["status"]["phase"] == "ClusterChanged"

    await api.patch("KafkaQuorum", "q", {"metadata": {"annotations": {
        "kraftsman.io/accept-cluster-id": new_id}}})
    obj = await api.wait("KafkaQuorum", "q", lambda o: cond_is("Ready", "True")(o) and
                         o["status"]["clusterId"] == new_id, timeout=60)
    assert obj["status"]["currentVoters"] == [0, 1, 3]

    def new_changes(events: list[dict[str, Any]]) -> list[str]:
        return sorted(e["message"].split(":")[0] for e in events
                      if e["metadata"]["uid"] not in seen
                      and e["reason"] in ("VoterAdded", "VoterRemoved"))

    events = await api.wait_events("q", where=lambda evs: len(new_changes(evs)) >= 2)
    await asyncio.sleep(1)  # a wrong third one would come with the same pass
    changes = new_changes(await api.events("q"))
    assert changes == ["node 2 left the voters", "node 3 joined the voters"], (changes, events)


async def test_a_continuous_election_watches_again_once_its_cluster_opens_after_a_restart(
        api: Api, deployed: Any, tmp_path: Path) -> None:
    """The operator restarts while something else holds the embedded cluster's directory
    (another replica, a `kraftsman` command): the continuous LeaderElection says
    WaitingForCluster. Once the cluster opens it says Watching again at once, not at its
    next run 300 s later (it kept WaitingForCluster until then, with the cluster Ready)."""
    state = tmp_path / "state"
    op = await deployed(chart(), state_dir=state)
    kc = await api.create("KafkaCluster", "demo", CLUSTER)
    await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"))
    await api.create("LeaderElection", "cont", {**REF, "topics": ["orders"],
                                                "mode": "Continuous", "intervalSeconds": 300})
    await api.wait("LeaderElection", "cont", cond_is("Progressing", "False", "Watching"))
    await op.stop()
    directory = embedded_cluster_dir(state, (api.namespace, "demo"), kc["metadata"]["uid"])
    holder = StateLock(directory, "test: another process holds the cluster", create=False,
                       wait_seconds=0)
    with holder:
        await deployed(chart(), state_dir=state)
        await api.wait("KafkaCluster", "demo", cond_is("Ready", "False", "StateDirectoryBusy"))
        await api.wait("LeaderElection", "cont",
                       cond_is("Progressing", "True", "WaitingForCluster"))
    await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"))
    obj = await api.wait("LeaderElection", "cont",
                         cond_is("Progressing", "False", "Watching"), timeout=30)
    assert obj["status"]["runs"] == 1  # watching again is not a new run
