"""What the ``kafka`` backend's ``describe_partitions`` of one resource's partitions costs
the operator: a ``kraftsman cluster serve`` (a process of its own, as in ``operator_bench.py
memory --remote``) with one topic of ``--partitions`` partitions, described ``--chunk``
partitions at a time (a contiguous block, as a resource's chunk of moves) by the paged
DescribeTopicPartitions path and by the Metadata path, alternately in the same run:
tracemalloc's peak (MiB) of one call, CPU and wall seconds of this process of another
(untraced), the median of ``--rounds`` rounds each.

    .venv/bin/python bench/describe_probe.py --partitions 100000 --chunk 5000
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.operator_bench import Served, cluster_spec
from controller_core.backends.kafka_admin import RetryPolicy, open_kafka_admin
from controller_core.model import TopicPartition


def measure(admin: Any, wanted: list[TopicPartition], paged: bool
            ) -> tuple[float, float, float, int]:
    """(traced peak MiB, CPU s, wall s, partitions described): the peak from a call under
    tracemalloc, the times from one without it (tracing slows every allocation)."""
    admin._offers = (lambda key: True) if paged else (lambda key: False)
    tracemalloc.start()
    admin.describe_partitions(partitions=wanted)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    cpu, wall = time.process_time(), time.perf_counter()
    got = admin.describe_partitions(partitions=wanted)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return peak, cpu, wall, len(got)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--chunk", type=int, default=5_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    served = Served("probe", cluster_spec(args.partitions))
    try:
        admin = open_kafka_admin(served.bootstrap, retry=RetryPolicy(total_seconds=120,
                                                                     request_timeout_ms=60_000))
        try:
            start = args.partitions // 2
            wanted = [TopicPartition("orders", i) for i in range(start, start + args.chunk)]
            results: dict[str, list[tuple[float, float, float, int]]] = {
                "paged": [], "metadata": []}
            for _ in range(args.rounds):
                for name in results:
                    results[name].append(measure(admin, wanted, name == "paged"))
            for name, runs in results.items():
                assert all(r[3] == args.chunk for r in runs), runs
                print(f"{name:9} {args.chunk} of {args.partitions} partitions: traced peak "
                      f"{statistics.median(r[0] for r in runs):6.1f} MiB, CPU "
                      f"{statistics.median(r[1] for r in runs):5.2f} s, wall "
                      f"{statistics.median(r[2] for r in runs):5.2f} s per call "
                      f"(median of {len(runs)})")
        finally:
            admin.close()
    finally:
        served.stop()
        shutil.rmtree(served.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
