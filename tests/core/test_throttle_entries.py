"""The compact throttle entries (bitmaps, EntrySet, the by-broker replica lists) against the
plain sets of Entry and (partition, broker) tuples they replace, and what a sync costs in
memory with many runs' markers in place."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller_core import bitmaps
from controller_core.config import EmbeddedClusterSpec
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.metadata.controller import (
    format_throttled_replicas,
    format_throttled_replicas_by_broker,
    parse_throttled_replicas,
    parse_throttled_replicas_by_broker,
)
from controller_core.model import TopicPartition
from controller_core.orchestration import throttles
from controller_core.orchestration.reassignment import (
    Limits,
    ReassignmentExecutor,
    ReassignmentPlan,
)
from controller_core.orchestration.throttle_entries import Entry, EntrySet

entries = st.builds(Entry, st.sampled_from(["a", "b.x", "orders"]),
                    st.integers(0, 700), st.integers(0, 9), st.sampled_from(["L", "F", "D"]))
entry_sets = st.frozensets(entries, max_size=60)


@given(st.sets(st.integers(0, 5000), max_size=80))
def test_a_bitmap_holds_exactly_its_members(ms: set[int]) -> None:
    bits = bitmaps.from_members(ms)
    assert bitmaps.members(bits) == sorted(ms)
    assert all(bitmaps.contains(bits, m) for m in ms)
    assert not any(bitmaps.contains(bits, m) for m in (-1, 5001, *(m + 1 for m in ms))
                   if m not in ms)


def test_a_bitmap_refuses_a_negative_member() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        bitmaps.from_members([3, -2])


@given(entry_sets, entry_sets)
def test_entry_sets_behave_as_sets_of_entries(a: frozenset[Entry], b: frozenset[Entry]) -> None:
    x, y = EntrySet.of(a), EntrySet.of(b)
    assert x == a and set(x) == a and len(x) == len(a) and bool(x) == bool(a)
    assert set(x | y) == a | b and set(x - y) == a - b and set(x & y) == a & b
    assert (x <= y) == (a <= b)
    assert (x == y) == (a == b)
    assert set(EntrySet.union([x, y, x])) == a | b
    assert all(e in x for e in a) and not any(e in x for e in b - a)
    assert {b: set(s) for b, s in x.by_broker().items()} == {
        e.broker: {f for f in a if f.broker == e.broker} for e in a}
    assert {k: set(s) for k, s in x.by_list().items()} == {
        (e.topic, e.side): {f for f in a if (f.topic, f.side) == (e.topic, e.side)} for e in a}
    assert set(x.where(sides=["L", "D"])) == {e for e in a if e.side in "LD"}
    assert x.topics() == {e.topic for e in a} and x.sides() == {e.side for e in a}
    keep = {"a": bitmaps.from_members(range(0, 700, 3))}
    assert set(x.masked(keep, 0)) == {e for e in a if e.topic == "a" and e.partition % 3 == 0}
    assert set(x.masked(keep, ~0)) == {e for e in a if e.topic != "a" or e.partition % 3 == 0}
    # what a marker writes and reads back
    by_broker = x.by_broker()
    for broker, s in by_broker.items():
        assert s.encode() == sorted(e.encode() for e in s)
        assert EntrySet.decode(s.encode(), broker) == s


def test_entry_sets_at_their_edges() -> None:
    """What random sets rarely hit: partition 0 alone, equal sizes with other members,
    something that is not an Entry, a key the other set lacks."""
    x = EntrySet.of([Entry("t", 5, 1, "L"), Entry("t", 9, 1, "L")])
    same_size = {Entry("t", 5, 1, "L"), Entry("t", 9, 2, "L")}
    assert x != same_size and x != EntrySet.of(same_size)
    assert ("t", 5, 1, "L") not in x and 7 not in x
    assert x.partitions() == {"t": (1 << 5) | (1 << 9)}
    assert EntrySet.of([Entry("t", 1, 1, "L")]).partitions() == {"t": 2}
    assert not EntrySet.of([Entry("t", 0, 1, "L")]) <= EntrySet.of([Entry("t", 0, 2, "L")])
    assert EntrySet.of([Entry("t", 0, 1, "L")]) <= x | EntrySet.of([Entry("t", 0, 1, "L")])
    assert EntrySet.of([Entry("u", 3, 1, "F")]) <= EntrySet.of([Entry("u", 3, 1, "F")])


def test_a_marker_item_that_is_not_an_entry_is_left_out() -> None:
    got = EntrySet.decode(["L:1:t", "X:1:t", "L:x:t", "L:1:", "F:²:t", 7, "D:0:t.y"], 5)
    assert got == {Entry("t", 1, 5, "L"), Entry("t.y", 0, 5, "D")}
    assert throttles.Marker("1", {}, {Entry("t", 1, 5, "L")}).entries == EntrySet.of(
        [Entry("t", 1, 5, "L")])  # a set given to a Marker is kept compact


@given(st.sets(st.tuples(st.integers(0, 3000), st.integers(0, 12)), max_size=80))
def test_replica_lists_by_broker_equal_the_tuple_forms(pairs: set[tuple[int, int]]) -> None:
    text = format_throttled_replicas(pairs)
    by_broker = parse_throttled_replicas_by_broker(text)
    assert isinstance(by_broker, dict)
    assert {(p, b) for b, bits in by_broker.items() for p in bitmaps.members(bits)} == pairs
    assert format_throttled_replicas_by_broker(by_broker) == text
    assert parse_throttled_replicas(text) == pairs


@pytest.mark.parametrize("value", [" 0:1 , 12:3", "0:1,12:3", "12:3,0:1, 0:1"])
def test_a_list_with_spaces_or_repeats_parses_as_the_plain_one(value: str) -> None:
    assert parse_throttled_replicas(value) == {(0, 1), (12, 3)}
    assert parse_throttled_replicas_by_broker(value) == {1: 1, 3: 1 << 12}


@pytest.mark.parametrize("value", ["0:1,", "0:1,,2:3", "0:x", "0;1", "1:2:3", "0:²", "-1:2",
                                   "0:1 2:3"])
def test_a_malformed_list_is_not_ours_in_either_form(value: str) -> None:
    assert parse_throttled_replicas(value) is None
    assert parse_throttled_replicas_by_broker(value) is None


@pytest.mark.parametrize("value", ["*", " * "])
def test_the_wildcard_is_said_in_either_form(value: str) -> None:
    assert parse_throttled_replicas(value) == parse_throttled_replicas_by_broker(value) == "*"


def test_a_sync_with_many_runs_markers_costs_little_memory_per_entry(tmp_path: Path) -> None:
    """Every run on a cluster shares the markers, and each start's sync reads them all: as an
    object per entry that cost ~270 bytes each at its peak (131 MiB at 480,000 entries, the
    operator's peak in `operator_bench.py memory`), as bitmaps 45. Eight runs of 1,000 moves
    here, 28,792 entries: 558 bytes each as objects, 209 as bitmaps — most of it what the
    embedded cluster allocates to answer, which a served cluster does in its own process."""
    spec = EmbeddedClusterSpec.model_validate({
        "brokers": [{"id": i, "rack": "abc"[i % 3]} for i in range(6)],
        "topics": [{"name": "orders", "partitions": 10_000, "replicationFactor": 3,
                    "sizeBytesPerPartition": 10_000_000}]})
    c = EmbeddedCluster.open(tmp_path / "c", spec)

    def plan(k: int) -> ReassignmentPlan:
        moves = [(TopicPartition("orders", p), [(p + 3) % 6, (p + 4) % 6, (p + 5) % 6])
                 for p in range(k * 1000, (k + 1) * 1000)]
        return ReassignmentPlan.from_moves(moves, limits=Limits(1000, 1000), additional=True)[0]

    for k in range(8):
        ex = ReassignmentExecutor(c, plan(k))
        assert not ex.start()
        ex.step()
    owned = sum(len(m.entries) for m in throttles.placed(c).values())
    assert owned > 25_000  # six per move, less the replicas a move keeps
    ex = ReassignmentExecutor(c, plan(8))
    assert not ex.start()
    moves = {tp: throttles.Move(ex.original[tp], ex.adding[tp]) for tp in ex.plan.moves
             if ex.adding.get(tp)}
    gc.collect()
    tracemalloc.start()
    try:
        synced = throttles.sync(c, moves, 1000, scope=set(ex.plan.moves), legacy_check=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert synced.settled
    after = sum(len(m.entries) for m in throttles.placed(c).values())
    assert after == owned + len(throttles.wanted_entries(moves)) > owned  # the new run's too
    assert peak / owned < 300, f"{peak / owned:.0f} bytes per marker entry at the sync's peak"


def test_a_list_of_many_slices_reads_and_writes_as_the_tuple_forms() -> None:
    """Longer than a formatting slice, unsorted, a partition on several brokers."""
    pairs = {(p * 7919 % 30_011, (p * 31) % 9) for p in range(30_011)} | {(5, 0), (5, 3)}
    text = format_throttled_replicas(pairs)
    by_broker = parse_throttled_replicas_by_broker(text)
    assert isinstance(by_broker, dict)
    assert format_throttled_replicas_by_broker(by_broker) == text
    assert {(p, b) for b, bits in by_broker.items() for p in bitmaps.members(bits)} == pairs


@pytest.mark.parametrize("slice_", [3, 10_000])
def test_other_runs_partitions_are_asked_a_slice_at_a_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slice_: int) -> None:
    """Another run's entries stay while its partitions are reassigned and go once they are
    not, whichever slice of the question each partition was in."""
    spec = EmbeddedClusterSpec.model_validate({
        "brokers": [{"id": i, "rack": "abc"[i % 3]} for i in range(6)],
        "topics": [{"name": n, "partitions": 20, "replicationFactor": 3,
                    "sizeBytesPerPartition": 10_000_000} for n in ("a", "b")]})
    c = EmbeddedCluster.open(tmp_path / "c", spec)
    moves = [(TopicPartition(t, p), [(p + 3) % 6, (p + 4) % 6, (p + 5) % 6])
             for t in ("a", "b") for p in range(20)]
    other = ReassignmentExecutor(c, ReassignmentPlan.from_moves(
        moves, limits=Limits(1000, 40))[0])
    assert not other.start()
    other.step()
    moving = sorted(other.moving)
    assert len(moving) > 10
    stopped = set(moving[::4])
    results = c.alter_partition_reassignments(dict.fromkeys(stopped))  # cancelled
    assert all(r.ok for r in results.values()) and len(results) == len(stopped)
    asked: list[int] = []
    listing = c.list_partition_reassignments

    def counted(partitions: list[TopicPartition] | None = None) -> object:
        asked.append(len(partitions or []))
        return listing(partitions)

    monkeypatch.setattr(c, "list_partition_reassignments", counted)
    monkeypatch.setattr(throttles, "_LIST_SLICE", slice_)
    assert throttles.sync(c, {}, 1000, scope={TopicPartition("a", 99)}).settled
    left = {e.tp for m in throttles.placed(c).values() for e in m.entries}
    assert left == set(moving) - stopped
    assert max(asked) <= slice_ and sum(asked) == len(moving)
