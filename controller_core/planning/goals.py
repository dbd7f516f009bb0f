"""What a plan is for, and whether a snapshot allows it.

* ``rebalance`` — every broker may give and take replicas;
* ``add-brokers`` — replicas move only onto the named (new, registered) brokers;
* ``remove-brokers`` — the named brokers are drained completely, nothing else moves;
* ``leader-balance`` — no data moves; only the preferred-leader order changes;
* ``demote-brokers`` — no data moves; the partitions the named brokers prefer to lead get
  another preferred leader (maintenance: a preferred election then moves leadership off);
* ``remove-disks`` — every replica in the named log directories (``BROKER:DIR``) moves to
  another directory of the same broker (JBOD; no replica changes broker, no byte crosses the
  network), the target directory chosen to balance that broker's directories.

``balance`` (add-brokers/remove-brokers only) widens a fill or a drain into one plan that
also balances every broker that stays: any replica may then move between any of them, and
the brokers that were hot before the change end as balanced as after ``rebalance``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from controller_core.planning.snapshot import Snapshot

GoalKind = Literal["rebalance", "add-brokers", "remove-brokers", "leader-balance",
                   "demote-brokers", "remove-disks"]
GOAL_KINDS: tuple[GoalKind, ...] = ("rebalance", "add-brokers", "remove-brokers",
                                    "leader-balance", "demote-brokers", "remove-disks")
# the goals that take a broker list (--goal KIND 3,4)
BROKER_GOALS: tuple[GoalKind, ...] = ("add-brokers", "remove-brokers", "demote-brokers")


class GoalError(Exception):
    """A goal that does not fit the snapshot; ``problems`` are one line each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass(frozen=True, slots=True)
class Goal:
    kind: GoalKind
    brokers: tuple[int, ...] = ()
    balance: bool = False
    # remove-disks: the (broker, log dir) pairs to empty
    disks: tuple[tuple[int, str], ...] = ()

    @property
    def moves_data(self) -> bool:
        """Replicas move between brokers (the replica rounds run)."""
        return self.kind not in ("leader-balance", "demote-brokers", "remove-disks")

    @property
    def leader_rounds(self) -> bool:
        """The leader-balance rounds run (demote-brokers and remove-disks change only what
        they name)."""
        return self.kind not in ("demote-brokers", "remove-disks")

    @property
    def demoted(self) -> frozenset[int]:
        """Brokers that must stop being preferred leaders (demote-brokers)."""
        return frozenset(self.brokers) if self.kind == "demote-brokers" else frozenset()

    @property
    def receivers_limited(self) -> bool:
        """Only the named (new) brokers may receive replicas."""
        return self.kind == "add-brokers" and not self.balance

    @property
    def drain_only(self) -> bool:
        """Only the named brokers' replicas move."""
        return self.kind == "remove-brokers" and not self.balance

    def describe(self) -> str:
        text: str = self.kind
        if self.brokers:
            text += f" {','.join(str(b) for b in self.brokers)}"
        if self.disks:
            text += " " + disks_text(self.disks)
        return text + (" +balance" if self.balance else "")


def parse_goal(words: list[str], balance: bool = False) -> Goal:
    """``["rebalance"]``, ``["add-brokers", "7,8"]``, ``["remove-brokers", "3"]`` ...

    ``balance`` asks an add-brokers/remove-brokers plan to balance the other brokers too.
    """
    if balance and (not words or words[0] not in ("add-brokers", "remove-brokers")):
        got = words[0] if words else "no goal"
        raise GoalError([f"--balance: only with --goal add-brokers or remove-brokers (got "
                         f"{got}); --goal rebalance already balances every broker"])
    if not words:
        raise GoalError([f"--goal: missing; one of {', '.join(GOAL_KINDS)}"])
    kind, rest = words[0], words[1:]
    if kind not in GOAL_KINDS:
        raise GoalError([f"--goal: unknown goal {kind!r}; one of {', '.join(GOAL_KINDS)}"])
    if kind in BROKER_GOALS:
        text = ",".join(rest).strip(",")
        if not text:
            raise GoalError([f"--goal {kind}: name the brokers, e.g. --goal {kind} 7,8"])
        ids: list[int] = []
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            try:
                ids.append(int(part))
            except ValueError:
                raise GoalError([f"--goal {kind}: {part!r} is not a broker id "
                                 "(comma-separated integers, e.g. 7,8)"]) from None
        if len(set(ids)) != len(ids):
            raise GoalError([f"--goal {kind}: broker ids repeat in {text}"])
        return Goal(kind, tuple(ids), balance)
    if kind == "remove-disks":
        return Goal(kind, disks=parse_disks(",".join(rest)))
    if rest:
        raise GoalError([f"--goal {kind}: takes no broker list (got {' '.join(rest)})"])
    return Goal(kind)


def disks_text(disks: tuple[tuple[int, str], ...]) -> str:
    return ",".join(f"{b}:{d}" for b, d in disks)


def parse_disks(text: str) -> tuple[tuple[int, str], ...]:
    """``3:/data/d1,4:/data/d2`` -> ((3, "/data/d1"), (4, "/data/d2"))."""
    example = "e.g. --goal remove-disks 3:/data/d1,4:/data/d2"
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise GoalError([f"--goal remove-disks: name the log directories as BROKER:DIR, "
                         f"{example}"])
    disks: list[tuple[int, str]] = []
    for item in items:
        broker, sep, path = item.partition(":")
        try:
            bid = int(broker)
        except ValueError:
            bid = -1
        if not sep or not path or bid < 0:
            raise GoalError([f"--goal remove-disks: {item!r} is not BROKER:DIR (a broker id, "
                             f"':', the log directory's path), {example}"])
        if (bid, path) in disks:
            raise GoalError([f"--goal remove-disks: {item} is named twice; name each log "
                             "directory once"])
        disks.append((bid, path))
    return tuple(disks)


def check_goal(goal: Goal, snapshot: Snapshot) -> list[str]:
    """Problems that make the goal impossible on this snapshot (empty: fine)."""
    if goal.kind == "remove-disks":
        return _check_remove_disks(goal, snapshot)
    known = set(snapshot.broker_ids())
    problems: list[str] = []
    unknown = sorted(set(goal.brokers) - known)
    if unknown and goal.kind == "demote-brokers":
        return [f"--goal demote-brokers {_ids(goal.brokers)}: unknown broker(s) {unknown}; "
                f"the snapshot knows {sorted(known)} — name brokers of this cluster (take the "
                "snapshot again if one just joined)"]
    if unknown:
        problems.append(
            f"--goal {goal.kind}: unknown broker(s) {unknown}; the snapshot knows "
            f"{sorted(known)} — a new broker must be started and registered (and the snapshot "
            "taken again) before a plan can place replicas on it")
        return problems
    if not snapshot.partitions.replicas:
        return problems
    max_rf = max(len(r) for r in snapshot.partitions.replicas)
    racks_all = {b.rack for b in snapshot.brokers if b.rack is not None}
    if goal.kind == "remove-brokers":
        remaining = [b for b in snapshot.brokers if b.id not in goal.brokers]
        if len(remaining) < max_rf:
            problems.append(
                f"--goal remove-brokers {','.join(map(str, goal.brokers))}: leaves "
                f"{len(remaining)} broker(s) but a partition has replication factor {max_rf}; "
                "remove fewer brokers or lower the replication factor first")
        racks_left = {b.rack for b in remaining if b.rack is not None}
        if racks_all and len(racks_all) >= max_rf > len(racks_left):
            problems.append(
                f"--goal remove-brokers {','.join(map(str, goal.brokers))}: leaves "
                f"{len(racks_left)} rack(s) {sorted(racks_left)} but replication factor "
                f"{max_rf} needs {max_rf} racks to keep replicas in distinct racks; "
                "keep a broker in each rack")
    if goal.demoted and goal.demoted >= known:
        problems.append(
            f"--goal demote-brokers {_ids(goal.brokers)}: would leave no broker to lead; "
            f"the snapshot knows {sorted(known)} — leave at least one broker undemoted")
    if goal.kind == "add-brokers" and len(goal.brokers) == len(known):
        problems.append("--goal add-brokers: names every broker; name only the new ones")
    if max_rf > len(known):
        problems.append(f"partitions.parquet: replication factor {max_rf} exceeds the "
                        f"{len(known)} brokers")
    return problems


def _ids(brokers: tuple[int, ...]) -> str:
    return ",".join(map(str, brokers))


def _check_remove_disks(goal: Goal, snapshot: Snapshot) -> list[str]:
    """remove-disks needs log-dir information, known directories, another directory on
    each broker and the room there for what the named directories hold."""
    flag = f"--goal remove-disks {disks_text(goal.disks)}"
    if snapshot.log_dirs is None:
        return [f"{flag}: the snapshot has no log-dir information (no log_dirs.parquet and no "
                "partitions column 'log_dirs'); take a snapshot that records each broker's "
                "log directories and each replica's directory (docs/rebalance.md)"]
    of = snapshot.dirs_of()
    problems: list[str] = []
    for b, d in goal.disks:
        if b not in of:
            problems.append(f"{flag}: unknown broker {b}; the snapshot knows "
                            f"{sorted(of)}")
        elif d not in {x.log_dir for x in of[b]}:
            problems.append(f"{flag}: broker {b} has no log directory {d!r}; its directories "
                            f"are {[x.log_dir for x in of[b]]}")
    if problems:
        return problems
    removed = set(goal.disks)
    used: dict[tuple[int, str], int] = {}
    table = snapshot.partitions
    assert table.log_dirs is not None
    for reps, ldirs, size in zip(table.replicas, table.log_dirs, table.size_bytes, strict=True):
        for b, d in zip(reps, ldirs, strict=True):
            used[(b, d)] = used.get((b, d), 0) + size
    for b in sorted({b for b, _ in goal.disks}):
        named = [x for x in of[b] if (b, x.log_dir) in removed]
        rest = [x for x in of[b] if (b, x.log_dir) not in removed]
        names = [x.log_dir for x in named]
        if not rest:
            problems.append(f"{flag}: broker {b} has no other log directory than {names}; a "
                            "replica can only move to another directory of its broker — keep "
                            f"one of them, or move the replicas off broker {b} with "
                            f"--goal remove-brokers {b}")
            continue
        need = sum(used.get((b, x.log_dir), 0) for x in named)
        free = sum(x.capacity_bytes - used.get((b, x.log_dir), 0) for x in rest)
        if need > free:
            problems.append(f"{flag}: broker {b}'s other log directories "
                            f"{[x.log_dir for x in rest]} have {max(free, 0)} bytes free but "
                            f"{names} hold {need} bytes; free space there first, or remove "
                            "fewer directories at once")
    return problems
