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
import ssl
import sys
from pathlib import Path
from typing import Any

from controller_core.model import is_whole_number
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
                   help="YAML with SASL users (PLAIN, SCRAM-SHA-256/512) and CLUSTER ACLs; "
                        "without it the server is open")
    p.add_argument("--tls-cert", type=Path, default=None, metavar="PEM",
                   help="serve TLS on every listener with this certificate (chain)")
    p.add_argument("--tls-key", type=Path, default=None, metavar="PEM",
                   help="the private key of --tls-cert")
    p.add_argument("--tls-client-ca", type=Path, default=None, metavar="PEM",
                   help="require client certificates signed by this CA (mutual TLS); the "
                        "principal is User:<the certificate's subject DN>")
    p.add_argument("--checkpoint-every", type=float, default=30.0, metavar="SECONDS",
                   help="write the data plane and the clock to the state directory this often "
                        "(default 30; the metadata log is always durable): a kill -9 loses at "
                        "most this much simulated progress")
    p.add_argument("--max-request-bytes", type=int, default=DEFAULT_MAX_REQUEST_BYTES)
    p.add_argument("--max-connections", type=int, default=1000)
    p.set_defaults(handler=cmd_serve)


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not is_whole_number(port) or int(port) > 65535:
        raise UsageError(f"--listen {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9092")
    return host.strip("[]"), int(port)


def _tls_context(cert: Path | None, key: Path | None,
                 client_ca: Path | None) -> ssl.SSLContext | None:
    """The listeners' TLS context, or None for plaintext; each bad file names its flag."""
    if cert is None and key is None:
        if client_ca is not None:
            raise UsageError("--tls-client-ca: needs --tls-cert and --tls-key (a TLS listener)")
        return None
    if cert is None or key is None:
        raise UsageError("--tls-cert and --tls-key: give both (the certificate and its key)")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    for flag, path in (("--tls-cert", cert), ("--tls-key", key), ("--tls-client-ca", client_ca)):
        if path is not None and not path.is_file():
            raise UsageError(f"{flag} {path}: no such file")
    try:
        ctx.load_cert_chain(cert, key)
    except ssl.SSLError as e:
        raise UsageError(f"--tls-cert/--tls-key: not a matching PEM certificate and "
                         f"unencrypted key ({e.reason or e})") from None
    if client_ca is not None:
        try:
            ctx.load_verify_locations(cafile=str(client_ca))
        except ssl.SSLError as e:
            raise UsageError(f"--tls-client-ca {client_ca}: not a PEM CA bundle "
                             f"({e.reason or e})") from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def cmd_serve(args: argparse.Namespace) -> int:
    host, port = _listen(args.listen)
    if args.time_scale < 0:
        raise UsageError("--time-scale: must not be negative")
    if args.max_request_bytes <= 0 or args.max_connections <= 0:
        raise UsageError("--max-request-bytes and --max-connections: must be positive")
    if not args.checkpoint_every > 0:
        raise UsageError("--checkpoint-every: must be a positive number of seconds")
    try:
        authorizer = load_auth_file(args.auth) if args.auth else Authorizer.open()
    except AuthFileError as e:
        raise UsageError(str(e)) from None
    tls = _tls_context(args.tls_cert, args.tls_key, args.tls_client_ca)
    store = LocalStore(args.state_dir)
    name = store.pick_cluster(args.cluster)
    cluster = store.open_cluster(name)
    config = ServeConfig(host=host, port=port, time_scale=args.time_scale,
                         max_request_bytes=args.max_request_bytes,
                         max_connections=args.max_connections, ssl_context=tls,
                         checkpoint_every_seconds=args.checkpoint_every)

    def log(message: str) -> None:
        print(f"kraftsman serve: {message}", file=sys.stderr, flush=True)

    try:
        code = asyncio.run(_run(cluster, authorizer, config, name, log,
                                getattr(args, "state_lock", None)))
    except ClockStopped:
        cluster.close(checkpoint=False)  # its state is mid-advance; disk keeps the last one
        raise
    except BaseException:
        cluster.close()
        raise
    cluster.close()
    return code


class ClockStopped(UsageError):
    """The simulated clock crashed: the cluster no longer advances, so every client waiting
    on it (a move to finish, a session to expire) would wait forever. Not bad input, but
    reported the same way: one line, no traceback — with exit code 1, a runtime failure."""

    exit_code = 1


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
        log(f"SASL ({', '.join(authorizer.mechanisms)}) required; ACLs from --auth")
    if config.ssl_context is not None:
        mutual = config.ssl_context.verify_mode == ssl.CERT_REQUIRED
        log("TLS on every listener" + (", client certificates required" if mutual else ""))
    log(f"serving cluster {name!r} (id {cluster.image.cluster_id}) at time scale "
        f"{config.time_scale}: {describe_listeners(server)}")
    assert server.bootstrap is not None
    if lock is not None:  # other commands on this state dir are refused, pointed here
        lock.announce(listen=f"{server.bootstrap.host}:{server.bootstrap.port}")
    print(f"listening on {server.bootstrap.host}:{server.bootstrap.port}", flush=True)
    stopping = asyncio.create_task(stop.wait())
    clock = asyncio.create_task(server.clock_stopped())
    await asyncio.wait({stopping, clock}, return_when=asyncio.FIRST_COMPLETED)
    failure = clock.result() if clock.done() else None
    stopping.cancel()
    clock.cancel()
    if failure is not None:
        await server.stop(checkpoint=False)
        raise ClockStopped(
            f"the embedded cluster's clock stopped ({type(failure).__name__}: "
            f"{' '.join(str(failure).split())}); it no longer advances, so the server stopped "
            f"— check the state directory (it must stay in place and writable) and start "
            f"`kraftsman cluster serve` again")
    log("shutting down: checkpointing the cluster")
    await server.stop()
    return 0
