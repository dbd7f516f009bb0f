"""Initial replica placement: Kafka's rack-aware round robin (assignReplicasToBrokers)."""

from __future__ import annotations

import random
from collections.abc import Mapping


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered so consecutive entries sit in different racks (a1, b1, c1, a2, b2...)."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    ordered_racks = sorted(by_rack)
    out: list[int] = []
    i = 0
    while len(out) < len(racks):
        for rack in ordered_racks:
            if i < len(by_rack[rack]):
                out.append(by_rack[rack][i])
        i += 1
    return out


def _replica_index(first: int, second_shift: int, j: int, n: int) -> int:
    shift = 1 + (second_shift + j) % (n - 1)
    return (first + shift) % n


def assign_replicas(brokers: Mapping[int, str | None], partitions: int, replication_factor: int,
                    rng: random.Random) -> list[list[int]]:
    """Replica lists for a new topic; rack-aware when every broker has a rack."""
    if replication_factor > len(brokers):
        raise ValueError(f"replication factor {replication_factor} exceeds {len(brokers)} brokers")
    n = len(brokers)
    rack_aware = all(r is not None for r in brokers.values())
    racks: dict[int, str] = {b: (r or "") for b, r in brokers.items()}
    arranged = rack_alternated(racks) if rack_aware else sorted(brokers)
    num_racks = len(set(racks.values())) if rack_aware else 1
    start = rng.randrange(n)
    shift = rng.randrange(n)
    out: list[list[int]] = []
    for p in range(partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        leader = arranged[first]
        replicas = [leader]
        if n == 1:
            out.append(replicas)
            continue
        used_racks = {racks[leader]}
        used = {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                broker = arranged[_replica_index(first, shift * num_racks, k, n)]
                k += 1
                rack_ok = racks[broker] not in used_racks or len(used_racks) == num_racks
                if rack_ok and broker not in used:
                    replicas.append(broker)
                    used.add(broker)
                    used_racks.add(racks[broker])
                    break
                if k > 4 * n:  # racks exhausted: fall back to any unused broker
                    broker = next(b for b in arranged if b not in used)
                    replicas.append(broker)
                    used.add(broker)
                    break
        out.append(replicas)
    return out
