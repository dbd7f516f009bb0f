"""Pause Python's cyclic garbage collector around bulk work on a big cluster (issue 22).

Building a million-partition image allocates millions of tuples; each time the collector's
oldest generation fills by a quarter it walks every live object, so a restart spent about
half its CPU in collections that find nothing (the image holds no reference cycles), and
creating the cluster, starting and driving a 100,000-partition move a quarter to a third.
Paused, a collection runs at the next allocation after the work instead — nothing cyclic is
lost, only deferred. Reference counting frees everything else as before.

Process-wide but scoped: only a collector this code found enabled is paused and enabled
again, and nested or concurrent uses leave it enabled once the outermost one ends (a
thread that finds it paused runs its work unpaused-to-be: at worst slower, never wrong).
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


@contextmanager
def paused() -> Iterator[None]:
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def gc_paused(fn: Callable[P, R]) -> Callable[P, R]:
    """Run ``fn`` with the collector paused (see the module docstring)."""
    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with paused():
            return fn(*args, **kwargs)
    return run
