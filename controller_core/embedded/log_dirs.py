"""A broker's choices among its log directories (JBOD, KIP-113 / KIP-858 / KIP-1066).

Pure functions over paths and counts; the embedded cluster keeps the state they read (the
replicas' ``directories`` in the metadata, future replicas in the data plane).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from controller_core.admin import CORDON_ALL


def cordoned_paths(value: str, paths: Sequence[str]) -> frozenset[str]:
    """The directories a broker's ``cordoned.log.dirs`` value cordons: "*" is all of them."""
    entries = {e.strip() for e in value.split(",") if e.strip()}
    if CORDON_ALL in entries:
        return frozenset(paths)
    return frozenset(p for p in paths if p in entries)


def next_log_dir(paths: Sequence[str], partitions: Mapping[str, int],
                 cordoned: frozenset[str] = frozenset()) -> str:
    """Where a broker creates a new replica (LogManager.nextLogDirs): the directory holding
    the fewest partitions (futures included), the first listed on a tie; cordoned
    directories only when every one is (KIP-1066 keeps new replicas off them)."""
    open_paths = [p for p in paths if p not in cordoned] or list(paths)
    return min(open_paths, key=lambda p: (partitions.get(p, 0), paths.index(p)))
