"""Takeover time of the chart's multi-replica operator: the active replica dies, how long until
the standby acts on a new resource?

Two replicas run exactly as the chart renders them with `replicaCount: 2` (subprocesses of the
installed console script, same args, one shared state volume: tests/operator/deployed.py),
by default against a real kube-apiserver with etcd — the chart installed as the tests install
it, each replica logged in only with a token of the chart's ServiceAccount — or, with
`--server kmock`, against the kmock emulator over HTTP. Each round stops the active replica —
`kill -9` (node lost, OOM kill) or SIGTERM (drain, rolling update: kopf removes its peering
record on the way out) — creates a LeaderElection at once and measures until it is
Succeeded; then a replacement replica is started, as the Deployment would, and becomes the
standby for the next round.

    nice -n 10 .venv/bin/python bench/operator_takeover_bench.py --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "operator"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "operator" / "real"))
from deployed import TWO_REPLICAS, OperatorProcess, PodTemplate, apply, from_chart, write_kubeconfig
from harness import Api, cond_is
from operator_bench import with_emulator, with_real_server

CLUSTER = {"embedded": {"brokers": [{"id": i} for i in range(3)], "controllers": [0, 1, 2],
                        "topics": [{"name": "orders", "partitions": 6,
                                    "replicationFactor": 3}]}}


async def peers(api: Api) -> dict[str, dict[str, int]]:
    async with api.session.get(f"{api.base}/apis/kopf.dev/v1/clusterkopfpeerings/kraftsman") as r:
        return dict((await r.json()).get("status") or {})


async def install(api: Api, real: Any, work: Path) -> tuple[PodTemplate, Path]:
    """The chart with two replicas, and the kubeconfig its pods log in with."""
    if real is not None:
        from real_install import Installer, chart
        pod = chart(TWO_REPLICAS)
        Installer(real).apply(pod.install, "helm")
        return pod, real.token_kubeconfig(work / "kubeconfig", pod.service_account,
                                          pod.namespace)
    pod = from_chart(TWO_REPLICAS)
    await apply(api.base, pod.objects)
    return pod, write_kubeconfig(work / "kubeconfig", api.base)


async def takeover(api: Api, args: argparse.Namespace, real: Any) -> None:
    rounds = args.rounds
    work = Path(tempfile.mkdtemp(prefix="takeover-"))
    pod, kubeconfig = await install(api, real, work)
    replicas: list[OperatorProcess] = []

    async def start_replica() -> OperatorProcess:
        n = len(replicas)
        op = OperatorProcess(pod, workdir=work / f"pod-{n}", pod_name=f"kraftsman-{n}",
                             kubeconfig=kubeconfig, state_dir=work / "rwx-claim").start()
        replicas.append(op)
        await op.wait_healthy(60)
        while op.pod_name not in await peers(api):
            await asyncio.sleep(0.1)
        return op

    try:
        await start_replica()
        await start_replica()
        await api.create("KafkaCluster", "demo", CLUSTER)
        await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"), timeout=60)
        figures: dict[str, list[float]] = {"kill -9": [], "SIGTERM": []}
        for r in range(rounds):
            for how in figures:
                alive = [op for op in replicas if op.alive()]
                table = await peers(api)
                active = max(alive, key=lambda op: table[op.pod_name]["priority"])
                t0 = time.monotonic()
                if how == "kill -9":
                    active.kill()
                else:
                    await active.stop()
                name = f"after-{r}-{how.split()[0].lower().strip('-')}"
                await api.create("LeaderElection", name, {
                    "clusterRef": {"name": "demo"}, "topics": ["orders"], "runId": "1"})
                await api.wait("LeaderElection", name, cond_is("Succeeded", "True"),
                               timeout=120)
                figures[how].append(time.monotonic() - t0)
                print(f"  round {r + 1}: {how:8s} active {active.pod_name} -> a standby "
                      f"acted after {figures[how][-1]:.1f} s", flush=True)
                await start_replica()  # the Deployment replaces the pod
        print("Takeover: active replica stopped -> a standby's LeaderElection Succeeded "
              f"(chart replicaCount 2, peering lifetime 20 s, {rounds} rounds each, "
              f"{args.server} API server)")
        for how, values in figures.items():
            print(f"  {how:8s} min {min(values):5.1f} s  median "
                  f"{statistics.median(values):5.1f} s  max {max(values):5.1f} s")
    finally:
        for op in replicas:
            await op.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--server", choices=["real", "kmock"], default="real",
                        help="a real kube-apiserver with etcd (default) or the kmock emulator")
    args = parser.parse_args()
    asyncio.run((with_real_server if args.server == "real" else with_emulator)(takeover, args))
