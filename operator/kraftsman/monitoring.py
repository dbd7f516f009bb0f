"""What watches the operator's metrics (kraftsman/metrics.py): a Grafana dashboard and
Prometheus alerting rules.

Generated (``kraftsman crds generate``) into the chart — a ConfigMap labelled for Grafana's
dashboard sidecar (values ``metrics.grafanaDashboard``) and a PrometheusRule (values
``metrics.prometheusRule``) — and into ``manifests/grafana/`` and ``manifests/prometheus/``
for use by hand. Every query is checked by a PromQL parser against the metric families the
operator serves (tests/operator/test_monitoring.py), so a renamed metric breaks a test, not
a user's dashboard or alert.

With two replicas both pods are scraped and only the active one watches, so the per-resource
panels take ``max`` over the pods rather than ``sum``: a standby's old figure never adds to
the active one's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

UID = "kraftsman-operations"
TITLE = "kraftsman: Kafka day-2 operations"
DS = {"type": "prometheus", "uid": "${datasource}"}
PODS = "max without (instance, pod, endpoint, service, container)"  # one figure, any pod


@dataclass(frozen=True)
class Panel:
    title: str
    exprs: tuple[tuple[str, str], ...]  # (PromQL, legend)
    unit: str = "short"
    kind: str = "timeseries"
    width: int = 12
    description: str = ""
    red_above: float | None = None  # a threshold: red at or above it


PANELS: tuple[Panel, ...] = (
    Panel("Operations by phase",
          ((f"{PODS} (kraftsman_operations)", "{{kind}} {{phase}}"),),
          description="Resources of kraftsman.io by kind and status phase (what "
                      "`kubectl get` says).", width=12),
    Panel("Degraded operations",
          ((f"{PODS} (kraftsman_operations_degraded)", "{{kind}} {{reason}}"),),
          description="Resources whose Degraded condition is True, by reason. `kubectl "
                      "describe` the resource for the field and the fix.", red_above=1),
    Panel("Stalled moves",
          ((f"{PODS} (kraftsman_operation_stalled_moves)", "{{kind}} {{namespace}}/{{name}}"),),
          description="Moves in flight that copied nothing for spec.stalledAfterSeconds "
                      "(condition Stalled): check the brokers it names and the throttle.",
          red_above=1),
    Panel("Bytes left to copy",
          ((f"{PODS} (kraftsman_operation_bytes_left)", "{{kind}} {{namespace}}/{{name}}"),),
          unit="bytes", description="bytesToMove - bytesMoved of each running operation."),
    Panel("Estimated time left",
          ((f"{PODS} (kraftsman_operation_eta_seconds)", "{{kind}} {{namespace}}/{{name}}"),),
          unit="s", description="Each running operation's status.etaSeconds, at its "
                                "throttle."),
    Panel("Reconcile errors",
          (("sum by (kind, reason) (rate(kraftsman_reconcile_errors_total[5m]))",
            "{{kind}} {{reason}}"),),
          unit="ops", description="Reconcile passes per second that ended Degraded, by "
                                  "reason.", red_above=0.001),
    Panel("Kubernetes API answer time",
          (("histogram_quantile(0.5, sum by (le, verb) "
            "(rate(kraftsman_api_request_duration_seconds_bucket[5m])))", "p50 {{verb}}"),
           ("histogram_quantile(0.99, sum by (le, verb) "
            "(rate(kraftsman_api_request_duration_seconds_bucket[5m])))", "p99 {{verb}}")),
          unit="s", width=24, description="Time until the API server answered the "
                                          "operator's requests (a watch: until its stream "
                                          "opened)."),
)


def _panel(i: int, p: Panel, x: int, y: int) -> dict[str, Any]:
    thresholds: list[dict[str, Any]] = [{"color": "green", "value": None}]
    if p.red_above is not None:
        thresholds.append({"color": "red", "value": p.red_above})
    return {
        "id": i + 1, "type": p.kind, "title": p.title, "description": p.description,
        "datasource": DS, "gridPos": {"x": x, "y": y, "w": p.width, "h": 8},
        "fieldConfig": {"defaults": {"unit": p.unit, "min": 0, "thresholds": {
            "mode": "absolute", "steps": thresholds}}, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "bottom",
                               "calcs": ["lastNotNull", "max"]},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
        "targets": [{"refId": chr(ord("A") + n), "datasource": DS, "expr": expr,
                     "legendFormat": legend} for n, (expr, legend) in enumerate(p.exprs)],
    }


def dashboard() -> dict[str, Any]:
    panels, x, y = [], 0, 0
    for i, p in enumerate(PANELS):
        if x + p.width > 24:
            x, y = 0, y + 8
        panels.append(_panel(i, p, x, y))
        x += p.width
    return {
        "uid": UID, "title": TITLE, "tags": ["kafka", "kraftsman"], "editable": True,
        "schemaVersion": 39, "version": 1, "refresh": "30s", "timezone": "browser",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [{"name": "datasource", "label": "Prometheus",
                                 "type": "datasource", "query": "prometheus"}]},
        "panels": panels,
    }


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    summary: str  # may name the series' labels as {{ $labels.x }}
    for_: str = "0m"
    severity: str = "warning"


ALERTS: tuple[Alert, ...] = (
    Alert("KraftsmanMoveStalled", f"{PODS} (kraftsman_operation_stalled_moves) > 0",
          "{{ $labels.kind }} {{ $labels.namespace }}/{{ $labels.name }}: {{ $value }} "
          "move(s) copied nothing for spec.stalledAfterSeconds; kubectl describe it for the "
          "brokers, and check them and the throttle"),
    Alert("KraftsmanOperationDegraded",
          f"sum by (kind, reason) ({PODS} (kraftsman_operations_degraded)) > 0",
          "{{ $value }} {{ $labels.kind }}(s) Degraded ({{ $labels.reason }}); kubectl "
          "describe them for the field and the fix", for_="10m"),
    Alert("KraftsmanApiSlow",
          "histogram_quantile(0.99, sum by (le, verb) "
          "(rate(kraftsman_api_request_duration_seconds_bucket{verb!=\"watch\"}[5m]))) > 2",
          "the API server answers the operator's {{ $labels.verb }} requests in over 2 s "
          "(p99)", for_="10m"),
)


def render_dashboard() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def rule_groups() -> dict[str, Any]:
    """Prometheus' rule file format; a PrometheusRule's spec is the same document."""
    return {"groups": [{"name": "kraftsman", "rules": [
        {"alert": a.name, "expr": a.expr, "for": a.for_, "labels": {"severity": a.severity},
         "annotations": {"summary": a.summary}} for a in ALERTS]}]}


def render_rules() -> str:
    return "# Generated by `kraftsman crds generate` from kraftsman/monitoring.py.\n" + \
        yaml.safe_dump(rule_groups(), sort_keys=False, width=100)


def expressions() -> list[str]:
    return [expr for p in PANELS for expr, _ in p.exprs] + [a.expr for a in ALERTS]
