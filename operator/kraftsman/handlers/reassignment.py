"""PartitionReassignment: drive the core's level-based executor, one step per tick.

The executor's small state goes to the resource's status (``operationState``, see
:mod:`~kraftsman.handlers.opstate`) with every pass; which partitions are done or moving is
re-derived from the cluster, so a restarted or replaced operator — with or without its state
volume — resumes with nothing lost or done twice, and each milestone Event is posted once.
Deleting an in-flight reassignment cancels it and waits for the rollback.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from typing import Any

import kopf

from controller_core.admin import ClusterAdmin
from controller_core.errors import REASSIGNMENT_IN_PROGRESS, KafkaApiError
from controller_core.model import TopicPartition
from controller_core.orchestration.reassignment import (
    DryRunReport,
    ExecutorState,
    Phase,
    PlanProblem,
    Progress,
    ReassignmentExecutor,
    dry_run,
    throttles_owed,
)
from controller_core.orchestration.stall import Copied, StalledMove, StallWatch, describe
from controller_core.units import counted
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
    settled,
)
from kraftsman.handlers.logfilter import Waiting
from kraftsman.handlers.opstate import Outbox, bump, saved_state
from kraftsman.handlers.runtime import Runtime, spec_digest
from kraftsman.reconcile import controls_of, plan_of
from kraftsman.resources import PartitionReassignmentSpec
from kraftsman.status import (
    PROGRESSING,
    STALLED,
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
                  progress: Progress, executor: ReassignmentExecutor, copies: Copied) -> None:
    """The status' figures and rows; ``copies``: the executor's pass' read
    (``ReassignmentExecutor.copied``), each row's bytes."""
    # The adding replicas of the rows still moving; a failed row has no move in flight.
    adding = {d.tp: list(executor.adding.get(d.tp, ())) for d in progress.details
              if d.state != "failed"}
    rows = []
    for d in progress.details:
        original = list(executor.original.get(d.tp, ()))
        moving = d.tp in adding
        new = adding.get(d.tp, [])
        rows.append(PartitionProgress(
            topic=d.tp.topic, partition=d.tp.partition, state="Moving" if moving else "Failed",
            current_replicas=original + new, target_replicas=list(d.target), adding_replicas=new,
            removing_replicas=[r for r in original if r not in d.target] if moving else [],
            bytes_to_move=executor.move_bytes.get(d.tp),
            bytes_moved=copies[d.tp][0] if d.tp in copies else None,
            error=None if moving else "REASSIGNMENT_FAILED", message=d.message or None))
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


def mark_stalls(st: PartitionReassignmentStatus, stalled: list[StalledMove], now_ms: float,
                gen: int, outbox: Outbox) -> None:
    """Stalled=True naming the moves while any stands still, with a warning Event when it
    starts; back to False (and an Event) once they copy again or the run ends. No condition
    at all while nothing ever stalled."""
    was = st.condition(STALLED)
    st.stalled_moves = len(stalled)
    if stalled:
        msg = describe(stalled, now_ms)
        set_cond(st, STALLED, "True", "NoProgress", msg, gen)
        if was is None or was.status != "True":
            outbox.add("Stalled", msg, warning=True)
    elif was is not None and was.status == "True":
        set_cond(st, STALLED, "False", "ProgressResumed", "", gen)
        outbox.add("ProgressResumed", "the stalled moves copy again or have ended")


# A throttle whose estimated time to move the whole plan exceeds this is worth a warning.
ABSURD_ETA_SECONDS = 7 * 24 * 3600


def plan_warnings(spec: PartitionReassignmentSpec, executor: ReassignmentExecutor) -> list[str]:
    """What in a valid plan is probably a mistake: a replication factor change, a throttle
    so low that the move would take more than a week."""
    index = {(m.topic, m.partition): i for i, m in enumerate(spec.partitions)}
    out = []
    rf = [(tp, len(executor.original[tp]), len(target))
          for tp, target in executor.plan.moves.items()
          if tp in executor.original and len(executor.original[tp]) != len(target)]
    if rf:
        named = ", ".join(f"spec.partitions[{index[tp.topic, tp.partition]}] ({tp}) "
                          f"{old} -> {new}" for tp, old, new in rf[:5])
        more = f" (and {len(rf) - 5} more)" if len(rf) > 5 else ""
        out.append(f"replication factor changes: {named}{more}; if unintended, give each "
                   "partition as many replicas as it has")
    rate = spec.throttle_bytes_per_second
    left = executor.state.bytes_total - executor.state.bytes_done
    if rate is not None and left / rate > ABSURD_ETA_SECONDS:
        days = left / rate / 86400
        out.append(f"spec.throttleBytesPerSecond: {rate} B/s moves the {left} bytes left in "
                   f"~{days:,.0f} days; raise the throttle")
    return out


def cancel_dropped(cluster: ClusterAdmin, in_flight: list[list[Any]],
                   spec: PartitionReassignmentSpec) -> list[TopicPartition]:
    """Cancel the moves this resource had in flight that a changed spec no longer names
    (what the CLI does on a changed plan; KIP-455 cancellation)."""
    named = {(m.topic, m.partition) for m in spec.partitions}
    dropped = [TopicPartition(str(t), int(p)) for t, p in in_flight if (t, p) not in named]
    if dropped:
        ongoing = cluster.list_partition_reassignments(dropped)
        ours = [tp for tp in dropped if tp in ongoing]
        if ours:
            cluster.alter_partition_reassignments({tp: None for tp in ours})
    return dropped


def summary(report: DryRunReport) -> ReassignmentPlanSummary:
    return ReassignmentPlanSummary(
        replica_movements=report.replica_moves, leader_movements=report.leader_moves,
        bytes_to_move=report.bytes_to_move,
        estimated_seconds=None if report.estimated_seconds is None
        else round(report.estimated_seconds, 1),
        brokers_added=sorted(report.per_broker_in_bytes))


# How long a reconcile pass waits for kopf's watch to deliver this process's own last status
# write before it goes on from the body it has (stale_body).
STALE_BODY_WAIT = 30.0


def cancel_outcome(progress: Progress) -> str:
    """What a cancel did: the moves in flight rolled back, apart from those it kept from
    starting (saying "5000 moves rolled back" when 4,500 never started misleads)."""
    return (f"{counted(progress.rolled_back, 'move')} rolled back, "
            f"{counted(progress.never_started, 'move')} never started, "
            f"{progress.done:,} had completed")


def register(registry: kopf.OperatorRegistry, rt: Runtime) -> None:
    # The newest operation state of each resource this process works on, with its live
    # executor (it keeps what it noticed between passes). The API server holds the same state
    # (status.operationState); a state stored there by someone else (another replica, after a
    # hand-over) with a later revision wins over this copy.
    live: dict[str, tuple[dict[str, Any], ReassignmentExecutor | None]] = {}
    specs: dict[str, tuple[int, Any]] = {}  # uid -> (generation, what parsed() made of it)
    # Since when each move in flight copies nothing (a restart starts the windows anew).
    stalls: dict[str, StallWatch] = {}
    saved_at: dict[str, float] = {}  # uid -> when this process last saved a state (monotonic)
    names: dict[str, tuple[str, str]] = {}  # uid -> (namespace, name), to name a blocker

    def movers(cluster: ClusterAdmin, namespace: str, ref: str, me: str) -> tuple[
            list[str], list[TopicPartition]]:
        """The other PartitionReassignments (on this cluster, in this namespace) whose moves
        are in flight, and the partitions in flight that none of them moves (another tool's)."""
        ongoing = set(cluster.list_partition_reassignments())
        found: set[str] = set()
        claimed: set[TopicPartition] = set()
        for uid, (doc, _) in list(live.items()):
            if uid == me or names.get(uid, ("", ""))[0] != namespace or \
                    doc.get("cluster") != ref:
                continue
            mine = {TopicPartition(t, p) for t, p in doc.get("inFlight") or []} & ongoing
            if mine:
                found.add(f"{KIND}/{names[uid][1]}")
                claimed |= mine
        return sorted(found), sorted(ongoing - claimed)

    def cluster_changed(spec: PartitionReassignmentSpec, bound: str, now_id: str,
                        saved: dict[str, Any], st: PartitionReassignmentStatus, gen: int,
                        outbox: Outbox) -> None:
        """The KafkaCluster now reaches another cluster (spec.bootstrapServers repointed, an
        embedded cluster recreated under a new id): the run is bound to the cluster it started
        on, so nothing is re-issued on the new one, and the user decides."""
        ref = spec.cluster_ref.name
        moving = len(saved.get("inFlight") or [])
        msg = (f"KafkaCluster {ref} now reaches cluster {now_id}, but this reassignment started "
               f"on cluster {bound}: nothing is done on {now_id}. Its "
               f"{counted(moving, 'move')} in flight and the throttles it placed stay on "
               f"{bound}: point KafkaCluster {ref} back at that cluster to finish or roll them "
               f"back, or delete this resource (nothing is rolled back on {now_id}) and cancel "
               f"them there (kraftsman reassignments cancel --bootstrap-server ...)")
        if st.phase != "ClusterChanged":
            outbox.add("ClusterChanged", msg, warning=True)
        st.phase = "ClusterChanged"
        degrade(st, "ClusterIdChanged", msg, gen)
        set_cond(st, PROGRESSING, "True", "WaitingForDecision", msg, gen)

    def wait_for_others(cluster: ClusterAdmin, namespace: str, spec: PartitionReassignmentSpec,
                        me: str, st: PartitionReassignmentStatus, gen: int) -> None:
        """A new plan that is not additional waits while reassignments it did not start are
        in flight (as ReassignPartitionsCommand refuses it), naming what it waits for."""
        others, foreign = movers(cluster, namespace, spec.cluster_ref.name, me)
        what = others + ([f"a reassignment of {', '.join(str(tp) for tp in foreign[:3])}"
                          f"{' and more' if len(foreign) > 3 else ''} started outside "
                          "kraftsman's resources"] if foreign else [])
        msg = (f"waiting for {' and '.join(what) or 'reassignments in flight'} to finish "
               "before starting; or set spec.additional: true to move on top of them")
        st.phase = "Waiting"
        set_cond(st, PROGRESSING, "True", "WaitingForReassignments", msg, gen)
        set_cond(st, SUCCEEDED, "Unknown", "Pending", "not started", gen)
        healthy(st, gen)

    def stale_body(uid: str, status: Any) -> bool:
        """kopf runs a timer on the last body its watch delivered, which may predate this
        process's own last status write: the watch event of a large object comes seconds
        after the write on a busy API server (kopf's consistency wait is for event handlers
        only). A pass on that body would publish its older status over the newer one (seen
        on a real kube-apiserver: a Succeeded dry run of 8,266 partitions put back to
        Pending). Such a pass waits for the watch, for at most STALE_BODY_WAIT seconds; then
        (the write may never have landed) this process's copy goes, and the pass goes on from
        what the API server holds, re-deriving the rest from the cluster as after a restart."""
        mine = live.get(uid)
        stored = saved_state(status) or {}  # none yet: the body predates the first write
        if mine is None or int(stored.get("rev", 0)) >= int(mine[0].get("rev", 0)):
            return False
        if time.monotonic() - saved_at.get(uid, 0.0) < STALE_BODY_WAIT:
            return True
        live.pop(uid, None)
        return False

    @kopf.index(**resource(KIND), registry=registry, id="preas_users")
    async def preas_users(namespace: str, name: str, spec: Any, status: Any, **_: Any) -> Any:
        phase = (status or {}).get("phase")
        ref = (spec.get("clusterRef") or {}).get("name")
        if phase in TERMINAL_PHASES or phase == "Invalid" or not ref:
            return {}  # not None: kopf keeps an object's old entries when given None
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

    def current_doc(uid: str, status: Any) -> tuple[dict[str, Any], Any]:
        """The operation state to go on from: this process's copy unless the API server holds
        a later one; a state file of an older version (state volume) is read once."""
        stored = saved_state(status)
        mine = live.get(uid)
        if mine is not None and (stored is None or
                                 int(stored.get("rev", 0)) <= int(mine[0].get("rev", 0))):
            return mine
        if stored is None:
            stored = rt.load_op(uid) or {}
        return stored, None

    @kopf.timer(**resource(KIND), interval=rt.tick, registry=registry, id="reconcile",
                when=settled(*TERMINAL_PHASES))
    async def reconcile(spec: Any, status: Any, meta: Any, body: Any, patch: Any, uid: str,
                        namespace: str, kafkaclusters: Any, logger: Any, **_: Any) -> None:
        if not finalized(meta) or stale_body(uid, status):
            return
        gen = generation(meta)
        names[uid] = (namespace, str(meta.get("name") or ""))
        st = read_status(PartitionReassignmentStatus, status)
        if not st.conditions:  # first visit: every condition is set at once
            set_cond(st, SUCCEEDED, "Unknown", "Pending", "not started", gen)
            set_cond(st, PROGRESSING, "False", "Pending", "not started", gen)
            healthy(st, gen)
        base, cached = current_doc(uid, status)
        doc = copy.deepcopy(base)
        outbox = Outbox(doc)
        model, problems, digest, plan = parsed(uid, gen, spec)
        if model is None:
            st.phase = "Invalid"
            degrade(st, "InvalidSpec", "; ".join(problems), gen)
            set_cond(st, SUCCEEDED, "False", "InvalidSpec", "the spec is invalid", gen)
            await save(uid, doc, base, None, st, outbox, body, logger)
            publish(patch, status, st, gen)
            return
        assert isinstance(model, PartitionReassignmentSpec)
        was_on = doc.get("cluster")
        if was_on and was_on != model.cluster_ref.name and not terminal(doc):
            # The CRD refuses this edit (CEL); an API server without it lands here.
            degrade(st, "ClusterRefChanged", f"spec.clusterRef.name: changed from {was_on!r} "
                    f"while the reassignment runs there; set it back to {was_on!r}, or delete "
                    "this resource (rolls back) and create a new one", gen)
            await save(uid, doc, base, cached, st, outbox, body, logger)
            publish(patch, status, st, gen)
            return
        key = f"{KIND}/{uid}"
        if not rt.backoff.ready(key, rt.clock()):
            return
        opened = _cluster(namespace, model, kafkaclusters, st, gen)
        if opened is None:
            await save(uid, doc, base, cached, st, outbox, body, logger)
            publish(patch, status, st, gen)
            return

        def unless_deleted(cluster: ClusterAdmin) -> tuple[bool, ReassignmentExecutor | None]:
            # kopf's body is live: once the deletion has begun, the rollback owns the moves.
            # A pass that waited for the cluster's lock while the rollback cancelled them
            # must not start them again (nothing would ever cancel them then).
            if meta.get("deletionTimestamp"):
                return False, None
            return True, step(cluster, model, digest, plan, st, gen, doc, cached, outbox,
                              namespace, uid, opened.cluster_id_of())

        try:
            stepped, executor = await rt.run(opened, unless_deleted)
        except KafkaApiError as e:  # temporary: the cluster did not answer; back off
            live[uid] = (base, None)  # the executor may be half-way: re-derive next pass
            delay = rt.backoff.failed(key, rt.clock())
            set_cond(st, PROGRESSING, "True", "Retrying",
                     f"{e}; retrying in {delay:g}s", gen)
            publish(patch, status, st, gen)
            return
        rt.backoff.succeeded(key)
        if not stepped:
            return
        await save(uid, doc, base, executor, st, outbox, body, logger)
        publish(patch, status, st, gen)

    async def save(uid: str, doc: dict[str, Any], base: dict[str, Any],
                   executor: ReassignmentExecutor | None, st: PartitionReassignmentStatus,
                   outbox: Outbox, body: Any, logger: Any) -> None:
        """Post this pass's Events, then the state goes out with this pass's status (one
        write); a new revision only when it changed, so a pass that changed nothing writes
        nothing."""
        await outbox.post(body, rt.settings, logger)
        st.operation_state = bump(doc, base)
        if doc.get("rev") != base.get("rev"):
            saved_at[uid] = time.monotonic()
        live[uid] = (doc, executor)

    def terminal(doc: dict[str, Any]) -> bool:
        ex = doc.get("executor")
        return ex is None or ExecutorState.model_validate(ex).phase.terminal

    def parsed(uid: str, gen: int, spec: Any) -> tuple[
            PartitionReassignmentSpec | None, list[str], str, tuple[Any, list[PlanProblem]]]:
        """The spec parsed once per generation (a 100,000-partition spec is not re-validated,
        re-hashed and re-planned on every pass)."""
        hit = specs.get(uid)
        if hit is not None and hit[0] == gen:
            return hit[1]
        model, problems = parse_spec(KIND, spec)
        if model is None:
            out: Any = (None, problems, "", (None, []))
        else:
            out = (model, problems, moves_digest(model), plan_of(model))
        specs[uid] = (gen, out)
        return out  # type: ignore[no-any-return]

    def step(cluster: ClusterAdmin, spec: PartitionReassignmentSpec, digest: str,
             planned: tuple[Any, list[PlanProblem]], st: PartitionReassignmentStatus, gen: int,
             saved: dict[str, Any], cached: ReassignmentExecutor | None, outbox: Outbox,
             namespace: str, uid: str, cluster_id: str) -> ReassignmentExecutor | None:
        """One reconcile pass (in a worker thread, under the cluster's lock). Updates the
        operation state ``saved`` in place; milestones go to the outbox."""
        plan, problems = planned
        if problems:
            st.phase = "Invalid"
            msg = problem_messages(spec, problems)
            degrade(st, "InvalidPlan", msg, gen)
            set_cond(st, SUCCEEDED, "False", "InvalidPlan", "the plan is invalid", gen)
            return None
        if spec.dry_run:
            if saved.get("digest") == digest and saved.get("dryRun"):
                return None  # this plan was reviewed already
            report = dry_run(cluster, plan)
            st.plan = summary(report)
            if report.problems:
                st.phase = "Invalid"
                degrade(st, "InvalidPlan", problem_messages(spec, list(report.problems)), gen)
                set_cond(st, SUCCEEDED, "False", "InvalidPlan", "the plan is invalid", gen)
                return None
            st.phase = "DryRunComplete"
            eta = ("unthrottled" if report.estimated_seconds is None
                   else f"~{report.estimated_seconds:.0f}s at the throttle")
            msg = (f"dry run: {counted(report.partitions_moving, 'partition')} would move "
                   f"({report.replica_moves} replicas, {report.bytes_to_move} bytes, {eta}), "
                   f"{report.leader_moves} leader moves; nothing was moved")
            set_cond(st, SUCCEEDED, "True", "DryRunComplete", msg, gen)
            set_cond(st, PROGRESSING, "False", "DryRunComplete", msg, gen)
            healthy(st, gen)
            saved.update(digest=digest, dryRun=True, cluster=spec.cluster_ref.name)
            outbox.add("DryRunComplete", msg)
            return None

        state: ExecutorState | None = None
        if saved.get("executor") is not None and not saved.get("dryRun"):
            state = ExecutorState.model_validate(saved["executor"])
            bound = saved.get("clusterId")
            if not state.phase.terminal and bound and bound != cluster_id:
                cluster_changed(spec, bound, cluster_id, saved, st, gen, outbox)
                return cached  # nothing is done on a cluster this run did not start on
            if state.phase.terminal and saved.get("digest") == digest \
                    and not state.cleanup_owed:
                return cached  # finished; its status was published when it finished
            if state.phase.terminal and saved.get("digest") != digest and not spec.cancel:
                state, cached = None, None  # a finished run; the spec asks for new moves
            elif saved.get("digest") != digest and not state.phase.terminal:
                # Re-target: moves in flight under the old plan are ours to change; those the
                # spec no longer names are cancelled (their throttles go with the next sync).
                plan = dataclasses.replace(plan, additional=True)  # translated once
                cancel_dropped(cluster, saved.get("inFlight") or [], spec)
                cached = None
        if cached is not None and cached.admin is cluster and state is not None \
                and saved.get("digest") == digest:
            executor = cached  # the live executor keeps what it noticed between passes
            executor.state = state
        else:
            executor = ReassignmentExecutor(cluster, plan, state)
        was = executor.state.phase
        if was is Phase.PENDING:
            if spec.cancel:
                st.phase = "Cancelled"
                set_cond(st, SUCCEEDED, "False", "Cancelled", "cancelled before it started", gen)
                set_cond(st, PROGRESSING, "False", "Cancelled", "", gen)
                return None
            problems = executor.start()
            if problems and all(p.error == REASSIGNMENT_IN_PROGRESS for p in problems):
                wait_for_others(cluster, namespace, spec, uid, st, gen)
                return None  # not started: the next pass tries again
            if problems:
                st.phase = "Invalid"
                degrade(st, problems_reason(problems), problem_messages(spec, problems), gen)
                set_cond(st, SUCCEEDED, "False", "InvalidPlan", "the plan is invalid", gen)
                return None
            st.started_at = now_rfc3339()
            st.batches_completed = 0
            saved["clusterId"] = cluster_id  # the run is bound to the cluster it started on
            outbox.add("Started", f"reassignment of {counted(len(plan.moves), 'partition')} "
                       f"started ({executor.state.bytes_total} bytes to move)")
            st.warnings = plan_warnings(spec, executor)
            for warning in st.warnings:
                outbox.add("PlanWarning", warning, warning=True)
        else:
            executor.start()  # resume: re-derive done/moving/pending from the cluster
        if spec.throttle_bytes_per_second != saved.get("throttle") and was is not Phase.PENDING:
            st.warnings = plan_warnings(spec, executor)
            for warning in st.warnings:
                if warning.startswith("spec.throttleBytesPerSecond"):
                    outbox.add("PlanWarning", warning, warning=True)
        executor.control(plan.limits, controls_of(spec))  # the plan carries the spec's limits
        # (the count, not progress(): that reads every copy's size from the cluster)
        done_before = len(executor.done) if was is not Phase.PENDING else 0
        progress = executor.step()
        saved.update(digest=digest, dryRun=False, cluster=spec.cluster_ref.name,
                     clusterId=saved.get("clusterId") or cluster_id,
                     throttle=spec.throttle_bytes_per_second,
                     executor=executor.state.model_dump(mode="json"),
                     inFlight=sorted([tp.topic, tp.partition] for tp in executor.moving))
        copies = executor.copied()  # the pass' own read: no second DescribeLogDirs
        fill_progress(st, spec, progress, executor, copies)
        healthy(st, gen)
        phase = progress.phase
        now_ms = executor.admin.now_ms()
        watch = stalls.setdefault(uid, StallWatch(spec.stalled_after_seconds * 1000.0))
        watch.window_ms = spec.stalled_after_seconds * 1000.0
        # every move in flight, not only the rows the status details (at most 100): the
        # pass' sizes are at hand, no cluster call
        mark_stalls(st, [] if phase.terminal else watch.observe(
            now_ms, copies, executor.between_dirs), now_ms, gen, outbox)
        if progress.done > done_before and not phase.terminal:
            st.batches_completed += 1
            outbox.add("BatchDone", f"{progress.done}/{progress.total} partitions moved")
        warned = "; " + "; ".join(st.warnings) if st.warnings else ""
        owed = throttles_owed(executor.state) if phase.terminal else ""
        if phase is Phase.COMPLETED:
            st.phase = "Completed"
            elected = (f"; {executor.state.elected} preferred leaders elected"
                       if executor.state.elected is not None else "")
            msg = (f"{counted(progress.done, 'partition')} moved ({progress.bytes_moved} bytes)"
                   f"{elected}{owed}")
            set_cond(st, SUCCEEDED, "True", "Completed", msg, gen)
            set_cond(st, PROGRESSING, "False", "Completed", msg, gen)
            if was is not Phase.COMPLETED:
                if progress.done > done_before:
                    st.batches_completed += 1
                st.completed_at = now_rfc3339()
                outbox.add("Completed", msg)
        elif phase is Phase.CANCELLED:
            st.phase = "Cancelled"
            msg = f"cancelled: {cancel_outcome(progress)}{owed}"
            set_cond(st, SUCCEEDED, "False", "Cancelled", msg, gen)
            set_cond(st, PROGRESSING, "False", "Cancelled", msg, gen)
            if was is not Phase.CANCELLED:
                st.completed_at = now_rfc3339()
                outbox.add("Cancelled", msg)
        elif phase is Phase.FAILED:
            st.phase = "Failed"
            msg = (progress.message or f"{counted(progress.failed, 'partition')} failed") + owed
            set_cond(st, SUCCEEDED, "False", "Failed", msg, gen)
            set_cond(st, PROGRESSING, "False", "Failed", msg, gen)
            degrade(st, "PartitionsFailed", msg + "; see status.partitions", gen)
            if was is not Phase.FAILED:
                st.completed_at = now_rfc3339()
                outbox.add("Failed", msg, warning=True)
        else:
            st.phase = {Phase.PAUSED: "Paused", Phase.CANCELLING: "Cancelling"}.get(
                phase, "Moving")
            msg = (f"{progress.moving} moving, {progress.done} done, {progress.pending} pending "
                   f"of {progress.total}")
            if progress.message:
                msg += f"; {progress.message}"
            set_cond(st, SUCCEEDED, "Unknown", "InProgress", msg, gen)
            set_cond(st, PROGRESSING, "False" if phase is Phase.PAUSED else "True",
                     st.phase, msg + warned, gen)
        return executor

    @kopf.on.delete(**resource(KIND), registry=registry, id="rollback")
    async def rollback(spec: Any, status: Any, uid: str, namespace: str, body: Any,
                       kafkaclusters: Any, **_: Any) -> None:
        """Deleting an in-flight reassignment cancels it and waits for the rollback: the
        finalizer stays until nothing of it is in flight."""
        saved, _cached = current_doc(uid, status)
        model, _problems = parse_spec(KIND, spec)
        if not saved.get("executor") or saved.get("dryRun") or model is None:
            forget(uid)
            return
        state = ExecutorState.model_validate(saved["executor"])
        if state.phase.terminal:
            forget(uid)
            return
        ref = saved.get("cluster") or model.cluster_ref.name
        opened = rt.clusters.get((namespace, ref))
        if opened is None:
            if (namespace, ref) in kafkaclusters:
                raise Waiting(f"waiting for KafkaCluster {ref} to roll back",
                              delay=max(rt.tick, 1.0))
            forget(uid)  # the cluster is gone: nothing left to roll back
            emit(body, "RollbackSkipped", f"KafkaCluster {ref} no longer exists", warning=True)
            return
        plan, _ = plan_of(model, additional=True)
        bound = saved.get("clusterId")

        def cancel(cluster: ClusterAdmin) -> Progress | str:
            now_id = opened.cluster_id_of()
            if bound and bound != now_id:
                return now_id  # started on another cluster: nothing of it is here
            executor = ReassignmentExecutor(cluster, plan, state)
            executor.start()
            executor.cancel()
            progress = executor.step()
            doc = dict(saved, executor=executor.state.model_dump(mode="json"))
            bump(doc, saved)
            live[uid] = (doc, None)
            return progress

        progress = await rt.run(opened, cancel)
        if isinstance(progress, str):
            forget(uid)
            emit(body, "RollbackSkipped", f"started on cluster {bound}, but KafkaCluster {ref} "
                 f"now reaches cluster {progress}: nothing was rolled back; its moves in flight "
                 f"and throttles on {bound} are left as they were (cancel them there: kraftsman "
                 "reassignments cancel --bootstrap-server ...)", warning=True)
            return
        if not progress.phase.terminal:
            raise Waiting(f"rolling back: {progress.moving} moves still in flight",
                          delay=max(rt.tick, 1.0))
        forget(uid)
        emit(body, "Cancelled", f"deleted: {cancel_outcome(progress)}")

    def forget(uid: str) -> None:
        live.pop(uid, None)
        stalls.pop(uid, None)
        specs.pop(uid, None)
        saved_at.pop(uid, None)
        names.pop(uid, None)
        rt.forget_op(uid)  # a state file of an older version


def problems_reason(problems: list[PlanProblem]) -> str:
    """A CamelCase reason from the first problem's Kafka error name."""
    name = problems[0].error.name
    return "".join(part.capitalize() for part in name.split("_")) or "InvalidPlan"
