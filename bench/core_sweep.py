"""How the controller core's cost grows (issue 22): bench/core_bench.py at several sizes.

    .venv/bin/python bench/core_sweep.py                       # 10^4, 10^5, 10^6 x 100, 1,000
    .venv/bin/python bench/core_sweep.py --partitions 10000 100000 --brokers 100

Each size runs in its own process (a fresh heap: peak RSS is per size), with a move of a
tenth of the partitions. Prints every figure per size, then per step the exponent of its
growth between consecutive partition counts (time ~ n^k) beside n log n's over the same
interval; a step growing faster than n log n is marked. Times are CPU seconds
(bench/core_bench.py's ``*_cpu_s``). A benchmark, not a timed test.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

BENCH = Path(__file__).resolve().parent / "core_bench.py"
# CPU seconds of each step (steadier than wall time on a shared machine), and peak RSS
STEPS = ["create_cpu_s", "preferred_election_all_cpu_s", "validate_and_start_cpu_s",
         "drive_to_completion_wall_cpu_s", "snapshot_cpu_s", "restart_cpu_s", "max_rss_mib"]
SLACK = 0.15  # exponent allowed above n log n's before a step is marked (timing noise)


def run(python: str, partitions: int, brokers: int) -> dict[str, float]:
    out = subprocess.run(
        [python, str(BENCH), "--partitions", str(partitions), "--brokers", str(brokers),
         "--moves", str(max(1, partitions // 10))],
        check=True, capture_output=True, text=True).stdout
    figures: dict[str, float] = json.loads(out[out.index("{"):])
    return figures


def exponent(n1: int, t1: float, n2: int, t2: float) -> float | None:
    if t1 <= 0 or t2 <= 0:
        return None
    return math.log(t2 / t1) / math.log(n2 / n1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--brokers", type=int, nargs="+", default=[100, 1_000])
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    sizes = sorted(args.partitions)
    for brokers in args.brokers:
        rows = {}
        for n in sizes:
            rows[n] = run(args.python, n, brokers)
            print(f"brokers {brokers} partitions {n}: " + ", ".join(
                f"{k} {rows[n][k]}" for k in STEPS), flush=True)
        print(f"\nbrokers {brokers}: figure per size, then growth exponent k (time ~ n^k)")
        print(f"{'step':<30}" + "".join(f"{n:>12,}" for n in sizes)
              + "".join(f"{'k ' + f'{a:.0e}->{b:.0e}':>18}" for a, b in pairwise(sizes)))
        for step in STEPS:
            line = f"{step:<30}" + "".join(f"{rows[n][step]:>12.3f}" for n in sizes)
            for a, b in pairwise(sizes):
                k = exponent(a, rows[a][step], b, rows[b][step])
                nlogn = exponent(a, a * math.log(a), b, b * math.log(b))
                assert nlogn is not None
                mark = "" if k is None or k <= nlogn + SLACK else " >nlogn"
                line += f"{'-' if k is None else f'{k:.2f}':>11} ({nlogn:.2f}){mark:<7}"
            print(line)
        print()


if __name__ == "__main__":
    main()
