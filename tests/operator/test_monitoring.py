"""The Grafana dashboard and the alerting rules (kraftsman/monitoring.py): every query is
PromQL (parsed by promql-parser, a port of Prometheus' own parser), reads only series the
operator serves, and each legend names only labels its query keeps — so a renamed metric or
label breaks a test, not a user's dashboard or alert."""

from __future__ import annotations

import json
import re
from typing import Any

import promql_parser as promql
import pytest

from kraftsman import metrics, monitoring

SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def served() -> dict[str, set[str]]:
    """Series name -> its labels, of every family the operator's /metrics serves (the
    counter and the histogram have no sample until used: their declared labels count)."""
    op = metrics.Operation("Running", 600, 12.0, degraded="X", stalled=1)
    registry = metrics.make_registry(lambda: {"PartitionReassignment": {("ns", "a"): [op]}})
    declared = {"kraftsman_reconcile_errors": metrics.RECONCILE_ERRORS._labelnames,
                "kraftsman_api_request_duration_seconds": metrics.API_SECONDS._labelnames}
    out: dict[str, set[str]] = {}
    for family in registry.collect():
        labels = {k for s in family.samples for k in s.labels if k != "le"}
        labels |= set(declared.get(family.name, ()))
        for suffix in SUFFIXES[family.type]:
            out[family.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return out


def selectors(node: Any) -> list[str]:
    if isinstance(node, promql.VectorSelector):
        return [node.name]
    found = []
    for attr in ("expr", "lhs", "rhs", "vector_selector", "param"):
        child = getattr(node, attr, None)
        if child is not None and not isinstance(child, int | float | str):
            found += selectors(child)
    for arg in getattr(node, "args", None) or ():
        found += selectors(arg)
    return found


def kept(node: Any, series: dict[str, set[str]]) -> set[str]:
    """The labels the query's result keeps."""
    if isinstance(node, promql.AggregateExpr):
        inner = kept(node.expr, series)
        if node.modifier is None:
            return set()
        if node.modifier.type == promql.AggModifierType.By:
            return inner & set(node.modifier.labels)
        return inner - set(node.modifier.labels)
    if isinstance(node, promql.Call) and node.func.name == "histogram_quantile":
        return kept(node.args[1], series) - {"le"}
    names = selectors(node)
    return set.intersection(*(series[n] for n in names)) if names else set()


TARGETS = [(p["title"], t) for p in monitoring.dashboard()["panels"] for t in p["targets"]]


@pytest.mark.parametrize("title, target", TARGETS, ids=[f"{t}-{x['refId']}" for t, x in TARGETS])
def test_each_query_reads_served_series_and_its_legend_names_labels_it_keeps(
        title: str, target: dict[str, Any]) -> None:
    series = served()
    tree = promql.parse(target["expr"])
    names = selectors(tree)
    assert names, f"{title}: reads no series"
    assert set(names) <= set(series), f"{title}: {set(names) - set(series)} not served"
    legend = set(re.findall(r"\{\{(\w+)\}\}", target["legendFormat"]))
    assert legend <= kept(tree, series), f"{title}: legend {legend} vs {kept(tree, series)}"


def test_every_family_the_operator_serves_is_on_the_dashboard() -> None:
    def family(series: str) -> str:
        return re.sub(r"_(bucket|count|sum|total)$", "", series)

    read = {family(n) for e in monitoring.expressions() for n in selectors(promql.parse(e))}
    assert read == {family(n) for n in served()}


def test_a_query_on_a_metric_that_is_not_served_is_caught() -> None:
    """The check itself: a renamed metric is seen."""
    assert not {"kraftsman_operation_bytes_remaining"} <= set(served())
    tree = promql.parse("max without (pod) (kraftsman_operation_bytes_left)")
    assert kept(tree, served()) == {"kind", "namespace", "name"}
    assert kept(promql.parse("sum by (kind) (kraftsman_operations)"), served()) == {"kind"}


def test_the_panels_tile_the_grid_without_overlap_and_have_unique_ids() -> None:
    board = monitoring.dashboard()
    json.dumps(board)  # serialisable
    cells: set[tuple[int, int]] = set()
    for p in board["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, p["title"]
        cells |= mine
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
