"""The driver step of a planning round: pick a consistent set of moves — pure Python.

Spark scores candidates against the loads at the start of a round. Here they are taken in
priority order (mandatory moves first, then the best gain per byte, so small partitions go
before large ones) and each is re-checked against the loads *as they are now*: constraints
(distinct brokers, racks, disk capacity, the tolerance band on disk so no byte moves past
the target) and an exact objective change that must be negative. Accepted moves update the
loads at once, so two moves of one round never fight over the same headroom.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from controller_core.planning.objective import (
    DISK,
    LEADER_METRICS,
    LEADERS,
    NET_IN,
    NET_OUT,
    REPLICA_METRICS,
    REPLICAS,
    Targets,
    rack_aware_possible,
    transfer_delta,
)
from controller_core.planning.snapshot import Broker

EPS = 1e-12


class Candidate(NamedTuple):
    """A move the scorer offers (see :data:`.scoring.CANDIDATE_COLUMNS`): a tuple, because a
    million of them are made a round at 10^6 partitions and a frozen dataclass's
    ``__init__`` (a ``setattr`` per field) cost seconds."""

    pid: int
    pos: int
    src: int
    mandatory: bool
    dests: tuple[int, ...]
    priority: float
    replicas: tuple[int, ...]
    leader: int
    size: int
    bin: int
    bout: int


# a round's choice of destination for a move that need not happen (Balancer._soft_chooser)
SoftChooser = Callable[[Candidate, Sequence[int], int], int | None]


@dataclass(slots=True)
class Balancer:
    brokers: Sequence[Broker]
    loads: dict[int, list[int]]
    targets: Targets
    dest_ids: set[int]
    removed: set[int]
    # pid -> (replicas, leader) of every partition changed so far (all rounds)
    changed: dict[int, tuple[tuple[int, ...], int]] = field(default_factory=dict)
    rack_of: dict[int, str | None] = field(init=False)
    capacity: dict[int, int] = field(init=False)
    racks: set[str] = field(init=False)
    unplaced: list[tuple[int, int, str]] = field(default_factory=list)
    # a widened round: a giver may end below its band (racks can force a rack's brokers
    # below the cluster-wide target); the objective still has to improve
    relaxed: bool = False
    # a filling round (brokers within their band give to brokers below it): only these may
    # receive; None: every broker in dest_ids. Without it the givers would even out among
    # themselves inside their bands, many tiny moves a round that never end.
    receivers: set[int] | None = None
    # the rounds ended because one gained too little (see settled), not for want of moves
    stalled: bool = False
    # what the goal forbids, for messages ("only moves onto the new brokers [7] are allowed")
    restriction: str | None = None
    # demote-brokers: brokers that must stop being preferred leaders, and the partitions
    # (pids) that cannot, every replica being demoted
    demoted: set[int] = field(default_factory=set)
    stuck: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rack_of = {b.id: b.rack for b in self.brokers}
        self.capacity = {b.id: b.disk_capacity_bytes for b in self.brokers}
        self.racks = {b.rack for b in self.brokers
                      if b.rack is not None and b.id not in self.removed}

    # -- helpers ------------------------------------------------------------------------

    def excess(self, broker: int, metric: int) -> float:
        return self.loads[broker][metric] - self.targets.target[broker][metric]

    def out_of_band(self, broker: int, metrics: Iterable[int]) -> bool:
        return any(self.excess(broker, m) > self.targets.band[broker][m] for m in metrics)

    def current(self, c: Candidate) -> tuple[tuple[int, ...], int]:
        return self.changed.get(c.pid, (c.replicas, c.leader))

    def rack_ok(self, replicas: Sequence[int], pos: int, dst: int) -> bool:
        if not self.racks:
            return True
        others = {self.rack_of[r] for i, r in enumerate(replicas) if i != pos}
        if self.rack_of[dst] not in others:
            return True
        return not rack_aware_possible(len(replicas), self.racks) and \
            self.rack_of[replicas[pos]] in others

    def _leader_amounts(self, c: Candidate, rf: int) -> tuple[int, int]:
        return 1, c.bout + c.bin * (rf - 1)

    def replica_move_delta(self, c: Candidate, replicas: Sequence[int], leader: int,
                           dst: int) -> float:
        src = replicas[c.pos]
        # transfer_delta of each replica metric, inlined: this runs for every destination of
        # every candidate (a million candidates a round at 10^6 partitions). The terms and
        # their sum are computed exactly as transfer_delta and sum() over them would.
        t = self.targets
        ls, ld, ts, td = self.loads[src], self.loads[dst], t.target[src], t.target[dst]
        terms = []
        for m, a in ((REPLICAS, 1), (DISK, c.size), (NET_IN, c.bin)):
            if a == 0 or src == dst:
                terms.append(0.0)
                continue
            mean = t.mean[m]
            terms.append(2.0 * t.weights[m] * a * ((ld[m] - td[m]) - (ls[m] - ts[m]) + a)
                         / (mean * mean))
        delta = sum(terms)
        new_leader = dst if c.pos == 0 else replicas[0]
        if new_leader != leader:
            la = self._leader_amounts(c, len(replicas))
            delta += sum(transfer_delta(self.targets, self.loads, m, leader, new_leader, a)
                         for m, a in zip(LEADER_METRICS, la, strict=True))
        return delta

    def _feasible(self, c: Candidate, replicas: Sequence[int], dst: int, soft: bool) -> bool:
        if dst in replicas or dst not in self.dest_ids:
            return False
        if soft and self.receivers is not None and dst not in self.receivers:
            return False
        if not self.rack_ok(replicas, c.pos, dst):
            return False
        load = self.loads[dst]
        if load[DISK] + c.size > self.capacity[dst]:
            return False
        if soft:
            src = replicas[c.pos]
            t = self.targets
            dst_disk = load[DISK] - t.target[dst][DISK]  # excess(dst, DISK), inlined
            if dst_disk + c.size > t.band[dst][DISK]:
                return False
            src_disk = self.loads[src][DISK] - t.target[src][DISK]
            if self.relaxed:
                # the giver may drop below its band, but never below the receiver
                if dst_disk - src_disk + c.size >= 0 or \
                        self.excess(dst, REPLICAS) - self.excess(src, REPLICAS) + 1 > 0:
                    return False
            elif src_disk - c.size < -t.band[src][DISK] and \
                    not self.sheds_small(src, c.size):
                return False
        return True

    def sheds_small(self, src: int, size: int) -> bool:
        """A broker above its replica band but light on disk (it took many small replicas)
        may give a replica no bigger than its mean even below its disk band: its disk is
        not what max/mean measures, its replica count is, and without swaps nothing else
        brings it back (scoring applies the same rule)."""
        t = self.targets.target[src]
        return self.excess(src, REPLICAS) > self.targets.band[src][REPLICAS] and \
            size * t[REPLICAS] <= t[DISK]

    # -- replica moves ----------------------------------------------------------------

    def try_replica_move(self, c: Candidate, choose: SoftChooser | None = None) -> bool:
        """``choose``: this round's :meth:`_soft_chooser`, bound once (else made here)."""
        replicas, leader = self.current(c)
        if c.pos >= len(replicas) or replicas[c.pos] != c.src:
            return False
        if not c.mandatory:
            dst = (choose or self._soft_chooser())(c, replicas, leader)
            if dst is None:
                return False
            self.apply_replica_move(c, replicas, leader, dst)
            return True
        soft = False
        best: tuple[float, int] | None = None
        options: Iterable[int] = c.dests
        for attempt in range(2):
            for dst in options:
                if not self._feasible(c, replicas, dst, soft):
                    continue
                d = self.replica_move_delta(c, replicas, leader, dst)
                if soft and d >= -EPS:
                    continue
                if best is None or d < best[0] - EPS or (abs(d - best[0]) <= EPS and dst < best[1]):
                    best = (d, dst)
            if best is not None or not c.mandatory or attempt == 1:
                break
            # a move that must happen: every broker that may receive is a fallback
            options = sorted(self.dest_ids)
        if best is None:
            if c.mandatory:
                self.unplaced.append((c.pid, c.pos, self._why_unplaced(c, replicas)))
            return False
        self.apply_replica_move(c, replicas, leader, best[1])
        return True

    def _soft_chooser(self) -> SoftChooser:
        """``_feasible`` and ``replica_move_delta`` over ``c.dests`` for a move that need
        not happen, as one function: what holds for the whole round (targets, limits,
        coefficients) is bound once, what depends only on the candidate (source excess,
        the other replicas' racks, the source's own band test) is computed once per
        candidate — a million candidates a round at 10^6 partitions. Every figure is
        computed by the same operations in the same order, so the choice is theirs to the
        last bit. Valid while ``relaxed`` and ``receivers`` stay as they are (a round)."""
        loads, t, capacity = self.loads, self.targets, self.capacity
        target, band, weights, mean = t.target, t.band, t.weights, t.mean
        dest_ids, receivers, rack_of = self.dest_ids, self.receivers, self.rack_of
        relaxed, n_racks, sheds_small = self.relaxed, len(self.racks), self.sheds_small
        # the objective's terms: 2·w·a·(e_dst - e_src + a) / mean², a = 0 gives 0.0
        k_r = 2.0 * weights[REPLICAS] * 1
        w2_d, w2_i, w2_o = 2.0 * weights[DISK], 2.0 * weights[NET_IN], 2.0 * weights[NET_OUT]
        k_l = 2.0 * weights[LEADERS] * 1
        mm_r = mean[REPLICAS] * mean[REPLICAS]
        mm_d = mean[DISK] * mean[DISK]
        mm_i = mean[NET_IN] * mean[NET_IN]
        mm_l = mean[LEADERS] * mean[LEADERS]
        mm_o = mean[NET_OUT] * mean[NET_OUT]

        def choose(c: Candidate, replicas: Sequence[int], leader: int) -> int | None:
            pos, size, bin_ = c.pos, c.size, c.bin
            src = replicas[pos]
            ls, ts = loads[src], target[src]
            src_disk = ls[DISK] - ts[DISK]
            if relaxed:
                src_replicas = ls[REPLICAS] - ts[REPLICAS]
            elif src_disk - size < -band[src][DISK] and not sheds_small(src, size):
                return None  # the giver may not give it: no destination is feasible
            else:
                src_replicas = 0.0
            others: list[str | None] = []
            any_rack = True  # rack_ok: no racks, or racks too few and the source shares one
            if n_racks:
                others = [rack_of[r] for r in replicas]
                src_rack = others.pop(pos)
                any_rack = n_racks < len(replicas) and src_rack in others
            k_d = w2_d * size
            k_i = w2_i * bin_
            es_r, es_i = ls[REPLICAS] - ts[REPLICAS], ls[NET_IN] - ts[NET_IN]
            out_rate = c.bout + bin_ * (len(replicas) - 1)  # _leader_amounts
            k_o = w2_o * out_rate
            first = replicas[0]
            best_d = 0.0
            best: int | None = None
            for dst in c.dests:
                if dst in replicas or dst not in dest_ids:
                    continue
                if receivers is not None and dst not in receivers:
                    continue
                if not any_rack and rack_of[dst] in others:
                    continue
                load = loads[dst]
                if load[DISK] + size > capacity[dst]:
                    continue
                td = target[dst]
                dst_disk = load[DISK] - td[DISK]
                if dst_disk + size > band[dst][DISK]:
                    continue
                if relaxed and (dst_disk - src_disk + size >= 0 or
                                (load[REPLICAS] - td[REPLICAS]) - src_replicas + 1 > 0):
                    continue
                delta = 0.0 + k_r * ((load[REPLICAS] - td[REPLICAS]) - es_r + 1) / mm_r
                delta += 0.0 if size == 0 else k_d * (dst_disk - src_disk + size) / mm_d
                delta += 0.0 if bin_ == 0 else \
                    k_i * ((load[NET_IN] - td[NET_IN]) - es_i + bin_) / mm_i
                new_leader = dst if pos == 0 else first
                if new_leader != leader:  # transfer_delta of the leader metrics, summed
                    ll, tl = loads[leader], target[leader]
                    ln, tn = loads[new_leader], target[new_leader]
                    lead = 0.0 + k_l * ((ln[LEADERS] - tn[LEADERS]) -
                                        (ll[LEADERS] - tl[LEADERS]) + 1) / mm_l
                    lead += 0.0 if out_rate == 0 else \
                        k_o * ((ln[NET_OUT] - tn[NET_OUT]) - (ll[NET_OUT] - tl[NET_OUT]) +
                               out_rate) / mm_o
                    delta += lead
                if delta >= -EPS:
                    continue
                if best is None or delta < best_d - EPS or \
                        (abs(delta - best_d) <= EPS and dst < best):
                    best_d, best = delta, dst
            return best

        return choose

    def _why_unplaced(self, c: Candidate, replicas: Sequence[int]) -> str:
        receivers = sorted(d for d in self.dest_ids if d not in replicas)
        fits = [d for d in receivers if self.loads[d][DISK] + c.size <= self.capacity[d]]
        limit = f"{self.restriction}, and " if self.restriction else ""
        if not fits:
            return (f"{limit}no broker that may receive it has {c.size} bytes of free disk "
                    "outside this partition's replicas")
        return (f"{limit}every broker that may receive it and has room ({_few(fits)}) would "
                "put two replicas in one rack")

    def why_rack_shared(self, replicas: Sequence[int], size: int) -> str:
        """Why replicas that share a rack (while the racks allow otherwise) stay so."""
        held = {self.rack_of[r] for r in replicas}
        missing = sorted(r for r in self.racks if r not in held)
        in_missing = sorted(d for d in self.dest_ids
                            if d not in replicas and self.rack_of[d] in missing)
        if not in_missing:
            if self.restriction:
                return f"{self.restriction} and none of them is in rack(s) {missing}"
            return f"no broker that may receive it is in rack(s) {missing}"
        room = [d for d in in_missing if self.loads[d][DISK] + size <= self.capacity[d]]
        if not room:
            return (f"no broker in rack(s) {missing} has {size} bytes of free disk "
                    f"(brokers {_few(in_missing)} are full)")
        if self.restriction:
            return self.restriction
        return (f"a move to a broker in rack(s) {missing} ({_few(room)}) was not needed "
                "to meet the goal")

    def apply_replica_move(self, c: Candidate, replicas: Sequence[int], leader: int,
                           dst: int) -> None:
        src = replicas[c.pos]
        new = list(replicas)
        new[c.pos] = dst
        for m, a in ((REPLICAS, 1), (DISK, c.size), (NET_IN, c.bin)):
            self.loads[src][m] -= a
            self.loads[dst][m] += a
        new_leader = new[0]
        if new_leader != leader:
            self._move_leadership(leader, new_leader, self._leader_amounts(c, len(new)))
        self.changed[c.pid] = (tuple(new), new_leader)

    def _move_leadership(self, src: int, dst: int, amounts: tuple[int, int]) -> None:
        for m, a in zip(LEADER_METRICS, amounts, strict=True):
            self.loads[src][m] -= a
            self.loads[dst][m] += a

    # -- leadership -------------------------------------------------------------------

    def try_leader_move(self, c: Candidate) -> bool:
        replicas, leader = self.current(c)
        if leader != c.src:
            return False
        amounts = self._leader_amounts(c, len(replicas))
        best: tuple[float, int] | None = None
        for dst in c.dests:
            if dst not in replicas or dst == leader or dst in self.removed:
                continue
            if self.receivers is not None and dst not in self.receivers:
                continue
            if self.excess(dst, LEADERS) + 1 > self.targets.band[dst][LEADERS]:
                continue
            d = sum(transfer_delta(self.targets, self.loads, m, leader, dst, a)
                    for m, a in zip(LEADER_METRICS, amounts, strict=True))
            if d < -EPS and (best is None or d < best[0] - EPS):
                best = (d, dst)
        if best is None:
            return False
        dst = best[1]
        self._move_leadership(leader, dst, amounts)
        self.changed[c.pid] = ((dst, *[r for r in replicas if r != dst]), dst)
        return True

    # -- demotion ---------------------------------------------------------------------

    def try_demotion(self, c: Candidate) -> bool:
        """Give the partition a preferred leader that is not demoted: of ``c.dests`` (its
        other replicas, in list order), the one leader-balance would pick — the lowest
        change of the objective, the earlier replica on a tie. A mandatory move: no band,
        no gain required. No destination: every replica is demoted; it stays, reported."""
        replicas, leader = self.current(c)
        if not c.dests:
            self.stuck.append(c.pid)
            return False
        amounts = self._leader_amounts(c, len(replicas))
        dst, best = c.dests[0], self._lead_delta(leader, c.dests[0], amounts)
        for other in c.dests[1:]:
            d = self._lead_delta(leader, other, amounts)
            if d < best - EPS:
                dst, best = other, d
        if dst != leader:
            self._move_leadership(leader, dst, amounts)
        self.changed[c.pid] = (demoted_last(replicas, dst, self.demoted), dst)
        return True

    def _lead_delta(self, src: int, dst: int, amounts: tuple[int, int]) -> float:
        return sum(transfer_delta(self.targets, self.loads, m, src, dst, a)
                   for m, a in zip(LEADER_METRICS, amounts, strict=True))

    def run_demotions(self, candidates: Sequence[Candidate]) -> int:
        """Demote every candidate, fewest choices first (``priority``), so a partition
        with one undemoted replica is placed before the flexible ones balance around it."""
        ordered = sorted(candidates, key=lambda c: (_finite(c.priority), c.pid))
        return sum(self.try_demotion(c) for c in ordered)

    # -- a round ----------------------------------------------------------------------

    def run_round(self, candidates: Sequence[Candidate], leaders: bool = False) -> int:
        """Apply what still helps, in a fixed order; the number of moves accepted."""
        ordered = round_order(candidates, self.relaxed)
        if leaders:
            return sum(self.try_leader_move(c) for c in ordered)
        choose = self._soft_chooser()  # once a round: a million candidates at 10^6
        return sum(self.try_replica_move(c, choose) for c in ordered)

    def replica_sources(self, goal_kind: str, new: set[int], balance: bool = False,
                        widen: bool = False) -> set[int]:
        """Brokers whose replicas may move this round (sets :attr:`receivers`).

        Brokers above their band give. New brokers (add-brokers) still below their band
        when none is (or ``widen``: the last round could not fill them) are filled by every
        broker that can give without leaving its own band: on a big cluster a few new
        brokers leave each old one only a little above target, inside its band. Such a
        filling round gives only to the brokers below their band.
        """
        self.receivers = None
        if goal_kind == "remove-brokers" and not balance:
            return set(self.removed)
        givers = set(self.loads)
        if goal_kind == "add-brokers" and not balance:
            givers -= new
        sources = {b for b in givers if self.out_of_band(b, REPLICA_METRICS) or b in self.removed}
        if new and (widen or not sources):
            sources |= self._givers_to_underloaded(givers - new, new, REPLICA_METRICS)
            self.receivers = self.underloaded(REPLICA_METRICS)
        return sources

    def leader_sources(self, new: set[int], widen: bool = False) -> set[int]:
        self.receivers = None
        givers = set(self.loads) - self.removed
        sources = {b for b in givers if self.out_of_band(b, LEADER_METRICS)}
        if new and (widen or not sources):
            sources |= self._givers_to_underloaded(givers - new, new, LEADER_METRICS)
            self.receivers = self.underloaded(LEADER_METRICS)
        return sources

    def underloaded(self, metrics: Iterable[int]) -> set[int]:
        """Brokers that may receive and are below their band on one of ``metrics``."""
        ms = list(metrics)
        return {b for b in self.dest_ids if b not in self.removed and
                any(self.excess(b, m) < -self.targets.band[b][m] for m in ms)}

    def _givers_to_underloaded(self, givers: set[int], receivers: set[int],
                               metrics: Iterable[int]) -> set[int]:
        receivers = receivers - self.removed
        short = [m for m in metrics
                 if any(self.excess(d, m) < -self.targets.band[d][m] for d in receivers)]
        return {b for b in givers
                if any(self.excess(b, m) > -self.targets.band[b][m] for m in short)}

    def shortfalls(self) -> list[str]:
        """Brokers left outside their band on replicas, disk or leaders, and why.

        demote-brokers moves no data and changes only the demoted brokers' partitions:
        its report names the leaders only, each time with that restriction as the why."""
        metrics: tuple[tuple[int, str], ...] = (
            (REPLICAS, "replicas"), (DISK, "disk"), (LEADERS, "leaders"))
        if self.demoted:
            metrics = ((LEADERS, "leaders"),)
        stay = sorted(b for b in self.loads if b not in self.removed)
        out: list[str] = []
        for m, name in metrics:
            over = [b for b in stay if self.excess(b, m) > self.targets.band[b][m]]
            under = [b for b in stay if self.excess(b, m) < -self.targets.band[b][m]]
            if over:
                why = self.restriction or self._no_more("")
                if self.restriction and m != LEADERS:
                    why += "; pass --balance to balance them in the same plan"
                out.append(f"{name}: brokers {_few(over)} stay above target: {why}")
            barred = [b for b in under if b not in self.dest_ids]
            if barred:
                out.append(f"{name}: brokers {_few(barred)} stay below target: "
                           f"{self.restriction or 'they may not receive'}")
            under = [b for b in under if b in self.dest_ids]
            if under:
                out.append(f"{name}: brokers {_few(under)} stay below target: "
                           f"{self.restriction if self.demoted else self._no_more(' onto them')}")
        return out

    def _no_more(self, where: str) -> str:
        limits = "within the constraints (distinct racks, disk capacity)"
        if self.stalled:
            return (f"the moves left{where} lower the imbalance too little {limits} (the last "
                    "round gained under 0.2% of the imbalance before the plan; a broker "
                    "full on replicas but light on disk needs swaps, which are not tried)")
        return f"no further move{where} lowers the imbalance {limits}"

    def source_caps(self, sources: Iterable[int], leaders: bool = False) -> dict[int, int]:
        """How many candidates per source are worth shipping to the driver this round."""
        caps: dict[int, int] = {}
        for b in sources:
            row = self.loads[b]
            if leaders:
                need = self.excess(b, LEADERS)
            else:
                per_disk = row[DISK] / row[REPLICAS] if row[REPLICAS] else 1.0
                per_in = row[NET_IN] / row[REPLICAS] if row[REPLICAS] else 1.0
                need = max(self.excess(b, REPLICAS),
                           self.excess(b, DISK) / per_disk if per_disk else 0.0,
                           self.excess(b, NET_IN) / per_in if per_in else 0.0)
            caps[b] = math.ceil(max(need, 0.0) * 3) + 32
        return caps


def round_order(candidates: Sequence[Candidate], relaxed: bool) -> list[Candidate]:
    """The order a round tries its candidates in: mandatory first, then by priority (pid and
    position break ties); in a relaxed round givers near their target take turns, so none
    drops far below the others."""
    ordered = sorted(candidates, key=lambda c: (not c.mandatory, _finite(c.priority),
                                                c.pid, c.pos))
    if not relaxed:
        return ordered
    rank: dict[int, int] = {}
    turns = []
    for c in ordered:
        rank[c.src] = rank.get(c.src, -1) + 1
        turns.append((not c.mandatory, rank[c.src]))
    return [c for _, c in sorted(zip(turns, ordered, strict=True), key=lambda t: t[0])]


def demoted_last(replicas: Sequence[int], first: int, demoted: set[int]) -> tuple[int, ...]:
    """``first``, the other replicas that are not demoted, then the demoted ones — each group
    in its original order. The same set: only the order (the preferred leader) changes."""
    rest = [r for r in replicas if r != first]
    return (first, *[r for r in rest if r not in demoted], *[r for r in rest if r in demoted])


def settled(before: float, after: float, start: float, min_gain: float,
            receivers: set[int] | None) -> bool:
    """Whether a round gained too little to run another: less than ``min_gain`` of the
    imbalance before the plan. Moves between brokers that are all nearly in band can go on
    lowering the imbalance a hair at a time — a broker full on replicas but light on disk
    takes a big replica and passes a small one on next round, 30-50 moves a round — which
    ran add-brokers --balance to the round limit while max/mean stayed put (1.020 disk,
    1.028-1.033 replicas from round 4 to 40). Filling rounds (``receivers`` set: new brokers
    below their band) always go on."""
    return receivers is None and before - after < min_gain * start


def _few(ids: Sequence[int], n: int = 8) -> str:
    shown = ", ".join(str(b) for b in ids[:n])
    return f"{shown}, ..." if len(ids) > n else shown


def _finite(x: float) -> float:
    return -1e300 if x == -math.inf else x
