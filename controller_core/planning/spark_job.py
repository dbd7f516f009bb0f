"""The Spark side of planning: thin glue around the pure scoring and driver steps.

Per round, Spark scans the partition table (cached, one row per partition), keeps the rows
that touch an overloaded (or drained) broker, scores candidate moves in parallel with
``mapInPandas`` (:mod:`.scoring`), keeps the best few per source broker with a window, and
hands those to the driver (:mod:`.balancer`), which accepts a consistent set. The accepted
changes are joined back into the table. Broker loads before and after are aggregated by
Spark from the table itself. Nothing here collects the whole table to the driver.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller_core.planning import class_archive
from controller_core.planning.balancer import Balancer, Candidate, settled
from controller_core.planning.goals import Goal
from controller_core.planning.objective import (
    DEFAULT_TOLERANCE,
    DEFAULT_WEIGHTS,
    DISK,
    LEADER_METRICS,
    REPLICA_METRICS,
    REPLICAS,
    Targets,
    check_assignment,
    compute_targets,
    objective,
)
from controller_core.planning.result import PartitionMove, PlanResult, RoundStat
from controller_core.planning.schema import PARTITION_COLUMNS, PARTITIONS_FILE
from controller_core.planning.scoring import (
    RoundContext,
    best_per_source,
    score_leader_moves,
    score_replica_moves,
)
from controller_core.planning.snapshot import Snapshot
from controller_core.storage.framing import fsync_dir

MIN_JAVA = 17
# up to this many partitions a local plan is short: its JVM compiles with C1 only
SHORT_PLAN_PARTITIONS = 100_000


class JavaMissingError(Exception):
    """Spark cannot start because no suitable Java runtime is installed."""


@dataclass(frozen=True, slots=True)
class PlanOptions:
    seed: int = 0
    max_rounds: int = 40
    choices: int = 4
    weights: tuple[float, ...] = DEFAULT_WEIGHTS
    tolerance: tuple[float, ...] = DEFAULT_TOLERANCE
    # a round that lowers the imbalance by less than this share of the imbalance before
    # the plan ends the phase (filling rounds of new brokers excepted): see settled()
    min_round_gain: float = 0.002


def check_java(env: Mapping[str, str] | None = None) -> str:
    """The java executable Spark will use; raise :class:`JavaMissingError` with the fix."""
    env = os.environ if env is None else env
    fix = (f"Spark needs a Java runtime {MIN_JAVA} or newer: install one (Debian/Ubuntu: "
           f"`apt-get install openjdk-{MIN_JAVA}-jre-headless`; macOS: `brew install "
           f"openjdk@{MIN_JAVA}`) and put `java` on PATH or set JAVA_HOME")
    home = env.get("JAVA_HOME")
    if home:
        java = str(Path(home) / "bin" / "java")
        if not Path(java).is_file():
            raise JavaMissingError(f"JAVA_HOME={home} has no bin/java. {fix}")
    else:
        found = shutil.which("java", path=env.get("PATH"))
        if not found:
            raise JavaMissingError(f"no `java` on PATH and JAVA_HOME is not set. {fix}")
        java = found
    try:
        version = class_archive.java_version(java)
    except (OSError, subprocess.SubprocessError) as e:
        raise JavaMissingError(f"{java} does not run ({e}). {fix}") from e
    m = re.search(r'version "(\d+)(?:\.(\d+))?', version)
    if m:
        major = int(m.group(1))
        if major == 1 and m.group(2):
            major = int(m.group(2))
        if major < MIN_JAVA:
            raise JavaMissingError(f"{java} is Java {major}. {fix}")
    return java


def make_session(master: str = "local[*]", conf: Mapping[str, str] | None = None,
                 app_name: str = "kraftsman-plan", *, partitions: int | None = None) -> Any:
    """A SparkSession with settings that suit planning; ``conf`` overrides any of them.

    ``partitions`` (the snapshot's size) tunes a local driver JVM: a short plan spends most of
    its CPU warming the JVM up — loading Spark's classes and compiling them — and C2, the
    optimising compiler, costs more than it returns in a run of seconds. A local driver maps
    the class archive of :mod:`.class_archive` when one was recorded."""
    java = check_java()
    from pyspark.sql import SparkSession

    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "2048",
        "spark.sql.adaptive.enabled": "false",
        "spark.driver.memory": "2g",
    }
    if master.startswith("local") and not os.environ.get("PYSPARK_PYTHON"):
        # local workers must run this interpreter (it has numpy, pandas, pyarrow)
        os.environ["PYSPARK_PYTHON"] = sys.executable
    if master.startswith("local"):
        # everything is on this machine: no address lookup, and no warning about it
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if master.startswith("local"):
        jvm = class_archive.use_options(java)
        if partitions is not None and partitions <= SHORT_PLAN_PARTITIONS:
            jvm.append("-XX:TieredStopAtLevel=1")
        if jvm:
            settings["spark.driver.extraJavaOptions"] = " ".join(jvm)
    settings.update(conf or {})
    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("KRAFTSMAN_SPARK_LOG_LEVEL", "ERROR"))
    return spark


# ---------------------------------------------------------------------------------------


def _load_table(spark: Any, snapshot_dir: Path) -> Any:
    """The partition table as a Spark DataFrame, shipped from the driver as Arrow batches.

    The driver reads the (validated) Parquet itself: that works on any master — executors of
    a remote cluster need not see the snapshot's path — and spares a short plan the JVM's
    Parquet and Hadoop file-system start-up, seconds of a cold JVM."""
    from pyspark.sql import functions as F

    pq = importlib.import_module("pyarrow.parquet")
    table = pq.read_table(str(snapshot_dir / PARTITIONS_FILE),
                          columns=[c.name for c in PARTITION_COLUMNS])
    raw = spark.createDataFrame(table)
    df = raw.select(
        F.xxhash64("topic", "partition").alias("pid"),
        F.col("topic"), F.col("partition").cast("long").alias("partition"),
        F.col("replicas").cast("array<int>").alias("replicas"),
        F.col("leader").cast("long").alias("leader"),
        F.col("size_bytes").cast("long").alias("size"),
        F.floor(F.col("bytes_in_per_second") + 0.5).cast("long").alias("bin"),
        F.floor(F.col("bytes_out_per_second") + 0.5).cast("long").alias("bout"),
    )
    df = df.withColumn("orig_replicas", F.col("replicas")) \
        .withColumn("orig_leader", F.col("leader"))
    # one Arrow batch per Spark partition: a big table arrives in many small ones
    return df.coalesce(2 * _parallelism(spark)).localCheckpoint(eager=True)


def _parallelism(spark: Any) -> int:
    return max(1, int(spark.sparkContext.defaultParallelism))


def _batch_rows(spark: Any) -> int:
    """Rows per Arrow batch, and so per Spark partition of a table made from Arrow."""
    return max(1, int(spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")))


def spark_loads(df: Any, broker_ids: Iterable[int]) -> dict[int, list[int]]:
    """Per-broker load of the table's current assignment, aggregated by Spark in one job
    (the leader is one of the distinct replicas, so each row names it exactly once)."""
    from pyspark.sql import functions as F

    loads = {b: [0, 0, 0, 0, 0] for b in broker_ids}
    leads = F.col("b") == F.col("leader")
    rows = df.select(F.explode("replicas").alias("b"), "leader", "size", "bin", "bout",
                     F.size("replicas").alias("rf")) \
        .groupBy("b").agg(
            F.count(F.lit(1)).alias("n"), F.sum("size").alias("disk"),
            F.sum("bin").alias("nin"),
            F.sum(F.when(leads, 1).otherwise(0)).alias("leaders"),
            F.sum(F.when(leads, F.col("bout") + F.col("bin") * (F.col("rf") - 1))
                  .otherwise(0)).alias("nout")).collect()
    for r in rows:
        loads[int(r["b"])] = [int(r["n"]), int(r["leaders"]), int(r["disk"]), int(r["nin"]),
                              int(r["nout"])]
    return loads


class _WorkerWarmUp:
    """Start Spark's Python workers while the JVM loads the table.

    Each worker imports numpy, pandas, pyarrow and the scorer — about a second of CPU —
    when its first task arrives; Spark keeps workers for reuse, so a trivial job run beside
    the table load takes that out of the first round's path. Its failure is not the plan's:
    the first round's job reports whatever keeps workers from starting."""

    def __init__(self, spark: Any, rows: int) -> None:
        # as many workers as a round's job runs at once (a small table is one batch, one task:
        # a second warm-up task would only hold up the table load for a slot)
        slots = min(_parallelism(spark), -(-rows // _batch_rows(spark)))

        def touch(batches: Iterable[Any]) -> Iterable[Any]:
            importlib.import_module("controller_core.planning.scoring")
            yield from batches

        self._job = spark.range(0, slots, 1, slots).mapInPandas(touch, "id long")
        self._thread = threading.Thread(target=self._run, name="spark-worker-warm-up",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with contextlib.suppress(Exception):
            self._job.collect()

    def join(self) -> None:
        self._thread.join()


def _per_rack(df: Any, racks: int) -> list[float]:
    """Replicas, disk and bytes in that each rack must hold: partitions with as many
    replicas as there are racks have one replica in every rack (see compute_targets).

    The same job checks that the partition ids are distinct: xxhash64 of (topic, partition)
    has never been seen to collide, but a plan must never be silently wrong."""
    from pyspark.sql import functions as F

    every_rack = F.size("replicas") == racks
    r = df.agg(F.count(F.lit(1)).alias("rows"), F.countDistinct("pid").alias("ids"),
               F.sum(F.when(every_rack, 1).otherwise(0)).alias("n"),
               F.sum(F.when(every_rack, F.col("size")).otherwise(0)).alias("disk"),
               F.sum(F.when(every_rack, F.col("bin")).otherwise(0)).alias("nin")).first()
    if r["rows"] != r["ids"]:
        raise RuntimeError("internal: partition id hash collision; rename a topic or report")
    if racks < 2:
        return [0.0] * 5
    n, disk, nin = (float(r[k] or 0) for k in ("n", "disk", "nin"))
    return [n, 0.0, disk, nin, 0.0]


def _context(bal: Balancer, sources: set[int], dests: set[int], seed: int, choices: int,
             mean_size: float, repair: bool = False) -> RoundContext:
    """The broker figures of this round for the scorer (small: shipped with the closure)."""
    import numpy as np

    ids = sorted(bal.loads)
    slot_of = np.full(max(ids) + 1, -1, dtype=np.int64)
    for i, b in enumerate(ids):
        slot_of[b] = i
    t: Targets = bal.targets
    excess = np.array([[bal.loads[b][m] - t.target[b][m] for m in range(5)] for b in ids])
    band = np.array([list(t.band[b]) for b in ids])
    target = np.array([list(t.target[b]) for b in ids])
    coef = np.array([2.0 * t.weights[m] / (t.mean[m] ** 2) for m in range(5)])
    racks = sorted({r for r in bal.rack_of.values() if r is not None})
    rack_idx = {r: i for i, r in enumerate(racks)}
    rack = np.array([rack_idx.get(bal.rack_of[b] or "", -1) if bal.rack_of[b] is not None
                     else -1 for b in ids], dtype=np.int64)
    return RoundContext(
        slot_of=slot_of, broker_ids=np.array(ids, dtype=np.int64), excess=excess, band=band,
        target=target,
        coef=coef,
        free_disk=np.array([bal.capacity[b] - bal.loads[b][DISK] for b in ids], dtype=float),
        rack=rack, n_racks=len(bal.racks),
        is_source=np.array([b in sources for b in ids]),
        is_removed=np.array([b in bal.removed for b in ids]),
        dest_slots=np.array([i for i, b in enumerate(ids) if b in dests], dtype=np.int64),
        seed=seed, choices=choices, mean_size=mean_size, relaxed=bal.relaxed, repair=repair,
        changes=dict(bal.changed))


_CANDIDATE_SCHEMA = (
    "pid long, pos int, src long, mandatory boolean, dests array<long>, priority double, "
    "replicas array<int>, leader long, size long, bin long, bout long")


def _collect_candidates(rows: Any, ctx: RoundContext, caps: dict[int, int],
                        leaders: bool) -> list[Candidate]:
    scorer = score_leader_moves if leaders else score_replica_moves

    def score(batches: Iterable[Any]) -> Iterable[Any]:
        frames = [out for pdf in batches if len(out := scorer(pdf, ctx))]
        if frames:
            pd = importlib.import_module("pandas")
            yield best_per_source(pd.concat(frames, ignore_index=True), caps)

    scored = rows.select("pid", "replicas", "leader", "size", "bin", "bout") \
        .mapInPandas(score, _CANDIDATE_SCHEMA)
    frame = best_per_source(scored.toPandas(), caps)
    return [Candidate(pid=int(r[0]), pos=int(r[1]), src=int(r[2]), mandatory=bool(r[3]),
                      dests=tuple(int(d) for d in r[4]), priority=float(r[5]),
                      replicas=tuple(int(x) for x in r[6]), leader=int(r[7]), size=int(r[8]),
                      bin=int(r[9]), bout=int(r[10]))
            for r in frame.itertuples(index=False, name=None)]




def _with_changes(spark: Any, base: Any, changes: Mapping[int, tuple[tuple[int, ...], int]]
                  ) -> Any:
    """The table with every change so far (a broadcast join on the cached table; nothing is
    materialised, so a round costs one Spark job)."""
    from pyspark.sql import functions as F

    if not changes:
        return base
    pd = importlib.import_module("pandas")
    upd = spark.createDataFrame(pd.DataFrame({
        "pid": list(changes), "new_replicas": [list(r) for r, _ in changes.values()],
        "new_leader": [ld for _, ld in changes.values()]}),
        "pid long, new_replicas array<int>, new_leader long")
    return base.join(F.broadcast(upd), "pid", "left").select(
        "pid", "topic", "partition",
        F.coalesce("new_replicas", "replicas").alias("replicas"),
        F.coalesce("new_leader", "leader").alias("leader"),
        "size", "bin", "bout", "orig_replicas", "orig_leader",
    )


def _rack_dup_filter(bal: Balancer) -> Any:
    """Spark column: rows whose replicas share a rack although racks allow otherwise."""
    from pyspark.sql import functions as F

    if not bal.racks:
        return F.lit(False)
    pairs: list[Any] = []
    for b, r in sorted(bal.rack_of.items()):
        pairs += [F.lit(b), F.lit(r)]
    rack_map = F.create_map(*pairs)
    racks_of = F.transform("replicas", lambda x: F.element_at(rack_map, x))
    return (F.size(F.array_distinct(racks_of)) < F.size("replicas")) & \
        (F.size("replicas") <= F.lit(len(bal.racks)))


def restriction(goal: Goal) -> str | None:
    """What the goal forbids, in the words of a constraint message."""
    ids = sorted(goal.brokers)
    if goal.receivers_limited:
        return (f"only moves onto the new brokers {ids} are allowed (add-brokers without "
                "--balance)")
    if goal.drain_only:
        return (f"only the replicas of the removed brokers {ids} move (remove-brokers without "
                "--balance)")
    return None


def run_plan(spark: Any, snapshot_dir: Path, snapshot: Snapshot, goal: Goal,
             options: PlanOptions = PlanOptions()) -> PlanResult:
    """Plan ``goal`` for the (validated) snapshot in ``snapshot_dir``."""
    from pyspark.sql import functions as F

    started = time.monotonic()
    clock = _Stopwatch()
    broker_ids = snapshot.broker_ids()
    warm_up = _WorkerWarmUp(spark, len(snapshot.partitions))
    base = _load_table(spark, snapshot_dir)
    clock.lap("load")
    before = spark_loads(base, broker_ids)
    clock.lap("loads before")
    removed = set(goal.brokers) if goal.kind == "remove-brokers" else set()
    new = set(goal.brokers) if goal.kind == "add-brokers" else set()
    eligible = set(broker_ids) - removed
    totals = [float(sum(before[b][m] for b in broker_ids)) for m in range(5)]
    racks = {b.rack for b in snapshot.brokers if b.id in eligible}
    targets = compute_targets(snapshot.brokers, eligible, totals, options.weights,
                              options.tolerance, _per_rack(base, len(racks)))
    dests = new if goal.receivers_limited else eligible
    bal = Balancer(snapshot.brokers, {b: list(v) for b, v in before.items()}, targets,
                   dest_ids=dests, removed=removed, restriction=restriction(goal))
    mean_size = totals[DISK] / totals[REPLICAS] if totals[REPLICAS] else 1.0
    stats: list[RoundStat] = []
    rack_dup = _rack_dup_filter(bal)

    start = last = objective(targets, bal.loads)
    repair = goal.moves_data and not goal.receivers_limited and not goal.drain_only and \
        bool(bal.racks) and \
        base.filter(rack_dup).limit(1).count() > 0
    if goal.moves_data:
        widen = False
        for rnd in range(options.max_rounds):
            t0 = time.monotonic()
            sources = bal.replica_sources(goal.kind, new, goal.balance, widen)
            bal.relaxed = widen
            round_dests = dests if bal.receivers is None else dests & bal.receivers
            if (not sources or not round_dests) and not repair:
                break
            ctx = _context(bal, sources, round_dests, options.seed * 1_000_003 + rnd,
                           options.choices, mean_size, repair)
            cands = _collect_candidates(base, ctx, bal.source_caps(sources), False)
            t1 = time.monotonic()
            accepted = bal.run_round(cands)
            t2 = time.monotonic()
            now = objective(bal.targets, bal.loads)
            stats.append(RoundStat("replicas", rnd, len(sources), len(cands), accepted,
                                   time.monotonic() - t0, t2 - t1, now))
            if accepted == 0 and (widen or not new):
                break
            if accepted and settled(last, now, start, options.min_round_gain, bal.receivers):
                if not widen and new & bal.underloaded(REPLICA_METRICS):
                    widen = True  # new brokers still short: fill them before settling
                    last = now
                    continue
                bal.stalled = True
                break
            last = now
            # nothing accepted: from now on every broker that can give does
            widen = widen or accepted == 0

    warm_up.join()
    clock.lap("replica rounds")
    last = objective(bal.targets, bal.loads)
    widen = False
    for rnd in range(options.max_rounds):
        t0 = time.monotonic()
        sources = bal.leader_sources(new, widen)
        bal.relaxed = widen
        if not sources or bal.receivers == set():
            break
        ctx = _context(bal, sources, eligible, options.seed * 1_000_003 + 7919 + rnd,
                       options.choices, mean_size)
        cands = _collect_candidates(base, ctx, bal.source_caps(sources, True), True)
        t1 = time.monotonic()
        accepted = bal.run_round(cands, leaders=True)
        t2 = time.monotonic()
        now = objective(bal.targets, bal.loads)
        stats.append(RoundStat("leaders", rnd, len(sources), len(cands), accepted,
                               time.monotonic() - t0, t2 - t1, now))
        if accepted == 0 and (widen or not new):
            break
        if accepted and settled(last, now, start, options.min_round_gain, bal.receivers):
            if not widen and new & bal.underloaded(LEADER_METRICS):
                widen = True  # new brokers still short of leaders: fill them first
                last = now
                continue
            break
        last = now
        widen = widen or accepted == 0

    clock.lap("leader rounds")
    df = _with_changes(spark, base, bal.changed).localCheckpoint(eager=True)
    after = spark_loads(df, broker_ids)
    if after != bal.loads:
        raise RuntimeError("internal: driver and Spark disagree on the planned loads")
    moved = df.filter(F.col("replicas") != F.col("orig_replicas")) \
        .select("topic", "partition", "orig_replicas", "replicas", "size", "orig_leader") \
        .orderBy("size", "topic", "partition").collect()
    moves = [PartitionMove(str(r[0]), int(r[1]), tuple(r[2]), tuple(r[3]), int(r[4]), int(r[5]))
             for r in moved]
    violations = check_assignment(
        snapshot.brokers, [m.topic for m in moves], [m.partition for m in moves],
        [m.before for m in moves], [m.after for m in moves], [m.size_bytes for m in moves],
        removed)
    # partitions nobody moved may still break a rule (e.g. drained brokers that are full)
    violations += _unmoved_violations(df, bal, removed)
    violations += _unplaced(df, bal.unplaced)
    df.unpersist()
    base.unpersist()
    clock.lap("finish")
    return PlanResult(
        goal=goal, seed=options.seed, brokers=list(snapshot.brokers), eligible=eligible,
        moves=moves, loads_before=before, loads_after=after, targets=targets,
        partitions_total=len(snapshot.partitions), violations=_dedupe(violations),
        rounds=stats, seconds=time.monotonic() - started, timings=clock.laps,
        shortfalls=bal.shortfalls(), sources=input_sources(snapshot))


def input_sources(snapshot: Snapshot) -> dict[str, str]:
    """The manifest's ``sources`` (figure -> where it came from), strings only."""
    raw = snapshot.extra.get("sources")
    if not isinstance(raw, dict):
        return {}
    return {str(k): str(v) for k, v in raw.items()}


class _Stopwatch:
    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.laps[name] = round(now - self._last, 3)
        self._last = now


def _unmoved_violations(df: Any, bal: Balancer, removed: set[int]) -> list[Any]:
    from pyspark.sql import functions as F

    from controller_core.planning.objective import Violation

    out: list[Violation] = []
    for b in sorted(bal.loads):
        if bal.loads[b][DISK] > bal.capacity[b]:
            out.append(Violation("disk capacity", f"broker {b}",
                                 f"{bal.loads[b][DISK]} bytes planned, capacity "
                                 f"{bal.capacity[b]}"))
    if removed:
        left = df.filter(F.arrays_overlap("replicas", F.array(
            *[F.lit(b) for b in sorted(removed)]).cast("array<int>"))) \
            .select("topic", "partition", "replicas").limit(50).collect()
        for r in left:
            out.append(Violation("drain", f"{r[0]}-{r[1]}",
                                 f"still on removed broker(s) "
                                 f"{sorted(set(r[2]) & removed)}"))
    rack_dup = _rack_dup_filter(bal)
    for r in df.filter(rack_dup).select("topic", "partition", "replicas", "size") \
            .limit(50).collect():
        out.append(Violation("rack awareness", f"{r[0]}-{r[1]}",
                             f"replicas {list(r[2])} share a rack: "
                             f"{bal.why_rack_shared(list(r[2]), int(r[3]))}"))
    if bal.loads and any(bal.loads[b][REPLICAS] < 0 for b in bal.loads):
        raise RuntimeError("internal: negative replica count")
    return out


def _unplaced(df: Any, unplaced: list[tuple[int, int, str]]) -> list[Any]:
    """Placement violations of the replicas that had to move and could not (one job)."""
    from pyspark.sql import functions as F

    from controller_core.planning.objective import Violation

    if not unplaced:
        return []
    pids = sorted({pid for pid, _, _ in unplaced})
    rows = {int(r[0]): r for r in df.filter(F.col("pid").isin(pids))
            .select("pid", "topic", "partition", "replicas").collect()}
    return [Violation("placement", f"{rows[pid][1]}-{rows[pid][2]} replica "
                                   f"{list(rows[pid][3])[pos]}", f"could not move: {why}")
            for pid, pos, why in unplaced]


def _dedupe(items: list[Any]) -> list[Any]:
    seen: set[str] = set()
    out = []
    for v in items:
        if str(v) not in seen:
            seen.add(str(v))
            out.append(v)
    return out




def stop_jvm(spark: Any, timeout: float = 600.0) -> None:
    """Stop the session and wait for its local JVM to exit (it writes a class archive at
    exit); a later session in this process starts a new JVM."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    spark.stop()
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    if proc is not None:
        if proc.stdin is not None:
            proc.stdin.close()  # the gateway JVM exits at EOF on its stdin
        proc.wait(timeout)


def record_class_archive(path: Path) -> int:
    """Record the class archive at ``path`` (see :mod:`.class_archive`) by planning a small
    synthetic cluster on a local JVM that dumps the classes it loaded at exit; the archive
    appears whole or not at all. Returns its size in bytes."""
    import tempfile

    from controller_core.planning.goals import parse_goal
    from controller_core.planning.snapshot import write_snapshot
    from controller_core.planning.synthetic import make_snapshot

    path = path.resolve()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise class_archive.ArchiveError(
            f"cannot create {path.parent} ({e.strerror}); choose another path with --out or "
            f"{class_archive.ENV}") from e
    if not os.access(path.parent, os.W_OK):
        raise class_archive.ArchiveError(
            f"{path.parent} is not writable; choose another path with --out or "
            f"{class_archive.ENV}")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    tmp.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="kraftsman-archive-") as work:
        snap_dir = Path(work) / "snapshot"
        snapshot = make_snapshot(brokers=6, partitions=120, seed=1, skew=1.0)
        write_snapshot(snapshot, snap_dir)
        spark = make_session("local[2]", {
            "spark.driver.extraJavaOptions":
                f"-XX:TieredStopAtLevel=1 -XX:ArchiveClassesAtExit={tmp} "
                "-Xlog:cds=off",  # one warning per class it cannot share
            "spark.driver.memory": "1g"})
        try:
            run_plan(spark, snap_dir, snapshot, parse_goal(["rebalance"], False))
        except BaseException:
            stop_jvm(spark)
            tmp.unlink(missing_ok=True)
            raise
        stop_jvm(spark)
    try:
        size = tmp.stat().st_size
    except FileNotFoundError:
        raise class_archive.ArchiveError(
            f"the JVM wrote no archive at {tmp}; run `java -XX:ArchiveClassesAtExit=x.jsa "
            "-version` to see whether this Java supports class-data sharing") from None
    if size == 0:
        tmp.unlink(missing_ok=True)
        raise class_archive.ArchiveError(f"the JVM wrote an empty archive at {tmp}")
    # the JVM maps the archive without checking it: never rename one that is not on disk
    fsync_dir(tmp)  # (opens read-only and fsyncs: a file as well as a directory)
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return size
