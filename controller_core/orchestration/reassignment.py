"""The reassignment executor: runs a plan in batches under limits, throttled, cancellable.

Level-based: the truth is the cluster. The executor keeps only a small state the caller
persists (:class:`ExecutorState` — phase, failures, rate samples); which partitions are done,
moving or pending is re-derived from the cluster when it resumes, and so are the throttles it
placed (marked in the cluster, :mod:`controller_core.orchestration.throttles`): a run resumed
with its state lost still removes exactly those.
Each :meth:`ReassignmentExecutor.step` is one reconcile pass: notice finished moves, start new
ones within ``max_concurrent_moves`` (and the per-broker limit), keep throttles on exactly
the moving replicas, and at the end elect preferred leaders and remove every throttle it
placed — however the run ends.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import chain

from pydantic import BaseModel, Field

from controller_core import errors
from controller_core.admin import ClusterAdmin, OngoingReassignment, PartitionDescription
from controller_core.errors import ApiResult, ErrorCode, KafkaApiError
from controller_core.gc_pause import gc_paused
from controller_core.metadata.partition_change import would_strand
from controller_core.model import ElectionType, TopicPartition
from controller_core.orchestration import log_dir_moves, stall, throttles
from controller_core.orchestration.estimate import (
    SCAN_FACTOR,
    MoveCost,
    estimate_seconds,
    move_cost,
)
from controller_core.orchestration.stall import Copied

MAX_RECORDED_FAILURES = 1000
RATE_SAMPLES = 30
MAX_DETAILS = 100  # per-partition lines in a progress report: failures first
# Every move in flight is listed at least this often (cluster time), whatever its replicas'
# sizes say: on a real cluster retention or compaction can shrink a partition mid-move, and a
# finished move whose new replicas hold less than the partition did at its start must still end.
FULL_CHECK_MS = 10_000
# A finished run still owing a throttle cleanup to a fenced broker asks the cluster again
# this often, not on every pass: the broker may be gone for hours.
CLEANUP_RETRY_MS = 10_000
# How long a broker's metadata may trail the controller's list of reassignments before a
# move that left that list with replicas other than its target is taken as ended elsewhere.
METADATA_PROPAGATION_MS = 30_000


class Phase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    PAUSED = "Paused"
    CANCELLING = "Cancelling"
    COMPLETED = "Completed"
    CANCELLED = "Cancelled"
    FAILED = "Failed"

    @property
    def terminal(self) -> bool:
        return self in (Phase.COMPLETED, Phase.CANCELLED, Phase.FAILED)


@dataclass(frozen=True, slots=True)
class Limits:
    throttle_bytes_per_second: int | None = None  # None: no throttle
    max_concurrent_moves: int = 10
    max_concurrent_moves_per_broker: int | None = None
    # copies between log directories of a broker (KIP-113); None: the throttle above
    log_dir_throttle_bytes_per_second: int | None = None

    @property
    def log_dir_rate(self) -> int | None:
        if self.log_dir_throttle_bytes_per_second is not None:
            return self.log_dir_throttle_bytes_per_second
        return self.throttle_bytes_per_second

    @property
    def throttled(self) -> bool:
        return self.throttle_bytes_per_second is not None or self.log_dir_rate is not None


@dataclass(frozen=True, slots=True)
class Controls:
    """What a user toggles on a running reassignment, besides its limits."""

    paused: bool = False
    cancel: bool = False


@dataclass(frozen=True, slots=True)
class ReassignmentPlan:
    moves: dict[TopicPartition, tuple[int, ...]]
    limits: Limits = Limits()
    elect_preferred_leaders: bool = False
    additional: bool = False
    # KIP-113: the log directory named for some replicas (broker -> path), by partition
    log_dirs: Mapping[TopicPartition, Mapping[int, str]] = field(default_factory=dict)

    @classmethod
    def from_moves(cls, moves: Iterable[tuple[TopicPartition, Sequence[int]]], *,
                   limits: Limits = Limits(), elect_preferred_leaders: bool = False,
                   additional: bool = False,
                   log_dirs: Mapping[TopicPartition, Sequence[str]] | None = None
                   ) -> tuple[ReassignmentPlan, list[PlanProblem]]:
        """Build a plan; a partition listed twice is a problem (which target would win?).
        ``log_dirs``: as kafka-reassign-partitions' ``log_dirs``, one per target replica,
        ``"any"`` where the broker may choose."""
        out: dict[TopicPartition, tuple[int, ...]] = {}
        problems = []
        for tp, replicas in moves:
            if tp in out:
                problems.append(PlanProblem(tp, errors.INVALID_REQUEST,
                                            f"{tp} is listed more than once in the plan"))
            out[tp] = tuple(replicas)
        dirs: dict[TopicPartition, dict[int, str]] = {}
        for tp, paths in (log_dirs or {}).items():
            target = out.get(tp, ())
            if len(paths) != len(target):
                problems.append(PlanProblem(tp, errors.INVALID_REQUEST, (
                    f"{tp}: log_dirs has {len(paths)} entries for {len(target)} replicas; "
                    "give one per replica, \"any\" where the broker may choose")))
                continue
            named = {b: path for b, path in zip(target, paths, strict=True) if path != "any"}
            if named:
                dirs[tp] = named
        return cls(out, limits, elect_preferred_leaders, additional, dirs), problems


@dataclass(frozen=True, slots=True)
class PlanProblem:
    tp: TopicPartition
    error: ErrorCode
    message: str


class ExecutorState(BaseModel):
    """What the executor must remember across restarts; small at any plan size."""

    phase: Phase = Phase.PENDING
    cancel_requested: bool = False
    paused: bool = False
    started_ms: int | None = None
    finished_ms: int | None = None
    message: str = ""
    failed: dict[str, str] = Field(default_factory=dict)  # "topic-partition" -> why
    failed_count: int = 0
    bytes_total: int = 0
    bytes_done: int = 0  # bytes of the moves this run finished
    samples: list[tuple[int, int]] = Field(default_factory=list)  # (ms, bytes moved)
    elected: int | None = None
    election_failed: int | None = None
    cancelled: int = 0
    never_started: int = 0  # of the cancelled: pending when the cancel came
    # fenced brokers whose throttle rate waits until they are back (set, or restored)
    throttles_waiting: list[int] = Field(default_factory=list)
    # the final throttle cleanup is not done yet: a finished run keeps trying
    cleanup_owed: bool = False


def throttles_owed(state: ExecutorState) -> str:
    """("; ..." or "") What a finished run still owes to brokers that were fenced when it ended."""
    if not state.cleanup_owed:
        return ""
    if state.throttles_waiting:
        return (f"; the throttle rate on broker(s) {state.throttles_waiting} is restored once "
                "they are back")
    return "; removing its throttles is retried"


@dataclass(frozen=True, slots=True)
class MoveDetail:
    tp: TopicPartition
    state: str  # moving | failed | cancelled
    target: tuple[int, ...]
    message: str = ""


@dataclass(frozen=True, slots=True)
class Progress:
    phase: Phase
    total: int
    done: int
    moving: int
    pending: int
    failed: int
    cancelled: int
    bytes_total: int
    bytes_moved: int
    eta_seconds: float | None
    rate_bytes_per_second: float | None
    message: str
    details: tuple[MoveDetail, ...] = ()  # failures first, capped
    never_started: int = 0  # of ``cancelled``: still pending when the cancel came

    @property
    def rolled_back(self) -> int:
        """Of ``cancelled``: moves that were in flight and were rolled back."""
        return max(0, self.cancelled - self.never_started)

    @property
    def percent(self) -> float:
        if self.bytes_total:
            return min(100.0, 100.0 * self.bytes_moved / self.bytes_total)
        return 100.0 * self.done / self.total if self.total else 100.0


@dataclass(frozen=True, slots=True)
class DryRunReport:
    problems: tuple[PlanProblem, ...]
    replica_moves: int  # replicas to add (each is a copy of the partition)
    replicas_removed: int
    partitions_moving: int
    partitions_unchanged: int
    leader_moves: int
    bytes_to_move: int
    estimated_seconds: float | None  # under the limits; None when nothing bounds the rate
    per_broker_in_bytes: dict[int, int] = field(default_factory=dict)


def _plan_problems(admin: ClusterAdmin, plan: ReassignmentPlan,
                   current: Mapping[TopicPartition, PartitionDescription]) -> list[PlanProblem]:
    described = admin.describe_cluster().brokers
    brokers = {b.id for b in described}
    fenced = {b.id for b in described if b.fenced}
    problems: list[PlanProblem] = []
    for tp, target in plan.moves.items():
        if tp not in current:
            problems.append(PlanProblem(tp, errors.UNKNOWN_TOPIC_OR_PARTITION,
                                        f"{tp}: unknown topic or partition"))
            continue
        bad = _target_problem(tp, target, brokers)
        if bad is not None:
            problems.append(bad)
            continue
        offline = sorted(set(target) & fenced)
        d = current[tp]
        if offline and not ((d.adding or d.removing) and _target_of(d) == tuple(target)):
            # As kafka-reassign-partitions, which takes only the brokers DescribeCluster lists
            # (never a fenced one): a replica placed there could not catch up. A move already
            # heading there (a resumed run) is left to finish once the broker is back.
            problems.append(PlanProblem(tp, errors.INVALID_REPLICA_ASSIGNMENT, (
                f"{tp}: broker(s) {offline} are fenced (offline); a replica there cannot catch "
                f"up — bring them back or choose from the live brokers "
                f"{sorted(brokers - fenced)}")))
    problems += _log_dir_problems(admin, plan, current)
    if not plan.additional:
        # As ReassignPartitionsCommand: no new plan while any reassignment is in progress,
        # unless it is additional. Moves already heading to this plan's targets are this
        # plan's own (a run resumed after its state was lost), not another's.
        others = sorted(tp for tp, o in admin.list_partition_reassignments().items()
                        if plan.moves.get(tp) != o.target)
        if others:
            shown = ", ".join(str(tp) for tp in others[:5])
            more = f" and {len(others) - 5} more" if len(others) > 5 else ""
            problems.append(PlanProblem(
                others[0], errors.REASSIGNMENT_IN_PROGRESS,
                f"cannot start: {len(others)} partition reassignment(s) already in progress "
                f"({shown}{more}); wait for them, cancel them, or mark this plan additional "
                "to move on top of them"))
    return problems


def _log_dir_problems(admin: ClusterAdmin, plan: ReassignmentPlan,
                      current: Mapping[TopicPartition, PartitionDescription]
                      ) -> list[PlanProblem]:
    """A named directory the broker does not have (asked of each broker; one that does not
    answer, down, is asked again when its replica moves)."""
    named = log_dir_moves.wanted(plan.log_dirs, [tp for tp in plan.log_dirs if tp in current])
    if not named:
        return []
    listing = admin.describe_log_dirs(sorted({b for _, b in named}), [])
    problems = []
    for (tp, b), path in sorted(named.items()):
        have = sorted(d.path for d in listing.get(b, ()))
        if b in listing and path not in have:
            problems.append(PlanProblem(tp, errors.LOG_DIR_NOT_FOUND, (
                f"{tp}: broker {b} has no log directory {path!r}; its log directories are "
                f"{have} (or give \"any\")")))
    return problems


def _target_problem(tp: TopicPartition, target: Sequence[int],
                    brokers: set[int]) -> PlanProblem | None:
    def bad(msg: str) -> PlanProblem:
        return PlanProblem(tp, errors.INVALID_REPLICA_ASSIGNMENT, f"{tp}: {msg}")

    if not target:
        return bad("the target replica list is empty")
    if min(target) < 0:
        return bad(f"negative broker id(s) {sorted(r for r in target if r < 0)}")
    if len(set(target)) != len(target):
        return bad(f"broker id(s) {sorted({r for r in target if list(target).count(r) > 1})} "
                   "listed more than once")
    if not brokers.issuperset(target):
        unknown = sorted(set(target) - brokers)
        return bad(f"unknown broker id(s) {unknown}; the cluster has {sorted(brokers)}")
    return None


def _describe(admin: ClusterAdmin,
              tps: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionDescription]:
    return {d.tp: d for d in admin.describe_partitions(partitions=list(tps))}


def _original(d: PartitionDescription) -> tuple[int, ...]:
    if not d.adding:
        return d.replicas  # (most partitions are not moving)
    adding = set(d.adding)
    return tuple(r for r in d.replicas if r not in adding)


def describe_for(admin: ClusterAdmin, *plans: ReassignmentPlan
                 ) -> dict[TopicPartition, PartitionDescription]:
    """The partitions of all ``plans`` in one describe, each partition once: what
    :meth:`ReassignmentExecutor.start` takes as ``current`` for each of them."""
    wanted: dict[TopicPartition, None] = {}
    for plan in plans:
        wanted.update(dict.fromkeys(plan.moves))
    return _describe(admin, wanted)


def validate_plan(admin: ClusterAdmin, plan: ReassignmentPlan) -> list[PlanProblem]:
    """Every problem of the plan at once, per partition; an empty list means it may start."""
    return _plan_problems(admin, plan, _describe(admin, plan.moves))


def dry_run(admin: ClusterAdmin, plan: ReassignmentPlan, *,
            bandwidth: Callable[[int], float] | None = None,
            poll_seconds: float = 0.0) -> DryRunReport:
    """What the plan would do — replica and leader movements, bytes, time — moving nothing.
    The time comes from :func:`.estimate.estimate_seconds` under the plan's limits."""
    current = _describe(admin, plan.moves)
    problems = _plan_problems(admin, plan, current)
    bad = {p.tp for p in problems}
    adds = removes = moving = unchanged = leader_moves = total = 0
    per_broker: dict[int, int] = {}
    costs: list[MoveCost] = []
    # copies between two directories of a broker (KIP-113): bytes landing on that broker
    where = log_dir_moves.placements(admin, log_dir_moves.wanted(
        plan.log_dirs, [tp for tp in plan.log_dirs if tp in current and tp not in bad]))
    for tp, target in plan.moves.items():
        d = current.get(tp)
        if d is None or tp in bad:
            continue
        original = _original(d)
        added = [r for r in target if r not in original]
        removed = [r for r in original if r not in target]
        named = plan.log_dirs.get(tp, {})
        between = [b for b in original if b in named
                   and where.get((tp, b), log_dir_moves.Placement(None)).current != named[b]]
        costs.append(move_cost(d.leader, original, target, d.size_bytes or 0, tuple(tp),
                               between))
        if not added and not removed and not between and tuple(target) == original:
            unchanged += 1
            continue
        moving += 1
        adds += len(added)
        removes += len(removed)
        size = d.size_bytes or 0
        total += size * (len(added) + len(between))
        for r in (*added, *between):
            per_broker[r] = per_broker.get(r, 0) + size
        if d.leader not in target or (plan.elect_preferred_leaders and d.leader != target[0]):
            leader_moves += 1
    limits = plan.limits
    estimate = estimate_seconds(
        costs, throttle=limits.throttle_bytes_per_second,
        max_concurrent_moves=limits.max_concurrent_moves,
        max_concurrent_moves_per_broker=limits.max_concurrent_moves_per_broker,
        bandwidth=bandwidth, poll_seconds=poll_seconds, dir_throttle=limits.log_dir_rate)
    return DryRunReport(tuple(problems), adds, removes, moving, unchanged, leader_moves, total,
                        estimate, per_broker)


class ReassignmentExecutor:
    def __init__(self, admin: ClusterAdmin, plan: ReassignmentPlan,
                 state: ExecutorState | None = None) -> None:
        self.admin = admin
        self.plan = plan
        self.limits = plan.limits
        self.state = state if state is not None else ExecutorState()
        self.pending: deque[TopicPartition] = deque()
        self.moving: dict[TopicPartition, tuple[int, ...]] = {}
        self.done: set[TopicPartition] = set()
        self._lagging_metadata: dict[TopicPartition, int] = {}  # first seen trailing, ms
        self.failed: set[TopicPartition] = set()
        self.cancelled: set[TopicPartition] = set()
        self.retarget: list[TopicPartition] = []  # in flight elsewhere, to re-target at once
        self.original: dict[TopicPartition, tuple[int, ...]] = {}  # replicas before the move
        self.adding: dict[TopicPartition, tuple[int, ...]] = {}  # replicas the move adds
        # (partition, broker) of each replica the move adds, built once: every pass reads
        # each of them (see _adding_replicas)
        self._adding_keys: dict[TopicPartition, tuple[tuple[TopicPartition, int], ...]] = {}
        self.move_bytes: dict[TopicPartition, int] = {}  # bytes the move copies
        # brokers that keep a replica and copy it into another of their log directories
        self.between_dirs: dict[TopicPartition, tuple[int, ...]] = {}
        self._loaded = False
        self._synced: tuple[frozenset[TopicPartition], int | None, int | None] | None = None
        self._last_full_check_ms: int | None = None  # None: the next pass lists every move
        self._last_cleanup_ms: int | None = None  # None: a cleanup owed is tried next pass
        self._last_sizes: dict[tuple[TopicPartition, int], int] = {}  # adding replicas' bytes
        self._pass_sizes: dict[tuple[TopicPartition, int], int] = {}  # the last pass' read
        self._measured: set[TopicPartition] = set()  # the moves in flight when it was read

    # -- starting and resuming ------------------------------------------------------------------
    @gc_paused
    def start(self, current: Mapping[TopicPartition, PartitionDescription] | None = None
              ) -> list[PlanProblem]:
        """Validate the whole plan; start it only when it has no problem at all.

        ``current``: the plan's partitions as the caller just described them (a caller that
        runs two plans over the same partitions describes them once, see
        :func:`describe_for`; a partition it lacks is taken as unknown, as the port omits
        those); by default they are described here, once."""
        if self.state.phase is not Phase.PENDING:
            if not self._loaded:
                self._classify(current if current is not None
                               else _describe(self.admin, self.plan.moves))
            return []
        if current is None:
            current = _describe(self.admin, self.plan.moves)
        problems = _plan_problems(self.admin, self.plan, current)
        if problems:
            return problems
        self.state.phase = Phase.RUNNING
        self.state.started_ms = self.admin.now_ms()
        self._classify(current)
        self.state.bytes_total = sum(self.move_bytes.values())
        return []

    def _load(self) -> None:
        if not self._loaded:
            self._classify(_describe(self.admin, self.plan.moves))

    def _classify(self, current: Mapping[TopicPartition, PartitionDescription]) -> None:
        """Derive done / moving / pending from the cluster, once: on start, or at the first
        pass of a resumed run."""
        pending: list[TopicPartition] = []
        recorded = self.state.failed  # usually empty: no name of 100,000 moves is built then
        self.failed = {tp for tp in self.plan.moves if str(tp) in recorded} if recorded else set()
        dirs = self.plan.log_dirs
        where = log_dir_moves.placements(self.admin, log_dir_moves.wanted(
            dirs, [tp for tp in dirs if tp in current and tp not in self.failed]))
        for tp, target in self.plan.moves.items():
            d = current.get(tp)
            if tp in self.failed or d is None:
                if d is None and tp not in self.failed:
                    self._fail(tp, f"{tp}: the partition no longer exists")
                continue
            original = _original(d)
            self.original[tp] = original
            self.adding[tp] = adding = tuple(r for r in target if r not in original)
            self._adding_keys[tp] = tuple([(tp, r) for r in adding])
            named = dirs.get(tp, {})
            self.between_dirs[tp] = between = tuple(
                b for b in original if b in named
                and where.get((tp, b), log_dir_moves.Placement(None)).current != named[b]
            ) if named else ()  # (a plan that names no directory: none, unwalked)
            self.move_bytes[tp] = (d.size_bytes or 0) * (len(adding) + len(between))
            if named and not (d.adding or d.removing) and d.replicas == target:
                if not log_dir_moves.in_place(log_dir_moves.wanted(dirs, [tp]), where):
                    pending.append(tp)  # only its directories change
                else:
                    self.done.add(tp)
                continue
            if d.adding or d.removing:
                if _target_of(d) == target:
                    self.moving[tp] = target
                    continue
                if self.plan.additional:
                    # In flight towards another target (a changed spec, an earlier run): it
                    # is re-targeted at the next pass, without waiting for a free slot.
                    self.retarget.append(tp)
                    continue
            elif d.replicas == target:
                self.done.add(tp)
                continue
            pending.append(tp)
        # Small moves first: a batch is only as fast as its slowest move (KIP-236).
        pending.sort(key=lambda tp: (self.move_bytes[tp], tp))
        self.pending = deque(pending)
        if self.state.bytes_total:
            # On resume, moves that finished while nobody watched count as copied: what the
            # plan still has to copy is known, the rest of the total is done.
            left = sum(self.move_bytes[tp] for tp in (*pending, *self.moving))
            self.state.bytes_done = max(self.state.bytes_done, self.state.bytes_total - left)
        self._loaded = True

    # -- control --------------------------------------------------------------------------------
    def cancel(self) -> None:
        """Roll back every move in flight at the next step; start nothing more."""
        if not self.state.phase.terminal:
            self.state.cancel_requested = True

    def set_paused(self, paused: bool) -> None:
        self.state.paused = paused

    def control(self, limits: Limits, controls: Controls) -> None:
        """Apply a spec's limits, pause and cancel to the run at once."""
        self.set_limits(limits)
        self.set_paused(controls.paused)
        if controls.cancel:
            self.cancel()

    def set_limits(self, limits: Limits) -> None:
        """New throttle and concurrency limits take effect at once. (A run resumed with new
        limits in its plan needs no call: each pass compares the rates in force with them.)"""
        self.limits = limits
        if self.state.phase.terminal or self.state.phase is Phase.PENDING:
            return
        self._load()
        self._sync_throttles()

    # -- the reconcile pass -----------------------------------------------------------------------
    @gc_paused
    def step(self) -> Progress:
        if self.state.phase.terminal and self.state.cleanup_owed:
            now = self.admin.now_ms()  # a rate on a broker that was fenced when the run ended
            if self._last_cleanup_ms is None or now - self._last_cleanup_ms >= CLEANUP_RETRY_MS:
                self._last_cleanup_ms = now
                self.cleanup()
        if self.state.phase.terminal or self.state.phase is Phase.PENDING:
            return self.progress()
        self._load()
        self._pass_sizes = sizes = self._replica_sizes()
        self._measured = set(self.moving)
        now = self.admin.now_ms()
        if self._last_full_check_ms is None or now - self._last_full_check_ms >= FULL_CHECK_MS:
            self._last_full_check_ms = now
            self._notice_finished()
        else:
            self._notice_finished(self._maybe_finished(sizes))
        self._retarget_in_flight()
        if self.state.cancel_requested:
            self._cancel_in_flight()
        elif self.state.paused:
            self.state.phase = Phase.PAUSED
        else:
            self.state.phase = Phase.RUNNING
            self._start_moves()
        self._sync_throttles()
        if not self.moving and (not self.pending or self.state.cancel_requested):
            self._finish()
        return self.progress(sample=True, sizes=sizes)

    def _replica_sizes(self) -> dict[tuple[TopicPartition, int], int]:
        """Bytes each adding replica of the moves in flight holds (one call per pass); a
        replica that does not exist, or whose broker did not answer, is left out (which is
        how :meth:`_maybe_finished` sees a move that ended)."""
        wanted = self._adding_replicas()
        sizes = self.admin.replica_log_sizes(wanted) if wanted else {}
        # a plan that names no directory has no copy between them: 100,000 moves not walked
        between = [(tp, b) for tp in self.moving
                   for b in self.between_dirs.get(tp, ())] if self.plan.log_dirs else []
        if between:  # copies between directories: their future replicas' bytes
            want = log_dir_moves.wanted(self.plan.log_dirs, {tp for tp, _ in between})
            sizes.update(log_dir_moves.copy_bytes(
                want, log_dir_moves.placements(self.admin, between), between))
        return sizes

    def _adding_replicas(self) -> list[tuple[TopicPartition, int]]:
        """(partition, broker) of every replica the moves in flight add, in their order:
        joined from the keys built at the start, in C (100,000 moves, twice a pass)."""
        return list(chain.from_iterable(map(self._adding_keys.__getitem__, self.moving)))

    def copied(self, among: Iterable[TopicPartition] | None = None) -> Copied:
        """Each move in flight (of ``among``) -> (bytes its copies held at the last pass,
        their brokers): what the stall watch takes, without asking the cluster again."""
        tps = self.moving if among is None else [tp for tp in among if tp in self.moving]
        out = stall.copied(self._pass_sizes, {
            tp: (*self.adding[tp], *self.between_dirs.get(tp, ())) for tp in tps})
        for tp, (held, brokers) in out.items():
            if held is None and tp not in self._measured:
                out[tp] = (0, brokers)  # started after the read: nothing copied yet
        return out

    def _held(self, sizes: Mapping[tuple[TopicPartition, int], int]
              ) -> dict[tuple[TopicPartition, int], int]:
        """``sizes`` for the progress: a replica left out (its broker down) keeps its last
        figure — its partial copy survives, and Kafka goes on from the log's end once the
        broker is back — so bytes moved do not fall to zero, nor the rate below it, while a
        broker is away."""
        last = self._last_sizes
        if self.plan.log_dirs:
            wanted = [(tp, r) for tp in self.moving
                      for r in (*self.adding[tp], *self.between_dirs.get(tp, ()))]
        else:  # no copy between directories (see _replica_sizes)
            wanted = self._adding_replicas()
        if len(sizes) == len(wanted) and all(map(sizes.__contains__, wanted)):
            # every replica answered, and only those (wanted has no repeats): ``sizes`` is the
            # answer; copied in C, without a lookup per replica in Python
            self._last_sizes = held = dict(sizes)
            return held
        # sizes are ints, never None: one lookup per replica where the pass read it
        self._last_sizes = held = {
            key: size for key in wanted
            if (size := sizes.get(key)) is not None or (size := last.get(key)) is not None}
        return held

    def _maybe_finished(self, sizes: Mapping[tuple[TopicPartition, int], int]
                        ) -> list[TopicPartition]:
        """Moves worth asking the cluster about: every adding replica holds at least what
        the partition held when the move started, or one is gone (cancelled or re-targeted
        elsewhere). The others are certainly still copying — no need to list them."""
        out = []
        for tp in self.moving:
            adding = self.adding[tp]
            expected = self.move_bytes[tp] // max(1, len(adding))
            got = [sizes.get((tp, r)) for r in adding]
            if not adding or None in got or all(g >= expected for g in got):  # type: ignore[operator]
                out.append(tp)
        return out

    def _notice_finished(self, among: Iterable[TopicPartition] | None = None) -> None:
        moving = self.moving
        items = list(moving.items()) if among is None else [
            (tp, moving[tp]) for tp in among if tp in moving]
        if not items:
            return
        listing = self.admin.list_partition_reassignments([tp for tp, _ in items])
        ended = []
        for tp, target in items:
            ongoing = listing.get(tp)
            if ongoing is None:
                ended.append(tp)
            elif not _heads_to(ongoing, target):
                del self.moving[tp]
                self._fail(tp, f"{tp} was re-targeted to {list(ongoing.target)} by another "
                               "tool; kraftsman leaves it alone")
        placing: list[TopicPartition] = []
        if ended:
            current = _describe(self.admin, ended)
            now = self.admin.now_ms()
            for tp in ended:
                target = self.moving[tp]
                d = current.get(tp)
                if (d is not None and d.replicas != target and not self.state.cancel_requested
                        and now - self._lagging_metadata.setdefault(tp, now)
                        < METADATA_PROPAGATION_MS):
                    # The controller lists the move as ended, but the broker that described
                    # the partition shows other replicas: its metadata trails the controller's
                    # log — by the replicas in flight, or, on a broker busy creating a
                    # thousand new replicas, from before the move (Kafka 4.4 under load: 527
                    # of 1,000 moves were failed so). Asked again next pass.
                    continue
                self._lagging_metadata.pop(tp, None)
                if d is not None and d.replicas == target and tp in self.plan.log_dirs:
                    placing.append(tp)  # its replicas are right; their directories next
                    continue
                del self.moving[tp]
                if d is not None and d.replicas == target:
                    self.done.add(tp)
                    self.state.bytes_done += self.move_bytes[tp]
                elif self.state.cancel_requested:
                    self.cancelled.add(tp)
                else:
                    where = list(d.replicas) if d is not None else "nowhere (deleted)"
                    self._fail(tp, f"{tp}: the move ended outside kraftsman with replicas "
                                   f"{where}, not {list(target)}")
        if placing:
            self._place(placing)

    def _start_moves(self) -> None:
        slots = self.limits.max_concurrent_moves - len(self.moving)
        per_broker_limit = self.limits.max_concurrent_moves_per_broker
        load: dict[int, int] = {}
        if per_broker_limit is not None:
            for tp in self.moving:
                for b in self._touched(tp):
                    load[b] = load.get(b, 0) + 1
        chosen: list[TopicPartition] = []
        skipped: list[TopicPartition] = []
        scan_limit = max(100, SCAN_FACTOR * slots)
        while self.pending and len(chosen) < slots and len(skipped) < scan_limit:
            tp = self.pending.popleft()
            if per_broker_limit is None:  # no load to count: 100,000 moves start at once
                chosen.append(tp)
                continue
            touched = self._touched(tp)
            if any(load.get(b, 0) >= per_broker_limit for b in touched):
                skipped.append(tp)
                continue
            for b in touched:
                load[b] = load.get(b, 0) + 1
            chosen.append(tp)
        self.pending.extendleft(reversed(skipped))
        if not chosen:
            return
        foreign = self.admin.list_partition_reassignments(chosen)
        changes: dict[TopicPartition, Sequence[int] | None] = {}
        for tp in chosen:
            ongoing = foreign.get(tp)
            if ongoing is not None and not self.plan.additional \
                    and ongoing.target != self.plan.moves[tp]:
                self._fail(tp, f"{tp} is being reassigned by another tool to "
                               f"{list(ongoing.target)}; not fought over")
                continue
            changes[tp] = self.plan.moves[tp]
        # Throttle before moving: not a byte is copied at full speed. When the brokers refuse
        # the throttle, the moves wait (pending, tried again next pass) instead of starting
        # unthrottled.
        if not self._sync_throttles(also=changes) and self.limits.throttled:
            self.pending.extendleft(reversed(changes))
            self.state.message += "; no move starts until the throttle is set"
            return
        # Directories first: a replica the move adds is then created in its directory.
        refused = self._ask_log_dirs(changes)
        inter = {tp: t for tp, t in changes.items()
                 if tp not in refused and not self._dirs_only(tp)}
        results = self._send_targets(inter, foreign) if inter else {}
        for tp, result in results.items():
            if not result.ok:
                self._fail(tp, result.message or result.error.name)
                continue
            self.moving[tp] = self.plan.moves[tp]
        for tp in changes:
            if tp not in refused and self._dirs_only(tp):
                self.moving[tp] = self.plan.moves[tp]
        # A move that needs no copying (only a reorder or a shrink) completes at once.
        self._notice_finished(among=[tp for tp in changes if not self.adding[tp]])

    def _dirs_only(self, tp: TopicPartition) -> bool:
        """The move changes directories alone: no reassignment to send."""
        return self.original[tp] == self.plan.moves[tp]

    def _ask_log_dirs(self, tps: Iterable[TopicPartition]) -> set[TopicPartition]:
        """Ask each named replica of ``tps`` into its directory (again where needed); the
        partitions whose directory move was refused are failed and returned."""
        want = log_dir_moves.wanted(self.plan.log_dirs, tps)
        if not want:
            return set()
        ask = log_dir_moves.to_ask(want, log_dir_moves.placements(self.admin, want))
        refused = log_dir_moves.refusals(self.admin.alter_replica_log_dirs(ask) if ask else {})
        for tp, why in refused.items():
            self.moving.pop(tp, None)
            self._fail(tp, why)
        return set(refused)

    def _place(self, tps: Sequence[TopicPartition]) -> None:
        """Moves whose replicas are where the plan wants them: done once every named replica
        is in its directory (asked again where it is not); under a cancel, the copies
        between directories are dropped instead."""
        want = log_dir_moves.wanted(self.plan.log_dirs, tps)
        where = log_dir_moves.placements(self.admin, want)
        if self.state.cancel_requested:
            back = log_dir_moves.rollback(where)
            if back:
                self.admin.alter_replica_log_dirs(back)
        unplaced = []
        for tp in tps:
            mine = log_dir_moves.wanted(self.plan.log_dirs, [tp])
            if log_dir_moves.in_place(mine, where):
                del self.moving[tp]
                self.done.add(tp)
                self.state.bytes_done += self.move_bytes[tp]
            elif self.state.cancel_requested:
                del self.moving[tp]
                self.cancelled.add(tp)
            else:
                unplaced.append(tp)
        self._ask_log_dirs(unplaced)

    def _retarget_in_flight(self) -> None:
        """Moves already in flight that this plan sends elsewhere change target now: they
        hold no new slot (KIP-455: a new target replaces the current one)."""
        if not self.retarget:
            return
        changes: dict[TopicPartition, Sequence[int] | None] = {
            tp: self.plan.moves[tp] for tp in self.retarget}
        self.retarget.clear()  # asked once: a refusal fails the partition
        if not self.state.cancel_requested:
            self._sync_throttles(also=changes)
        results = self._send_targets(
            changes, self.admin.list_partition_reassignments(list(changes)))
        for tp, result in results.items():
            if result.ok:
                self.moving[tp] = self.plan.moves[tp]
            else:
                self._fail(tp, result.message or result.error.name)
        self._notice_finished(among=[tp for tp in changes if not self.adding[tp]])

    def _send_targets(self, changes: Mapping[TopicPartition, Sequence[int] | None],
                      ongoing: Mapping[TopicPartition, OngoingReassignment]
                      ) -> dict[TopicPartition, ApiResult]:
        """Send new targets; a move in flight whose new target Kafka 4.4 would strand (a
        replica left both adding and removing never completes; a stale removing list drops
        replicas the target keeps — partition_change.would_strand) is cancelled first, so
        the target starts from the replicas the partition really holds."""
        stranded = [tp for tp, target in changes.items()
                    if target is not None and tp in ongoing
                    and would_strand(*ongoing[tp], target)]
        if stranded:
            cancelled = self.admin.alter_partition_reassignments({tp: None for tp in stranded})
            refused = {tp: r for tp, r in cancelled.items()
                       if not r.ok and r.error != errors.NO_REASSIGNMENT_IN_PROGRESS}
            if refused:
                rest = {tp: t for tp, t in changes.items() if tp not in refused}
                return {**refused, **(self.admin.alter_partition_reassignments(rest)
                                      if rest else {})}
        return self.admin.alter_partition_reassignments(changes)

    def _touched(self, tp: TopicPartition) -> set[int]:
        """Brokers a move loads: those receiving a replica and those giving one up."""
        return set(self.plan.moves[tp]) ^ set(self.original[tp])

    def _cancel_in_flight(self) -> None:
        if self.state.phase is not Phase.CANCELLING:  # the first pass of the cancel
            self.state.never_started = len(self.pending)
        self.state.phase = Phase.CANCELLING
        self.cancelled.update(self.pending)
        self.pending.clear()
        if not self.moving:
            return
        with_dirs = [tp for tp in self.moving if tp in self.plan.log_dirs]
        dirs_only = [tp for tp in with_dirs if self._dirs_only(tp)]
        if dirs_only:  # nothing to cancel in Kafka's reassignments: the copies are dropped
            self._place(dirs_only)
        mixed = [tp for tp in with_dirs if tp in self.moving]
        if mixed:  # the replicas that stay drop their copies; the reassignment is cancelled
            back = log_dir_moves.rollback(log_dir_moves.placements(
                self.admin, log_dir_moves.wanted(self.plan.log_dirs, mixed)))
            if back:
                self.admin.alter_replica_log_dirs(back)
        if not self.moving:
            return
        results = self.admin.alter_partition_reassignments({tp: None for tp in self.moving})
        refused = []
        for tp, result in results.items():
            if result.ok:
                del self.moving[tp]
                self.cancelled.add(tp)
            elif result.error == errors.NO_REASSIGNMENT_IN_PROGRESS:
                continue  # finished meanwhile; _notice_finished records it next pass
            else:
                refused.append(f"{tp}: {result.message or result.error.name}")
        self.state.message = (
            f"{len(refused)} move(s) cannot be rolled back yet; retrying: " + "; ".join(refused[:5])
            if refused else "")

    def _finish(self) -> None:
        if self.state.cancel_requested:
            self.state.phase = Phase.CANCELLED
            self.state.cancelled = len(self.cancelled)
        else:
            if self.plan.elect_preferred_leaders and self.done:
                outcome = self.admin.elect_leaders(ElectionType.PREFERRED, sorted(self.done))
                self.state.elected = sum(1 for r in outcome.results.values() if r.ok)
                self.state.election_failed = sum(
                    1 for r in outcome.results.values()
                    if not r.ok and r.error != errors.ELECTION_NOT_NEEDED)
            self.state.phase = Phase.FAILED if self.failed else Phase.COMPLETED
            if self.failed:
                self.state.message = (f"{len(self.failed)} partition(s) failed; "
                                      f"{len(self.done)} moved")
        self.cleanup()

    def fail(self, reason: str) -> None:
        """End the run for good (e.g. the resource is invalid now); throttles are removed."""
        self.state.phase = Phase.FAILED
        self.state.message = reason
        self.cleanup()

    def cleanup(self) -> None:
        """Remove every throttle this executor placed — and only those — unless another
        movement still needs it (then whoever moves last removes it)."""
        self._sync_throttles(final=True)
        if self.state.finished_ms is None and self.state.phase.terminal:
            self.state.finished_ms = self.admin.now_ms()

    def _fail(self, tp: TopicPartition, message: str) -> None:
        self.failed.add(tp)
        self.state.failed_count += 1
        if len(self.state.failed) < MAX_RECORDED_FAILURES:
            self.state.failed[str(tp)] = message

    # -- throttles --------------------------------------------------------------------------------
    def _sync_throttles(self, *, also: Iterable[TopicPartition] = (), final: bool = False) -> bool:
        """Throttles on exactly the moves in flight (and ``also``, about to start), at the
        current limit — on none once the run is over (``final``); a pass that changes
        neither, with nothing owed to a fenced broker, does not ask the cluster. False when
        the cluster refused some of it (the message says what; the next pass tries again)."""
        moving = frozenset(()) if final else frozenset((*self.moving, *also))
        rate, dir_rate = self.limits.throttle_bytes_per_second, self.limits.log_dir_rate
        throttled = self.limits.throttled
        # Unthrottled, the moves in flight change nothing a sync would write (it places no
        # entry for them): one sync removes what an earlier limit placed, the final one the rest.
        key = (moving if throttled else frozenset(), rate, dir_rate)
        if key == self._synced and not final:
            return True
        # unthrottled, sync places nothing for the moves: 100,000 of them are not built
        moves = {tp: throttles.Move(self.original[tp], self.adding[tp],
                                    self.between_dirs.get(tp, ()))
                 for tp in moving} if throttled else {}
        try:
            synced = throttles.sync(self.admin, moves, rate, scope=set(self.plan.moves),
                                    legacy_check=final, dir_rate=dir_rate)
        except KafkaApiError as e:  # a broker that just died, not fenced yet: next pass
            synced = throttles.Synced([str(e)])
        if final:
            self.state.cleanup_owed = not synced.settled
        if not synced.problems:
            self.state.throttles_waiting = list(synced.waiting)
        # anything left undone: the next pass tries again
        self._synced = key if synced.settled else None
        if synced.problems:
            self.state.message = "could not set throttles: " + "; ".join(synced.problems[:5])
            return False
        return True

    # -- reporting --------------------------------------------------------------------------------
    def progress(self, *, sample: bool = False,
                 sizes: Mapping[tuple[TopicPartition, int], int] | None = None) -> Progress:
        bytes_moved = self._bytes_moved(sizes)
        now = self.admin.now_ms()
        samples = self.state.samples
        if sample and not self.state.phase.terminal and (not samples or samples[-1][0] != now):
            samples.append((now, bytes_moved))
            del samples[:-RATE_SAMPLES]
        rate = eta = None
        if len(samples) >= 2 and samples[-1][0] > samples[0][0]:
            rate = (samples[-1][1] - samples[0][1]) * 1000.0 / (samples[-1][0] - samples[0][0])
            remaining = max(0, self.state.bytes_total - bytes_moved)
            if rate > 0:
                eta = remaining / rate
        details = [MoveDetail(tp, "failed", self.plan.moves[tp],
                              self.state.failed.get(str(tp), "failed"))
                   for tp in sorted(self.failed)[:MAX_DETAILS]]
        # the partitions are distinct: the smallest ones, then their targets (no pairs compared)
        details += [MoveDetail(tp, "moving", self.moving[tp]) for tp in
                    heapq.nsmallest(max(0, MAX_DETAILS - len(details)), self.moving)]
        return Progress(
            self.state.phase, len(self.plan.moves), len(self.done), len(self.moving),
            len(self.pending), max(len(self.failed), self.state.failed_count),
            len(self.cancelled) or self.state.cancelled, self.state.bytes_total,
            bytes_moved, eta, rate, self.state.message, tuple(details),
            self.state.never_started)

    def _bytes_moved(self, sizes: Mapping[tuple[TopicPartition, int], int] | None = None) -> int:
        moved = self.state.bytes_done
        if self.moving and not self.state.phase.terminal:
            # _held keeps the replicas of the moves in flight only
            moved += sum(self._held(self._replica_sizes() if sizes is None else sizes).values())
        return min(moved, self.state.bytes_total) if self.state.bytes_total else moved


def _heads_to(ongoing: OngoingReassignment, target: tuple[int, ...]) -> bool:
    """``ongoing.target == target``, without building the target in the usual case: every
    pass asks it of each move in flight. Kafka lists a move as its target, then the replicas
    it removes; the target is that prefix when none of its replicas is also removing."""
    replicas, removing = ongoing.replicas, ongoing.removing
    if not removing:
        return replicas == target
    n = len(target)
    if replicas[n:] == removing and replicas[:n] == target:
        # a target replica also removing is dropped from the ongoing target: not equal
        return set(removing).isdisjoint(target)
    return ongoing.target == target


def _target_of(d: PartitionDescription) -> tuple[int, ...]:
    removing = set(d.removing)
    return tuple(r for r in d.replicas if r not in removing)
