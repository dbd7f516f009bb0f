"""Give the memory a pass freed back to the kernel.

A pass over a large PartitionReassignment builds and drops megabytes of short-lived objects
(kopf's parsed watch events, the operation state, pydantic models) in worker threads.
CPython hands the large ones to glibc's malloc, which keeps freed chunks in its heaps, so the
process's resident size grows well past what is live (the operator bench in a thread with
kmock, 20,000 partitions in flight: a traced Python heap peaking at 191 MiB in a process of
477 MiB). ``malloc_trim(0)`` returns whole free pages of every arena to the kernel. It is
called after passes, at most once per ``interval`` seconds, because a trim walks the heaps
(its cost was not measured on its own). Not glibc (musl, macOS): nothing to do.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time
from collections.abc import Callable

_Trim = Callable[[int], int]


def _malloc_trim() -> _Trim | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        fn = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn  # type: ignore[no-any-return]


class Trimmer:
    """Rate-limited ``malloc_trim``; safe to call from any thread."""

    def __init__(self, interval: float = 2.0, clock: Callable[[], float] = time.monotonic,
                 trim: _Trim | None = None) -> None:
        self.interval, self.clock = interval, clock
        self._trim = trim if trim is not None else _malloc_trim()
        self._lock = threading.Lock()
        self._last = float("-inf")
        self.trims = 0

    def __call__(self) -> None:
        if self._trim is None:
            return
        now = self.clock()
        with self._lock:
            if now - self._last < self.interval:
                return
            self._last = now
        self._trim(0)
        self.trims += 1
