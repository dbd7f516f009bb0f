"""The rules the handlers share, tested as functions: spec -> executor translation
(reconcile.py, also used by the CLI), publishing status, kopf's `when=` filter, the voter
walk's status and milestones, the runtime's backoff, state files and cluster clocks."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import kopf
import pytest

from controller_core.config import EmbeddedClusterSpec
from controller_core.errors import ErrorCode
from controller_core.model import ElectionType, TopicPartition
from controller_core.orchestration.reassignment import Limits, Phase, PlanProblem, dry_run
from controller_core.orchestration.voters import WalkPhase
from controller_core.raft.describe import QuorumStatus, ReplicaStatus
from kraftsman import metrics
from kraftsman.handlers import build_registry, configure
from kraftsman.handlers.common import PLURALS, generation, parse_spec, publish, settled
from kraftsman.handlers.opstate import Outbox, encode
from kraftsman.handlers.quorum import Pass, fill, milestones, nodes_of, problem_reason, quorum_pass
from kraftsman.handlers.reassignment import problem_messages, problems_reason, summary
from kraftsman.handlers.runtime import (
    Backoff,
    OpenCluster,
    Runtime,
    default_priority,
    spec_digest,
)
from kraftsman.planner_job_spec import PlannerConfig
from kraftsman.reconcile import election_of, executor_for, limits_of, plan_of
from kraftsman.resources import LeaderElectionSpec, PartitionReassignmentSpec
from kraftsman.status import (
    HEARTBEAT_SECONDS,
    KafkaClusterStatus,
    KafkaQuorumStatus,
    PartitionProgress,
    PartitionReassignmentStatus,
    ReassignmentPlanSummary,
    now_rfc3339,
    parse_rfc3339,
)
from tests.helpers import cluster as embedded

TP0, TP1 = TopicPartition("orders", 0), TopicPartition("orders", 1)


def preas(moves: list[tuple[int, list[int]]], **extra: Any) -> PartitionReassignmentSpec:
    return PartitionReassignmentSpec.model_validate({
        "clusterRef": {"name": "demo"},
        "partitions": [{"topic": "orders", "partition": p, "replicas": r} for p, r in moves],
        **extra})


# ---------------------------------------------------------------- reconcile.py


def test_the_spec_limits_become_the_executor_limits() -> None:
    spec = preas([(0, [3, 4, 5])], throttleBytesPerSecond=7, maxConcurrentMoves=3,
                 maxConcurrentMovesPerBroker=2)
    assert limits_of(spec) == Limits(7, 3, 2)
    plan, problems = plan_of(spec)
    assert problems == [] and plan.limits == Limits(7, 3, 2)
    assert plan.moves == {TP0: (3, 4, 5)} and plan.additional is False
    assert plan.elect_preferred_leaders is False
    assert plan_of(preas([(0, [3, 4, 5])], electPreferredLeaders=True))[0] \
        .elect_preferred_leaders is True


def test_a_plan_is_additional_when_asked_or_when_it_retargets_its_own_moves() -> None:
    spec = preas([(0, [3, 4, 5]), (1, [3, 4, 5])])
    assert plan_of(spec, additional=True)[0].additional is True
    assert plan_of(preas([(0, [3, 4, 5])], additional=True))[0].additional is True
    assert plan_of(spec, additional_for=[TP1])[0].additional is True
    assert plan_of(spec, additional_for=[TopicPartition("orders", 2)])[0].additional is False


def test_executor_for_starts_resumes_and_retargets(tmp_path: Path) -> None:
    c = embedded(tmp_path)
    spec = preas([(0, [3, 4, 5]), (1, [3, 4, 5])], maxConcurrentMoves=1, paused=False)
    ex, problems, retargeted = executor_for(c, spec, None, None)
    assert problems == [] and retargeted is False
    ex.step()
    assert set(ex.moving) == {TP0}
    state = ex.state.model_dump(mode="json")
    assert state["started_ms"] is not None
    c.advance(1)
    # Same moves: resume the saved state; the controls (pause) apply at once.
    resumed, problems, retargeted = executor_for(c, preas(
        [(0, [3, 4, 5]), (1, [3, 4, 5])], paused=True, maxConcurrentMoves=1), state, spec)
    assert problems == [] and retargeted is False
    assert resumed.state.paused is True and set(resumed.moving) == {TP0}
    assert resumed.state.started_ms == state["started_ms"]  # resumed, not started afresh
    # Changed moves while in flight: dropped moves are cancelled, the rest re-targeted.
    c.alter_partition_reassignments({TP1: [3, 4, 5]})  # both in flight now
    new = preas([(1, [3, 4, 5])])
    ex2, problems, retargeted = executor_for(c, new, state, spec)
    assert problems == [] and retargeted is True
    assert set(c.list_partition_reassignments()) == {TP1}
    assert ex2.plan.moves == {TP1: (3, 4, 5)}
    assert ex2.plan.additional is True  # its own move in flight is not refused as overlap


def test_a_saved_state_without_the_spec_it_ran_for_starts_afresh(tmp_path: Path) -> None:
    c = embedded(tmp_path)
    spec = preas([(0, [3, 4, 5])])
    ex, _, _ = executor_for(c, spec, None, None)
    ex.step()
    state = ex.state.model_dump(mode="json")
    again, problems, retargeted = executor_for(c, preas([(1, [3, 4, 5])]), state, None)
    assert retargeted is False and again.plan.moves == {TP1: (3, 4, 5)}
    # Not known as this resource's own: the move in flight makes the new plan wait.
    assert [p.error.name for p in problems] == ["REASSIGNMENT_IN_PROGRESS"]


def test_a_changed_plan_cancels_its_own_dropped_move_beside_another_tool_s(
        tmp_path: Path) -> None:
    """The run's saved state says which moves in flight are its own: with another tool's
    reassignment in flight too, the previous plan could not be taken up afresh (it would be
    refused as overlapping), yet its dropped move is still cancelled (KIP-455). The new plan
    then waits for the other tool's move, as ReassignPartitionsCommand refuses a plan while a
    reassignment it did not start is in progress."""
    c = embedded(tmp_path)
    spec = preas([(0, [3, 4, 5]), (1, [3, 4, 5])], maxConcurrentMoves=1)
    ex, _, _ = executor_for(c, spec, None, None)
    ex.step()
    assert set(c.list_partition_reassignments()) == {TP0}
    state = ex.state.model_dump(mode="json")
    other = TopicPartition("orders", 5)
    c.alter_partition_reassignments({other: [3, 4, 5]})  # another tool
    _, problems, retargeted = executor_for(c, preas([(1, [3, 4, 5])]), state, spec)
    assert retargeted is True
    assert set(c.list_partition_reassignments()) == {other}  # orders-0 rolled back
    assert [(p.tp, p.error.name) for p in problems] == [(other, "REASSIGNMENT_IN_PROGRESS")]


def test_executor_for_a_dry_run_or_a_cancel(tmp_path: Path) -> None:
    c = embedded(tmp_path)
    ex, problems, _ = executor_for(c, preas([(0, [3, 4, 5])], dryRun=True), None, None)
    assert problems == [] and ex.state.phase is Phase.PENDING
    assert c.list_partition_reassignments() == {}
    ex, problems, _ = executor_for(c, preas([(0, [3, 4, 5])], cancel=True), None, None)
    assert ex.state.cancel_requested is True
    ex, problems, retargeted = executor_for(c, preas([(0, [3, 4, 99])]), None, None)
    assert problems and problems[0].tp == TP0 and retargeted is False


def test_executor_for_a_plan_with_problems_does_not_start(tmp_path: Path) -> None:
    c = embedded(tmp_path)
    spec = preas([(0, [3, 4, 5])])
    spec.partitions.append(spec.partitions[0])  # the CRD refuses this; the CLI may not
    ex, problems, _ = executor_for(c, spec, None, None)
    assert problems and ex.state.phase is Phase.PENDING
    assert c.list_partition_reassignments() == {}


def test_election_of_picks_the_selector(tmp_path: Path) -> None:
    c = embedded(tmp_path)
    by_part = election_of(c, LeaderElectionSpec.model_validate({
        "clusterRef": {"name": "d"}, "partitions": [{"topic": "orders", "partition": 1}]}))
    assert set(by_part.results) == {TP1}
    by_topic = election_of(c, LeaderElectionSpec.model_validate({
        "clusterRef": {"name": "d"}, "topics": ["orders", "nope"],
        "electionType": "UNCLEAN"}))
    assert len(by_topic.results) == 6 and by_topic.unknown_topics == ("nope",)
    assert by_topic.election_type is ElectionType.UNCLEAN
    every = election_of(c, LeaderElectionSpec.model_validate({
        "clusterRef": {"name": "d"}, "allTopicPartitions": True}))
    assert every.results == {}  # balanced: nothing to report (LeaderElectionCommand)


# ---------------------------------------------------------------- common.py


class StatusPatch:
    def __init__(self) -> None:
        self.status: dict[str, Any] = {}


def test_publish_writes_changes_and_nulls_and_otherwise_only_a_heartbeat() -> None:
    st = KafkaClusterStatus(phase="Ready", brokers=3)
    patch = StatusPatch()
    assert publish(patch, {"phase": "Old", "topics": 4}, st, 2) is True
    assert patch.status["phase"] == "Ready" and patch.status["brokers"] == 3
    assert patch.status["observedGeneration"] == 2
    assert patch.status["topics"] is None  # no longer set: removed
    assert patch.status["lastReconcileTime"] == st.last_reconcile_time
    written = dict(patch.status)
    old = {k: v for k, v in written.items() if v is not None}
    again = StatusPatch()
    assert publish(again, old, KafkaClusterStatus(phase="Ready", brokers=3), 2) is False
    assert again.status == {}  # unchanged and recent: nothing written
    stale = {**old, "lastReconcileTime": "2020-01-01T00:00:00Z"}
    beat = StatusPatch()
    assert publish(beat, stale, KafkaClusterStatus(phase="Ready", brokers=3), 2) is False
    assert list(beat.status) == ["lastReconcileTime"]
    assert beat.status["lastReconcileTime"] != "2020-01-01T00:00:00Z"
    just_stale = {**old, "lastReconcileTime": now_rfc3339(
        lambda: time.time() - HEARTBEAT_SECONDS - 2)}
    assert publish(StatusPatch(), just_stale, KafkaClusterStatus(phase="Ready", brokers=3),
                   2) is False
    assert publish(StatusPatch(), old, KafkaClusterStatus(phase="Ready", brokers=3), 3) is True


def test_publish_compares_and_writes_lists_as_the_server_stores_them() -> None:
    """A row's unset fields are not written as nulls inside a list (the real API server
    prunes them, and kopf then warned on every write that the object differs from the
    patch); and a status the server stored so is unchanged: no write on the next pass."""
    def status() -> PartitionReassignmentStatus:
        st = PartitionReassignmentStatus(phase="Moving")
        st.set_progress([PartitionProgress(topic="orders", partition=0, state="Moving",
                                           adding_replicas=[3], bytes_to_move=10)])
        st.plan = ReassignmentPlanSummary(bytes_to_move=10)  # estimatedSeconds: None
        return st
    patch = StatusPatch()
    assert publish(patch, {}, status(), 2) is True
    (row,) = patch.status["partitions"]
    assert None not in row.values() and row["bytesToMove"] == 10
    assert patch.status["plan"]["estimatedSeconds"] is None  # an object's null removes it
    stored = _stored_by_server(patch.status)
    assert publish(StatusPatch(), stored, status(), 2) is False


def _stored_by_server(patch: dict[str, Any]) -> dict[str, Any]:
    def prune(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: prune(x) for k, x in v.items() if x is not None}
        return [prune(x) for x in v] if isinstance(v, list) else v
    return prune(patch)  # type: ignore[no-any-return]


def test_publish_removes_a_field_that_alone_became_unset() -> None:
    """Nothing else changed and the heartbeat is recent: the field still goes (null)."""
    old = KafkaClusterStatus(phase="Ready", brokers=3, topics=4).model_dump(
        by_alias=True, mode="json")
    old.update(observedGeneration=2, lastReconcileTime=now_rfc3339())
    patch = StatusPatch()
    assert publish(patch, old, KafkaClusterStatus(phase="Ready", brokers=3), 2) is True
    assert "topics" in patch.status and patch.status["topics"] is None


def test_publish_writes_the_heartbeat_once_the_last_one_is_60_s_old(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An unchanged status gets only a new lastReconcileTime, from HEARTBEAT_SECONDS on."""
    old = KafkaClusterStatus(phase="Ready").model_dump(by_alias=True, mode="json")
    old.update(observedGeneration=2, lastReconcileTime="2026-01-01T00:00:00Z")
    last = parse_rfc3339(old["lastReconcileTime"])
    assert last is not None
    for age, written in ((HEARTBEAT_SECONDS - 1, False), (HEARTBEAT_SECONDS, True)):
        monkeypatch.setattr(time, "time", lambda age=age: last + age)
        patch = StatusPatch()
        assert publish(patch, old, KafkaClusterStatus(phase="Ready"), 2) is False
        assert bool(patch.status) is written, age
    assert set(patch.status) == {"lastReconcileTime"}
    beat = parse_rfc3339(patch.status["lastReconcileTime"])
    assert beat is not None and beat > last


def test_parse_spec_offers_the_fix_and_the_known_fields() -> None:
    _, problems = parse_spec("PartitionReassignment", {
        "clusterRef": {"name": "d"}, "throttleBytesPerSecond": 0,
        "partitions": [{"topic": "a", "partition": 0, "replicas": [1]}]})
    assert problems == ["spec.throttleBytesPerSecond: Input should be greater than or equal "
                        "to 1; give a whole number of bytes per second from 1 to "
                        "9223372036854775807, or leave the field out for no throttle"]
    _, problems = parse_spec("KafkaQuorum", {"clusterRef": {"name": "d"}, "voters": [1],
                                             "votrs": [2]})
    assert problems == ["spec.votrs: unknown field; did you mean 'voters'? "
                        "(fields here: clusterRef, voters, controllers)"]


def test_settled_stops_the_timer_of_a_finished_resource_once_its_events_are_out() -> None:
    active = settled("Completed", "Failed")
    meta = {"generation": 2}
    assert active(spec={}, status={"phase": "Completed", "observedGeneration": 2},
                  meta=meta) is False
    assert active(spec={}, status={"phase": "Failed", "observedGeneration": 2},
                  meta=meta) is False
    assert active(spec={}, status={"phase": "Completed", "observedGeneration": 1},
                  meta=meta) is True  # a new generation: look again
    assert active(spec={}, status={"phase": "Moving", "observedGeneration": 2},
                  meta=meta) is True
    assert active(spec=None, status=None, meta=meta) is True
    state: dict[str, Any] = {}
    Outbox(state).add("Completed", "done")
    assert active(spec={}, status={"phase": "Completed", "observedGeneration": 2,
                                   "operationState": encode(state)}, meta=meta) is True
    cont = settled("Completed", continuous_ok=True)
    done = {"phase": "Completed", "observedGeneration": 2}
    assert cont(spec={"mode": "Continuous"}, status=done, meta=meta) is True
    assert cont(spec={"mode": "OneShot"}, status=done, meta=meta) is False
    assert settled("Completed")(spec={"mode": "Continuous"}, status=done, meta=meta) is False


def test_parse_spec_names_the_field_without_the_kind() -> None:
    model, problems = parse_spec("KafkaQuorum", {"clusterRef": {"name": "d"}, "voters": "x"})
    assert model is None and problems and problems[0].startswith("spec.voters")
    model, problems = parse_spec("KafkaQuorum", {"clusterRef": {"name": "d"}, "voters": [1]})
    assert model is not None and problems == []
    assert parse_spec("KafkaQuorum", None)[0] is None
    assert generation({}) == 1 and generation({"generation": 4}) == 4


def test_every_kind_is_handled_on_the_operator_s_registry(tmp_path: Path) -> None:
    registry = build_registry(Runtime(tmp_path))
    handled = {h.selector.plural for reg in (registry._spawning, registry._changing)
               for h in reg.get_all_handlers() if h.selector is not None}
    assert handled == set(PLURALS.values())


def test_the_metrics_indexes_exist_only_when_metrics_are_served(tmp_path: Path) -> None:
    """Each index is work on every watch event: an operator without ``--metrics`` has none."""
    ids = {metrics.index_id(kind) for kind in PLURALS}

    def indexed(registry: kopf.OperatorRegistry) -> set[str]:
        return {h.id for h in registry._indexing.get_all_handlers()} & ids

    assert indexed(build_registry(Runtime(tmp_path))) == set()
    assert indexed(build_registry(Runtime(tmp_path), serve_metrics=True)) == ids


def test_configure_keeps_kopf_bookkeeping_out_of_the_status(tmp_path: Path) -> None:
    settings = kopf.OperatorSettings()
    configure(settings, Runtime(tmp_path))
    assert settings.persistence.finalizer == "kraftsman.io/finalizer"
    assert isinstance(settings.persistence.progress_storage, kopf.AnnotationsProgressStorage)
    assert settings.persistence.progress_storage.prefix == "kraftsman.io"
    assert settings.persistence.diffbase_storage.prefix == "kraftsman.io"
    assert settings.persistence.diffbase_storage.key == "last-handled-digest"
    assert settings.posting.level == 20
    assert settings.queueing.error_delays == [1, 2, 5, 10, 30, 60]
    assert settings.watching.server_timeout == 300
    assert settings.networking.request_timeout == 60  # kube-apiserver's --request-timeout
    assert settings.execution.max_workers == 8


def test_configure_polls_a_deleted_resource_s_running_timer_every_second(
        tmp_path: Path) -> None:
    """kopf keeps the finalizer of a deleted resource until its timer has exited and looks
    again every ``cancellation_polling`` seconds (its default: 60): a pass in flight at the
    deletion must not keep the resource for a minute (test_lifecycle.py sees it end to end)."""
    settings = kopf.OperatorSettings()
    assert settings.background.cancellation_polling == 60
    configure(settings, Runtime(tmp_path))
    assert settings.background.cancellation_polling == 1.0


# ---------------------------------------------------------------- quorum.py


def replica(node: int, status: str, lag: int = 0, lag_ms: int = 5, leo: int = 100,
            fetch: int = 10, caught: int = 9) -> ReplicaStatus:
    return ReplicaStatus(node, leo, lag, lag_ms, status, False, fetch, caught)


def quorum(replicas: list[ReplicaStatus], voters: tuple[int, ...] = (0, 1, 2),
           target: tuple[int, ...] | None = None, leader: int = 0) -> QuorumStatus:
    return QuorumStatus(leader, 7, 100, -1, -5, voters, target, tuple(replicas))


def test_quorum_status_is_what_describe_prints() -> None:
    st = KafkaQuorumStatus()
    fill(st, quorum([replica(0, "Leader"), replica(2, "Follower", lag=3, lag_ms=40),
                     replica(1, "Follower", leo=-1, lag=-1, lag_ms=-1, fetch=-1, caught=-1),
                     replica(9, "Observer"), replica(5, "Observer")], voters=(2, 0, 1)))
    assert (st.leader_id, st.leader_epoch, st.high_watermark) == (0, 7, 100)
    assert (st.max_follower_lag, st.max_follower_lag_time_ms) == (0, 0)
    assert st.current_voters == [0, 1, 2] and st.current_observers == [5, 9]
    rows = {r.node_id: r for r in st.replicas}
    assert [r.node_id for r in st.replicas] == [0, 2, 1, 9, 5]
    assert (rows[0].status, rows[2].status, rows[9].status) == ("Leader", "Follower", "Observer")
    assert (rows[2].lag, rows[2].lag_time_ms, rows[2].log_end_offset) == (3, 40, 100)
    assert (rows[2].last_fetch_timestamp, rows[2].last_caught_up_timestamp) == (10, 9)
    assert (rows[1].log_end_offset, rows[1].lag, rows[1].lag_time_ms) == (-1, 0, None)
    assert (rows[1].last_fetch_timestamp, rows[1].last_caught_up_timestamp) == (None, None)
    many = KafkaQuorumStatus()
    fill(many, quorum([replica(i, "Observer") for i in range(150)]))
    assert len(many.replicas) == 100
    lagging = KafkaQuorumStatus()
    fill(lagging, QuorumStatus(1, 2, 3, 4, 5, (1,), None, ()))
    assert (lagging.max_follower_lag, lagging.max_follower_lag_time_ms) == (4, 5)


def test_a_quorum_pass_completes_refuses_or_takes_one_step(tmp_path: Path) -> None:
    c = embedded(tmp_path)
    st = KafkaQuorumStatus()
    done = quorum_pass(c, [2, 1, 0, 0], st)
    assert (done.phase, done.action, done.problems) == (WalkPhase.COMPLETED,
                                                        "voters are as desired", [])
    assert done.before == [0, 1, 2] and done.before_leader == st.leader_id
    bad = quorum_pass(c, [0, 1, 42], st)
    assert bad.phase is None and bad.problems and "unknown node" in bad.problems[0]
    step = quorum_pass(c, [0, 1, 2, 3], st)
    assert (step.phase, step.action) == (WalkPhase.RUNNING, "adding voter 3")
    assert step.before == [0, 1, 2]
    assert st.current_voters == [0, 1, 2, 3]  # this pass's status shows the step's effect


def test_voter_problems_have_reasons() -> None:
    assert problem_reason(["voters: unknown node id(s) [9]; nodes are [0]"]) == "UnknownNode"
    assert problem_reason(["voters: only 1 of [0, 1, 2] are live, fewer"]) == "VotersNotLive"
    assert problem_reason(["voters: [1, 1] lists a node id twice"]) == "InvalidVoters"
    assert problem_reason(["voters: [1, 1] lists a node id twice",
                           "voters: unknown node id(s) [9]; nodes are [0]"]) == "UnknownNode"


def test_milestones_are_the_difference_to_the_last_published_quorum() -> None:
    old = KafkaQuorumStatus(current_voters=[0, 1, 2], leader_id=0)
    now = KafkaQuorumStatus(current_voters=[0, 1, 3], leader_id=1, leader_epoch=9)
    assert milestones(old, Pass(), now) == [
        ("VoterAdded", "node 3 joined the voters: [0, 1, 3]"),
        ("VoterRemoved", "node 2 left the voters: [0, 1, 3]"),
        ("LeaderChanged", "quorum leader 0 -> 1 (epoch 9)")]
    first = Pass(before=[0, 1], before_leader=1)  # nothing published yet: this pass's view
    assert milestones(KafkaQuorumStatus(), first, now) == [
        ("VoterAdded", "node 3 joined the voters: [0, 1, 3]")]
    no_leader = KafkaQuorumStatus(current_voters=[0, 1, 3], leader_id=-1)
    assert milestones(old.model_copy(update={"current_voters": [0, 1, 3]}), Pass(),
                      no_leader) == []
    assert milestones(KafkaQuorumStatus(), Pass(), now) == []


@dataclass
class Broker:
    id: int
    fenced: bool


@dataclass
class Description:
    brokers: list[Broker]


class RealClusterView:
    """What a kafka-backend admin answers DescribeCluster with (the rest is not asked)."""

    def describe_cluster(self) -> Description:
        return Description([Broker(0, False), Broker(1, True), Broker(4, True),
                            Broker(5, False)])


def test_a_real_cluster_s_live_nodes_are_unfenced_or_recently_caught_up(tmp_path: Path) -> None:
    q = quorum([replica(0, "Leader"), replica(1, "Follower", lag_ms=30_000),
                replica(2, "Follower", lag_ms=30_001), replica(3, "Observer", lag_ms=-1),
                replica(4, "Follower", lag_ms=0)], leader=7)
    known, live = nodes_of(RealClusterView(), q)
    assert known == {0, 1, 2, 3, 4, 5}
    assert live == {0, 1, 4, 5, 7}  # 4: fenced as a broker, but caught up just now
    c = embedded(tmp_path)
    assert nodes_of(c, c.describe_quorum()) == (c.quorum_node_ids(), c.live_quorum_nodes())


# ---------------------------------------------------------------- runtime.py


def test_backoff_doubles_to_its_cap_per_key_and_resets() -> None:
    b = Backoff(base=1.0, cap=5.0)
    assert b.ready("k", 0.0)
    assert [b.failed("k", 10.0) for _ in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert not b.ready("k", 14.9) and b.ready("k", 15.0) and b.ready("other", 10.0)
    b.succeeded("k")
    assert b.ready("k", 0.0) and b.failed("k", 0.0) == 1.0
    b.succeeded("nothing")  # unknown keys are fine


def test_the_oldest_replica_gets_the_highest_priority() -> None:
    older, newer = default_priority(1_000.0), default_priority(1_001.0)
    assert older > newer > 0 and older - newer > 999_000
    assert default_priority() < newer and default_priority() < 2 ** 63


def test_spec_digest_ignores_key_order() -> None:
    assert spec_digest({"a": 1, "b": [2]}) == spec_digest({"b": [2], "a": 1})
    assert spec_digest({"a": 1}) != spec_digest({"a": 2})
    assert len(spec_digest(None)) == 16


def test_operation_state_files_round_trip_and_bad_ones_read_as_none(tmp_path: Path) -> None:
    rt = Runtime(tmp_path)
    assert rt.load_op("u/1") is None
    rt.save_op("u/1", {"digest": "x"})
    assert rt.op_path("u/1") == tmp_path / "operations" / "u_1.json"
    assert rt.load_op("u/1") == {"digest": "x"}
    rt.op_path("u/1").write_text("[1]")
    assert rt.load_op("u/1") is None
    rt.op_path("u/1").write_text("{not json")
    assert rt.load_op("u/1") is None
    rt.forget_op("u/1")
    rt.forget_op("u/1")
    assert not rt.op_path("u/1").exists()


SPEC = EmbeddedClusterSpec.model_validate({"brokers": [{"id": 0}, {"id": 1}, {"id": 2}]})


def test_an_embedded_cluster_is_opened_once_and_reopened_on_change(tmp_path: Path) -> None:
    now = [100.0]
    rt = Runtime(tmp_path, time_scale=3.0, checkpoint_seconds=10.0, fsync=False,
                 clock=lambda: now[0])
    key = ("ns 1", "demo")
    opened = rt.open_cluster(key, "u1", SPEC, "d1")
    assert rt.cluster_dir(key, "u1") == tmp_path / "clusters" / "ns_1" / "demo-u1"
    assert rt.cluster_dir(key, "u1").is_dir()
    assert (opened.last_wall, opened.last_checkpoint, opened.opened_at) == (100.0, 100.0, 100.0)
    assert opened.embedded and rt.open_cluster(key, "u1", SPEC, "d1") is opened
    start = opened.cluster.now
    now[0] = 102.0
    assert rt.advance(opened) == 6.0 and opened.cluster.now == start + 6.0
    assert opened.last_wall == 102.0 and opened.last_checkpoint == 100.0
    now[0] = 110.0
    assert rt.advance(opened) == 24.0 and opened.last_checkpoint == 110.0
    assert rt.advance(opened) == 0.0 and opened.cluster.now == start + 30.0
    reopened = rt.open_cluster(key, "u1", SPEC, "d2")
    assert reopened is not opened and rt.clusters[key] is reopened
    rt.close_all()
    assert rt.clusters == {} and rt.cluster_dir(key, "u1").is_dir()
    rt.open_cluster(key, "u1", SPEC, "d2")
    rt.close_cluster(key, remove_state_of="u1")
    assert not rt.cluster_dir(key, "u1").exists()


def test_clusters_open_with_the_runtime_s_fsync_setting(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """fsync=False (tests, benchmarks) leaves out the fsyncs of the metadata log and the
    quorum's log (the atomic writes of the checkpoint and the quorum state always fsync)."""
    synced: list[int] = []
    fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), fsync(fd))[1])
    Runtime(tmp_path / "off", fsync=False).open_cluster(("ns", "c"), "u", SPEC, "d")
    without = len(synced)
    Runtime(tmp_path / "on", fsync=True).open_cluster(("ns", "c"), "u", SPEC, "d")
    assert len(synced) - without > without


def test_a_real_cluster_s_clock_is_not_run_by_the_operator(tmp_path: Path) -> None:
    rt = Runtime(tmp_path, clock=lambda: 50.0)
    real = OpenCluster(cast(Any, object()), "d", "u")  # any ClusterAdmin but the embedded one
    assert rt.advance(real) == 0.0 and real.last_wall == 0.0


async def test_work_on_a_cluster_runs_one_at_a_time_in_a_thread(tmp_path: Path) -> None:
    rt = Runtime(tmp_path, fsync=False)
    opened = rt.open_cluster(("ns", "c"), "u", SPEC, "d")

    def under_lock(cluster: Any) -> bool:
        assert cluster is opened.cluster
        return opened.lock.locked()

    assert await rt.run(opened, under_lock) is True
    rt.close_all()


def test_runtime_defaults(tmp_path: Path) -> None:
    rt = Runtime(tmp_path)
    assert (rt.tick, rt.time_scale, rt.checkpoint_seconds, rt.fsync) == (1.0, 1.0, 5.0, True)
    assert rt.ops_dir == tmp_path / "operations" and rt.settings is None
    assert rt.kafka_retry.total_seconds == 10.0 and rt.executors == {}
    # no --planner-* options: no image, Jobs in the KafkaRebalance's own namespace
    assert rt.planner == PlannerConfig(image=None)
    assert rt.planner.job_namespace("team-a") == "team-a"
    given = PlannerConfig(image="kraftsman:1", namespace="ops")
    assert Runtime(tmp_path, planner=given).planner is given



def test_a_pending_target_of_another_tool_is_not_taken_for_done(tmp_path: Path) -> None:
    c = embedded(tmp_path)
    c.alter_quorum([0, 1, 2, 3])  # KIP-853 target set elsewhere, not walked yet
    st = KafkaQuorumStatus()
    done = quorum_pass(c, [0, 1, 2], st)
    assert done.phase is not WalkPhase.COMPLETED
    assert done.action != "voters are as desired"


def test_a_voter_removal_shows_in_this_pass_s_status(tmp_path: Path) -> None:
    c = embedded(tmp_path)
    st = KafkaQuorumStatus()
    done = quorum_pass(c, [0, 1], st)
    assert (done.phase, done.action) == (WalkPhase.RUNNING, "removing voter 2")
    assert st.current_voters == [0, 1]


def test_describe_values_at_zero_are_kept_and_below_minus_one_clamped() -> None:
    st = KafkaQuorumStatus()
    fill(st, quorum([replica(0, "Leader", leo=-5, lag_ms=0, fetch=0, caught=0)]))
    row = st.replicas[0]
    assert (row.log_end_offset, row.lag_time_ms) == (-1, 0)
    assert (row.last_fetch_timestamp, row.last_caught_up_timestamp) == (0, 0)


def test_a_leader_change_is_announced_from_the_first_pass_and_to_node_zero() -> None:
    now = KafkaQuorumStatus(current_voters=[0, 1, 2], leader_id=1, leader_epoch=3)
    first = Pass(before=[0, 1, 2], before_leader=0)
    assert milestones(KafkaQuorumStatus(), first, now) == [
        ("LeaderChanged", "quorum leader 0 -> 1 (epoch 3)")]
    to_zero = KafkaQuorumStatus(current_voters=[0, 1, 2], leader_id=0, leader_epoch=4)
    old = KafkaQuorumStatus(current_voters=[0, 1, 2], leader_id=1)
    assert milestones(old, Pass(), to_zero) == [
        ("LeaderChanged", "quorum leader 1 -> 0 (epoch 4)")]


def test_plan_problems_name_the_spec_index_and_the_kafka_error() -> None:
    spec = preas([(0, [3, 4, 5]), (1, [3, 4, 5])])
    err = ErrorCode(39, "INVALID_REPLICA_ASSIGNMENT", False)
    one = [PlanProblem(TP1, err, "orders-1: broker 9 is unknown")]
    assert problem_messages(spec, one) == (
        "spec.partitions[1] (orders-1): broker 9 is unknown [INVALID_REPLICA_ASSIGNMENT]; "
        "fix the plan")
    stranger = [PlanProblem(TopicPartition("x", 3), err, "bad: x-3: why")]
    assert problem_messages(spec, stranger) == (
        "spec.partitions[?] (x-3): bad: x-3: why [INVALID_REPLICA_ASSIGNMENT]; fix the plan")
    five = [PlanProblem(TP0, err, "a")] * 5
    assert problem_messages(spec, five) == "; ".join(
        ["spec.partitions[0] (orders-0): a [INVALID_REPLICA_ASSIGNMENT]"] * 5) + "; fix the plan"
    assert problem_messages(spec, five * 2).endswith(" (and 5 more); fix the plan")
    assert problems_reason(one + stranger) == "InvalidReplicaAssignment"
    assert problems_reason([PlanProblem(TP0, ErrorCode(1, "", False), "?")]) == "InvalidPlan"


def test_a_dry_run_summary_rounds_the_estimate_to_a_tenth(tmp_path: Path) -> None:
    c = embedded(tmp_path)
    plan, _ = plan_of(preas([(0, [3, 4, 5])], throttleBytesPerSecond=7))
    report = dry_run(c, plan)
    assert report.estimated_seconds is not None and report.estimated_seconds % 1
    got = summary(report)
    assert got.estimated_seconds is not None
    assert got.estimated_seconds == pytest.approx(report.estimated_seconds, abs=0.05)
    assert got.estimated_seconds * 10 == int(got.estimated_seconds * 10)


def test_the_priority_is_the_start_time_in_ms_before_2100_then_a_random_tiebreak() -> None:
    base = (4_102_444_800_000 - 1_000_000) * 1000
    seen = {default_priority(1_000.0) - base for _ in range(20_000)}
    assert min(seen) == 0 and max(seen) == 999  # every tiebreak 0..999, no more


def test_state_files_go_to_a_volume_that_may_not_exist_yet(tmp_path: Path) -> None:
    rt = Runtime(tmp_path / "not" / "yet")
    rt.save_op("a", {"n": 1})
    rt.save_op("a", {"n": 2})
    assert rt.load_op("a") == {"n": 2}
