"""Benchmark of `kraftsman plan`: time at scale and quality on a skewed cluster.

    .venv/bin/python bench/plan_bench.py --case 100000x100 --case 1000000x1000
    .venv/bin/python bench/plan_bench.py --case 20000x100 --goal "remove-brokers 97" --balance

For each case (partitions x brokers, RF 3, 3 racks, the first 20% of brokers attracting
``1 + skew`` times the replicas) it prints: snapshot generation and validation time, plan
time on Spark (``--master``, default local[2]), then max/mean after of disk, replicas and
leaders, and bytes moved over the lower bound (the sum of each broker's disk above the
mean) — for the planner and for the kafka-reassign-partitions --generate baseline.
With ``--goal`` (add-brokers/remove-brokers, optionally ``--balance``) it plans that goal
instead and compares bytes moved with the report's lower bound (each staying broker's disk
above its target plus everything on the removed brokers: "drain and balance"); added
brokers are made empty in the generated cluster. ``--cli`` times what a user runs instead: the
`kraftsman plan` console script as a subprocess on each generated snapshot (``--repeat``
times), from the command to its exit — imports, Spark start, plan, report and picture —
with the CPU seconds of its whole process tree.

    .venv/bin/python bench/plan_bench.py --cli --case 1000x100 --repeat 5

``--sweep`` runs ``--cli`` over partitions 10^4, 10^5, 10^6 on 100 and on 1,000 brokers (or
over the ``--case``s given) and prints, per broker count, each step's median wall and CPU
seconds and the exponent of their growth between steps (ln(t2/t1) / ln(n2/n1): 1 is
linear). ``--engine`` is passed to `kraftsman plan` (auto: the driver up to 100,000
partitions, Spark above; spark: Spark throughout).

    .venv/bin/python bench/plan_bench.py --sweep --repeat 1
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from plan_baseline import generate

from controller_core.planning.goals import parse_goal
from controller_core.planning.objective import (
    DISK,
    LEADERS,
    REPLICAS,
    compute_loads,
    rate,
)
from controller_core.planning.render import RenderOptions, render
from controller_core.planning.report import lower_bound_bytes, max_over_mean, write_chart
from controller_core.planning.snapshot import read_snapshot, write_snapshot
from controller_core.planning.spark_job import PlanOptions, make_session, run_plan
from controller_core.planning.synthetic import make_snapshot


def tree_cpu_seconds(root: int | None = None) -> float:
    """CPU seconds (user + system, with reaped children) of this process and every process
    under it: the Spark JVM and its Python workers. Unlike wall time it hardly depends on
    what else runs on a shared machine; a quiet 2-core machine needs at least half of it."""
    return sum(tree_cpu(os.getpid() if root is None else root, reaped=True).values())


def run_cli(snapshot: Path, goal: list[str], balance: bool, master: str | None,
            engine: str | None = None) -> tuple[float, float, dict[str, Any]]:
    """Wall and CPU seconds of one `kraftsman plan` run, as a user starts it, and the
    summary of its report.json. The CPU of the JVM and the Python workers is sampled while
    they live (the console script does not reap them, so the kernel's child accounting
    misses them)."""
    out = Path(tempfile.mkdtemp(prefix="plan-bench-")) / "out"
    cmd = [str(Path(sys.executable).with_name("kraftsman")), "plan", "--snapshot",
           str(snapshot), "--goal", *goal, "--out", str(out)]
    cmd += ["--balance"] if balance else []
    cmd += ["--master", master] if master else []
    cmd += ["--engine", engine] if engine else []
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen: dict[int, float] = {}
    while proc.poll() is None:
        for pid, cpu in tree_cpu(proc.pid).items():
            seen[pid] = max(seen.get(pid, 0.0), cpu)
        time.sleep(0.2)
    wall = time.monotonic() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"kraftsman plan exited {proc.returncode}:\n{err[-2000:]}")
    report = json.loads((out / "report.json").read_text())["summary"]
    shutil.rmtree(out.parent, ignore_errors=True)
    return wall, sum(seen.values()), report


def tree_cpu(root: int, reaped: bool = False) -> dict[int, float]:
    """CPU seconds (user + system; with ``reaped``, also of the children each one waited
    for) of each process in the tree under ``root``."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
        cpu[int(entry)] = sum(int(x) for x in fields[11:15 if reaped else 13]) / tick
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        out[pid] = cpu.get(pid, 0.0)
        todo += children.get(pid, [])
    return out


def cli_main(args: argparse.Namespace, goal_words: list[str]) -> list[dict[str, Any]]:
    rows = []
    for case in args.case or ["1000x100"]:
        n_p, n_b = (int(x) for x in case.lower().split("x"))
        d = args.workdir / f"snap-{n_p}-{n_b}"
        goal = parse_goal(goal_words, args.balance)
        empty = goal.brokers if goal.kind == "add-brokers" else ()
        write_snapshot(make_snapshot(brokers=n_b, partitions=n_p, racks=3, seed=args.seed,
                                     skew=args.skew, topics=max(1, n_p // 1000),
                                     size_sigma=1.0, empty=empty), d, overwrite=True)
        runs = []
        for i in range(args.repeat):
            wall, cpu, report = run_cli(d, goal_words, args.balance, args.master_cli,
                                        args.engine)
            la = os.getloadavg()[0]
            runs.append({"wall_s": wall, "cpu_s": cpu, "load_average": la})
            print(f"{case} {' '.join(goal_words)}: kraftsman plan run {i + 1}: {wall:.1f}s wall, "
                  f"{cpu:.1f} CPU s, load average {la:.1f} on {os.cpu_count()} cores")
            if i == 0:
                mom = report["maxOverMean"]
                print("  max/mean before -> after: " + ", ".join(
                    f"{k} {mom[k]['before']:.3f} -> {mom[k]['after']:.3f}"
                    for k in ("disk_bytes", "replicas", "leaders")))
                ratio = report["bytesToMoveOverLowerBound"]
                print(f"  {report['partitionsInPlan']} partitions in the plan, "
                      f"{report['replicasToMove']} replicas to copy, "
                      + (f"{ratio:.3f}x" if ratio is not None else "n/a (no lower bound)")
                      + " the bytes lower bound, "
                      f"{len(report['violations'])} violations, {len(report['rounds'])} rounds")
                runs[-1]["report"] = report
            sys.stdout.flush()
        med = statistics.median(r["wall_s"] for r in runs)
        print(f"{case}: median {med:.1f}s wall over {len(runs)} runs (min "
              f"{min(r['wall_s'] for r in runs):.1f}s, max {max(r['wall_s'] for r in runs):.1f}s)")
        rows.append({"case": case, "goal": " ".join(goal_words), "runs": runs,
                     "median_wall_s": med,
                     "median_cpu_s": statistics.median(r["cpu_s"] for r in runs)})
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1))
    return rows


SWEEP = ["10000x100", "100000x100", "1000000x100", "10000x1000", "100000x1000",
         "1000000x1000"]


def growth(rows: list[dict[str, Any]]) -> list[str]:
    """Per broker count: each step's median wall and CPU and the exponent of their growth
    in partitions from the step before."""
    import math

    lines = []
    by_brokers: dict[int, list[tuple[int, float, float]]] = {}
    for r in rows:
        n_p, n_b = (int(x) for x in r["case"].lower().split("x"))
        by_brokers.setdefault(n_b, []).append((n_p, r["median_wall_s"], r["median_cpu_s"]))
    for n_b, steps in sorted(by_brokers.items()):
        lines.append(f"{n_b} brokers:   partitions      wall  exponent     CPU  exponent")
        prev: tuple[int, float, float] | None = None
        for n_p, wall, cpu in sorted(steps):
            if prev is None:
                ew = ec = "-"
            else:
                span = math.log(n_p / prev[0])
                ew = f"{math.log(wall / prev[1]) / span:.2f}"
                ec = f"{math.log(cpu / prev[2]) / span:.2f}"
            lines.append(f"{'':13}{n_p:>11,} {wall:8.1f}s {ew:>9} {cpu:6.1f}s {ec:>9}")
            prev = (n_p, wall, cpu)
    return lines


def lower_bound(loads: dict[int, list[int]]) -> float:
    mean = sum(v[DISK] for v in loads.values()) / len(loads)
    return sum(max(0.0, v[DISK] - mean) for v in loads.values())


def quality(before: dict[int, list[int]], after: dict[int, list[int]], moved: int
            ) -> dict[str, float]:
    ids = sorted(after)
    lb = lower_bound(before)
    return {"disk": max_over_mean(after, ids, DISK),
            "replicas": max_over_mean(after, ids, REPLICAS),
            "leaders": max_over_mean(after, ids, LEADERS),
            "bytes_moved": moved, "lower_bound": lb, "moved_over_lb": moved / lb if lb else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", action="append", default=[], help="PARTITIONSxBROKERS")
    ap.add_argument("--skew", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--workdir", type=Path, default=Path("bench/results/plan"))
    ap.add_argument("--json", type=Path, default=None, help="also write figures here")
    ap.add_argument("--png", type=Path, default=None,
                    help="write each case's report.png into this directory (to look at)")
    ap.add_argument("--goal", default="rebalance", help='e.g. "remove-brokers 97"')
    ap.add_argument("--balance", action="store_true", help="with --goal add/remove-brokers")
    ap.add_argument("--cli", action="store_true",
                    help="time the kraftsman plan console script instead (see above)")
    ap.add_argument("--repeat", type=int, default=3, help="--cli runs per case")
    ap.add_argument("--master-cli", default=None,
                    help="--master for the --cli runs (default: the CLI's own, local[*])")
    ap.add_argument("--engine", default=None, choices=("auto", "spark", "driver"),
                    help="--engine of the --cli runs (default: the CLI's own, auto)")
    ap.add_argument("--sweep", action="store_true",
                    help="--cli over 10^4..10^6 partitions on 100 and 1,000 brokers, with "
                         "the exponent of growth (see above)")
    args = ap.parse_args()
    if args.sweep:
        args.case = args.case or SWEEP
        rows = cli_main(args, args.goal.split())
        print("\n".join(["", "scaling (median of --repeat runs):", *growth(rows)]))
        return
    if args.cli:
        cli_main(args, args.goal.split())
        return
    cases = args.case or ["100000x100"]
    goal = parse_goal(args.goal.split(), args.balance)
    t0, c0 = time.monotonic(), tree_cpu_seconds()
    spark = make_session(args.master, {"spark.driver.memory": "6g"})
    t_start, cpu_start = time.monotonic() - t0, tree_cpu_seconds() - c0
    print(f"Spark session start {t_start:.1f}s (CPU {cpu_start:.1f}s, {args.master})")
    out = []
    for case in cases:
        n_p, n_b = (int(x) for x in case.lower().split("x"))
        d = args.workdir / f"snap-{n_p}-{n_b}"
        t0 = time.monotonic()
        empty = goal.brokers if goal.kind == "add-brokers" else ()
        snap = make_snapshot(brokers=n_b, partitions=n_p, racks=3, seed=args.seed,
                             skew=args.skew, topics=max(1, n_p // 1000), size_sigma=1.0,
                             empty=empty)
        write_snapshot(snap, d, overwrite=True)
        t_gen = time.monotonic() - t0
        t0 = time.monotonic()
        snap = read_snapshot(d)
        t_read = time.monotonic() - t0
        t0, c0 = time.monotonic(), tree_cpu_seconds()
        res = run_plan(spark, d, snap, goal, PlanOptions(seed=args.seed))
        t_plan, cpu_plan = time.monotonic() - t0, tree_cpu_seconds() - c0
        t0 = time.monotonic()
        resources = render(res.moves, RenderOptions("bench", goal.describe()))
        t_render = time.monotonic() - t0
        if args.png:
            args.png.mkdir(parents=True, exist_ok=True)
            write_chart(args.png / f"report-{case}-{goal.describe().replace(' ', '_')}.png", res)
        ours = quality(res.loads_before, res.loads_after, res.bytes_moved)
        stay = sorted(res.eligible)
        ours.update(disk=max_over_mean(res.loads_after, stay, DISK),
                    replicas=max_over_mean(res.loads_after, stay, REPLICAS),
                    leaders=max_over_mean(res.loads_after, stay, LEADERS))
        if goal.kind != "rebalance":
            lb = lower_bound_bytes(res)
            ours.update(lower_bound=lb, moved_over_lb=res.bytes_moved / lb if lb else 0.0)

        t0 = time.monotonic()
        pt = snap.partitions
        brokers = [(b.id, b.rack) for b in snap.brokers]
        base = generate(brokers, pt.topic, pt.partition, [len(r) for r in pt.replicas],
                        args.seed)
        bin_ = [rate(x) for x in pt.bytes_in_per_second]
        bout = [rate(x) for x in pt.bytes_out_per_second]
        base_loads = compute_loads([b for b, _ in brokers], base, [r[0] for r in base],
                                   pt.size_bytes, bin_, bout)
        moved = sum(s * len(set(new) - set(old))
                    for s, old, new in zip(pt.size_bytes, pt.replicas, base, strict=True))
        t_base = time.monotonic() - t0
        theirs = quality(res.loads_before, base_loads, moved)
        if goal.kind != "rebalance":
            theirs = {k: float("nan") for k in theirs}  # --generate knows no such goal
        before = {"disk": max_over_mean(res.loads_before, sorted(res.loads_before), DISK),
                  "replicas": max_over_mean(res.loads_before, sorted(res.loads_before),
                                            REPLICAS),
                  "leaders": max_over_mean(res.loads_before, sorted(res.loads_before), LEADERS)}
        row = {"case": case, "goal": goal.describe(), "spark_start_s": t_start,
               "load_average": os.getloadavg(), "partitions": n_p, "brokers": n_b,
               "generate_s": t_gen,
               "read_validate_s": t_read, "plan_s": t_plan, "plan_cpu_s": cpu_plan,
               "render_s": t_render,
               "baseline_s": t_base, "rounds": len(res.rounds),
               "partitions_in_plan": len(res.moves), "replicas_moved": res.replicas_moved,
               "resources": len(resources), "violations": len(res.violations),
               "before": before, "planner": ours, "baseline": theirs}
        out.append(row)
        print(f"\n== {goal.describe()}: {n_p} partitions / {n_b} brokers, RF 3, 3 racks, "
              f"skew {args.skew}, {args.master}")
        print(f"first case: Spark start + read + plan {t_start + t_read + t_plan:.1f}s"
              if case == cases[0] else f"read + plan {t_read + t_plan:.1f}s")
        la = os.getloadavg()
        print(f"load average (1/5/15 min) {la[0]:.1f} {la[1]:.1f} {la[2]:.1f} on "
              f"{os.cpu_count()} cores")
        print(f"generate {t_gen:.1f}s  read+validate {t_read:.1f}s  plan {t_plan:.1f}s "
              f"({len(res.rounds)} rounds; CPU {cpu_plan:.1f}s: driver, JVM and Python workers)"
              f"  render {t_render:.1f}s  baseline {t_base:.1f}s")
        print(f"before: disk {before['disk']:.3f}  replicas {before['replicas']:.3f}  "
              f"leaders {before['leaders']:.3f}")
        print("                 disk max/mean  replicas  leaders  bytes moved / lower bound")
        for name, q in (("planner", ours), ("kafka --generate", theirs)):
            print(f"{name:>16}  {q['disk']:13.3f}  {q['replicas']:8.3f}  {q['leaders']:7.3f}  "
                  f"{q['moved_over_lb']:.3f} ({q['bytes_moved']:.3e} / {q['lower_bound']:.3e})")
        print(f"plan: {len(res.moves)} partitions, {res.replicas_moved} replicas, "
              f"{len(resources)} resources, {len(res.violations)} violations")
        print("time: " + "  ".join(f"{k} {v:.1f}s" for k, v in res.timings.items()))
        for r in res.rounds:
            print(f"  {r.phase:8} round {r.round:2}: sources {r.sources:4} candidates "
                  f"{r.candidates:7} accepted {r.accepted:6}  {r.seconds:6.1f}s "
                  f"(driver {r.driver_seconds:.1f}s)")
        sys.stdout.flush()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))
    spark.stop()


if __name__ == "__main__":
    main()
