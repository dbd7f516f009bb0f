"""assign_replicas lost its generator search for a plain loop (issue 22: a third of creating
a million partitions); it must place exactly as the reference form of Kafka's
assignReplicasToBrokers it replaced, rack-aware or not, for any seed."""

from __future__ import annotations

import random
from collections.abc import Mapping

from controller_core.metadata.placement import assign_replicas, rack_alternated


def _reference(brokers: Mapping[int, str | None], partitions: int, replication_factor: int,
               rng: random.Random) -> list[list[int]]:
    n = len(brokers)
    named = {b: r for b, r in brokers.items() if r is not None}
    rack_aware = len(named) == n
    racks: Mapping[int, str | None] = brokers if rack_aware else dict.fromkeys(brokers)
    arranged = rack_alternated(named) if rack_aware else sorted(brokers)
    num_racks = len(set(racks.values()))
    start = rng.randrange(n)
    first_shift = rng.randrange(n)
    out: list[list[int]] = []
    for p in range(partitions):
        shift = first_shift + p // n
        first = (p + start) % n
        leader = arranged[first]
        replicas = [leader]
        used_racks = {racks[leader]}
        k = 0
        for _ in range(replication_factor - 1):
            k, broker = next(
                (i, b) for i in range(k, k + n)
                for b in (arranged[(first + 1 + (shift * num_racks + i) % (n - 1)) % n],)
                if (racks[b] not in used_racks or len(used_racks) == num_racks)
                and b not in replicas)
            replicas.append(broker)
            used_racks.add(racks[broker])
            k += 1
        out.append(replicas)
    return out


def test_places_as_the_reference() -> None:
    rng = random.Random(22)
    for _ in range(400):
        n = rng.randint(1, 30)
        ids = rng.sample(range(100), n)
        mode = rng.choice(["racks", "none", "partial"])
        num_racks = rng.randint(1, 6)
        brokers: dict[int, str | None] = {
            b: None if mode == "none" else f"r{rng.randrange(num_racks)}" for b in ids}
        if mode == "partial":
            brokers[ids[0]] = None
        rf = rng.randint(1, min(n, 5))
        partitions = rng.randint(0, 120)
        seed = rng.randrange(2**32)
        assert assign_replicas(brokers, partitions, rf, random.Random(seed)) == \
            _reference(brokers, partitions, rf, random.Random(seed))
