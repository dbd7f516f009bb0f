"""etcd-io/raft-style data-driven transcripts: a script of commands and the expected output.

File format (tests/raft/testdata/*.txt)::

    # comment
    command arg arg
    ----
    expected output (may be empty)
    <blank line>

Commands: ``nodes 0 1 2 [observers 3]``, ``campaign N`` (fire N's election timer),
``tick N MS`` (advance N's clock by MS and tick), ``deliver [N]`` (deliver queued messages —
all, or only those to N — until none are left, printing each), ``drop [N]`` (discard queued
messages to N or all), ``propose N rec...``, ``alter N ids|null``, ``crash N`` (hard kill,
losing unflushed writes), ``restart N``, ``status``, ``log N``, ``describe N``,
``cluster-id N ID`` (a node configured with another cluster id), ``hold SRC DST [TYPE]``
(set aside, from now on, the messages SRC sends DST — of that printed type only, e.g.
``VoteRequest`` — as a network that delays them), ``release SRC DST`` (deliver what was held
back and stop holding), ``resign N`` (graceful leader shutdown: EndQuorumEpoch).

Run ``RAFT_REWRITE=1 pytest tests/raft/test_transcripts.py`` to regenerate expected output
after an intended change, and review the diff.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, fields

from controller_core.raft.config import RaftConfig
from controller_core.raft.describe import format_replication, format_status
from controller_core.raft.messages import BrokerInfo, Envelope
from controller_core.raft.node import RaftNode
from controller_core.raft.records import Batch
from controller_core.raft.storage import MemoryStorage


def fmt_body(env: Envelope) -> str:
    b = env.body
    parts = []
    for f in fields(b):  # type: ignore[arg-type]
        v = getattr(b, f.name)
        if f.name == "batches":
            v = "[" + ", ".join(fmt_batch(x) for x in v) + "]"
        elif f.name == "error":
            if v.code == 0:
                continue
            v = v.name
        elif f.name in ("cluster_id", "max_bytes", "host", "port", "brokers", "pre_vote") or (
                f.name in ("diverging_epoch", "diverging_end_offset") and v < 0) or (
                f.name == "snapshot_id" and v is None):
            continue
        parts.append(f"{f.name}={v}")
    name = type(b).__name__
    if getattr(b, "pre_vote", False):
        name = "Pre" + name
    return f"{env.src}->{env.dst} {name} " + " ".join(parts)


def fmt_batch(b: Batch) -> str:
    if b.control is not None:
        c = b.control
        name = type(c).__name__
        if name == "VoterAssignment":
            return (f"{b.base_offset}@e{b.epoch}:Voters{list(c.current_voters)}"  # type: ignore[union-attr]
                    f"->{list(c.target_voters) if c.target_voters else None}")  # type: ignore[union-attr]
        return f"{b.base_offset}@e{b.epoch}:LeaderChange"
    recs = ",".join(r.decode(errors="replace") for r in b.records)
    return f"{b.base_offset}@e{b.epoch}:[{recs}]"


@dataclass
class _Sim:
    nodes: dict[int, RaftNode | None]
    storages: dict[int, MemoryStorage]
    clocks: dict[int, int]
    queue: list[Envelope]
    voters: tuple[int, ...]
    cluster_ids: dict[int, str | None]
    out: list[str]
    holds: list[tuple[int, int, str | None]] = field(default_factory=list)
    held: list[Envelope] = field(default_factory=list)

    def is_held(self, env: Envelope) -> bool:
        name = fmt_body(env).split()[1]
        return any(env.src == s and env.dst == d and (t is None or t == name)
                   for s, d, t in self.holds)

    def boot(self, n: int) -> None:
        rec = self.storages[n].load()
        self.nodes[n] = RaftNode(n, voters=self.voters, rng=random.Random(n), now_ms=self.clocks[n],
                                 config=RaftConfig(), quorum_state=rec.quorum_state,
                                 log=rec.batches, cluster_id=self.cluster_ids.get(n, "kraft-1"),
                                 bootstrap_servers=self.voters)
        self.process(n, quiet=True)

    def node(self, n: int) -> RaftNode:
        node = self.nodes[n]
        if node is None:
            raise ValueError(f"node {n} is down")
        return node

    def process(self, n: int, quiet: bool = False) -> None:
        node = self.node(n)
        for _ in range(10):  # zero-delay timers (e.g. a follower's next fetch) fire now
            if node.next_deadline() > self.clocks[n]:
                break
            node.tick(self.clocks[n])
            self._drain(n, node, quiet)
        self._drain(n, node, quiet)

    def _drain(self, n: int, node: RaftNode, quiet: bool) -> None:
        while node.has_ready():
            r = node.ready()
            st = self.storages[n]
            if r.quorum_state is not None:
                st.save_quorum_state(r.quorum_state)
                if not quiet:
                    q = r.quorum_state
                    self.out.append(f"  {n}: persist epoch={q.epoch} leader={q.leader_id} "
                                    f"voted={q.voted_for} -> {node.role_name()}")
            if r.truncate_to is not None:
                st.truncate(r.truncate_to)
                self.out.append(f"  {n}: truncate to {r.truncate_to}")
            if r.appends:
                st.append(r.appends)
                if not quiet:
                    self.out.append(f"  {n}: append {' '.join(fmt_batch(b) for b in r.appends)}")
            if r.sync:
                st.flush()
            self.queue.extend(r.messages)
            if r.committed and not quiet:
                self.out.append(f"  {n}: commit hw={r.high_watermark}")
            node.advance(r)

    def tick(self, n: int, ms: int) -> None:
        self.clocks[n] += ms
        self.node(n).tick(self.clocks[n])
        self.process(n)


def run_script(text: str) -> str:
    """Execute a transcript file; returns it with the actual outputs filled in."""
    sim = _Sim({}, {}, {}, [], (), {}, [])
    blocks = text.split("\n\n")
    result: list[str] = []
    for block in blocks:
        if not block.strip():
            continue
        lines = block.strip("\n").split("\n")
        comments = [ln for ln in lines if ln.startswith("#")]
        rest = [ln for ln in lines if not ln.startswith("#")]
        if not rest:
            result.append("\n".join(comments))
            continue
        cmd = rest[0]
        sim.out = []
        _execute(sim, cmd.split())
        result.append("\n".join([*comments, cmd, "----", *sim.out]))
    return "\n\n".join(result) + "\n"


def _execute(sim: _Sim, argv: list[str]) -> None:
    op, args = argv[0], argv[1:]
    if op == "nodes":
        ids = [int(a) for a in args if a != "observers"]
        k = args.index("observers") if "observers" in args else len(args)
        sim.voters = tuple(int(a) for a in args[:k])
        for n in ids:
            sim.storages[n] = MemoryStorage()
            sim.clocks[n] = 0
            sim.boot(n)
        sim.out.append(f"voters={list(sim.voters)} observers={ids[len(sim.voters):]}")
    elif op == "cluster-id":
        sim.cluster_ids[int(args[0])] = args[1]
        sim.storages[int(args[0])] = MemoryStorage()
        sim.boot(int(args[0]))
    elif op == "campaign":
        n = int(args[0])
        node = sim.node(n)
        # brokers normally arrive by DiscoverBrokers; scripts start from a known set
        for m in sim.nodes:
            node.brokers.setdefault(m, BrokerInfo(m, 0, "", 0))
        from controller_core.raft.state import Role
        due = node._fetch_deadline if node.role is Role.FOLLOWER else node._election_deadline
        sim.tick(n, max(0, due - sim.clocks[n]))
    elif op == "tick":
        sim.tick(int(args[0]), int(args[1]))
    elif op in ("deliver", "drop"):
        only = int(args[0]) if args else None
        rounds = 0
        while True:
            batch = [e for e in sim.queue if only is None or e.dst == only]
            if not batch:
                break
            sim.queue = [e for e in sim.queue if not (only is None or e.dst == only)]
            for env in batch:
                if "DiscoverBrokers" in type(env.body).__name__:
                    continue  # gossip is noise in transcripts; tested elsewhere
                if sim.is_held(env):
                    sim.held.append(env)
                    sim.out.append(f"held {fmt_body(env)}")
                    continue
                if op == "drop":
                    sim.out.append(f"dropped {fmt_body(env)}")
                    continue
                sim.out.append(fmt_body(env))
                if sim.nodes.get(env.dst) is None:
                    sim.out.append(f"  ({env.dst} is down)")
                    continue
                sim.node(env.dst).step(env, sim.clocks[env.dst])
                sim.process(env.dst)
            rounds += 1
            if op == "drop" or rounds > 50:
                break
    elif op == "hold":
        sim.holds.append((int(args[0]), int(args[1]), args[2] if len(args) > 2 else None))
    elif op == "release":
        src, dst = int(args[0]), int(args[1])
        sim.holds = [h for h in sim.holds if (h[0], h[1]) != (src, dst)]
        back = [e for e in sim.held if (e.src, e.dst) == (src, dst)]
        sim.held = [e for e in sim.held if (e.src, e.dst) != (src, dst)]
        sim.queue = back + sim.queue
        sim.out.append(f"released {len(back)}")
    elif op == "resign":
        n = int(args[0])
        sim.node(n).resign(sim.clocks[n])
        sim.process(n)
    elif op == "propose":
        n = int(args[0])
        off = sim.node(n).propose([a.encode() for a in args[1:]], sim.clocks[n])
        sim.out.append(f"last offset {off}")
        sim.process(n)
    elif op == "alter":
        n = int(args[0])
        target = None if args[1:] == ["null"] else [int(a) for a in args[1:]]
        res = sim.node(n).alter_quorum(target, sim.clocks[n])
        sim.out.append(f"{res.error.name}: {res.message}")
        sim.out.append(f"current={list(res.current_voters)} target="
                       f"{list(res.target_voters) if res.target_voters else None}")
        sim.process(n)
    elif op == "crash":
        n = int(args[0])
        sim.storages[n].crash(lose_unflushed=True)
        sim.nodes[n] = None
        sim.queue = [e for e in sim.queue if e.src != n]
    elif op == "restart":
        sim.boot(int(args[0]))
        node = sim.node(int(args[0]))
        sim.out.append(f"{node.id}: {node.role_name()} epoch={node.epoch} "
                       f"log_end={node.log.end_offset}")
    elif op == "status":
        for n in sorted(sim.nodes):
            node = sim.nodes[n]
            if node is None:
                sim.out.append(f"{n}: down")
                continue
            sim.out.append(f"{n}: {node.role_name()} epoch={node.epoch} leader={node.leader_id} "
                           f"hw={node.hw} log_end={node.log.end_offset} "
                           f"voters={list(node.voters())}")
    elif op == "log":
        node = sim.node(int(args[0]))
        sim.out.append(" ".join(fmt_batch(b) for b in node.log.batches) or "(empty)")
    elif op == "describe":
        n = int(args[0])
        resp = sim.node(n).describe_quorum(sim.clocks[n])
        if resp.status is None:
            sim.out.append(f"{resp.error.name} leader={resp.leader_id} epoch={resp.leader_epoch}")
        else:
            sim.out.extend(format_status(resp.status).rstrip("\n").split("\n"))
            sim.out.extend(format_replication(resp.status).rstrip("\n").split("\n"))
    else:
        raise ValueError(f"unknown transcript command {op!r}")
