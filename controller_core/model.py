"""The domain vocabulary shared by every layer: partitions, brokers, election types."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple, overload

NO_LEADER = -1


def is_whole_number(text: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also takes '²' (which ``int`` then refuses with a
    traceback) and the Arabic-Indic one (which it reads as 1) — neither is a broker id or a
    byte count."""
    return text.isascii() and text.isdigit()


def parse_endpoint(text: str) -> tuple[str, str, int] | None:
    """"CONTROLLER://host:9093" (an IPv6 host in brackets) -> (name, host, port)."""
    match = re.fullmatch(r"([A-Za-z0-9_.-]+)://(\[[0-9A-Fa-f:.]+\]|[^:/\[\]]+):([0-9]{1,5})",
                         text.strip())
    if match is None or not 0 < int(match[3]) < 65536:
        return None
    return match[1], match[2].strip("[]"), int(match[3])


class TopicPartition(NamedTuple):
    """A named tuple: hashing and construction stay in C, which matters at 10^6 partitions."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class ElectionType(StrEnum):
    PREFERRED = "PREFERRED"
    UNCLEAN = "UNCLEAN"


class PartitionRegistration(NamedTuple):
    """The controller's view of one partition (KRaft's PartitionRegistration).

    While a reassignment runs, ``replicas`` is the full set (target first, then the replicas
    being removed), ``adding`` the target replicas not yet in the original set and
    ``removing`` the original replicas not in the target — as Kafka 4.4 computes them, which
    after a re-target can leave a replica in both (see metadata/partition_change.py).
    """

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()
    # KIP-966: replicas that left the ISR while it was below min.insync.replicas and may
    # still lead (ELR), and the last leader of a partition that went leaderless.
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()
    # KIP-858: the log directory of each replica, aligned with ``replicas``; "" (or an empty
    # tuple, as every record written before JBOD) is unassigned: the broker's only directory.
    directories: tuple[str, ...] = ()

    def directory_of(self, broker: int) -> str:
        """The directory recorded for ``broker``'s replica ("" when unassigned)."""
        if not self.directories or broker not in self.replicas:
            return ""
        return self.directories[self.replicas.index(broker)]

    @property
    def is_reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def target(self) -> tuple[int, ...]:
        """Where the partition is heading: the replicas minus those being removed."""
        if not self.removing:
            return self.replicas
        removing = set(self.removing)
        return tuple(r for r in self.replicas if r not in removing)

    @property
    def original(self) -> tuple[int, ...]:
        """The replica set a cancellation restores: the replicas minus those being added."""
        if not self.adding:
            return self.replicas
        adding = set(self.adding)
        return tuple(r for r in self.replicas if r not in adding)

    @property
    def preferred(self) -> int:
        return self.replicas[0] if self.replicas else NO_LEADER


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    id: int
    rack: str | None
    fenced: bool


class TopicsPartitions(Sequence[TopicPartition]):
    """Every partition of some topics, in order, as a read-only sequence that builds a
    :class:`TopicPartition` only when one is read: an election over a million partitions
    reports them all as attempted, and building a million tuples nobody reads was most of
    its cost. Equal to any sequence (list, tuple) of the same partitions."""

    __slots__ = ("_len", "_spans")

    def __init__(self, spans: Iterable[tuple[str, int]]) -> None:
        self._spans = tuple((topic, n) for topic, n in spans if n > 0)
        self._len = sum(n for _, n in self._spans)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[TopicPartition]:
        for topic, n in self._spans:
            for i in range(n):
                yield TopicPartition(topic, i)

    @overload
    def __getitem__(self, index: int) -> TopicPartition: ...
    @overload
    def __getitem__(self, index: slice) -> list[TopicPartition]: ...

    def __getitem__(self, index: int | slice) -> TopicPartition | list[TopicPartition]:
        if isinstance(index, slice):
            return list(self)[index]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(index)
        for topic, n in self._spans:
            if index < n:
                return TopicPartition(topic, index)
            index -= n
        raise IndexError(index)  # pragma: no cover - the bounds check above covers it

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, tuple) or len(value) != 2:
            return False
        topic, i = value
        return any(t == topic and isinstance(i, int) and 0 <= i < n for t, n in self._spans)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TopicsPartitions):
            return self._spans == other._spans
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(other) == self._len and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))  # equal to a tuple of the same partitions: hash alike

    def __repr__(self) -> str:
        return f"TopicsPartitions({list(self._spans)!r})"
