"""What the planning rounds need from the partition table, whoever holds it.

The rounds (:mod:`.rounds`) are the same whether the table lives in Spark
(:class:`.spark_job.SparkTable`, any master, tables of any size) or in the driver's own
memory (:class:`.local_table.LocalTable`, small local plans: no JVM to start). Both score
with the same functions of :mod:`.scoring` and give the same plan for the same snapshot
and seed; only where the rows are scanned differs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from controller_core.planning.balancer import Balancer, Candidate
from controller_core.planning.result import PartitionMove
from controller_core.planning.scoring import RoundContext

Changes = Mapping[int, tuple[tuple[int, ...], int]]
# rows a violation names: at most this many per kind (the report lists them)
VIOLATION_ROWS = 50


@dataclass(frozen=True, slots=True)
class Finished:
    """The table with the plan applied, as far as the result needs it."""

    loads: dict[int, list[int]]
    # changed partitions, smallest first (then topic, partition)
    moves: list[PartitionMove]
    # (topic, partition, replicas) still on a removed broker, at most VIOLATION_ROWS
    drained_left: list[tuple[str, int, list[int]]]
    # (topic, partition, replicas, size) sharing a rack where racks allow otherwise
    rack_shared: list[tuple[str, int, list[int], int]]
    # pid -> (topic, partition, replicas) of the partitions asked for
    rows: dict[int, tuple[str, int, list[int]]]


class PlanTable(Protocol):
    def loads(self, broker_ids: Iterable[int]) -> dict[int, list[int]]:
        """Per-broker [replicas, leaders, disk, bytes in, bytes out] of the snapshot."""
        ...

    def per_rack(self, racks: int) -> list[float]:
        """What each rack must hold (see ``compute_targets``); checks ids are distinct."""
        ...

    def any_rack_shared(self, bal: Balancer) -> bool:
        """Whether some partition has two replicas in one rack while racks allow otherwise."""
        ...

    def candidates(self, ctx: RoundContext, caps: dict[int, int], leaders: bool
                   ) -> list[Candidate]:
        """The round's candidates: every scored batch cut by ``best_per_source``."""
        ...

    def scored(self) -> None:
        """Wait for background work started with the table (Spark's worker warm-up)."""
        ...

    def finish(self, changes: Changes, broker_ids: Iterable[int], bal: Balancer,
               removed: set[int], pids: Iterable[int]) -> Finished:
        """Apply the plan's changes once and read what the result reports."""
        ...
