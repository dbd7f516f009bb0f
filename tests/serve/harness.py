"""``cluster serve`` in a background thread on 127.0.0.1 with ephemeral ports."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.wire.auth import Authorizer
from controller_core.wire.server import ClusterServer, ServeConfig

T = TypeVar("T")


class ServedCluster:
    """The server runs on its own event loop thread; ``call`` runs a function on that loop,
    which is how a test touches the cluster without racing the server."""

    def __init__(self, cluster: EmbeddedCluster, authorizer: Authorizer,
                 config: ServeConfig) -> None:
        self.cluster = cluster
        self.loop = asyncio.new_event_loop()
        self.logs: list[str] = []
        self.server = ClusterServer(cluster, authorizer, config, log=self._log)
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def _log(self, message: str) -> None:
        self.logs.append(message)

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    @property
    def bootstrap(self) -> str:
        ep = self.server.bootstrap
        assert ep is not None
        return f"{ep.host}:{ep.port}"

    def check(self) -> None:
        """Raise what crashed the server's clock: a test polling the cluster for progress
        then fails at once instead of at its deadline (a frozen cluster never progresses)."""
        failure = self.server.clock_failure()
        if failure is not None:
            raise AssertionError("the served cluster's clock stopped") from failure
        crashed = [m for m in self.logs if "internal error" in m]
        if crashed:  # a handler raised: the client would only retry into the same bug
            raise AssertionError(f"the served cluster failed a request: {crashed[-1]}")

    def call(self, fn: Callable[[], T]) -> T:
        async def run() -> T:
            return fn()
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)


@contextmanager
def served(cluster: EmbeddedCluster, authorizer: Authorizer | None = None,
           **config: Any) -> Iterator[ServedCluster]:
    cfg = replace(ServeConfig(port=0), **config)
    s = ServedCluster(cluster, authorizer or Authorizer.open(), cfg)
    s.start()
    try:
        yield s
    finally:
        s.stop()


def open_cluster(path: Path, **kw: Any) -> EmbeddedCluster:
    from tests.helpers import cluster
    return cluster(path, **kw)
