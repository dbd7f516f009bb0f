"""A cluster snapshot from any backend, through the ``ClusterAdmin`` port only.

Brokers and racks come from ``describe_cluster``; replicas, leader, log size and producer
rate from ``describe_partitions``. Capacities are not part of the Kafka admin API, so the
caller supplies them (the embedded cluster's spec has them; for a real cluster they are
options). Consumer traffic is not visible to the admin API either: bytes out are the
producer rate times ``consumer_fanout``.
"""

from __future__ import annotations

from collections.abc import Mapping

from controller_core.admin import ClusterAdmin
from controller_core.planning.snapshot import Broker, PartitionTable, Snapshot

DEFAULT_DISK_BYTES = 1 << 40
DEFAULT_NETWORK_BYTES_PER_SECOND = 125_000_000.0


def snapshot_from_admin(
    admin: ClusterAdmin, *, cluster_name: str, created_at: str,
    disk_capacity_bytes: Mapping[int, int] | None = None,
    network_bytes_per_second: Mapping[int, float] | None = None,
    default_disk_bytes: int = DEFAULT_DISK_BYTES,
    default_network_bytes_per_second: float = DEFAULT_NETWORK_BYTES_PER_SECOND,
    consumer_fanout: float = 1.0,
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
    for p in sorted(admin.describe_partitions(), key=lambda p: (p.tp.topic, p.tp.partition)):
        # a partition being moved reports R = target + original; plan from the target
        removing = set(p.removing)
        replicas = [r for r in p.replicas if r not in removing]
        leader = p.leader
        if leader not in replicas:
            leaderless += 1
            leader = replicas[0]
        rate = float(p.bytes_in_per_second or 0.0)
        table.append(p.tp.topic, p.tp.partition, replicas, leader, int(p.size_bytes or 0),
                     rate, rate * consumer_fanout)
    extra = {"clusterId": described.cluster_id, "source": "ClusterAdmin",
             "consumerFanout": consumer_fanout}
    if leaderless:
        extra["partitionsWithoutLeader"] = leaderless
    return Snapshot(brokers, table, cluster_name, created_at, extra)
