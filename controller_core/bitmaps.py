"""Sets of small non-negative integers (partition numbers) as Python ints, one bit each.

A busy cluster's throttle markers name 10^5 to 10^6 replicas; as sets of Python objects they cost
about 150 bytes an entry and were rebuilt at every pass, which set the operator's peak memory.
As bits they cost an eighth of a byte, and union, difference and subset are word operations.
"""

from __future__ import annotations

from collections.abc import Iterable

# the positions of the set bits of every byte value
_BYTE_BITS = tuple(tuple(j for j in range(8) if v >> j & 1) for v in range(256))


def from_members(members: Iterable[int]) -> int:
    """The bitmap of ``members`` (built in one buffer: ``bits |= 1 << m`` copies the whole
    int at each step)."""
    buf = bytearray()
    for m in members:
        add(buf, m)
    return from_buffer(buf)


def add(buf: bytearray, member: int) -> None:
    """Set ``member``'s bit in a bitmap being built (:func:`from_buffer` reads it)."""
    if member < 0:
        raise ValueError(f"a bitmap holds non-negative numbers, not {member}")
    i = member >> 3
    if i >= len(buf):
        buf.extend(bytes(i + 1 - len(buf)))  # amortized: a bytearray grows by a share
    buf[i] |= 1 << (member & 7)


def from_buffer(buf: bytearray) -> int:
    return int.from_bytes(buf, "little")


def members(bits: int) -> list[int]:
    """The set bits of ``bits``, ascending."""
    out: list[int] = []
    for i, byte in enumerate(bits.to_bytes((bits.bit_length() + 7) >> 3, "little")):
        if byte:
            base = i << 3
            out.extend(base + j for j in _BYTE_BITS[byte])
    return out


def contains(bits: int, member: int) -> bool:
    return member >= 0 and bits >> member & 1 == 1
