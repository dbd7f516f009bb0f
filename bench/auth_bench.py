"""How long the `kafka` backend takes to connect to `cluster serve`, and to report a refused
password, per SASL mechanism, over plaintext and TLS (issue 10: "a wrong password gives an
authentication error within a second, not a 5 s 'Unable to bootstrap'"). Prints figures;
asserts nothing about speed.

    nice -n 10 .venv/bin/python bench/auth_bench.py [--runs 5]

The server runs in this process on 127.0.0.1 with ephemeral ports; certificates are made
at run time (needs the `cryptography` package of the dev extra for the TLS rows).
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller_core.backends import RetryPolicy, open_kafka_admin
from controller_core.errors import KafkaApiError
from controller_core.wire.auth import AuthFile, Authorizer
from controller_core.wire.server import ClusterServer, ServeConfig
from tests.helpers import cluster


def serve(c: Any, tls: ssl.SSLContext | None) -> tuple[ClusterServer, asyncio.AbstractEventLoop]:
    auth = Authorizer.from_file(AuthFile.model_validate({
        "users": [{"name": "admin", "password": "admin-secret"}],
        "acls": [{"principal": "User:admin", "operations": ["ALL"]}]}))
    loop = asyncio.new_event_loop()
    server = ClusterServer(c, auth, ServeConfig(port=0, time_scale=0, ssl_context=tls))
    threading.Thread(target=loop.run_forever, daemon=True).start()
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
    return server, loop


def timed(bootstrap: str, data: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    try:
        open_kafka_admin(bootstrap, data, retry=RetryPolicy(total_seconds=30)).close()
        outcome = "connected"
    except KafkaApiError as e:
        outcome = e.error.name
    return time.perf_counter() - started, outcome


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    from tests.tls_certs import make_pki

    tmp = Path(tempfile.mkdtemp(prefix="kraftsman-auth-bench-"))
    pki = make_pki(tmp / "pki")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(pki.server_cert, pki.server_key)
    print(f"{'protocol':<15} {'mechanism':<14} {'password':<8} {'median s':>9} {'max s':>7}  "
          "outcome")
    for protocol, tls in (("SASL_PLAINTEXT", None), ("SASL_SSL", ctx)):
        c = cluster(tmp / f"c-{protocol}")
        server, loop = serve(c, tls)
        assert server.bootstrap is not None
        bootstrap = f"{server.bootstrap.host}:{server.bootstrap.port}"
        for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            for password in ("right", "wrong"):
                data = {"security.protocol": protocol, "sasl.mechanism": mechanism,
                        "sasl.username": "admin",
                        "sasl.password": "admin-secret" if password == "right" else "nope"}
                if tls is not None:
                    data["ca.crt"] = pki.ca.read_text()
                runs = [timed(bootstrap, data) for _ in range(args.runs)]
                times = [t for t, _ in runs]
                print(f"{protocol:<15} {mechanism:<14} {password:<8} "
                      f"{statistics.median(times):>9.3f} {max(times):>7.3f}  {runs[0][1]}",
                      flush=True)
        asyncio.run_coroutine_threadsafe(server.stop(checkpoint=False), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        c.close()


if __name__ == "__main__":
    main()
