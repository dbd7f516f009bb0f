"""`kraftsman rebalance propose`: the command of a KafkaRebalance's planner Job.

The operator creates the Job (docs/rebalance.md); the work is in :mod:`kraftsman.rebalance_propose`.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from kraftsman.cli_errors import UsageError, require_extra
from kraftsman.commands.plan import spark_conf

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_ID = re.compile(r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$")


def register(sub: Any) -> None:
    rb = sub.add_parser("rebalance", help="KafkaRebalance: plan proposals (run by the operator)")
    actions = rb.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    p = actions.add_parser(
        "propose", help="snapshot a KafkaRebalance's cluster, plan on Spark, write the "
                        "proposal as ConfigMaps (the planner Job's command)",
        description="Read the KafkaRebalance NAME and its KafkaCluster, snapshot the cluster, "
                    "run the `kraftsman plan` pipeline and write the ConfigMaps "
                    "NAME-proposal-ID (index) and NAME-proposal-ID-K (parts). Exit 2 with one "
                    "line, also written to the index's `error`, on any failure.")
    p.add_argument("--namespace", required=True, help="namespace of the KafkaRebalance")
    p.add_argument("--name", required=True, help="name of the KafkaRebalance")
    p.add_argument("--proposal-id", required=True, metavar="ID",
                   help="the proposal's id (the operator's counter: 1, 2, ...)")
    p.add_argument("--state-dir", type=Path, default=Path("/var/lib/kraftsman"),
                   help="the operator's state volume, mounted read-only (embedded clusters)")
    p.add_argument("--master", default=None, metavar="URL",
                   help="Spark master (default: the KafkaRebalance's spec.sparkMaster, else "
                        "local[*])")
    p.add_argument("--spark-conf", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                   help="Spark settings, e.g. spark.driver.memory=4g (repeatable)")
    p.add_argument("--connect-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="bootstrapServers clusters: give up reaching the brokers after this "
                        "long (default 30)")
    p.add_argument("--kubeconfig", metavar="FILE", default=None,
                   help="log in with this kubeconfig (default: $KUBECONFIG, else the pod's "
                        "service account)")
    p.add_argument("--service-account-dir", type=Path, default=None,
                   help="where the pod's service account is mounted "
                        "(default /var/run/secrets/kubernetes.io/serviceaccount)")
    p.set_defaults(handler=run_propose)


def run_propose(args: argparse.Namespace) -> int:
    if not _NAME.match(args.namespace):
        raise UsageError(f"--namespace {args.namespace!r}: not a Kubernetes namespace name")
    if not _NAME.match(args.name):
        raise UsageError(f"--name {args.name!r}: not a Kubernetes object name")
    if not _ID.match(args.proposal_id):
        raise UsageError(f"--proposal-id {args.proposal_id!r}: lowercase letters, digits and "
                         "'-', at most 32 (the operator passes 1, 2, ...)")
    if args.connect_timeout <= 0:
        raise UsageError("--connect-timeout: must be positive")
    require_extra("rebalance propose", "operator")
    require_extra("rebalance propose", "plan")
    from kraftsman.rebalance_propose import ProposeRequest, run

    return run(ProposeRequest(
        namespace=args.namespace, name=args.name, proposal_id=args.proposal_id,
        state_dir=args.state_dir, master=args.master, spark_conf=spark_conf(args.spark_conf),
        connect_timeout=args.connect_timeout, kubeconfig=args.kubeconfig,
        service_account_dir=args.service_account_dir))
