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


def uniform(a: Any, b: Any, seed: int) -> Any:
    """Deterministic uniforms in (0, 1) from two int arrays (splitmix64 finaliser)."""
    np = _np()
    with np.errstate(over="ignore"):
        x = (a.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ \
            (b.astype(np.uint64) * np.uint64(0xBF58476D1CE4E5B9)) ^ \
            np.uint64(seed & 0xFFFFFFFFFFFFFFFF)
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return (x >> np.uint64(11)).astype(np.float64) * 2.0**-53 + 2.0**-54


def _padded(lists: Any, width: int) -> Any:
    np = _np()
    out = np.full((len(lists), width), -1, dtype=np.int64)
    for i, reps in enumerate(lists):
        out[i, : len(reps)] = reps
    return out


def _race(weights: Any, feasible: Any, pid: Any, dest_ids: Any, seed: int, choices: int
          ) -> tuple[Any, Any]:
    """Top ``choices`` destinations per row by weighted race; (indices, key is finite)."""
    np = _np()
    u = uniform(pid[:, None], dest_ids[None, :], seed)
    with np.errstate(divide="ignore", invalid="ignore"):
        key = np.where(feasible & (weights > 0), -np.log(u) / weights, np.inf)
    c = min(choices, key.shape[1])
    part = np.argpartition(key, c - 1, axis=1)[:, :c] if c < key.shape[1] else \
        np.tile(np.arange(key.shape[1]), (key.shape[0], 1))
    pkeys = np.take_along_axis(key, part, axis=1)
    order = np.argsort(pkeys, axis=1, kind="stable")
    idx = np.take_along_axis(part, order, axis=1)
    finite = np.isfinite(np.take_along_axis(key, idx, axis=1))
    return idx, finite


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
    dest_ids = ctx.broker_ids[D]
    e, coef, band = ctx.excess, ctx.coef, ctx.band
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
        s_r, sz, bi, bo = s[rows], size[rows], bin_[rows], bout[rows]
        amounts = {REPLICAS: np.ones_like(sz), DISK: sz, NET_IN: bi}
        dst_part = np.zeros((rows.size, D.size))
        src_part = np.zeros(rows.size)
        for m, a in amounts.items():
            dst_part += (coef[m] * a)[:, None] * e[D, m][None, :]
            src_part += coef[m] * a * (a - e[s_r, m])
        if j == 0:
            carries = (leader_id[rows] == ids[rows, 0]).astype(np.float64)
            lead = {LEADERS: carries, NET_OUT: carries * (bo + bi * (rf[rows] - 1))}
            for m, a in lead.items():
                dst_part += (coef[m] * a)[:, None] * e[D, m][None, :]
                src_part += coef[m] * a * (a - e[s_r, m])
        est = src_part[:, None] + dst_part
        sl = slots[rows]
        feasible = (sl[:, :, None] != D[None, None, :]).all(axis=1)
        if ctx.n_racks > 0:
            conflict = (others[rows][:, :, None] == ctx.rack[D][None, None, :]).any(axis=1)
            relaxed = (~rack_possible[rows]) & src_dup[rows]
            feasible &= ~conflict | relaxed[:, None]
        feasible &= ctx.free_disk[D][None, :] >= sz[:, None]
        mand = mandatory[rows]
        soft = (~mand)[:, None]
        if ctx.relaxed:  # the giver may drop below its band, never below the receiver
            src_ok = (e[D, DISK][None, :] - e[s_r, DISK][:, None] + sz[:, None] < 0) & \
                (e[D, REPLICAS][None, :] - e[s_r, REPLICAS][:, None] + 1 <= 0)
        else:  # see Balancer.sheds_small
            small = (e[s_r, REPLICAS] > band[s_r, REPLICAS]) & \
                (sz * ctx.target[s_r, REPLICAS] <= ctx.target[s_r, DISK])
            src_ok = (((e[s_r, DISK] - sz) >= -band[s_r, DISK]) | small)[:, None]
        within = (e[D, DISK][None, :] + sz[:, None] <= band[D, DISK][None, :]) & \
            src_ok & (est < 0)
        feasible &= ~soft | within
        big = np.where(feasible, est, -np.inf).max(axis=1)
        weights = np.where(mand[:, None], big[:, None] - est + 1e-9, -est)
        idx, finite = _race(weights, feasible, pid[rows], dest_ids, ctx.seed + j, ctx.choices)
        best = np.where(feasible, est, np.inf).min(axis=1)
        keep = mand | np.isfinite(best)
        if not keep.any():
            continue
        # Prefer replicas whose size matches the source's bytes-per-replica excess, so the
        # replica count and disk bytes of the source reach their targets together.
        want = np.maximum(e[s_r, DISK], 0.0) / np.maximum(e[s_r, REPLICAS], 1.0)
        eps = 0.05 * ctx.mean_size + 1.0
        prio = np.where(mand, -np.inf, np.abs(np.log((sz + eps) / (want + eps))))
        dests = [dest_ids[i[f]].tolist() for i, f in zip(idx, finite, strict=True)]
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
    np = _np()
    if len(frame) == 0:
        return frame
    frame = frame.sort_values(["priority", "pid", "pos"], kind="stable")
    rank = frame.groupby("src", sort=False).cumcount().to_numpy()
    cap = frame["src"].map(caps).fillna(0).to_numpy(np.int64)
    keep = frame["mandatory"].to_numpy(bool) | (rank < cap)
    return frame[keep]
