"""``kraftsman cluster serve``: a local embedded cluster over the Kafka wire protocol.

The server itself lives in :mod:`controller_core.wire` (nothing Kubernetes-specific); this is
the CLI around it: open the cluster from the state dir, load --auth, run until SIGTERM/SIGINT,
checkpoint on the way out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path
from typing import Any

from controller_core.wire.auth import AuthFileError, Authorizer, load_auth_file
from controller_core.wire.frames import DEFAULT_MAX_REQUEST_BYTES
from controller_core.wire.server import ClusterServer, ServeConfig, describe_listeners
from kraftsman.cli_errors import UsageError
from kraftsman.local_store import DEFAULT_STATE_DIR, LocalStore, StateLock


def add_parser(c_sub: Any) -> None:
    p = c_sub.add_parser("serve", help="serve the embedded cluster over the Kafka protocol")
    p.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    p.add_argument("--cluster", default=None, help="cluster name (default: the only one)")
    p.add_argument("--listen", default="127.0.0.1:9092", metavar="HOST:PORT",
                   help="bootstrap listener; broker N listens on PORT+1+index (PORT 0: "
                        "ephemeral ports for all)")
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="simulated seconds per wall-clock second (default 1.0; 0 freezes)")
    p.add_argument("--auth", type=Path, default=None, metavar="FILE",
                   help="YAML with SASL/PLAIN users and CLUSTER ACLs; without it the "
                        "server is open")
    p.add_argument("--max-request-bytes", type=int, default=DEFAULT_MAX_REQUEST_BYTES)
    p.add_argument("--max-connections", type=int, default=1000)
    p.set_defaults(handler=cmd_serve)


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise UsageError(f"--listen {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9092")
    return host.strip("[]"), int(port)


def cmd_serve(args: argparse.Namespace) -> int:
    host, port = _listen(args.listen)
    if args.time_scale < 0:
        raise UsageError("--time-scale: must not be negative")
    if args.max_request_bytes <= 0 or args.max_connections <= 0:
        raise UsageError("--max-request-bytes and --max-connections: must be positive")
    try:
        authorizer = load_auth_file(args.auth) if args.auth else Authorizer.open()
    except AuthFileError as e:
        raise UsageError(str(e)) from None
    store = LocalStore(args.state_dir)
    name = store.pick_cluster(args.cluster)
    cluster = store.open_cluster(name)
    config = ServeConfig(host=host, port=port, time_scale=args.time_scale,
                         max_request_bytes=args.max_request_bytes,
                         max_connections=args.max_connections)

    def log(message: str) -> None:
        print(f"kraftsman serve: {message}", file=sys.stderr, flush=True)

    try:
        return asyncio.run(_run(cluster, authorizer, config, name, log,
                                getattr(args, "state_lock", None)))
    finally:
        cluster.close()


async def _run(cluster: Any, authorizer: Authorizer, config: ServeConfig, name: str,
               log: Any, lock: StateLock | None = None) -> int:
    server = ClusterServer(cluster, authorizer, config, log=log)
    try:
        await server.start()
    except OSError as e:
        raise UsageError(f"--listen: {e.strerror or e}") from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    if not authorizer.requires_authentication:
        log("WARNING: no --auth given: the server is OPEN — anyone who can connect may "
            "describe and alter this cluster")
    else:
        log("SASL/PLAIN required; ACLs from --auth")
    log(f"serving cluster {name!r} (id {cluster.image.cluster_id}) at time scale "
        f"{config.time_scale}: {describe_listeners(server)}")
    assert server.bootstrap is not None
    if lock is not None:  # other commands on this state dir are refused, pointed here
        lock.announce(listen=f"{server.bootstrap.host}:{server.bootstrap.port}")
    print(f"listening on {server.bootstrap.host}:{server.bootstrap.port}", flush=True)
    await stop.wait()
    log("shutting down: checkpointing the cluster")
    await server.stop()
    return 0
