"""Loopback ports for the servers the tests start (Kafka, etcd, kube-apiserver, the operator).

A port the kernel hands out for ``bind(port 0)`` comes from the ephemeral range, the same
range every outgoing connection takes its local port from: between picking such a port and
the server binding it, a client connection may take it (CI saw a real broker fail with
"Address already in use"). Ports are picked below the ephemeral range instead, where only
servers bind, at random, and never twice in one process. Under pytest-xdist each worker
picks from a slice of its own: two workers (two processes) could otherwise both pick a port
that neither server has bound yet."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

_handed_out: set[int] = set()


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _worker_slice(low: int, high: int) -> tuple[int, int]:
    """This xdist worker's part of [low, high): worker gwN of M takes the N-th M-th (the
    whole range outside xdist). The variables are xdist's; a subprocess inherits them, and
    with them its worker's slice."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    try:
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    except ValueError:
        count = 1
    if count <= 1 or not worker.startswith("gw") or not worker[2:].isdigit():
        return low, high
    width = (high - low) // count
    index = int(worker[2:]) % count
    return low + index * width, low + (index + 1) * width


def free_port() -> int:
    """A loopback port free now, outside the ephemeral range (and in this xdist worker's
    slice of it)."""
    low, high = _worker_slice(max(1024, _ephemeral_start() - 16384), _ephemeral_start())
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(low, high)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket() as s:  # the low range is full: the kernel's choice
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
