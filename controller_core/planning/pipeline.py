"""Snapshot in, plan directory out — every check before Spark starts, no partial output.

The output directory is built in a temporary sibling and renamed into place at the end::

    OUT/reassignments/001-<plan>-001.yaml ...   PartitionReassignment resources, in order
    OUT/report.md, OUT/report.json, OUT/report.png
    OUT/plan.json       the same moves as kafka-reassign-partitions JSON
    OUT/rollback.json   the current assignment of those partitions (to go back)
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller_core.gc_pause import gc_paused
from controller_core.planning.goals import Goal, GoalError, check_goal, parse_goal
from controller_core.planning.machine import Machine, local_cores
from controller_core.planning.options import PlanOptions
from controller_core.planning.render import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_PARTITIONS,
    RenderedResource,
    RenderOptions,
    cluster_name_problem,
    kafka_tool_json,
    render,
)
from controller_core.planning.report import markdown, summary, write_chart, write_json
from controller_core.planning.result import PlanResult
from controller_core.planning.snapshot import Snapshot, read_snapshot, replace_dir
from controller_core.planning.spark_job import check_java, make_session, run_plan

RESOURCES_DIR = "reassignments"
# ``engine="auto"`` plans a local master's snapshot of up to this many partitions on the
# driver (:mod:`.local_table`): the same plan, without starting a JVM. Larger ones run on
# Spark, whose workers score the table in parallel and hold it outside this process —
# unless Spark has at most DRIVER_MAX_CORES cores and the table fits in memory: the driver's
# one core then wins (10^6 partitions on 1,000 brokers: 52.4 and 54.3 s on the driver
# against 120.9 s on ``local[2]``, 2026-11-29, quiet machine; more cores were not measured).
DRIVER_PLAN_PARTITIONS = 100_000
DRIVER_MAX_CORES = 2
# The driver engine's peak resident size for a table of n partitions, over-estimated from
# the same runs (1.86-1.90 GiB at 10^6 partitions of 3 replicas): base + n * per partition.
DRIVER_BASE_BYTES = 128 << 20
DRIVER_BYTES_PER_PARTITION = 2_100
ENGINES = ("auto", "spark", "driver")
# Spark settings that only size Spark, for when it runs: the operator's planner Job passes
# the heap its memory limit allows, which is no request to start a JVM for a small plan.
SIZING_CONFS = frozenset({"spark.driver.memory"})


class OutputError(Exception):
    """The output directory cannot be written as asked."""


@dataclass(slots=True)
class PlanRequest:
    snapshot_dir: Path
    goal: list[str]
    out: Path
    balance: bool = False
    master: str = "local[*]"
    seed: int = 0
    throttle: int | None = 50_000_000
    log_dir_throttle: int | None = None  # None: the resources' throttle caps those copies too
    max_concurrent_moves: int = 10
    max_concurrent_moves_per_broker: int | None = None
    cluster_name: str | None = None
    spark_conf: dict[str, str] = field(default_factory=dict)
    max_bytes: int = DEFAULT_MAX_BYTES
    max_partitions: int = DEFAULT_MAX_PARTITIONS
    force: bool = False
    # where the rounds run: "spark", "driver" (this process) or "auto" (see on_driver)
    engine: str = "auto"


@dataclass(slots=True)
class PlanOutput:
    out: Path
    result: PlanResult
    resources: list[RenderedResource]
    summary: dict[str, Any]
    # the rounds ran on Spark (False: on the driver, no JVM was started)
    spark: bool = True


def on_driver(req: PlanRequest, partitions: int, machine: Machine | None = None) -> bool:
    """Whether the rounds run in this process: asked for, or ``auto`` with a local master,
    no Spark settings but sizing ones (:data:`SIZING_CONFS`) and either a small table
    (:data:`DRIVER_PLAN_PARTITIONS`) or a master of at most :data:`DRIVER_MAX_CORES` cores
    and a table whose estimated peak fits in the memory this process may take (``machine``,
    default :meth:`Machine.here`; unknown memory: Spark)."""
    if req.engine != "auto":
        return req.engine == "driver"
    if not set(req.spark_conf) <= SIZING_CONFS or not req.master.strip().startswith("local"):
        return False
    if partitions <= DRIVER_PLAN_PARTITIONS:
        return True
    machine = Machine.here() if machine is None else machine
    spark_cores = local_cores(req.master, machine.cores)
    return spark_cores is not None and spark_cores <= DRIVER_MAX_CORES and \
        machine.memory is not None and \
        DRIVER_BASE_BYTES + partitions * DRIVER_BYTES_PER_PARTITION <= machine.memory


def prepare(req: PlanRequest) -> tuple[Snapshot, Goal, bool]:
    """Every check that needs no Spark: snapshot, goal, output directory, Java (when the
    plan runs on Spark); also whether the rounds run on the driver (:func:`on_driver`)."""
    if req.engine not in ENGINES:
        raise GoalError([f"engine {req.engine!r}: expected one of {', '.join(ENGINES)}"])
    goal = parse_goal(req.goal, req.balance)
    snapshot = read_snapshot(req.snapshot_dir)
    problems = check_goal(goal, snapshot)
    if problems:
        raise GoalError(problems)
    name_problem = cluster_name_problem(req.cluster_name or snapshot.cluster_name)
    if name_problem:
        raise GoalError([name_problem])
    out = req.out
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not req.force:
        raise OutputError(f"--out {out}: exists and is not empty; choose a new directory or "
                          "pass --force to replace it")
    driver = on_driver(req, len(snapshot.partitions))
    if not driver:
        check_java()
    return snapshot, goal, driver


@gc_paused
def run(req: PlanRequest, session: Callable[[], Any] | None = None) -> PlanOutput:
    """Plan as asked; ``session`` (a SparkSession factory) forces the rounds onto Spark.

    The cycle collector is paused meanwhile (:mod:`controller_core.gc_pause`): a plan of
    10^6 partitions allocates tens of millions of acyclic objects (candidates, moves, rows
    of the output) beside millions that live to the end (the snapshot's and the table's
    lists), and the collections that walked them found nothing: 11.6 s of a 126 s plan."""
    snapshot, goal, driver = prepare(req)
    charting = _import_in_background("matplotlib.pyplot")  # for report.png, at the end
    options = PlanOptions(seed=req.seed)
    use_spark = session is not None or not driver  # decided once: memory may change
    if use_spark:
        spark = session() if session else make_session(req.master, req.spark_conf,
                                                       partitions=len(snapshot.partitions))
        charting.join()
        result = run_plan(spark, req.snapshot_dir, snapshot, goal, options)
    else:
        from controller_core.planning.local_table import run_plan_on_driver

        result = run_plan_on_driver(req.snapshot_dir, snapshot, goal, options)
        charting.join()
    cluster = req.cluster_name or snapshot.cluster_name
    resources = render(result.moves, RenderOptions(
        cluster=cluster, goal=goal.describe(), throttle_bytes_per_second=req.throttle,
        max_concurrent_moves=req.max_concurrent_moves,
        max_concurrent_moves_per_broker=req.max_concurrent_moves_per_broker,
        log_dir_throttle_bytes_per_second=req.log_dir_throttle,
        max_bytes=req.max_bytes,
        max_partitions=req.max_partitions))
    # once: its duration estimate replays every resource (4 s of a 20,000-partition plan,
    # when report.md, report.json and the CLI each asked for it)
    known = summary(result, resources, req.throttle)
    write_output(req.out, result, resources, req.throttle, cluster, known)
    return PlanOutput(req.out, result, resources, known, spark=use_spark)


def _import_in_background(module: str) -> threading.Thread:
    """Import ``module`` in a thread: matplotlib takes most of a second to import, and the
    driver has that time while it waits for Spark's JVM to start. A failed import is left
    for the code that needs the module to report."""

    def load() -> None:
        with contextlib.suppress(Exception):
            importlib.import_module(module)

    thread = threading.Thread(target=load, name=f"import {module}", daemon=True)
    thread.start()
    return thread


def write_output(out: Path, result: PlanResult, resources: list[RenderedResource],
                 throttle: int | None, cluster: str, known: dict[str, Any] | None = None
                 ) -> None:
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        rdir = tmp / RESOURCES_DIR
        rdir.mkdir()
        for r in resources:
            (rdir / r.filename).write_text(r.text)
        (tmp / "plan.json").write_text(kafka_tool_json(result.moves))
        (tmp / "rollback.json").write_text(kafka_tool_json(result.moves, rollback=True))
        known = known if known is not None else summary(result, resources, throttle)
        (tmp / "report.md").write_text(markdown(result, resources, throttle, cluster, known))
        write_json(tmp / "report.json", result, resources, throttle, known)
        write_chart(tmp / "report.png", result)
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
