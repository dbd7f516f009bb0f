"""The operator as its Deployment starts it: a subprocess with the chart's or the manifest's
command and args, logging in through a kubeconfig that points at the emulator (deployed.py)."""

from __future__ import annotations

from typing import Any

from deployed import from_chart, from_manifests
from harness import Api, cond_is
from test_operator_kmock import CLUSTER, REF


async def test_chart_default_pod_reconciles_a_cluster_and_an_election(api: Api,
                                                                      deployed: Any) -> None:
    op = await deployed(from_chart())
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
