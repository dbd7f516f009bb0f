"""The planning rounds: replica rounds, then leader rounds, then the result.

Each round scores the table's partitions against the loads at the start of the round
(:mod:`.scoring`, run wherever the table lives: see :mod:`.table`) and lets the driver
accept a consistent set (:mod:`.balancer`). At the end the changes are applied to the table
once, its loads must agree with the driver's, and what could not be done is named.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from controller_core.planning.balancer import Balancer, Candidate, settled
from controller_core.planning.goals import Goal
from controller_core.planning.logdirs import place_log_dirs
from controller_core.planning.objective import (
    DISK,
    LEADER_METRICS,
    REPLICA_METRICS,
    REPLICAS,
    Targets,
    Violation,
    check_assignment,
    compute_targets,
    objective,
    with_leader_targets,
)
from controller_core.planning.options import PlanOptions
from controller_core.planning.result import PlanResult, RoundStat
from controller_core.planning.scoring import CANDIDATE_COLUMNS, RoundContext
from controller_core.planning.snapshot import Snapshot
from controller_core.planning.table import Finished, PlanTable

# partitions a demote-brokers plan cannot change named in its report (the count is exact)
STUCK_EXAMPLES = 5


def to_candidates(frame: Any) -> list[Candidate]:
    """The rows of a cut candidate frame (:data:`.scoring.CANDIDATE_COLUMNS`) as objects.

    Column by column (``tolist`` gives Python scalars at once) into tuples made whole: a
    million candidates a round at 10^6 partitions, where converting each field of each row
    took seconds."""
    cols = [frame[c].tolist() for c in CANDIDATE_COLUMNS]
    cols[3] = [bool(m) for m in cols[3]]  # mandatory
    cols[4] = _int_tuples(cols[4])  # dests
    cols[5] = [float(p) for p in cols[5]]  # priority
    cols[6] = _int_tuples(cols[6])  # replicas
    return list(map(Candidate._make, zip(*cols, strict=True)))


def _int_tuples(cells: list[Any]) -> list[tuple[int, ...]]:
    """List cells as tuples of Python ints: numpy arrays from Spark's Arrow, lists of ints
    on the driver (there one ``tuple`` a cell, without a test per cell)."""
    if set(map(type, cells)) <= {list, tuple}:
        return list(map(tuple, cells))
    return [tuple(v.tolist() if hasattr(v, "tolist") else v) for v in cells]


def context(bal: Balancer, sources: set[int], dests: set[int], seed: int, choices: int,
             mean_size: float, repair: bool = False, demote: bool = False) -> RoundContext:
    """The broker figures of this round for the scorer (small: shipped with the closure)."""
    import numpy as np

    ids = sorted(bal.loads)
    slot_of = np.full(max(ids) + 1, -1, dtype=np.int64)
    for i, b in enumerate(ids):
        slot_of[b] = i
    t: Targets = bal.targets
    excess = np.array([[bal.loads[b][m] - t.target[b][m] for m in range(5)] for b in ids])
    band = np.array([list(t.band[b]) for b in ids])
    target = np.array([list(t.target[b]) for b in ids])
    coef = np.array([2.0 * t.weights[m] / (t.mean[m] ** 2) for m in range(5)])
    racks = sorted({r for r in bal.rack_of.values() if r is not None})
    rack_idx = {r: i for i, r in enumerate(racks)}
    rack = np.array([rack_idx.get(bal.rack_of[b] or "", -1) if bal.rack_of[b] is not None
                     else -1 for b in ids], dtype=np.int64)
    return RoundContext(
        slot_of=slot_of, broker_ids=np.array(ids, dtype=np.int64), excess=excess, band=band,
        target=target,
        coef=coef,
        free_disk=np.array([bal.capacity[b] - bal.loads[b][DISK] for b in ids], dtype=float),
        rack=rack, n_racks=len(bal.racks),
        is_source=np.array([b in sources for b in ids]),
        is_removed=np.array([b in bal.removed for b in ids]),
        dest_slots=np.array([i for i, b in enumerate(ids) if b in dests], dtype=np.int64),
        seed=seed, choices=choices, mean_size=mean_size, relaxed=bal.relaxed, repair=repair,
        changes=dict(bal.changed),
        is_demoted=np.array([b in bal.demoted for b in ids]) if demote else None)



def restriction(goal: Goal) -> str | None:
    """What the goal forbids, in the words of a constraint message."""
    ids = sorted(goal.brokers)
    if goal.receivers_limited:
        return (f"only moves onto the new brokers {ids} are allowed (add-brokers without "
                "--balance)")
    if goal.drain_only:
        return (f"only the replicas of the removed brokers {ids} move (remove-brokers without "
                "--balance)")
    if goal.demoted:
        return (f"only the partitions whose preferred leader is a demoted broker {ids} change, "
                "and only their replica order (demote-brokers)")
    if goal.kind == "remove-disks":
        return ("only the replicas in the removed log directories move, to another directory "
                "of their broker (remove-disks)")
    return None


def plan(table: PlanTable, snapshot: Snapshot, goal: Goal, options: PlanOptions,
         started: float, clock: Stopwatch) -> PlanResult:
    """Plan ``goal`` for the (validated) snapshot whose partitions ``table`` holds."""
    broker_ids = snapshot.broker_ids()
    before = table.loads(broker_ids)
    clock.lap("loads before")
    removed = set(goal.brokers) if goal.kind == "remove-brokers" else set()
    new = set(goal.brokers) if goal.kind == "add-brokers" else set()
    eligible = set(broker_ids) - removed
    totals = [float(sum(before[b][m] for b in broker_ids)) for m in range(5)]
    racks = {b.rack for b in snapshot.brokers if b.id in eligible}
    targets = compute_targets(snapshot.brokers, eligible, totals, options.weights,
                              options.tolerance, table.per_rack(len(racks)))
    if goal.demoted:
        targets = with_leader_targets(targets, compute_targets(
            snapshot.brokers, eligible - goal.demoted, totals, options.weights,
            options.tolerance))
    dests = new if goal.receivers_limited else eligible
    bal = Balancer(snapshot.brokers, {b: list(v) for b, v in before.items()}, targets,
                   dest_ids=dests, removed=removed, restriction=restriction(goal),
                   demoted=set(goal.demoted))
    mean_size = totals[DISK] / totals[REPLICAS] if totals[REPLICAS] else 1.0
    stats: list[RoundStat] = []

    start = objective(targets, bal.loads)
    repair = goal.moves_data and not goal.receivers_limited and not goal.drain_only and \
        bool(bal.racks) and \
        table.any_rack_shared(bal)
    rounds = Rounds(table, bal, options, mean_size, new, start)
    if goal.moves_data:
        stats += rounds.run(
            leaders=False, seed=options.seed * 1_000_003,
            sources=lambda widen: bal.replica_sources(goal.kind, new, goal.balance, widen),
            dests=lambda: dests if bal.receivers is None else dests & bal.receivers,
            repair=repair)

    table.scored()
    clock.lap("replica rounds")
    if goal.demoted:
        stats.append(demote_round(table, bal, options, mean_size))
    elif goal.leader_rounds:  # demote-brokers and remove-disks change only what they name
        stats += rounds.run(
            leaders=True, seed=options.seed * 1_000_003 + 7919,
            sources=lambda widen: bal.leader_sources(new, widen),
            dests=lambda: set() if bal.receivers == set() else eligible)

    clock.lap("leader rounds")
    done = table.finish(bal.changed, broker_ids, bal, removed,
                        {pid for pid, _, _ in bal.unplaced} | set(bal.stuck[:STUCK_EXAMPLES]))
    after = done.loads
    if after != bal.loads:
        raise RuntimeError("internal: the rounds and the table disagree on the planned loads")
    moves = done.moves
    violations = check_assignment(
        snapshot.brokers, [m.topic for m in moves], [m.partition for m in moves],
        [m.before for m in moves], [m.after for m in moves], [m.size_bytes for m in moves],
        removed)
    # partitions nobody moved may still break a rule (e.g. drained brokers that are full)
    violations += _unmoved_violations(done, bal)
    violations += _unplaced(done, bal.unplaced)
    # JBOD: each replica's log directory (remove-disks: the moves between directories)
    moves, disks, dir_violations = place_log_dirs(snapshot, goal, moves)
    violations += dir_violations
    clock.lap("finish")
    return PlanResult(
        goal=goal, seed=options.seed, brokers=list(snapshot.brokers), eligible=eligible,
        moves=moves, loads_before=before, loads_after=after, targets=targets,
        partitions_total=len(snapshot.partitions), violations=_dedupe(violations),
        rounds=stats, seconds=time.monotonic() - started, timings=clock.laps,
        shortfalls=_stuck(done, bal) + _misled(snapshot, goal.demoted) +
        (bal.shortfalls() if goal.kind != "remove-disks" else []),
        sources=input_sources(snapshot), disks=disks)


class Rounds:
    """The rounds of one kind — replicas, then leaders — until the objective settles: each
    round offers candidates from the brokers that give, the balancer accepts what helps.
    A round that accepts nothing widens the givers to every broker that can give; while
    new brokers are still short, settling widens instead of stopping."""

    def __init__(self, table: PlanTable, bal: Balancer, options: PlanOptions,
                 mean_size: float, new: set[int], start: float) -> None:
        self.table, self.bal, self.options = table, bal, options
        self.mean_size, self.new, self.start = mean_size, new, start

    def run(self, *, leaders: bool, seed: int, sources: Callable[[bool], set[int]],
            dests: Callable[[], set[int]], repair: bool = False) -> list[RoundStat]:
        bal, options, new = self.bal, self.options, self.new
        stats: list[RoundStat] = []
        last = objective(bal.targets, bal.loads)
        widen = False
        for rnd in range(options.max_rounds):
            t0 = time.monotonic()
            givers = sources(widen)
            bal.relaxed = widen
            takers = dests()
            if (not givers or not takers) and not repair:
                break
            ctx = context(bal, givers, takers, seed + rnd, options.choices, self.mean_size,
                          repair)
            cands = self.table.candidates(ctx, bal.source_caps(givers, leaders), leaders)
            t1 = time.monotonic()
            accepted = bal.run_round(cands, leaders=leaders)
            t2 = time.monotonic()
            now = objective(bal.targets, bal.loads)
            stats.append(RoundStat("leaders" if leaders else "replicas", rnd, len(givers),
                                   len(cands), accepted, time.monotonic() - t0, t2 - t1, now))
            if accepted == 0 and (widen or not new):
                break
            if accepted and settled(last, now, self.start, options.min_round_gain,
                                    bal.receivers):
                metrics = LEADER_METRICS if leaders else REPLICA_METRICS
                if not widen and new & bal.underloaded(metrics):
                    widen = True  # new brokers still short: fill them before settling
                    last = now
                    continue
                bal.stalled = bal.stalled or not leaders
                break
            last = now
            widen = widen or accepted == 0  # nothing accepted: every broker that can give does
        return stats


def demote_round(table: PlanTable, bal: Balancer, options: PlanOptions, mean_size: float
                 ) -> RoundStat:
    """The one round of demote-brokers: every partition a demoted broker prefers to lead
    gets another preferred leader, chosen as leader-balance would (see
    :meth:`.Balancer.try_demotion`)."""
    t0 = time.monotonic()
    stay = set(bal.loads) - bal.demoted
    ctx = context(bal, bal.demoted, stay, options.seed * 1_000_003 + 7919, options.choices,
                  mean_size, demote=True)
    cands = table.candidates(ctx, bal.source_caps(bal.demoted, True), True)
    t1 = time.monotonic()
    accepted = bal.run_demotions(cands)
    t2 = time.monotonic()
    return RoundStat("demote", 0, len(bal.demoted), len(cands), accepted,
                     time.monotonic() - t0, t2 - t1, objective(bal.targets, bal.loads))


def _stuck(done: Finished, bal: Balancer) -> list[str]:
    """The partitions a demotion cannot change (every replica demoted), as one line."""
    if not bal.stuck:
        return []
    shown = [f"{t}-{p} {r}" for t, p, r in
             sorted(done.rows[pid] for pid in bal.stuck[:STUCK_EXAMPLES])]
    more = ", ..." if len(bal.stuck) > len(shown) else ""
    return [f"demote-brokers: {len(bal.stuck)} partition(s) keep a demoted preferred leader: "
            f"every replica is on a demoted broker ({', '.join(shown)}{more}); add a replica "
            "on another broker to move their leadership, or demote fewer brokers"]


def input_sources(snapshot: Snapshot) -> dict[str, str]:
    """The manifest's ``sources`` (figure -> where it came from), strings only."""
    raw = snapshot.extra.get("sources")
    if not isinstance(raw, dict):
        return {}
    return {str(k): str(v) for k, v in raw.items()}


class Stopwatch:
    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.laps[name] = round(now - self._last, 3)
        self._last = now


def _misled(snapshot: Snapshot, demoted: frozenset[int]) -> list[str]:
    """The partitions a demoted broker leads though another replica is their preferred
    leader (a failover left it there), as one line: the plan does not reorder them, so its
    election does not reach them."""
    if not demoted:
        return []
    pt = snapshot.partitions
    rows = [i for i, (reps, leader) in enumerate(zip(pt.replicas, pt.leader, strict=True))
            if leader in demoted and reps[0] not in demoted]
    if not rows:
        return []
    shown = ", ".join(f"{pt.topic[i]}-{pt.partition[i]} led by {pt.leader[i]}"
                      for i in rows[:STUCK_EXAMPLES])
    more = ", ..." if len(rows) > STUCK_EXAMPLES else ""
    return [f"demote-brokers: {len(rows)} partition(s) are led by a demoted broker though "
            f"another replica is their preferred leader ({shown}{more}); the plan leaves them "
            "as they are: elect their preferred leaders (a LeaderElection with electionType "
            "PREFERRED) to move that leadership"]


def _unmoved_violations(done: Finished, bal: Balancer) -> list[Violation]:
    out: list[Violation] = []
    for b in sorted(bal.loads):
        if bal.loads[b][DISK] > bal.capacity[b]:
            out.append(Violation("disk capacity", f"broker {b}",
                                 f"{bal.loads[b][DISK]} bytes planned, capacity "
                                 f"{bal.capacity[b]}"))
    for topic, partition, replicas in done.drained_left:
        out.append(Violation("drain", f"{topic}-{partition}",
                             f"still on removed broker(s) "
                             f"{sorted(set(replicas) & bal.removed)}"))
    for topic, partition, replicas, size in done.rack_shared:
        out.append(Violation("rack awareness", f"{topic}-{partition}",
                             f"replicas {replicas} share a rack: "
                             f"{bal.why_rack_shared(replicas, size)}"))
    if bal.loads and any(bal.loads[b][REPLICAS] < 0 for b in bal.loads):
        raise RuntimeError("internal: negative replica count")
    return out


def _unplaced(done: Finished, unplaced: list[tuple[int, int, str]]) -> list[Violation]:
    """Placement violations of the replicas that had to move and could not."""
    rows = done.rows
    return [Violation("placement", f"{rows[pid][0]}-{rows[pid][1]} replica "
                                   f"{rows[pid][2][pos]}", f"could not move: {why}")
            for pid, pos, why in unplaced]


def _dedupe(items: list[Violation]) -> list[Violation]:
    seen: set[str] = set()
    out = []
    for v in items:
        if str(v) not in seen:
            seen.add(str(v))
            out.append(v)
    return out
