"""Partition ids as Spark computes them: ``xxhash64(topic, partition)``, seed 42.

The scorer's seeded race draws from a hash of (seed, round, partition id, broker), so a plan
computed on the driver (:mod:`.local_table`) is the same plan as Spark's only if both give
every partition the same id. Spark's ``xxhash64`` is XXH64 over the UTF-8 bytes of the
topic with seed 42, then over the partition's 8 (a long) or 4 (an int) little-endian bytes
with the topic's hash as the seed. Topics are few, so they are hashed in Python; partitions
are many, so they are hashed with numpy (uint64 arithmetic wraps, as Java's long does).
"""

from __future__ import annotations

import importlib
import struct
from typing import Any

SPARK_SEED = 42
_M = (1 << 64) - 1
P1 = 0x9E3779B185EBCA87
P2 = 0xC2B2AE3D27D4EB4F
P3 = 0x165667B19E3779F9
P4 = 0x85EBCA77C2B2AE63
P5 = 0x27D4EB2F165667C5


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * P2) & _M, 31) * P1) & _M


def _merge(h: int, v: int) -> int:
    return ((h ^ _round(0, v)) * P1 + P4) & _M


def _fmix(h: int) -> int:
    h ^= h >> 33
    h = (h * P2) & _M
    h ^= h >> 29
    h = (h * P3) & _M
    return h ^ (h >> 32)


def xxh64(data: bytes, seed: int) -> int:
    """XXH64 of ``data`` (unsigned 64-bit result)."""
    seed &= _M
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & _M, (seed + P2) & _M, seed, (seed - P1) & _M]
        while i + 32 <= n:
            lanes = struct.unpack_from("<4Q", data, i)
            v = [_round(a, lane) for a, lane in zip(v, lanes, strict=True)]
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
        for a in v:
            h = _merge(h, a)
    else:
        h = (seed + P5) & _M
    h = (h + n) & _M
    while i + 8 <= n:
        (k,) = struct.unpack_from("<Q", data, i)
        h = (_rotl(h ^ _round(0, k), 27) * P1 + P4) & _M
        i += 8
    if i + 4 <= n:
        (k,) = struct.unpack_from("<I", data, i)
        h = (_rotl(h ^ ((k * P1) & _M), 23) * P2 + P3) & _M
        i += 4
    while i < n:
        h = (_rotl(h ^ ((data[i] * P5) & _M), 11) * P1) & _M
        i += 1
    return _fmix(h)


def _signed(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


def topic_hash(topic: str) -> int:
    """Spark's ``xxhash64(topic)`` (signed, as Spark returns it)."""
    return _signed(xxh64(topic.encode("utf-8"), SPARK_SEED))


def partition_ids(topic_seeds: Any, partitions: Any, width: int = 8) -> Any:
    """Spark's ``xxhash64(topic, partition)`` for arrays of topic hashes (the seeds) and
    partition numbers; ``width`` is the partition column's size in bytes (8 for a long
    column, 4 for int, short and byte, which Spark hashes as an int). int64 out."""
    np = importlib.import_module("numpy")
    u = np.uint64
    with np.errstate(over="ignore"):
        h = topic_seeds.astype(np.int64).view(np.uint64) + u(P5) + u(width)
        p = partitions.astype(np.int64)
        if width == 8:
            k = p.view(np.uint64) * u(P2)
            k = ((k << u(31)) | (k >> u(33))) * u(P1)
            h ^= k
            h = ((h << u(27)) | (h >> u(37))) * u(P1) + u(P4)
        else:
            k = (p & 0xFFFFFFFF).view(np.uint64) * u(P1)
            h ^= k
            h = ((h << u(23)) | (h >> u(41))) * u(P2) + u(P3)
        h ^= h >> u(33)
        h *= u(P2)
        h ^= h >> u(29)
        h *= u(P3)
        h ^= h >> u(32)
    return h.view(np.int64)
