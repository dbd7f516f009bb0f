"""report.png: one readable picture whatever the broker count, no empty panels."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller_core.planning.goals import Goal
from controller_core.planning.objective import DISK, NET_IN, NET_OUT, compute_targets
from controller_core.planning.report import chart_figure, chart_panels, markdown, write_chart
from controller_core.planning.result import PlanResult
from controller_core.planning.snapshot import Broker


def result(n: int, rates: bool) -> PlanResult:
    brokers = [Broker(b, "abc"[b % 3], 10**12, 1e8, 1e8) for b in range(n)]
    before = {b: [100 + b, 30, (100 + 3 * b) * 10**9, 10**6 * rates, 2 * 10**6 * rates]
              for b in range(n)}
    before[n - 1] = [0, 0, 0, 0, 0]  # the added broker
    after = {b: [100, 30, 100 * 10**9, 10**6 * rates, 2 * 10**6 * rates] for b in range(n)}
    totals = [float(sum(v[m] for v in after.values())) for m in range(5)]
    targets = compute_targets(brokers, set(range(n)), totals)
    return PlanResult(Goal("add-brokers", (n - 1,)), 0, brokers, set(range(n)), [], before,
                      after, targets, 10 * n)


@pytest.mark.parametrize(("n", "unit"), [(6, "GB"), (1000, "TB")])
def test_the_picture_has_one_size_and_a_panel_per_metric_with_data(tmp_path: Path, n: int,
                                                                   unit: str) -> None:
    pytest.importorskip("matplotlib")
    res = result(n, rates=False)
    # no traffic in the snapshot (an embedded cluster without producers): no bytes panels
    panels = chart_panels(res)
    assert [m for m, _, _ in panels] == [DISK, 0, 1]
    assert panels[0][1] == f"disk ({unit})"  # decimal, as report.md writes bytes
    assert f" {unit} →" in markdown(res, [], None, "demo")
    write_chart(tmp_path / "r.png", res)
    png = (tmp_path / "r.png").read_bytes()
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (1280, 780)

    with_rates = chart_panels(result(n, rates=True))
    assert [m for m, _, _ in with_rates][-1] == NET_IN and NET_OUT not in \
        [m for m, _, _ in with_rates]
    assert with_rates[-1][1] == "bytes in (MB/s)"


def test_outlier_labels_stay_inside_their_panel() -> None:
    """At 1,000 brokers the label of the outliers at the top of a curve was drawn across the
    panel's frame, into the title."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    res = result(1000, rates=True)
    res.loads_after = {b: list(v) for b, v in res.loads_before.items()}  # nothing balanced
    fig = chart_figure(res)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        labels = 0
        for ax in fig.axes:
            frame = ax.get_window_extent(renderer)
            for text in ax.texts:
                box = text.get_window_extent(renderer)
                labels += 1
                assert frame.y0 <= box.y0 and box.y1 <= frame.y1, (ax.get_title(), text)
        assert labels >= 4
    finally:
        plt.close(fig)


def test_report_says_where_the_figures_come_from_or_that_nobody_recorded_it() -> None:
    res = result(6, rates=False)
    md = markdown(res, [], None, "demo")
    assert "## Where the figures come from\n\nNot recorded: the snapshot's snapshot.json has " \
        "no `sources`" in md
    res.sources = {"sizeBytes": "DescribeLogDirs (the leader's partition size)",
                   "custom": "a tool of ours"}
    md = markdown(res, [], None, "demo")
    assert "- replica sizes (disk): DescribeLogDirs (the leader's partition size)\n" \
        "- custom: a tool of ours\n" in md
