"""Stalled moves: a move in flight whose adding replicas hold no more bytes than they did a
window ago.

Rebalances run for hours and can stop copying without failing (a dead broker that is not
fenced yet, a throttle of a few bytes, a leader that cannot serve): nothing errs, the
progress just stands still. This watch is told, on every pass, how many bytes each move in
flight has copied, and names the moves whose figure has not grown for ``window_ms`` (of the
cluster's clock). Pure: the caller keeps it and feeds it observations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from controller_core.model import TopicPartition


@dataclass(frozen=True)
class StalledMove:
    tp: TopicPartition
    brokers: tuple[int, ...]  # where its copies are: its adding replicas, ``between``
    bytes_moved: int
    since_ms: float  # when its bytes last grew (or it was first seen)
    between: tuple[int, ...] = ()  # those copying between their log directories (KIP-113)


@dataclass
class _Seen:
    bytes_moved: int
    since_ms: float
    brokers: tuple[int, ...]


@dataclass
class StallWatch:
    window_ms: float
    _seen: dict[TopicPartition, _Seen] = field(default_factory=dict)

    def observe(self, now_ms: float,
                moving: Mapping[TopicPartition, tuple[int | None, Sequence[int]]],
                between: Mapping[TopicPartition, Sequence[int]] | None = None
                ) -> list[StalledMove]:
        """``moving``: each move in flight -> (bytes its adding replicas hold, their brokers);
        None when a broker did not answer (dead), which is no progress and keeps the last
        figure. Returns the stalled ones, in partition order. A move that left the map
        (done, cancelled, failed) is forgotten; one that comes back starts a new window.
        Fewer bytes than before (a replica that started its copy again) is no progress, but
        lowers the mark later growth is measured from. ``between``: the brokers of each
        move that copy between their own log directories (named so in :func:`describe`)."""
        for tp in [tp for tp in self._seen if tp not in moving]:
            del self._seen[tp]
        for tp, (moved, brokers) in moving.items():
            adding = tuple(sorted(brokers))
            seen = self._seen.get(tp)
            if seen is None or adding != seen.brokers:
                self._seen[tp] = _Seen(moved or 0, now_ms, adding)
            elif moved is None:
                continue
            elif moved > seen.bytes_moved:
                self._seen[tp] = _Seen(moved, now_ms, adding)
            elif moved < seen.bytes_moved:
                seen.bytes_moved = moved
        within = between or {}
        return [StalledMove(tp, s.brokers, s.bytes_moved, s.since_ms,
                            tuple(b for b in s.brokers if b in within.get(tp, ())))
                for tp, s in sorted(self._seen.items())
                if now_ms - s.since_ms >= self.window_ms]


Copied = dict[TopicPartition, tuple[int | None, list[int]]]
"""Each move in flight -> (bytes its adding replicas hold, None when none of them has a
figure; their brokers)."""


def copied(sizes: Mapping[tuple[TopicPartition, int], int],
           copies: Mapping[TopicPartition, Sequence[int]]) -> Copied:
    """What :meth:`StallWatch.observe` takes, from the bytes each copy of a move holds (its
    adding replicas and, KIP-113, the future replicas of the brokers copying it between their
    log directories; the executor reads them once per pass: ``ReassignmentExecutor.copied``).
    A copy with no figure (not created yet, or its broker is down and cannot answer) adds
    nothing; a move none of whose copies has one has no figure."""
    out: Copied = {}
    for tp, brokers in copies.items():
        if brokers:
            known = [sizes[(tp, b)] for b in brokers if (tp, b) in sizes]
            out[tp] = (sum(known) if known else None, list(brokers))
    return out


def describe(stalled: Sequence[StalledMove], now_ms: float, limit: int = 5) -> str:
    """One line naming the stalled moves and their brokers, for a condition or an Event."""
    parts = [f"{m.tp} ({_where(m)}; {m.bytes_moved} bytes copied, none for "
             f"{(now_ms - m.since_ms) / 1000:.0f} s)" for m in stalled[:limit]]
    more = f" and {len(stalled) - limit} more" if len(stalled) > limit else ""
    return "no byte progress: " + "; ".join(parts) + more


def _where(m: StalledMove) -> str:
    """"adding on broker 3", "between log directories on broker 0", or both."""
    def on(brokers: Sequence[int]) -> str:
        return f"on broker{'s' if len(brokers) != 1 else ''} {', '.join(map(str, brokers))}"

    adding = [b for b in m.brokers if b not in m.between]
    parts = ([f"adding {on(adding)}"] if adding or not m.between else []) + \
        ([f"between log directories {on(m.between)}"] if m.between else [])
    return ", ".join(parts)
