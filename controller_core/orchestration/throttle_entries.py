"""The replica entries kraftsman's throttle markers claim, kept compact.

Every run on a cluster shares the markers (20 runs of 5,000 moves: 480,000 entries), and
every sync reads them all: held as one Python object each, they were most of the operator's
peak memory. An :class:`EntrySet` keeps one partition bitmap per (topic, side, broker) and
works on those; :class:`Entry` objects exist only while a caller iterates.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import NamedTuple

from controller_core import bitmaps
from controller_core.model import TopicPartition, is_whole_number

SIDES = ("L", "F", "D")  # leader, follower, and a copy between a broker's log directories

Key = tuple[str, str, int]  # (topic, side, broker)


class Entry(NamedTuple):
    """One ``partition:broker`` item of a topic's leader (L) or follower (F) replica list, or
    a replica copied between log directories of its broker (D, in the marker alone)."""

    topic: str
    partition: int
    broker: int
    side: str  # "L" | "F" | "D"

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def encode(self) -> str:
        return f"{self.side}:{self.partition}:{self.topic}"


class EntrySet:
    """An immutable set of :class:`Entry`, one bitmap of partitions per (topic, side,
    broker) — never a zero one, so two equal sets have equal maps."""

    __slots__ = ("_bits",)

    def __init__(self, bits: Mapping[Key, int] | None = None) -> None:
        self._bits: dict[Key, int] = {k: v for k, v in (bits or {}).items() if v}

    @classmethod
    def grouped(cls, groups: Mapping[Key, Iterable[int]]) -> EntrySet:
        return cls({k: bitmaps.from_members(ps) for k, ps in groups.items()})

    @classmethod
    def of(cls, entries: Iterable[Entry]) -> EntrySet:
        groups: dict[Key, list[int]] = {}
        for e in entries:
            groups.setdefault((e.topic, e.side, e.broker), []).append(e.partition)
        return cls.grouped(groups)

    @classmethod
    def decode(cls, texts: Iterable[object], broker: int) -> EntrySet:
        """A marker's ``replicas`` (``side:partition:topic``); an item that is not one is not
        ours to interpret, and is left out."""
        groups: dict[tuple[str, str], list[int]] = {}
        for text in texts:  # a marker holds 10^5 of them: no Entry made for each
            side, _, rest = str(text).partition(":")
            part, _, topic = rest.partition(":")
            if side in SIDES and topic and is_whole_number(part):
                groups.setdefault((topic, side), []).append(int(part))
        # one topic name shared by its keys, not a string each
        return cls.grouped({(sys.intern(t), side, broker): ps
                            for (t, side), ps in groups.items()})

    def encode(self) -> list[str]:
        """Its entries as a marker writes them, sorted."""
        return sorted(f"{side}:{p}:{topic}" for (topic, side, _), bits in self._bits.items()
                      for p in bitmaps.members(bits))

    # -- views --------------------------------------------------------------------------------
    def keys(self) -> Iterable[Key]:
        return self._bits.keys()

    def items(self) -> Iterable[tuple[Key, int]]:
        return self._bits.items()

    def sides(self) -> set[str]:
        return {side for _, side, _ in self._bits}

    def topics(self) -> set[str]:
        return {topic for topic, _, _ in self._bits}

    def where(self, *, sides: Iterable[str]) -> EntrySet:
        """The entries of the given sides."""
        wanted = set(sides)
        return EntrySet({k: v for k, v in self._bits.items() if k[1] in wanted})

    def by_broker(self) -> dict[int, EntrySet]:
        out: dict[int, dict[Key, int]] = {}
        for k, v in self._bits.items():
            out.setdefault(k[2], {})[k] = v
        return {b: EntrySet(bits) for b, bits in out.items()}

    def by_list(self) -> dict[tuple[str, str], EntrySet]:
        """(topic, side) -> its entries: one replica list of a topic's config."""
        out: dict[tuple[str, str], dict[Key, int]] = {}
        for k, v in self._bits.items():
            out.setdefault((k[0], k[1]), {})[k] = v
        return {ts: EntrySet(bits) for ts, bits in out.items()}

    def partitions(self) -> dict[str, int]:
        """topic -> the bitmap of its partitions that any entry names."""
        out: dict[str, int] = {}
        for (topic, _, _), v in self._bits.items():
            out[topic] = out.get(topic, 0) | v
        return out

    def masked(self, keep: Mapping[str, int], default: int) -> EntrySet:
        """The entries whose partition is in ``keep[topic]`` (``default`` for a topic it
        lacks; ``~0`` keeps every partition)."""
        return EntrySet({k: v & keep.get(k[0], default) for k, v in self._bits.items()})

    # -- set algebra --------------------------------------------------------------------------
    def __or__(self, other: EntrySet) -> EntrySet:
        out = dict(self._bits)
        for k, v in other._bits.items():
            out[k] = out.get(k, 0) | v
        return EntrySet(out)

    def __sub__(self, other: EntrySet) -> EntrySet:
        return EntrySet({k: v & ~other._bits.get(k, 0) for k, v in self._bits.items()})

    def __and__(self, other: EntrySet) -> EntrySet:
        return EntrySet({k: v & other._bits.get(k, 0) for k, v in self._bits.items()})

    def __le__(self, other: EntrySet) -> bool:
        return all(v & ~other._bits.get(k, 0) == 0 for k, v in self._bits.items())

    @staticmethod
    def union(sets: Iterable[EntrySet]) -> EntrySet:
        out: dict[Key, int] = {}
        for s in sets:
            for k, v in s._bits.items():
                out[k] = out.get(k, 0) | v
        return EntrySet(out)

    # -- as a set of Entry --------------------------------------------------------------------
    def __iter__(self) -> Iterator[Entry]:
        for (topic, side, broker), bits in self._bits.items():
            for p in bitmaps.members(bits):
                yield Entry(topic, p, broker, side)

    def __len__(self) -> int:
        return sum(v.bit_count() for v in self._bits.values())

    def __bool__(self) -> bool:
        return bool(self._bits)

    def __contains__(self, entry: object) -> bool:
        if not isinstance(entry, Entry):
            return False
        return bitmaps.contains(self._bits.get((entry.topic, entry.side, entry.broker), 0),
                                entry.partition)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EntrySet):
            return self._bits == other._bits
        if isinstance(other, (set, frozenset)):
            return len(self) == len(other) and all(e in self for e in other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"EntrySet({sorted(self)!r})"
