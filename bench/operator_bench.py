"""Operator benchmarks against a real kube-apiserver with etcd (``--server real``, the
default: tests/realk8s, built by tools/build-real-apiserver) or the kmock emulator
(``--server kmock``; real kopf, real HTTP).

The operator runs as its Deployment runs it (tests/operator/deployed.py: the chart's command
and args) in a process of its own. On the real server it is installed as the tests install it
(CRDs server-side, the chart as Helm renders it) and logs in only with a token of the chart's
ServiceAccount; on kmock, with a kubeconfig to the emulator, or `--operator thread` in a
thread of this process (the harness the kmock tests use).

1. LeaderElection latency: create N LeaderElections (one-shot, PREFERRED, one topic) and time
   each from its creation to the status showing Succeeded=True (phase Completed), observed by
   a watch stream; reports p50/p99 and throughput.
2. Operator memory: M embedded clusters with P partitions each and one PartitionReassignment
   per cluster moving every partition at once (a slow throttle keeps them in flight); reports
   the operator process's resident memory (VmRSS) idle, with everything moving, its peak
   (VmHWM, what a memory limit is measured against) and its CPU time while idle. With
   `--remote`, each cluster is a `bootstrapServers` cluster instead — the embedded cluster
   made by `kraftsman apply` and served over the Kafka protocol by `kraftsman cluster serve`
   in a process of its own, as a production operator reaches a real Kafka cluster over the
   wire — and the server's memory is reported apart from the operator's.

    nice -n 10 .venv/bin/python bench/operator_bench.py latency --elections 10000 --tick 1.0
    nice -n 10 .venv/bin/python bench/operator_bench.py memory --clusters 1 --partitions 100000
    nice -n 10 .venv/bin/python bench/operator_bench.py memory --clusters 1 --partitions 100000 \
        --remote

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import kmock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "operator"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "operator" / "real"))
from deployed import ROOT, OperatorProcess, apply, from_chart, write_kubeconfig
from harness import Api, Emulator, OperatorThread, cond_is, declare

from kraftsman.handlers.runtime import KAFKA_RETRY
from kraftsman.resources import API_VERSION


def proc_status_mib(pid: int | str, key: str) -> float:
    """A /proc status figure of a process in MiB (VmRSS, VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Operator:
    """The operator under test: a process started as the Deployment does, or a thread."""

    def __init__(self, server: str, tick: float, *, mode: str, fsync: bool = True,
                 real: Any = None) -> None:
        self.server, self.tick, self.mode, self.fsync = server, tick, mode, fsync
        self.real = real  # the RealServer, or None for kmock
        self.workdir = Path(tempfile.mkdtemp(prefix="kraftsman-bench-"))
        self.proc: OperatorProcess | None = None
        self.thread: OperatorThread | None = None

    async def start(self) -> None:
        if self.mode == "thread":
            self.thread = OperatorThread(self.server, self.workdir / "state", tick=self.tick,
                                         time_scale=1.0)
            self.thread.rt.kafka_retry = KAFKA_RETRY  # the Deployment's, not the tests' 3 s
            self.thread.rt.fsync = self.fsync
            await asyncio.to_thread(self.thread.start)
            return
        extra = [f"--tick={self.tick}", "--time-scale=1"]
        if self.real is not None:
            from real_install import Installer, chart
            pod = chart(extra_args=extra)
            Installer(self.real).apply(pod.install, "helm")
            kubeconfig = self.real.token_kubeconfig(self.workdir / "kubeconfig",
                                                    pod.service_account, pod.namespace)
        else:
            pod = from_chart(extra_args=extra)
            await apply(self.server, pod.objects)
            kubeconfig = write_kubeconfig(self.workdir / "kubeconfig", self.server)
        # the caller's PYTHONPATH passes through (a worktree sharing another tree's venv
        # runs its own code with PYTHONPATH=<tree>:<tree>/operator)
        passed = {k: v for k, v in os.environ.items() if k == "PYTHONPATH"}
        self.proc = OperatorProcess(pod, workdir=self.workdir, pod_name="kraftsman-bench-0",
                                    kubeconfig=kubeconfig, env=passed).start()
        await self.proc.wait_healthy(60)

    def status(self, key: str) -> float:
        """A /proc status figure of the operator's process in MiB (VmRSS, VmHWM)."""
        return proc_status_mib(self.proc.pid if self.proc is not None else "self", key)

    def cpu_seconds(self) -> float:
        pid = self.proc.pid if self.proc is not None else "self"
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    async def stop(self) -> None:
        """Stop after the figures are out; a slow stop is reported, not fatal."""
        try:
            if self.thread is not None:
                await asyncio.to_thread(self.thread.stop)
            if self.proc is not None:
                code = await self.proc.stop()
                if code not in (0, None):
                    print(f"  note: the operator exited with {code}")
        except AssertionError as e:
            print(f"  note: {e} within the harness's stop timeout")


def server_cpu_seconds(real: Any) -> float:
    """CPU seconds of kube-apiserver and etcd so far (0 on kmock)."""
    if real is None:
        return 0.0
    total = 0.0
    for name in ("kube-apiserver", "etcd"):
        pid = real.pid(name)
        if pid is not None:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def api_requests(real: Any) -> dict[tuple[str, str], float]:
    """The API server's request counts so far by (verb, resource), from its /metrics
    (apiserver_request_total); empty on kmock."""
    if real is None:
        return {}
    out: dict[tuple[str, str], float] = {}
    for line in real.kubectl("get", "--raw", "/metrics").stdout.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(kv.split("=", 1) for kv in line[line.index("{") + 1:line.index("}")]
                      .split(","))
        key = (labels.get("verb", "").strip('"'), labels.get("resource", "").strip('"'))
        out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q / 100 * len(values)) - 1))]


async def with_real_server(fn: Any, args: argparse.Namespace) -> None:
    """A real kube-apiserver and etcd, the CRDs applied as README says; objects go to the
    namespace ``bench``."""
    from tests.realk8s.apiserver import BUILD, missing_binaries, up
    missing = missing_binaries()
    if missing:
        raise SystemExit(f"the real API server is not built ({', '.join(missing)}): run {BUILD}")
    server = up(Path(tempfile.mkdtemp(prefix="kraftsman-bench-apiserver-")))
    try:
        server.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        server.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        server.kubectl("create", "namespace", "bench")
        connector = aiohttp.TCPConnector(ssl=server.ssl_context(), limit=50)
        async with aiohttp.ClientSession(connector=connector) as session:
            api = Api(server.url, session, "bench")
            await fn(api, args, server)
    finally:
        server.stop()


async def with_emulator(fn: Any, args: argparse.Namespace) -> None:
    emulator = Emulator()
    emulator.store_events = False  # counted, not stored: see Emulator.store_events
    emulator.keep_history = False  # latest object versions only: see Emulator.keep_history
    async with emulator as k8s, kmock.Server(k8s):
        declare(k8s)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=50)) as session:
            await fn(Api(str(k8s.url), session), args, None)


class Served:
    """An embedded cluster made by `kraftsman apply` and served by `kraftsman cluster serve`,
    each a process of its own, as the docs tell a user to rehearse against the wire."""

    def __init__(self, name: str, spec: dict[str, Any]) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"kraftsman-served-{name}-"))
        (self.dir / "cluster.yaml").write_text(json.dumps({
            "apiVersion": API_VERSION, "kind": "KafkaCluster",
            "metadata": {"name": name}, "spec": spec}))
        made = subprocess.run([str(ROOT / ".venv/bin/kraftsman"), "apply", "-f",
                               str(self.dir / "cluster.yaml"), "--state-dir",
                               str(self.dir / "state")], capture_output=True, text=True)
        if made.returncode != 0:
            raise SystemExit(f"kraftsman apply failed: {made.stderr}")
        self.proc = subprocess.Popen(
            [str(ROOT / ".venv/bin/kraftsman"), "cluster", "serve", "--state-dir",
             str(self.dir / "state"), "--listen", "127.0.0.1:0", "--time-scale", "1"],
            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.proc.kill()
            raise SystemExit(f"kraftsman cluster serve did not start: {line!r}")
        self.bootstrap = line.split()[-1]

    def peak_mib(self) -> float:
        return proc_status_mib(self.proc.pid, "VmHWM")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


SERVED: list[Served] = []  # stopped by main() whatever happens to the bench


def cluster_spec(partitions: int, brokers: int = 6) -> dict[str, Any]:
    return {"embedded": {"brokers": [{"id": i, "rack": "abc"[i % 3]} for i in range(brokers)],
                         "topics": [{"name": "orders", "partitions": partitions,
                                     "replicationFactor": 3,
                                     "sizeBytesPerPartition": 10_000_000}]}}


async def latency(api: Api, args: argparse.Namespace, real: Any) -> None:
    op = Operator(api.base, args.tick, mode=args.operator, fsync=args.fsync, real=real)
    await op.start()
    await api.create("KafkaCluster", "demo", cluster_spec(6))
    await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"), timeout=60)
    created: dict[str, float] = {}
    finished: dict[str, float] = {}
    url = api._url("LeaderElection", None)

    restarts = 0
    reasons: list[str] = []
    late: set[str] = set()  # completions first seen in a relist: timed late by the gap
    # The completions are watched by a process of its own (watch_completions.py: why).
    cmd = [sys.executable, str(Path(__file__).with_name("watch_completions.py")), url,
           str(args.elections)]
    if real is not None:
        lay = real.layout
        cmd += ["--ca", str(lay.ca), "--cert", str(lay.admin_cert), "--key", str(lay.admin_key)]
    watch = await asyncio.create_subprocess_exec(*cmd, stdin=subprocess.PIPE,
                                                 stdout=subprocess.PIPE)

    async def read_watch() -> None:
        nonlocal restarts
        assert watch.stdout is not None
        async for raw in watch.stdout:
            word, *rest = raw.decode().split()
            if word == "restart":
                restarts += 1
                reasons.append(raw.decode().strip())
            elif word in ("done", "relisted"):
                finished[rest[0]] = float(rest[1])
                if word == "relisted":
                    late.add(rest[0])

    watcher = asyncio.create_task(read_watch())
    await asyncio.sleep(1.0)  # its interpreter and first watch up before the first create
    t0 = time.monotonic()
    op_cpu0, emu_cpu0 = op.cpu_seconds(), time.process_time()
    server_cpu0 = server_cpu_seconds(real)
    requests0 = api_requests(real)

    async def create(i: int) -> None:
        name = f"le-{i:04d}"
        created[name] = time.monotonic()
        await api.create("LeaderElection", name, {"clusterRef": {"name": "demo"},
                                                  "topics": ["orders"]})

    for start in range(0, args.elections, 50):
        await asyncio.gather(*(create(i) for i in range(start, min(start + 50,
                                                                     args.elections))))
    created_all = time.monotonic() - t0
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(watcher, args.timeout)
    assert watch.stdin is not None
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)  # before it can exit
    watch.stdin.close()  # it exits when its stdin closes
    await watch.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    watch_cpu = (after.ru_utime + after.ru_stime) - (reaped.ru_utime + reaped.ru_stime)
    op_cpu, emu_cpu = op.cpu_seconds() - op_cpu0, time.process_time() - emu_cpu0
    server_cpu = server_cpu_seconds(real) - server_cpu0
    requests = {k: v - requests0.get(k, 0.0) for k, v in api_requests(real).items()}
    lat = [finished[n] - created[n] for n in finished]
    span = max(finished.values()) - t0 if finished else float("nan")
    print(f"LeaderElection create -> Succeeded (tick {args.tick}s, {args.elections} objects, "
          f"operator in a {args.operator}, {args.server} API server)")
    print(f"  completed          {len(finished)}/{args.elections} (the watch restarted "
          f"{restarts} times; {len(late)} completions first seen in a relist, timed late)")
    for reason in reasons:
        print(f"    watch {reason}")
    print(f"  creating all took  {created_all:.2f} s")
    if lat:
        print(f"  latency p50        {statistics.median(lat) * 1000:.0f} ms")
        print(f"  latency p99        {pct(lat, 99) * 1000:.0f} ms")
        print(f"  latency max        {max(lat) * 1000:.0f} ms")
        print(f"  throughput         {len(finished) / span:.1f} completed/s "
              f"(first create -> last completion {span:.1f} s)")
        n = len(finished)
        print(f"  operator CPU       {op_cpu:.1f} s ({op_cpu / n * 1000:.1f} ms per election: "
              f"~{n / op_cpu if op_cpu else float('inf'):.0f} elections/s on one free core)")
        if real is not None:
            print(f"  API server CPU     {server_cpu:.1f} s (kube-apiserver and etcd)")
            busy = sorted(((v, k) for k, v in requests.items() if v >= n / 10), reverse=True)
            print("  API requests       " + ", ".join(
                f"{verb} {res} {v / n:.2f}" for v, (verb, res) in busy) + " per election")
            print(f"  bench CPU          {emu_cpu:.1f} s (this process: the creates), the "
                  f"watch {watch_cpu:.1f} s (its own process)")
        else:
            print(f"  emulator CPU       {emu_cpu:.1f} s ({emu_cpu / n * 1000:.1f} ms per "
                  f"election; this process, with the creates), the watch {watch_cpu:.1f} s")
        load = os.getloadavg()[0]
        print(f"  machine load       {load:.1f} (1-min load average, {os.cpu_count()} cores)")
    await op.stop()


async def memory(api: Api, args: argparse.Namespace, real: Any) -> None:
    op = Operator(api.base, args.tick, mode=args.operator, real=real)
    await op.start()
    await asyncio.sleep(2)
    idle_rss = op.status("VmRSS")
    cpu0, t_idle = op.cpu_seconds(), time.monotonic()
    await asyncio.sleep(args.idle)
    idle_cpu = (op.cpu_seconds() - cpu0) / (time.monotonic() - t_idle)
    t0 = time.monotonic()
    served = SERVED
    for i in range(args.clusters):
        spec = cluster_spec(args.partitions)
        if args.remote:
            served.append(await asyncio.to_thread(Served, f"c{i}", spec))
            spec = {"bootstrapServers": served[-1].bootstrap}
        await api.create("KafkaCluster", f"c{i}", spec)
    for i in range(args.clusters):
        await api.wait("KafkaCluster", f"c{i}", cond_is("Ready", "True"), timeout=args.timeout)
        print(f"  ... cluster c{i} Ready, RSS {op.status('VmRSS'):.0f} MiB", flush=True)
    clusters_ready = op.status("VmRSS")
    t_ready = time.monotonic() - t0
    # A real API server stores no object over 1.5 MiB: a plan of every partition is split
    # into resources of --chunk partitions (as `kraftsman plan` splits its output).
    names = []
    for i in range(args.clusters):
        for start in range(0, args.partitions, args.chunk):
            part = range(start, min(start + args.chunk, args.partitions))
            moves = [{"topic": "orders", "partition": p,
                      "replicas": [(p + 3) % 6, (p + 4) % 6, (p + 5) % 6]} for p in part]
            name = f"move-c{i}-{start // args.chunk}"
            names.append(name)
            await api.create("PartitionReassignment", name, {
                "clusterRef": {"name": f"c{i}"}, "partitions": moves, "additional": True,
                "maxConcurrentMoves": len(moves), "throttleBytesPerSecond": 1000})
    moving_total = 0
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        moving_total = pending = 0
        for name in names:
            st = ((await api.get("PartitionReassignment", name)) or {}).get("status") or {}
            moving_total += st.get("moving", 0)
            pending += (st.get("counts") or {}).get("pending", args.chunk)
        print(f"  ... {moving_total} partitions moving, {pending} pending, "
              f"RSS {op.status('VmRSS'):.0f} MiB", flush=True)
        if pending == 0 and moving_total > 0:
            break  # every move has started (a target equal to the replicas is done at once)
        await asyncio.sleep(1)
    await asyncio.sleep(args.settle)
    moving_rss, peak = op.status("VmRSS"), op.status("VmHWM")
    if os.environ.get("KRAFTSMAN_BENCH_TRACEMALLOC") and args.operator == "thread":
        import tracemalloc
        current, peak_traced = tracemalloc.get_traced_memory()
        print(f"  Python heap (tracemalloc) now {current / 2**20:.0f} MiB, "
              f"peak {peak_traced / 2**20:.0f} MiB")
        snap = tracemalloc.take_snapshot()
        for stat in snap.statistics("lineno")[:25]:
            print(f"  {stat.size / 2**20:7.1f} MiB {stat.count:>9} {stat.traceback[0]}")
    status_sizes, object_sizes = [], []
    for name in names:
        o = await api.get("PartitionReassignment", name) or {}
        status_sizes.append(len(json.dumps(o.get("status") or {})))
        object_sizes.append(len(json.dumps(o)))
    await op.stop()
    served_peaks = [s.peak_mib() for s in served]
    for s in served:
        s.stop()
    total = args.clusters * args.partitions
    kind = ("bootstrapServers clusters (served by `kraftsman cluster serve`)" if args.remote
            else "embedded clusters")
    print(f"Operator memory: {args.clusters} {kind} x {args.partitions} partitions "
          f"(6 brokers, RF 3), {total} partitions in {len(names)} PartitionReassignments, "
          f"operator in a {args.operator}, {args.server} API server)")
    print(f"  operator RSS idle                                  {idle_rss:.0f} MiB")
    print(f"  operator CPU idle (over {args.idle:g} s)                   "
          f"{idle_cpu * 100:.1f}% of a core")
    print(f"  clusters Ready (after {t_ready:.1f} s)                   {clusters_ready:.0f} MiB")
    print(f"  {moving_total} partitions moving                     {moving_rss:.0f} MiB")
    print(f"  operator peak RSS (VmHWM)                          {peak:.0f} MiB "
          f"({100 * (1 - peak / 1024):.0f}% headroom under the Deployment's 1 GiB limit)")
    print(f"  largest PartitionReassignment status / object      {max(status_sizes)} / "
          f"{max(object_sizes)} bytes")
    if served_peaks:
        print(f"  served clusters' peak RSS (VmHWM, not the operator) "
              f"{', '.join(f'{m:.0f}' for m in served_peaks)} MiB")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="bench", required=True)
    lat = sub.add_parser("latency")
    lat.add_argument("--elections", type=int, default=1000)
    lat.add_argument("--tick", type=float, default=1.0)
    lat.add_argument("--timeout", type=float, default=600)
    lat.add_argument("--operator", choices=["process", "thread"], default="process")
    lat.add_argument("--no-fsync", dest="fsync", action="store_false",
                     help="embedded cluster without fsync (tmpfs-like state volume)")
    mem = sub.add_parser("memory")
    mem.add_argument("--clusters", type=int, default=10)
    mem.add_argument("--partitions", type=int, default=10_000)
    mem.add_argument("--tick", type=float, default=1.0)
    mem.add_argument("--settle", type=float, default=5.0)
    mem.add_argument("--chunk", type=int, default=10_000, help="partitions per resource")
    mem.add_argument("--idle", type=float, default=10.0, help="seconds to measure idle CPU")
    mem.add_argument("--operator", choices=["process", "thread"], default="process")
    mem.add_argument("--timeout", type=float, default=900)
    mem.add_argument("--remote", action="store_true",
                     help="bootstrapServers clusters served by `kraftsman cluster serve` "
                          "processes instead of embedded clusters in the operator")
    for sp in (lat, mem):
        sp.add_argument("--server", choices=["real", "kmock"], default="real",
                        help="a real kube-apiserver with etcd (default) or the kmock emulator")
    args = p.parse_args()
    if args.server == "real" and args.operator == "thread":
        p.error("--operator thread runs only against kmock (--server kmock)")
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("kopf").setLevel(logging.CRITICAL)
    fn = latency if args.bench == "latency" else memory
    try:
        asyncio.run((with_real_server if args.server == "real" else with_emulator)(fn, args))
    finally:
        for served in SERVED:
            served.stop()


if __name__ == "__main__":
    main()
