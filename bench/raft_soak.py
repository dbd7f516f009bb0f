"""Long randomised soak of the metadata quorum (outside CI): many chaos seeds in parallel.

Every seed is one ``tests/raft/chaos.run_chaos`` run — crashes, partitions, loss, voter
changes and the fault shapes of issues 12 and 20, every event checked against the safety
invariants and liveness (no stretch of 30 simulated seconds without a leader while one is
electable), then a heal that must elect a leader and commit. Prints seeds and events run,
faults and shapes fired, the longest electable stretch without a leader, and each failure
with the command that replays it.

    nice -n 10 .venv/bin/python bench/raft_soak.py --first 100000 --count 10000 \\
        --events 10000 --procs 2 [--minutes 60]
    .venv/bin/python bench/raft_soak.py --seed N --events 10000   # replay one seed
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections import Counter
from multiprocessing import Pool, TimeoutError
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "raft"))

from chaos import SHAPES, run_chaos

from controller_core.raft.invariants import LIVENESS_MS


def _worker_init() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def one(job: tuple[int, int]) -> tuple[int, int, int, dict[str, int], float, str | None]:
    """(seed, events, faults, shapes fired, longest electable leaderless stretch in ms,
    failure message or None)."""
    seed, events = job
    try:
        r = run_chaos(seed, events)
    except AssertionError as e:
        return seed, events, 0, {}, 0.0, f"{type(e).__name__}: {e}"
    return seed, r.events, r.faults, r.fired, r.max_leaderless_ms, None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--first", type=int, default=100_000, help="first seed")
    ap.add_argument("--count", type=int, default=10_000, help="number of seeds")
    ap.add_argument("--events", type=int, default=10_000, help="events per seed")
    ap.add_argument("--procs", type=int, default=2, help="worker processes")
    ap.add_argument("--minutes", type=float, default=None,
                    help="stop starting seeds after this long and report what ran")
    ap.add_argument("--seed", type=int, default=None, help="replay one seed in this process")
    a = ap.parse_args()
    if a.count <= 0 or a.events <= 0 or a.procs <= 0:
        print("raft_soak: --count, --events and --procs must be > 0", file=sys.stderr)
        return 2
    if a.seed is not None:
        r = run_chaos(a.seed, a.events)  # raises with the seed and event on a violation
        print(r)
        return 0
    deadline = time.monotonic() + a.minutes * 60 if a.minutes is not None else None
    seeds = range(a.first, a.first + a.count)
    done = events = faults = 0
    fired: Counter[str] = Counter()
    leaderless = (0.0, -1)  # the longest electable stretch without a leader, and its seed
    failures: list[tuple[int, str]] = []
    t0 = time.monotonic()
    with Pool(a.procs, initializer=_worker_init) as pool:
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop and report
        it = pool.imap_unordered(one, ((s, a.events) for s in seeds), chunksize=1)
        try:
            while done < a.count:
                if deadline is not None and time.monotonic() > deadline:
                    break
                try:
                    seed, ev, fl, sh, gap, err = it.next(timeout=1.0)
                except TimeoutError:
                    continue
                done += 1
                events += ev
                faults += fl
                fired.update(sh)
                leaderless = max(leaderless, (gap, seed))
                if err is not None:
                    failures.append((seed, err))
                    print(f"FAIL seed {seed}: {err[:400]}", flush=True)
                if done % 100 == 0:
                    print(f"... {done} seeds, {events} events, {len(failures)} failures, "
                          f"{time.monotonic() - t0:.0f} s", flush=True)
        except KeyboardInterrupt:
            print("interrupted: reporting the seeds that finished", flush=True)
        pool.terminate()
    wall = time.monotonic() - t0
    print(f"seeds run: {done} of {a.count} (from {a.first}), events: {events} "
          f"({a.events} per seed), wall {wall:.0f} s, {a.procs} processes")
    print(f"faults fired: {faults}; shapes fired: "
          + ", ".join(f"{k} {fired.get(k, 0)}" for k in SHAPES))
    print(f"longest stretch without a leader while one was electable: "
          f"{leaderless[0] / 1000:.1f} s (seed {leaderless[1]}; the checker fails a run at "
          f"{LIVENESS_MS / 1000:.0f} s)")
    print(f"failures: {len(failures)}")
    for seed, err in sorted(failures):
        print(f"  seed {seed}: {err[:300]}")
        print(f"    replay: .venv/bin/python bench/raft_soak.py --seed {seed} "
              f"--events {a.events}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
