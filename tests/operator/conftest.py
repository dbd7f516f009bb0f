"""Fixtures: the kmock emulator with our resources, a client, operators in threads."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from harness import Api, Emulator, OperatorThread, declare

# tests/operator is a rootdir of its own (no __init__.py, `from harness import ...`); the
# kafka-backend tests also use tests.helpers and tests.serve from the repository root.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


@pytest.fixture(autouse=True)
def _quiet_kopf() -> Iterator[None]:
    logging.getLogger("kopf").setLevel(logging.WARNING)
    yield


@pytest.fixture
async def api(kmock: Any) -> AsyncIterator[Api]:
    declare(kmock)
    async with aiohttp.ClientSession() as session:
        yield Api(str(kmock.url), session)


@pytest.fixture
async def start_operator(kmock: Any, tmp_path: Path
                         ) -> AsyncIterator[Callable[..., OperatorThread]]:
    running: list[OperatorThread] = []

    def start(state_dir: Path | None = None, **kw: Any) -> OperatorThread:
        op = OperatorThread(str(kmock.url), state_dir or tmp_path / "state", **kw).start()
        running.append(op)
        return op

    yield start
    for op in running:
        if op.thread.is_alive():
            op.stop_flag.set()
            await asyncio.to_thread(op.thread.join, 20)


@pytest.fixture
def kmock_options() -> dict[str, Any]:
    return {"cls": Emulator}
