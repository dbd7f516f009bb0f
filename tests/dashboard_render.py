"""Draw kraftsman's Grafana dashboard (kraftsman/monitoring.py) from real scrapes, as a
picture to look at.

Grafana itself cannot run here (it is AGPL-licensed, so not installed on these machines):
the panels are drawn the way Grafana draws them from what Grafana would get. Each panel's
queries are range queries of Prometheus' own engine (tools/promql/range_test.go, the PromQL
checker's binary) over the samples of the operator's ``/metrics``, scraped as Prometheus
does; legends follow each target's ``legendFormat``, the axes its unit, the layout its
``gridPos``. ``bench/dashboard_render.py`` scrapes the shipped operator during a real move;
tests/operator/test_monitoring.py draws synthetic series.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


def samples(text: str) -> dict[SeriesKey, float]:
    """One scrape of the text exposition format: each sample by name and sorted labels."""
    out: dict[SeriesKey, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _selector(key: SeriesKey) -> str:
    name, labels = key
    inner = ",".join(f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
                     for k, v in labels)
    return f"{name}{{{inner}}}"


def _number(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Inf" if v > 0 else "-Inf"
    return repr(float(v))


def load_script(scrapes: Sequence[Mapping[SeriesKey, float]], step_seconds: int) -> str:
    """The promqltest ``load`` block of scrapes taken every ``step_seconds`` from time 0, as
    Prometheus stores them: a series gone from a scrape (or a failed scrape: an empty one)
    gets a staleness marker, so a query stops drawing it there instead of carrying its last
    value on for the 5-minute lookback; no sample at all (``_``) until it is back."""
    keys = sorted({k for s in scrapes for k in s})
    lines = [f"load {step_seconds}s"]
    for key in keys:
        values = []
        for i, s in enumerate(scrapes):
            if key in s:
                values.append(_number(s[key]))
            else:
                values.append("stale" if i and key in scrapes[i - 1] else "_")
        lines.append(f"    {_selector(key)} {' '.join(values)}")
    return "\n".join(lines) + "\n"


def range_queries(check: Path, workdir: Path, load: str, exprs: Sequence[str], *,
                  end_seconds: float, step_seconds: float, start_seconds: float = 0.0
                  ) -> list[list[dict[str, Any]]]:
    """Each expression's range query on Prometheus' engine: a list of series
    (``metric``: labels, ``values``: [[seconds, value], ...]) per expression."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "series.load").write_text(load)
    (workdir / "queries.json").write_text(json.dumps([
        {"expr": e, "startSeconds": start_seconds, "endSeconds": end_seconds,
         "stepSeconds": step_seconds} for e in exprs]))
    (workdir / "results.json").unlink(missing_ok=True)
    done = subprocess.run([str(check), "-test.run", "^TestRangeQueries$", "-test.v"],
                          capture_output=True, text=True, timeout=300,
                          env={"PROMQL_RANGE": str(workdir), "PATH": "/usr/bin:/bin"})
    if done.returncode != 0 or not (workdir / "results.json").exists():
        raise RuntimeError(f"Prometheus' engine failed:\n{done.stdout[-3000:]}"
                           f"{done.stderr[-2000:]}")
    results: list[list[dict[str, Any]]] = json.loads((workdir / "results.json").read_text())
    return results


def legend(fmt: str, metric: Mapping[str, str]) -> str:
    """Grafana's legendFormat: ``{{label}}`` is the series' label value (empty when absent)."""
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt).strip()


def panel_series(dashboard: Mapping[str, Any], check: Path, workdir: Path, load: str, *,
                 end_seconds: float, step_seconds: float
                 ) -> dict[str, list[tuple[str, list[tuple[float, float]]]]]:
    """Every panel's lines, by panel title: (legend, points) per series of each target, in
    the targets' order — one engine run for the whole dashboard."""
    targets = [(p["title"], t) for p in dashboard["panels"] for t in p["targets"]]
    results = range_queries(check, workdir, load, [t["expr"] for _, t in targets],
                            end_seconds=end_seconds, step_seconds=step_seconds)
    lines: dict[str, list[tuple[str, list[tuple[float, float]]]]] = {
        p["title"]: [] for p in dashboard["panels"]}
    for (title, target), series in zip(targets, results, strict=True):
        for s in sorted(series, key=lambda s: legend(target["legendFormat"], s["metric"])):
            lines[title].append((legend(target["legendFormat"], s["metric"]),
                                 [(float(t), float(v)) for t, v in s["values"]]))
    return lines


_BYTES = ("B", "kB", "MB", "GB", "TB")


def _format(unit: str, v: float) -> str:
    """Grafana's units, the ones the dashboard uses (bytes are SI, as Grafana's ``bytes``)."""
    if unit == "bytes":
        i = 0
        while abs(v) >= 1000 and i < len(_BYTES) - 1:
            v, i = v / 1000, i + 1
        return f"{v:.3g} {_BYTES[i]}"
    if unit == "s":
        if v >= 3600:
            return f"{v / 3600:.3g} h"
        if v >= 60:
            return f"{v / 60:.3g} min"
        return f"{v:.3g} s" if v >= 1 or v == 0 else f"{v * 1000:.3g} ms"
    if unit == "ops":
        return f"{v:.3g} ops/s"
    return f"{v:.3g}"


def render_png(dashboard: Mapping[str, Any],
               lines: Mapping[str, Sequence[tuple[str, Sequence[tuple[float, float]]]]],
               out: Path, *, end_seconds: float, marks: Iterable[tuple[float, str]] = ()
               ) -> dict[str, tuple[float, float]]:
    """The dashboard as one PNG: each panel at its gridPos (24 columns, rows of 30 px per
    grid unit), dark as Grafana's default theme, the legend under the graph with the last
    and max values (the panel's ``calcs``), the red threshold dashed. ``marks``: moments to
    annotate on every panel (seconds, text), as Grafana's annotations. Returns each panel's
    y range as drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    panels = dashboard["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    unit_px, width_px = 30, 1600
    fig = plt.figure(figsize=(width_px / 100, (rows * unit_px + 60) / 100), dpi=100,
                     facecolor="#111217")
    fig.suptitle(dashboard["title"], color="#d8d9da", x=0.01, ha="left", fontsize=13)
    top = 1 - 50 / (rows * unit_px + 60)
    limits: dict[str, tuple[float, float]] = {}
    for p in panels:
        g = p["gridPos"]
        x0, w = g["x"] / 24, g["w"] / 24
        y_top = top - g["y"] * unit_px / (rows * unit_px + 60)
        h = g["h"] * unit_px / (rows * unit_px + 60)
        ax = fig.add_axes((x0 + 0.035, y_top - h * 0.62, w - 0.045, h * 0.5),
                          facecolor="#181b1f")
        unit = p["fieldConfig"]["defaults"]["unit"]
        ax.set_title(p["title"], color="#d8d9da", fontsize=10, loc="left")
        ax.tick_params(colors="#8e8e8e", labelsize=7)
        for side in ax.spines.values():
            side.set_color("#2c3235")
        ax.grid(color="#2c3235", linewidth=0.5)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p, u=unit: _format(u, v)))
        ax.xaxis.set_major_formatter(FuncFormatter(
            lambda v, _p: f"{int(v) // 60}:{int(v) % 60:02d}"))
        ax.set_xlim(0, end_seconds)
        table = []
        for name, points in lines.get(p["title"], []):
            if not points:
                continue
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, linewidth=1.4, label=name)
            table.append(f"{name or '(no labels)'}   last {_format(unit, ys[-1])}   "
                         f"max {_format(unit, max(ys))}")
        ax.set_ylim(bottom=0, top=None if table else 1)  # min 0, as the panel says; max: auto
        limits[p["title"]] = ax.get_ylim()
        for step in p["fieldConfig"]["defaults"]["thresholds"]["steps"]:
            if step["color"] == "red" and step["value"] is not None:
                ax.axhline(step["value"], color="#f2495c", linestyle="--", linewidth=0.8)
        for at, text in marks:
            ax.axvline(at, color="#8ab8ff", linewidth=0.6, alpha=0.7)
            ax.text(at, 1.0, f" {text}", transform=ax.get_xaxis_transform(), color="#8ab8ff",
                    fontsize=6, va="top")
        if not table:
            ax.text(0.5, 0.5, "No data", transform=ax.transAxes, ha="center",
                    color="#8e8e8e")
        fig.text(x0 + 0.035, y_top - h * 0.7, "\n".join(table[:5]) + (
            f"\n… and {len(table) - 5} more" if len(table) > 5 else ""),
            color="#c7d0d9", fontsize=6.5, va="top", family="monospace")
        if table:
            ax.legend(fontsize=6, loc="upper right", facecolor="#181b1f",
                      labelcolor="#c7d0d9", edgecolor="#2c3235")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, facecolor=fig.get_facecolor())
    plt.close(fig)
    return limits
