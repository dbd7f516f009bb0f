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

from controller_core.admin import ClusterAdmin
from controller_core.model import TopicPartition
from controller_core.orchestration import log_dir_moves


@dataclass(frozen=True)
class StalledMove:
    tp: TopicPartition
    brokers: tuple[int, ...]  # where its adding replicas are
    bytes_moved: int
    since_ms: float  # when its bytes last grew (or it was first seen)


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
                moving: Mapping[TopicPartition, tuple[int | None, Sequence[int]]]
                ) -> list[StalledMove]:
        """``moving``: each move in flight -> (bytes its adding replicas hold, their brokers);
        None when a broker did not answer (dead), which is no progress and keeps the last
        figure. Returns the stalled ones, in partition order. A move that left the map
        (done, cancelled, failed) is forgotten; one that comes back starts a new window.
        Fewer bytes than before (a replica that started its copy again) is no progress, but
        lowers the mark later growth is measured from."""
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
        return [StalledMove(tp, s.brokers, s.bytes_moved, s.since_ms)
                for tp, s in sorted(self._seen.items())
                if now_ms - s.since_ms >= self.window_ms]


Copied = dict[TopicPartition, tuple[int | None, list[int]]]
"""Each move in flight -> (bytes its adding replicas hold, None when none of them has a
figure; their brokers)."""


def copied(admin: ClusterAdmin, adding: Mapping[TopicPartition, Sequence[int]],
           between_dirs: Mapping[TopicPartition, Sequence[int]] | None = None,
           log_dirs: Mapping[TopicPartition, Mapping[int, str]] | None = None) -> Copied:
    """What :meth:`StallWatch.observe` takes, from the replicas' log sizes (DescribeLogDirs
    on a real cluster). A replica with no figure (not created yet, or its broker is down and
    cannot answer) adds nothing; a move none of whose replicas has one has no figure.
    ``between_dirs``: brokers copying a partition between their log directories (KIP-113),
    whose copies (future replicas) count the same way, by ``log_dirs``' named directories."""
    wanted = [(tp, r) for tp, replicas in adding.items() for r in replicas]
    sizes = admin.replica_log_sizes(wanted) if wanted else {}
    between = {tp: list(bs) for tp, bs in (between_dirs or {}).items() if bs and tp in adding}
    if between:
        pairs = [(tp, b) for tp, bs in between.items() for b in bs]
        want = log_dir_moves.wanted(log_dirs or {}, between)
        sizes.update(log_dir_moves.copy_bytes(want, log_dir_moves.placements(admin, pairs),
                                              pairs))
    out: Copied = {}
    for tp, replicas in adding.items():
        brokers = [*replicas, *between.get(tp, ())]
        if brokers:
            known = [sizes[(tp, r)] for r in brokers if (tp, r) in sizes]
            out[tp] = (sum(known) if known else None, brokers)
    return out


def describe(stalled: Sequence[StalledMove], now_ms: float, limit: int = 5) -> str:
    """One line naming the stalled moves and their brokers, for a condition or an Event."""
    parts = [f"{m.tp} (adding on broker{'s' if len(m.brokers) != 1 else ''} "
             f"{', '.join(map(str, m.brokers))}; {m.bytes_moved} bytes copied, none for "
             f"{(now_ms - m.since_ms) / 1000:.0f} s)" for m in stalled[:limit]]
    more = f" and {len(stalled) - limit} more" if len(stalled) > limit else ""
    return "no byte progress: " + "; ".join(parts) + more
