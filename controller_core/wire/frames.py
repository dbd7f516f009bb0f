"""Sans-IO framing of Kafka requests: size-prefixed frames in, parsed requests out.

Everything a hostile peer can send lands here first, so every failure is a typed
:class:`FrameError` and the buffered bytes are bounded by the size cap plus one read.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafka.protocol.api_header import RequestHeader

from controller_core.wire.apis import REQUESTS, SERVED

DEFAULT_MAX_REQUEST_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hh")
API_VERSIONS_KEY = 18


class FrameError(Exception):
    """The peer sent something that is not a Kafka request: close its connection."""


class FrameTooLarge(FrameError):
    pass


class MalformedRequest(FrameError):
    pass


class UnknownApi(FrameError):
    """An API key this server does not serve (Kafka closes the connection)."""


class UnsupportedApiVersion(FrameError):
    """A served API at a version outside the advertised range."""

    def __init__(self, api_key: int, version: int, correlation_id: int) -> None:
        super().__init__(f"api key {api_key} version {version} is not supported")
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id


class FrameDecoder:
    """Cut a byte stream into frames; refuses a size prefix above ``max_frame_bytes`` before
    buffering a byte of its body."""

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._need = -1  # body size of the frame being assembled; -1: reading the prefix

    @property
    def pending_frame_bytes(self) -> int:
        """Size of the frame being assembled (what the caller must budget for), or 0."""
        return max(self._need, 0)

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        frames: list[bytes] = []
        while True:
            if self._need < 0:
                if len(self._buf) < 4:
                    return frames
                (size,) = _SIZE.unpack_from(self._buf)
                if size < 0:
                    raise MalformedRequest(f"negative frame size {size}")
                if size > self.max_frame_bytes:
                    raise FrameTooLarge(
                        f"frame of {size} bytes exceeds the limit of {self.max_frame_bytes}")
                del self._buf[:4]
                self._need = size
            if len(self._buf) < self._need:
                return frames
            frames.append(bytes(self._buf[:self._need]))
            del self._buf[:self._need]
            self._need = -1


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    body: Any  # the kafka-python request object


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """api key, version and correlation id — enough to answer even an unparsable body."""
    if len(frame) < 8:
        raise MalformedRequest(f"a request header needs 8 bytes, got {len(frame)}")
    key, version = _KEY_VERSION.unpack_from(frame)
    (correlation_id,) = _SIZE.unpack_from(frame, 4)
    return key, version, correlation_id


def parse_request(frame: bytes,
                  served: Mapping[int, tuple[int, int]] = SERVED) -> ParsedRequest:
    key, version, correlation_id = peek_header(frame)
    if key not in served:
        raise UnknownApi(f"api key {key} is not served here")
    low, high = served[key]
    if not low <= version <= high:
        raise UnsupportedApiVersion(key, version, correlation_id)
    cls = REQUESTS[key]
    flexible = cls.flexible_version_q(version)
    if key == API_VERSIONS_KEY:
        flexible = version >= 3
    stream = io.BytesIO(frame)
    try:
        header = RequestHeader.decode(stream, flexible=flexible)
        body = cls.decode(memoryview(frame)[stream.tell():], version=version)
    except Exception as e:  # kafka-python raises assorted errors on truncated input
        raise MalformedRequest(f"cannot parse api key {key} v{version}: "
                               f"{type(e).__name__}: {e}") from None
    return ParsedRequest(key, version, correlation_id, header.client_id, body)
