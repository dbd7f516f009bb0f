"""The kafka-python fix of backends/last_words.py, on a transport double: what each read
returns and what the connection is handed (the end-to-end cases: tests/serve/test_tls_scram.py
and tests/real/test_cli_real_kafka.py, a slow client against the twin and real Kafka)."""

from __future__ import annotations

from typing import Any

import kafka.errors as kerr
from kafka.net import transport

from controller_core.backends.last_words import deliver_before_end

END = kerr.KafkaConnectionError("socket disconnected")


class Connection:
    def __init__(self, refuse: bool = False) -> None:
        self.got: list[bytes] = []
        self.refuse = refuse

    def data_received(self, data: bytes) -> None:
        if self.refuse:
            raise kerr.KafkaProtocolError("bad frame")
        self.got.append(data)


class Transport:
    def __init__(self, reads: list[tuple[bytes, BaseException | None]], conn: Any) -> None:
        self.reads, self._protocol = reads, conn

    def recv(self) -> tuple[bytes, BaseException | None]:
        return self.reads.pop(0)


def test_bytes_read_with_the_end_reach_the_connection_and_the_end_comes_next() -> None:
    conn = Connection()
    t = Transport([(b"refusal", END)], conn)
    recv = deliver_before_end(Transport.recv)
    assert recv(t) == (b"", None) and conn.got == [b"refusal"]


def test_bytes_alone_and_an_end_alone_pass_through() -> None:
    conn = Connection()
    t = Transport([(b"answer", None), (b"", END)], conn)
    recv = deliver_before_end(Transport.recv)
    assert recv(t) == (b"answer", None) and recv(t) == (b"", END) and conn.got == []


def test_bytes_the_connection_cannot_parse_end_it_with_that_error() -> None:
    t = Transport([(b"junk", END)], Connection(refuse=True))
    data, err = deliver_before_end(Transport.recv)(t)
    assert data == b"" and isinstance(err, kerr.KafkaProtocolError)


def test_both_transports_are_wrapped_once_on_import() -> None:
    for cls in (transport.KafkaTCPTransport, transport.KafkaSSLTransport):
        recv = cls.__dict__["_sock_recv"]
        assert getattr(recv, "__kraftsman_delivers__", False)
        assert not getattr(recv.__wrapped__, "__kraftsman_delivers__", False)
