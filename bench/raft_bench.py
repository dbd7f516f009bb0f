"""Figures of the KIP-595 quorum in simulated time (prints figures; no pass/fail).

    .venv/bin/python bench/raft_bench.py [--trials 200] [--failover-only]
"""

from __future__ import annotations

import argparse
import statistics
import time

from controller_core.raft.config import RaftConfig
from controller_core.raft.network import NetworkConfig
from controller_core.raft.quorum import SimulatedQuorum


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def failover(n: int, trials: int, epochs: list[int] | None = None) -> list[float]:
    """Leader crash -> new leader, in election timeouts; ``epochs`` gets the epochs each
    failover took (1 = a single election)."""
    out = []
    cfg = RaftConfig()
    for seed in range(trials):
        q = SimulatedQuorum(list(range(n)), seed=seed, network=NetworkConfig(10.0))
        q.run_until_leader()
        q.advance(q.rng.uniform(1000, 3000))
        old = q.leader()
        assert old is not None
        e0 = q.node(old).epoch
        q.crash(old)
        t0 = q.now
        q.run_until(lambda q=q, old=old: q.leader() not in (None, old), 20_000)
        out.append((q.now - t0) / cfg.election_timeout_ms)
        new = q.leader()
        if epochs is not None and new is not None:
            epochs.append(q.node(new).epoch - e0)
    return out


def healthy_elections(n: int, trials: int, seconds: float) -> int:
    """Elections with a live leader and a lossy, jittery network (should be none: pre-vote
    and leader stickiness keep followers from disturbing a leader they still hear)."""
    total = 0
    for seed in range(trials):
        q = SimulatedQuorum(list(range(n)), seed=seed,
                            network=NetworkConfig(10.0, delay_jitter_ms=20.0, loss=0.01))
        lid = q.run_until_leader()
        assert lid is not None
        e0 = q.node(lid).epoch
        q.advance(seconds * 1000)
        total += max(node.epoch for node in q.nodes.values() if node is not None) - e0
    return total


def commit_latency(n: int, samples: int) -> list[float]:
    q = SimulatedQuorum(list(range(n)), seed=1, network=NetworkConfig(10.0))
    q.run_until_leader()
    q.advance(1000)
    out = []
    for i in range(samples):
        q.advance(q.rng.uniform(0, 700))
        t0 = q.now
        off = q.propose([b"r%d" % i])
        q.run_until_committed(off, 10_000)
        out.append(q.now - t0)
    return out


def throughput(n: int, batch: int, batches: int) -> tuple[float, float]:
    q = SimulatedQuorum(list(range(n)), seed=2, network=NetworkConfig(10.0))
    q.run_until_leader()
    q.advance(1000)
    rec = b"x" * 100
    records = [rec] * batch
    t0 = time.perf_counter()
    off = 0
    for _ in range(batches):
        off = q.propose(records)
        q.advance(1)
    q.run_until_committed(off, 60_000)
    wall = time.perf_counter() - t0
    return batch * batches / wall, wall


def replacement(log_bytes: int, bandwidth_bps: float) -> tuple[float, int]:
    q = SimulatedQuorum([0, 1, 2], observers=[3, 4, 5], seed=3,
                        network=NetworkConfig(10.0, bandwidth_bytes_per_ms=bandwidth_bps / 1000))
    q.run_until_leader()
    chunk = b"m" * (1 << 20)
    # the existing metadata log: 1 MiB records sharing one buffer (cheap to model)
    for _ in range(log_bytes // (1 << 20) // 8):
        off = q.propose([chunk] * 8)
    q.run_until_committed(off, 10_000_000)
    for n in (3, 4, 5):
        q.crash(n, lose_unflushed=True)  # start the new nodes empty, then boot them
    for n in (3, 4, 5):
        q.storages[n].durable = []  # type: ignore[attr-defined]
        q.restart(n)
    t0 = q.now
    assert q.alter_quorum([3, 4, 5]).ok
    assert q.run_until_voters([3, 4, 5], 10_000_000)
    return q.now - t0, q.committed_end


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--batches", type=int, default=20_000,
                    help="batches of 1000 records proposed for the throughput figure")
    ap.add_argument("--log-gb", type=float, default=1.0)
    ap.add_argument("--bandwidth-mbps", type=float, default=100.0,
                    help="fetch bandwidth per link, MB/s")
    ap.add_argument("--failover-only", action="store_true",
                    help="only the failover and election figures")
    a = ap.parse_args()
    print("setup: one-way delay 10 ms, default timeouts (election 1000, fetch 2000 ms)")
    for n in (3, 5):
        ep: list[int] = []
        f = failover(n, a.trials, ep)
        print(f"{n} voters: leader crash -> new leader p50 {pct(f, .5):.2f}x  p99 "
              f"{pct(f, .99):.2f}x  max {max(f):.2f}x election timeout ({a.trials} trials; "
              f"elections per failover mean {statistics.mean(ep):.2f}, max {max(ep)})")
    for n in (3, 5):
        k = healthy_elections(n, 20, 60)
        print(f"{n} voters: elections with a live leader over 20 x 60 s (1% loss, 20 ms "
              f"jitter): {k}")
    if a.failover_only:
        return
    for n in (3, 5):
        c = commit_latency(n, a.trials)
        print(f"{n} voters: commit latency p50 {pct(c, .5):.0f} ms  p99 {pct(c, .99):.0f} ms "
              f"(RTT 20 ms; {a.trials} samples, mean {statistics.mean(c):.1f})")
    for n in (3, 5):
        rps, wall = throughput(n, 1000, a.batches)
        print(f"{n} voters: simulation throughput {rps:,.0f} records committed / wall s "
              f"(batches of 1000 x 100 B, {wall:.2f} s wall)")
    dur, end = replacement(int(a.log_gb * (1 << 30)), a.bandwidth_mbps * 1e6)
    print(f"{{0,1,2}} -> {{3,4,5}} with a {a.log_gb:g} GiB metadata log at "
          f"{a.bandwidth_mbps:g} MB/s fetch bandwidth: {dur / 1000:.1f} s simulated "
          f"(log end {end})")


if __name__ == "__main__":
    main()
