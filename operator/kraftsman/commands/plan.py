"""`kraftsman snapshot` and `kraftsman plan`: the PySpark planning pipeline from the CLI.

The work is in ``controller_core.planning``; this module parses arguments and turns the
pipeline's errors into one-line messages with exit code 2 (no traceback, no partial output).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from controller_core.config import EmbeddedClusterSpec
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.metadata.controller import MAX_THROTTLE_RATE
from controller_core.planning.goals import GOAL_KINDS, GoalError
from controller_core.planning.pipeline import OutputError, PlanRequest
from controller_core.planning.snapshot import Snapshot, SnapshotError
from controller_core.units import format_bytes as fmt_bytes
from controller_core.units import format_duration as fmt_seconds
from kraftsman.cli_errors import UsageError, require_extra
from kraftsman.commands import real_snapshot
from kraftsman.commands.target import add_target_options, wants_real
from kraftsman.local_store import DEFAULT_STATE_DIR, LocalStore


def register(sub: Any) -> None:
    s = sub.add_parser(
        "snapshot", help="export a cluster to a Parquet snapshot for `kraftsman plan`",
        description="Export brokers (racks, capacity) and partitions (replicas, leader, size, "
                    "rates) of a cluster to a snapshot directory of Parquet files.")
    s.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR,
                   help="local state directory of `kraftsman apply` (default .kraftsman)")
    s.add_argument("--cluster", default=None, help="cluster name (default: the only one)")
    s.add_argument("--out", type=Path, required=True, help="snapshot directory to write")
    s.add_argument("--default-disk-bytes", type=int, default=1 << 40, metavar="BYTES",
                   help="disk capacity of brokers whose spec has no diskBytes (default 1 TiB)")
    s.add_argument("--consumer-fanout", type=float, default=1.0, metavar="X",
                   help="bytes out per byte in (consumers per partition; default 1)")
    s.add_argument("--force", action="store_true", help="replace --out if it exists")
    add_target_options(s)
    real_snapshot.add_options(s)
    s.set_defaults(handler=run_snapshot)

    p = sub.add_parser(
        "plan", help="compute a balanced, minimal-movement reassignment plan with PySpark",
        description="Compute PartitionReassignment resources (YAML for Git) and a report from "
                    "a snapshot. Runs on local[*] by default, on any Spark with --master.")
    p.add_argument("--snapshot", type=Path, required=True, help="snapshot directory")
    p.add_argument("--goal", nargs="+", required=True, metavar="GOAL",
                   help=f"one of {', '.join(GOAL_KINDS)}; add-brokers/remove-brokers/"
                        "demote-brokers take broker ids: --goal add-brokers 7,8; "
                        "demote-brokers 3 moves broker 3's preferred leadership away, no data; "
                        "remove-disks BROKER:DIR,... empties log directories into the other "
                        "directories of their broker: --goal remove-disks 3:/data/d1 (needs "
                        "a snapshot with log dirs)")
    p.add_argument("--balance", action="store_true",
                   help="with add-brokers/remove-brokers: also balance the other brokers in "
                        "the same plan (replicas may move between any brokers that stay)")
    p.add_argument("--out", type=Path, default=Path("kraftsman-plan"),
                   help="output directory (default ./kraftsman-plan)")
    p.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    p.add_argument("--seed", type=int, default=0, help="seed; a fixed seed gives the same plan")
    p.add_argument("--throttle", default="50000000", metavar="BYTES_PER_S",
                   help="throttleBytesPerSecond of the resources, also used for the duration "
                        f"estimate: 1 to {MAX_THROTTLE_RATE} (default 50000000; 0 = "
                        "unthrottled)")
    p.add_argument("--log-dir-throttle", default=None, metavar="BYTES_PER_S",
                   help="logDirThrottleBytesPerSecond of the resources that copy between log "
                        "directories (JBOD): 1 to {MAX_THROTTLE_RATE} (default: --throttle)"
                        .replace("{MAX_THROTTLE_RATE}", str(MAX_THROTTLE_RATE)))
    p.add_argument("--max-concurrent-moves", type=_at_least_one, default=10, metavar="N",
                   help="maxConcurrentMoves of the resources: partitions moving at once "
                        "(default 10; also used for the duration estimate)")
    p.add_argument("--max-concurrent-moves-per-broker", type=_at_least_one, default=None,
                   metavar="N", help="maxConcurrentMovesPerBroker of the resources: moves "
                                     "touching one broker at once (default: no limit; also "
                                     "used for the duration estimate)")
    p.add_argument("--max-partitions-per-resource", type=_positive_int, default=1000,
                   metavar="N")
    p.add_argument("--cluster-name", default=None,
                   help="clusterRef.name of the resources (default: from the snapshot)")
    p.add_argument("--spark-conf", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                   help="Spark settings, e.g. --spark-conf spark.driver.memory=4g "
                        "spark.executor.memory=8g (repeatable)")
    p.add_argument("--engine", choices=("auto", "spark", "driver"), default="auto",
                   help="where the planning rounds run: spark, or driver (this process: the "
                        "same plan without starting a JVM); auto (default): the driver for a "
                        "local master without --spark-conf and up to 100,000 partitions, or "
                        "more on at most 2 cores when the table fits in memory; else Spark")
    p.add_argument("--force", action="store_true", help="replace --out if it is not empty")
    p.set_defaults(handler=run_plan)

    a = sub.add_parser(
        "spark-archive", help="record Spark's classes once, so that later plans start faster",
        description="Record a class-data-sharing archive of the classes Spark's JVM loads "
                    "(by planning a small synthetic cluster, about a plan's time). Later "
                    "`kraftsman plan` runs on a local master map it and start in about half "
                    "the time. Run once per machine (again after upgrading Java or pyspark, "
                    "which changes the default file name) or at image build.")
    a.add_argument("--out", type=Path, default=None,
                   help="archive file (default: $KRAFTSMAN_SPARK_CLASS_ARCHIVE, else "
                        "~/.cache/kraftsman/spark-<digest of Java and the Spark jars>.jsa)")
    a.add_argument("--force", action="store_true", help="record again if it exists")
    a.set_defaults(handler=run_spark_archive)


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"{text} must be >= 0")
    return v


def _at_least_one(text: str) -> int:
    v = _positive_int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text} must be >= 1 (a limit of 0 moves nothing)")
    return v


def spark_conf(items: list[str]) -> dict[str, str]:
    conf: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--spark-conf {item!r}: expected KEY=VALUE, "
                             "e.g. spark.driver.memory=4g")
        conf[key.strip()] = value
    return conf


def throttle_of(text: str | None, flag: str = "--throttle") -> int | None:
    """``--throttle``: bytes/s the brokers accept (a Kafka LONG), or 0 for none. Checked
    here rather than by argparse, so a bad value is one line (exit 2), before Spark starts."""
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_THROTTLE_RATE:
        raise UsageError(f"{flag} {text}: give a whole number of bytes per second from 1 "
                         f"to {MAX_THROTTLE_RATE}, or 0 for no throttle")
    return value or None


def log_dir_throttle_of(text: str | None) -> int | None:
    """``--log-dir-throttle``: as ``--throttle``, but never 0 (leave it out for the copies
    between log directories to take ``--throttle``)."""
    value = throttle_of(text, "--log-dir-throttle")
    if text is not None and value is None:
        raise UsageError(f"--log-dir-throttle {text}: give a whole number of bytes per second "
                         f"from 1 to {MAX_THROTTLE_RATE}, or leave it out for --throttle")
    return value


def run_plan(args: argparse.Namespace) -> int:
    throttle = throttle_of(args.throttle)
    require_extra("plan", "plan")
    from controller_core.planning import pipeline
    from controller_core.planning.spark_job import JavaMissingError

    req = PlanRequest(
        snapshot_dir=args.snapshot, goal=list(args.goal), out=args.out, master=args.master,
        balance=args.balance,
        seed=args.seed, throttle=throttle,
        log_dir_throttle=log_dir_throttle_of(args.log_dir_throttle),
        max_concurrent_moves=args.max_concurrent_moves,
        max_concurrent_moves_per_broker=args.max_concurrent_moves_per_broker,
        cluster_name=args.cluster_name, spark_conf=spark_conf(args.spark_conf),
        max_partitions=args.max_partitions_per_resource or 1000, force=args.force,
        engine=args.engine)
    try:
        out = pipeline.run(req)
    except (SnapshotError, GoalError) as e:
        raise UsageError(e.problems) from None
    except (OutputError, JavaMissingError) as e:
        raise UsageError(str(e)) from None
    s = out.summary
    print(f"plan written to {out.out}")
    print(f"  rounds ran on: {f'Spark ({req.master})' if out.spark else 'the driver (no JVM)'}")
    print(f"  goal: {s['goal']}; partitions in plan: {s['partitionsInPlan']} of "
          f"{s['partitionsTotal']}; replicas to copy: {s['replicasToMove']}; "
          f"data: {fmt_bytes(s['bytesToMove'])}")
    if "bytesToMoveBetweenDirs" in s:
        print(f"  between log directories of one broker: {s['replicasToMoveBetweenDirs']} "
              f"replica(s), {fmt_bytes(s['bytesToMoveBetweenDirs'])} (no network)")
    for name, v in s["maxOverMean"].items():
        if name in ("replicas", "leaders", "disk_bytes"):
            print(f"  {name} max/mean: {v['before']:.3f} -> {v['after']:.3f}")
    if s["estimatedSeconds"] is not None:
        print(f"  estimated duration: {fmt_seconds(s['estimatedSeconds'])} at "
              f"{fmt_bytes(s['throttleBytesPerSecond'])}/s")
    if s["resources"]:
        print(f"  resources: {s['resources']} in {out.out / pipeline.RESOURCES_DIR} "
              f"(apply in order: kraftsman apply -f {out.out / pipeline.RESOURCES_DIR})")
    else:  # `kraftsman apply` of the empty directory would only say it holds nothing
        print("  resources: none — no move improves the balance, nothing to apply")
    for note in out.result.shortfalls:
        print(f"  target not reached: {note}")
    if out.spark and req.master.startswith("local"):
        from controller_core.planning import class_archive
        from controller_core.planning.spark_job import check_java

        hint = class_archive.hint(check_java())
        if hint:
            print(hint, file=sys.stderr)
    if out.result.violations:
        print(f"  constraints not met: {len(out.result.violations)} (see report.md)",
              file=sys.stderr)
    return 0


def run_spark_archive(args: argparse.Namespace) -> int:
    require_extra("spark-archive", "plan")
    from controller_core.planning import class_archive
    from controller_core.planning.spark_job import (
        JavaMissingError,
        check_java,
        record_class_archive,
    )

    try:
        java = check_java()
    except JavaMissingError as e:
        raise UsageError(str(e)) from None
    path = args.out or class_archive.archive_path(java)
    if path is None:
        raise UsageError(f"{class_archive.ENV}=off: plans use no archive; unset it or give "
                         "--out FILE")
    if path.is_file() and not args.force:
        print(f"{path}: already recorded ({fmt_bytes(path.stat().st_size)}); --force records "
              "it again")
        return 0
    print(f"recording Spark's classes in {path} (a small plan on a local JVM) ...", flush=True)
    try:
        size = record_class_archive(path)
    except class_archive.ArchiveError as e:
        raise UsageError(str(e)) from None
    print(f"{path}: {fmt_bytes(size)}")
    if args.out is not None and path != class_archive.archive_path(java):
        print(f"plans use it with {class_archive.ENV}={path}")
    return 0


def embedded_sources(name: str, args: argparse.Namespace) -> dict[str, str]:
    """Where each figure of an embedded cluster's snapshot comes from (report.md shows it)."""
    where = f"embedded cluster {name!r} in {args.state_dir}"
    return {
        "brokers": f"{where}: registered brokers (DescribeCluster)",
        "racks": f"{where}: the KafkaCluster spec (brokers[].rack)",
        "replicas": f"{where}: partition metadata (replicas and leaders)",
        "sizeBytes": f"{where}: the leader's log size (log end offset x messageBytes)",
        "diskCapacityBytes": "the KafkaCluster spec (brokers[].diskBytes), else "
                             f"--default-disk-bytes {args.default_disk_bytes}",
        "networkCapacityBytesPerSecond": "the KafkaCluster spec (brokers[]."
                                         "replicationBytesPerSecond, else "
                                         "replicationBytesPerSecond)",
        "bytesInPerSecond": f"{where}: the topics' produceBytesPerSecond",
        "bytesOutPerSecond": f"bytes in x --consumer-fanout {args.consumer_fanout:g}",
    }


def embedded_snapshot(cluster: EmbeddedCluster, spec: EmbeddedClusterSpec | None, name: str, *,
                      default_disk_bytes: int, consumer_fanout: float,
                      sources: dict[str, str] | None = None) -> Snapshot:
    """A snapshot of an embedded cluster: capacities from its spec (diskBytes, replication
    bandwidth), ``default_disk_bytes`` where the spec has none."""
    from controller_core.planning.export import snapshot_from_admin

    disk = {b.id: b.disk_bytes for b in spec.brokers if b.disk_bytes} if spec else {}
    net = {b.id: float(b.replication_bytes_per_second or spec.replication_bytes_per_second)
           for b in spec.brokers} if spec else {}
    return snapshot_from_admin(
        cluster, cluster_name=name, created_at=now_text(),
        disk_capacity_bytes=disk, network_bytes_per_second=net,
        default_disk_bytes=default_disk_bytes, consumer_fanout=consumer_fanout, sources=sources)


def now_text() -> str:
    """createdAt of snapshots and proposals: UTC, seconds."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_snapshot(args: argparse.Namespace) -> int:
    require_extra("snapshot", "plan")

    if wants_real(args) is not None:
        return real_snapshot.run(args)
    store = LocalStore(args.state_dir)
    name = store.pick_cluster(args.cluster)
    spec = store.saved_cluster_spec(name)
    cluster = store.open_cluster(name, read_only=True)  # a snapshot changes nothing
    try:
        snap = embedded_snapshot(cluster, spec, name, default_disk_bytes=args.default_disk_bytes,
                                 consumer_fanout=args.consumer_fanout,
                                 sources=embedded_sources(name, args))
    finally:
        cluster.close()
    real_snapshot.write_for_cli(snap, args)
    print(f"snapshot of cluster {name!r} written to {args.out}: {len(snap.brokers)} brokers, "
          f"{len(snap.partitions)} partitions")
    return 0
