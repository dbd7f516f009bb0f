"""Moves between log directories in a reassignment (KIP-113), as kafka-reassign-partitions
runs them: the plan names a directory for some replicas; each such replica is asked of its
broker with AlterReplicaLogDirs, which copies it into a *future* replica there and swaps once
it has caught up. A replica the broker does not host yet (a replica the same move adds) is
answered REPLICA_NOT_AVAILABLE — the broker keeps the directory for when it creates the
replica — and is asked again until it is there. A partition is in place when every named
replica lives in its directory with no future replica left (DescribeLogDirs).

A cancel asks each replica with a future replica to stay where it is (its current directory):
Kafka drops the future replica then.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from controller_core import errors
from controller_core.admin import ClusterAdmin
from controller_core.errors import ApiResult
from controller_core.model import TopicPartition

Replica = tuple[TopicPartition, int]
# Answers after which the replica is asked again next pass; any other error fails the move.
ASK_AGAIN = frozenset({errors.REPLICA_NOT_AVAILABLE.code, errors.BROKER_NOT_AVAILABLE.code,
                       errors.NOT_LEADER_OR_FOLLOWER.code})


class Placement(NamedTuple):
    """Where a replica lives on its broker (DescribeLogDirs)."""

    current: str | None  # its directory; None: the broker holds no such replica (yet)
    future: str | None = None  # the directory a future replica of it is being made in
    future_bytes: int = 0
    current_bytes: int = 0


def wanted(log_dirs: Mapping[TopicPartition, Mapping[int, str]],
           partitions: Iterable[TopicPartition]) -> dict[Replica, str]:
    """The named directory of every replica of ``partitions`` that has one."""
    return {(tp, b): path for tp in partitions for b, path in log_dirs.get(tp, {}).items()}


def placements(admin: ClusterAdmin, replicas: Iterable[Replica]) -> dict[Replica, Placement]:
    """Where each replica lives; a replica whose broker did not answer (down) is left out,
    one its broker does not host has ``current`` None."""
    pairs = list(replicas)
    if not pairs:
        return {}
    dirs = admin.describe_log_dirs(sorted({b for _, b in pairs}),
                                   sorted({tp for tp, _ in pairs}))
    found: dict[Replica, Placement] = {}
    for b, ds in dirs.items():
        for d in ds:
            for r in d.replicas:
                p = found.get((r.tp, b), Placement(None))
                found[(r.tp, b)] = (p._replace(future=d.path, future_bytes=r.size_bytes)
                                    if r.future else
                                    p._replace(current=d.path, current_bytes=r.size_bytes))
    return {(tp, b): found.get((tp, b), Placement(None)) for tp, b in pairs if b in dirs}


def in_place(want: Mapping[Replica, str], where: Mapping[Replica, Placement]) -> bool:
    """Every replica in its named directory, no future replica left (a broker that did not
    answer cannot say so: not in place)."""
    for key, path in want.items():
        p = where.get(key)
        if p is None or p.current != path or p.future is not None:
            return False
    return True


def to_ask(want: Mapping[Replica, str], where: Mapping[Replica, Placement]
           ) -> dict[Replica, str]:
    """The replicas to ask (again): not in place, and not already copying there — one in
    its directory but copying elsewhere (someone else asked) is asked to stay, which drops
    that copy. A replica its broker does not host yet is asked too (the broker keeps the
    directory)."""
    out = {}
    for key, path in want.items():
        p = where.get(key)
        if p is None or (p.future != path and (p.current != path or p.future is not None)):
            out[key] = path
    return out


def rollback(where: Mapping[Replica, Placement]) -> dict[Replica, str]:
    """For a cancel: each replica copying elsewhere stays in its current directory."""
    return {key: p.current for key, p in where.items()
            if p.future is not None and p.current is not None}


def refusals(results: Mapping[Replica, ApiResult]) -> dict[TopicPartition, str]:
    """The partitions whose move cannot go on, with why (the first refusal of each)."""
    out: dict[TopicPartition, str] = {}
    for (tp, b), r in sorted(results.items()):
        if not r.ok and r.error.code not in ASK_AGAIN and tp not in out:
            out[tp] = f"{tp}: broker {b}: {r.error.name}: {r.message or r.error.name}"
    return out


def copy_bytes(want: Mapping[Replica, str], where: Mapping[Replica, Placement],
               moving_between_dirs: Iterable[Replica]) -> dict[Replica, int]:
    """Bytes copied so far by each replica moving between two directories of its broker:
    its future replica's size, or its whole size once it is in place."""
    out = {}
    for key in moving_between_dirs:
        p = where.get(key)
        if p is None:
            continue
        if p.future is not None:
            out[key] = p.future_bytes
        elif p.current == want.get(key):
            out[key] = p.current_bytes
    return out
