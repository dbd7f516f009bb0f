"""A cluster snapshot from any backend, through the ``ClusterAdmin`` port only.

Brokers and racks come from ``describe_cluster``; replicas, leader, log size and producer
rate from ``describe_partitions``. Capacities are not part of the Kafka admin API, so the
caller supplies them (the embedded cluster's spec has them; for a real cluster they are
options). Traffic is not visible to the admin API either: bytes in are the backend's own
figure (the embedded cluster's producers) or, given ``topic_rates`` (e.g. from Prometheus),
a topic's rate split evenly over its partitions; bytes out are the topic's consumer rate
the same way, else bytes in times ``consumer_fanout``. ``sources`` says where each figure
came from and goes into the manifest.

When some broker has more than one log directory (JBOD), the snapshot records every broker's
directories (DescribeLogDirs; a directory's capacity is its total bytes, or the broker's disk
split evenly when the broker does not say) and the directory of every replica, so that
``remove-disks`` and the per-broker disk balance can plan. Without JBOD it records none, and
every plan stays as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from controller_core.admin import ClusterAdmin
from controller_core.model import TopicPartition
from controller_core.planning.fingerprint import target_replicas
from controller_core.planning.snapshot import Broker, LogDir, PartitionTable, Snapshot

DEFAULT_DISK_BYTES = 1 << 40
DEFAULT_NETWORK_BYTES_PER_SECOND = 125_000_000.0


def snapshot_from_admin(
    admin: ClusterAdmin, *, cluster_name: str, created_at: str,
    disk_capacity_bytes: Mapping[int, int] | None = None,
    network_bytes_per_second: Mapping[int, float] | None = None,
    default_disk_bytes: int = DEFAULT_DISK_BYTES,
    default_network_bytes_per_second: float = DEFAULT_NETWORK_BYTES_PER_SECOND,
    consumer_fanout: float = 1.0,
    topic_rates: tuple[Mapping[str, float], Mapping[str, float]] | None = None,
    sources: Mapping[str, str] | None = None,
) -> Snapshot:
    disk = disk_capacity_bytes or {}
    net = network_bytes_per_second or {}
    described = admin.describe_cluster()
    brokers = [
        Broker(b.id, b.rack, int(disk.get(b.id, default_disk_bytes)),
               float(net.get(b.id, default_network_bytes_per_second)),
               float(net.get(b.id, default_network_bytes_per_second)))
        for b in sorted(described.brokers, key=lambda b: b.id)
    ]
    table = PartitionTable()
    leaderless = 0
    described_parts = sorted(admin.describe_partitions(),
                             key=lambda p: (p.tp.topic, p.tp.partition))
    per_topic: dict[str, int] = {}
    for p in described_parts:
        per_topic[p.tp.topic] = per_topic.get(p.tp.topic, 0) + 1
    for p in described_parts:
        # a partition being moved reports R = target + original; plan from the target
        replicas = target_replicas(p)
        leader = p.leader
        if leader not in replicas:
            leaderless += 1
            leader = replicas[0]
        rate = float(p.bytes_in_per_second or 0.0)
        out = rate * consumer_fanout
        if topic_rates is not None:
            share = 1.0 / per_topic[p.tp.topic]
            rate = float(topic_rates[0].get(p.tp.topic, 0.0)) * share
            consumed = topic_rates[1].get(p.tp.topic)
            out = float(consumed) * share if consumed is not None else rate * consumer_fanout
        table.append(p.tp.topic, p.tp.partition, replicas, leader, int(p.size_bytes or 0),
                     rate, out)
    extra: dict[str, object] = {"clusterId": described.cluster_id, "source": "ClusterAdmin",
                                "consumerFanout": consumer_fanout}
    if sources:
        extra["sources"] = dict(sources)
    if leaderless:
        extra["partitionsWithoutLeader"] = leaderless
    dirs = _log_dirs(admin, brokers, table, extra)
    if dirs is not None:  # a broker's disk is its directories (the snapshot checks it)
        held: dict[int, int] = {}
        for d in dirs:
            held[d.broker] = held.get(d.broker, 0) + d.capacity_bytes
        brokers = [dataclasses.replace(b, disk_capacity_bytes=held[b.id]) for b in brokers]
    return Snapshot(brokers, table, cluster_name, created_at, extra, dirs)


def _log_dirs(admin: ClusterAdmin, brokers: list[Broker], table: PartitionTable,
              extra: dict[str, object]) -> list[LogDir] | None:
    """The brokers' directories and each replica's (in ``table.log_dirs``), when some broker
    has several; None (and the table without them) otherwise."""
    ids = [b.id for b in brokers]
    if not any(len(ds) > 1 for ds in admin.describe_log_dirs(ids, []).values()):
        return None  # (asked without partitions first: cheap on a cluster without JBOD)
    described = admin.describe_log_dirs(ids)
    silent = sorted({b.id for b in brokers} - set(described))
    if silent:  # its replicas' directories are unknown: plan without directories
        extra["logDirs"] = f"not recorded: broker(s) {silent} did not answer DescribeLogDirs"
        return None
    disk = {b.id: b.disk_capacity_bytes for b in brokers}
    dirs = [LogDir(b, d.path, d.total_bytes if d.total_bytes is not None
                   else disk[b] // len(ds))
            for b, ds in sorted(described.items()) for d in ds]
    where = {(r.tp, b): d.path for b, ds in described.items() for d in ds
             for r in d.replicas if not r.future}
    guessed = 0
    rows = []
    for topic, partition, replicas in zip(table.topic, table.partition, table.replicas,
                                          strict=True):
        tp = TopicPartition(topic, partition)
        row = []
        for b in replicas:
            if b not in described:  # a replica on a broker that is not registered
                extra["logDirs"] = (f"not recorded: {tp} has a replica on broker {b}, which "
                                    "is not registered")
                return None
            path = where.get((tp, b))
            if path is None:  # a replica a move in flight has not created yet
                guessed += 1
                path = described[b][0].path
            row.append(path)
        rows.append(row)
    table.log_dirs = rows
    if guessed:
        extra["logDirsGuessed"] = guessed
    return dirs
