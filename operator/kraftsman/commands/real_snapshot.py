"""`kraftsman snapshot --bootstrap-server ...`: a Parquet snapshot of a real cluster.

Brokers and racks come from Metadata (DescribeCluster), replicas and leaders from Metadata,
replica sizes from DescribeLogDirs (through the kafka backend), capacities from
``--capacity-file``/flags, and traffic optionally from Prometheus. The manifest's
``sources`` and the printed summary say where each figure came from.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from controller_core.planning.capacity import CapacityError, capacities, load_capacity_file
from controller_core.planning.prometheus import PrometheusError, topic_rates
from kraftsman.cli_errors import UsageError
from kraftsman.commands.target import opened


def add_options(s: Any) -> None:
    s.add_argument("--capacity-file", type=Path, default=None, metavar="YAML",
                   help="real clusters: per-broker diskBytes/networkBytesPerSecond "
                        "(defaults: and brokers.<id>:)")
    s.add_argument("--network-bytes-per-second", type=float, default=125_000_000.0,
                   metavar="BYTES", help="real clusters: network capacity of brokers the "
                                         "capacity file does not cover (default 125000000)")
    s.add_argument("--prometheus", default=None, metavar="URL",
                   help="real clusters: read bytes in/out per topic from this Prometheus "
                        "(kafka_server_brokertopicmetrics_bytes{in,out}_total)")
    s.add_argument("--prometheus-window", default="5m", metavar="DURATION",
                   help="rate() window of the Prometheus queries (default 5m)")
    s.add_argument("--prometheus-labels", default="", metavar="MATCHERS",
                   help='extra label matchers, e.g. \'cluster="prod"\'')


def write_for_cli(snap: Any, args: argparse.Namespace) -> None:
    """Write ``snap`` to ``--out`` (``--force`` overwrites); a refusal is a usage error."""
    from controller_core.planning.snapshot import SnapshotError, write_snapshot

    try:
        write_snapshot(snap, args.out, overwrite=args.force)
    except SnapshotError as e:
        raise UsageError(e.problems) from None


def take(c: Any, name: str, *, cap_file: Any = None, capacity_file: Path | None = None,
         default_disk_bytes: int = 1 << 40, network_bytes_per_second: float = 125_000_000.0,
         consumer_fanout: float = 1.0, rates: Any = None, prometheus: str | None = None
         ) -> tuple[Any, dict[str, str]]:
    """The snapshot of a connected real cluster ``c`` (the kafka backend) and where each of
    its figures came from; capacity problems are a UsageError."""
    from controller_core.planning.export import DEFAULT_DISK_BYTES, snapshot_from_admin

    brokers = sorted(b.id for b in c.describe_cluster().brokers)
    disk, net, problems = capacities(cap_file, brokers, disk_default=default_disk_bytes,
                                     network_default=network_bytes_per_second)
    if problems:
        raise UsageError(problems)
    capacity_from = f"--capacity-file {capacity_file}, else " if cap_file else ""
    sources = {
        "brokers": f"Metadata (DescribeCluster) of {c.bootstrap_servers}",
        "racks": "Metadata (broker.rack)",
        "replicas": "Metadata (partition replicas and leaders)",
        "sizeBytes": "DescribeLogDirs (the leader's partition size)",
        "diskCapacityBytes": f"{capacity_from}--default-disk-bytes {default_disk_bytes}",
        "networkCapacityBytesPerSecond": f"{capacity_from}--network-bytes-per-second "
                                         f"{network_bytes_per_second:g}",
        "bytesInPerSecond": (f"Prometheus {prometheus}: {rates.queries[0]}, split "
                             "evenly over the topic's partitions") if rates else
                            "none (no --prometheus): 0",
        "bytesOutPerSecond": (f"Prometheus {prometheus}: {rates.queries[1]}, split "
                              "evenly over the topic's partitions") if rates else
                             f"bytes in x --consumer-fanout {consumer_fanout:g}",
    }
    snap = snapshot_from_admin(
        c, cluster_name=name, created_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        disk_capacity_bytes=disk, network_bytes_per_second=net,
        default_disk_bytes=default_disk_bytes or DEFAULT_DISK_BYTES,
        consumer_fanout=consumer_fanout,
        topic_rates=(rates.bytes_in, rates.bytes_out) if rates else None, sources=sources)
    return snap, sources


def run(args: argparse.Namespace) -> int:
    if args.network_bytes_per_second <= 0:
        raise UsageError("--network-bytes-per-second: must be positive")
    try:
        cap_file = load_capacity_file(args.capacity_file) if args.capacity_file else None
    except CapacityError as e:
        raise UsageError(str(e)) from None
    rates = None
    if args.prometheus:
        try:
            rates = topic_rates(args.prometheus, window=args.prometheus_window,
                                labels=args.prometheus_labels)
        except PrometheusError as e:
            raise UsageError(str(e)) from None
    with opened(args) as c:
        name = args.cluster or c.describe_cluster().cluster_id
        snap, sources = take(c, name, cap_file=cap_file, capacity_file=args.capacity_file,
                             default_disk_bytes=args.default_disk_bytes,
                             network_bytes_per_second=args.network_bytes_per_second,
                             consumer_fanout=args.consumer_fanout, rates=rates,
                             prometheus=args.prometheus)
    write_for_cli(snap, args)
    print(f"snapshot of {name!r} ({c.bootstrap_servers}) written to {args.out}: "
          f"{len(snap.brokers)} brokers, {len(snap.partitions)} partitions")
    for figure, source in sources.items():
        print(f"  {figure}: {source}")
    return 0
