"""The controller core's fast paths (issue 22) answer exactly as the plain code they stand for.

Each fast path is checked against a reference that follows the rule word for word, on random
inputs (the seed is printed, so a failure can be replayed), or, for the cache of topic rules
that catch-ups share, on the one history where a stale entry would change a record.
"""

from __future__ import annotations

import random
from pathlib import Path

from controller_core.admin import OngoingReassignment
from controller_core.metadata import partition_change as pc
from controller_core.metadata.controller import Controller
from controller_core.metadata.image import MetadataImage
from controller_core.metadata.records import (
    ConfigRecord,
    PartitionRecord,
    Record,
    RegisterBrokerRecord,
    TopicRecord,
)
from controller_core.model import TopicPartition
from controller_core.orchestration.reassignment import (
    Limits,
    ReassignmentExecutor,
    ReassignmentPlan,
    _heads_to,
)
from tests.helpers import cluster, tp


def _java_hash_set_order(ids: list[int]) -> tuple[int, ...]:
    """The iteration order of a Java HashSet of these ids, the long way (Kafka parity tests
    check that one against Kafka's)."""
    return pc._hash_set_order(list(dict.fromkeys(ids)))


def test_hash_order_equals_the_java_hash_set_order() -> None:
    seed = random.randrange(2**32)
    print("seed", seed)
    rng = random.Random(seed)
    edges = [0xFFFF, 0x10000, 0x10001, 0x1000F, 16, 15, 0, -1]  # around the fast path's bounds
    for ids in ([*rng.sample(edges, 2), rng.randrange(1000)] for _ in range(200)):
        assert pc.hash_order(ids) == _java_hash_set_order(ids), ids
    for _ in range(20_000):
        n = rng.choice([0, 1, 2, 3, 4, 5, 11, 12, 13, 30])
        top = rng.choice([16, 40, 1000, 0xFFFF, 0x10000, 0x10010, 2**31 - 1])
        low = rng.choice([0, 0, 0, -3])
        ids = [rng.randint(low, top) for _ in range(n)]
        ids += rng.sample(ids, min(len(ids), rng.randint(0, 2)))  # repeats are dropped
        assert pc.hash_order(ids) == _java_hash_set_order(ids), ids


def test_heads_to_equals_comparing_the_ongoing_target() -> None:
    seed = random.randrange(2**32)
    print("seed", seed)
    rng = random.Random(seed)
    for _ in range(20_000):
        def ids(k: int) -> tuple[int, ...]:
            return tuple(rng.sample(range(8), k))
        target = ids(rng.randint(0, 4))
        removing = ids(rng.randint(0, 3))
        shape = rng.random()
        if shape < 0.4:  # as Kafka lists a move: its target, then what it removes
            replicas = target + tuple(r for r in removing if r not in target)
        elif shape < 0.6:
            replicas = target + removing  # a replica both kept and removing
        else:
            replicas = ids(rng.randint(0, 6))
        ongoing = OngoingReassignment(replicas, ids(rng.randint(0, 2)), removing)
        assert _heads_to(ongoing, target) == (ongoing.target == target), (ongoing, target)


class _Harness:
    def __init__(self) -> None:
        self.image = MetadataImage()
        self.log: list[Record] = []
        self.controller = Controller(self.image, self._emit)

    def _emit(self, record: Record) -> None:
        self.image.apply(record)
        self.log.append(record)

    def load(self, records: list[Record]) -> None:
        for r in records:
            self.image.apply(r)


def _history() -> list[Record]:
    """Partition 0 is moving from 3 replicas to 2 (4 while it moves, so the topic's
    replication factor, and with it its effective min.insync.replicas of 3, changes once it
    completes); partition 1's ISR is below that minimum, its other replicas eligible (ELR)."""
    return [
        *(RegisterBrokerRecord(b, None, fenced=False) for b in range(4)),
        TopicRecord("t", "id-t"),
        ConfigRecord("TOPIC", "t", "min.insync.replicas", "3"),
        PartitionRecord("t", 0, (0, 3, 1, 2), (0, 1, 2), 0, adding=(3,), removing=(1, 2)),
        PartitionRecord("t", 1, (0, 1, 2), (0,), 0, elr=(1, 2)),
    ]


def test_caught_up_replicas_sharing_topic_rules_write_the_same_records() -> None:
    """A catch-up of partition 0 changes the topic's rules: the next catch-up of the same
    run (partition 1) must not see the cached ones. Without the cache, and asked one at a
    time, the records are the reference."""
    catch_ups = [(TopicPartition("t", 0), 3), (TopicPartition("t", 1), 1)]
    alone, shared = _Harness(), _Harness()
    alone.load(_history())
    shared.load(_history())
    for part, broker in catch_ups:
        alone.controller.replica_caught_up(part, broker)
    rules_of: dict[str, pc.Rules] = {}
    for part, broker in catch_ups:
        shared.controller.replica_caught_up(part, broker, rules_of)
    assert len(alone.log) == 2
    assert alone.log[1].elr == ()  # the new minimum (2) is met: the ELR empties
    assert shared.log == alone.log


def test_bytes_moved_count_a_finished_move_once_as_the_next_one_starts(tmp_path: Path) -> None:
    """One move at a time: the pass that sees the first move end starts the second. The
    sizes that pass read name the first move's replica only — as many replicas as the moves
    now in flight add, but not theirs: its bytes count once (done), the new move's none yet;
    they never count twice, and the figure never falls."""
    c = cluster(tmp_path)
    plan, problems = ReassignmentPlan.from_moves(
        [(tp("orders", 0), [0, 1, 3]), (tp("orders", 1), [1, 2, 4])], limits=Limits(None, 1))
    assert not problems
    ex = ReassignmentExecutor(c, plan)
    assert ex.start() == []
    seen: list[tuple[int, int, int]] = []
    while not (p := ex.step()).phase.terminal:
        seen.append((p.done, p.moving, p.bytes_moved))
        c.advance(1)
    first = ex.move_bytes[tp("orders", 0)]
    assert first > 0
    assert (1, 1, first) in seen, seen  # the second move has just started
    moved = [b for _, _, b in seen]
    assert moved == sorted(moved), moved
    assert p.bytes_moved == p.bytes_total == first + ex.move_bytes[tp("orders", 1)]
