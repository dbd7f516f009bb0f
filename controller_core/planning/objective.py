"""Broker load, the balance objective, and the constraints a plan must meet — pure Python.

Five metrics per broker. Three travel with a replica (replica count, disk bytes, bytes in:
every replica receives the producer stream, followers by replication) and two with the
leadership (leader count, bytes out: consumers plus replication to the followers). They are
disjoint, so a replica move and the leadership change it causes score independently.

The objective is the weighted sum over brokers and metrics of ``((load - target) / mean)²``.
Targets are proportional to capacity (disk, network) or equal (counts), over the brokers
that stay. Moving an amount ``x`` of one metric from broker *a* to broker *b* changes it by
``2·w·x·(e_b - e_a + x) / mean²`` where ``e = load - target``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from controller_core.planning.snapshot import Broker

REPLICAS, LEADERS, DISK, NET_IN, NET_OUT = range(5)
METRICS = ("replicas", "leaders", "disk_bytes", "bytes_in_per_second", "bytes_out_per_second")
REPLICA_METRICS = (REPLICAS, DISK, NET_IN)
LEADER_METRICS = (LEADERS, NET_OUT)
DEFAULT_WEIGHTS = (1.0, 1.0, 1.0, 0.3, 0.3)
# Brokers within target·(1 ± tolerance) of a metric are balanced for that metric.
DEFAULT_TOLERANCE = (0.02, 0.02, 0.02, 0.10, 0.10)


def rate(value: float) -> int:
    """Rates are planned in whole bytes/s so that sums are exact and plans reproducible."""
    return math.floor(value + 0.5)


def replica_load(size_bytes: int, bytes_in: int) -> tuple[int, int, int]:
    """(replicas, disk, bytes in) one replica puts on its broker."""
    return 1, size_bytes, bytes_in


def leader_load(bytes_in: int, bytes_out: int, replication_factor: int) -> tuple[int, int]:
    """(leaders, bytes out) the leadership puts on its broker."""
    return 1, bytes_out + bytes_in * (replication_factor - 1)


def compute_loads(broker_ids: Iterable[int], replicas: Sequence[Sequence[int]],
                  leaders: Sequence[int], sizes: Sequence[int], bytes_in: Sequence[int],
                  bytes_out: Sequence[int]) -> dict[int, list[int]]:
    """Per-broker load (the five metrics) of an assignment; rates already whole bytes/s."""
    loads = {b: [0, 0, 0, 0, 0] for b in broker_ids}
    for reps, leader, size, bin_, bout in zip(replicas, leaders, sizes, bytes_in, bytes_out,
                                              strict=True):
        for r in reps:
            row = loads[r]
            row[REPLICAS] += 1
            row[DISK] += size
            row[NET_IN] += bin_
        row = loads[leader]
        row[LEADERS] += 1
        row[NET_OUT] += bout + bin_ * (len(reps) - 1)
    return loads


@dataclass(slots=True)
class Targets:
    """Target load, normaliser and tolerance band per broker and metric."""

    target: dict[int, tuple[float, ...]]
    mean: tuple[float, ...]
    band: dict[int, tuple[float, ...]]
    weights: tuple[float, ...]


def compute_targets(brokers: Sequence[Broker], eligible: set[int],
                    totals: Sequence[float], weights: Sequence[float] = DEFAULT_WEIGHTS,
                    tolerance: Sequence[float] = DEFAULT_TOLERANCE,
                    per_rack: Sequence[float] | None = None) -> Targets:
    """Targets for the brokers in ``eligible``; every other broker's target is zero.

    ``per_rack``: of the replica metrics (replicas, disk, bytes in), what every rack must
    hold whatever the plan — partitions with one replica per rack (replication factor =
    racks) put exactly one in each. That part is shared within the rack, the rest across
    all brokers; otherwise a rack with fewer brokers would have targets it cannot meet.
    Used for a metric only where it moves some broker's target by more than the tolerance
    (a rack with one broker fewer than the others on 100 brokers does not).
    """
    elig = [b for b in brokers if b.id in eligible]
    n = max(len(elig), 1)
    racks = {b.rack for b in elig}
    if per_rack is None or None in racks or len(racks) < 2:
        per_rack = [0.0] * 5
    weight_of = (lambda b: 1.0, lambda b: 1.0, lambda b: float(b.disk_capacity_bytes),
                 lambda b: b.network_in_capacity_bytes_per_second,
                 lambda b: b.network_out_capacity_bytes_per_second)
    share = [sum(weight_of[m](b) for b in elig) or 1.0 for m in range(5)]
    rack_share = [{r: sum(weight_of[m](b) for b in elig if b.rack == r) or 1.0 for r in racks}
                  for m in range(5)]
    forced = [per_rack[m] if m in REPLICA_METRICS else 0.0 for m in range(5)]
    for m in range(5):
        plain = [totals[m] * weight_of[m](b) / share[m] for b in elig]
        racked = [(totals[m] - forced[m] * len(racks)) * weight_of[m](b) / share[m]
                  + forced[m] * weight_of[m](b) / rack_share[m][b.rack] for b in elig]
        if all(abs(x - y) <= tolerance[m] * y for x, y in zip(racked, plain, strict=True)):
            forced[m] = 0.0
    free = [totals[m] - forced[m] * len(racks) for m in range(5)]
    target: dict[int, tuple[float, ...]] = {}
    band: dict[int, tuple[float, ...]] = {}
    for b in brokers:
        if b.id not in eligible:
            t: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0, 0.0)
            tol: Sequence[float] = tolerance
        else:
            plain = [totals[m] * weight_of[m](b) / share[m] for m in range(5)]
            t = tuple(free[m] * weight_of[m](b) / share[m]
                      + forced[m] * weight_of[m](b) / rack_share[m][b.rack]
                      for m in range(5))
            # A rack forced above the cluster-wide share is balanced inside itself twice as
            # tightly: its brokers already sit above the mean by the rack's excess, and a
            # full band on top adds to it (1 of 3 racks one broker short on 100 brokers:
            # max/mean up to 1.031 · 1.02 = 1.052; with half the band 1.042).
            tol = [tolerance[m] / 2 if t[m] > plain[m] * (1 + tolerance[m]) else tolerance[m]
                   for m in range(5)]
        target[b.id] = t
        # Counts move in whole units: a band is never narrower than one replica/leader.
        band[b.id] = tuple(
            max(t[m] * tol[m], 1.0 if m in (REPLICAS, LEADERS) else 0.0)
            for m in range(5))
    mean = tuple((totals[m] / n) or 1.0 for m in range(5))
    return Targets(target, mean, band, tuple(weights))


def with_leader_targets(targets: Targets, leaders: Targets) -> Targets:
    """``targets`` with the leader metrics of ``leaders``: demoted brokers keep their replica
    targets but lead nothing, so the leadership they give up is shared by the others."""
    def pick(m: int, mine: float, theirs: float) -> float:
        return theirs if m in LEADER_METRICS else mine

    target = {b: tuple(pick(m, x, leaders.target[b][m]) for m, x in enumerate(row))
              for b, row in targets.target.items()}
    band = {b: tuple(pick(m, x, leaders.band[b][m]) for m, x in enumerate(row))
            for b, row in targets.band.items()}
    mean = tuple(pick(m, x, leaders.mean[m]) for m, x in enumerate(targets.mean))
    return Targets(target, mean, band, targets.weights)


def transfer_delta(targets: Targets, loads: dict[int, list[int]], metric: int, src: int,
                   dst: int, amount: float) -> float:
    """Change of the objective when ``amount`` of ``metric`` moves from ``src`` to ``dst``."""
    if amount == 0 or src == dst:
        return 0.0
    e_src = loads[src][metric] - targets.target[src][metric]
    e_dst = loads[dst][metric] - targets.target[dst][metric]
    m = targets.mean[metric]
    return 2.0 * targets.weights[metric] * amount * (e_dst - e_src + amount) / (m * m)


def objective(targets: Targets, loads: dict[int, list[int]]) -> float:
    total = 0.0
    for b, row in loads.items():
        for m in range(5):
            d = (row[m] - targets.target[b][m]) / targets.mean[m]
            total += targets.weights[m] * d * d
    return total


def imbalance(loads: dict[int, list[int]], eligible: Iterable[int],
              capacity: dict[int, float] | None = None, metric: int = DISK) -> float:
    """max/mean of a metric over the eligible brokers (relative to capacity when given)."""
    ids = list(eligible)
    if capacity is None:
        vals = [float(loads[b][metric]) for b in ids]
    else:
        vals = [loads[b][metric] / capacity[b] for b in ids]
    mean = sum(vals) / len(vals) if vals else 0.0
    return max(vals) / mean if mean > 0 else 1.0


# ---------------------------------------------------------------------------------------
# constraints


def rack_aware_possible(replication_factor: int, racks: set[str]) -> bool:
    return bool(racks) and len(racks) >= replication_factor


def distinct_racks(replicas: Sequence[int], rack_of: dict[int, str | None]) -> int:
    return len({rack_of[r] for r in replicas})


@dataclass(frozen=True, slots=True)
class Violation:
    """A constraint a plan does not meet, and why."""

    constraint: str
    subject: str
    reason: str

    def __str__(self) -> str:
        return f"{self.constraint}: {self.subject}: {self.reason}"


def check_assignment(brokers: Sequence[Broker], topics: Sequence[str],
                     partitions: Sequence[int], before: Sequence[Sequence[int]],
                     after: Sequence[Sequence[int]], sizes: Sequence[int],
                     removed: set[int] = frozenset()) -> list[Violation]:  # type: ignore[assignment]
    """Every violated constraint of a target assignment (empty: a valid plan)."""
    known = {b.id for b in brokers}
    rack_of = {b.id: b.rack for b in brokers}
    racked = any(b.rack is not None for b in brokers)
    racks_left = {b.rack for b in brokers if b.id not in removed and b.rack is not None}
    out: list[Violation] = []
    disk: dict[int, int] = dict.fromkeys(known, 0)
    for topic, p, old, new, size in zip(topics, partitions, before, after, sizes, strict=True):
        subject = f"{topic}-{p}"
        if len(set(new)) != len(new):
            out.append(Violation("distinct brokers", subject, f"replicas {list(new)} repeat"))
        if len(new) != len(old):
            out.append(Violation("replication factor", subject,
                                 f"{len(old)} replicas before, {len(new)} after"))
        unknown = sorted(set(new) - known)
        if unknown:
            out.append(Violation("known brokers", subject, f"unknown broker(s) {unknown}"))
            continue
        held = sorted(set(new) & removed)
        if held:
            out.append(Violation("drain", subject, f"still on removed broker(s) {held}"))
        if racked and rack_aware_possible(len(new), racks_left) and \
                distinct_racks(new, rack_of) < len(new):
            out.append(Violation(
                "rack awareness", subject,
                f"replicas {list(new)} share a rack although {len(racks_left)} racks exist"))
        for r in new:
            disk[r] += size
    for b in brokers:
        if disk[b.id] > b.disk_capacity_bytes:
            out.append(Violation(
                "disk capacity", f"broker {b.id}",
                f"{disk[b.id]} bytes planned, capacity {b.disk_capacity_bytes}"))
    return out
