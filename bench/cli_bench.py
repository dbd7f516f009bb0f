"""The command line at scale (issue 10): wall time of the console script, as a user runs it.

    nice -n 10 .venv/bin/python bench/cli_bench.py                  # 1,000 brokers / 100,000
    nice -n 10 .venv/bin/python bench/cli_bench.py --brokers 100 --partitions 10000
    nice -n 10 .venv/bin/python bench/cli_bench.py --kraftsman OTHER/bin/kraftsman   # a baseline

Each step is a subprocess of the ``kraftsman`` console script against one state directory:
create the cluster (``apply -f cluster.yaml``), start a reassignment of every partition from
a YAML plan listing all of them (``apply -f plan.yaml --no-wait``), ``reassignments list``
(every partition in flight is listed), a second ``reassignments list`` (a read must not change
the cluster, so it should cost the same), and ``elect --all-topic-partitions``. Prints the
seconds of each step; asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml


def cluster_yaml(brokers: int, partitions: int, topics: int) -> str:
    per_topic = partitions // topics
    doc = {
        "apiVersion": "kraftsman.io/v1alpha1", "kind": "KafkaCluster",
        "metadata": {"name": "bench"},
        "spec": {"embedded": {
            "brokers": [{"id": b, "rack": f"r{b % 3}"} for b in range(brokers)],
            "topics": [{"name": f"t{i}", "partitions": per_topic, "replicationFactor": 3,
                        "sizeBytesPerPartition": 1_000_000} for i in range(topics)],
        }},
    }
    return yaml.safe_dump(doc)


def plan_yaml(brokers: int, partitions: int, topics: int) -> str:
    """Every partition re-targeted onto three brokers chosen by a fixed rule; the executor
    starts only maxConcurrentMoves of them, so this measures parsing, validation and start."""
    per_topic = partitions // topics
    lines = ["apiVersion: kraftsman.io/v1alpha1", "kind: PartitionReassignment",
             "metadata: {name: everything}", "spec:", "  clusterRef: {name: bench}",
             "  maxConcurrentMoves: 50", "  throttleBytesPerSecond: 50000000", "  partitions:"]
    for t in range(topics):
        for p in range(per_topic):
            base = (t * per_topic + p) * 7
            replicas = [(base + k * 331) % brokers for k in range(3)]
            lines.append(f"    - {{topic: t{t}, partition: {p}, "
                         f"replicas: [{', '.join(map(str, replicas))}]}}")
    return "\n".join(lines) + "\n"


def timed(argv: list[str]) -> tuple[float, float, int, str]:
    """Wall seconds and CPU seconds (user + sys of the child: robust on a loaded machine)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu, proc.returncode, (proc.stdout + proc.stderr)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", type=int, default=1_000)
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--kraftsman", default=str(Path(sys.executable).parent / "kraftsman"),
                    help="the console script to measure (default: this venv's)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cli-bench-"))
    try:
        (work / "cluster.yaml").write_text(cluster_yaml(args.brokers, args.partitions, args.topics))
        (work / "plan.yaml").write_text(plan_yaml(args.brokers, args.partitions, args.topics))
        state = str(work / "state")
        k = [args.kraftsman]
        steps = [
            ("apply cluster.yaml (create)", [*k, "apply", "-f", str(work / "cluster.yaml")]),
            ("apply plan.yaml --no-wait", [*k, "apply", "-f", str(work / "plan.yaml"),
                                           "--no-wait"]),
            ("reassignments list", [*k, "reassignments", "list"]),
            ("reassignments list (again)", [*k, "reassignments", "list"]),
            ("elect --all-topic-partitions", [*k, "elect", "--all-topic-partitions"]),
        ]
        print(f"kraftsman: {args.kraftsman}  PYTHONPATH={os.environ.get('PYTHONPATH', '')}")
        print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(f"cluster: {args.brokers} brokers, {args.partitions} partitions in {args.topics} "
              f"topics; plan.yaml {(work / 'plan.yaml').stat().st_size / 1e6:.1f} MB")
        for name, argv in steps:
            seconds, cpu, code, out = timed([*argv, "--state-dir", state])
            first = out.strip().splitlines()[:1]
            print(f"{name:<30} wall {seconds:7.2f} s  cpu {cpu:7.2f} s  exit {code}  "
                  f"{first[0][:70] if first else ''}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
