"""Where the memory of many moves in flight goes, below the operator: one embedded cluster,
a topic of P partitions, executors of C moves each (as the operator's PartitionReassignments
of C partitions), every move started, a few passes; the traced Python heap by allocation
site (tracemalloc) and the process's resident size.

    .venv/bin/python bench/moves_memory_bench.py --partitions 100000 --chunk 5000 --steps 5

``--runs`` (without tracemalloc) prints, for each executor's step of the first pass, the
resident size before it, its peak during it (the kernel's high-water mark, reset before the
step) and its CPU seconds, freed memory handed back to the kernel between steps as the
operator does (``malloc_trim``): where a pass's peak comes from.

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import tempfile
import time
import tracemalloc
from pathlib import Path


def status(key: str) -> str:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return f"{int(line.split()[1]) / 1024:.0f} MiB"
    return "?"


def kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    return 0


def trimmed_rss() -> float:
    """Resident MiB once the collector ran and glibc handed freed memory back."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return kib("VmRSS") / 1024


def report(what: str) -> None:
    gc.collect()
    traced = ""
    if tracemalloc.is_tracing():
        current, peak = tracemalloc.get_traced_memory()
        traced = f"traced {current / 2**20:5.0f} MiB (peak {peak / 2**20:5.0f}), "
    print(f"  {what:28s} {traced}RSS {status('VmRSS')}, peak RSS {status('VmHWM')}",
          flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--partitions", type=int, default=100_000)
    p.add_argument("--chunk", type=int, default=5_000, help="moves per executor")
    p.add_argument("--steps", type=int, default=5, help="passes of every executor, 1 s apart")
    p.add_argument("--top", type=int, default=12, help="allocation sites to list")
    p.add_argument("--snapshot-bytes", type=int, default=None,
                   help="the cluster's snapshotEveryBytes (default: the spec's, Kafka's 20 MiB)")
    p.add_argument("--no-trace", dest="trace", action="store_false",
                   help="without tracemalloc (which slows the passes several times)")
    p.add_argument("--runs", action="store_true",
                   help="each executor's step of the first pass: resident size, its peak, CPU")
    args = p.parse_args()
    if args.runs:
        args.trace = False
    if args.trace:
        tracemalloc.start()
    from controller_core.config import EmbeddedClusterSpec
    from controller_core.embedded.cluster import EmbeddedCluster
    from controller_core.model import TopicPartition
    from controller_core.orchestration.reassignment import (
        Limits,
        ReassignmentExecutor,
        ReassignmentPlan,
    )

    n = args.partitions
    spec = EmbeddedClusterSpec.model_validate({
        "brokers": [{"id": i, "rack": "abc"[i % 3]} for i in range(6)],
        "topics": [{"name": "orders", "partitions": n, "replicationFactor": 3,
                    "sizeBytesPerPartition": 10_000_000}],
        **({"snapshotEveryBytes": args.snapshot_bytes} if args.snapshot_bytes else {})})
    print(f"{n} partitions, executors of {args.chunk} moves (throttle 1000 B/s: they stay "
          "in flight)")
    c = EmbeddedCluster.open(Path(tempfile.mkdtemp(prefix="moves-memory-")), spec, fsync=False)
    report("cluster created")
    executors = []
    for start in range(0, n, args.chunk):
        moves = [(TopicPartition("orders", q), ((q + 3) % 6, (q + 4) % 6, (q + 5) % 6))
                 for q in range(start, min(n, start + args.chunk))]
        plan, _ = ReassignmentPlan.from_moves(moves, limits=Limits(1000, args.chunk),
                                              elect_preferred_leaders=False, additional=True)
        ex = ReassignmentExecutor(c, plan)
        ex.start()
        executors.append(ex)
    report(f"{len(executors)} executors started")
    cpu = time.process_time()
    for step in range(args.steps):
        c.advance(1.0)
        for i, ex in enumerate(executors):
            if not (args.runs and step == 0):
                ex.step()
                continue
            rss, t = trimmed_rss(), time.process_time()
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to VmRSS
            ex.step()
            hwm = kib("VmHWM") / 1024
            print(f"  pass 1, run {i + 1:2d}: RSS {rss:4.0f} MiB, peak {hwm:4.0f} MiB "
                  f"(+{hwm - rss:3.0f}), {time.process_time() - t:5.2f} CPU s", flush=True)
    cpu = time.process_time() - cpu
    report(f"after {args.steps} passes")
    print(f"  {sum(len(ex.moving) for ex in executors)} moves in flight; the passes took "
          f"{cpu:.1f} s CPU")
    if not args.trace:
        return
    for stat in tracemalloc.take_snapshot().statistics("lineno")[:args.top]:
        print(f"  {stat.size / 2**20:7.1f} MiB {stat.count:>9} {stat.traceback[0]}")


if __name__ == "__main__":
    main()
