"""The plan report: per-broker load before and after, what moves, how long, what failed.

``report.md`` (tables a person reads in a pull request), ``report.json`` (the same figures
for tools) and ``report.png`` (sorted load curves before and after, matplotlib's Agg backend).
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
    """Resources run one after another; each as the executor runs it: at most
    maxConcurrentMoves at once and maxConcurrentMovesPerBroker touching one broker, under the
    throttle, and the copies between log directories under the resource's log-dir throttle,
    else the throttle (the executor's ``Limits.log_dir_rate``; the estimator the dry run
    uses)."""
    if not throttle:
        return None
    return sum(estimate.estimate_seconds(
        [estimate.move_cost(m.leader_before, m.before, m.after, m.size_bytes,
                            (m.topic, m.partition), m.dir_moves) for m in r.moves],
        throttle=throttle, max_concurrent_moves=r.max_concurrent_moves,
        max_concurrent_moves_per_broker=r.max_concurrent_moves_per_broker,
        dir_throttle=throttle if r.log_dir_throttle_bytes_per_second is None
        else r.log_dir_throttle_bytes_per_second) or 0.0
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
    out = {
        "goal": result.goal.describe(),
        "seed": result.seed,
        "partitionsTotal": result.partitions_total,
        "partitionsInPlan": len(result.moves),
        "partitionsReorderedOnly": sum(1 for m in result.moves
                                       if not m.added and m.after != m.before),
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
        "targetsNotReached": list(result.shortfalls),
        "inputSources": dict(result.sources),
        "planSeconds": round(result.seconds, 2),
        "rounds": [{"phase": r.phase, "round": r.round, "sources": r.sources,
                    "candidates": r.candidates, "accepted": r.accepted,
                    "seconds": round(r.seconds, 2), "objective": round(r.objective, 6)}
                   for r in result.rounds],
    }
    if result.disks is not None:  # a JBOD snapshot: moves between log dirs, apart
        out["replicasToMoveBetweenDirs"] = result.replicas_moved_between_dirs
        out["bytesToMoveBetweenDirs"] = result.dir_bytes_moved
        out["disks"] = disk_rows(result)
    return out


def disk_rows(result: PlanResult) -> list[dict[str, Any]]:
    """Each log directory: capacity, bytes used before and after, utilisation (JBOD)."""
    return [{"broker": d.broker, "logDir": d.log_dir, "capacityBytes": d.capacity_bytes,
             "usedBytesBefore": d.used_before, "usedBytesAfter": d.used_after,
             "utilisationBefore": round(d.used_before / d.capacity_bytes, 4),
             "utilisationAfter": round(d.used_after / d.capacity_bytes, 4),
             "removed": d.removed}
            for d in result.disks or ()]


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


# the manifest's source keys as report.md names them
FIGURE_NAMES = {
    "brokers": "brokers", "racks": "racks", "replicas": "replicas and leaders",
    "sizeBytes": "replica sizes (disk)", "diskCapacityBytes": "disk capacity",
    "networkCapacityBytesPerSecond": "network capacity", "bytesInPerSecond": "bytes in",
    "bytesOutPerSecond": "bytes out",
}


def markdown(result: PlanResult, resources: Sequence[RenderedResource], throttle: int | None,
             cluster: str, known: dict[str, Any] | None = None) -> str:
    """report.md; ``known`` is the plan's :func:`summary` when the caller has it already
    (the duration estimate replays every resource: seconds for a large plan)."""
    s = known if known is not None else summary(result, resources, throttle)
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
    if "bytesToMoveBetweenDirs" in s:
        lines.insert(4, f"- replicas to copy between log directories of their broker: "
                        f"{s['replicasToMoveBetweenDirs']}; data: "
                        f"{fmt_bytes(s['bytesToMoveBetweenDirs'])} "
                        f"({s['bytesToMoveBetweenDirs']} bytes, not over the network)")
    if s["estimatedSeconds"] is not None:
        lines.append(f"- estimated duration at {fmt_bytes(throttle or 0)}/s per broker: "
                     f"{fmt_seconds(s['estimatedSeconds'])}"
                     + (" (copies between log directories not included: they run under the "
                        "brokers' log-dir throttle)" if s.get("bytesToMoveBetweenDirs") else ""))
    else:
        lines.append("- estimated duration: unthrottled (no --throttle), not estimated")
    lines += ["", "## Where the figures come from", ""]
    if result.sources:
        lines += [f"- {FIGURE_NAMES.get(k, k)}: {v}" for k, v in result.sources.items()]
    else:
        lines.append("Not recorded: the snapshot's snapshot.json has no `sources` (written by "
                     "another tool, or by a kraftsman older than this one).")
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
        tag = " (removed)" if b.id not in result.eligible else \
            " (demoted)" if b.id in result.goal.demoted else ""
        lines.append(
            f"| {b.id}{tag} | {b.rack or '-'} | {x[REPLICAS]} → {y[REPLICAS]} | "
            f"{x[LEADERS]} → {y[LEADERS]} | {fmt_bytes(x[DISK])} → {fmt_bytes(y[DISK])} | "
            f"{100 * x[DISK] / cap:.1f} → {100 * y[DISK] / cap:.1f} | "
            f"{fmt_bytes(x[NET_IN])} → {fmt_bytes(y[NET_IN])} | "
            f"{fmt_bytes(x[NET_OUT])} → {fmt_bytes(y[NET_OUT])} |")
    if "disks" in s:
        lines += ["", "## Log directories", "",
                  "| broker | log dir | capacity | used | used % |", "|---:|---|---:|---:|---:|"]
        for d in s["disks"]:
            tag = " (removed)" if d["removed"] else ""
            lines.append(
                f"| {d['broker']} | `{d['logDir']}`{tag} | {fmt_bytes(d['capacityBytes'])} | "
                f"{fmt_bytes(d['usedBytesBefore'])} → {fmt_bytes(d['usedBytesAfter'])} | "
                f"{100 * d['utilisationBefore']:.1f} → {100 * d['utilisationAfter']:.1f} |")
    lines += ["", "## Constraints not met", ""]
    if result.violations:
        lines += [f"- **{v.constraint}** — {v.subject}: {v.reason}" for v in result.violations]
    else:
        lines.append("None: every partition keeps its replication factor on distinct brokers, "
                     "racks are distinct wherever the racks allow, and every broker stays "
                     "within its disk capacity.")
    lines += ["", f"## Targets not reached (±{_tolerance(result)} of target)", ""]
    if result.shortfalls:
        lines += [f"- {note}" for note in result.shortfalls]
    elif result.goal.kind == "remove-disks":
        lines.append("Not a goal of remove-disks: replicas move only between the log "
                     "directories of their broker, so no broker's load changes (see Log "
                     "directories).")
    else:
        lines.append("None: every broker that stays ends within tolerance of its target for "
                     "replicas, leaders and disk.")
    lines += ["", "## Resources (apply in this order)", "",
              "| step | resource | partitions | bytes | electPreferredLeaders |",
              "|---:|---|---:|---:|---|"]
    for r in resources:
        lines.append(f"| {r.step} | `{r.name}` | {len(r.moves)} | "
                     f"{fmt_bytes(sum(m.bytes_moved for m in r.moves))} | "
                     f"{str(r.elect_preferred_leaders).lower()} |")
    lines += ["", "![per-broker load before and after](report.png)", ""]
    return "\n".join(lines)


def _tolerance(result: PlanResult) -> str:
    t = result.targets
    ids = [b for b in result.eligible if t.target[b][DISK] > 0]
    if not ids:
        return "2%"
    b = ids[0]
    return f"{100 * t.band[b][DISK] / t.target[b][DISK]:g}%"


def write_json(path: Path, result: PlanResult, resources: Sequence[RenderedResource],
               throttle: int | None, known: dict[str, Any] | None = None) -> None:
    """report.json; ``known`` as for :func:`markdown`."""
    s = known if known is not None else summary(result, resources, throttle)
    doc = {"summary": s, "brokers": broker_rows(result)}
    path.write_text(json.dumps(doc, indent=1) + "\n")


def _scale(peak: float, rate: bool) -> tuple[float, str]:
    """Decimal units as in report.md (``format_bytes``): the largest that keeps peak >= 1."""
    scale, unit = 1.0, "B"
    for u in ("KB", "MB", "GB", "TB"):
        if peak < scale * 1000:
            break
        scale, unit = scale * 1000, u
    return scale, unit + ("/s" if rate else "")


def chart_panels(result: PlanResult) -> list[tuple[int, str, float]]:
    """(metric, label, scale) of the panels worth drawing: a metric that is zero on every
    broker before and after (e.g. no traffic figures in the snapshot) gets none."""
    panels: list[tuple[int, str, float]] = []
    for m, name in ((DISK, "disk"), (REPLICAS, "replicas"), (LEADERS, "leaders"),
                    (NET_IN, "bytes in"), (NET_OUT, "bytes out")):
        peak = max(max(v[m] for v in result.loads_before.values()),
                   max(v[m] for v in result.loads_after.values()))
        if peak <= 0:
            continue
        if m in (REPLICAS, LEADERS):
            panels.append((m, name, 1.0))
        else:
            scale, unit = _scale(peak, m != DISK)
            panels.append((m, f"{name} ({unit})", scale))
    return panels[:4]


def write_chart(path: Path, result: PlanResult) -> None:
    """Sorted load curves before and after, one panel per metric, at a size that reads the
    same for 6 or 1,000 brokers: brokers ranked by load (most loaded left), the target with
    its tolerance band, the brokers the goal names marked, and the outliers after the plan
    (outside the band) labelled with their ids."""
    plt: Any = importlib.import_module("matplotlib.pyplot")
    fig = chart_figure(result)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def chart_figure(result: PlanResult) -> Any:
    """The matplotlib figure of :func:`write_chart` (Agg backend)."""
    mpl: Any = importlib.import_module("matplotlib")
    mpl.use("Agg")
    plt: Any = importlib.import_module("matplotlib.pyplot")
    panels = chart_panels(result)
    named = set(result.goal.brokers)
    removed = {b.id for b in result.brokers} - result.eligible
    added = named - removed if result.goal.kind == "add-brokers" else set()
    elig = sorted(result.eligible)
    n = len(result.brokers)
    cols = 2 if len(panels) > 1 else 1
    rows = -(-len(panels) // cols) if panels else 1
    fig, axes = plt.subplots(rows, cols, figsize=(6.4 * cols, 3.9 * rows), squeeze=False)
    style = {"marker": "o", "markersize": 4} if n <= 60 else {}
    for ax, (m, label, scale) in zip(axes.flat, panels, strict=False):
        before = sorted(((result.loads_before[b.id][m] / scale, b.id) for b in result.brokers),
                        reverse=True)
        after = sorted(((result.loads_after[b][m] / scale, b) for b in elig), reverse=True)
        ax.plot(range(1, len(before) + 1), [v for v, _ in before], color="#999999",
                linewidth=1.5, label="before (all brokers)", **style)
        ax.plot(range(1, len(after) + 1), [v for v, _ in after], color="#1f77b4",
                linewidth=2, label="after (brokers that stay)", **style)
        targets = [result.targets.target[b][m] / scale for b in elig]
        bands = [result.targets.band[b][m] / scale for b in elig]
        if targets:
            # targets differ per broker with capacities or racks: the band of the mean
            same = max(targets) - min(targets) <= 1e-9 * max(1.0, max(targets))
            t, w = sum(targets) / len(targets), sum(bands) / len(bands)
            ax.axhspan(t - w, t + w, color="#2ca02c", alpha=0.15,
                       label="target ± tolerance" if same else "mean target ± tolerance")
            ax.axhline(t, color="#2ca02c", linewidth=0.8, linestyle="--")
        for curve, marks, color, shape, what in (
                (before, removed, "#d62728", "x", "removed"),
                (before, added, "#ff7f0e", "s", "added"),
                (after, added, "#ff7f0e", "s", None)):
            pts = [(i + 1, v) for i, (v, b) in enumerate(curve) if b in marks]
            if pts:
                ax.scatter([x for x, _ in pts], [y for _, y in pts], color=color, marker=shape,
                           s=36, zorder=5, label=f"{what} brokers" if what else None)
        # headroom above the highest point for the label of the outliers there
        top = ax.get_ylim()[1] * 1.1
        ax.set_ylim(0, top)
        outliers = [(i + 1, v, b) for i, (v, b) in enumerate(after)
                    if abs(v - result.targets.target[b][m] / scale) >
                    result.targets.band[b][m] / scale]
        # one label per end of the curve, listing the ids of the brokers outside the band
        mid = len(after) / 2
        for group, dy in (([o for o in outliers if o[0] <= mid], 6),
                          ([o for o in outliers if o[0] > mid][::-1], -12)):
            if not group:
                continue
            ids = ", ".join(str(b) for _, _, b in group[:4])
            more = f" +{len(group) - 4}" if len(group) > 4 else ""
            x, y, _ = group[0]
            if y < 0.15 * top:
                dy = 6  # a point near the bottom: the label goes above it, inside the panel
            ax.annotate(f"outside band: {ids}{more}", (x, y), textcoords="offset points",
                        xytext=(6 if x <= mid else -6, dy), fontsize="x-small",
                        color="#1f77b4", ha="left" if x <= mid else "right")
        ratio_b = max_over_mean(result.loads_before, elig, m)
        ratio_a = max_over_mean(result.loads_after, elig, m)
        ax.set_title(f"{label}: max/mean {ratio_b:.2f} → {ratio_a:.2f}", fontsize="medium")
        ax.set_ylabel(label)
        ax.set_xlabel(f"brokers ranked by load (of {n})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="x-small", loc="lower left")  # under a descending curve
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"{result.goal.describe()}: load per broker before and after "
                 f"({len(result.moves)} partitions in the plan)", fontsize="large")
    fig.tight_layout()
    return fig
