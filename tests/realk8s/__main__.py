"""``python -m tests.realk8s up|down DIR``: a real kube-apiserver with etcd on loopback, as the
tests start it (tests/realk8s/apiserver.py); ``tools/real-apiserver`` runs this."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tests.realk8s.apiserver import ServerError, down, service_account_calls, up


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tools/real-apiserver",
        description="Start or stop a real Kubernetes API server (etcd + kube-apiserver built "
                    "by tools/build-real-apiserver) on loopback, with its state in DIR.")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("up", help="start etcd and kube-apiserver; write DIR/kubeconfig "
                                      "(cluster-admin)")
    start.add_argument("dir", type=Path)
    stop = sub.add_parser("down", help="stop them (logs stay in DIR)")
    stop.add_argument("dir", type=Path)
    calls = sub.add_parser("calls", help="what each ServiceAccount did (verb, resource, HTTP "
                                         "codes), from DIR/audit.log")
    calls.add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    if args.command == "calls":
        for account, seen in sorted(service_account_calls(args.dir).items()):
            print(account)
            for (verb, resource, scope), codes in sorted(seen.items()):
                where = "all namespaces" if scope == "*" else "namespaced"
                print(f"  {verb:8s} {resource:45s} {where:15s} {sorted(codes)}")
        return 0
    try:
        if args.command == "up":
            began = time.monotonic()
            server = up(args.dir)
            print(f"kube-apiserver {server.layout.version} ready at {server.url} in "
                  f"{time.monotonic() - began:.1f} s (logs in {server.dir})")
            print(f"export KUBECONFIG={server.kubeconfig}")
        else:
            server = down(args.dir)
            print(f"stopped kube-apiserver and etcd of {server.dir} (logs kept there)")
    except ServerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
