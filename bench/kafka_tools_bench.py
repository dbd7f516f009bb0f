"""kraftsman's console script against Apache Kafka's own tools, on one real Kafka 4.4 cluster
started by this run (tests/real/kafka.py, the same code as the tests' fixture).

For each size N (partitions of RF 3 on brokers 0-2):
* reassign: every partition's replica on broker 0 moves to broker 3. kraftsman: `kraftsman
  apply -f plan.yaml` (it waits until done). Kafka: `kafka-reassign-partitions --execute`,
  then `--verify` every second until it says every reassignment is complete (the loop a user
  runs). Each side moves its own, identical topic; ``--rounds`` rounds (default 3) alternate
  which side goes first, and print the CPU seconds of each side's processes beside the wall
  time — the cluster's own time to complete the moves dominates and drifts with load.
* elect: every partition's replicas are reordered so the leader is not the preferred replica
  (a reorder moves no data), then `kraftsman elect --all-topic-partitions` against
  `kafka-leader-election --election-type PREFERRED --all-topic-partitions`.
* voters: controller 103 added to the quorum, then removed: `kraftsman quorum alter` against
  `kafka-metadata-quorum add-controller / remove-controller`, ``--rounds`` times alternating
  who goes first, each side's add timed only once 103 has caught up as an observer (Kafka's
  leader refuses AddRaftVoter before that; kraftsman's walker waits for it, which an untimed
  wait here keeps out of the figure).

Wall seconds from command to exit (and to "complete" for the verify loop); the machine's load
average is printed beside them, as other work on a shared machine changes wall times.

    .venv/bin/python bench/kafka_tools_bench.py [--sizes 100,1000] [--rounds 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.real.kafka import (  # noqa: E402 (the repository's own test code)
    RealKafka,
    install,
    java,
)

BIN = Path(sys.executable).parent / "kraftsman"


def load() -> str:
    return "load {:.1f}/{:.1f}/{:.1f}".format(*os.getloadavg())


def timed(cmd: list[str], **kw: object) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    elapsed = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed:\n{done.stdout[-2000:]}"
                         f"{done.stderr[-2000:]}")
    return elapsed, done


def tool_cmd(tool: str, *args: str) -> list[str]:
    from tests.real.kafka import TOOL_JVM, TOOLS, classpath
    return [java(), *TOOL_JVM, "-Dlog4j2.level=WARN", "-cp", classpath(), TOOLS[tool], *args]


def make_topic(c: RealKafka, name: str, n: int) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap())
    try:
        admin.create_topics([NewTopic(name, -1, -1, replica_assignments={
            p: [(p + i) % 3 for i in range(3)] for p in range(n)})], timeout_ms=120_000)
    finally:
        admin.close()
    wait_in_sync(c, name, n)
    known_everywhere(c, name, n)


def known_everywhere(c: RealKafka, name: str, n: int) -> None:
    """Until every broker describes the new topic: a tool asks whichever broker it reaches,
    and one whose copy of the metadata trails answers "Topic not found" (seen with
    kafka-reassign-partitions right after a 1,000-partition topic was created)."""
    from kafka.protocol.metadata import MetadataRequest

    from tests.serve.raw_wire import Wire

    deadline = time.monotonic() + 120
    w = Wire(c.bootstrap())
    try:
        for b in c.brokers:
            while True:
                r = w.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
                    name=name)], allow_auto_topic_creation=False), node=b)
                if r.topics[0].error_code == 0 and len(r.topics[0].partitions) == n:
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"broker {b} does not know topic {name} after 120 s")
                time.sleep(0.5)
    finally:
        w.close()


def drop_topics(c: RealKafka, names: list[str]) -> None:
    """Each round's topics go after it: the brokers' small heaps (tests/real/kafka.py) hold a
    few thousand replicas, and a cluster kept growing round by round slows down (GC) until
    it stops answering — which was measured instead of the tools."""
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap())
    try:
        admin.delete_topics(names, timeout_ms=120_000)
    finally:
        admin.close()
    deadline = time.monotonic() + 120
    while True:
        with c.admin() as a:
            left = {d.tp.topic for d in a.describe_partitions(topics=None)} & set(names)
        if not left:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"topics {sorted(left)} not deleted within 120 s")
        time.sleep(0.5)


def wait_in_sync(c: RealKafka, name: str, n: int) -> None:
    deadline = time.monotonic() + 300
    while True:
        with c.admin() as a:
            parts = a.describe_partitions(topics=[name])
        if len(parts) == n and all(set(d.isr) == set(d.replicas) and d.leader >= 0
                                   for d in parts):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"{name}: not in sync within 300 s")
        time.sleep(0.5)


def assignment(c: RealKafka, name: str) -> dict[int, list[int]]:
    """The topic's replicas as the brokers describe them; a broker that does not know a new
    topic yet describes nothing, so an empty answer is asked again."""
    deadline = time.monotonic() + 60
    while True:
        with c.admin() as a:
            got = {d.tp.partition: list(d.replicas)
                   for d in a.describe_partitions(topics=[name])}
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def kraftsman_plan(path: Path, name: str, moves: dict[int, list[int]]) -> Path:
    lines = ["apiVersion: kraftsman.io/v1alpha1", "kind: PartitionReassignment",
             f"metadata: {{name: {name}}}", "spec:", "  clusterRef: {name: prod}",
             f"  maxConcurrentMoves: {len(moves)}", "  partitions:"]
    lines += [f"    - {{topic: {name}, partition: {p}, replicas: {r}}}" for p, r in moves.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def kafka_plan(path: Path, name: str, moves: dict[int, list[int]]) -> Path:
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": name, "partition": p, "replicas": r} for p, r in moves.items()]}))
    return path


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def reassign_ours(c: RealKafka, work: Path, name: str, moves: dict[int, list[int]]
                  ) -> tuple[float, float]:
    """kraftsman's apply, to its exit (it returns once every move is complete): wall, CPU s."""
    cpu = _children_cpu()
    elapsed, done = timed([str(BIN), "apply", "-f", str(kraftsman_plan(work / f"{name}.yaml",
                                                                         name, moves)),
                           "--bootstrap-server", c.bootstrap(), "--state-dir",
                           str(work / f"state-{name}")])
    if done.returncode != 0:
        raise SystemExit(f"kraftsman apply exited {done.returncode}:\n{done.stdout[-2000:]}"
                         f"{done.stderr[-2000:]}")
    landed(c, name, moves, done.stdout)
    return elapsed, _children_cpu() - cpu


def landed(c: RealKafka, name: str, moves: dict[int, list[int]], output: str) -> None:
    """Every move is where the plan says, as the brokers describe it. A broker's copy of the
    metadata can trail the controller by seconds under load (the tool that moved them asked
    another broker, or the controller): ask again for up to a minute before calling it lost."""
    deadline = time.monotonic() + 60
    while (got := assignment(c, name)) != moves:
        if time.monotonic() > deadline:
            wrong = {p: (got.get(p), r) for p, r in moves.items() if got.get(p) != r}
            raise SystemExit(f"{name}: {len(wrong)} moves are not where the plan says after "
                             f"a minute, e.g. {dict(list(wrong.items())[:5])} (described, "
                             f"planned); the tool said:\n{output[-2000:]}")
        time.sleep(0.5)


def reassign_theirs(c: RealKafka, work: Path, name: str, moves: dict[int, list[int]]
                    ) -> tuple[float, float]:
    """--execute, then --verify every second until complete: wall, CPU s (the tool's JVMs)."""
    plan = kafka_plan(work / f"{name}.json", name, moves)
    cpu = _children_cpu()
    start = time.monotonic()
    timed(tool_cmd("kafka-reassign-partitions", "--bootstrap-server", c.bootstrap(),
                   "--reassignment-json-file", str(plan), "--execute"))
    while True:
        _, done = timed(tool_cmd("kafka-reassign-partitions", "--bootstrap-server",
                                 c.bootstrap(), "--reassignment-json-file", str(plan),
                                 "--verify"))
        if "is still in progress" not in done.stdout:
            break
        time.sleep(1)
    elapsed, used = time.monotonic() - start, _children_cpu() - cpu
    # --verify asks the controller; the brokers' metadata shows the final replicas a moment
    # later (kraftsman's apply waits for that too: it counts in its figure, not in this one)
    landed(c, name, moves, done.stdout)
    return elapsed, used


def bench_reassign(c: RealKafka, work: Path, n: int, rounds: int) -> None:
    """``rounds`` rounds on fresh topics, the side that goes first alternating (a busy
    cluster's speed drifts); each round and the medians are printed."""
    walls: dict[str, list[float]] = {"ours": [], "theirs": []}
    for i in range(rounds):
        names = {"ours": f"k{i}-{n}", "theirs": f"t{i}-{n}"}
        for name in names.values():
            make_topic(c, name, n)
        moves = {p: [3 if r == 0 else r for r in rs]
                 for p, rs in assignment(c, names["ours"]).items()}
        order = ("ours", "theirs") if i % 2 == 0 else ("theirs", "ours")
        got = {}
        for side in order:
            run = reassign_ours if side == "ours" else reassign_theirs
            got[side] = run(c, work, names[side], moves)
            walls[side].append(got[side][0])
        drop_topics(c, list(names.values()))
        print(f"{f'reassign {n}, round {i + 1} ({order[0]} first)':<34}"
              f"{got['ours'][0]:>12.1f}{got['theirs'][0]:>14.1f}   "
              f"CPU s {got['ours'][1]:.1f} / {got['theirs'][1]:.1f}, {load()}", flush=True)
    print(f"{f'reassign {n} partitions, median':<34}{statistics.median(walls['ours']):>12.1f}"
          f"{statistics.median(walls['theirs']):>14.1f}", flush=True)


def bench_elect(c: RealKafka, work: Path, n: int) -> tuple[float, float]:
    results = []
    for who in ("kraftsman", "kafka"):
        name = f"e-{who}-{n}"
        make_topic(c, name, n)
        swapped = {p: [rs[1], rs[0], rs[2]] for p, rs in assignment(c, name).items()}
        timed(tool_cmd("kafka-reassign-partitions", "--bootstrap-server", c.bootstrap(),
                       "--reassignment-json-file",
                       str(kafka_plan(work / f"swap-{name}.json", name, swapped)), "--execute"))
        deadline = time.monotonic() + 120
        while assignment(c, name) != swapped and time.monotonic() < deadline:
            time.sleep(0.5)
        if who == "kraftsman":
            elapsed, _ = timed([str(BIN), "elect", "--all-topic-partitions",
                                "--bootstrap-server", c.bootstrap(),
                                "--state-dir", str(work / "state-elect")])
        else:
            elapsed, _ = timed(tool_cmd("kafka-leader-election", "--bootstrap-server",
                                        c.bootstrap(), "--election-type", "PREFERRED",
                                        "--all-topic-partitions"))
        with c.admin() as a:
            led = [d.leader == d.replicas[0] for d in a.describe_partitions(topics=[name])]
        assert all(led), f"{who}: not every partition is led by its preferred replica"
        drop_topics(c, [name])
        results.append(elapsed)
    return results[0], results[1]


def _caught_up(c: RealKafka, node: int, timeout: float = 120.0) -> None:
    """Both tools need ``node`` fetching as an observer and caught up: Kafka's leader refuses
    AddRaftVoter before that, and kraftsman's walker waits for it. Time neither side's wait."""
    deadline = time.monotonic() + timeout
    while True:
        with c.admin() as a:
            replica = next((r for r in a.describe_quorum().replicas if r.replica_id == node),
                           None)
        if replica is not None and replica.lag == 0:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"controller {node} did not catch up in {timeout:.0f} s")
        time.sleep(0.5)


def bench_voters(c: RealKafka, work: Path, rounds: int
                 ) -> tuple[list[float], list[float], list[float], list[float]]:
    """Add controller 103 and remove it again, ``rounds`` times, alternating which tool goes
    first; returns the wall seconds of (our adds, their adds, our removes, their removes)."""
    c.start(103)
    state = work / "state-quorum"
    cfg = c.node_dir(103) / "server.properties"
    ours_add = [str(BIN), "quorum", "alter", "--voters", "100,101,102,103", "--controller",
                f"103={c.controller_endpoint(103)}", "--bootstrap-server", c.bootstrap(),
                "--state-dir", str(state)]
    ours_remove = [str(BIN), "quorum", "alter", "--voters", "100,101,102",
                   "--bootstrap-server", c.bootstrap(), "--state-dir", str(state)]
    theirs_add = tool_cmd("kafka-metadata-quorum", "--bootstrap-server", c.bootstrap(),
                          "--command-config", str(cfg), "add-controller")
    theirs_remove = tool_cmd("kafka-metadata-quorum", "--bootstrap-server", c.bootstrap(),
                             "remove-controller", "--controller-id", "103",
                             "--controller-directory-id", c.node(103).directory_id)
    times: dict[str, list[float]] = {"oa": [], "ta": [], "or": [], "tr": []}
    for r in range(rounds):
        sides = [("o", ours_add, ours_remove), ("t", theirs_add, theirs_remove)]
        for side, add, remove in (sides if r % 2 == 0 else sides[::-1]):
            _caught_up(c, 103)
            elapsed, done = timed(add)
            if done.returncode != 0:
                raise SystemExit(f"add controller failed: {done.stdout}{done.stderr}")
            times[side + "a"].append(elapsed)
            elapsed, done = timed(remove)
            if done.returncode != 0:
                raise SystemExit(f"remove controller failed: {done.stdout}{done.stderr}")
            times[side + "r"].append(elapsed)
    return times["oa"], times["ta"], times["or"], times["tr"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--rounds", type=int, default=3,
                        help="reassignment rounds per size, alternating who goes first")
    parser.add_argument("--steps", default="reassign,elect,voters",
                        help="which comparisons to run (comma-separated)")
    parser.add_argument("--dir", type=Path, default=None,
                        help="where the cluster and the plans go (default: a temporary dir)")
    args = parser.parse_args()
    install()
    work = args.dir or Path(tempfile.mkdtemp(prefix="kafka-tools-bench-"))
    cluster = RealKafka(work / "cluster")
    print(f"starting a real Kafka in {cluster.dir} ({load()})", flush=True)
    cluster.up()
    try:
        print(f"{'step':<34}{'kraftsman s':>12}{'Kafka tool s':>14}   {'':<18}", flush=True)
        steps = set(args.steps.split(","))
        for n in (int(x) for x in args.sizes.split(",")):
            if "reassign" in steps:
                bench_reassign(cluster, work, n, args.rounds)
            if "elect" in steps:
                ours, theirs = bench_elect(cluster, work, n)
                print(f"{f'preferred election, {n} partitions':<34}{ours:>12.1f}"
                      f"{theirs:>14.1f}   {load()}", flush=True)
        if "voters" not in steps:
            return 0
        add_ours, add_theirs, rm_ours, rm_theirs = bench_voters(cluster, work, args.rounds)
        for step, ours_s, theirs_s in (("add controller 103", add_ours, add_theirs),
                                       ("remove controller 103", rm_ours, rm_theirs)):
            print(f"{step + ' (median)':<34}{statistics.median(ours_s):>12.1f}"
                  f"{statistics.median(theirs_s):>14.1f}   {load()}; rounds: ours "
                  f"{', '.join(f'{x:.1f}' for x in ours_s)} / theirs "
                  f"{', '.join(f'{x:.1f}' for x in theirs_s)}", flush=True)
    finally:
        cluster.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
