"""KafkaQuorum: walk the metadata quorum's voters to ``spec.voters``, one safe step per pass.

Level-based: every timer pass looks at the quorum (DescribeQuorum) and lets the core's
:class:`~controller_core.orchestration.voters.VoterChangeWalker` take at most one step
(AddRaftVoter / RemoveRaftVoter, KIP-853). The walker keeps no state between passes, so a
changed ``spec.voters`` simply replaces the pending target, and a restarted operator goes on
from whatever the quorum is. Target sets the core refuses (unknown ids, empty, not a majority
of live nodes) are Degraded and nothing changes. Works on the embedded cluster and on the
``kafka`` backend alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import kopf

from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.errors import KafkaApiError
from controller_core.orchestration.voters import (
    QuorumAdmin,
    VoterChangeWalker,
    WalkPhase,
    voter_set_problems,
)
from controller_core.raft.describe import QuorumStatus
from kraftsman.handlers.common import (
    degrade,
    emit,
    finalized,
    generation,
    healthy,
    parse_spec,
    publish,
    resource,
    set_cond,
)
from kraftsman.handlers.runtime import Runtime
from kraftsman.resources import KafkaQuorumSpec
from kraftsman.status import (
    DETAIL_CAP,
    PROGRESSING,
    READY,
    KafkaQuorumStatus,
    QuorumReplica,
    read_status,
)

KIND = "KafkaQuorum"
# The cluster id a user accepts this resource to act on after its KafkaCluster changed.
ACCEPT_CLUSTER = "kraftsman.io/accept-cluster-id"
# kafka backend: a quorum replica that caught up with the leader this recently is live.
LIVE_LAG_MS = 30_000


@dataclass
class Pass:
    """What one reconcile pass found and did."""

    problems: list[str] = field(default_factory=list)
    phase: WalkPhase | None = None
    action: str = ""
    before: list[int] = field(default_factory=list)  # voters and leader before this pass
    before_leader: int | None = None


def nodes_of(admin: Any, q: QuorumStatus) -> tuple[set[int], set[int]]:
    """(node ids that may be voters, the live ones), in the terms voter_set_problems takes.
    The embedded cluster knows them exactly; a real cluster's are its registered brokers and
    the quorum's replicas, live when unfenced or recently caught up with the leader."""
    if isinstance(admin, EmbeddedCluster):
        return admin.quorum_node_ids(), admin.live_quorum_nodes()
    brokers = admin.describe_cluster().brokers
    known = {b.id for b in brokers} | {r.replica_id for r in q.replicas}
    live = {b.id for b in brokers if not b.fenced} | {q.leader_id} | {
        r.replica_id for r in q.replicas if 0 <= r.lag_time_ms <= LIVE_LAG_MS}
    return known, live


def fill(st: KafkaQuorumStatus, q: QuorumStatus) -> None:
    """The figures of `kafka-metadata-quorum describe --status / --replication`."""
    st.leader_id, st.leader_epoch, st.high_watermark = q.leader_id, q.leader_epoch, \
        q.high_watermark
    st.max_follower_lag, st.max_follower_lag_time_ms = max(0, q.max_follower_lag), max(
        0, q.max_follower_lag_time_ms)
    st.current_voters = sorted(q.current_voters)
    st.current_observers = sorted(r.replica_id for r in q.replicas if r.status == "Observer")
    st.replicas = [QuorumReplica(
        node_id=r.replica_id, log_end_offset=max(-1, r.log_end_offset), lag=max(0, r.lag),
        lag_time_ms=r.lag_time_ms if r.lag_time_ms >= 0 else None,
        last_fetch_timestamp=r.last_fetch_timestamp if r.last_fetch_timestamp >= 0 else None,
        last_caught_up_timestamp=(r.last_caught_up_timestamp
                                  if r.last_caught_up_timestamp >= 0 else None),
        status="Leader" if r.status == "Leader" else
        "Follower" if r.status == "Follower" else "Observer") for r in q.replicas[:DETAIL_CAP]]


def quorum_pass(admin: QuorumAdmin, target: list[int], st: KafkaQuorumStatus,
                endpoints: dict[int, list[str]] | None = None) -> Pass:
    """One pass (in a worker thread, under the cluster's lock): validate, step, describe."""
    q = admin.describe_quorum()
    fill(st, q)
    was = Pass(before=sorted(q.current_voters), before_leader=q.leader_id)
    if sorted(set(target)) == sorted(q.current_voters) and (
            q.target_voters is None or sorted(q.target_voters) == sorted(q.current_voters)):
        was.phase, was.action = WalkPhase.COMPLETED, "voters are as desired"
        return was
    known, live = nodes_of(admin, q)
    was.problems = voter_set_problems(target, known, live)
    if was.problems:
        return was
    progress = VoterChangeWalker(admin, target, endpoints).step()
    if progress.phase is WalkPhase.RUNNING and progress.action.startswith(("adding",
                                                                           "removing")):
        fill(st, admin.describe_quorum())  # show the step's effect in this pass's status
    was.phase, was.action = progress.phase, progress.action
    return was


def held(old: KafkaQuorumStatus, now_id: str, accepted: str | None) -> bool:
    """The KafkaCluster now reaches another cluster than the one this resource walked
    (spec.bootstrapServers repointed, an embedded cluster recreated under a new id): its
    voters are changed only once the user accepts that cluster by its id."""
    return old.cluster_id is not None and old.cluster_id != now_id and accepted != now_id


def cluster_changed_message(ref: str, old: KafkaQuorumStatus, now_id: str,
                            target: list[int]) -> str:
    was = f"voters {old.current_voters}" + (
        f", walking to {old.target_voters}" if old.phase == "Changing" else "")
    return (f"KafkaCluster {ref} now reaches cluster {now_id}, but this KafkaQuorum was "
            f"applied to cluster {old.cluster_id} ({was}): no voter of {now_id} is changed. "
            f"To walk {now_id}'s voters to spec.voters {sorted(set(target))}, accept it: "
            f"metadata.annotations {ACCEPT_CLUSTER}: {now_id!r} (kubectl annotate --overwrite "
            f"kq NAME {ACCEPT_CLUSTER}={now_id}); or point KafkaCluster {ref} back at "
            f"{old.cluster_id}")


def problem_reason(problems: list[str]) -> str:
    if any("unknown node" in p for p in problems):
        return "UnknownNode"
    if any("are live" in p for p in problems):
        return "VotersNotLive"
    return "InvalidVoters"


def milestones(old: KafkaQuorumStatus, done: Pass,
               st: KafkaQuorumStatus) -> list[tuple[str, str]]:
    """Events from the difference between the last published quorum (or, on the first
    pass, the quorum as this pass found it) and the quorum now."""
    events = []
    voters = old.current_voters or done.before
    leader = old.leader_id if old.leader_id is not None else done.before_leader
    if voters:
        for node in sorted(set(st.current_voters) - set(voters)):
            events.append(("VoterAdded", f"node {node} joined the voters: {st.current_voters}"))
        for node in sorted(set(voters) - set(st.current_voters)):
            events.append(("VoterRemoved", f"node {node} left the voters: {st.current_voters}"))
    if leader is not None and st.leader_id is not None and leader != st.leader_id and \
            st.leader_id >= 0:
        events.append(("LeaderChanged", f"quorum leader {leader} -> {st.leader_id} "
                       f"(epoch {st.leader_epoch})"))
    return events


def register(registry: kopf.OperatorRegistry, rt: Runtime) -> None:
    @kopf.index(**resource(KIND), registry=registry, id="kq_users")
    async def kq_users(namespace: str, name: str, spec: Any, status: Any, **_: Any) -> Any:
        """(namespace, cluster) -> this quorum, while it may act on the cluster: an invalid
        one (a bad spec, or Invalid for its cluster) does not hold a KafkaCluster's deletion."""
        ref = (spec.get("clusterRef") or {}).get("name")
        if not ref or (status or {}).get("phase") == "Invalid" or \
                parse_spec(KIND, spec)[0] is None:
            return {}  # not None: kopf keeps an object's old entries when given None
        return {(namespace, ref): f"{KIND}/{name}"}

    @kopf.timer(**resource(KIND), interval=rt.tick, registry=registry, id="reconcile")
    async def reconcile(spec: Any, status: Any, meta: Any, body: Any, patch: Any, uid: str,
                        namespace: str, kafkaclusters: Any, **_: Any) -> None:
        if not finalized(meta):
            return
        gen = generation(meta)
        old = read_status(KafkaQuorumStatus, status)
        st = read_status(KafkaQuorumStatus, status)
        model, problems = parse_spec(KIND, spec)
        if model is None:
            st.phase = "Invalid"
            set_cond(st, READY, "False", "InvalidSpec", "; ".join(problems), gen)
            degrade(st, "InvalidSpec", "; ".join(problems), gen)
            publish(patch, status, st, gen)
            return
        assert isinstance(model, KafkaQuorumSpec)
        ref = model.cluster_ref.name
        st.cluster = ref
        st.target_voters = sorted(set(model.voters))
        if (namespace, ref) not in kafkaclusters:
            st.phase = "Invalid"
            msg = (f"spec.clusterRef.name: no KafkaCluster {ref!r} in namespace {namespace}; "
                   "create it or fix the name")
            set_cond(st, READY, "False", "UnknownCluster", msg, gen)
            degrade(st, "UnknownCluster", msg, gen)
            publish(patch, status, st, gen)
            return
        opened = rt.clusters.get((namespace, ref))
        if opened is None:
            set_cond(st, READY, "False", "WaitingForCluster", f"KafkaCluster {ref} is not "
                     "Ready yet", gen)
            set_cond(st, PROGRESSING, "True", "WaitingForCluster", "", gen)
            publish(patch, status, st, gen)
            return
        key = f"{KIND}/{uid}"
        if not rt.backoff.ready(key, rt.clock()):
            return
        target = list(model.voters)

        def bound_pass(c: Any) -> tuple[str, Pass | None]:
            now_id = opened.cluster_id_of()
            if held(old, now_id, (meta.get("annotations") or {}).get(ACCEPT_CLUSTER)):
                return now_id, None
            return now_id, quorum_pass(c, target, st, model.endpoints)

        try:
            now_id, found = await rt.run(opened, bound_pass)
        except KafkaApiError as e:
            delay = rt.backoff.failed(key, rt.clock())
            if e.error.retriable:  # no leader right now, a timeout: back off and look again
                set_cond(st, PROGRESSING, "True", "Retrying", f"{e}; retrying in {delay:g}s",
                         gen)
                if not st.conditions or st.condition(READY) is None:
                    set_cond(st, READY, "Unknown", "QuorumUnavailable", str(e), gen)
            else:  # the cluster refused the step: say so; look again after the backoff
                st.phase = "Degraded"
                msg = f"spec.voters {target}: the cluster refused the change: {e}"
                set_cond(st, READY, "False", "VoterChangeRefused", msg, gen)
                set_cond(st, PROGRESSING, "False", "VoterChangeRefused", msg, gen)
                degrade(st, "VoterChangeRefused", msg, gen)
            publish(patch, status, st, gen)
            return
        rt.backoff.succeeded(key)
        if found is None:
            msg = cluster_changed_message(ref, old, now_id, target)
            if st.phase != "ClusterChanged":
                emit(body, "ClusterChanged", msg, warning=True)
            st.phase, st.next_step = "ClusterChanged", None
            set_cond(st, READY, "False", "ClusterIdChanged", msg, gen)
            set_cond(st, PROGRESSING, "True", "WaitingForDecision", msg, gen)
            degrade(st, "ClusterIdChanged", msg, gen)
            publish(patch, status, st, gen)
            return
        done = found
        # A quorum of another cluster (a new spec for a repointed or recreated one) is not
        # what this status showed: its voters are compared with what this pass found.
        seen = old if old.cluster_id in (None, now_id) else KafkaQuorumStatus()
        st.cluster_id = now_id
        events: list[tuple[str, str, bool]] = [(r, m, False) for r, m in milestones(seen, done, st)]
        walking = f"voters {st.current_voters} -> {st.target_voters}"
        if done.problems:
            st.phase, st.next_step = "Invalid", None
            reason = problem_reason(done.problems)
            msg = ("; ".join("spec." + p for p in done.problems) +
                   f"; set spec.voters to live node ids (current voters: {st.current_voters})")
            set_cond(st, READY, "False", reason, msg, gen)
            set_cond(st, PROGRESSING, "False", reason, "nothing changes until spec.voters is "
                     "fixed", gen)
            degrade(st, reason, msg, gen)
        elif done.phase is WalkPhase.COMPLETED:
            st.phase, st.next_step = "Ready", None
            set_cond(st, READY, "True", "QuorumReady", f"voters {st.current_voters}, leader "
                     f"{st.leader_id} (epoch {st.leader_epoch})", gen)
            set_cond(st, PROGRESSING, "False", "Idle", "", gen)
            healthy(st, gen)
            if old.phase == "Changing":
                events.append(("VotersChanged", f"voters are {st.current_voters}", False))
        else:
            st.phase, st.next_step = "Changing", done.action
            msg = f"{walking}: {done.action}"
            set_cond(st, READY, "False", "VoterChangeInProgress", msg, gen)
            set_cond(st, PROGRESSING, "True", "WalkingVoters", msg, gen)
            healthy(st, gen)
        publish(patch, status, st, gen)
        for reason, message, warning in events:
            emit(body, reason, message, warning=warning)
