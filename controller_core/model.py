"""The domain vocabulary shared by every layer: partitions, brokers, election types."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

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
