"""The operator's Prometheus metrics (`operator run --metrics URL`).

What a platform team alerts on, read where it already lives rather than kept twice:

- each operation's phase, bytes left and ETA come from the statuses kopf watches (one kopf
  index per kind: kopf keeps it current, deletions included), so a scrape says what
  `kubectl get` says. kopf's peering stops a standby's watches, so a standby shows what it
  saw when it last acted, or nothing if it never did;
- reconcile errors are counted where every pass ends (``handlers.common.publish``), when it
  ends Degraded;
- the API server's answer times are taken around kopf's own request function, which every
  call of the operator goes through (kopf's patches, watches and ``handlers/kube.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from kraftsman.cli_errors import UsageError

INDEX_PREFIX = "metrics_"
PENDING = "Pending"  # the phase of a resource no pass has written yet

# Process-wide: a pass that records an error, and the API server's answers, happen in
# whichever operator of the process; one operator runs per process outside the tests.
RECONCILE_ERRORS = Counter(
    "kraftsman_reconcile_errors_total",
    "Reconcile passes that recorded an error (Degraded=True), by kind and reason.",
    ["kind", "reason"], registry=None)
API_SECONDS = Histogram(
    "kraftsman_api_request_duration_seconds",
    "Time until the Kubernetes API server answered a request of the operator (headers; "
    "a watch counts until its stream opens), by verb.",
    ["verb"], registry=None,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))


@dataclass(frozen=True)
class Operation:
    """What the metrics show of one resource."""

    phase: str
    bytes_left: int | None = None
    eta_seconds: float | None = None
    degraded: str | None = None  # the reason of Degraded=True
    stalled: int | None = None  # moves in flight that copy nothing (PartitionReassignment)


def operation(status: Mapping[str, Any] | None) -> Operation:
    """One resource's figures from its status as stored (camelCase, maybe partial)."""
    st = status or {}
    phase = st.get("phase") or PENDING
    to_move, moved = st.get("bytesToMove"), st.get("bytesMoved")
    left = None
    if isinstance(to_move, int) and to_move > 0:
        left = max(0, to_move - (moved if isinstance(moved, int) else 0))
    eta = st.get("etaSeconds")
    degraded = next((str(c.get("reason") or "Unknown") for c in st.get("conditions") or []
                     if isinstance(c, Mapping) and c.get("type") == "Degraded"
                     and c.get("status") == "True"), None)
    stalled = st.get("stalledMoves")
    return Operation(str(phase), left, float(eta) if isinstance(eta, int | float) else None,
                     degraded, stalled if isinstance(stalled, int) else None)


def index_id(kind: str) -> str:
    return INDEX_PREFIX + kind


class OperationsCollector(Collector):
    """Renders the kopf indexes of every kind at scrape time."""

    def __init__(self, indexes: Callable[[], Mapping[str, Mapping[Any, Any]]]) -> None:
        self._indexes = indexes

    def collect(self) -> Iterator[GaugeMetricFamily]:
        phases = GaugeMetricFamily("kraftsman_operations",
                                   "Resources of kraftsman.io by kind and status phase.",
                                   labels=["kind", "phase"])
        left = GaugeMetricFamily("kraftsman_operation_bytes_left",
                                 "Bytes an operation still copies (bytesToMove - bytesMoved).",
                                 labels=["kind", "namespace", "name"])
        eta = GaugeMetricFamily("kraftsman_operation_eta_seconds",
                                "Estimated seconds an operation still takes (its status).",
                                labels=["kind", "namespace", "name"])
        stalled = GaugeMetricFamily("kraftsman_operation_stalled_moves",
                                    "Moves in flight whose adding replicas copied nothing for "
                                    "spec.stalledAfterSeconds (condition Stalled).",
                                    labels=["kind", "namespace", "name"])
        degraded = GaugeMetricFamily("kraftsman_operations_degraded",
                                     "Resources whose Degraded condition is True, by kind and "
                                     "reason.", labels=["kind", "reason"])
        for kind, index in sorted(self._indexes().items()):
            counts: dict[str, int] = {}
            reasons: dict[str, int] = {}
            for (namespace, name), ops in sorted(index.items()):
                for op in ops:
                    counts[op.phase] = counts.get(op.phase, 0) + 1
                    if op.degraded is not None:
                        reasons[op.degraded] = reasons.get(op.degraded, 0) + 1
                    if op.bytes_left is not None:
                        left.add_metric([kind, namespace, name], op.bytes_left)
                    if op.eta_seconds is not None:
                        eta.add_metric([kind, namespace, name], op.eta_seconds)
                    if op.stalled is not None:
                        stalled.add_metric([kind, namespace, name], op.stalled)
            for phase, n in sorted(counts.items()):
                phases.add_metric([kind, phase], n)
            for reason, n in sorted(reasons.items()):
                degraded.add_metric([kind, reason], n)
        yield phases
        yield degraded
        yield left
        yield eta
        yield stalled


def make_registry(indexes: Callable[[], Mapping[str, Mapping[Any, Any]]]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(OperationsCollector(indexes))
    registry.register(RECONCILE_ERRORS)
    registry.register(API_SECONDS)
    return registry


def count_error(kind: str, reason: str) -> None:
    RECONCILE_ERRORS.labels(kind=kind, reason=reason).inc()


def verb(method: str, url: str) -> str:
    """A watch is a GET with watch=true; it is told apart (its answer is a stream)."""
    m = method.lower()
    return "watch" if m == "get" and "watch=true" in url else m


def time_requests(module: Any) -> None:
    """Time every call of ``module.request`` (kopf's authenticated request); once per process."""
    original = module.request
    if getattr(original, "_kraftsman_timed", False):
        return

    async def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        try:
            return await original(method, url, *args, **kwargs)
        finally:
            API_SECONDS.labels(verb=verb(method, url)).observe(time.monotonic() - start)

    request._kraftsman_timed = True  # type: ignore[attr-defined]
    module.request = request


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    path: str


def parse_endpoint(url: str, option: str = "--metrics",
                   example: str = "http://0.0.0.0:9090/metrics") -> Endpoint:
    """``--metrics`` (or kopf's ``--liveness``) ``http://HOST:PORT/PATH``, refused with what
    to write instead: kopf would fail on a bad liveness URL with a traceback, after starting."""
    fix = f"write it as {example}"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise UsageError(f"{option} {url}: {e}; {fix}") from None
    if parts.scheme != "http" or not parts.hostname or port is None:
        raise UsageError(f"{option} {url}: expected http://HOST:PORT/PATH; {fix}")
    if port == 0:
        raise UsageError(f"{option} {url}: port 0 is not a port to scrape; {fix}")
    return Endpoint(parts.hostname, port, parts.path or urlsplit(example).path)


def parse_liveness(url: str) -> Endpoint:
    return parse_endpoint(url, "--liveness", "http://0.0.0.0:8080/healthz")


def check_apart(endpoint: Endpoint, liveness: Endpoint) -> None:
    """kopf's liveness endpoint binds after the metrics: on the same port it would fail with
    kopf's traceback, so the clash is refused here."""
    if liveness.port == endpoint.port:
        raise UsageError(f"--metrics and --liveness both use port {endpoint.port}: give the "
                         "metrics another port (the chart's metrics.port, 9090 by default)")


class MetricsServer:
    """`/metrics` served from kopf's event loop (the indexes change only in that loop, so a
    scrape never reads one mid-update). Started before kopf, so a port that cannot be bound
    is one clear error and an exit, not a retried startup handler."""

    def __init__(self, endpoint: Endpoint, registry: CollectorRegistry) -> None:
        self.endpoint, self.registry = endpoint, registry
        self._runner: Any = None

    async def start(self) -> None:
        from aiohttp import web

        async def scrape(_: web.Request) -> web.Response:
            return web.Response(body=generate_latest(self.registry),
                                headers={"Content-Type": "text/plain; version=0.0.4; "
                                                         "charset=utf-8"})

        app = web.Application()
        app.router.add_get(self.endpoint.path, scrape)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.endpoint.host, self.endpoint.port)
        try:
            await site.start()
        except OSError as e:
            await runner.cleanup()
            raise UsageError(f"--metrics http://{self.endpoint.host}:{self.endpoint.port}"
                             f"{self.endpoint.path}: cannot listen ({e.strerror}); free the "
                             "port or choose another one") from None
        self._runner = runner

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
