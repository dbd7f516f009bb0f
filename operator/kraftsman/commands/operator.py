"""`kraftsman operator run`: the Kubernetes operator (kopf) with its embedded clusters."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from kraftsman.cli_errors import UsageError

# Kept here rather than imported: this module is imported by every CLI command, kopf is not.
PEERING_LIFETIME = 20
MIN_PEERING_LIFETIME = 15  # kopf renews 5-10 s before expiry: leave it a margin


def register(subparsers: Any) -> None:
    op = subparsers.add_parser("operator", help="the Kubernetes operator")
    sub = op.add_subparsers(dest="operator_command", metavar="ACTION")
    sub.required = True
    run = sub.add_parser("run", help="reconcile kraftsman.io resources until stopped")
    scope = run.add_mutually_exclusive_group()
    scope.add_argument("--all-namespaces", "-A", action="store_true",
                       help="watch every namespace (the default when no --namespace is given)")
    scope.add_argument("--namespace", "-n", action="append", default=[],
                       help="watch only this namespace (repeatable)")
    run.add_argument("--state-dir", type=Path, default=Path("/var/lib/kraftsman"),
                     help="volume for embedded clusters and operation state")
    peer = run.add_mutually_exclusive_group()
    peer.add_argument("--peering", metavar="NAME", default=None,
                      help="ClusterKopfPeering name: replicas never act on one resource at once")
    peer.add_argument("--standalone", action="store_true", help="no peering")
    run.add_argument("--priority", type=int, default=None,
                     help="peering priority: the highest live one acts, the others stand by "
                          "(default: derived from the start time, so the oldest replica acts "
                          "and no two replicas tie)")
    run.add_argument("--peering-lifetime", type=int, default=PEERING_LIFETIME,
                     metavar="SECONDS",
                     help="a replica that stopped renewing its peering record for this long "
                          f"is presumed dead and a standby takes over (default "
                          f"{PEERING_LIFETIME}, at least {MIN_PEERING_LIFETIME})")
    run.add_argument("--liveness", metavar="URL", default=None,
                     help="kopf health endpoint, e.g. http://0.0.0.0:8080/healthz")
    run.add_argument("--metrics", metavar="URL", default=None,
                     help="serve Prometheus metrics here, e.g. http://0.0.0.0:9090/metrics "
                          "(default: none)")
    run.add_argument("--tick", type=float, default=1.0,
                     help="seconds between reconcile passes (default 1)")
    run.add_argument("--time-scale", type=float, default=1.0,
                     help="simulated seconds of embedded clusters per wall second (default 1)")
    run.add_argument("--log-level", choices=["debug", "info", "warning"], default="info")
    run.add_argument("--kubeconfig", metavar="FILE", default=None,
                     help="log in with this kubeconfig (default: $KUBECONFIG, else the pod's "
                          "service account, else ~/.kube/config)")
    run.add_argument("--service-account-dir", type=Path, default=None,
                     help="where the pod's service account token and ca.crt are mounted "
                          "(default /var/run/secrets/kubernetes.io/serviceaccount)")
    planner = run.add_argument_group(
        "KafkaRebalance planner Jobs", "the chart sets these; the Jobs run in the operator's "
        "namespace ($POD_NAMESPACE), pinned to its node ($NODE_NAME) when they mount the state "
        "claim")
    planner.add_argument("--planner-image", metavar="IMAGE", default=None,
                         help="image of the planner Jobs (the operator's own image)")
    planner.add_argument("--planner-image-pull-policy", default="IfNotPresent",
                         choices=["Always", "IfNotPresent", "Never"])
    planner.add_argument("--planner-service-account", metavar="NAME", default=None,
                         help="ServiceAccount of the planner Jobs")
    planner.add_argument("--planner-resources", metavar="JSON", default=None,
                         help="resources of the planner Job's container, as Kubernetes JSON "
                              "(default: requests cpu 500m, memory 3Gi; limits cpu 2, memory "
                              "3Gi — Spark local mode with its 2g driver)")
    planner.add_argument("--planner-image-pull-secret", metavar="NAME", action="append",
                         default=[], help="imagePullSecrets of the planner Jobs (repeatable; "
                                          "the chart passes imagePullSecrets)")
    planner.add_argument("--planner-state-claim", metavar="CLAIM", default=None,
                         help="the state volume's PersistentVolumeClaim: planner Jobs of "
                              "embedded clusters mount it read-only (none: an emptyDir, "
                              "which no Job can mount)")
    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    import kopf

    from kraftsman.handlers import Runtime, build_registry, configure
    from kraftsman.handlers.login import SERVICE_ACCOUNT_DIR, NoCredentials, choose
    from kraftsman.handlers.runtime import default_priority

    if args.tick <= 0:
        raise UsageError(f"--tick {args.tick}: must be > 0 (seconds between passes)")
    if args.time_scale <= 0:
        raise UsageError(f"--time-scale {args.time_scale}: must be > 0")
    from kraftsman.planner_job_spec import PlannerConfig

    resources, pull_secrets, planner_problem = planner_settings(args)
    if planner_problem:
        print(f"error: {planner_problem} (KafkaRebalances report it; every other resource is "
              "served)", file=sys.stderr)
    from kraftsman import metrics

    endpoint = metrics.parse_endpoint(args.metrics) if args.metrics is not None else None
    liveness = metrics.parse_liveness(args.liveness) if args.liveness is not None else None
    if endpoint is not None and liveness is not None:
        metrics.check_apart(endpoint, liveness)
    if args.peering_lifetime < MIN_PEERING_LIFETIME:
        raise UsageError(f"--peering-lifetime {args.peering_lifetime}: must be at least "
                         f"{MIN_PEERING_LIFETIME} seconds (kopf renews the record 5-10 s "
                         "before it expires)")
    try:
        args.state_dir.mkdir(parents=True, exist_ok=True)
        # A probe file of this process only: replicas may share the volume (RWX claim).
        with tempfile.NamedTemporaryFile(dir=args.state_dir, prefix=".writable-"):
            pass
    except OSError as e:
        raise UsageError(f"--state-dir {args.state_dir}: not writable ({e.strerror}); mount a "
                         "volume there or pass another directory") from None
    try:
        login = choose(args.kubeconfig, os.environ,
                       args.service_account_dir or SERVICE_ACCOUNT_DIR)
    except NoCredentials as e:
        raise UsageError(str(e)) from None
    # kopf's own formatter: each message about a resource is prefixed with [namespace/name].
    kopf.configure(debug=args.log_level == "debug", quiet=args.log_level == "warning",
                   log_format=kopf.LogFormat.FULL, log_prefix=True)
    planner = PlannerConfig(
        image=args.planner_image, service_account=args.planner_service_account,
        namespace=os.environ.get("POD_NAMESPACE") or None, state_claim=args.planner_state_claim,
        node_name=os.environ.get("NODE_NAME") or None,
        image_pull_policy=args.planner_image_pull_policy, resources=resources,
        image_pull_secrets=pull_secrets, problem=planner_problem)
    rt = Runtime(args.state_dir, tick_seconds=args.tick, time_scale=args.time_scale,
                 planner=planner)
    registry = build_registry(rt, serve_metrics=endpoint is not None)
    login.register(registry)
    # Settings before kopf starts: the first peering keepalive already uses the lifetime.
    settings = kopf.OperatorSettings()
    configure(settings, rt)
    settings.peering.lifetime = args.peering_lifetime
    priority = args.priority if args.priority is not None else default_priority()
    if args.peering is not None:
        logging.getLogger("kraftsman").info("peering %r with priority %d", args.peering,
                                            priority)
    operator = kopf.operator(
        registry=registry, settings=settings, clusterwide=not args.namespace,
        namespaces=args.namespace, standalone=args.standalone or args.peering is None,
        peering_name=args.peering, priority=priority, liveness_endpoint=args.liveness)
    if endpoint is None:
        asyncio.run(operator)
        return 0

    async def with_metrics() -> None:
        from kopf._cogs.clients import api as kopf_api

        server = metrics.MetricsServer(endpoint, metrics.make_registry(lambda: rt.operations))
        try:
            await server.start()
        except BaseException:
            operator.close()  # never started: no "coroutine was never awaited" warning
            raise
        metrics.time_requests(kopf_api)
        try:
            await operator
        finally:
            await server.stop()

    asyncio.run(with_metrics())
    return 0


def planner_settings(args: argparse.Namespace
                     ) -> tuple[dict[str, dict[str, str]], tuple[str, ...], str | None]:
    """The planner Job's resources and pull secrets, and the problem with them if any.

    A bad planner setting spoils only KafkaRebalance proposals: the operator serves every other
    resource, and each KafkaRebalance says what to fix — no crash loop over a chart value."""
    from kraftsman.planner_job_spec import (
        DEFAULT_RESOURCES,
        PlannerConfigError,
        check_secret_names,
        parse_resources,
    )

    try:
        resources = (parse_resources(args.planner_resources) if args.planner_resources
                     else DEFAULT_RESOURCES)
        check_secret_names(args.planner_image_pull_secret)
    except PlannerConfigError as e:
        return DEFAULT_RESOURCES, (), str(e)
    return resources, tuple(args.planner_image_pull_secret), None
