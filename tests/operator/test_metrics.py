"""The operator's Prometheus metrics (kraftsman/metrics.py): the figures read from the
statuses, the counters, the endpoint's bad input — and the shipped operator (the chart's
command and args, a subprocess against kmock) scraped during a move, each figure checked
against the status it comes from."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from deployed import from_chart
from harness import Api, cond_is
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from test_operator_kmock import MOVES, REF, ready_cluster

from kraftsman import metrics
from kraftsman.cli_errors import UsageError

BIN = Path(sys.executable).parent / "kraftsman"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(got: Samples, metric: str, **labels: str) -> float | None:
    return got.get((metric, tuple(sorted(labels.items()))))


# -- the figures of one status -----------------------------------------------------------------

def test_a_status_gives_phase_bytes_left_eta_and_the_degraded_reason() -> None:
    assert metrics.operation(None) == metrics.Operation("Pending")
    assert metrics.operation({"phase": "Running", "bytesToMove": 900, "bytesMoved": 300,
                              "etaSeconds": 12.5}) == metrics.Operation("Running", 600, 12.5)
    assert metrics.operation({"phase": "Moving", "stalledMoves": 2}).stalled == 2
    # a status written before any byte moved, and one whose sizes are unknown
    assert metrics.operation({"phase": "Running", "bytesToMove": 900}).bytes_left == 900
    assert metrics.operation({"phase": "Running", "bytesToMove": 0}).bytes_left is None
    assert metrics.operation({"bytesToMove": 5, "bytesMoved": 9}).bytes_left == 0
    degraded = metrics.operation({"phase": "Pending", "conditions": [
        {"type": "Ready", "status": "False", "reason": "Waiting"},
        {"type": "Degraded", "status": "True", "reason": "UnknownCluster"}]})
    assert degraded.degraded == "UnknownCluster"
    assert metrics.operation({"conditions": [
        {"type": "Degraded", "status": "False", "reason": "AsExpected"}]}).degraded is None


def test_a_scrape_counts_phases_per_kind_and_lists_bytes_left_and_eta() -> None:
    pr = {("ns", "a"): [metrics.Operation("Running", 600, 30.0, stalled=3)],
          ("ns", "b"): [metrics.Operation("Running", 0, 0.0)],
          ("ns", "c"): [metrics.Operation("Pending", degraded="UnknownCluster")]}
    le = {("ns", "e"): [metrics.Operation("Completed")]}
    got = samples(generate_latest(metrics.make_registry(
        lambda: {"PartitionReassignment": pr, "LeaderElection": le, "KafkaQuorum": {}}))
        .decode())
    kind = "PartitionReassignment"
    assert value(got, "kraftsman_operations", kind=kind, phase="Running") == 2
    assert value(got, "kraftsman_operations", kind=kind, phase="Pending") == 1
    assert value(got, "kraftsman_operations", kind="LeaderElection", phase="Completed") == 1
    assert value(got, "kraftsman_operations_degraded", kind=kind, reason="UnknownCluster") == 1
    assert value(got, "kraftsman_operation_bytes_left", kind=kind, namespace="ns",
                 name="a") == 600
    assert value(got, "kraftsman_operation_bytes_left", kind=kind, namespace="ns",
                 name="b") == 0
    assert value(got, "kraftsman_operation_eta_seconds", kind=kind, namespace="ns",
                 name="a") == 30
    assert value(got, "kraftsman_operation_stalled_moves", kind=kind, namespace="ns",
                 name="a") == 3
    assert value(got, "kraftsman_operation_stalled_moves", kind=kind, namespace="ns",
                 name="b") is None
    assert value(got, "kraftsman_operation_bytes_left", kind=kind, namespace="ns",
                 name="c") is None
    assert not any(name == "kraftsman_operations" and dict(labels).get("kind") == "KafkaQuorum"
                   for name, labels in got)


# -- the counters ------------------------------------------------------------------------------

def test_a_pass_recording_an_error_is_counted_by_kind_and_reason() -> None:
    import kopf

    from kraftsman.handlers.common import degrade, healthy, publish
    from kraftsman.status import LeaderElectionStatus

    def count() -> float:
        return metrics.RECONCILE_ERRORS.labels(kind="LeaderElection",
                                               reason="ProbeReason")._value.get()

    before = count()
    for _ in range(2):  # two passes that end Degraded
        st = LeaderElectionStatus()
        degrade(st, "ProbeReason", "a test's error", 1)
        publish(kopf.Patch(), {}, st, 1)
    assert count() == before + 2
    st = LeaderElectionStatus()
    degrade(st, "ProbeReason", "a test's error", 1)
    publish(kopf.Patch(), {}, st, 1, early=True)  # the same pass writes again: counted there
    healthy(st, 1)
    publish(kopf.Patch(), {}, st, 1)  # the error is over by the pass's end
    assert count() == before + 2


async def test_requests_are_timed_by_verb_once_however_often_timing_is_installed() -> None:
    calls: list[tuple[str, str]] = []

    async def request(method: str, url: str, **_: Any) -> str:
        calls.append((method, url))
        await asyncio.sleep(0)
        return "answer"

    module = SimpleNamespace(request=request)
    metrics.time_requests(module)
    metrics.time_requests(module)  # a second operator in the process: not timed twice

    def observed(verb: str) -> float:
        return next((s.value for f in metrics.API_SECONDS.collect() for s in f.samples
                     if s.name.endswith("_count") and s.labels == {"verb": verb}), 0.0)

    before = (observed("patch"), observed("watch"))
    assert await module.request("PATCH", "/apis/x") == "answer"
    assert await module.request("get", "/apis/x?watch=true&resourceVersion=1") == "answer"
    assert calls == [("PATCH", "/apis/x"), ("get", "/apis/x?watch=true&resourceVersion=1")]
    assert (observed("patch"), observed("watch")) == (before[0] + 1, before[1] + 1)
    assert metrics.verb("GET", "/api/v1/namespaces/x/configmaps") == "get"


# -- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("url, words", [
    ("https://0.0.0.0:9090/metrics", "expected http://HOST:PORT/PATH"),
    ("http://0.0.0.0/metrics", "expected http://HOST:PORT/PATH"),
    ("0.0.0.0:9090", "expected http://HOST:PORT/PATH"),
    ("http://0.0.0.0:99999/metrics", "out of range"),
    ("http://0.0.0.0:0/metrics", "port 0"),
])
def test_a_bad_metrics_url_is_refused_naming_the_option_and_the_fix(url: str,
                                                                     words: str) -> None:
    with pytest.raises(UsageError) as e:
        metrics.parse_endpoint(url)
    assert str(e.value).startswith(f"--metrics {url}: ") and words in str(e.value)
    assert "http://0.0.0.0:9090/metrics" in str(e.value)


def test_an_endpoint_without_a_path_serves_slash_metrics() -> None:
    assert metrics.parse_endpoint("http://127.0.0.1:9100") == metrics.Endpoint(
        "127.0.0.1", 9100, "/metrics")


def run_operator(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN), "operator", "run", "--standalone",
                           f"--state-dir={tmp_path / 'state'}", *args], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                               "KUBECONFIG": str(tmp_path / "nowhere")})


def test_the_shipped_operator_refuses_a_bad_metrics_url_and_a_clash_with_liveness(
        tmp_path: Path) -> None:
    bad = run_operator(tmp_path, "--metrics=ftp://0.0.0.0:9090/metrics")
    assert bad.returncode == 2, bad
    assert "--metrics ftp://0.0.0.0:9090/metrics: expected http://HOST:PORT/PATH" in bad.stderr
    clash = run_operator(tmp_path, "--metrics=http://127.0.0.1:18080/metrics",
                         "--liveness=http://127.0.0.1:18080/healthz")
    assert clash.returncode == 2, clash
    assert "--metrics and --liveness both use port 18080" in clash.stderr
    # kopf would start, then fail on its own liveness URL with a traceback
    live = run_operator(tmp_path, "--liveness=http://0.0.0.0:abc/healthz")
    assert live.returncode == 2, live
    assert "--liveness http://0.0.0.0:abc/healthz: Port could not be cast" in live.stderr
    assert "write it as http://0.0.0.0:8080/healthz" in live.stderr
    for r in (bad, clash, live):
        assert "Traceback" not in r.stderr


@pytest.mark.parametrize("url", ["http://0.0.0.0/healthz", "tcp://0.0.0.0:8080/healthz"])
def test_a_liveness_url_kopf_could_not_serve_is_refused(url: str) -> None:
    with pytest.raises(UsageError, match=f"^--liveness {url}: expected http://HOST:PORT/PATH"):
        metrics.parse_liveness(url)
    assert metrics.parse_liveness("http://0.0.0.0:8080").path == "/healthz"


def test_the_shipped_operator_says_when_the_metrics_port_is_taken(tmp_path: Path,
                                                                  kubeconfig: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run([str(BIN), "operator", "run", "--standalone",
                            f"--state-dir={tmp_path / 'state'}",
                            f"--metrics=http://127.0.0.1:{port}/metrics"],
                           capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL,
                           env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                "KUBECONFIG": str(kubeconfig)})
    assert r.returncode == 2, r
    assert f"--metrics http://127.0.0.1:{port}/metrics: cannot listen" in r.stderr
    assert "free the port or choose another one" in r.stderr and "Traceback" not in r.stderr


# -- the shipped operator, scraped during a move -----------------------------------------------

async def scrape(url: str) -> Samples:
    async with aiohttp.ClientSession() as session, session.get(url) as r:
        assert r.status == 200, await r.text()
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return samples(await r.text())


async def test_the_deployed_operator_serves_what_the_statuses_say_during_a_move(
        api: Api, deployed: Any) -> None:
    """Scraped while a move is under way (paused after its first partitions, so its status
    holds still): every figure equals the status it comes from, read before and after the
    scrape (the scrape reads kopf's index, which follows the watch a moment after a write);
    then completed, a resource Degraded, and both deleted."""
    op = await deployed(from_chart(extra_args=["--tick=0.2", "--time-scale=10"]))
    await ready_cluster(api)
    kind = "PartitionReassignment"
    await api.create(kind, "move", {**REF, "partitions": MOVES, "maxConcurrentMoves": 1,
                                    "throttleBytesPerSecond": 20_000_000})
    await api.create(kind, "lost", {"clusterRef": {"name": "nowhere"}, "partitions": MOVES[:1]})
    await api.wait(kind, "move", lambda o: (o.get("status") or {}).get("done", 0) >= 1)
    await api.patch(kind, "move", {"spec": {"paused": True}})
    await api.wait(kind, "move", lambda o: (o.get("status") or {}).get("moving") == 0
                   and o["status"].get("observedGeneration") == 2)
    got: Samples = {}
    before: dict[str, Any] = {}
    for _ in range(100):
        before = (await api.get(kind, "move") or {}).get("status") or {}
        got = await scrape(op.metrics_url)
        after = (await api.get(kind, "move") or {}).get("status") or {}
        left = value(got, "kraftsman_operation_bytes_left", kind=kind, namespace="default",
                     name="move")
        if before == after and left == before["bytesToMove"] - before["bytesMoved"]:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"no scrape agreed with the status: {before} / {got}")
    assert before["bytesToMove"] > left > 0  # type: ignore[operator]
    assert value(got, "kraftsman_operation_eta_seconds", kind=kind, namespace="default",
                 name="move") == before.get("etaSeconds")
    assert value(got, "kraftsman_operations", kind=kind, phase=before["phase"]) == 1
    await api.patch(kind, "move", {"spec": {"paused": False}})
    await api.wait(kind, "move", cond_is("Succeeded", "True"), timeout=120)
    lost = await api.wait(kind, "lost", cond_is("Degraded", "True", "UnknownCluster"))
    for _ in range(100):  # the index follows the watch
        got = await scrape(op.metrics_url)
        if value(got, "kraftsman_operations", kind=kind, phase="Completed") == 1:
            break
        await asyncio.sleep(0.1)
    assert value(got, "kraftsman_operations", kind=kind, phase="Completed") == 1
    assert value(got, "kraftsman_operations", kind=kind,
                 phase=lost["status"].get("phase") or "Pending") == 1
    assert value(got, "kraftsman_operations", kind="KafkaCluster", phase="Ready") == 1
    assert value(got, "kraftsman_operations_degraded", kind=kind, reason="UnknownCluster") == 1
    assert (value(got, "kraftsman_reconcile_errors_total", kind=kind,
                  reason="UnknownCluster") or 0) >= 1
    assert value(got, "kraftsman_operation_bytes_left", kind=kind, namespace="default",
                 name="move") == 0
    for verb in ("patch", "watch"):
        assert (value(got, "kraftsman_api_request_duration_seconds_count", verb=verb) or 0) > 0
    await api.delete(kind, "move")
    await api.delete(kind, "lost")
    for _ in range(200):
        got = await scrape(op.metrics_url)
        if value(got, "kraftsman_operation_bytes_left", kind=kind, namespace="default",
                 name="move") is None and not any(
                name == "kraftsman_operations" and dict(labels).get("kind") == kind
                for name, labels in got):
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"deleted resources still in the metrics: {got}")
    assert op.alive() and "Traceback" not in op.log()
