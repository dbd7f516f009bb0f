"""Synthetic cluster snapshots for tests, benchmarks and demos (seeded, reproducible).

``skew`` makes the first ``skewed_fraction`` of the brokers attract ``1 + skew`` times the
replicas of the others (and so more disk, leaders and traffic) — a cluster that needs a
rebalance. ``empty`` brokers exist but hold nothing (just added). ``round_robin`` places
replicas the way Kafka creates topics (consecutive brokers in rack-alternating order), so
that — with ``size_sigma=0`` — every broker holding data is exactly as loaded as the others.
"""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Sequence
from typing import Any

from controller_core.planning.snapshot import Broker, PartitionTable, Snapshot


def make_snapshot(brokers: int = 6, partitions: int = 120, replication_factor: int = 3,
                  racks: int = 3, seed: int = 0, skew: float = 0.0,
                  skewed_fraction: float = 0.2, empty: Sequence[int] = (),
                  mean_size_bytes: int = 100_000_000, size_sigma: float = 1.0,
                  disk_capacity_bytes: int | None = None, topics: int = 4,
                  cluster_name: str = "demo", round_robin: bool = False) -> Snapshot:
    np: Any = importlib.import_module("numpy")
    rng = np.random.default_rng(seed)
    ids = list(range(brokers))
    rack_names = [f"rack-{chr(ord('a') + i)}" for i in range(racks)] if racks else []
    rack_of = {b: (rack_names[b % racks] if racks else None) for b in ids}
    weight = np.array([0.0 if b in empty else
                       (1.0 + skew if b < max(1, int(brokers * skewed_fraction)) else 1.0)
                       for b in ids])
    mu = np.log(mean_size_bytes) - size_sigma**2 / 2
    sizes = rng.lognormal(mu, size_sigma, partitions).astype(np.int64)
    total = int(sizes.sum()) * replication_factor
    cap = disk_capacity_bytes or int(2.5 * total / max(1, brokers - len(empty)))
    placed = np.full((partitions, replication_factor), -1, dtype=np.int64)
    usable_racks = sorted({r for b in ids if weight[b] > 0 and (r := rack_of[b])})
    if round_robin:
        by_rack: dict[str | None, list[int]] = {}
        for b in ids:
            if weight[b] > 0:
                by_rack.setdefault(rack_of[b], []).append(b)
        order = [b for group in itertools.zip_longest(*by_rack.values()) for b in group
                 if b is not None]
        for i in range(partitions):
            placed[i] = [order[(i + j) % len(order)] for j in range(replication_factor)]
    elif racks and len(usable_racks) >= replication_factor:
        rack_choice = np.argsort(rng.random((partitions, len(usable_racks))), axis=1)
        for j in range(replication_factor):
            for ri, rname in enumerate(usable_racks):
                members = np.array([b for b in ids if rack_of[b] == rname and weight[b] > 0])
                rows = np.nonzero(rack_choice[:, j] == ri)[0]
                if rows.size:
                    p = weight[members] / weight[members].sum()
                    placed[rows, j] = rng.choice(members, size=rows.size, p=p)
    else:
        p = weight / weight.sum()
        for i in range(partitions):
            placed[i] = rng.choice(ids, size=replication_factor, replace=False, p=p)
    rates_in = sizes / 3600.0 * rng.uniform(0.5, 1.5, partitions)
    rates_out = rates_in * rng.uniform(0.5, 3.0, partitions)
    table = PartitionTable()
    per_topic = max(1, -(-partitions // topics))
    for i in range(partitions):
        reps = [int(x) for x in placed[i]]
        table.append(f"topic-{i // per_topic}", i % per_topic, reps, reps[0], int(sizes[i]),
                     float(round(rates_in[i], 3)), float(round(rates_out[i], 3)))
    broker_rows = [Broker(b, rack_of[b], cap, 125_000_000.0, 125_000_000.0) for b in ids]
    return Snapshot(broker_rows, table, cluster_name, "1970-01-01T00:00:00Z")


def with_log_dirs(snapshot: Snapshot, dirs: int = 2, first_share: float = 0.5,
                  seed: int = 0) -> Snapshot:
    """The snapshot with ``dirs`` log directories per broker (``/data/d0`` ...), each
    broker's capacity split evenly between them (the remainder to the first), and each
    replica in one of them: ``/data/d0`` with probability ``first_share``, else one of
    the others at random (seeded) — ``first_share`` above 1/dirs makes d0 the full one."""
    from controller_core.planning.snapshot import LogDir

    np: Any = importlib.import_module("numpy")
    rng = np.random.default_rng(seed)
    names = [f"/data/d{i}" for i in range(dirs)]
    log_dirs = []
    for b in snapshot.brokers:
        share = b.disk_capacity_bytes // dirs
        for i, name in enumerate(names):
            cap = share + (b.disk_capacity_bytes - share * dirs if i == 0 else 0)
            log_dirs.append(LogDir(b.id, name, cap))
    table = snapshot.partitions
    table.log_dirs = []
    for reps in table.replicas:
        row = []
        for _ in reps:
            if dirs == 1 or rng.random() < first_share:
                row.append(names[0])
            else:
                row.append(names[1 + int(rng.integers(dirs - 1))])
        table.log_dirs.append(row)
    snapshot.log_dirs = log_dirs
    return snapshot
