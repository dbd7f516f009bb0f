"""The metadata image: cluster state built only by applying records, in log order.

Replaying the same records always yields the same image — that is what makes a restart from
snapshot + log, and later a Raft replica, reproduce the controller's state exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from controller_core.admin import CORDONED_LOG_DIRS, THROTTLE_MARKER_TOPIC
from controller_core.metadata.partition_change import after
from controller_core.metadata.records import (
    PARTITION_TAG,
    BrokerFencingRecord,
    ClusterRecord,
    ConfigRecord,
    MarkerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    Record,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
    decode_record,
    encode_record,
)
from controller_core.model import (
    NO_LEADER,
    BrokerRegistration,
    PartitionRegistration,
    TopicPartition,
)

PARTITION_BLOCK_TAG = "PB"  # snapshot-only: the partitions of a topic, column by column
SNAPSHOT_BLOCK = 50_000


@dataclass(slots=True)
class TopicImage:
    name: str
    topic_id: str
    message_bytes: int
    produce_bytes_per_second: float
    partitions: list[PartitionRegistration] = field(default_factory=list)


class MetadataImage:
    def __init__(self) -> None:
        self.cluster_id = ""
        self.brokers: dict[int, BrokerRegistration] = {}
        self.topics: dict[str, TopicImage] = {}
        self.configs: dict[tuple[str, str], dict[str, str]] = {}
        self.reassigning: set[TopicPartition] = set()
        # The throttle-marker topic's data as a fully compacted log: key → (offset, value), a
        # tombstone (None) kept like Kafka keeps one for delete.retention.ms; ``marker_end``
        # is its log end (= high watermark: records are committed before any answer).
        self.markers: dict[str, tuple[int, str | None]] = {}
        self.marker_end = 0
        self.next_offset = 0
        self._live: frozenset[int] | None = None
        self._cordoned: frozenset[int] | None = None  # brokers with cordoned.log.dirs set

    # -- reading ---------------------------------------------------------------------------
    def partition(self, tp: TopicPartition) -> PartitionRegistration | None:
        topic = self.topics.get(tp[0])
        if topic is None:
            return None
        partitions, i = topic.partitions, tp[1]
        return partitions[i] if 0 <= i < len(partitions) else None

    def live_brokers(self) -> frozenset[int]:
        if self._live is None:
            self._live = frozenset(b.id for b in self.brokers.values() if not b.fenced)
        return self._live

    def any_cordoned(self) -> bool:
        """Some broker has ``cordoned.log.dirs`` set (see :meth:`cordoned`)."""
        return bool(self._cordoned_brokers())

    def cordoned(self, broker: int) -> bool:
        """Every log directory of ``broker`` is cordoned (KIP-1066): its ``cordoned.log.dirs``
        lists any. A twin broker has one log directory, so any entry ("*" is the one the twin
        takes) cordons all of it; an empty value cordons none, as in Kafka."""
        return broker in self._cordoned_brokers()

    def _cordoned_brokers(self) -> frozenset[int]:
        if self._cordoned is None:  # asked per target replica: 300,000 times for 100,000 moves
            self._cordoned = frozenset(
                int(name) for (kind, name), entries in self.configs.items()
                if kind == "BROKER" and name.isdigit()
                and entries.get(CORDONED_LOG_DIRS, "").strip())
        return self._cordoned

    def iter_partitions(self) -> Iterator[tuple[TopicPartition, PartitionRegistration]]:
        for name, topic in self.topics.items():
            for i, p in enumerate(topic.partitions):
                yield TopicPartition(name, i), p

    def partitions_on(self, broker: int) -> list[tuple[TopicPartition, PartitionRegistration]]:
        """Partitions with a replica on ``broker`` — a tight scan that builds no object for
        the partitions that do not match."""
        out = []
        for name, topic in self.topics.items():
            for i, p in enumerate(topic.partitions):
                if broker in p.replicas:
                    out.append((TopicPartition(name, i), p))
        return out

    def partitions_in_isr_of(self, broker: int
                             ) -> list[tuple[TopicPartition, PartitionRegistration]]:
        """Partitions whose ISR holds ``broker`` (what fencing and unfencing it touch)."""
        out = []
        for name, topic in self.topics.items():
            for i, p in enumerate(topic.partitions):
                if broker in p.isr:
                    out.append((TopicPartition(name, i), p))
        return out

    def partitions_in_elr_of(self, broker: int
                             ) -> list[tuple[TopicPartition, PartitionRegistration]]:
        """Partitions whose eligible leader replicas hold ``broker`` (KIP-966)."""
        return [(tp, p) for tp, p in self.iter_partitions() if broker in p.elr]

    def partitions_without_leader(self) -> list[tuple[TopicPartition, PartitionRegistration]]:
        """Partitions with no leader (what an unfenced broker may bring back online)."""
        out = []
        for name, topic in self.topics.items():
            for i, p in enumerate(topic.partitions):
                if p.leader == NO_LEADER:
                    out.append((TopicPartition(name, i), p))
        return out

    def partition_count(self) -> int:
        return sum(len(t.partitions) for t in self.topics.values())

    def config(self, resource_type: str, name: str) -> dict[str, str]:
        return self.configs.get((resource_type, name), {})

    # -- writing (records only) --------------------------------------------------------------
    def apply(self, record: Record) -> None:
        if isinstance(record, PartitionChangeRecord):
            self.apply_change(record)
            return  # counted there
        elif isinstance(record, PartitionRecord):
            self.apply_partition_record(record)
            return  # counted there
        elif isinstance(record, TopicRecord):
            self.topics[record.name] = TopicImage(
                record.name, record.topic_id, record.message_bytes, record.produce_bytes_per_second)
        elif isinstance(record, RegisterBrokerRecord):
            self.brokers[record.broker_id] = BrokerRegistration(
                record.broker_id, record.rack, record.fenced)
            self._live = None
        elif isinstance(record, UnregisterBrokerRecord):
            del self.brokers[record.broker_id]
            self._live = None
        elif isinstance(record, BrokerFencingRecord):
            b = self.brokers[record.broker_id]
            self.brokers[record.broker_id] = BrokerRegistration(b.id, b.rack, record.fenced)
            self._live = None
        elif isinstance(record, ConfigRecord):
            self._cordoned = None
            key = (record.resource_type, record.resource_name)
            entries = self.configs.setdefault(key, {})
            if record.value is None:
                entries.pop(record.name, None)
                if not entries:
                    del self.configs[key]
            else:
                entries[record.name] = record.value
        elif isinstance(record, MarkerRecord):
            self.markers[record.key] = (record.offset, record.value)
            self.marker_end = max(self.marker_end, record.offset + 1)
        elif isinstance(record, RemoveTopicRecord):
            if record.name == THROTTLE_MARKER_TOPIC:
                self.markers.clear()
                self.marker_end = 0
            topic = self.topics.pop(record.name)
            for i in range(len(topic.partitions)):
                self.reassigning.discard(TopicPartition(record.name, i))
            self.configs.pop(("TOPIC", record.name), None)
        elif isinstance(record, ClusterRecord):
            self.cluster_id = record.cluster_id
        self.next_offset += 1

    def apply_partition_record(self, record: PartitionRecord) -> PartitionRegistration:
        """Apply a PartitionRecord and return the partition it registers: the hot path of
        creating a topic (a million of them on a big cluster), so it builds no TopicPartition
        unless the partition moves or a moving one is replaced."""
        partitions = self.topics[record.topic].partitions
        replicas = record.replicas
        isr = replicas if record.isr == replicas else record.isr
        reg = PartitionRegistration(replicas, isr, *record[4:])
        part = record.partition
        if part == len(partitions):
            partitions.append(reg)
        else:
            partitions[part] = reg
        if reg.adding or reg.removing:
            self.reassigning.add(TopicPartition(record.topic, part))
        elif self.reassigning:
            self.reassigning.discard(TopicPartition(record.topic, part))
        self.next_offset += 1
        return reg

    def apply_change(self, c: PartitionChangeRecord, tp: TopicPartition | None = None
                     ) -> tuple[PartitionRegistration, PartitionRegistration]:
        """Apply a PartitionChangeRecord; (before, after): what the data plane reacts to,
        without looking the partition up three times per change. ``tp``: the record's
        partition, when the caller has built it already."""
        partitions = self.topics[c.topic].partitions
        before = partitions[c.partition]
        reg = after(before, c)
        partitions[c.partition] = reg
        if reg.adding or reg.removing:
            self.reassigning.add(tp or TopicPartition(c.topic, c.partition))
        elif self.reassigning:
            self.reassigning.discard(tp or TopicPartition(c.topic, c.partition))
        self.next_offset += 1
        return before, reg

    # -- snapshot ------------------------------------------------------------------------------
    def apply_rows(self, rows: list[list[Any]]) -> None:
        """Apply encoded records (from a snapshot or a log batch). PartitionRecords take a
        fast path: a snapshot holds one per partition, a million of them on a big cluster."""
        topics = self.topics
        for row in rows:
            if row[0] == PARTITION_TAG:
                _, topic, part, replicas, isr, leader, leader_epoch, partition_epoch, adding, \
                    removing = row[:10]
                r = tuple(replicas)
                reg = PartitionRegistration(r, r if isr == replicas else tuple(isr), leader,
                                            leader_epoch, partition_epoch, tuple(adding),
                                            tuple(removing), *map(tuple, row[10:]))
                partitions = topics[topic].partitions
                if part == len(partitions):
                    partitions.append(reg)
                else:
                    partitions[part] = reg
                if adding or removing:
                    self.reassigning.add(TopicPartition(topic, part))
                elif self.reassigning:  # a replaced partition may have been moving
                    self.reassigning.discard(TopicPartition(topic, part))
                self.next_offset += 1
            elif row[0] == PARTITION_BLOCK_TAG:
                self._apply_block(row)
            else:
                self.apply(decode_record(row))

    def _apply_block(self, row: list[Any]) -> None:
        _, topic, first, counts, flat, leaders, leader_epochs, partition_epochs, isr_sparse, \
            moving = row[:10]
        partitions = self.topics[topic].partitions
        del partitions[first:]
        if self.reassigning:  # the replaced partitions' moves go with them
            self.reassigning -= {tp for tp in self.reassigning
                                 if tp.topic == topic and tp.partition >= first}
        # Column by column, in C where it can be: the replica lists cut from the flat array
        # by zip when every partition has as many replicas (the common case), the ISR the
        # same tuple unless listed, then every registration built by one map; the few
        # moving partitions and ELRs are patched in after. A million partitions are most of
        # a restart.
        n = counts[0] if counts else 0
        if n and counts.count(n) == len(counts) and len(flat) == n * len(counts):
            it = iter(flat)
            replicas: list[tuple[int, ...]] = list(zip(*[it] * n, strict=True))
        else:
            replicas = []
            pos = 0
            for c in counts:
                replicas.append(tuple(flat[pos:pos + c]))
                pos += c
        isrs = replicas.copy()
        for i, isr in isr_sparse:
            isrs[i] = tuple(isr)
        none = repeat(())
        block = list(map(tuple.__new__, repeat(PartitionRegistration),
                         zip(replicas, isrs, leaders, leader_epochs, partition_epochs,
                             none, none, none, none, none, strict=False)))
        for i, adding, removing in moving:
            block[i] = block[i]._replace(adding=tuple(adding), removing=tuple(removing))
            self.reassigning.add(TopicPartition(topic, first + i))
        for i, elr, last in (row[10] if len(row) > 10 else ()):
            block[i] = block[i]._replace(elr=tuple(elr), last_known_elr=tuple(last))
        for i, dirs in (row[11] if len(row) > 11 else ()):  # KIP-858 (JBOD) directories
            block[i] = block[i]._replace(directories=tuple(dirs))
        partitions.extend(block)

    def snapshot_rows(self) -> Iterator[list[Any]]:
        """The encoded content of a snapshot: the records that rebuild this image, with the
        partitions of a topic in columnar blocks (flat integer arrays parse an order of
        magnitude faster than a million small lists)."""
        for r in self.records_but_partitions():
            yield encode_record(r)
        for name, t in self.topics.items():
            for first in range(0, len(t.partitions), SNAPSHOT_BLOCK):
                block = t.partitions[first:first + SNAPSHOT_BLOCK]
                yield [PARTITION_BLOCK_TAG, name, first, [len(p.replicas) for p in block],
                       [r for p in block for r in p.replicas], [p.leader for p in block],
                       [p.leader_epoch for p in block], [p.partition_epoch for p in block],
                       [[i, p.isr] for i, p in enumerate(block) if p.isr != p.replicas],
                       [[i, p.adding, p.removing] for i, p in enumerate(block)
                        if p.adding or p.removing],
                       [[i, p.elr, p.last_known_elr] for i, p in enumerate(block)
                        if p.elr or p.last_known_elr],
                       [[i, p.directories] for i, p in enumerate(block) if p.directories]]

    def to_records(self) -> Iterator[Record]:
        """The records that rebuild this image from nothing (the content of a snapshot)."""
        yield from self.records_but_partitions()
        for t in self.topics.values():
            for i, p in enumerate(t.partitions):
                yield PartitionRecord(t.name, i, p.replicas, p.isr, p.leader, p.leader_epoch,
                                      p.partition_epoch, p.adding, p.removing, p.elr,
                                      p.last_known_elr, p.directories)

    def records_but_partitions(self) -> Iterator[Record]:
        """The cluster id, brokers, topics, configs and the marker topic's records: all but
        the partitions, which a snapshot writes in blocks."""
        if self.cluster_id:
            yield ClusterRecord(self.cluster_id)
        for b in self.brokers.values():
            yield RegisterBrokerRecord(b.id, b.rack, b.fenced)
        for t in self.topics.values():
            yield TopicRecord(t.name, t.topic_id, t.message_bytes, t.produce_bytes_per_second)
        for (rtype, rname), entries in self.configs.items():
            for k, v in entries.items():
                yield ConfigRecord(rtype, rname, k, v)
        for key, (offset, value) in sorted(self.markers.items(), key=lambda kv: kv[1][0]):
            yield MarkerRecord(key, value, offset)
