"""The plan report: per-broker load before and after, what moves, how long, what failed.

``report.md`` (tables a person reads in a pull request), ``report.json`` (the same figures
for tools) and ``report.png`` (bar charts per broker, drawn with matplotlib's Agg backend).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from controller_core.orchestration import estimate
from controller_core.planning.objective import DISK, LEADERS, METRICS, NET_IN, NET_OUT, REPLICAS
from controller_core.planning.render import RenderedResource
from controller_core.planning.result import PlanResult
from controller_core.units import format_bytes as fmt_bytes
from controller_core.units import format_duration as fmt_seconds


def max_over_mean(loads: dict[int, list[int]], brokers: Sequence[int], metric: int) -> float:
    vals = [loads[b][metric] for b in brokers]
    mean = sum(vals) / len(vals) if vals else 0.0
    return max(vals) / mean if mean > 0 else 1.0


def lower_bound_bytes(result: PlanResult) -> float:
    """Bytes any plan must move: each broker's disk above its target (removed: all of it)."""
    return sum(max(0.0, result.loads_before[b][DISK] - result.targets.target[b][DISK])
               for b in result.loads_before)


def estimate_seconds(resources: Sequence[RenderedResource], throttle: int | None) -> float | None:
    """Resources run one after another; each as the executor runs it, in batches of
    maxConcurrentMoves under the throttle (the estimator the dry run uses)."""
    if not throttle:
        return None
    return sum(estimate.estimate_seconds(
        [estimate.move_cost(m.leader_before, m.before, m.after, m.size_bytes,
                            (m.topic, m.partition)) for m in r.moves],
        throttle=throttle, max_concurrent_moves=r.max_concurrent_moves) or 0.0
        for r in resources)


def summary(result: PlanResult, resources: Sequence[RenderedResource],
            throttle: int | None) -> dict[str, Any]:
    elig = sorted(result.eligible)
    balance = {
        METRICS[m]: {"before": round(max_over_mean(result.loads_before, elig, m), 4),
                     "after": round(max_over_mean(result.loads_after, elig, m), 4)}
        for m in range(5)}
    lb = lower_bound_bytes(result)
    est = estimate_seconds(resources, throttle)
    return {
        "goal": result.goal.describe(),
        "seed": result.seed,
        "partitionsTotal": result.partitions_total,
        "partitionsInPlan": len(result.moves),
        "partitionsReorderedOnly": sum(1 for m in result.moves if not m.added),
        "replicasToMove": result.replicas_moved,
        "bytesToMove": result.bytes_moved,
        "lowerBoundBytes": int(lb),
        "bytesToMoveOverLowerBound": round(result.bytes_moved / lb, 4) if lb > 0 else None,
        "resources": len(resources),
        "throttleBytesPerSecond": throttle,
        "estimatedSeconds": round(est, 1) if est is not None else None,
        "maxOverMean": balance,
        "violations": [{"constraint": v.constraint, "subject": v.subject, "reason": v.reason}
                       for v in result.violations],
        "planSeconds": round(result.seconds, 2),
        "rounds": [{"phase": r.phase, "round": r.round, "sources": r.sources,
                    "candidates": r.candidates, "accepted": r.accepted,
                    "seconds": round(r.seconds, 2)} for r in result.rounds],
    }


def broker_rows(result: PlanResult) -> list[dict[str, Any]]:
    rows = []
    for b in result.brokers:
        before, after = result.loads_before[b.id], result.loads_after[b.id]
        rows.append({
            "broker": b.id, "rack": b.rack, "removed": b.id not in result.eligible,
            "diskCapacityBytes": b.disk_capacity_bytes,
            "before": dict(zip(METRICS, before, strict=True)),
            "after": dict(zip(METRICS, after, strict=True)),
            "target": dict(zip(METRICS, (round(x, 1) for x in result.targets.target[b.id]),
                               strict=True)),
        })
    return rows


def markdown(result: PlanResult, resources: Sequence[RenderedResource], throttle: int | None,
             cluster: str) -> str:
    s = summary(result, resources, throttle)
    lines = [
        f"# Plan for cluster `{cluster}`: {s['goal']}",
        "",
        f"- partitions in the plan: {s['partitionsInPlan']} of {s['partitionsTotal']} "
        f"({s['partitionsReorderedOnly']} only change their preferred leader)",
        f"- replicas to copy: {s['replicasToMove']}; data to move: "
        f"{fmt_bytes(s['bytesToMove'])} ({s['bytesToMove']} bytes)",
        f"- lower bound (disk above target per broker): {fmt_bytes(s['lowerBoundBytes'])}"
        + (f"; this plan moves {s['bytesToMoveOverLowerBound']:.3f}x of it"
           if s["bytesToMoveOverLowerBound"] is not None else ""),
        f"- resources: {s['resources']} PartitionReassignment(s), run one after another",
    ]
    if s["estimatedSeconds"] is not None:
        lines.append(f"- estimated duration at {fmt_bytes(throttle or 0)}/s per broker: "
                     f"{fmt_seconds(s['estimatedSeconds'])}")
    else:
        lines.append("- estimated duration: unthrottled (no --throttle), not estimated")
    lines += ["", "## Balance (max / mean over the brokers that stay)", "",
              "| metric | before | after |", "|---|---:|---:|"]
    for name, v in s["maxOverMean"].items():
        lines.append(f"| {name} | {v['before']:.3f} | {v['after']:.3f} |")
    lines += ["", "## Brokers", "",
              "| broker | rack | replicas | leaders | disk | disk % | in B/s | out B/s |",
              "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for b in result.brokers:
        x, y = result.loads_before[b.id], result.loads_after[b.id]
        cap = b.disk_capacity_bytes
        tag = " (removed)" if b.id not in result.eligible else ""
        lines.append(
            f"| {b.id}{tag} | {b.rack or '-'} | {x[REPLICAS]} → {y[REPLICAS]} | "
            f"{x[LEADERS]} → {y[LEADERS]} | {fmt_bytes(x[DISK])} → {fmt_bytes(y[DISK])} | "
            f"{100 * x[DISK] / cap:.1f} → {100 * y[DISK] / cap:.1f} | "
            f"{fmt_bytes(x[NET_IN])} → {fmt_bytes(y[NET_IN])} | "
            f"{fmt_bytes(x[NET_OUT])} → {fmt_bytes(y[NET_OUT])} |")
    lines += ["", "## Constraints not met", ""]
    if result.violations:
        lines += [f"- **{v.constraint}** — {v.subject}: {v.reason}" for v in result.violations]
    else:
        lines.append("None: every partition keeps its replication factor on distinct brokers, "
                     "racks are distinct wherever the racks allow, and every broker stays "
                     "within its disk capacity.")
    lines += ["", "## Resources (apply in this order)", "",
              "| step | resource | partitions | bytes | electPreferredLeaders |",
              "|---:|---|---:|---:|---|"]
    for r in resources:
        lines.append(f"| {r.step} | `{r.name}` | {len(r.moves)} | "
                     f"{fmt_bytes(sum(m.bytes_moved for m in r.moves))} | "
                     f"{str(r.elect_preferred_leaders).lower()} |")
    lines += ["", "![per-broker load before and after](report.png)", ""]
    return "\n".join(lines)


def write_json(path: Path, result: PlanResult, resources: Sequence[RenderedResource],
               throttle: int | None) -> None:
    doc = {"summary": summary(result, resources, throttle), "brokers": broker_rows(result)}
    path.write_text(json.dumps(doc, indent=1) + "\n")


def write_chart(path: Path, result: PlanResult) -> None:
    """Before/after bars per broker for disk, replicas, leaders and network."""
    mpl: Any = importlib.import_module("matplotlib")
    mpl.use("Agg")
    plt: Any = importlib.import_module("matplotlib.pyplot")
    ids = [b.id for b in result.brokers]
    xs = list(range(len(ids)))
    panels = [(DISK, "disk (GiB)", 1024**3), (REPLICAS, "replicas", 1),
              (LEADERS, "leaders", 1), (NET_IN, "bytes in (MiB/s)", 1024**2)]
    fig, axes = plt.subplots(len(panels), 1, figsize=(max(8, min(40, len(ids) * 0.25)), 11),
                             sharex=True)
    width = 0.4
    for ax, (m, label, scale) in zip(axes, panels, strict=True):
        before = [result.loads_before[b][m] / scale for b in ids]
        after = [result.loads_after[b][m] / scale for b in ids]
        ax.bar([x - width / 2 for x in xs], before, width, label="before", color="#bbbbbb")
        ax.bar([x + width / 2 for x in xs], after, width, label="after", color="#1f77b4")
        mean = sum(result.loads_after[b][m] for b in result.eligible) / \
            max(len(result.eligible), 1) / scale
        ax.axhline(mean, color="#d62728", linewidth=0.8, linestyle="--", label="mean")
        ax.set_ylabel(label)
    axes[0].legend(loc="upper right", fontsize="small")
    axes[0].set_title(f"{result.goal.describe()}: per-broker load before and after")
    step = max(1, len(ids) // 50)
    axes[-1].set_xticks(xs[::step], [str(i) for i in ids[::step]], fontsize="x-small")
    axes[-1].set_xlabel("broker")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
