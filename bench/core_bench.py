"""Controller-core figures at scale (issue 2). Prints figures; asserts nothing about speed.

    .venv/bin/python bench/core_bench.py          # 1,000,000 partitions / 1,000 brokers
    .venv/bin/python bench/core_bench.py --partitions 100000 --brokers 100 --moves 10000

Goals: preferred election over all partitions <= 2 s; validating and starting a
100,000-partition reassignment <= 2 s; driving it to completion in simulated time <= 5 s
of wall time; restart (snapshot + log replay) <= 5 s; resident memory <= 2 GiB.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller_core.config import EmbeddedClusterSpec
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.model import ElectionType
from controller_core.orchestration.reassignment import (
    Limits,
    ReassignmentExecutor,
    ReassignmentPlan,
)


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Timed:
    """Wall and CPU seconds of a step (``NAME_s`` and ``NAME_cpu_s``): on a shared machine the
    CPU seconds are the steadier figure."""

    def __init__(self, figures: dict[str, float], name: str) -> None:
        self.figures, self.name = figures, name

    def __enter__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def __exit__(self, *exc: object) -> None:
        self.figures[f"{self.name}_s"] = time.perf_counter() - self.wall
        self.figures[f"{self.name}_cpu_s"] = time.process_time() - self.cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=1_000_000)
    ap.add_argument("--brokers", type=int, default=1_000)
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--moves", type=int, default=100_000)
    ap.add_argument("--partition-bytes", type=int, default=50_000_000)
    ap.add_argument("--state-dir", type=Path, default=None)
    ap.add_argument("--poll-seconds", type=float, default=10.0,
                    help="simulated seconds between executor passes (Cruise Control: 10)")
    args = ap.parse_args()
    figures: dict[str, float] = {}
    per_topic = args.partitions // args.topics
    spec = EmbeddedClusterSpec.model_validate({
        "brokers": [{"id": i, "rack": f"r{i % 10}"} for i in range(args.brokers)],
        "topics": [{"name": f"t{i:04d}", "partitions": per_topic, "replicationFactor": 3,
                    "sizeBytesPerPartition": args.partition_bytes} for i in range(args.topics)],
        "replicationBytesPerSecond": 100_000_000,
        "snapshotEveryRecords": 10_000_000,
    })
    state = args.state_dir or Path(tempfile.mkdtemp(prefix="kraftsman-bench-"))

    with Timed(figures, "create"):
        c = EmbeddedCluster.open(state, spec)
    partitions = c.image.partition_count()

    # Leave leadership off-preferred on some partitions, as rolling restarts do.
    t = time.perf_counter()
    for b in range(10):
        c.fail_broker(b)
    c.advance(10)
    for b in range(10):
        c.restore_broker(b)
    c.advance(30)
    figures["setup_rolling_restart_s"] = time.perf_counter() - t

    with Timed(figures, "preferred_election_all"):
        out = c.elect_leaders(ElectionType.PREFERRED, None)
    figures["elected"] = sum(1 for r in out.results.values() if r.ok)
    figures["election_attempted"] = len(out.attempted)

    # A 100,000-partition reassignment: move one replica of each partition to another broker.
    described = c.describe_partitions(topics=[f"t{i:04d}" for i in range(args.topics)])
    moves = []
    for d in described[: args.moves]:
        new = (d.replicas[-1] + 7) % args.brokers
        while new in d.replicas:
            new = (new + 1) % args.brokers
        moves.append((d.tp, [*d.replicas[:-1], new]))
    del described
    plan, _ = ReassignmentPlan.from_moves(moves, limits=Limits(None, args.moves))
    with Timed(figures, "validate_and_start"):
        ex = ReassignmentExecutor(c, plan)
        problems = ex.start()  # validates the whole plan, then starts it
        ex.step()
    assert not problems, problems[:3]
    figures["moving_after_start"] = len(ex.moving)

    sim_start = c.now
    with Timed(figures, "drive_to_completion_wall"):
        while True:
            c.advance(args.poll_seconds)
            p = ex.step()
            if p.phase.terminal:
                break
    figures["drive_to_completion_simulated_s"] = c.now - sim_start
    figures["moved"] = p.done
    figures["bytes_moved_gb"] = p.bytes_moved / 1e9

    with Timed(figures, "snapshot"):
        c.snapshot()
    # Records after the snapshot are replayed from the log on restart.
    c.elect_leaders(ElectionType.PREFERRED, None)
    c.close()
    del c, ex, plan, moves
    with Timed(figures, "restart"):
        c2 = EmbeddedCluster.open(state, spec)
    assert c2.image.partition_count() == partitions
    figures["partitions"] = partitions
    figures["brokers"] = args.brokers
    figures["max_rss_mib"] = rss_mib()
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v
                      for k, v in figures.items()}, indent=2))


if __name__ == "__main__":
    main()
