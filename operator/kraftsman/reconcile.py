"""From a resource's spec to the orchestrators — shared by the CLI and the kopf handlers,
so both interpret a spec the same way. No algorithm here: only translation."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from controller_core.admin import ClusterAdmin
from controller_core.model import ElectionType, TopicPartition
from controller_core.orchestration.election import ElectionReport, run_election
from controller_core.orchestration.reassignment import (
    Controls,
    ExecutorState,
    Limits,
    PlanProblem,
    ReassignmentExecutor,
    ReassignmentPlan,
    describe_for,
)
from kraftsman.resources import LeaderElectionSpec, PartitionReassignmentSpec


def limits_of(spec: PartitionReassignmentSpec) -> Limits:
    return Limits(spec.throttle_bytes_per_second, spec.max_concurrent_moves,
                  spec.max_concurrent_moves_per_broker, spec.log_dir_throttle_bytes_per_second)


def controls_of(spec: PartitionReassignmentSpec) -> Controls:
    return Controls(paused=spec.paused, cancel=spec.cancel)


def plan_of(spec: PartitionReassignmentSpec, *, additional_for: Iterable[TopicPartition] = (),
            additional: bool = False) -> tuple[ReassignmentPlan, list[PlanProblem]]:
    """The executor's plan for a spec. ``additional_for``: partitions this same resource was
    already moving, which a changed spec may re-target without being refused as overlap;
    ``additional``: treat the plan as additional whatever the spec says (a resumed run)."""
    moves = [(TopicPartition(m.topic, m.partition), m.replicas) for m in spec.partitions]
    log_dirs = {TopicPartition(m.topic, m.partition): m.log_dirs for m in spec.partitions
                if m.log_dirs is not None and any(d != "any" for d in m.log_dirs)}
    plan, problems = ReassignmentPlan.from_moves(
        moves, limits=limits_of(spec), elect_preferred_leaders=spec.elect_preferred_leaders,
        additional=additional or spec.additional, log_dirs=log_dirs)
    return as_additional_for(plan, additional_for), problems


def as_additional_for(plan: ReassignmentPlan, in_flight: Iterable[TopicPartition]
                      ) -> ReassignmentPlan:
    """The plan, additional when it names a partition of ``in_flight`` (moves this resource
    already had under way): no second translation of the spec."""
    if plan.additional or not any(tp in plan.moves for tp in in_flight):
        return plan
    return dataclasses.replace(plan, additional=True)


def executor_for(admin: ClusterAdmin, spec: PartitionReassignmentSpec,
                 state: dict[str, Any] | None, previous_spec: PartitionReassignmentSpec | None
                 ) -> tuple[ReassignmentExecutor, list[PlanProblem], bool]:
    """An executor for ``spec``, resuming ``state`` when the moves are unchanged.

    Returns (executor, problems, retargeted). When the moves changed while the previous run
    was in flight, its moves that the new spec no longer names are cancelled first and the
    new plan starts fresh (KIP-455: a new target replaces the current one).

    One pass down: the spec is translated once (plan with its limits, controls) and handed
    to the executor, and the partitions are described once for both plans."""
    saved = ExecutorState.model_validate(state) if state else None
    same_moves = previous_spec is not None and previous_spec.partitions == spec.partitions
    plan, problems = plan_of(spec)
    controls = controls_of(spec)
    if saved is not None and same_moves:
        ex = ReassignmentExecutor(admin, plan, saved)
        problems = ex.start()
        if not problems:
            ex.control(plan.limits, controls)
        return ex, problems, False
    retargeted = False
    current = None
    if saved is not None and previous_spec is not None and not saved.phase.terminal:
        old = ReassignmentExecutor(admin, plan_of(previous_spec)[0], saved)
        # Cancelling the old run's dropped moves touches no partition of the new plan, and
        # removing throttles no description: one describe serves both starts.
        current = describe_for(admin, old.plan, plan)
        old.start(current)
        dropped = {tp: None for tp in old.moving if tp not in plan.moves}
        if dropped:
            admin.alter_partition_reassignments(dropped)
        plan = as_additional_for(plan, set(old.moving) - set(dropped))
        old.cleanup()  # removes the old run's throttles; the new run places its own
        retargeted = True
    ex = ReassignmentExecutor(admin, plan)
    if problems:
        return ex, problems, retargeted
    if spec.dry_run:
        return ex, [], retargeted
    problems = ex.start(current)
    if not problems:
        ex.control(plan.limits, controls)
    return ex, problems, retargeted


def election_of(admin: ClusterAdmin, spec: LeaderElectionSpec) -> ElectionReport:
    kind = ElectionType(spec.election_type)
    if spec.partitions is not None:
        return run_election(admin, kind, partitions=[
            TopicPartition(p.topic, p.partition) for p in spec.partitions])
    if spec.topics is not None:
        return run_election(admin, kind, topics=spec.topics)
    return run_election(admin, kind)
