"""Deliver what a broker sent just before it closed the connection (kafka-python 3.0.12).

A broker that refuses SASL credentials answers SaslAuthenticate with the reason and closes
the connection at once (after ``connection.failed.authentication.delay.ms``). When the client
reads both in one go — a busy machine, a slow client — kafka-python's transport finds the
end of stream while collecting the bytes and drops the bytes: the answer is lost, the
connection is "socket disconnected", the bootstrap loop tries again and again and after
30 s the user is told the brokers cannot be reached instead of that the password is wrong
(reproduced against real Kafka 4.4 with both cores busy: 3 of 6 attempts).

The fix, applied once at import: a transport's ``_sock_recv`` that read bytes *and* the
end of stream hands the bytes to the connection and reports the end at the next read, so
the IO loop first runs what the bytes woke (the SASL exchange then fails with the broker's
reason, as on a quiet machine). The socket stays readable at its end, so that next read
comes at once. Bytes without an end, or an end without bytes, pass through as before.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import kafka.errors as kerr
from kafka.net import transport as _transport

Recv = Callable[[Any], tuple[bytes, BaseException | None]]


def deliver_before_end(recv: Recv) -> Recv:
    @functools.wraps(recv)
    def sock_recv(self: Any) -> tuple[bytes, BaseException | None]:
        data, err = recv(self)
        if not data or err is None or self._protocol is None:
            return data, err
        try:
            self._protocol.data_received(data)
        except kerr.KafkaProtocolError as e:  # as the transport itself treats it
            return b"", e
        return b"", None  # the end is read again, after the loop ran what the bytes woke
    sock_recv.__kraftsman_delivers__ = True  # type: ignore[attr-defined]
    return sock_recv


def install() -> None:
    """Idempotent: each transport class that reads by ``_sock_recv`` is wrapped once."""
    for cls in (_transport.KafkaTCPTransport, _transport.KafkaSSLTransport):
        recv = cls.__dict__.get("_sock_recv")
        if recv is not None and not getattr(recv, "__kraftsman_delivers__", False):
            cls._sock_recv = deliver_before_end(recv)


install()
