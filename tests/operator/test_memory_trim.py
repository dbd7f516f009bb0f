"""Freed memory goes back to the kernel after passes (kraftsman/memory.py): glibc's
``malloc_trim`` is found here, called after a cluster pass, and at most once per interval."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from handler_driver import CLUSTER, Driver

from kraftsman.memory import Trimmer, _malloc_trim


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_trims_at_most_once_per_interval() -> None:
    calls: list[int] = []
    clock = Clock()
    trim = Trimmer(2.0, clock, trim=lambda pad: calls.append(pad) or 1)
    trim()
    trim()
    clock.now += 1.9
    trim()
    assert calls == [0]  # the first call trims; the next ones within 2 s do not
    clock.now += 0.1
    trim()
    assert calls == [0, 0] and trim.trims == 2


def test_glibcs_malloc_trim_is_found_and_runs() -> None:
    """The operator's image and this machine are glibc: a lookup that found nothing would
    make every trim a silent no-op."""
    fn = _malloc_trim()
    assert fn is not None
    assert fn(0) in (0, 1)  # 1: memory was released, 0: there was none to release


async def test_a_cluster_pass_is_followed_by_a_trim(tmp_path: Path) -> None:
    d = Driver(tmp_path)
    calls: list[int] = []
    clock = Clock()
    d.rt.trim_memory = Trimmer(2.0, clock, trim=lambda pad: calls.append(pad) or 1)
    await d.ready_cluster("demo", CLUSTER)
    opened = d.rt.clusters[("default", "demo")]
    before = len(calls)
    clock.now += 5
    got: Any = await d.rt.run(opened, lambda cluster: "ran")
    assert got == "ran" and len(calls) == before + 1
    clock.now += 5

    def fails(cluster: Any) -> None:
        raise RuntimeError("a pass that fails")

    with pytest.raises(RuntimeError):
        await d.rt.run(opened, fails)
    assert len(calls) == before + 2  # a failed pass freed its garbage too
    await d.stop()
