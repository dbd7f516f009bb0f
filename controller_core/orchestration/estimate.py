"""How long a reassignment takes under its limits — one estimator for the dry run and the plan.

A small event simulation of what the executor does (:mod:`.reassignment`): moves start
smallest first, at most ``max_concurrent_moves`` at once and at most
``max_concurrent_moves_per_broker`` touching one broker; a started move copies its partition
to each adding replica, and each copy runs at the least of the receiving broker's
``follower.replication.throttled.rate``, the leader's ``leader.replication.throttled.rate``
(each shared by the throttled copies through that broker) and, when known, the receiving
broker's bandwidth (shared by all its copies) — the rule of the embedded data plane. A copy
between two log directories of one broker (KIP-113, JBOD) runs beside them at that broker's
``replica.alter.log.dirs.io.max.bytes.per.second`` (and bandwidth), shared by its copies
between directories; it crosses no network, so no replication throttle counts it. A slot
freed mid-step is filled at the executor's next pass (``poll_seconds``). Dividing bytes by
the throttle instead, as before, ignored the batches: a dry run said 2:43 for a run of 4:53.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

SCAN_FACTOR = 20  # the executor looks this many candidates per free slot past blocked ones


class MoveCost(NamedTuple):
    """One partition move as the estimator sees it: a tuple, because a plan of 10^6
    partitions makes 290,000 of them and a frozen dataclass's ``__init__`` (a ``setattr``
    per field) took a second of it."""

    bytes_per_replica: int  # what each adding replica copies (the partition's size)
    leader: int  # the broker the copies fetch from
    adding: tuple[int, ...]  # brokers receiving a replica
    touched: frozenset[int]  # brokers the per-broker limit counts (receiving or giving up)
    order: tuple[object, ...] = ()  # tie-break among equal sizes (the executor's: the tp)
    between: tuple[int, ...] = ()  # brokers copying their replica into another log directory

    @property
    def copies(self) -> int:
        return len(self.adding) + len(self.between)


def move_cost(leader: int, original: Sequence[int], target: Sequence[int], size: int,
              order: tuple[object, ...] = (), between: Sequence[int] = ()) -> MoveCost:
    adding = tuple([r for r in target if r not in original])
    return MoveCost(size, leader, adding, frozenset(target).symmetric_difference(original),
                    order, tuple(between))


def estimate_seconds(moves: Sequence[MoveCost], *, throttle: float | None,
                     max_concurrent_moves: int, max_concurrent_moves_per_broker: int | None = None,
                     bandwidth: Callable[[int], float] | None = None,
                     poll_seconds: float = 0.0, dir_throttle: float | None = None
                     ) -> float | None:
    """Seconds until the last move finishes; None when nothing bounds the rate.
    ``dir_throttle``: the rate of copies between log directories (the executor's
    ``Limits.log_dir_rate``); None leaves them to the bandwidth, if known."""
    if throttle is None and bandwidth is None and dir_throttle is None:
        return None
    # the executor's order: fewest bytes to copy first (network and between directories)
    pending = deque(sorted(moves, key=lambda m: (m.bytes_per_replica * m.copies, m.order)))
    per_broker = max_concurrent_moves_per_broker
    # moves running per broker, kept only where a per-broker limit reads it
    load: dict[int, int] = {}
    # flows: [remaining bytes, receiving broker, leader, move index, True if between log
    # directories of the receiving broker, rate this step]; moves: copies left
    flows: list[list[Any]] = []
    left: dict[int, int] = {}
    touched_of: dict[int, frozenset[int]] = {}
    # the flows into and out of each broker, and between its log directories: counted as
    # flows start and end instead of anew each step (the rates need them every step)
    into: dict[int, int] = {}
    out_of: dict[int, int] = {}
    within: dict[int, int] = {}
    next_id = 0
    now = 0.0

    start_at: float | None = None  # the executor's next pass, when a slot has freed

    def start() -> None:
        nonlocal next_id, start_at
        slots = max_concurrent_moves - len(left)
        skipped: list[MoveCost] = []
        scan = max(100, SCAN_FACTOR * slots)  # the loop runs only while slots > 0
        instant = False
        while pending and slots > 0 and len(skipped) < scan:
            m = pending.popleft()
            if per_broker is not None and any(load.get(b, 0) >= per_broker for b in m.touched):
                skipped.append(m)
                continue
            slots -= 1
            copies = m.copies
            if not copies or m.bytes_per_replica <= 0:
                instant = True  # a reorder or a shrink completes at once
                continue
            if per_broker is not None:
                for b in m.touched:
                    load[b] = load.get(b, 0) + 1
                touched_of[next_id] = m.touched
            left[next_id] = copies
            size = float(m.bytes_per_replica)
            for r in m.adding:
                flows.append([size, r, m.leader, next_id, False, 0.0])
                into[r] = into.get(r, 0) + 1
                out_of[m.leader] = out_of.get(m.leader, 0) + 1
            for b in m.between:
                flows.append([size, b, b, next_id, True, 0.0])
                within[b] = within.get(b, 0) + 1
            next_id += 1
        pending.extendleft(reversed(skipped))
        if instant and pending:
            # The executor counts a move that completes at once in the pass that starts it;
            # its slot is free for the next pass.
            start_at = now + poll_seconds

    inf = math.inf
    start()
    while flows or pending:
        if not flows and start_at is None:
            return math.inf  # nothing can start: cannot happen with limits >= 1
        # Each flow's rate: the least of the throttles (each shared by the throttled copies
        # through its broker) and the receiver's bandwidth (shared by all its copies)
        dt = inf
        for f in flows:
            recv = f[1]
            if f[4]:
                share = within[recv]
                rate = dir_throttle / share if dir_throttle is not None else inf
            else:
                share = into[recv]
                if throttle is not None:  # min(), without its call
                    rate = throttle / share
                    leader_rate = throttle / out_of[f[2]]
                    if leader_rate < rate:
                        rate = leader_rate
                else:
                    rate = inf
            if bandwidth is not None:
                rate = min(rate, bandwidth(int(recv)) / share)
            f[5] = rate
            t = f[0] / rate
            if t < dt:
                dt = t
        if start_at is not None:
            dt = min(dt, max(0.0, start_at - now))
        if math.isinf(dt):
            return math.inf
        now += dt
        keep: list[list[float]] = []
        for f in flows:
            r = f[5]
            left_bytes = f[0] - r * dt
            f[0] = left_bytes
            if left_bytes > 1e-6 * (r if r > 1.0 else 1.0):  # max(1.0, r)
                keep.append(f)
                continue
            if f[4]:
                within[f[1]] -= 1
            else:
                into[f[1]] -= 1
                out_of[f[2]] -= 1
            mid = f[3]
            left[mid] -= 1
            if left[mid] == 0:
                del left[mid]
                for b in touched_of.pop(mid, ()):
                    load[b] -= 1
                if pending and start_at is None:
                    start_at = math.ceil(now / poll_seconds - 1e-9) * poll_seconds \
                        if poll_seconds > 0 else now
        flows[:] = keep
        if start_at is not None and now >= start_at - 1e-9:
            start_at = None
            start()
    return now

