"""What a plan is for, and whether a snapshot allows it.

* ``rebalance`` — every broker may give and take replicas;
* ``add-brokers`` — replicas move only onto the named (new, registered) brokers;
* ``remove-brokers`` — the named brokers are drained completely, nothing else moves;
* ``leader-balance`` — no data moves; only the preferred-leader order changes;
* ``demote-brokers`` — no data moves; the partitions the named brokers prefer to lead get
  another preferred leader (maintenance: a preferred election then moves leadership off).

``balance`` (add-brokers/remove-brokers only) widens a fill or a drain into one plan that
also balances every broker that stays: any replica may then move between any of them, and
the brokers that were hot before the change end as balanced as after ``rebalance``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from controller_core.planning.snapshot import Snapshot

GoalKind = Literal["rebalance", "add-brokers", "remove-brokers", "leader-balance",
                   "demote-brokers"]
GOAL_KINDS: tuple[GoalKind, ...] = ("rebalance", "add-brokers", "remove-brokers",
                                    "leader-balance", "demote-brokers")
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

    @property
    def moves_data(self) -> bool:
        return self.kind not in ("leader-balance", "demote-brokers")

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
    if rest:
        raise GoalError([f"--goal {kind}: takes no broker list (got {' '.join(rest)})"])
    return Goal(kind)


def check_goal(goal: Goal, snapshot: Snapshot) -> list[str]:
    """Problems that make the goal impossible on this snapshot (empty: fine)."""
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
