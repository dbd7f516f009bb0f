"""What the machine (or the planner Job's container) gives a plan: cores and memory.

``engine="auto"`` needs them to choose where the rounds run (:func:`.pipeline.on_driver`):
Spark's ``local[*]`` uses the cores the JVM sees, which in a container is its CPU limit, and
the driver engine holds the whole table in this process, so it must fit in the memory limit.
Read from cgroup v2 (``cpu.max``, ``memory.max``) where the process has one, else from the
affinity mask and ``/proc/meminfo``.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
MEMINFO = Path("/proc/meminfo")
STATUS = Path("/proc/self/status")
_LOCAL = re.compile(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")


@dataclass(frozen=True, slots=True)
class Machine:
    cores: int
    memory: int | None  # bytes this process may grow to; None: unknown

    @classmethod
    def here(cls) -> Machine:
        return cls(usable_cores(), memory_budget())


def usable_cores(cgroup: Path = CGROUP) -> int:
    """The cores this process may use: its affinity mask, capped by a cgroup CPU quota (a
    container's CPU limit), as the JVM's ``availableProcessors`` counts them."""
    cores = len(os.sched_getaffinity(0))
    try:
        quota, period = (cgroup / "cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return cores


def memory_budget(cgroup: Path = CGROUP, meminfo: Path = MEMINFO,
                  status: Path = STATUS) -> int | None:
    """Bytes this process may grow to, counting what it holds: the cgroup's limit less what
    the cgroup's other processes hold, or the machine's MemAvailable plus this process's
    resident size, whichever is smaller (None when neither can be read)."""
    own = _kib(status, "VmRSS:")
    own = 0 if own is None else own * 1024
    budgets: list[int] = []
    try:
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            others = int((cgroup / "memory.current").read_text()) - own
            budgets.append(max(0, int(limit) - max(0, others)))
    except (OSError, ValueError):
        pass
    available = _kib(meminfo, "MemAvailable:")
    if available is not None:
        budgets.append(available * 1024 + own)
    return min(budgets) if budgets else None


def _kib(path: Path, key: str) -> int | None:
    """A ``key: N kB`` figure of a /proc file, in KiB."""
    try:
        for line in path.read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def local_cores(master: str, cores: int) -> int | None:
    """How many cores a local Spark master runs on (``local``: 1, ``local[N]``: N,
    ``local[*]``: ``cores``); None for a master that is not local."""
    m = _LOCAL.match(master.strip())
    if m is None:
        return None
    if m.group(1) is None:
        return 1
    return cores if m.group(1) == "*" else int(m.group(1))
