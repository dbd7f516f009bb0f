"""Operator benchmarks against the kmock Kubernetes emulator (real kopf, real HTTP).

1. LeaderElection latency: create N LeaderElections (one-shot, PREFERRED, one topic) and time
   each from its creation to the status showing Succeeded=True (phase Completed), observed by
   a watch stream; reports p50/p99 and throughput.
2. Operator memory: M embedded clusters with P partitions each and one PartitionReassignment
   per cluster moving every partition at once (a slow throttle keeps them in flight); reports
   the process's resident memory (VmRSS) before and with everything moving. kmock runs in the
   same process, so the delta over the baseline is the operator's share.

    .venv/bin/python bench/operator_bench.py latency --elections 1000 --tick 1.0
    .venv/bin/python bench/operator_bench.py memory --clusters 10 --partitions 10000

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import kmock

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "operator"))
from harness import Api, Emulator, OperatorThread, cond_is, declare


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q / 100 * len(values)) - 1))]


async def with_emulator(fn: Any, *args: Any) -> None:
    emulator = Emulator()
    emulator.store_events = False  # counted, not stored: see Emulator.store_events
    emulator.keep_history = False  # latest object versions only: see Emulator.keep_history
    async with emulator as k8s, kmock.Server(k8s):
        declare(k8s)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=50)) as session:
            await fn(k8s, Api(str(k8s.url), session), *args)


def cluster_spec(partitions: int, brokers: int = 6) -> dict[str, Any]:
    return {"embedded": {"brokers": [{"id": i, "rack": "abc"[i % 3]} for i in range(brokers)],
                         "topics": [{"name": "orders", "partitions": partitions,
                                     "replicationFactor": 3,
                                     "sizeBytesPerPartition": 10_000_000}]}}


async def latency(k8s: Any, api: Api, args: argparse.Namespace) -> None:
    op = OperatorThread(str(k8s.url), Path(tempfile.mkdtemp()), tick=args.tick,
                        time_scale=1.0)
    op.rt.fsync = args.fsync
    await asyncio.to_thread(op.start)
    await api.create("KafkaCluster", "demo", cluster_spec(6))
    await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"), timeout=60)
    created: dict[str, float] = {}
    finished: dict[str, float] = {}
    url = api._url("LeaderElection", None) + "?watch=true"

    async def watch() -> None:
        """Completion times from a watch stream (no polling of 1,000 objects)."""
        async with api.session.get(url, timeout=aiohttp.ClientTimeout(total=None)) as r:
            async for line in r.content:
                if not line.strip():
                    continue
                o = json.loads(line)["object"]
                name = o["metadata"]["name"]
                if name not in finished and cond_is("Succeeded", "True")(o):
                    finished[name] = time.monotonic()
                    if len(finished) >= args.elections:
                        return

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0.2)
    t0 = time.monotonic()

    async def create(i: int) -> None:
        name = f"le-{i:04d}"
        created[name] = time.monotonic()
        await api.create("LeaderElection", name, {"clusterRef": {"name": "demo"},
                                                  "topics": ["orders"]})

    for start in range(0, args.elections, 50):
        await asyncio.gather(*(create(i) for i in range(start, min(start + 50,
                                                                     args.elections))))
    created_all = time.monotonic() - t0
    try:
        await asyncio.wait_for(watcher, args.timeout)
    except TimeoutError:
        watcher.cancel()
    lat = [finished[n] - created[n] for n in finished]
    span = max(finished.values()) - t0 if finished else float("nan")
    print(f"LeaderElection create -> Succeeded (tick {args.tick}s, {args.elections} objects)")
    print(f"  completed          {len(finished)}/{args.elections}")
    print(f"  creating all took  {created_all:.2f} s")
    if lat:
        print(f"  latency p50        {statistics.median(lat) * 1000:.0f} ms")
        print(f"  latency p99        {pct(lat, 99) * 1000:.0f} ms")
        print(f"  latency max        {max(lat) * 1000:.0f} ms")
        print(f"  throughput         {len(finished) / span:.1f} completed/s "
              f"(first create -> last completion {span:.1f} s)")
    await stop(op)


async def stop(op: OperatorThread) -> None:
    """Stop the operator after the figures are out; a slow stop is reported, not fatal."""
    try:
        await asyncio.to_thread(op.stop)
    except AssertionError as e:
        print(f"  note: {e} within the harness's stop timeout")


async def memory(k8s: Any, api: Api, args: argparse.Namespace) -> None:
    baseline_before_operator = rss_mib()
    op = OperatorThread(str(k8s.url), Path(tempfile.mkdtemp()), tick=args.tick,
                        time_scale=1.0)
    await asyncio.to_thread(op.start)
    await asyncio.sleep(1)
    baseline = rss_mib()
    t0 = time.monotonic()
    for i in range(args.clusters):
        await api.create("KafkaCluster", f"c{i}", cluster_spec(args.partitions))
    for i in range(args.clusters):
        await api.wait("KafkaCluster", f"c{i}", cond_is("Ready", "True"), timeout=args.timeout)
        print(f"  ... cluster c{i} Ready, RSS {rss_mib():.0f} MiB", flush=True)
    clusters_ready = rss_mib()
    t_ready = time.monotonic() - t0
    for i in range(args.clusters):
        moves = [{"topic": "orders", "partition": p,
                  "replicas": [(p + 3) % 6, (p + 4) % 6, (p + 5) % 6]}
                 for p in range(args.partitions)]
        await api.create("PartitionReassignment", f"move-c{i}", {
            "clusterRef": {"name": f"c{i}"}, "partitions": moves,
            "maxConcurrentMoves": args.partitions, "throttleBytesPerSecond": 1000})
    moving_total = 0
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        moving_total = pending = 0
        for i in range(args.clusters):
            st = ((await api.get("PartitionReassignment", f"move-c{i}")) or {}).get(
                "status") or {}
            moving_total += st.get("moving", 0)
            pending += (st.get("counts") or {}).get("pending", args.partitions)
        print(f"  ... {moving_total} partitions moving, {pending} pending, "
              f"RSS {rss_mib():.0f} MiB", flush=True)
        if pending == 0 and moving_total > 0:
            break  # every move has started (a target equal to the replicas is done at once)
        await asyncio.sleep(1)
    await asyncio.sleep(args.settle)
    moving_rss = rss_mib()
    status_sizes = []
    for i in range(args.clusters):
        o = await api.get("PartitionReassignment", f"move-c{i}")
        status_sizes.append(len(json.dumps((o or {}).get("status") or {})))
    await asyncio.to_thread(op.stop)
    total = args.clusters * args.partitions
    print(f"Operator memory: {args.clusters} embedded clusters x {args.partitions} partitions "
          f"(6 brokers, RF 3), {total} partitions")
    print(f"  process RSS before the operator (kmock, imports)   "
          f"{baseline_before_operator:.0f} MiB")
    print(f"  process RSS, operator idle                         {baseline:.0f} MiB")
    print(f"  clusters Ready (after {t_ready:.1f} s)                   {clusters_ready:.0f} MiB")
    print(f"  {moving_total} partitions moving                     {moving_rss:.0f} MiB")
    print(f"  operator's share (moving - before the operator)    "
          f"{moving_rss - baseline_before_operator:.0f} MiB")
    print(f"  largest PartitionReassignment status              {max(status_sizes)} bytes")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="bench", required=True)
    lat = sub.add_parser("latency")
    lat.add_argument("--elections", type=int, default=1000)
    lat.add_argument("--tick", type=float, default=1.0)
    lat.add_argument("--timeout", type=float, default=600)
    lat.add_argument("--no-fsync", dest="fsync", action="store_false",
                     help="embedded cluster without fsync (tmpfs-like state volume)")
    mem = sub.add_parser("memory")
    mem.add_argument("--clusters", type=int, default=10)
    mem.add_argument("--partitions", type=int, default=10_000)
    mem.add_argument("--tick", type=float, default=1.0)
    mem.add_argument("--settle", type=float, default=5.0)
    mem.add_argument("--timeout", type=float, default=900)
    args = p.parse_args()
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("kopf").setLevel(logging.CRITICAL)
    asyncio.run(with_emulator(latency if args.bench == "latency" else memory, args))


if __name__ == "__main__":
    main()
