"""Initial replica placement: Kafka's rack-aware round robin (assignReplicasToBrokers)."""

from __future__ import annotations

import random
from collections.abc import Mapping


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered so consecutive entries sit in different racks (a1, b1, c1, a2, b2...):
    AdminUtils.getRackAlternatedBrokerList (racks by name, brokers of a rack by id)."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    return [column[i] for i in range(len(racks)) for column in columns if i < len(column)]


def assign_replicas(brokers: Mapping[int, str | None], partitions: int, replication_factor: int,
                    rng: random.Random) -> list[list[int]]:
    """Replica lists for a new topic (AdminUtils.assignReplicasToBrokers); rack-aware when
    every broker has a rack."""
    if replication_factor > len(brokers):
        raise ValueError(f"replication factor {replication_factor} exceeds {len(brokers)} brokers")
    n = len(brokers)
    named = {b: r for b, r in brokers.items() if r is not None}
    rack_aware = len(named) == n
    racks: Mapping[int, str | None] = brokers if rack_aware else dict.fromkeys(brokers)
    arranged = rack_alternated(named) if rack_aware else sorted(brokers)
    num_racks = len(set(racks.values()))
    start = rng.randrange(n)
    first_shift = rng.randrange(n)
    out: list[list[int]] = []
    rack_at = [racks[b] for b in arranged]  # the rack of each position of ``arranged``
    m = n - 1
    for p in range(partitions):
        shift = (first_shift + p // n) * num_racks  # the followers shift by one more a round
        first = (p + start) % n
        leader = arranged[first]
        replicas = [leader]
        used_racks = {rack_at[first]}
        k = 0
        for _ in range(replication_factor - 1):
            # Kafka tries brokers at a growing shift until one is on a rack without a replica
            # (or every rack has one) and holds none yet; each other broker comes up within
            # n - 1 tries, so a fitting one is always found in this bounded range. (A plain
            # loop, not a generator: placing a million partitions was a third of a create.)
            for i in range(k, k + n):
                j = (first + 1 + (shift + i) % m) % n
                b = arranged[j]
                if (rack_at[j] not in used_racks or len(used_racks) == num_racks) \
                        and b not in replicas:
                    break
            else:
                raise AssertionError("no broker fits: unreachable with n > replication factor")
            replicas.append(b)
            used_racks.add(rack_at[j])
            k = i + 1
        out.append(replicas)
    return out
