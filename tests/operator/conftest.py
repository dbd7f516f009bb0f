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
from mutmut_kraftsman import use_mutants

use_mutants()  # before anything imports kraftsman (a no-op outside `mutmut run`)

from deployed import OperatorProcess, PodTemplate, apply, from_chart, write_kubeconfig  # noqa: E402
from harness import Api, Emulator, OperatorThread, declare  # noqa: E402

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


@pytest.fixture
def kubeconfig(kmock: Any, tmp_path: Path) -> Path:
    """A kubeconfig file whose current context is the emulator (over HTTP)."""
    return write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url))


@pytest.fixture
async def deployed(kmock: Any, tmp_path: Path, kubeconfig: Path
                   ) -> AsyncIterator[Callable[..., Any]]:
    """``await deployed(pod=None, env=None, login=True, state_dir=None)`` starts one replica
    of the operator as its Deployment runs it (see deployed.py; default: the chart with
    default values) and waits for its liveness endpoint; ``login=False`` gives it no
    kubeconfig, ``state_dir`` a volume shared with other replicas. Every replica is stopped
    (SIGTERM, then kill -9) at teardown."""
    declare(kmock)
    running: list[OperatorProcess] = []

    async def start(pod: PodTemplate | None = None, env: dict[str, str] | None = None,
                    login: bool = True, state_dir: Path | None = None) -> OperatorProcess:
        pod = pod or from_chart()
        await apply(str(kmock.url), pod.objects)
        proc = OperatorProcess(pod, workdir=tmp_path / f"pod-{len(running)}",
                               pod_name=f"kraftsman-5d8f7c-{len(running)}x{id(pod) % 997}",
                               kubeconfig=kubeconfig if login else None, env=env,
                               state_dir=state_dir)
        running.append(proc.start())
        await proc.wait_healthy()
        return proc

    yield start
    for proc in running:
        await proc.stop()
