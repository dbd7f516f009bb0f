"""The Grafana dashboard and the alerting rules (kraftsman/monitoring.py): every query is
PromQL (parsed by promql-parser, a port of Prometheus' own parser), reads only series the
operator serves, and each legend names only labels its query keeps — so a renamed metric or
label breaks a test, not a user's dashboard or alert."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
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


# -- Prometheus' own engine -----------------------------------------------------------------
# The scripts below are in Prometheus' promqltest language: `load` the series the operator
# serves (two pods: the active one, and a standby with older figures), `eval` each query of
# the dashboard and of the alerts, and the result Prometheus must give. tools/promql runs
# them on Prometheus' query engine (built by tools/build-promql-check; .ci/run builds it).

ROOT = Path(__file__).resolve().parents[2]
ACTIVE = 'pod="kraftsman-a",instance="10.0.0.1:9090"'
STANDBY = 'pod="kraftsman-b",instance="10.0.0.2:9090"'
PR = 'kind="PartitionReassignment"'
MOVE = f'{PR},namespace="kafka",name="move"'


def panel(title: str, ref: str = "A") -> str:
    (p,) = [p for p in monitoring.dashboard()["panels"] if p["title"] == title]
    return str(next(t["expr"] for t in p["targets"] if t["refId"] == ref))


def alert(name: str) -> str:
    (a,) = [a for a in monitoring.ALERTS if a.name == name]
    return a.expr


def buckets(verb: str, le_all: float, per_minute: int, who: str = ACTIVE) -> list[str]:
    """A histogram of the operator's API answer times whose every answer took at most
    ``le_all`` (the smallest bucket that holds them all)."""
    lines = []
    for le in [*metrics.API_SECONDS._upper_bounds]:
        name = "+Inf" if le == float("inf") else f"{le:g}"
        grows = le >= le_all
        lines.append(f'kraftsman_api_request_duration_seconds_bucket{{verb="{verb}",le="{name}",'
                     f'{who}}} ' + (f"0+{per_minute}x10" if grows else "0x10"))
    return lines


def dashboard_series() -> list[str]:
    return [
        f'kraftsman_operations{{{PR},phase="Running",{ACTIVE}}} 2x10',
        f'kraftsman_operations{{{PR},phase="Running",{STANDBY}}} 1x10',
        f'kraftsman_operations_degraded{{kind="LeaderElection",reason="UnknownCluster",{ACTIVE}}}'
        " 1x10",
        f"kraftsman_operation_stalled_moves{{{MOVE},{ACTIVE}}} 0 0 2x8",
        f"kraftsman_operation_stalled_moves{{{MOVE},{STANDBY}}} 1x10",
        f"kraftsman_operation_bytes_left{{{MOVE},{ACTIVE}}} 1000-100x10",
        f"kraftsman_operation_eta_seconds{{{MOVE},{ACTIVE}}} 600-60x10",
        f'kraftsman_reconcile_errors_total{{kind="LeaderElection",reason="UnknownCluster",'
        f"{ACTIVE}}} 0+6x10",
        *buckets("patch", 0.1, 60),
    ]


def dashboard_script() -> str:
    evals = [
        (panel("Operations by phase"), f'{{{PR},phase="Running"}} 2'),
        (panel("Degraded operations"), '{kind="LeaderElection",reason="UnknownCluster"} 1'),
        (panel("Stalled moves"), f"{{{MOVE}}} 2"),
        (panel("Bytes left to copy"), f"{{{MOVE}}} 200"),  # 1000 - 8 x 100
        (panel("Estimated time left"), f"{{{MOVE}}} 120"),
        (panel("Reconcile errors"), '{kind="LeaderElection",reason="UnknownCluster"} 0.1'),
        # every answer in (0.05, 0.1]: Prometheus interpolates linearly inside the bucket
        (panel("Kubernetes API answer time", "A"), '{verb="patch"} 0.075'),
        (panel("Kubernetes API answer time", "B"), '{verb="patch"} 0.0995'),
    ]
    return script(dashboard_series(), evals)


def alerts_script() -> str:
    series = [
        f"kraftsman_operation_stalled_moves{{{MOVE},{ACTIVE}}} 0 0 0 0 0 2x5",
        f"kraftsman_operation_stalled_moves{{{MOVE},{STANDBY}}} 0x10",
        f'kraftsman_operations_degraded{{{PR},reason="UnknownCluster",{ACTIVE}}} 1x10',
        f'kraftsman_operations_degraded{{{PR},reason="UnknownCluster",{STANDBY}}} 1x10',
        *buckets("patch", 5, 60),  # every write answered in 2.5-5 s
        *buckets("watch", 30, 60, STANDBY),  # watches wait by design: never an alert
        *buckets("get", 0.05, 60),
    ]
    evals = [
        (alert("KraftsmanMoveStalled"), f"{{{MOVE}}} 2"),
        (alert("KraftsmanOperationDegraded"), f'{{{PR},reason="UnknownCluster"}} 1'),
        (alert("KraftsmanApiSlow"), '{verb="patch"} 4.975'),
    ]
    quiet = f"eval instant at 4m {alert('KraftsmanMoveStalled')}\n    expect no_info\n"
    return script(series, evals) + "\n# not stalled yet at 4m: no result\n" + quiet


def script(series: list[str], evals: list[tuple[str, str]]) -> str:
    text = "load 1m\n" + "".join(f"    {s}\n" for s in series)
    for expr, want in evals:
        text += f"\neval instant at 8m {expr}\n    {want}\n"
    return text


@pytest.fixture(scope="module")
def promql_check() -> Path:
    if shutil.which("go") is None and not list(
            (Path.home() / ".cache" / "kraftsman").glob("promql-*/promqlcheck.test")):
        why = ("Go is not installed: tools/build-promql-check cannot build Prometheus' PromQL "
               "engine (see tools/promql/go.mod)")
        if os.environ.get("CI"):
            pytest.fail(why)  # CI has Go: the check must run there
        pytest.skip(why)
    built = subprocess.run([str(ROOT / "tools" / "build-promql-check")], capture_output=True,
                           text=True, timeout=1800)
    assert built.returncode == 0, built.stderr
    return Path(built.stdout.strip().splitlines()[-1])


def run_scripts(check: Path, tmp_path: Path, scripts: dict[str, str]
                ) -> subprocess.CompletedProcess[str]:
    for name, text in scripts.items():
        (tmp_path / f"{name}.test").write_text(text)
    return subprocess.run([str(check), "-test.v"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PROMQL_SCRIPTS": str(tmp_path)})


def test_prometheus_evaluates_the_dashboard_and_the_alerts_as_expected(
        promql_check: Path, tmp_path: Path) -> None:
    done = run_scripts(promql_check, tmp_path, {"dashboard": dashboard_script(),
                                                "alerts": alerts_script()})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    passed = re.findall(r"--- PASS: TestScripts/(\w+)\.test ", done.stdout)
    assert sorted(passed) == ["alerts", "dashboard"], done.stdout
    evaluated = re.findall(r"--- PASS: TestScripts/\w+\.test/line_", done.stdout)
    assert len(evaluated) == 12, done.stdout  # every eval above ran


def test_the_prometheus_check_fails_on_a_wrong_expectation(promql_check: Path,
                                                           tmp_path: Path) -> None:
    """The checker itself: a result Prometheus does not give fails."""
    wrong = dashboard_script().replace(f"{{{MOVE}}} 200", f"{{{MOVE}}} 201")
    done = run_scripts(promql_check, tmp_path, {"dashboard": wrong})
    assert done.returncode != 0
    assert "expected 201" in done.stdout and "but got 200" in done.stdout, done.stdout[-3000:]


# -- the dashboard drawn (tests/dashboard_render.py; bench/dashboard_render.py draws a real move)

def test_the_dashboard_is_drawn_from_prometheus_range_queries(promql_check: Path,
                                                              tmp_path: Path) -> None:
    """The renderer's path from series to picture: each panel's targets are range queries
    on Prometheus' engine, their lines named by the legendFormat, at the values the instant
    checks above expect; every panel has data, and the PNG has the dashboard's size."""
    from matplotlib.image import imread

    from tests.dashboard_render import panel_series, render_png

    board = monitoring.dashboard()
    load = "load 1m\n" + "".join(f"    {s}\n" for s in dashboard_series())
    lines = panel_series(board, promql_check, tmp_path / "q", load, end_seconds=540,
                         step_seconds=60)
    assert set(lines) == {p.title for p in monitoring.PANELS}
    last = {title: {name: points[-1] for name, points in series}
            for title, series in lines.items()}
    move = "PartitionReassignment kafka/move"
    assert last["Bytes left to copy"] == {move: (540.0, 100.0)}  # 1000 - 9 x 100
    assert last["Estimated time left"] == {move: (540.0, 60.0)}
    assert last["Stalled moves"] == {move: (540.0, 2.0)}
    assert last["Operations by phase"] == {"PartitionReassignment Running": (540.0, 2.0)}
    assert last["Degraded operations"] == {"LeaderElection UnknownCluster": (540.0, 1.0)}
    assert last["Reconcile errors"] == {"LeaderElection UnknownCluster": (540.0, 0.1)}
    assert set(last["Kubernetes API answer time"]) == {"p50 patch", "p99 patch"}
    bytes_left = dict(lines["Bytes left to copy"])[move]
    assert [v for _, v in bytes_left] == [1000.0 - 100 * i for i in range(10)]
    png = tmp_path / "board.png"
    drawn = render_png(board, lines, png, end_seconds=540, marks=[(120, "broker 3 down")])
    for title, series in lines.items():  # every line inside its panel's y range
        low, high = drawn[title]
        assert low == 0 and all(v <= high for _, points in series for _, v in points), title
    height, width = imread(png).shape[:2]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in board["panels"])
    assert (width, height) == (1600, rows * 30 + 60)


def test_scrapes_become_series_marked_stale_where_a_scrape_lost_them() -> None:
    from tests.dashboard_render import load_script, samples

    first = samples('# TYPE kraftsman_operations gauge\n'
                    'kraftsman_operations{kind="K",phase="Running"} 2\n')
    second = samples('# TYPE kraftsman_operations gauge\n'
                     'kraftsman_operations{kind="K",phase="Completed"} 1\n'
                     'kraftsman_operations{kind="K",phase="Say \\"hi\\""} 3\n')
    assert load_script([first, second, {}, {}, second], 15) == (
        "load 15s\n"
        '    kraftsman_operations{kind="K",phase="Completed"} _ 1.0 stale _ 1.0\n'
        '    kraftsman_operations{kind="K",phase="Running"} 2.0 stale _ _ _\n'
        '    kraftsman_operations{kind="K",phase="Say \\"hi\\""} _ 3.0 stale _ 3.0\n')


def test_a_series_gone_from_the_scrapes_is_not_drawn_on(promql_check: Path,
                                                        tmp_path: Path) -> None:
    """As in Prometheus: a gauge the operator stopped serving (an ETA unknown while a move
    is stalled) ends where it went, instead of its last value for five more minutes."""
    from tests.dashboard_render import load_script, range_queries, samples

    eta = samples('kraftsman_operation_eta_seconds{name="m"} 50\n')
    load = load_script([eta, eta, {}, {}, {}, eta], 15)
    (series,) = range_queries(promql_check, tmp_path, load,
                              ["kraftsman_operation_eta_seconds"], end_seconds=75,
                              step_seconds=15)[0]
    assert [t for t, _ in series["values"]] == [0, 15, 75]


def test_a_query_prometheus_refuses_is_an_error_naming_it(promql_check: Path,
                                                          tmp_path: Path) -> None:
    from tests.dashboard_render import range_queries

    with pytest.raises(RuntimeError, match="sum by"):
        range_queries(promql_check, tmp_path, "load 1m\n    up 1x3\n", ["sum by (up"],
                      end_seconds=60, step_seconds=60)


# -- tools/build-promql-check: built once, rebuilt when its sources change ---------------------

def fake_go(directory: Path, log: Path) -> Path:
    """A `go` that records each call and, for `go test -c -o OUT`, writes OUT."""
    directory.mkdir(parents=True, exist_ok=True)
    go = directory / "go"
    go.write_text("#!/bin/sh\n"
                  f"echo \"$*\" >> {log}\n"
                  'while [ $# -gt 0 ]; do [ "$1" = -o ] && { shift; '
                  'printf "#!/bin/sh\\n" > "$1"; chmod +x "$1"; }; shift; done\n')
    go.chmod(0o755)
    return directory


def build_check(cache: Path, path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ROOT / "tools" / "build-promql-check")], capture_output=True,
                          text=True, timeout=60,
                          env={"PATH": path, "HOME": str(cache), "KRAFTSMAN_CACHE": str(cache)})


def test_the_promql_checker_is_built_once_and_again_when_its_sources_change(
        tmp_path: Path) -> None:
    log = tmp_path / "go.log"
    path = f"{fake_go(tmp_path / 'bin', log)}:/usr/bin:/bin"
    cache = tmp_path / "cache"
    first = build_check(cache, path)
    assert first.returncode == 0, first.stderr
    binary = Path(first.stdout.strip().splitlines()[-1])
    assert binary.is_file() and binary.parent.parent == cache
    assert log.read_text().count("test -c") == 1
    again = build_check(cache, path)
    assert again.returncode == 0 and "already built" in again.stderr
    assert log.read_text().count("test -c") == 1  # nothing rebuilt
    (binary.parent / "stamp").write_text("0000000000000000\n")  # sources changed since
    stale = build_check(cache, path)
    assert stale.returncode == 0, stale.stderr
    assert log.read_text().count("test -c") == 2 and "building the PromQL checker" in stale.stderr
    assert (binary.parent / "stamp").read_text().strip() != "0000000000000000"


def test_without_go_the_promql_checker_build_says_what_it_needs(tmp_path: Path) -> None:
    tools = tmp_path / "bin"  # what the script runs, without go wherever the machine has it
    tools.mkdir()
    for name in ("bash", "dirname", "awk", "cat", "sha256sum", "cut", "mkdir", "mktemp", "rm",
                 "mv"):
        found = shutil.which(name)
        assert found is not None, name
        (tools / name).symlink_to(found)
    done = build_check(tmp_path / "cache", str(tools))
    assert done.returncode == 2
    assert done.stderr.strip() == ("error: building the PromQL checker needs Go (see "
                                   "tools/promql/go.mod)")
