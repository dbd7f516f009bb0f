"""``cluster serve``: the embedded cluster over the Kafka wire protocol (asyncio).

One listener per broker (a client reaches broker N at its advertised port, so per-broker
requests such as DescribeLogDirs answer for the right broker) plus the bootstrap listener.
Each connection is served one request at a time, as Kafka does. A hostile or broken peer
costs at most its own connection: frames above the size cap, malformed or unknown requests,
idle or stalled peers and peers that stop reading are disconnected; bytes buffered for
partial frames are bounded by a server-wide budget. The simulated clock follows the wall
clock times ``time_scale``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controller_core import errors
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.errors import ErrorCode
from controller_core.wire import apis
from controller_core.wire.auth import ANONYMOUS, Authorizer
from controller_core.wire.data_apis import NO_RESPONSE
from controller_core.wire.frames import (
    DEFAULT_MAX_REQUEST_BYTES,
    FrameDecoder,
    FrameError,
    ParsedRequest,
    UnsupportedApiVersion,
    parse_request,
)
from controller_core.wire.handlers import (
    ILLEGAL_SASL_STATE,
    SASL_AUTHENTICATION_FAILED,
    UNSUPPORTED_SASL_MECHANISM,
    UNSUPPORTED_VERSION,
    Endpoint,
    Handlers,
    Session,
)
from controller_core.wire.scram import MECHANISMS, ScramError, ScramServer

READ_CHUNK = 64 * 1024
SASL_KEYS = (17, 36)


FAILED_AUTH_CLOSE_DELAY_SECONDS = 0.1


@dataclass(frozen=True, slots=True)
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 9092  # 0: ephemeral ports for the bootstrap and every broker listener
    time_scale: float = 1.0
    tick_seconds: float = 0.05
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    memory_budget_bytes: int = 256 * 1024 * 1024  # all partially received frames together
    max_connections: int = 1000
    idle_timeout_seconds: float = 600.0  # Kafka's connections.max.idle.ms
    frame_timeout_seconds: float = 30.0  # to finish sending a frame once begun
    write_timeout_seconds: float = 30.0  # a peer that stops reading its responses
    checkpoint_every_seconds: float = 30.0
    ssl_context: ssl.SSLContext | None = None  # every listener speaks TLS when set


class MemoryBudget:
    """Bytes reserved for frames being received, across all connections."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self._freed = asyncio.Condition()

    async def acquire(self, n: int) -> None:
        async with self._freed:
            await self._freed.wait_for(lambda: self.used + n <= self.total)
            self.used += n

    async def release(self, n: int) -> None:
        if n:
            async with self._freed:
                self.used -= n
                self._freed.notify_all()


@dataclass
class ServerStats:
    connections: int = 0
    requests: int = 0
    closed_for_errors: int = 0
    last_errors: list[str] = field(default_factory=list)


class ClusterServer:
    def __init__(self, cluster: EmbeddedCluster, authorizer: Authorizer,
                 config: ServeConfig = ServeConfig(),
                 log: Callable[[str], None] = lambda _m: None) -> None:
        self.cluster = cluster
        self.authorizer = authorizer
        self.config = config
        self.log = log
        self.endpoints: dict[int, Endpoint] = {}
        self.bootstrap: Endpoint | None = None
        self.handlers: Handlers | None = None
        self.stats = ServerStats()
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._budget: MemoryBudget | None = None
        self._clock_task: asyncio.Task[None] | None = None

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        cfg = self.config
        self._budget = MemoryBudget(cfg.memory_budget_bytes)
        brokers = sorted(self.cluster.image.brokers)
        tls = cfg.ssl_context
        boot = await asyncio.start_server(lambda r, w: self._accept(r, w, None), cfg.host,
                                          cfg.port, ssl=tls)
        self._servers.append(boot)
        boot_port = boot.sockets[0].getsockname()[1]
        self.bootstrap = Endpoint(cfg.host, boot_port)
        for i, b in enumerate(brokers):
            port = 0 if cfg.port == 0 else cfg.port + 1 + i
            try:
                srv = await asyncio.start_server(functools.partial(self._accept, broker=b),
                                                 cfg.host, port, ssl=tls)
            except OSError as e:
                await self.stop(checkpoint=False)
                raise OSError(e.errno, f"cannot listen for broker {b} on {cfg.host}:{port}: "
                                       f"{e.strerror}; pick another --listen port") from None
            self._servers.append(srv)
            self.endpoints[b] = Endpoint(cfg.host, srv.sockets[0].getsockname()[1])
        self.handlers = Handlers(self.cluster, self.authorizer, self.endpoints)
        self._clock_task = asyncio.create_task(self._run_clock())

    async def stop(self, *, checkpoint: bool = True) -> None:
        if self._clock_task is not None:
            self._clock_task.cancel()
            # a clock that failed is clock_failure()'s to report, not stop()'s
            await asyncio.wait({self._clock_task})
            self._clock_task = None
        for srv in self._servers:
            srv.close()
        for w in list(self._writers):
            w.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for srv in self._servers:
            with contextlib.suppress(Exception):
                await srv.wait_closed()
        self._servers.clear()
        if checkpoint:
            self.cluster.checkpoint()

    def clock_failure(self) -> BaseException | None:
        """What stopped the simulated clock, if an advance raised: the cluster is frozen from
        then on, so a caller polling it for progress can fail at once instead of waiting."""
        task = self._clock_task
        if task is None or not task.done() or task.cancelled():
            return None
        return task.exception()

    async def clock_stopped(self) -> BaseException | None:
        """Wait until the simulated clock stops: the exception that stopped it, or None once
        the server was stopped. A server whose clock stopped serves a frozen cluster — every
        client waiting for a move to finish waits forever — so its owner should stop it."""
        task = self._clock_task
        if task is None:
            return None
        await asyncio.wait({task})
        return self.clock_failure()

    async def _run_clock(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        last_checkpoint = last
        while True:
            await asyncio.sleep(self.config.tick_seconds)
            now = loop.time()
            elapsed, last = now - last, now
            if elapsed > 0 and self.config.time_scale > 0:
                self.cluster.advance(elapsed * self.config.time_scale)
            if now - last_checkpoint >= self.config.checkpoint_every_seconds:
                self.cluster.checkpoint()
                last_checkpoint = now

    # -- connections -------------------------------------------------------------------------------
    def _stands_for(self, broker: int | None) -> int | None:
        """The broker a listener answers for; the bootstrap listener is the first live one.
        A broker that is down does not answer at all."""
        if broker is not None:
            return broker if self.cluster.alive(broker) else None
        live = [b for b in sorted(self.cluster.image.brokers) if self.cluster.alive(b)]
        return live[0] if live else None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      broker: int | None) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        peer = str(writer.get_extra_info("peername"))
        stands_for = self._stands_for(broker)
        if stands_for is None or len(self._writers) >= self.config.max_connections:
            writer.close()
            return
        self._writers.add(writer)
        self.stats.connections += 1
        cert = writer.get_extra_info("peercert")
        principal = tls_principal(cert) if cert else None  # mutual TLS: the certificate's DN
        if principal is None and not self.authorizer.requires_authentication:
            principal = ANONYMOUS
        session = Session(stands_for, principal, peer=peer)
        try:
            await self._serve(reader, writer, session, broker)
        except (FrameError, TimeoutError, ConnectionError, asyncio.IncompleteReadError) as e:
            self._closed_for(peer, f"{type(e).__name__}: {e}")
        except asyncio.CancelledError:
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    def _closed_for(self, peer: str, why: str) -> None:
        self.stats.closed_for_errors += 1
        self.stats.last_errors = ([*self.stats.last_errors, why])[-20:]
        self.log(f"closing connection from {peer}: {why}")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     session: Session, broker: int | None) -> None:
        cfg = self.config
        budget = self._budget
        assert budget is not None
        decoder = FrameDecoder(cfg.max_request_bytes)
        reserved = 0
        try:
            while True:
                mid_frame = decoder.buffered > 0 or decoder.pending_frame_bytes > 0
                timeout = cfg.frame_timeout_seconds if mid_frame else cfg.idle_timeout_seconds
                data = await asyncio.wait_for(reader.read(READ_CHUNK), timeout)
                if not data:
                    return
                frames = decoder.feed(data)
                want = decoder.pending_frame_bytes
                if want > reserved:
                    await asyncio.wait_for(budget.acquire(want - reserved),
                                           cfg.frame_timeout_seconds)
                    reserved = want
                for frame in frames:
                    if broker is not None and not self.cluster.alive(broker):
                        return  # the broker died while the peer was connected
                    out = self._dispatch(frame, session)
                    if out is None:
                        return
                    if not out:
                        continue  # a request that gets no answer (Produce with acks=0)
                    closing = session.extra.pop("close", False)
                    if closing:
                        # As Kafka's Selector does on a failed authentication: the refusal is
                        # held for connection.failed.authentication.delay.ms, then sent and the
                        # connection closed at once — a client reads the two together, as
                        # kraftsman's must (backends/last_words.py).
                        await asyncio.sleep(FAILED_AUTH_CLOSE_DELAY_SECONDS)
                    writer.write(out)
                    await asyncio.wait_for(writer.drain(), cfg.write_timeout_seconds)
                    if closing:
                        return
                if want < reserved:
                    await budget.release(reserved - want)
                    reserved = want
        finally:
            await budget.release(reserved)

    # -- one request -------------------------------------------------------------------------------
    def _dispatch(self, frame: bytes, session: Session) -> bytes | None:
        """The encoded response (empty: none is due), or None to close the connection (as
        Kafka does)."""
        handlers = self.handlers
        assert handlers is not None
        try:
            parsed = parse_request(frame, handlers.served)
        except UnsupportedApiVersion as e:
            if e.api_key == 18:  # Kafka answers ApiVersions v0 listing what it supports
                return self._encode(handlers.api_versions_response(0, UNSUPPORTED_VERSION),
                                    e.correlation_id, 0)
            self._closed_for(session.peer, str(e))
            return None
        except FrameError as e:
            self._closed_for(session.peer, str(e))
            return None
        self.stats.requests += 1
        key = parsed.api_key
        if key in SASL_KEYS:
            return self._sasl(parsed, session)
        if session.principal is None and key != 18:
            self._closed_for(session.peer, f"api key {key} before SASL authentication")
            return None
        try:
            response = handlers.handle(key, parsed.version, parsed.body, session)
        except Exception:  # a bug must not take the server down; Kafka would disconnect too
            self._closed_for(session.peer, "internal error:\n" + traceback.format_exc())
            return None
        if response is NO_RESPONSE:
            return b""
        return self._encode(response, parsed.correlation_id, parsed.version)

    @staticmethod
    def _encode(response: Any, correlation_id: int, version: int) -> bytes:
        assert version == response.API_VERSION  # set at construction: a response header
        response.with_header(correlation_id=correlation_id)  # has no version to update
        return bytes(response.encode(header=True, framed=True))

    def _sasl(self, parsed: ParsedRequest, session: Session) -> bytes | None:
        version, body = parsed.version, parsed.body
        auth = self.authorizer
        if parsed.api_key == 17:  # SaslHandshake
            cls = apis.RESPONSES[17]
            enabled = list(auth.mechanisms)
            if not auth.requires_authentication:
                error: ErrorCode = ILLEGAL_SASL_STATE
                enabled = []
            elif body.mechanism in enabled:
                error = errors.NONE
                session.sasl_mechanism = body.mechanism
                if body.mechanism in MECHANISMS:
                    session.extra["scram"] = ScramServer(body.mechanism,
                                                         auth.scram[body.mechanism])
            else:
                error = UNSUPPORTED_SASL_MECHANISM
            return self._encode(cls(version=version, error_code=error.code,
                                    mechanisms=enabled), parsed.correlation_id, version)
        cls = apis.RESPONSES[36]  # SaslAuthenticate

        def answer(error: ErrorCode, message: str | None, token: bytes = b"") -> bytes:
            return self._encode(cls(version=version, error_code=error.code,
                                    error_message=message, auth_bytes=token,
                                    session_lifetime_ms=0), parsed.correlation_id, version)

        def refuse(why: str, message: str) -> bytes:
            session.sasl_mechanism = None
            session.extra.pop("scram", None)
            session.extra["close"] = True
            self._closed_for(session.peer, why)
            return answer(SASL_AUTHENTICATION_FAILED, message)

        mechanism = session.sasl_mechanism
        if mechanism is None:
            session.extra["close"] = True
            return answer(ILLEGAL_SASL_STATE, "SaslAuthenticate before a SaslHandshake")
        if mechanism == "PLAIN":
            principal = auth.authenticate_plain(bytes(body.auth_bytes))
            session.sasl_mechanism = None
            if principal is None:
                return refuse("SASL/PLAIN authentication failed",
                              "Authentication failed: Invalid username or password")
            session.principal = principal
            return answer(errors.NONE, None)
        scram: ScramServer = session.extra["scram"]
        try:
            token = scram.evaluate(bytes(body.auth_bytes))
        except ScramError as e:
            return refuse(f"SASL/{mechanism} authentication failed", str(e))
        if scram.complete:
            session.sasl_mechanism = None
            session.extra.pop("scram", None)
            session.principal = f"User:{scram.username}"
        return answer(errors.NONE, None, token)


_DN_NAMES = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
             "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
             "domainComponent": "DC", "userId": "UID"}


def tls_principal(peercert: dict[str, Any]) -> str | None:
    """Kafka's SSL principal: ``User:`` + the client certificate's subject DN as RFC 2253
    writes it (most specific RDN first, e.g. ``User:CN=admin,O=example``)."""
    rdns = peercert.get("subject") or ()
    parts = [",".join(f"{_DN_NAMES.get(k, k)}={v}" for k, v in rdn) for rdn in reversed(rdns)]
    return "User:" + ",".join(parts) if parts else None


def describe_listeners(server: ClusterServer) -> str:
    assert server.bootstrap is not None
    brokers = ", ".join(f"{b}@{ep.host}:{ep.port}" for b, ep in sorted(server.endpoints.items()))
    return (f"bootstrap {server.bootstrap.host}:{server.bootstrap.port}; brokers {brokers}")


def wall_ms() -> int:
    return int(time.time() * 1000)
