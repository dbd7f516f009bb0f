"""`kraftsman apply` of a remove-brokers plan: cordon before the moves, verify after them.

`kraftsman plan --goal remove-brokers 3,4` writes its goal into every resource it renders
(the ``kraftsman.io/plan-goal`` annotation, with ``kraftsman.io/plan-step`` "i/n"). Applying
such a resource cordons the brokers before its moves start (where the cluster's
metadata.version allows it, else says so), so nothing created meanwhile lands on them; the
last step, once Completed, is followed by a check of what each broker still holds, printed
as Drained or as what is left. Cancelling a step (``spec.cancel: true``) uncordons them
first: a cordoned broker refuses every reassignment that keeps a replica on it, a rollback
to the saved assignment included.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from controller_core.admin import ClusterAdmin
from controller_core.model import is_whole_number
from controller_core.orchestration import brokers_out
from kraftsman.resources import Resource

PLAN_GOAL = "kraftsman.io/plan-goal"
PLAN_STEP = "kraftsman.io/plan-step"


def removed_brokers(r: Resource) -> tuple[int, ...]:
    """The brokers a resource's remove-brokers plan takes out (``remove-brokers 3,4`` or
    ``remove-brokers 3 +balance``); none for any other resource."""
    words = r.annotations.get(PLAN_GOAL, "").split()
    if len(words) < 2 or words[0] != "remove-brokers":
        return ()
    ids = words[1].split(",")
    return tuple(int(i) for i in ids) if all(is_whole_number(i) for i in ids) else ()


def is_last_step(r: Resource) -> bool:
    """``i/n`` with i == n; a resource without the annotation is a plan of one step."""
    step, _, steps = r.annotations.get(PLAN_STEP, "1/1").partition("/")
    return step == steps


def before_moves(cluster: ClusterAdmin, brokers: tuple[int, ...],
                 say: Callable[[str], None]) -> dict[str, Any]:
    """Cordon; the summary's entry. A refusal is said and the moves go on (they are what
    takes the brokers out; the cordon only keeps new replicas off meanwhile)."""
    out = brokers_out.cordon(cluster, brokers)
    for line in [out.note] if out.note else [
            f"broker {b}: {brokers_out.CORDONED} (no new replica is placed on it)"
            for b in out.cordoned]:
        say(line)
    for problem in out.problems:
        say(f"warning: {problem}; the brokers are drained without it")
    return {"cordoned": list(out.cordoned), "note": out.note, "problems": list(out.problems)}


def on_cancel(cluster: ClusterAdmin, brokers: tuple[int, ...],
              say: Callable[[str], None]) -> list[str]:
    """Uncordon before a cancel; the problems (said too)."""
    problems = brokers_out.uncordon(cluster, brokers)
    for p in problems:
        say(f"warning: {p}")
    if not problems:
        say(f"brokers {', '.join(map(str, brokers))}: uncordoned (the removal is cancelled)")
    return problems


def after_last_step(cluster: ClusterAdmin, brokers: tuple[int, ...],
                    say: Callable[[str], None]) -> tuple[bool, list[dict[str, Any]]]:
    """Describe what each broker still holds: (all Drained, the summary's entries)."""
    checks = brokers_out.check_drained(cluster, brokers)
    for c in checks:
        say(c.message)
    if all(c.drained for c in checks):
        say(f"brokers {', '.join(map(str, brokers))}: stop their processes, then "
            "`kraftsman cluster unregister-broker ID` takes each out of describe cluster")
    return all(c.drained for c in checks), [
        {"id": c.broker, "state": brokers_out.DRAINED if c.drained else "NotDrained",
         "message": c.message} for c in checks]
