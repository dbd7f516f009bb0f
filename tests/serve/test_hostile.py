"""Hostile input: each bad connection is closed, the server keeps serving everyone else."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest

from controller_core.wire.frames import (
    FrameDecoder,
    FrameError,
    FrameTooLarge,
    MalformedRequest,
    UnknownApi,
    UnsupportedApiVersion,
    parse_request,
)
from tests.helpers import cluster
from tests.serve.harness import ServedCluster, served


def connect(s: ServedCluster) -> socket.socket:
    host, port = s.bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    return sock


def closed_by_peer(sock: socket.socket, timeout: float = 5.0) -> bool:
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def api_versions_roundtrip(s: ServedCluster, version: int = 3) -> ApiVersionsResponse:
    sock = connect(s)
    req = ApiVersionsRequest(version=version, client_software_name="t",
                             client_software_version="1")
    req.with_header(correlation_id=42, client_id="t")
    sock.sendall(bytes(req.encode(header=True, framed=True)))
    size = struct.unpack(">i", recv_exact(sock, 4))[0]
    body = recv_exact(sock, size)
    sock.close()
    assert struct.unpack(">i", body[:4])[0] == 42
    return ApiVersionsResponse.decode(body[4:], version=version if body[4:6] == b"\0\0" else 0)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "connection closed early"
        out += chunk
    return out


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def test_bad_frames_close_only_that_connection(server: ServedCluster) -> None:
    cases = [
        struct.pack(">i", 200 * 1024 * 1024),  # absurd size: refused before any body is read
        struct.pack(">i", -5),  # negative size
        frame(b"\x00\x03"),  # header cut short
        frame(struct.pack(">hhi", 999, 0, 1) + b"\x00\x00"),  # unknown api key
        frame(struct.pack(">hhi", 0, 9, 1) + b"\x00\x00"),  # Produce: not served
        frame(struct.pack(">hhi", 3, 77, 1) + b"\x00\x00"),  # Metadata v77
        frame(struct.pack(">hhi", 45, 0, 1) + b"\xff\xff\xff"),  # garbage body
    ]
    for payload in cases:
        sock = connect(server)
        sock.sendall(payload)
        assert closed_by_peer(sock), payload[:16]
        sock.close()
    assert api_versions_roundtrip(server).error_code == 0  # everyone else is still served
    assert server.server.stats.closed_for_errors >= len(cases)


def test_unsupported_api_versions_version_answered_like_kafka(server: ServedCluster) -> None:
    sock = connect(server)
    sock.sendall(frame(struct.pack(">hhi", 18, 99, 7) + b"\x00\x00"))
    size = struct.unpack(">i", recv_exact(sock, 4))[0]
    body = recv_exact(sock, size)
    resp = ApiVersionsResponse.decode(body[4:], version=0)
    assert resp.error_code == 35  # UNSUPPORTED_VERSION, with the versions served
    assert any(k.api_key == 18 for k in resp.api_keys)
    sock.close()


def test_slow_and_vanishing_clients(tmp_path: Path) -> None:
    with served(cluster(tmp_path / "c"), time_scale=0, frame_timeout_seconds=0.3,
                idle_timeout_seconds=0.6) as s:
        slow = connect(s)
        slow.sendall(struct.pack(">i", 1000) + b"\x00" * 10)  # starts a frame, then stalls
        gone = connect(s)
        gone.sendall(struct.pack(">i", 1000) + b"\x00" * 10)
        gone.close()  # vanishes mid-frame
        idle = connect(s)
        assert api_versions_roundtrip(s).error_code == 0  # served while the others hang
        assert closed_by_peer(slow, timeout=5)
        assert closed_by_peer(idle, timeout=5)
        slow.close()
        idle.close()
        deadline = time.monotonic() + 5
        while s.server._budget and s.server._budget.used and time.monotonic() < deadline:
            time.sleep(0.01)
        assert s.server._budget is not None and s.server._budget.used == 0


def test_memory_budget_bounds_partial_frames(tmp_path: Path) -> None:
    with served(cluster(tmp_path / "c"), time_scale=0, memory_budget_bytes=64 * 1024,
                frame_timeout_seconds=0.5) as s:
        hogs = []
        for _ in range(4):  # each announces 60 KiB: only one fits the 64 KiB budget
            sock = connect(s)
            sock.sendall(struct.pack(">i", 60 * 1024) + b"\x00" * 100)
            hogs.append(sock)
        time.sleep(0.1)
        assert s.server._budget is not None and s.server._budget.used <= 64 * 1024
        assert api_versions_roundtrip(s).error_code == 0
        for sock in hogs:
            assert closed_by_peer(sock, timeout=5)
            sock.close()


def test_metadata_before_sasl_is_refused(tmp_path: Path) -> None:
    from controller_core.wire.auth import AuthFile, Authorizer
    auth = Authorizer.from_file(AuthFile.model_validate(
        {"users": [{"name": "u", "password": "p"}]}))
    with served(cluster(tmp_path / "c"), auth, time_scale=0) as s:
        sock = connect(s)
        req = MetadataRequest(topics=None, allow_auto_topic_creation=False, version=9)
        req.with_header(correlation_id=1, client_id="t")
        sock.sendall(bytes(req.encode(header=True, framed=True)))
        assert closed_by_peer(sock)
        sock.close()
        assert api_versions_roundtrip(s).error_code == 0  # allowed before authentication


# -- the sans-IO decoder, fuzzed --------------------------------------------------------------
@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.binary(max_size=2048), st.lists(st.integers(1, 64), min_size=1, max_size=50))
def test_fuzz_decoder_never_crashes_and_stays_bounded(data: bytes, cuts: list[int]) -> None:
    dec = FrameDecoder(max_frame_bytes=1024)
    pos = 0
    i = 0
    try:
        while pos < len(data):
            n = cuts[i % len(cuts)]
            i += 1
            for f in dec.feed(data[pos:pos + n]):
                assert len(f) <= 1024
                with contextlib.suppress(FrameError):
                    parse_request(f)
            pos += n
            assert dec.buffered <= 1024 + 4 + 64
    except (FrameTooLarge, MalformedRequest):
        pass


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.sampled_from([3, 18, 19, 32, 35, 43, 44, 45, 46, 55, 60]), st.integers(-2, 20),
       st.binary(max_size=300))
def test_fuzz_parse_request_raises_only_frame_errors(key: int, version: int,
                                                     body: bytes) -> None:
    raw = struct.pack(">hhi", key, version, 1) + body
    try:
        parsed = parse_request(raw)
    except (MalformedRequest, UnknownApi, UnsupportedApiVersion):
        return
    assert parsed.api_key == key and parsed.version == version


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.lists(st.binary(min_size=0, max_size=200), min_size=1, max_size=10),
       st.integers(1, 17))
def test_fuzz_decoder_reassembles_any_split(payloads: list[bytes], chunk: int) -> None:
    stream = b"".join(frame(p) for p in payloads)
    dec = FrameDecoder(max_frame_bytes=1000)
    got: list[bytes] = []
    for i in range(0, len(stream), chunk):
        got += dec.feed(stream[i:i + chunk])
    assert got == payloads and dec.buffered == 0
