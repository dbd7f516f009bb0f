"""Vectorised scoring of candidate moves — the per-partition work the Spark job distributes.

Runs inside Spark's ``mapInPandas`` on batches of partitions. Each function is pure: a batch
of rows and a :class:`RoundContext` (the broker-level figures of the current round, small
enough to ship with the closure) in, candidate rows out. numpy/pandas are imported lazily.

A candidate says: "replica ``pos`` of partition ``pid`` may leave ``src`` for one of
``dests``". Destinations are drawn by a weighted race (Efraimidis-Spirakis: key
``-ln(u)/w``) with the estimated gain as the weight and ``u`` a hash of (seed, round,
partition, broker); candidates then spread over the brokers that want them instead of all
piling onto the single most underloaded one, and the draw is reproducible.
"""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from controller_core.planning.objective import DISK, LEADERS, NET_IN, NET_OUT, REPLICAS

CANDIDATE_COLUMNS = ("pid", "pos", "src", "mandatory", "dests", "priority", "replicas",
                     "leader", "size", "bin", "bout")


def _np() -> Any:
    return importlib.import_module("numpy")


def _pd() -> Any:
    return importlib.import_module("pandas")


@dataclass(frozen=True, slots=True)
class RoundContext:
    """Broker figures of one round, indexed by dense broker slot (see ``slot_of``)."""

    slot_of: Any          # int64[max_id + 1]: broker id -> slot, -1 unknown
    broker_ids: Any       # int64[k]
    excess: Any           # float64[k, 5]: load - target
    band: Any             # float64[k, 5]
    target: Any           # float64[k, 5]
    coef: Any             # float64[5]: 2·w / mean²
    free_disk: Any        # float64[k]: capacity - disk load
    rack: Any             # int64[k]: rack index, -1 when brokers have no racks
    n_racks: int          # racks among the eligible brokers (0: no racks)
    is_source: Any        # bool[k]
    is_removed: Any       # bool[k]
    dest_slots: Any       # int64[d]: brokers that may receive
    seed: int
    choices: int          # destinations returned per candidate
    mean_size: float      # mean replica size, bytes
    relaxed: bool = False  # a giver may end below its band (see Balancer.relaxed)
    repair: bool = False  # replicas sharing a rack are moved even off brokers that do not give
    # pid -> (replicas, leader) of every partition the plan changed so far: the table in
    # Spark keeps the snapshot's assignment, each batch is brought up to date here
    changes: Mapping[int, tuple[tuple[int, ...], int]] = field(default_factory=dict)
    # bool[k]: the brokers of a demote round (demote-brokers); None: not a demote round
    is_demoted: Any = None


Scorer = Callable[[Any, RoundContext], Any]


def with_changes(pdf: Any, changes: Mapping[int, tuple[tuple[int, ...], int]]) -> Any:
    """The batch with the plan's changes so far applied (replicas and leader)."""
    if not changes:
        return pdf
    np, pd = _np(), _pd()
    pids = pdf["pid"].to_numpy(np.int64)
    hit = np.fromiter((int(p) in changes for p in pids), dtype=bool, count=len(pids))
    if not hit.any():
        return pdf
    pdf = pdf.copy()
    rows = np.nonzero(hit)[0]
    new = [changes[int(pids[r])] for r in rows]
    replicas = list(pdf["replicas"])
    for r, (reps, _) in zip(rows, new, strict=True):
        replicas[r] = list(reps)
    pdf["replicas"] = pd.Series(replicas, index=pdf.index, dtype=object)
    leaders = pdf["leader"].to_numpy(np.int64).copy()
    leaders[rows] = [leader for _, leader in new]
    pdf["leader"] = leaders
    return pdf


def _shares_a_rack(racks: Any, rf: Any, n_racks: int) -> Any:
    """Rows with two replicas in one rack (a broker without a rack counts as one rack,
    "no rack") while the racks are enough for all of them."""
    np = _np()
    width = racks.shape[1]
    dup = np.zeros(racks.shape[0], dtype=bool)
    for i in range(width):
        for k in range(i + 1, width):
            dup |= (racks[:, i] == racks[:, k]) & (racks[:, k] != -2)
    return dup & (rf <= n_racks)


_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


def uniform(a: Any, b: Any, seed: int) -> Any:
    """Deterministic uniforms in (0, 1) from two int arrays (splitmix64 finaliser)."""
    np = _np()
    with np.errstate(over="ignore"):
        x = (a.astype(np.uint64) * np.uint64(_GOLDEN)) ^ \
            (b.astype(np.uint64) * np.uint64(_MIX1)) ^ \
            np.uint64(seed & 0xFFFFFFFFFFFFFFFF)
    return _mixed_to_unit(x)


def _mixed_to_unit(x: Any) -> Any:
    """The rest of :func:`uniform` on its first mix ``x`` (uint64, overwritten), in place."""
    np = _np()
    t = np.empty_like(x)
    with np.errstate(over="ignore"):
        x ^= np.right_shift(x, np.uint64(30), out=t)
        x *= np.uint64(_MIX1)
        x ^= np.right_shift(x, np.uint64(27), out=t)
        x *= np.uint64(_MIX2)
        x ^= np.right_shift(x, np.uint64(31), out=t)
        x >>= np.uint64(11)
    u = x.astype(np.float64)
    u *= 2.0**-53
    u += 2.0**-54
    return u


def _padded(lists: Any, width: int) -> Any:
    """The lists as rows of an int64 array, padded with -1 to ``width`` (at least the
    longest). Flattened in one pass and scattered at once: a numpy slice assignment per
    row cost a second a million rows."""
    np = _np()
    n = len(lists)
    out = np.full((n, width), -1, dtype=np.int64)
    if n == 0:
        return out
    lengths = np.fromiter(map(len, lists), dtype=np.int64, count=n)
    total = int(lengths.sum())
    flat = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=total)
    if int(lengths.min()) == width:  # every list as long as the widest: already a matrix
        return flat.reshape(n, width)
    rows = np.repeat(np.arange(n), lengths)
    cols = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    out[rows, cols] = flat
    return out


def _race(weights: Any, feasible: Any, pid: Any, dest_ids: Any, seed: int, choices: int,
          positive: bool = False) -> tuple[Any, Any]:
    """Top ``choices`` destinations per row by weighted race; (indices, key is finite: a
    prefix of each row). ``positive``: every feasible weight is known to be > 0."""
    np = _np()
    # The hash and its log only where the key is finite, the row's and the column's factor
    # of the hash's first mix once each: every cell's key is the one uniform() gives over
    # the whole matrix. Scoring draws each group of rows over the columns it may take, so
    # often every cell is drawn: then the matrix is hashed whole, without the scatter.
    drawn = feasible if positive else feasible & (weights > 0)
    n_rows, n_cols = weights.shape
    with np.errstate(over="ignore"):
        row_mix = (pid.astype(np.uint64) * np.uint64(_GOLDEN)) ^ \
            np.uint64(seed & 0xFFFFFFFFFFFFFFFF)
        col_mix = dest_ids.astype(np.uint64) * np.uint64(_MIX1)
    if drawn.all():
        u = _mixed_to_unit(np.bitwise_xor(row_mix[:, None], col_mix[None, :]).ravel())
        np.log(u, out=u)
        np.negative(u, out=u)
        u /= weights.ravel()
        key = u.reshape(n_rows, n_cols)
    else:
        flat = np.flatnonzero(drawn)
        counts = np.count_nonzero(drawn, axis=1)
        cols = flat - np.repeat(np.arange(n_rows, dtype=np.int64) * n_cols, counts)
        x = np.repeat(row_mix, counts)
        x ^= col_mix[cols]
        u = _mixed_to_unit(x)
        np.log(u, out=u)
        np.negative(u, out=u)
        u /= np.take(weights, flat)
        key = np.full(weights.shape, np.inf)
        key.ravel()[flat] = u
    return _smallest(key, min(choices, n_cols))


def _smallest(key: Any, c: int) -> tuple[Any, Any]:
    """The columns of the ``c`` smallest keys of each row, smallest first (the first
    column among equal keys), and whether each is finite; ``key`` is overwritten. ``c``
    passes of argmin: a few times faster than argpartition and a sort of the part for the
    few choices a candidate carries. Finite keys are hashes of distinct cells, so they do
    not tie in practice, and only the finite ones are used."""
    np = _np()
    n_rows = key.shape[0]
    idx = np.empty((n_rows, c), dtype=np.int64)
    best = np.empty((n_rows, c))
    at = np.arange(n_rows)
    for i in range(c):
        col = key.argmin(axis=1)
        idx[:, i] = col
        best[:, i] = key[at, col]
        key[at, col] = np.inf
    return idx, np.isfinite(best)


def _draw(ctx: RoundContext, j: int, rows: Any, mand: Any, D: Any, rack_check: bool,
          s: Any, size: Any, bin_: Any, bout: Any, slots: Any, others: Any,
          rack_possible: Any, src_dup: Any, leader_id: Any, ids: Any, rf: Any, pid: Any
          ) -> tuple[list[list[int]], Any]:
    """The destinations drawn for replica ``j`` of ``rows`` among the brokers of slots
    ``D``, and which rows are candidates (mandatory, or with a feasible destination).
    ``rack_check``: leave out the racks of the other replicas here (else ``D`` has none of
    them, or the rows may share a rack)."""
    np = _np()
    e, coef, band = ctx.excess, ctx.coef, ctx.band
    if D.size and not mand.any():
        smin = size[rows].min()
        D = D[(ctx.free_disk[D] >= smin) & (e[D, DISK] + smin <= band[D, DISK])]
    if D.size == 0:
        return [[] for _ in range(rows.size)], mand.copy()
    s_r, sz, bi, bo = s[rows], size[rows], bin_[rows], bout[rows]
    eD = e[D]
    amounts = {REPLICAS: np.ones_like(sz), DISK: sz, NET_IN: bi}
    dst_part = np.zeros((rows.size, D.size))
    tmp = np.empty_like(dst_part)
    src_part = np.zeros(rows.size)
    for m, a in amounts.items():
        dst_part += np.multiply((coef[m] * a)[:, None], eD[None, :, m], out=tmp)
        src_part += coef[m] * a * (a - e[s_r, m])
    if j == 0:
        carries = (leader_id[rows] == ids[rows, 0]).astype(np.float64)
        lead = {LEADERS: carries, NET_OUT: carries * (bo + bi * (rf[rows] - 1))}
        for m, a in lead.items():
            dst_part += np.multiply((coef[m] * a)[:, None], eD[None, :, m], out=tmp)
            src_part += coef[m] * a * (a - e[s_r, m])
    est = np.add(src_part[:, None], dst_part, out=dst_part)
    del dst_part, tmp
    # not onto a broker holding a replica of the partition: its column, if any, is off
    col_of = np.full(len(ctx.broker_ids), -1, dtype=np.int64)
    col_of[D] = np.arange(D.size)
    feasible = np.ones((rows.size, D.size), dtype=bool)
    sl = slots[rows]
    for k in range(sl.shape[1]):
        col = np.where(sl[:, k] >= 0, col_of[np.clip(sl[:, k], 0, None)], -1)
        hit = np.nonzero(col >= 0)[0]
        feasible[hit, col[hit]] = False
    if rack_check and ctx.n_racks > 0:
        # not into the rack of another replica (unless racks are too few and the source
        # shares one); in_rack[v + 2]: the columns in rack v (-1 none; -2, padding, none)
        rack_d = ctx.rack[D]
        in_rack = np.zeros((int(ctx.rack.max()) + 3, D.size), dtype=bool)
        for v in range(-1, int(ctx.rack.max()) + 1):
            in_rack[v + 2] = rack_d == v
        o = others[rows]
        conflict = np.zeros((rows.size, D.size), dtype=bool)
        for k in range(o.shape[1]):
            conflict |= in_rack[o[:, k] + 2]
        relaxed = (~rack_possible[rows]) & src_dup[rows]
        feasible &= ~conflict | relaxed[:, None]
    feasible &= ctx.free_disk[D][None, :] >= sz[:, None]
    soft = (~mand)[:, None]
    if ctx.relaxed:  # the giver may drop below its band, never below the receiver
        src_ok = (eD[None, :, DISK] - e[s_r, DISK][:, None] + sz[:, None] < 0) & \
            (eD[None, :, REPLICAS] - e[s_r, REPLICAS][:, None] + 1 <= 0)
    else:  # see Balancer.sheds_small
        small = (e[s_r, REPLICAS] > band[s_r, REPLICAS]) & \
            (sz * ctx.target[s_r, REPLICAS] <= ctx.target[s_r, DISK])
        src_ok = (((e[s_r, DISK] - sz) >= -band[s_r, DISK]) | small)[:, None]
    within = (eD[None, :, DISK] + sz[:, None] <= band[D, DISK][None, :]) & \
        src_ok & (est < 0)
    feasible &= ~soft | within
    if mand.any():
        big = np.where(feasible, est, -np.inf).max(axis=1)
        weights = np.where(mand[:, None], big[:, None] - est + 1e-9, -est)
    else:
        weights = np.negative(est, out=est)
    # without a mandatory row every feasible cell has est < 0: a weight > 0
    idx, finite = _race(weights, feasible, pid[rows], ctx.broker_ids[D], ctx.seed + j,
                        ctx.choices, positive=not mand.any())
    # est is finite (coef is: the means are never 0), so a row has a finite best
    # estimate exactly when it has a feasible destination
    keep = mand | feasible.any(axis=1)
    # the finite keys come first in each row: a row's destinations are a prefix
    drawn = ctx.broker_ids[D][idx].tolist()
    return [d if n == len(d) else d[:n]
            for d, n in zip(drawn, finite.sum(axis=1).tolist(), strict=True)], keep


def score_replica_moves(pdf: Any, ctx: RoundContext) -> Any:
    """Candidate replica moves of a batch of partitions (pandas in, pandas out)."""
    np, pd = _np(), _pd()
    n = len(pdf)
    empty = pd.DataFrame({c: [] for c in CANDIDATE_COLUMNS})
    if n == 0:
        return empty
    pdf = with_changes(pdf, ctx.changes)
    lists = list(pdf["replicas"])
    width = max(len(r) for r in lists)
    ids = _padded(lists, width)
    slots = np.where(ids >= 0, ctx.slot_of[np.clip(ids, 0, len(ctx.slot_of) - 1)], -1)
    rf = (ids >= 0).sum(axis=1)
    pid = pdf["pid"].to_numpy(np.int64)
    leader_id = pdf["leader"].to_numpy(np.int64)
    size = pdf["size"].to_numpy(np.float64)
    bin_ = pdf["bin"].to_numpy(np.float64)
    bout = pdf["bout"].to_numpy(np.float64)
    racks = np.where(slots >= 0, ctx.rack[np.clip(slots, 0, None)], -2)
    # the partitions of this round: a replica on a giving broker, or (repairing) a shared rack
    in_round = (ctx.is_source[np.clip(slots, 0, None)] & (slots >= 0)).any(axis=1)
    if ctx.repair and ctx.n_racks > 0:
        in_round |= _shares_a_rack(racks, rf, ctx.n_racks)
    D = ctx.dest_slots
    e, band = ctx.excess, ctx.band
    out: list[Any] = []
    for j in range(width):
        src = slots[:, j]
        valid = src >= 0
        s = np.clip(src, 0, None)
        others = np.delete(racks, j, axis=1)
        src_dup = (others == racks[:, [j]]).any(axis=1) & (racks[:, j] >= 0)
        rack_possible = (ctx.n_racks > 0) & (rf <= ctx.n_racks)
        # the later replica of a pair sharing a rack is repaired when racks allow
        earlier_dup = (racks[:, :j] == racks[:, [j]]).any(axis=1) if j > 0 else \
            np.zeros(n, dtype=bool)
        mandatory = valid & (ctx.is_removed[s] | (earlier_dup & rack_possible & (racks[:, j] >= 0)))
        cand = valid & in_round & (ctx.is_source[s] | mandatory)
        rows = np.nonzero(cand)[0]
        if rows.size == 0 or D.size == 0:
            continue
        mand = mandatory[rows]
        # What cannot be feasible is left out before the (rows x destinations) arrays: a
        # destination must have the disk room (every row) and, for a row that need not
        # move, room in its disk band; and such a row needs a giver that may give it
        # (outside a relaxed round that is a figure of the row alone). A row without a
        # feasible destination is dropped below anyway, a destination no row can take is
        # never drawn (its key would be inf), so the candidates are the same.
        s0, sz0 = s[rows], size[rows]
        row_ok = ctx.free_disk[D].max() >= sz0
        if not ctx.relaxed:
            small = (e[s0, REPLICAS] > band[s0, REPLICAS]) & \
                (sz0 * ctx.target[s0, REPLICAS] <= ctx.target[s0, DISK])
            row_ok &= ((e[s0, DISK] - sz0) >= -band[s0, DISK]) | small
        row_ok |= mand
        if not row_ok.all():
            rows, mand = rows[row_ok], mand[row_ok]
            if rows.size == 0:
                continue
        # Rows whose other replicas hold the same racks can only go to the brokers of the
        # other racks (unless racks are too few and the source shares one): each such
        # group is drawn over those columns alone (RF 3 on 3 racks: a third of them). A
        # column left out is infeasible for the group's rows, its key inf, never drawn.
        held = np.zeros(rows.size, dtype=np.int64)  # bit v + 1: rack v (-1: none) is held
        grouped = ctx.n_racks > 0 and int(ctx.rack.max()) < 60
        if grouped:
            o = others[rows]
            for k in range(o.shape[1]):
                held |= np.where(o[:, k] >= -1,
                                 np.left_shift(1, np.clip(o[:, k] + 1, 0, None)), 0)
            held[(~rack_possible[rows]) & src_dup[rows]] = 0
        dests: list[list[int]] = [[] for _ in range(rows.size)]
        keep = np.zeros(rows.size, dtype=bool)
        for h in np.unique(held).tolist():
            sub = np.nonzero(held == h)[0]
            cols = D if h == 0 else D[(np.right_shift(h, ctx.rack[D] + 1) & 1) == 0]
            drawn, kept = _draw(ctx, j, rows[sub], mand[sub], cols, not grouped, s, size,
                                bin_, bout, slots, others, rack_possible, src_dup, leader_id,
                                ids, rf, pid)
            keep[sub] = kept
            for i, d in zip(sub.tolist(), drawn, strict=True):
                dests[i] = d
        if not keep.any():
            continue
        s_r, sz = s[rows], size[rows]
        # Prefer replicas whose size matches the source's bytes-per-replica excess, so the
        # replica count and disk bytes of the source reach their targets together.
        want = np.maximum(e[s_r, DISK], 0.0) / np.maximum(e[s_r, REPLICAS], 1.0)
        eps = 0.05 * ctx.mean_size + 1.0
        prio = np.where(mand, -np.inf, np.abs(np.log((sz + eps) / (want + eps))))
        frame = pd.DataFrame({
            "pid": pid[rows], "pos": np.full(rows.size, j, dtype=np.int32),
            "src": ctx.broker_ids[s_r], "mandatory": mand, "dests": dests, "priority": prio,
            "replicas": [lists[r] for r in rows], "leader": leader_id[rows],
            "size": size[rows].astype(np.int64), "bin": bin_[rows].astype(np.int64),
            "bout": bout[rows].astype(np.int64),
        })
        out.append(frame[keep])
    if not out:
        return empty
    return pd.concat(out, ignore_index=True)


def score_leader_moves(pdf: Any, ctx: RoundContext) -> Any:
    """Candidate leadership changes (another replica becomes preferred leader)."""
    np, pd = _np(), _pd()
    n = len(pdf)
    empty = pd.DataFrame({c: [] for c in CANDIDATE_COLUMNS})
    if n == 0:
        return empty
    pdf = with_changes(pdf, ctx.changes)
    lists = list(pdf["replicas"])
    width = max(len(r) for r in lists)
    ids = _padded(lists, width)
    slots = np.where(ids >= 0, ctx.slot_of[np.clip(ids, 0, len(ctx.slot_of) - 1)], -1)
    rf = (ids >= 0).sum(axis=1)
    leader_id = pdf["leader"].to_numpy(np.int64)
    lslot = ctx.slot_of[leader_id]
    rows = np.nonzero(ctx.is_source[lslot])[0]
    if rows.size == 0:
        return empty
    pid = pdf["pid"].to_numpy(np.int64)[rows]
    bi = pdf["bin"].to_numpy(np.float64)[rows]
    bo = pdf["bout"].to_numpy(np.float64)[rows]
    sz = pdf["size"].to_numpy(np.int64)[rows]
    s = lslot[rows]
    sl = slots[rows]
    e, coef = ctx.excess, ctx.coef
    amounts = {LEADERS: np.ones_like(bi), NET_OUT: bo + bi * (rf[rows] - 1)}
    est = np.zeros(sl.shape)
    for m, a in amounts.items():
        est += (coef[m] * a)[:, None] * (e[np.clip(sl, 0, None), m] + a[:, None] - e[s, m][:, None])
    feasible = (sl >= 0) & (sl != s[:, None]) & (est < 0) & \
        ~ctx.is_removed[np.clip(sl, 0, None)]
    weights = np.where(feasible, -est, 0.0)
    u = uniform(pid[:, None], np.clip(ids[rows], 0, None), ctx.seed)
    with np.errstate(divide="ignore", invalid="ignore"):
        key = np.where(feasible, -np.log(u) / weights, np.inf)
    order = np.argsort(key, axis=1, kind="stable")
    best = np.where(feasible, est, np.inf).min(axis=1)
    keep = np.isfinite(best)
    dests = [[int(ids[r, k]) for k in o if np.isfinite(key[i, k])]
             for i, (r, o) in enumerate(zip(rows, order, strict=True))]
    frame = pd.DataFrame({
        "pid": pid, "pos": np.zeros(rows.size, dtype=np.int32), "src": leader_id[rows],
        "mandatory": np.zeros(rows.size, dtype=bool), "dests": dests, "priority": best,
        "replicas": [lists[r] for r in rows], "leader": leader_id[rows], "size": sz,
        "bin": bi.astype(np.int64), "bout": bo.astype(np.int64),
    })
    return frame[keep]


def score_demotions(pdf: Any, ctx: RoundContext) -> Any:
    """A mandatory candidate for every partition whose preferred leader (first replica) is
    demoted; ``dests`` are its replicas that are not, in list order (none: all demoted),
    ``priority`` their number, so the most constrained partitions are placed first."""
    np, pd = _np(), _pd()
    empty = pd.DataFrame({c: [] for c in CANDIDATE_COLUMNS})
    if len(pdf) == 0:
        return empty
    pdf = with_changes(pdf, ctx.changes)
    lists = list(pdf["replicas"])
    ids = _padded(lists, max(len(r) for r in lists))
    slots = ctx.slot_of[np.clip(ids, 0, len(ctx.slot_of) - 1)]
    demoted = (ids >= 0) & ctx.is_demoted[np.clip(slots, 0, None)]
    rows = np.nonzero(demoted[:, 0])[0]
    if rows.size == 0:
        return empty
    dests = [[int(b) for b, d in zip(ids[r], demoted[r], strict=True) if b >= 0 and not d]
             for r in rows]
    return pd.DataFrame({
        "pid": pdf["pid"].to_numpy(np.int64)[rows], "pos": np.zeros(rows.size, dtype=np.int32),
        "src": ids[rows, 0], "mandatory": np.ones(rows.size, dtype=bool), "dests": dests,
        "priority": np.array([len(d) for d in dests], dtype=np.float64),
        "replicas": [lists[r] for r in rows],
        "leader": pdf["leader"].to_numpy(np.int64)[rows],
        "size": pdf["size"].to_numpy(np.int64)[rows],
        "bin": pdf["bin"].to_numpy(np.int64)[rows], "bout": pdf["bout"].to_numpy(np.int64)[rows],
    })


def scorer_for(ctx: RoundContext, leaders: bool) -> Scorer:
    """The scorer of a round: replica moves, leadership changes, or demotions."""
    if ctx.is_demoted is not None:
        return score_demotions
    return score_leader_moves if leaders else score_replica_moves


def best_per_source(frame: Any, caps: dict[int, int]) -> Any:
    """Every mandatory candidate, and each source's ``caps[src]`` best others (by priority,
    then pid and position, so the choice is reproducible). Applied per Spark partition and
    again on the driver, it keeps exactly what one global cut would keep — without a
    shuffle."""
    np, pd = _np(), _pd()
    if len(frame) == 0:
        return frame
    # sort_values(["priority", "pid", "pos"], kind="stable") as one numpy lexsort (stable
    # too), the cut on the sorted keys, then one take of the rows kept: pandas' sort, its
    # copy of the frame and the masked copy took a second and a half of a 10^6-candidate
    # round
    order = np.lexsort((frame["pos"].to_numpy(), frame["pid"].to_numpy(),
                        frame["priority"].to_numpy()))
    src = pd.Series(frame["src"].to_numpy()[order])
    rank = src.groupby(src, sort=False).cumcount().to_numpy()
    cap = src.map(caps).fillna(0).to_numpy(np.int64)
    keep = frame["mandatory"].to_numpy(bool)[order] | (rank < cap)
    return frame.take(order[keep])
