"""The Spark side of planning: thin glue around the pure scoring and driver steps.

Per round, Spark scans the partition table (cached, one row per partition), keeps the rows
that touch an overloaded (or drained) broker, scores candidate moves in parallel with
``mapInPandas`` (:mod:`.scoring`), keeps the best few per source broker with a window, and
hands those to the driver (:mod:`.balancer`), which accepts a consistent set. The accepted
changes are joined back into the table. Broker loads before and after are aggregated by
Spark from the table itself. Nothing here collects the whole table to the driver. The rounds
themselves are in :mod:`.rounds`; a small local plan may run them on the driver's own copy
of the table instead (:mod:`.local_table`, the same plan without a JVM).
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
from pathlib import Path
from typing import Any

from controller_core.planning import class_archive
from controller_core.planning.balancer import Balancer, Candidate
from controller_core.planning.goals import Goal
from controller_core.planning.options import PlanOptions as PlanOptions  # re-exported
from controller_core.planning.result import PartitionMove, PlanResult
from controller_core.planning.rounds import (  # noqa: F401  (re-exported: older imports)
    Stopwatch,
    context,
    input_sources,
    plan,
    restriction,
    to_candidates,
)
from controller_core.planning.schema import PARTITION_COLUMNS, PARTITIONS_FILE
from controller_core.planning.scoring import (
    RoundContext,
    best_per_source,
    scorer_for,
)
from controller_core.planning.snapshot import Snapshot
from controller_core.planning.table import VIOLATION_ROWS, Changes, Finished
from controller_core.storage.framing import fsync_dir

MIN_JAVA = 17
# up to this many partitions a local plan is short: its JVM compiles with C1 only
SHORT_PLAN_PARTITIONS = 100_000


class JavaMissingError(Exception):
    """Spark cannot start because no suitable Java runtime is installed."""


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


_CANDIDATE_SCHEMA = (
    "pid long, pos int, src long, mandatory boolean, dests array<long>, priority double, "
    "replicas array<int>, leader long, size long, bin long, bout long")


def _collect_candidates(rows: Any, ctx: RoundContext, caps: dict[int, int],
                        leaders: bool) -> list[Candidate]:
    scorer = scorer_for(ctx, leaders)

    def score(batches: Iterable[Any]) -> Iterable[Any]:
        frames = [out for pdf in batches if len(out := scorer(pdf, ctx))]
        if frames:
            pd = importlib.import_module("pandas")
            yield best_per_source(pd.concat(frames, ignore_index=True), caps)

    scored = rows.select("pid", "replicas", "leader", "size", "bin", "bout") \
        .mapInPandas(score, _CANDIDATE_SCHEMA)
    return to_candidates(best_per_source(scored.toPandas(), caps))





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


class SparkTable:
    """The partition table in Spark (see :class:`.table.PlanTable`): cached, scanned by one
    job per round; nothing collects the whole table to the driver."""

    def __init__(self, spark: Any, snapshot_dir: Path, rows: int) -> None:
        self._spark = spark
        self._warm_up = _WorkerWarmUp(spark, rows)
        self._base = _load_table(spark, snapshot_dir)

    def loads(self, broker_ids: Iterable[int]) -> dict[int, list[int]]:
        return spark_loads(self._base, broker_ids)

    def per_rack(self, racks: int) -> list[float]:
        return _per_rack(self._base, racks)

    def any_rack_shared(self, bal: Balancer) -> bool:
        return bool(self._base.filter(_rack_dup_filter(bal)).limit(1).count() > 0)

    def candidates(self, ctx: RoundContext, caps: dict[int, int], leaders: bool
                   ) -> list[Candidate]:
        return _collect_candidates(self._base, ctx, caps, leaders)

    def scored(self) -> None:
        self._warm_up.join()

    def finish(self, changes: Changes, broker_ids: Iterable[int], bal: Balancer,
               removed: set[int], pids: Iterable[int]) -> Finished:
        from pyspark.sql import functions as F

        df = _with_changes(self._spark, self._base, changes).localCheckpoint(eager=True)
        after = spark_loads(df, broker_ids)
        # as Arrow batches: a Row per moved partition costs ~10x more (290,000 at 10^6)
        moved = df.filter(F.col("replicas") != F.col("orig_replicas")) \
            .select("topic", "partition", "orig_replicas", "replicas", "size", "orig_leader") \
            .orderBy("size", "topic", "partition").toPandas()
        moves = [PartitionMove(str(t), int(p), tuple(int(x) for x in a),
                               tuple(int(x) for x in b), int(z), int(ld))
                 for t, p, a, b, z, ld in moved.itertuples(index=False, name=None)]
        left: list[tuple[str, int, list[int]]] = []
        if removed:
            left = [(str(r[0]), int(r[1]), [int(x) for x in r[2]]) for r in df.filter(
                F.arrays_overlap("replicas", F.array(
                    *[F.lit(b) for b in sorted(removed)]).cast("array<int>")))
                .select("topic", "partition", "replicas").limit(VIOLATION_ROWS).collect()]
        shared = [(str(r[0]), int(r[1]), [int(x) for x in r[2]], int(r[3]))
                  for r in df.filter(_rack_dup_filter(bal))
                  .select("topic", "partition", "replicas", "size")
                  .limit(VIOLATION_ROWS).collect()]
        wanted = sorted(set(pids))
        rows: dict[int, tuple[str, int, list[int]]] = {}
        if wanted:
            rows = {int(r[0]): (str(r[1]), int(r[2]), [int(x) for x in r[3]])
                    for r in df.filter(F.col("pid").isin(wanted))
                    .select("pid", "topic", "partition", "replicas").collect()}
        df.unpersist()
        self._base.unpersist()
        return Finished(after, moves, left, shared, rows)


def run_plan(spark: Any, snapshot_dir: Path, snapshot: Snapshot, goal: Goal,
             options: PlanOptions | None = None) -> PlanResult:
    """Plan ``goal`` for the (validated) snapshot in ``snapshot_dir`` on Spark."""
    options = options or PlanOptions()
    started = time.monotonic()
    clock = Stopwatch()
    table = SparkTable(spark, snapshot_dir, len(snapshot.partitions))
    clock.lap("load")
    return plan(table, snapshot, goal, options, started, clock)


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
