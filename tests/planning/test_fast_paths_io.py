"""Fast paths of reading the snapshot, finishing and rendering the plan, against the plain
code they stand for.

Reading and validating a 10^6-partition snapshot, finishing its plan and rendering it were
made faster (issue 22) without changing what they find or write: here each shortcut is
compared with the straightforward computation on random inputs, so one row judged
differently fails.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from controller_core.planning import snapshot as snapshot_module
from controller_core.planning.balancer import Balancer
from controller_core.planning.local_table import LocalTable, _loads, _unique_ids
from controller_core.planning.objective import compute_targets
from controller_core.planning.render import plan_id
from controller_core.planning.result import PartitionMove
from controller_core.planning.rounds import _int_tuples
from controller_core.planning.schema import PARTITIONS_FILE
from controller_core.planning.scoring import _padded
from controller_core.planning.snapshot import (
    PartitionTable,
    SnapshotError,
    read_snapshot,
    validate_partitions,
    write_snapshot,
)
from controller_core.planning.synthetic import make_snapshot
from controller_core.planning.table import VIOLATION_ROWS, Changes, Finished

BROKERS = set(range(0, 40, 2)) | {1001, 1003}


def sound_table(rng: random.Random, rows: int) -> PartitionTable:
    t = PartitionTable()
    for i in range(rows):
        replicas = rng.sample(sorted(BROKERS), rng.randint(1, 4))
        t.append(f"t{i % 7}", i // 7, replicas, rng.choice(replicas),
                 rng.randint(0, 10**12), rng.random() * 100, 0.0)
    return t


def spoil(rng: random.Random, t: PartitionTable) -> str:
    """One random fault of a row that validate_partitions names; returns its kind."""
    row = rng.randrange(len(t))
    kind = rng.choice(["topic", "partition", "duplicate", "empty", "repeat", "unknown",
                       "leader", "size", "rate_nan", "rate_negative", "negative_broker"])
    if kind == "topic":
        t.topic[row] = ""
    elif kind == "partition":
        t.partition[row] = -1
    elif kind == "duplicate":
        other = (row + 1) % len(t)
        t.topic[row], t.partition[row] = t.topic[other], t.partition[other]
    elif kind == "empty":
        t.replicas[row] = []
    elif kind == "repeat":
        t.replicas[row] = [*t.replicas[row], t.replicas[row][0]]
    elif kind == "unknown":
        t.replicas[row] = [*t.replicas[row][:-1], 5]
    elif kind == "leader":
        t.leader[row] = next(b for b in sorted(BROKERS) if b not in t.replicas[row])
    elif kind == "size":
        t.size_bytes[row] = -1
    elif kind == "rate_nan":
        t.bytes_in_per_second[row] = float("nan")
    elif kind == "rate_negative":
        t.bytes_out_per_second[row] = -0.5
    else:
        t.replicas[row] = [-4]
        t.leader[row] = -4
    return kind


def shuffled(rng: random.Random, t: PartitionTable) -> PartitionTable:
    """The same rows in another order (partition ids no longer sorted within a topic)."""
    order = list(range(len(t)))
    rng.shuffle(order)
    out = PartitionTable()
    for r in order:
        out.append(t.topic[r], t.partition[r], t.replicas[r], t.leader[r], t.size_bytes[r],
                   t.bytes_in_per_second[r], t.bytes_out_per_second[r])
    return out


def loop_problems(t: PartitionTable, brokers: set[int], monkeypatch: pytest.MonkeyPatch
                  ) -> list[str]:
    with monkeypatch.context() as m:
        m.setattr(snapshot_module, "_every_row_sound", lambda table, ids: False)
        return validate_partitions(t, brokers)


def test_the_numpy_row_check_is_the_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    kinds: dict[bool, int] = {True: 0, False: 0}
    for case in range(300):
        t = sound_table(rng, rng.randint(1, 60))
        for _ in range(case % 3):
            spoil(rng, t)
        if case % 2:
            t = shuffled(rng, t)
        sound = not loop_problems(t, BROKERS, monkeypatch)
        assert snapshot_module._every_row_sound(t, BROKERS) == sound
        kinds[sound] += 1
        # with the fast path on, the problems are the loop's, to the letter
        assert validate_partitions(t, BROKERS) == loop_problems(t, BROKERS, monkeypatch)
    assert kinds[True] > 50 and kinds[False] > 50
    assert snapshot_module._every_row_sound(PartitionTable(), BROKERS)
    assert not snapshot_module._every_row_sound(sound_table(rng, 3), set())


def test_values_not_plain_integers_are_left_to_the_loop(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    t = sound_table(random.Random(2), 20)
    assert snapshot_module._every_row_sound(t, BROKERS)
    t.partition[3] = 10**6 + 0.5  # type: ignore[call-overload]
    t.size_bytes[5] = 2**70
    assert not snapshot_module._every_row_sound(t, BROKERS)
    assert validate_partitions(t, BROKERS) == loop_problems(t, BROKERS, monkeypatch) == []
    negative = sound_table(random.Random(2), 20)
    negative.replicas[0] = [*negative.replicas[0][:1], -3]
    negative.leader[0] = -3
    assert not snapshot_module._every_row_sound(negative, BROKERS | {-3})
    assert validate_partitions(negative, BROKERS | {-3}) == []


def test_odd_broker_and_partition_ids_give_the_loops_verdict(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """Broker ids too large for the table, partition ids too large for one sort key, a row
    far longer than the others, columns of different lengths: the loop's verdict each."""
    rng = random.Random(11)
    huge = BROKERS | {10**12}
    for case in range(40):
        t = sound_table(rng, 30)
        t.replicas[case % 30] = [10**12]
        t.leader[case % 30] = 10**12
        for _ in range(case % 2):
            spoil(rng, t)
        want = loop_problems(t, huge, monkeypatch)
        assert not snapshot_module._every_row_sound(t, huge)  # left to the loop
        assert validate_partitions(t, huge) == want
    for case in range(40):
        t = shuffled(rng, sound_table(rng, 30))
        t.partition[case % 30] = 2**62 + case  # the set of (topic, partition), not one key
        if case % 2:
            t.topic[(case + 1) % 30], t.partition[(case + 1) % 30] = \
                t.topic[case % 30], t.partition[case % 30]
        sound = not loop_problems(t, BROKERS, monkeypatch)
        assert sound == (case % 2 == 0)
        assert snapshot_module._every_row_sound(t, BROKERS) == sound
        assert validate_partitions(t, BROKERS) == loop_problems(t, BROKERS, monkeypatch)
    long = PartitionTable()
    for i in range(20_000):
        long.append("t", i, [0], 0, 1, 0.0, 0.0)
    long.replicas[7] = sorted(BROKERS)
    assert not snapshot_module._every_row_sound(long, BROKERS)  # no 20,000 x 22 matrix
    assert validate_partitions(long, BROKERS) == []
    ragged = sound_table(rng, 10)
    ragged.replicas.append([0])
    assert not snapshot_module._every_row_sound(ragged, BROKERS)
    with pytest.raises(ValueError):
        validate_partitions(ragged, BROKERS)


def test_nulls_are_found_by_arrow_and_named_by_row(tmp_path: Path) -> None:
    d = tmp_path / "s"
    write_snapshot(make_snapshot(brokers=6, partitions=30, seed=3), d)
    read_snapshot(d)  # sound
    table = pq.read_table(d / PARTITIONS_FILE)
    replicas = table.column("replicas").to_pylist()
    replicas[17] = [replicas[17][0], None, replicas[17][2]]
    replicas[9] = None
    leader = table.column("leader").to_pylist()
    leader[4] = None
    table = table.set_column(table.schema.get_field_index("replicas"), "replicas",
                             pa.array(replicas, table.schema.field("replicas").type))
    table = table.set_column(table.schema.get_field_index("leader"), "leader",
                             pa.array(leader, table.schema.field("leader").type))
    pq.write_table(table, d / PARTITIONS_FILE, row_group_size=4)  # read as 8 chunks
    assert pq.read_table(d / PARTITIONS_FILE).column("replicas").num_chunks > 1
    with pytest.raises(SnapshotError) as e:
        read_snapshot(d)
    assert e.value.problems == [
        "partitions.parquet: row 9: field 'replicas' is null; it is required",
        "partitions.parquet: row 17: field 'replicas' holds a null broker id",
        "partitions.parquet: row 4: field 'leader' is null; it is required"]


@pytest.mark.parametrize("top", [50, 10**9])  # the table, and np.unique for large ids
def test_unique_ids_is_numpys_unique(top: int) -> None:
    rng = np.random.default_rng(top)
    for n in (0, 1, 500):
        ids = rng.integers(0, top, size=n)
        brokers, slot = _unique_ids(ids)
        want_b, want_s = np.unique(ids, return_inverse=True)
        assert brokers.tolist() == want_b.tolist()
        assert slot.tolist() == want_s.tolist()
        assert brokers.dtype == ids.dtype


def test_rows_of_is_the_dict_of_partition_ids(tmp_path: Path) -> None:
    d = tmp_path / "s"
    write_snapshot(make_snapshot(brokers=6, partitions=300, seed=5), d)
    table = LocalTable(d)
    row_of = {pid: r for r, pid in enumerate(table.pid.tolist())}
    asked = random.Random(1).sample(sorted(row_of), 120)
    assert table._rows_of(np.array(asked, dtype=np.int64)).tolist() == \
        [row_of[p] for p in asked]
    assert table._rows_of(np.zeros(0, dtype=np.int64)).tolist() == []
    missing = next(p for p in range(10**6) if p not in row_of)
    with pytest.raises(KeyError):
        table._rows_of(np.array([asked[0], missing], dtype=np.int64))


def finish_by_dict(t: LocalTable, changes: Changes, broker_ids: list[int], bal: Balancer,
                   removed: set[int], pids: list[int]) -> Finished:
    """LocalTable.finish as it was: the rows by a dict of every partition id."""
    row_of = dict(zip(t.pid.tolist(), range(len(t.pid)), strict=True))
    replicas = list(t.replicas)
    leader = t.leader.copy()
    for pid, (reps, lead) in changes.items():
        replicas[row_of[pid]] = list(reps)
        leader[row_of[pid]] = lead
    after = _loads(replicas, leader, t.size, t.bin, t.bout, broker_ids,
                   _padded(replicas, max(map(len, replicas))))
    moved = [row_of[pid] for pid, (reps, _) in changes.items()
             if list(reps) != t.replicas[row_of[pid]]]
    moved.sort(key=lambda r: (int(t.size[r]), str(t.topic[r]), int(t.partition[r])))
    moves = [PartitionMove(str(t.topic[r]), int(t.partition[r]), tuple(t.replicas[r]),
                           tuple(replicas[r]), int(t.size[r]), int(t.leader[r]))
             for r in moved]
    left = [(str(t.topic[r]), int(t.partition[r]), list(now))
            for r, now in enumerate(replicas) if not removed.isdisjoint(now)][:VIOLATION_ROWS]
    shared = [(str(t.topic[r]), int(t.partition[r]), list(replicas[r]), int(t.size[r]))
              for r in range(len(replicas))
              if len({bal.rack_of.get(b) or "none" for b in replicas[r]}) <
              min(len(replicas[r]), len(set(bal.rack_of.values())))][:VIOLATION_ROWS]
    rows = {pid: (str(t.topic[row_of[pid]]), int(t.partition[row_of[pid]]),
                  list(replicas[row_of[pid]])) for pid in pids}
    return Finished(after, moves, left, shared, rows)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_finish_is_the_finish_by_a_dict_of_rows(tmp_path: Path, seed: int) -> None:
    """Moved rows, rows moved back, leaders changed only, a removed broker, rows asked for
    by id (unsorted, repeated): the same Finished as the dict of every partition id gave."""
    d = tmp_path / "s"
    snap = make_snapshot(brokers=9, partitions=400, seed=seed, topics=5)
    write_snapshot(snap, d)
    table = LocalTable(d)
    ids = snap.broker_ids()
    loads = table.loads(ids)
    bal = Balancer(snap.brokers, loads, compute_targets(snap.brokers, set(ids), [1.0] * 5),
                   dest_ids=set(ids), removed=set())
    rng = random.Random(seed)
    pids = table.pid.tolist()
    changes: dict[int, tuple[tuple[int, ...], int]] = {}
    for r in rng.sample(range(len(pids)), 120):
        reps = list(table.replicas[r])
        kind = r % 3
        if kind == 0:  # moved: one replica to a broker outside the row
            reps[rng.randrange(len(reps))] = rng.choice([b for b in ids if b not in reps])
        elif kind == 1:  # moved and back, or only the leader changed
            pass
        else:  # reordered
            reps.reverse()
        changes[pids[r]] = (tuple(reps), rng.choice(reps))
    asked = [*rng.sample(pids, 7), pids[0], *list(changes)[:3], pids[0]]
    for removed in (set(), {ids[2]}):
        got = table.finish(changes, ids, bal, removed, asked)
        assert got == finish_by_dict(table, changes, ids, bal, removed, asked)
        assert got.moves and got.rows and (got.drained_left or not removed)
    empty = table.finish({}, ids, bal, set(), [])
    assert empty == finish_by_dict(table, {}, ids, bal, set(), [])
    assert empty.loads == loads and not empty.moves
    with pytest.raises(KeyError):
        table.finish({next(p for p in range(10**6) if p not in set(pids)): ((0,), 0)}, ids,
                     bal, set(), [])


def test_plan_id_is_the_digest_of_each_line_in_turn() -> None:
    moves = [PartitionMove(f"t-{i % 3}", i, (1, 2), (2, 3 + i % 2), 10 * i, 1,
                           None if i % 2 else ("/a", "/b"), None if i % 2 else ("/b", "/a"))
             for i in range(9)]
    h = hashlib.sha256(b"demo\nrebalance\n")
    for m in moves:
        dirs = "" if m.dirs_after is None else f"\0{list(m.dirs_after)}"
        h.update(f"{m.topic}\0{m.partition}\0{list(m.after)}{dirs}\n".encode())
    assert plan_id(moves, "demo", "rebalance") == h.hexdigest()[:8]
    assert plan_id(moves[1:], "demo", "rebalance") != h.hexdigest()[:8]


def test_int_tuples_of_lists_and_of_arrow_arrays() -> None:
    lists = [[3, 1], [], [7]]
    assert _int_tuples(lists) == [(3, 1), (), (7,)]
    arrays = [np.array(x, dtype=np.int32) for x in lists]
    got = _int_tuples([arrays[0], lists[1], arrays[2]])
    assert got == [(3, 1), (), (7,)]
    assert all(type(v) is int for t in got for v in t)


def test_a_partition_id_collision_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "s"
    write_snapshot(make_snapshot(brokers=6, partitions=50, seed=2), d)
    table = LocalTable(d)
    table.replicas[3] = table.replicas[3][:2]  # a row on two of the three racks
    every = np.array([len(r) == 3 for r in table.replicas], dtype=bool)
    assert table.per_rack(3) == [float(every.sum()), 0.0, float(table.size[every].sum()),
                                 float(table.bin[every].sum()), 0.0]
    assert table.per_rack(1) == [0.0] * 5
    table.pid[17] = table.pid[40]
    with pytest.raises(RuntimeError, match="partition id hash collision"):
        table.per_rack(3)
