"""gc_pause (issue 22): the collector is paused only around the work, and a collector the
caller had disabled stays disabled."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from controller_core.gc_pause import gc_paused, paused


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_during_the_work_and_enabled_after() -> None:
    gc.enable()
    seen = []

    @gc_paused
    def work(x: int) -> int:
        seen.append(gc.isenabled())
        with paused():  # nested: still paused, and the outer one re-enables
            seen.append(gc.isenabled())
        seen.append(gc.isenabled())
        return x + 1

    assert work(1) == 2 and seen == [False, False, False] and gc.isenabled()


def test_enabled_again_after_an_error() -> None:
    gc.enable()
    with pytest.raises(ValueError), paused():
        raise ValueError
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled() -> None:
    gc.disable()
    with paused():
        pass
    assert not gc.isenabled()
