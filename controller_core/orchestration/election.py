"""The election runner: preferred or unclean elections with per-partition results and counts."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from controller_core import errors
from controller_core.admin import ClusterAdmin
from controller_core.errors import ApiResult
from controller_core.model import ElectionType, TopicPartition


@dataclass(frozen=True, slots=True)
class ElectionReport:
    election_type: ElectionType
    results: dict[TopicPartition, ApiResult]
    unknown_topics: tuple[str, ...] = ()
    attempted_all: bool = False

    @property
    def elected(self) -> int:
        return sum(1 for r in self.results.values() if r.ok)

    @property
    def not_needed(self) -> int:
        return sum(1 for r in self.results.values() if r.error == errors.ELECTION_NOT_NEEDED)

    @property
    def failed(self) -> int:
        return len(self.results) - self.elected - self.not_needed + len(self.unknown_topics)

    def failures(self) -> list[tuple[TopicPartition, ApiResult]]:
        failed = {tp: r for tp, r in self.results.items()
                  if not r.ok and r.error != errors.ELECTION_NOT_NEEDED}
        return [(tp, failed[tp]) for tp in sorted(failed)]


def run_election(admin: ClusterAdmin, election_type: ElectionType, *,
                 partitions: Iterable[TopicPartition] | None = None,
                 topics: Iterable[str] | None = None) -> ElectionReport:
    """Elect for the given partitions, every partition of ``topics``, or (neither) all."""
    if partitions is not None:
        outcome = admin.elect_leaders(election_type, list(partitions))
        return ElectionReport(election_type, outcome.results)
    if topics is not None:
        wanted = list(dict.fromkeys(topics))
        described = admin.describe_partitions(topics=wanted)
        present = {d.tp.topic for d in described}
        unknown = tuple(t for t in wanted if t not in present)
        outcome = admin.elect_leaders(election_type, [d.tp for d in described])
        return ElectionReport(election_type, outcome.results, unknown)
    outcome = admin.elect_leaders(election_type)  # no partition set: every partition
    return ElectionReport(election_type, outcome.results, attempted_all=True)


@dataclass(frozen=True, slots=True)
class LeaderImbalance:
    """How many partitions are led by a replica other than their preferred one."""

    partitions: int
    off_preferred: int
    per_broker: dict[int, int] = field(default_factory=dict)  # leaders each broker holds

    @property
    def percent(self) -> float:
        return 100.0 * self.off_preferred / self.partitions if self.partitions else 0.0


def leader_imbalance(admin: ClusterAdmin, topics: Iterable[str] | None = None) -> LeaderImbalance:
    described = admin.describe_partitions(topics=list(topics) if topics is not None else None)
    per_broker: dict[int, int] = {}
    off = 0
    for d in described:
        if d.leader >= 0:
            per_broker[d.leader] = per_broker.get(d.leader, 0) + 1
        if d.replicas and d.leader != d.replicas[0]:
            off += 1
    return LeaderImbalance(len(described), off, per_broker)
