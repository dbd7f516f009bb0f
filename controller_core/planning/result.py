"""What a planning run produces, before it is rendered — plain data."""

from __future__ import annotations

from dataclasses import dataclass, field

from controller_core.planning.goals import Goal
from controller_core.planning.objective import Targets, Violation
from controller_core.planning.snapshot import Broker


@dataclass(frozen=True, slots=True)
class DiskRow:
    """One log directory of a broker, before and after the plan (JBOD snapshots)."""

    broker: int
    log_dir: str
    capacity_bytes: int
    used_before: int
    used_after: int
    removed: bool = False  # remove-disks named it


@dataclass(frozen=True, slots=True)
class PartitionMove:
    """One partition whose replica list changes (set or order), or whose replicas' log
    directories change (JBOD: ``dirs_before``/``dirs_after``, aligned with ``before`` and
    ``after``; None when the snapshot has no log-dir information: "any")."""

    topic: str
    partition: int
    before: tuple[int, ...]
    after: tuple[int, ...]
    size_bytes: int
    leader_before: int
    dirs_before: tuple[str, ...] | None = None
    dirs_after: tuple[str, ...] | None = None
    # ``added``, computed once: the report, the resources and the summary ask for it
    # several times per move (290,000 moves at 10^6 partitions)
    _added: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_added", tuple([r for r in self.after if r not in self.before]))

    @property
    def added(self) -> tuple[int, ...]:
        return self._added

    @property
    def removed(self) -> tuple[int, ...]:
        return tuple([r for r in self.before if r not in self.after])

    @property
    def bytes_moved(self) -> int:
        return self.size_bytes * len(self.added)

    @property
    def dir_moves(self) -> tuple[int, ...]:
        """Brokers whose replica stays on the broker but changes log directory."""
        if self.dirs_before is None or self.dirs_after is None:
            return ()
        was = dict(zip(self.before, self.dirs_before, strict=True))
        return tuple(b for b, d in zip(self.after, self.dirs_after, strict=True)
                     if b in was and was[b] != d)

    @property
    def dir_bytes_moved(self) -> int:
        """Bytes copied between log directories of one broker (no network)."""
        return self.size_bytes * len(self.dir_moves)

    @property
    def leader_changes(self) -> bool:
        # a move of log directories only (same replicas, same order) elects nothing
        return self.after != self.before and self.after[0] != self.leader_before


@dataclass(slots=True)
class RoundStat:
    phase: str
    round: int
    sources: int
    candidates: int
    accepted: int
    seconds: float
    driver_seconds: float = 0.0  # of ``seconds``, picking moves on the driver (pure Python)
    objective: float = 0.0  # the imbalance (objective) after the round


@dataclass(slots=True)
class PlanResult:
    goal: Goal
    seed: int
    brokers: list[Broker]
    eligible: set[int]
    moves: list[PartitionMove]
    loads_before: dict[int, list[int]]
    loads_after: dict[int, list[int]]
    targets: Targets
    partitions_total: int
    violations: list[Violation] = field(default_factory=list)
    rounds: list[RoundStat] = field(default_factory=list)
    seconds: float = 0.0
    # where the time went: load, before, replica rounds, leader rounds, finish (seconds)
    timings: dict[str, float] = field(default_factory=dict)
    # targets the plan does not reach, and why (not constraints: the plan is still valid)
    shortfalls: list[str] = field(default_factory=list)
    # where each input figure came from (the snapshot manifest's ``sources``; empty: not
    # recorded, e.g. a snapshot written by another tool)
    sources: dict[str, str] = field(default_factory=dict)
    # per log directory (None: the snapshot has no log-dir information)
    disks: list[DiskRow] | None = None

    @property
    def replicas_moved(self) -> int:
        return sum(len(m.added) for m in self.moves)

    @property
    def bytes_moved(self) -> int:
        return sum(m.bytes_moved for m in self.moves)

    @property
    def replicas_moved_between_dirs(self) -> int:
        return sum(len(m.dir_moves) for m in self.moves)

    @property
    def dir_bytes_moved(self) -> int:
        return sum(m.dir_bytes_moved for m in self.moves)
