"""Figures of KIP-630 snapshots of the metadata quorum (prints figures; no pass/fail).

    nice -n 10 .venv/bin/python bench/raft_snapshot_bench.py [--records 1000000]

1. Raft log on disk and restart time of the embedded cluster after ``--records`` metadata
   records (broker throttle changes, 2 records per broker per call: the state stays small,
   the history grows). Runs against any checkout: point ``KRAFTSMAN_SRC`` at another tree
   (e.g. ``git archive main``) to measure the code before snapshots.
2. The {0,1,2} -> {3,4,5} voter walk in simulated time with a ``--log-gb`` history at
   ``--bandwidth-mbps`` per link: new voters fetch the log (no snapshot) or the snapshot
   (``--state-mb`` of state) plus the tail.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.environ.get("KRAFTSMAN_SRC", str(Path(__file__).resolve().parents[1])))

from controller_core.config import EmbeddedClusterSpec
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.raft.network import NetworkConfig
from controller_core.raft.quorum import SimulatedQuorum


def du(path: Path, pattern: str = "*") -> int:
    return sum(p.stat().st_size for p in path.rglob(pattern) if p.is_file())


def restart_figures(records: int, brokers: int, repeats: int) -> None:
    spec = EmbeddedClusterSpec.model_validate({
        "brokers": [{"id": i, "rack": f"r{i % 3}"} for i in range(brokers)],
        "topics": [{"name": "t", "partitions": 100, "replicationFactor": 3,
                    "sizeBytesPerPartition": 1_000_000}],
        "replicationBytesPerSecond": 100_000_000,
    })
    state = Path(tempfile.mkdtemp(prefix="kraftsman-snapbench-"))
    c = EmbeddedCluster.open(state, spec)
    t = time.perf_counter()
    written = 0
    i = 0
    while written < records:
        rate = str(1_000_000 + i)
        res = c.incremental_alter_configs({("BROKER", str(b)): {
            "leader.replication.throttled.rate": rate,
            "follower.replication.throttled.rate": rate} for b in range(brokers)})
        assert all(r.ok for r in res.values())
        written += 2 * brokers
        i += 1
    gen = time.perf_counter() - t
    c.close()
    quorum = state / "quorum"
    nodes = sorted(quorum.glob("node-*"))
    total = du(quorum)
    segs = du(quorum, "*.log")
    snaps = du(quorum, "*.checkpoint")
    print(f"{written:,} metadata records written in {i} calls ({gen:.1f} s wall); "
          f"spec snapshotEveryRecords {spec.snapshot_every_records:,}")
    print(f"raft log on disk ({len(nodes)} nodes): {total / 1e6:.1f} MB total, "
          f"{total / len(nodes) / 1e6:.1f} MB per node (segments {segs / 1e6:.1f} MB, "
          f"snapshots {snaps / 1e6:.2f} MB); per node: "
          + ", ".join(f"{d.name} {du(d) / 1e6:.1f} MB" for d in nodes))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        c = EmbeddedCluster.open(state, spec)
        times.append(time.perf_counter() - t)
        c.close()
    print(f"restart (EmbeddedCluster.open, what every CLI command does): median "
          f"{statistics.median(times):.2f} s, min {min(times):.2f} s over {repeats} runs")
    shutil.rmtree(state)


def walk(log_bytes: int, bandwidth_bps: float, state_bytes: int | None) -> tuple[float, int]:
    q = SimulatedQuorum([0, 1, 2], observers=[3, 4, 5], seed=3,
                        network=NetworkConfig(10.0, bandwidth_bytes_per_ms=bandwidth_bps / 1000))
    q.run_until_leader()
    chunk = b"m" * (1 << 20)
    off = 0
    # the history: 1 MiB records sharing one buffer (cheap to model)
    for _ in range(log_bytes // (1 << 20) // 8):
        off = q.propose([chunk] * 8)
    q.run_until_committed(off, 10_000_000)
    if state_bytes is not None:
        # the state at the committed end: the leader snapshots at once, the followers as
        # soon as they learn the high watermark (their next fetch)
        state = [chunk] * max(1, state_bytes >> 20)
        assert q.offer_snapshot(q.committed_end, state) >= 1
    for n in (3, 4, 5):
        q.crash(n, lose_unflushed=True)  # start the new nodes empty, then boot them
    for n in (3, 4, 5):
        st = q.storages[n]
        st.durable = []  # type: ignore[attr-defined]
        if hasattr(st, "snapshot"):
            st.snapshot = None
        q.restart(n)
    t0 = q.now
    assert q.alter_quorum([3, 4, 5]).ok
    assert q.run_until_voters([3, 4, 5], 10_000_000)
    return q.now - t0, getattr(q, "snapshots_installed", 0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--brokers", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--log-gb", type=float, default=1.0)
    ap.add_argument("--bandwidth-mbps", type=float, default=100.0)
    ap.add_argument("--state-mb", type=int, nargs="*", default=[1, 16, 128])
    ap.add_argument("--skip-restart", action="store_true")
    ap.add_argument("--skip-walk", action="store_true")
    a = ap.parse_args()
    import controller_core
    print(f"code under test: {Path(controller_core.__file__).parent}")
    if not a.skip_restart:
        restart_figures(a.records, a.brokers, a.repeats)
    if a.skip_walk:
        return
    log_bytes = int(a.log_gb * (1 << 30))
    has_snapshots = hasattr(SimulatedQuorum, "offer_snapshot")
    for state_mb in [None, *a.state_mb] if has_snapshots else [None]:
        dur, installs = walk(log_bytes, a.bandwidth_mbps * 1e6,
                             None if state_mb is None else state_mb << 20)
        what = "no snapshot" if state_mb is None else f"snapshot of {state_mb} MiB"
        print(f"{{0,1,2}} -> {{3,4,5}} with a {a.log_gb:g} GiB metadata log at "
              f"{a.bandwidth_mbps:g} MB/s, {what}: {dur / 1000:.1f} s simulated "
              f"({installs} snapshots fetched)")


if __name__ == "__main__":
    main()
