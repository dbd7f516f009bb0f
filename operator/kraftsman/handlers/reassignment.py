"""PartitionReassignment: drive the core's level-based executor, one step per tick.

The executor's small state is saved on the state volume after every step; which partitions
are done or moving is re-derived from the cluster, so a restart resumes with nothing lost or
done twice. Deleting an in-flight reassignment cancels it and waits for the rollback.
"""

from __future__ import annotations

from typing import Any

import kopf

from controller_core.admin import ClusterAdmin
from controller_core.errors import KafkaApiError
from controller_core.orchestration.reassignment import (
    DryRunReport,
    ExecutorState,
    Phase,
    PlanProblem,
    Progress,
    ReassignmentExecutor,
    dry_run,
)
from kraftsman.handlers.common import (
    degrade,
    emit,
    generation,
    healthy,
    parse_spec,
    publish,
    resource,
    set_cond,
    settled,
)
from kraftsman.handlers.runtime import Runtime, spec_digest
from kraftsman.reconcile import limits_of, plan_of
from kraftsman.resources import PartitionReassignmentSpec
from kraftsman.status import (
    PROGRESSING,
    SUCCEEDED,
    PartitionProgress,
    PartitionReassignmentStatus,
    ReassignmentPlanSummary,
    now_rfc3339,
    read_status,
)

KIND = "PartitionReassignment"
TERMINAL_PHASES = {"Completed", "Cancelled", "Failed", "DryRunComplete"}


def moves_digest(spec: PartitionReassignmentSpec) -> str:
    return spec_digest([[m.topic, m.partition, m.replicas] for m in spec.partitions])


def problem_messages(spec: PartitionReassignmentSpec, problems: list[PlanProblem]) -> str:
    """Name the field of each problem: spec.partitions[i] (topic-partition): why."""
    index = {(m.topic, m.partition): i for i, m in enumerate(spec.partitions)}
    parts = [f"spec.partitions[{index.get((p.tp.topic, p.tp.partition), '?')}] ({p.tp}): "
             f"{p.message.removeprefix(f'{p.tp}: ')} [{p.error.name}]" for p in problems[:5]]
    more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
    return "; ".join(parts) + more + "; fix the plan"


def fill_progress(st: PartitionReassignmentStatus, spec: PartitionReassignmentSpec,
                  progress: Progress) -> None:
    rows = [PartitionProgress(topic=d.tp.topic, partition=d.tp.partition,
                              state="Failed" if d.state == "failed" else "Moving",
                              target_replicas=list(d.target),
                              error="REASSIGNMENT_FAILED" if d.state == "failed" else None,
                              message=d.message or None)
            for d in progress.details]
    st.set_progress(rows)
    # The executor's counts cover every partition, the detail only the capped rows.
    st.counts.total, st.counts.done = progress.total, progress.done
    st.counts.moving, st.counts.pending = progress.moving, progress.pending
    st.counts.failed, st.counts.cancelled = progress.failed, progress.cancelled
    st.moving, st.done = progress.moving, progress.done
    st.partitions_omitted = max(0, progress.total - len(st.partitions))
    st.bytes_to_move, st.bytes_moved = progress.bytes_total, progress.bytes_moved
    st.percent = round(progress.percent, 1)
    st.progress = f"{st.percent:g}%"
    st.eta_seconds = round(progress.eta_seconds, 1) if progress.eta_seconds is not None else None
    st.throttle_bytes_per_second = spec.throttle_bytes_per_second


def summary(report: DryRunReport) -> ReassignmentPlanSummary:
    return ReassignmentPlanSummary(
        replica_movements=report.replica_moves, leader_movements=report.leader_moves,
        bytes_to_move=report.bytes_to_move,
        estimated_seconds=None if report.estimated_seconds is None
        else round(report.estimated_seconds, 1),
        brokers_added=sorted(report.per_broker_in_bytes))


def register(registry: kopf.OperatorRegistry, rt: Runtime) -> None:
    @kopf.index(**resource(KIND), registry=registry, id="preas_users")
    async def preas_users(namespace: str, name: str, spec: Any, status: Any, **_: Any) -> Any:
        phase = (status or {}).get("phase")
        ref = (spec.get("clusterRef") or {}).get("name")
        if phase in TERMINAL_PHASES or phase == "Invalid" or not ref:
            return None
        return {(namespace, ref): f"{KIND}/{name}"}

    def _cluster(namespace: str, spec: PartitionReassignmentSpec, kafkaclusters: Any,
                 st: PartitionReassignmentStatus, gen: int) -> Any:
        ref = spec.cluster_ref.name
        st.cluster = ref
        if (namespace, ref) not in kafkaclusters:
            st.phase = "Invalid"
            degrade(st, "UnknownCluster", f"spec.clusterRef.name: no KafkaCluster {ref!r} in "
                    f"namespace {namespace}; create it or fix the name", gen)
            return None
        opened = rt.clusters.get((namespace, ref))
        if opened is None:
            st.phase = st.phase or "Pending"
            set_cond(st, PROGRESSING, "True", "WaitingForCluster",
                     f"KafkaCluster {ref} is not Ready yet", gen)
            return None
        return opened

    @kopf.timer(**resource(KIND), interval=rt.tick, registry=registry, id="reconcile",
                when=settled(*TERMINAL_PHASES))
    async def reconcile(spec: Any, status: Any, meta: Any, body: Any, patch: Any, uid: str,
                        namespace: str, kafkaclusters: Any, **_: Any) -> None:
        gen = generation(meta)
        st = read_status(PartitionReassignmentStatus, status)
        if not st.conditions:  # first visit: every condition is set at once
            set_cond(st, SUCCEEDED, "Unknown", "Pending", "not started", gen)
            set_cond(st, PROGRESSING, "False", "Pending", "not started", gen)
            healthy(st, gen)
        model, problems = parse_spec(KIND, spec)
        if model is None:
            st.phase = "Invalid"
            degrade(st, "InvalidSpec", "; ".join(problems), gen)
            set_cond(st, SUCCEEDED, "False", "InvalidSpec", "the spec is invalid", gen)
            publish(patch, status, st, gen)
            return
        assert isinstance(model, PartitionReassignmentSpec)
        key = f"{KIND}/{uid}"
        if not rt.backoff.ready(key, rt.clock()):
            return
        opened = _cluster(namespace, model, kafkaclusters, st, gen)
        if opened is None:
            publish(patch, status, st, gen)
            return
        try:
            events = await rt.run(opened, lambda c: step(c, uid, model, st, gen))
        except KafkaApiError as e:  # temporary: the cluster did not answer; back off
            delay = rt.backoff.failed(key, rt.clock())
            set_cond(st, PROGRESSING, "True", "Retrying",
                     f"{e}; retrying in {delay:g}s", gen)
            publish(patch, status, st, gen)
            return
        rt.backoff.succeeded(key)
        publish(patch, status, st, gen)
        for reason, message, warning in events:
            emit(body, reason, message, warning=warning)

    def step(cluster: ClusterAdmin, uid: str, spec: PartitionReassignmentSpec,
             st: PartitionReassignmentStatus, gen: int) -> list[tuple[str, str, bool]]:
        """One reconcile pass (in a worker thread, under the cluster's lock)."""
        events: list[tuple[str, str, bool]] = []
        saved = rt.load_op(uid)
        digest = moves_digest(spec)
        plan, problems = plan_of(spec)
        if problems:
            st.phase = "Invalid"
            msg = problem_messages(spec, problems)
            degrade(st, "InvalidPlan", msg, gen)
            set_cond(st, SUCCEEDED, "False", "InvalidPlan", "the plan is invalid", gen)
            return events
        if spec.dry_run:
            if saved is not None and saved.get("digest") == digest and saved.get("dryRun"):
                return events  # this plan was reviewed already
            report = dry_run(cluster, plan)
            st.plan = summary(report)
            if report.problems:
                st.phase = "Invalid"
                degrade(st, "InvalidPlan", problem_messages(spec, list(report.problems)), gen)
                set_cond(st, SUCCEEDED, "False", "InvalidPlan", "the plan is invalid", gen)
                return events
            st.phase = "DryRunComplete"
            eta = ("unthrottled" if report.estimated_seconds is None
                   else f"~{report.estimated_seconds:.0f}s at the throttle")
            msg = (f"dry run: {report.partitions_moving} partitions would move "
                   f"({report.replica_moves} replicas, {report.bytes_to_move} bytes, {eta}), "
                   f"{report.leader_moves} leader moves; nothing was moved")
            set_cond(st, SUCCEEDED, "True", "DryRunComplete", msg, gen)
            set_cond(st, PROGRESSING, "False", "DryRunComplete", msg, gen)
            healthy(st, gen)
            rt.save_op(uid, {"digest": digest, "dryRun": True})
            events.append(("DryRunComplete", msg, False))
            return events

        state: ExecutorState | None = None
        if saved is not None and not saved.get("dryRun"):
            state = ExecutorState.model_validate(saved["executor"])
            if state.phase.terminal and saved.get("digest") == digest:
                return events  # finished; its status was published when it finished
            if state.phase.terminal and saved.get("digest") != digest and not spec.cancel:
                state = None  # a finished run, and the spec asks for different moves: new run
            elif saved.get("digest") != digest and not state.phase.terminal:
                # Re-target: moves in flight under the old plan are ours to change.
                plan, _ = plan_of(spec, additional=True)
        cached = rt.executors.get(uid)
        if cached is not None and cached[0] == digest and cached[1].admin is cluster \
                and state is not None:
            executor = cached[1]  # the live executor keeps what it noticed between passes
        else:
            executor = ReassignmentExecutor(cluster, plan, state)
        rt.executors[uid] = (digest, executor)
        was = executor.state.phase
        if was is Phase.PENDING:
            if spec.cancel:
                st.phase = "Cancelled"
                set_cond(st, SUCCEEDED, "False", "Cancelled", "cancelled before it started", gen)
                set_cond(st, PROGRESSING, "False", "Cancelled", "", gen)
                return events
            problems = executor.start()
            if problems:
                st.phase = "Invalid"
                degrade(st, problems_reason(problems), problem_messages(spec, problems), gen)
                set_cond(st, SUCCEEDED, "False", "InvalidPlan", "the plan is invalid", gen)
                return events
            st.started_at = now_rfc3339()
            events.append(("Started", f"reassignment of {len(plan.moves)} partitions started "
                           f"({executor.state.bytes_total} bytes to move)", False))
        else:
            executor.start()  # resume: re-derive done/moving/pending from the cluster
        executor.set_limits(limits_of(spec))
        executor.set_paused(spec.paused)
        if spec.cancel:
            executor.cancel()
        done_before = executor.progress().done if was is not Phase.PENDING else 0
        progress = executor.step()
        rt.save_op(uid, {"digest": digest, "executor": executor.state.model_dump(mode="json")})
        fill_progress(st, spec, progress)
        healthy(st, gen)
        phase = progress.phase
        if progress.done > done_before and not phase.terminal:
            events.append(("BatchDone", f"{progress.done}/{progress.total} partitions moved",
                           False))
        if phase is Phase.COMPLETED:
            st.phase = "Completed"
            elected = (f"; {executor.state.elected} preferred leaders elected"
                       if executor.state.elected is not None else "")
            msg = f"{progress.done} partitions moved ({progress.bytes_moved} bytes){elected}"
            set_cond(st, SUCCEEDED, "True", "Completed", msg, gen)
            set_cond(st, PROGRESSING, "False", "Completed", msg, gen)
            if was is not Phase.COMPLETED:
                st.completed_at = now_rfc3339()
                events.append(("Completed", msg, False))
        elif phase is Phase.CANCELLED:
            st.phase = "Cancelled"
            msg = (f"cancelled: {progress.cancelled} moves rolled back or not started, "
                   f"{progress.done} had completed")
            set_cond(st, SUCCEEDED, "False", "Cancelled", msg, gen)
            set_cond(st, PROGRESSING, "False", "Cancelled", msg, gen)
            if was is not Phase.CANCELLED:
                st.completed_at = now_rfc3339()
                events.append(("Cancelled", msg, False))
        elif phase is Phase.FAILED:
            st.phase = "Failed"
            msg = progress.message or f"{progress.failed} partitions failed"
            set_cond(st, SUCCEEDED, "False", "Failed", msg, gen)
            set_cond(st, PROGRESSING, "False", "Failed", msg, gen)
            degrade(st, "PartitionsFailed", msg + "; see status.partitions", gen)
            if was is not Phase.FAILED:
                st.completed_at = now_rfc3339()
                events.append(("Failed", msg, True))
        else:
            st.phase = {Phase.PAUSED: "Paused", Phase.CANCELLING: "Cancelling"}.get(
                phase, "Moving")
            msg = (f"{progress.moving} moving, {progress.done} done, {progress.pending} pending "
                   f"of {progress.total}")
            if progress.message:
                msg += f"; {progress.message}"
            set_cond(st, SUCCEEDED, "Unknown", "InProgress", msg, gen)
            set_cond(st, PROGRESSING, "False" if phase is Phase.PAUSED else "True",
                     st.phase, msg, gen)
        return events

    @kopf.on.delete(**resource(KIND), registry=registry, id="rollback")
    async def rollback(spec: Any, uid: str, namespace: str, body: Any, kafkaclusters: Any,
                       **_: Any) -> None:
        """Deleting an in-flight reassignment cancels it and waits for the rollback."""
        saved = rt.load_op(uid)
        model, _problems = parse_spec(KIND, spec)
        if saved is None or saved.get("dryRun") or model is None:
            rt.forget_op(uid)
            rt.executors.pop(uid, None)
            return
        state = ExecutorState.model_validate(saved["executor"])
        if state.phase.terminal:
            rt.forget_op(uid)
            return
        ref = model.cluster_ref.name
        opened = rt.clusters.get((namespace, ref))
        if opened is None:
            if (namespace, ref) in kafkaclusters:
                raise kopf.TemporaryError(f"waiting for KafkaCluster {ref} to roll back",
                                          delay=max(rt.tick, 1.0))
            rt.forget_op(uid)  # the cluster is gone: nothing left to roll back
            emit(body, "RollbackSkipped", f"KafkaCluster {ref} no longer exists", warning=True)
            return
        plan, _ = plan_of(model, additional=True)

        def cancel(cluster: ClusterAdmin) -> Progress:
            executor = ReassignmentExecutor(cluster, plan, state)
            executor.start()
            executor.cancel()
            progress = executor.step()
            rt.save_op(uid, {"digest": saved.get("digest"),
                             "executor": executor.state.model_dump(mode="json")})
            return progress

        rt.executors.pop(uid, None)
        progress = await rt.run(opened, cancel)
        if not progress.phase.terminal:
            raise kopf.TemporaryError(f"rolling back: {progress.moving} moves still in flight",
                                      delay=max(rt.tick, 1.0))
        rt.forget_op(uid)
        emit(body, "Cancelled", f"deleted: {progress.cancelled} moves rolled back, "
             f"{progress.done} had completed")


def problems_reason(problems: list[PlanProblem]) -> str:
    """A CamelCase reason from the first problem's Kafka error name."""
    name = problems[0].error.name
    return "".join(part.capitalize() for part in name.split("_")) or "InvalidPlan"
