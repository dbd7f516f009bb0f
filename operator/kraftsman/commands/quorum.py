"""`kraftsman quorum describe|alter` — what kafka-metadata-quorum does, on a local embedded
cluster or a real one (`--bootstrap-server`)."""

from __future__ import annotations

import argparse
from typing import Any

from controller_core.errors import KafkaApiError
from controller_core.model import is_whole_number, parse_endpoint
from controller_core.orchestration.voters import (
    VoterChangeWalker,
    WalkPhase,
    WalkProgress,
    voter_set_problems,
)
from controller_core.raft.describe import QuorumStatus, format_replication
from kraftsman.cli_errors import UsageError
from kraftsman.commands.target import Cluster, cluster_id_of
from kraftsman.commands.views import _common, emit, opened

POLL_SECONDS = 0.5  # simulated time between two looks at a voter change
MAX_WALK_SECONDS = 3600.0


def register(sub: Any) -> None:
    q = sub.add_parser("quorum", help="describe or change the KRaft metadata quorum")
    q_sub = q.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = q_sub.add_parser("describe", help="like kafka-metadata-quorum --describe --status")
    _common(p)
    p.add_argument("--replication", action="store_true",
                   help="per-replica figures (like --describe --replication)")
    p.set_defaults(handler=cmd_describe, read_only=True)
    p = q_sub.add_parser("alter", help="walk the voters to a new set, one voter at a time")
    _common(p)
    p.add_argument("--voters", required=True, help="comma-separated node ids, e.g. 0,3,4")
    p.add_argument("--controller", action="append", default=[], metavar="ID=NAME://HOST:PORT",
                   help="the advertised controller listener of a node to add as a voter (a "
                        "real cluster needs it; repeat for several), e.g. "
                        "3=CONTROLLER://kafka-controller-3:9093")
    p.add_argument("--no-wait", action="store_true", help="take one step and return")
    p.set_defaults(handler=cmd_alter)


def observers(q: QuorumStatus) -> list[int]:
    return sorted(r.replica_id for r in q.replicas if r.status == "Observer")


def format_status(q: QuorumStatus, cluster_id: str) -> list[str]:
    """``kafka-metadata-quorum --describe --status`` (MetadataQuorumCommand): ClusterId first,
    CurrentObservers after the voters; TargetVoters only while a voter change is pending."""
    def ids(xs: Any) -> str:
        return "[" + ",".join(map(str, xs)) + "]"

    rows = [("ClusterId", cluster_id), ("LeaderId", q.leader_id),
            ("LeaderEpoch", q.leader_epoch), ("HighWatermark", q.high_watermark),
            ("MaxFollowerLag", q.max_follower_lag),
            ("MaxFollowerLagTimeMs", q.max_follower_lag_time_ms),
            ("CurrentVoters", ids(q.current_voters)), ("CurrentObservers", ids(observers(q)))]
    if q.target_voters is not None:
        rows.append(("TargetVoters", ids(q.target_voters)))
    return [f"{k + ':':<24}{v}" for k, v in rows]


def status_json(q: QuorumStatus, cluster_id: str) -> dict[str, Any]:
    return {
        "clusterId": cluster_id, "leaderId": q.leader_id, "leaderEpoch": q.leader_epoch,
        "highWatermark": q.high_watermark, "maxFollowerLag": q.max_follower_lag,
        "maxFollowerLagTimeMs": q.max_follower_lag_time_ms,
        "currentVoters": list(q.current_voters), "currentObservers": observers(q),
        "targetVoters": None if q.target_voters is None else list(q.target_voters),
        "replicas": [{"replicaId": r.replica_id, "logEndOffset": r.log_end_offset,
                      "lag": r.lag, "lagTimeMs": r.lag_time_ms, "status": r.status,
                      "isReassignTarget": r.is_reassign_target} for r in q.replicas],
    }


def cmd_describe(args: argparse.Namespace) -> int:
    with opened(args) as c:
        q = _describe(c)
        cluster_id = cluster_id_of(c)
    emit(args, status_json(q, cluster_id),
         lambda: (format_replication(q).rstrip("\n").splitlines() if args.replication
                  else format_status(q, cluster_id)))
    return 0


def _describe(c: Cluster) -> QuorumStatus:
    """A Kafka error (no leader) propagates: the CLI prints it as one line and exits 1."""
    return c.describe_quorum()


def parse_voters(text: str) -> list[int]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(is_whole_number(p) for p in parts):
        raise UsageError(f"--voters {text!r}: expected comma-separated node ids, e.g. 0,3,4")
    return [int(p) for p in parts]


def parse_controllers(values: list[str]) -> dict[int, list[str]]:
    """``--controller 3=CONTROLLER://host:9093`` (repeatable) -> {3: [endpoint, ...]}."""
    out: dict[int, list[str]] = {}
    for text in values:
        node, sep, endpoint = text.partition("=")
        if not sep or not is_whole_number(node.strip()) or parse_endpoint(endpoint) is None:
            raise UsageError(f"--controller {text!r}: expected ID=NAME://HOST:PORT, e.g. "
                             "3=CONTROLLER://kafka-controller-3:9093")
        out.setdefault(int(node), []).append(endpoint.strip())
    return out


def walk(c: Cluster, voters: list[int], *, wait: bool, on_step: Any = None,
         endpoints: dict[int, list[str]] | None = None) -> WalkProgress:
    """Validate the target voters, then walk to them (simulated time on an embedded
    cluster, the wall clock on a real one)."""
    problems = voter_set_problems(voters, c.quorum_node_ids(), c.live_quorum_nodes())
    if problems:
        raise UsageError(problems)
    walker = VoterChangeWalker(c, voters, endpoints)
    deadline = c.now + MAX_WALK_SECONDS
    last = ""
    while True:
        try:
            p = walker.step()
        except KafkaApiError as e:
            raise UsageError(f"voter change refused: {e}") from None
        if on_step is not None and p.action != last:
            on_step(p)
            last = p.action
        if p.phase is not WalkPhase.RUNNING or not wait or c.now >= deadline:
            return p
        if not p.acted:  # a committed change is looked at again at once
            c.advance(POLL_SECONDS)


def cmd_alter(args: argparse.Namespace) -> int:
    voters = parse_voters(args.voters)
    endpoints = parse_controllers(args.controller)

    def show(p: WalkProgress) -> None:
        if args.output == "text":
            print(f"voters {','.join(map(str, p.current))} -> {','.join(map(str, p.target))}: "
                  f"{p.action} (leader {p.leader_id}, epoch {p.leader_epoch})")

    with opened(args) as c:
        p = walk(c, voters, wait=not args.no_wait, on_step=show, endpoints=endpoints)
        q = _describe(c)
        cluster_id = cluster_id_of(c)
    data = {"phase": p.phase.value, **status_json(q, cluster_id)}
    emit(args, data, lambda: format_status(q, cluster_id))
    return 0 if p.phase is not WalkPhase.FAILED else 1
