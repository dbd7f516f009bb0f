"""Log directories (JBOD): which directory of its broker each replica of a plan lands in.

Runs on the driver after the rounds, on the plan's moves and the snapshot (pure Python, no
Spark): both engines give the same moves, so they give the same directories.

* A replica that stays on its broker keeps its directory — unless ``remove-disks`` names
  that directory: it then moves to another directory of the same broker (an intra-broker
  copy; the replica list and its order do not change).
* A replica that lands on a broker (a move between brokers) and a replica leaving a removed
  directory get the directory of that broker that balances its directories: the lowest
  utilisation (used / capacity) once the replica is there, among the directories with room
  (ties: the directory listed first). Replicas that leave a directory free their bytes
  first; the replicas to place go largest first (then topic, partition, broker), so the
  big ones choose while there is most choice.

A snapshot without log-dir information changes nothing here: every move keeps
``dirs_before``/``dirs_after`` None and is rendered with ``"any"``, as before.
"""

from __future__ import annotations

from dataclasses import replace

from controller_core.planning.goals import Goal
from controller_core.planning.objective import Violation
from controller_core.planning.result import DiskRow, PartitionMove
from controller_core.planning.snapshot import LogDir, Snapshot

Key = tuple[int, str]


def place_log_dirs(snapshot: Snapshot, goal: Goal, moves: list[PartitionMove]
                   ) -> tuple[list[PartitionMove], list[DiskRow] | None, list[Violation]]:
    """The moves with their directories (plus remove-disks' intra-broker moves), the
    per-directory table, and the replicas no directory had room for."""
    table = snapshot.partitions
    if snapshot.log_dirs is None or table.log_dirs is None:
        return moves, None, []
    of = snapshot.dirs_of()
    removed: set[Key] = set(goal.disks) if goal.kind == "remove-disks" else set()
    capacity: dict[Key, int] = {(d.broker, d.log_dir): d.capacity_bytes
                                for d in snapshot.log_dirs}
    used: dict[Key, int] = dict.fromkeys(capacity, 0)
    for reps, ldirs, size in zip(table.replicas, table.log_dirs, table.size_bytes, strict=True):
        for b, d in zip(reps, ldirs, strict=True):
            used[(b, d)] += size
    before = dict(used)

    row_of = {(t, p): i for i, (t, p) in enumerate(zip(table.topic, table.partition,
                                                       strict=True))}
    by_key = {(m.topic, m.partition): m for m in moves}
    rows = [row_of[k] for k in by_key]
    if removed:  # partitions with a replica in a removed directory, not moved otherwise
        rows += [i for i, ldirs in enumerate(table.log_dirs)
                 if (table.topic[i], table.partition[i]) not in by_key
                 and any((b, d) in removed
                         for b, d in zip(table.replicas[i], ldirs, strict=True))]

    # (row, after, dirs so far: None where still to place)
    plans: list[tuple[int, tuple[int, ...], list[str | None]]] = []
    todo: list[tuple[int, str, int, int, int]] = []  # -size, topic, partition, slot, plan
    for row in rows:
        reps, ldirs, size = table.replicas[row], table.log_dirs[row], table.size_bytes[row]
        m = by_key.get((table.topic[row], table.partition[row]))
        after = m.after if m is not None else tuple(reps)
        was = dict(zip(reps, ldirs, strict=True))
        for b, d in was.items():
            if b not in after or (b, d) in removed:
                used[(b, d)] -= size  # leaves the broker, or its removed directory
        dirs: list[str | None] = []
        for slot, b in enumerate(after):
            keep = was.get(b)
            if keep is not None and (b, keep) not in removed:
                dirs.append(keep)
            else:
                dirs.append(None)
                todo.append((-size, table.topic[row], table.partition[row], slot, len(plans)))
        plans.append((row, after, dirs))

    violations: list[Violation] = []
    for neg, topic, partition, slot, i in sorted(todo):
        row, after, dirs = plans[i]
        b, size = after[slot], -neg
        choices = [d for d in of[b] if (b, d.log_dir) not in removed] or of[b]
        pick = _balanced(choices, used, size)
        if pick is None:
            pick = min(choices, key=lambda d: (_util(d, used, size), choices.index(d)))
            free = ", ".join(f"{d.log_dir}: {d.capacity_bytes - used[(b, d.log_dir)]}"
                             for d in choices)
            violations.append(Violation(
                "log dir capacity", f"{topic}-{partition} replica {b}",
                f"no log directory of broker {b} has {size} bytes free ({free}); placed in "
                f"{pick.log_dir} over its capacity"))
        used[(b, pick.log_dir)] += size
        dirs[slot] = pick.log_dir

    out: list[PartitionMove] = []
    for row, after, dirs in plans:
        key = (table.topic[row], table.partition[row])
        final = tuple(d for d in dirs if d is not None)
        m = by_key.get(key)
        if m is None:
            m = PartitionMove(key[0], key[1], tuple(table.replicas[row]), after,
                              int(table.size_bytes[row]), int(table.leader[row]))
        out.append(replace(m, dirs_before=tuple(table.log_dirs[row]), dirs_after=final))
    out.sort(key=lambda m: (m.size_bytes, m.topic, m.partition))
    disks = [DiskRow(d.broker, d.log_dir, d.capacity_bytes, before[(d.broker, d.log_dir)],
                     used[(d.broker, d.log_dir)], (d.broker, d.log_dir) in removed)
             for d in sorted(snapshot.log_dirs, key=lambda d: (d.broker, d.log_dir))]
    return out, disks, violations


def _util(d: LogDir, used: dict[Key, int], size: int) -> float:
    return (used[(d.broker, d.log_dir)] + size) / d.capacity_bytes


def _balanced(choices: list[LogDir], used: dict[Key, int], size: int) -> LogDir | None:
    """The directory with room whose utilisation is lowest with the replica in it."""
    fits = [d for d in choices if used[(d.broker, d.log_dir)] + size <= d.capacity_bytes]
    if not fits:
        return None
    return min(fits, key=lambda d: (_util(d, used, size), choices.index(d)))
