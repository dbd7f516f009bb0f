"""`kraftsman operator run`: the Kubernetes operator (kopf) with its embedded clusters."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from pathlib import Path
from typing import Any

from kraftsman.cli_errors import UsageError


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
    run.add_argument("--priority", type=int, default=0, help="peering priority")
    run.add_argument("--liveness", metavar="URL", default=None,
                     help="kopf health endpoint, e.g. http://0.0.0.0:8080/healthz")
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
    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    import kopf

    from kraftsman.handlers import Runtime, build_registry
    from kraftsman.handlers.login import SERVICE_ACCOUNT_DIR, NoCredentials, choose

    if args.tick <= 0:
        raise UsageError(f"--tick {args.tick}: must be > 0 (seconds between passes)")
    if args.time_scale <= 0:
        raise UsageError(f"--time-scale {args.time_scale}: must be > 0")
    try:
        args.state_dir.mkdir(parents=True, exist_ok=True)
        probe = args.state_dir / ".writable"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise UsageError(f"--state-dir {args.state_dir}: not writable ({e.strerror}); mount a "
                         "volume there or pass another directory") from None
    try:
        login = choose(args.kubeconfig, os.environ,
                       args.service_account_dir or SERVICE_ACCOUNT_DIR)
    except NoCredentials as e:
        raise UsageError(str(e)) from None
    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s %(name)s [%(levelname)s] %(message)s")
    rt = Runtime(args.state_dir, tick_seconds=args.tick, time_scale=args.time_scale)
    registry = build_registry(rt)
    login.register(registry)
    asyncio.run(kopf.operator(
        registry=registry, clusterwide=not args.namespace, namespaces=args.namespace,
        standalone=args.standalone or args.peering is None, peering_name=args.peering,
        priority=args.priority, liveness_endpoint=args.liveness))
    return 0
