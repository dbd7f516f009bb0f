"""A seeded fault-injection run of a SimulatedQuorum, checked after every event."""

from __future__ import annotations

import contextlib
import hashlib
import random
from dataclasses import dataclass

from controller_core.raft.config import RaftConfig
from controller_core.raft.invariants import InvariantChecker
from controller_core.raft.network import NetworkConfig
from controller_core.raft.node import NotLeaderError
from controller_core.raft.quorum import SimulatedQuorum


@dataclass
class ChaosReport:
    seed: int
    events: int
    faults: int
    committed: int
    elections: int
    voter_changes: int
    snapshots: int = 0  # KIP-630 snapshots taken, and fetched from a leader
    snapshot_installs: int = 0


def state_digest(sim: SimulatedQuorum, end: int) -> tuple[bytes]:
    """A stand-in application state for KIP-630 snapshots: a digest of the committed records
    below ``end`` (so a snapshot holding anything else is caught)."""
    h = hashlib.sha256()
    for off, rec in sim.committed_since(0):
        if off >= end:
            break
        h.update(b"%d:%d:" % (off, len(rec)) + rec)
    return (h.digest(),)


def run_chaos(seed: int, events: int = 3000, *,
              snapshot_every: int | None = None) -> ChaosReport:
    """Drive one seeded scenario; raises InvariantViolation naming the seed on a violation.

    With ``snapshot_every`` every node snapshots (KIP-630) once that many offsets committed
    since its last snapshot, so lagging and restarted nodes catch up by FetchSnapshot."""
    rng = random.Random(seed)
    n_voters = rng.choice([3, 3, 5])
    voters = list(range(n_voters))
    observers = list(range(n_voters, n_voters + rng.choice([0, 1, 2, 3])))
    net = NetworkConfig(
        one_way_delay_ms=rng.choice([1.0, 5.0, 10.0]),
        delay_jitter_ms=rng.choice([0.0, 5.0, 20.0]),
        loss=rng.choice([0.0, 0.01, 0.05, 0.1]),
        duplicate=rng.choice([0.0, 0.02, 0.05]),
        reorder=rng.choice([0.0, 0.05, 0.2]),
    )
    cfg = RaftConfig(leader_flush_delay_ms=rng.choice([0, 0, 5, 20]))
    sim = SimulatedQuorum(voters, observers, seed=seed, config=cfg, network=net,
                          clock_drift=rng.choice([0.0, 0.01, 0.05]),
                          snapshot_every=snapshot_every,
                          snapshot_state=None if snapshot_every is None else (
                              lambda end: state_digest(sim, end)))
    chk = InvariantChecker(sim)
    faults = 0
    changes = 0
    crashed: set[int] = set()
    fault_rate = rng.choice([0.002, 0.005, 0.01])
    for _ in range(events):
        r = rng.random()
        if r < fault_rate:
            faults += 1
            kind = rng.randrange(7)
            alive = [n for n in sim.node_ids if sim.alive(n)]
            if kind == 0 and len(alive) > 1:
                n = rng.choice(alive)
                sim.crash(n, lose_unflushed=rng.random() < 0.5)
                crashed.add(n)
            elif kind == 1 and crashed:
                n = rng.choice(sorted(crashed))
                sim.restart(n)
                crashed.discard(n)
            elif kind == 2:
                nodes = sim.node_ids
                rng.shuffle(nodes)
                k = rng.randrange(1, len(nodes))
                sim.partition(nodes[:k], nodes[k:], symmetric=rng.random() < 0.7)
            elif kind == 3:
                sim.heal()
            elif kind == 4:
                lid = sim.leader()
                if lid is not None:
                    sim.isolate(lid)
            elif kind == 5:
                lid = sim.leader()
                if lid is not None:
                    size = rng.choice([1, 3, 3, 5]) if len(sim.node_ids) >= 5 else rng.choice(
                        [1, 3, 3])
                    target = sorted(rng.sample(sim.node_ids, min(size, len(sim.node_ids))))
                    res = sim.alter_quorum(rng.choice([target, target, None]))
                    changes += res.ok
            elif kind == 6 and len(crashed) == 0 and rng.random() < 0.3:
                # kill everything, then bring back a majority of the voters first
                for n in sim.node_ids:
                    sim.crash(n, lose_unflushed=rng.random() < 0.5)
                back = sim.node_ids
                rng.shuffle(back)
                for n in back[: len(back) // 2 + 1]:
                    sim.restart(n)
                crashed = set(back[len(back) // 2 + 1:])
        elif r < 0.08:
            with contextlib.suppress(NotLeaderError):
                sim.propose([rng.randbytes(rng.randrange(1, 32))
                             for _ in range(rng.randrange(1, 4))])
        else:
            if not sim.step():
                sim.advance(rng.choice([10, 100, 1000]))
        chk.check()
    # heal everything and require progress (liveness) and the quiescent truth
    sim.heal()
    sim.net.config.loss = sim.net.config.duplicate = sim.net.config.reorder = 0.0
    for n in sorted(crashed):
        sim.restart(n)
    chk.check()
    leader = sim.run_until_leader(60_000)
    if leader is None:
        chk.fail("no leader within 60 s after healing everything")
    deadline = sim.now + 60_000
    while sim.now < deadline:
        try:
            off = sim.propose([b"final"])
        except NotLeaderError:
            sim.run_until_leader(10_000)
            continue
        if sim.run_until_committed(off, 10_000):
            break
        chk.check()
    else:
        chk.fail("the final proposal did not commit within 60 s after healing")
    # settle: every live node follows one leader and has its whole log
    def settled() -> bool:
        chk.check()
        lid = sim.leader()
        if lid is None:
            return False
        lead = sim.node(lid)
        return all(n.epoch == lead.epoch and n.log.end_offset == lead.log.end_offset
                   and (n is lead or n.leader_id == lid)
                   for n in sim.nodes.values() if n is not None)
    if not sim.run_until(settled, 60_000):
        chk.fail("the quorum did not settle within 60 s after healing")
    sim.advance(cfg.request_timeout_ms + 2 * cfg.fetch_max_wait_ms)
    chk.check()
    chk.check_quiescent()
    return ChaosReport(seed, events, faults, sim.committed_end, len(chk.leaders), changes,
                       sim.snapshots_taken, sim.snapshots_installed)
