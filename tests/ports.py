"""Loopback ports for the servers the tests start (Kafka, etcd, kube-apiserver, the operator).

A port the kernel hands out for ``bind(port 0)`` comes from the ephemeral range, the same
range every outgoing connection takes its local port from: between picking such a port and
the server binding it, a client connection may take it (CI saw a real broker fail with
"Address already in use"). Ports are picked below the ephemeral range instead, where only
servers bind, at random, and never twice in one process."""

from __future__ import annotations

import random
import socket
from pathlib import Path

_handed_out: set[int] = set()


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port free now, outside the ephemeral range."""
    high = _ephemeral_start()
    low = max(1024, high - 16384)
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
