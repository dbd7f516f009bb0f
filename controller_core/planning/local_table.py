"""The partition table in the driver's memory: the same plan as Spark's, without a JVM.

A small plan on a local master spends most of its time starting Spark — the JVM, its
classes, the Python workers — not planning (20,000 partitions: ~4 s of rounds in a 19 s
run on a quiet machine). Here the rounds of :mod:`.rounds` scan a pandas copy of the table
in batches with the very functions Spark runs in ``mapInPandas`` (:mod:`.scoring`), and cut
them with the same ``best_per_source``; the partition ids are Spark's own hash
(:mod:`.pid`). The scorer treats each row on its own and the cut is a total order, so the
candidates, and so the plan, are the same as Spark's for the same snapshot and seed
(``tests/planning/test_local_table.py`` compares them). Loads are summed with numpy.

Large tables stay on Spark (see ``pipeline.DRIVER_PLAN_PARTITIONS``): this copy holds every
row in one process.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from controller_core.planning.balancer import Balancer, Candidate
from controller_core.planning.goals import Goal
from controller_core.planning.options import PlanOptions
from controller_core.planning.pid import partition_ids, topic_hash
from controller_core.planning.result import PartitionMove, PlanResult
from controller_core.planning.rounds import Stopwatch, plan, to_candidates
from controller_core.planning.schema import PARTITION_COLUMNS, PARTITIONS_FILE
from controller_core.planning.scoring import (
    RoundContext,
    _padded,
    _shares_a_rack,
    best_per_source,
    scorer_for,
)
from controller_core.planning.snapshot import Snapshot
from controller_core.planning.table import VIOLATION_ROWS, Changes, Finished

# rows per scored batch: bounds the (rows x destinations) arrays of the scorer
BATCH_ROWS = 4096


def _np() -> Any:
    return importlib.import_module("numpy")


class LocalTable:
    """The partition table as numpy/pandas in this process (see :class:`.table.PlanTable`)."""

    def __init__(self, snapshot_dir: Path, batch_rows: int = BATCH_ROWS) -> None:
        np = _np()
        pd = importlib.import_module("pandas")
        pq = importlib.import_module("pyarrow.parquet")
        table = pq.read_table(str(snapshot_dir / PARTITIONS_FILE),
                              columns=[c.name for c in PARTITION_COLUMNS])
        width = 8 if table.schema.field("partition").type.bit_width == 64 else 4
        topic = table.column("topic").to_pandas()
        codes, names = pd.factorize(topic)
        seeds = np.array([topic_hash(str(t)) for t in names], dtype=np.int64)[codes]
        part = table.column("partition").to_numpy().astype(np.int64)
        self.topic = topic.to_numpy(dtype=object)
        self.partition = part
        self.pid = partition_ids(seeds, part, width)
        # Arrow's lists of integers are lists of Python ints already
        self.replicas: list[list[int]] = table.column("replicas").to_pylist()
        self.leader = table.column("leader").to_numpy().astype(np.int64)
        self.size = table.column("size_bytes").to_numpy().astype(np.int64)
        # Spark: floor(rate + 0.5) as a long
        self.bin = np.floor(table.column("bytes_in_per_second").to_numpy() + 0.5) \
            .astype(np.int64)
        self.bout = np.floor(table.column("bytes_out_per_second").to_numpy() + 0.5) \
            .astype(np.int64)
        frame = pd.DataFrame({"pid": self.pid, "replicas": self.replicas,
                              "leader": self.leader, "size": self.size, "bin": self.bin,
                              "bout": self.bout})
        self._batches = [frame.iloc[i:i + batch_rows] for i in range(0, len(frame), batch_rows)]
        self._padded_ids: Any = None
        self._pid_order: Any = None  # argsort of pid, made once (see _rows_of)

    # -- PlanTable ----------------------------------------------------------------------

    def loads(self, broker_ids: Iterable[int]) -> dict[int, list[int]]:
        return _loads(self.replicas, self.leader, self.size, self.bin, self.bout, broker_ids,
                      self._ids())

    def per_rack(self, racks: int) -> list[float]:
        np = _np()
        ordered = np.sort(self.pid)  # (np.unique of 10^6 ids took ~1 s, a set of them 0.5 s)
        if (ordered[1:] == ordered[:-1]).any():
            raise RuntimeError("internal: partition id hash collision; rename a topic or "
                               "report")
        if racks < 2:
            return [0.0] * 5
        every = np.fromiter(map(len, self.replicas), dtype=np.int64,
                            count=len(self.replicas)) == racks
        return [float(every.sum()), 0.0, float(self.size[every].sum()),
                float(self.bin[every].sum()), 0.0]

    def any_rack_shared(self, bal: Balancer) -> bool:
        return bool(_rack_shared_rows(self.replicas, bal, self._ids()).any())

    def _ids(self) -> Any:
        """The snapshot's replicas as a padded matrix (see ``_padded``), made once."""
        if self._padded_ids is None and self.replicas:
            self._padded_ids = _padded(self.replicas, max(len(r) for r in self.replicas))
        return self._padded_ids

    def _rows_of(self, pids: Any) -> Any:
        """The rows of partition ids, by a binary search of the ids sorted once (a dict of
        the 10^6 ids of a large plan cost more). KeyError for an id not in the table."""
        np = _np()
        if self._pid_order is None:
            self._pid_order = np.argsort(self.pid, kind="stable")
        if not len(self.pid):
            if len(pids):
                raise KeyError(int(pids[0]))
            return np.zeros(0, dtype=np.int64)
        order = self._pid_order
        rows = order[np.minimum(np.searchsorted(self.pid[order], pids), len(order) - 1)]
        missing = np.nonzero(self.pid[rows] != pids)[0]
        if missing.size:
            raise KeyError(int(pids[missing[0]]))
        return rows

    def candidates(self, ctx: RoundContext, caps: dict[int, int], leaders: bool
                   ) -> list[Candidate]:
        pd = importlib.import_module("pandas")
        scorer = scorer_for(ctx, leaders)
        frames = [out for batch in self._batches if len(out := scorer(batch, ctx))]
        if not frames:
            return []
        return to_candidates(best_per_source(pd.concat(frames, ignore_index=True), caps))

    def scored(self) -> None:
        return None

    def finish(self, changes: Changes, broker_ids: Iterable[int], bal: Balancer,
               removed: set[int], pids: Iterable[int]) -> Finished:
        np = _np()
        rows = self._rows_of(np.fromiter(changes, dtype=np.int64, count=len(changes)))
        at_rows = rows.tolist()
        replicas = list(self.replicas)
        for r, (reps, _) in zip(at_rows, changes.values(), strict=True):
            replicas[r] = list(reps)
        leader = self.leader.copy()
        leader[rows] = np.fromiter((lead for _, lead in changes.values()), dtype=np.int64,
                                   count=len(changes))
        # the padded matrix of the snapshot with the changed rows padded anew
        ids = self._ids()
        if ids is not None and changes:
            changed = [replicas[r] for r in at_rows]
            if max(len(r) for r in changed) <= ids.shape[1]:
                ids = ids.copy()
                ids[rows] = _padded(changed, ids.shape[1])
            else:
                ids = None
        after = _loads(replicas, leader, self.size, self.bin, self.bout, broker_ids, ids)
        moved = [r for r in at_rows if replicas[r] != self.replicas[r]]
        # the moved rows' figures as Python values at once, not a numpy scalar per field
        at = np.array(moved, dtype=np.int64)
        size, topic = self.size[at].tolist(), [str(t) for t in self.topic[at].tolist()]
        part, lead_before = self.partition[at].tolist(), self.leader[at].tolist()
        order = sorted(range(len(moved)), key=lambda i: (size[i], topic[i], part[i]))
        moves = [PartitionMove(topic[i], part[i], tuple(self.replicas[moved[i]]),
                               tuple(replicas[moved[i]]), size[i], lead_before[i])
                 for i in order]
        left: list[tuple[str, int, list[int]]] = []
        if removed:
            for r, now in enumerate(replicas):
                if len(left) == VIOLATION_ROWS:
                    break
                if not removed.isdisjoint(now):
                    left.append((str(self.topic[r]), int(self.partition[r]), list(now)))
        shared_rows = np.nonzero(_rack_shared_rows(replicas, bal, ids))[0][:VIOLATION_ROWS]
        shared = [(str(self.topic[r]), int(self.partition[r]), list(replicas[r]),
                   int(self.size[r])) for r in shared_rows.tolist()]
        asked = list(pids)
        rows_asked = self._rows_of(np.array(asked, dtype=np.int64)).tolist()
        named = {pid: (str(self.topic[r]), int(self.partition[r]), list(replicas[r]))
                 for pid, r in zip(asked, rows_asked, strict=True)}
        return Finished(after, moves, left, shared, named)


def _loads(replicas: list[list[int]], leader: Any, size: Any, bin_: Any, bout: Any,
           broker_ids: Iterable[int], ids: Any = None) -> dict[int, list[int]]:
    """[replicas, leaders, disk, bytes in, bytes out] per broker, as ``spark_loads`` sums
    them: every broker asked for, and any other a replica names. ``ids``: ``replicas``
    padded already (see ``_padded``)."""
    np = _np()
    loads = {b: [0, 0, 0, 0, 0] for b in broker_ids}
    if not replicas:
        return loads
    if ids is None:
        ids = _padded(replicas, max(len(r) for r in replicas))
    rf = (ids >= 0).sum(axis=1)
    present = ids >= 0
    flat = ids[present]
    row = np.nonzero(present)[0]
    brokers, slot = _unique_ids(flat)
    k = len(brokers)
    is_leader = flat == leader[row]
    n = np.bincount(slot, minlength=k)
    leads = np.bincount(slot, weights=is_leader, minlength=k)
    # integer sums (bincount's float weights would round bytes beyond 2**53)
    disk = np.zeros(k, dtype=np.int64)
    np.add.at(disk, slot, size[row])
    nin = np.zeros(k, dtype=np.int64)
    np.add.at(nin, slot, bin_[row])
    nout = np.zeros(k, dtype=np.int64)
    out_rate = bout + bin_ * (rf - 1)
    np.add.at(nout, slot[is_leader], out_rate[row[is_leader]])
    for i, b in enumerate(brokers.tolist()):
        loads[int(b)] = [int(n[i]), int(leads[i]), int(disk[i]), int(nin[i]), int(nout[i])]
    return loads


def _unique_ids(ids: Any) -> tuple[Any, Any]:
    """``np.unique(ids, return_inverse=True)`` of broker ids (1-d): by a table indexed by
    the id when the ids are >= 0 and not far larger than their count, O(n) where unique
    sorts the ~3 * 10^6 replicas of a 10^6-partition plan (twice a plan)."""
    np = _np()
    if ids.size == 0 or int(ids.min()) < 0 or int(ids.max()) > 4 * ids.size + 65536:
        brokers, slot = np.unique(ids, return_inverse=True)
        return brokers, slot
    present = np.bincount(ids) > 0
    brokers = np.flatnonzero(present).astype(ids.dtype)
    index = np.zeros(present.size, dtype=np.intp)
    index[brokers] = np.arange(brokers.size)
    return brokers, index[ids]


def _rack_shared_rows(replicas: list[list[int]], bal: Balancer, ids: Any = None) -> Any:
    """bool per row: replicas share a rack while the racks allow otherwise (a broker
    without a rack counts as the rack "none"), as Spark's ``_rack_dup_filter``. ``ids``:
    ``replicas`` padded already (see ``_padded``)."""
    np = _np()
    if not bal.racks or not replicas:
        return np.zeros(len(replicas), dtype=bool)
    names = sorted({r for r in bal.rack_of.values() if r is not None})
    index = {r: i for i, r in enumerate(names)}
    if ids is None:
        ids = _padded(replicas, max(len(r) for r in replicas))
    # broker id -> rack index (-1: no rack or an unknown broker) by one sorted lookup of
    # every cell; bal.racks is not empty, so neither is rack_of
    of = {b: -1 if r is None else index[r] for b, r in bal.rack_of.items()}
    known = np.array(sorted(of), dtype=np.int64)
    rack_idx = np.array([of[b] for b in known.tolist()], dtype=np.int64)
    at = np.minimum(np.searchsorted(known, ids), len(known) - 1)
    racks = np.where(known[at] == ids, rack_idx[at], np.where(ids >= 0, -1, -2))
    rf = (ids >= 0).sum(axis=1)
    return _shares_a_rack(racks, rf, len(bal.racks))


def run_plan_on_driver(snapshot_dir: Path, snapshot: Snapshot, goal: Goal,
                       options: PlanOptions | None = None) -> PlanResult:
    """Plan ``goal`` for the (validated) snapshot in ``snapshot_dir`` in this process."""
    started = time.monotonic()
    clock = Stopwatch()
    table = LocalTable(snapshot_dir)
    clock.lap("load")
    return plan(table, snapshot, goal, options or PlanOptions(), started, clock)
