"""The baseline: what `kafka-reassign-partitions --generate` proposes.

Kafka's rack-aware round robin (AdminUtils.assignReplicasToBrokersRackAware, used by
ReassignPartitionsCommand.calculateAssignment per topic): brokers in rack-alternating order,
a random start index and replica shift per topic, followers stepped through the list
skipping racks (and brokers) that already hold a replica while others do not. It ignores the
current placement and sizes, which is the point of comparing with it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence


def rack_alternated(brokers: Sequence[tuple[int, str | None]]) -> list[int]:
    by_rack: dict[str, list[int]] = {}
    for b, rack in brokers:
        by_rack.setdefault(rack or "", []).append(b)
    racks = sorted(by_rack)
    iters = {r: iter(sorted(by_rack[r])) for r in racks}
    out: list[int] = []
    i = 0
    while len(out) < len(brokers):
        nxt = next(iters[racks[i]], None)
        if nxt is not None:
            out.append(nxt)
        i = (i + 1) % len(racks)
    return out


def assign_topic(brokers: Sequence[tuple[int, str | None]], partitions: int,
                 replication_factor: int, rng: random.Random) -> list[list[int]]:
    rack_of = dict(brokers)
    racked = any(r is not None for r in rack_of.values())
    arranged = rack_alternated(brokers) if racked else sorted(rack_of)
    n = len(arranged)
    num_racks = len({rack_of[b] for b in arranged})
    start = rng.randrange(n)
    shift = rng.randrange(n)
    out: list[list[int]] = []
    for p in range(partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [arranged[first]]
        racks = {rack_of[arranged[first]]}
        held = {arranged[first]}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                idx = (first + 1 + (shift * (num_racks if racked else 1) + k) % (n - 1)) % n
                b = arranged[idx]
                k += 1
                rack_free = not racked or rack_of[b] not in racks or len(racks) == num_racks
                if rack_free and (b not in held or len(held) == n):
                    replicas.append(b)
                    racks.add(rack_of[b])
                    held.add(b)
                    break
        out.append(replicas)
    return out


def generate(brokers: Sequence[tuple[int, str | None]], topics: Sequence[str],
             partitions: Sequence[int], replication: Sequence[int], seed: int
             ) -> list[list[int]]:
    """New replicas for every partition, in input order (rows grouped by topic)."""
    rng = random.Random(seed)
    per_topic: dict[str, list[int]] = {}
    for i, t in enumerate(topics):
        per_topic.setdefault(t, []).append(i)
    result: list[list[int]] = [[] for _ in topics]
    for t in sorted(per_topic):
        rows = per_topic[t]
        count = max(partitions[i] for i in rows) + 1
        assignment = assign_topic(brokers, count, replication[rows[0]], rng)
        for i in rows:
            result[i] = assignment[partitions[i]]
    return result
