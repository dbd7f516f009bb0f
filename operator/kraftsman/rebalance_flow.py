"""KafkaRebalance as a pure state machine: what the operator saw -> the next status and actions.

The handler (``handlers/rebalance.py``) gathers what one pass needs to know — the spec, the
``kraftsman.io/rebalance`` annotation, the planner Job's state, the proposal's index
ConfigMap, the running PartitionReassignment's phase, the cluster's assignment fingerprint —
and performs the actions :func:`decide` returns. Nothing here talks to Kubernetes or Kafka, so
every transition is tested directly (tests/operator/test_rebalance_flow.py).

Phases: ``PendingProposal`` (the Job runs) -> ``ProposalReady`` (figures in status) -> on
approval ``Rebalancing`` (the proposal's PartitionReassignments one after another) -> ``Ready``;
or ``Failed``, ``Rejected``, ``Stale`` (the cluster's assignment changed since the proposal)
and ``Invalid`` (the spec or the cluster reference is wrong). A new proposal is made when the
spec's planning fields change (not ``approval``) or on ``refresh``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import orjson

from controller_core.units import format_bytes, format_duration
from kraftsman import rebalance_brokers as rb
from kraftsman.proposal import PARTS_KEY, SUMMARY_KEY
from kraftsman.proposal import index_name as _index_name
from kraftsman.resources import KafkaRebalanceSpec
from kraftsman.status import (
    DEGRADED,
    DETAIL_CAP,
    PROGRESSING,
    READY,
    STALLED,
    BalanceFigure,
    KafkaRebalanceStatus,
    ProposalFigures,
    RebalanceStep,
)

ANNOTATION = "kraftsman.io/rebalance"
ACTIONS = ("approve", "refresh", "reject")
LABEL_NAMESPACE = "kraftsman.io/rebalance-namespace"

PROPOSAL_READY = "ProposalReady"
APPROVED = "Approved"
STALE = "Stale"

# Phases in which nothing happens until the user acts (or the spec changes).
WAITING_PHASES = ("Ready", "Failed", "Rejected", "Stale")
# A Job's name is also a label value on its pods: at most 63 characters.
MAX_JOB_NAME = 63
JobState = Literal["missing", "running", "succeeded", "failed"]
# The phases a PartitionReassignment ends in, other than Completed.
PREAS_FAILED = ("Failed", "Cancelled", "Invalid")


def job_name(name: str, proposal_id: int) -> str:
    return f"{name}-plan-{proposal_id}"


def index_name(name: str, proposal_id: int) -> str:
    return _index_name(name, str(proposal_id))


def step_name(name: str, proposal_id: int, index: int) -> str:
    """The i-th (0-based) PartitionReassignment of a proposal: ``<rebalance>-<id>-NNNN``."""
    return f"{name}-{proposal_id}-{index + 1:04d}"


def plan_digest(spec: KafkaRebalanceSpec) -> str:
    """What a proposal depends on: every spec field but ``approval`` and ``unregister``
    (what happens after the drain)."""
    import hashlib

    doc = spec.model_dump(mode="json", by_alias=True, exclude={"approval", "unregister"})
    return hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


# ------------------------------------------------------------------ the proposal ConfigMaps

@dataclass(frozen=True)
class Proposal:
    """The index ConfigMap of a proposal, parsed: its figures and part ConfigMaps, or the
    planner's one-line error."""

    figures: ProposalFigures | None = None
    parts: tuple[str, ...] = ()
    error: str | None = None


def parse_index(cm_name: str, data: Mapping[str, Any]) -> Proposal:
    """Parse the index ConfigMap's data (contract: ``summary.json`` + ``parts``, or ``error``).
    A malformed one is a Proposal with an error naming the ConfigMap and key."""
    if data.get("error"):
        return Proposal(error=str(data["error"]).strip().splitlines()[0])
    where = f"ConfigMap {cm_name}"
    if SUMMARY_KEY not in data or PARTS_KEY not in data:
        missing = [k for k in (SUMMARY_KEY, PARTS_KEY) if k not in data]
        return Proposal(error=f"{where}: no {' or '.join(missing)} in data; the planner wrote "
                        "an incomplete proposal: refresh to plan again")
    try:
        summary = json.loads(str(data[SUMMARY_KEY]))
        parts = json.loads(str(data[PARTS_KEY]))
    except ValueError as e:
        return Proposal(error=f"{where}: summary.json or parts is not JSON ({e}); refresh to "
                        "plan again")
    if not isinstance(summary, dict) or not isinstance(parts, list) or not all(
            isinstance(p, str) for p in parts):
        return Proposal(error=f"{where}: summary.json must be an object and parts a list of "
                        "ConfigMap names; refresh to plan again")
    try:
        figures = figures_of(summary)
    except (ValueError, TypeError) as e:
        return Proposal(error=f"{where}: summary.json: {e}; refresh to plan again")
    return Proposal(figures=figures, parts=tuple(parts))


def _lines(items: Any, keys: Sequence[str]) -> list[str]:
    out: list[str] = []
    for item in list(items or [])[:DETAIL_CAP]:
        if isinstance(item, Mapping):
            out.append(": ".join(str(item[k]) for k in keys if item.get(k) is not None))
        else:
            out.append(str(item))
    return out


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def figures_of(summary: Mapping[str, Any]) -> ProposalFigures:
    """The status figures from the planner's summary.json (report.summary + fingerprint,
    createdAt, sources)."""
    balance = {}
    for metric, pair in dict(summary.get("maxOverMean") or {}).items():
        if isinstance(pair, Mapping) and pair.get("before") is not None \
                and pair.get("after") is not None:
            balance[str(metric)] = BalanceFigure(before=float(pair["before"]),
                                                 after=float(pair["after"]))
    sources = {str(k): v if isinstance(v, str) else json.dumps(v)
               for k, v in dict(summary.get("sources") or {}).items()}
    return ProposalFigures(
        goal=str(summary.get("goal") or "?"),
        partitions_in_plan=int(summary.get("partitionsInPlan") or 0),
        partitions_total=int(summary.get("partitionsTotal") or 0),
        replicas_to_move=int(summary.get("replicasToMove") or 0),
        bytes_to_move=int(summary.get("bytesToMove") or 0),
        replicas_to_move_between_dirs=_int_or_none(summary.get("replicasToMoveBetweenDirs")),
        bytes_to_move_between_dirs=_int_or_none(summary.get("bytesToMoveBetweenDirs")),
        estimated_seconds=(None if summary.get("estimatedSeconds") is None
                           else float(summary["estimatedSeconds"])),
        throttle_bytes_per_second=(None if summary.get("throttleBytesPerSecond") is None
                                   else int(summary["throttleBytesPerSecond"])),
        resources=int(summary.get("resources") or 0),
        balance=balance,
        violations=_lines(summary.get("violations"), ("constraint", "subject", "reason")),
        targets_not_reached=_lines(summary.get("targetsNotReached", summary.get("shortfalls")),
                                   ()),
        fingerprint=summary.get("fingerprint"),
        created_at=summary.get("createdAt"),
        sources=sources)


def steps_of(name: str, proposal_id: int,
             parts: Sequence[tuple[str, Mapping[str, Any]]]) -> list[RebalanceStep]:
    """The PartitionReassignments of a proposal, in apply order: each part ConfigMap's
    ``resource-NNNN.yaml`` keys in key order, the parts in the index's order."""
    steps: list[RebalanceStep] = []
    for cm, data in parts:
        for key in sorted(k for k in data if k.startswith("resource-") and k.endswith(".yaml")):
            steps.append(RebalanceStep(name=step_name(name, proposal_id, len(steps)),
                                       config_map=cm, key=key))
    return steps


# ------------------------------------------------------------------ one pass

@dataclass(frozen=True)
class CreateJob:
    proposal_id: int


@dataclass(frozen=True)
class DeleteProposal:
    """Delete the Job (and the ConfigMaps) of an earlier proposal."""

    proposal_id: int


@dataclass(frozen=True)
class CreateReassignment:
    step: RebalanceStep
    proposal_id: int


@dataclass(frozen=True)
class CancelReassignment:
    name: str


Action = (CreateJob | DeleteProposal | CreateReassignment | CancelReassignment | rb.Cordon
          | rb.Uncordon | rb.Unregister)


@dataclass(frozen=True)
class Event:
    reason: str
    message: str
    warning: bool = False


class StepSeen(NamedTuple):
    """The running PartitionReassignment as a pass reads it; ``stalled`` is its Stalled
    condition's message while that is True (its moves copy nothing), else empty."""

    phase: str
    progress: str
    message: str
    stalled: str = ""


@dataclass(frozen=True)
class Observed:
    """What the handler saw this pass. ``job``/``proposal``/``steps`` are about the current
    proposal (gathered in PendingProposal); ``current`` is the running reassignment, None
    when it does not exist; ``fingerprint`` is the cluster's,
    given when :func:`decide` asked for it."""

    name: str
    namespace: str
    generation: int
    spec: KafkaRebalanceSpec | None
    planner_namespace: str = "default"  # where the planner Jobs run
    problems: Sequence[str] = ()
    annotation: str | None = None
    cluster_known: bool = True
    job: JobState = "missing"
    job_failure: str = ""  # the failed Job's reason and message (DeadlineExceeded: ...)
    proposal: Proposal | None = None
    steps: Sequence[RebalanceStep] | str | None = None  # str: why the parts are unusable
    current: StepSeen | None = None
    fingerprint: str | None = None
    drained: Sequence[rb.Drain] | None = None  # remove-brokers: given when decide asked
    listed: Mapping[int, bool] | None = None  # describe cluster: broker -> fenced, when asked


@dataclass
class Decision:
    status: KafkaRebalanceStatus
    actions: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    remove_annotation: bool = False
    need_fingerprint: bool = False
    need_drain_check: tuple[int, ...] = ()  # describe these brokers' holdings, decide again
    need_listing: bool = False  # describe cluster, decide again


class _Pass:
    def __init__(self, st: KafkaRebalanceStatus, obs: Observed, now: str) -> None:
        self.st = st.model_copy(deep=True)
        self.obs, self.now, self.gen = obs, now, obs.generation
        self.d = Decision(self.st)

    def cond(self, type_: str, status: Literal["True", "False", "Unknown"], reason: str,
             message: str = "") -> None:
        self.st.with_condition(type_, status, reason, message, generation=self.gen, now=self.now)

    def degrade(self, reason: str, message: str) -> None:
        self.cond(DEGRADED, "True", reason, message)

    def event(self, reason: str, message: str, warning: bool = False) -> None:
        self.d.events.append(Event(reason, message, warning))

    def notes(self, notes: Sequence[rb.Note]) -> None:
        self.d.events += apply_notes(self.st, notes, self.gen, self.now)


def apply_notes(st: KafkaRebalanceStatus, notes: Sequence[rb.Note], generation: int,
                now: str) -> list[Event]:
    """The conditions the broker transitions set, and their Events (also for the outcomes
    the handler hands back after an action)."""
    for n in notes:
        if n.condition is not None:
            st.with_condition(n.condition, "True" if n.status else "False", n.reason,
                              n.message, generation=generation, now=now)
    return [Event(n.reason, n.message, n.warning) for n in notes]


def decide(st: KafkaRebalanceStatus, obs: Observed, now: str) -> Decision:
    """The next status and the actions that get there (performed by the handler in order;
    if one fails, the handler keeps the old status)."""
    p = _Pass(st, obs, now)
    s = p.st
    if obs.spec is not None:
        s.cluster = obs.spec.cluster_ref.name
    if not s.conditions:
        p.cond(READY, "False", "Pending", "not started")
        p.cond(DEGRADED, "False", "AsExpected")
    problem = _spec_problem(obs)
    if problem is not None:
        reason, message = problem
        s.phase = "Invalid"
        p.degrade(reason, message)
        p.cond(READY, "False", reason, message)
        return p.d
    spec = obs.spec
    assert spec is not None
    action = obs.annotation
    if action is not None and action not in ACTIONS:
        p.degrade("UnknownAnnotation", f"metadata.annotations[{ANNOTATION}]: unknown value "
                  f"{action!r}; use approve, refresh or reject (or remove the annotation)")
        action = None
    else:
        _degraded_as_the_phase_says(p)
    digest = plan_digest(spec)
    phase = s.phase
    if phase != "Rebalancing" and (s.proposal_id == 0 or phase == "Invalid"
                                   or s.plan_digest != digest or action == "refresh"):
        p.d.remove_annotation = action == "refresh"
        return _new_proposal(p, digest, "refresh" if action == "refresh" else
                             "spec" if s.proposal_id else "created")
    if phase == "PendingProposal":
        if _rejected(p, spec, action):
            p.d.actions.append(DeleteProposal(s.proposal_id))
            return _reject(p, spec, action, "while the planner ran")
        return _pending(p)
    if phase == "ProposalReady":
        return _ready(p, spec, action)
    if phase == "Rebalancing":
        decision = _rebalancing(p, spec, action, digest)
        stalled = s.condition(STALLED)
        if s.phase != "Rebalancing" and stalled is not None and stalled.status == "True":
            p.cond(STALLED, "False", "ExecutionEnded", f"the execution ended ({s.phase})")
        return decision
    # Ready, Failed, Rejected, Stale: nothing to do until refresh or a spec change.
    if phase == "Rejected" and spec.approval == "Approved" and s.decided_by == "spec.approval":
        # GitOps: spec.approval went from Rejected to Approved; plan afresh, execute when ready.
        return _new_proposal(p, digest, "approval changed to Approved")
    if action is not None:
        p.d.remove_annotation = True
        p.event("AnnotationIgnored", f"{ANNOTATION}={action}: nothing to {action} in phase "
                f"{phase}; annotate {ANNOTATION}=refresh for a new proposal", warning=True)
    if phase == "Ready" and rb.wants_unregister(s, spec):
        if obs.listed is None:
            p.d.need_listing = True
            return p.d
        actions, notes = rb.unregister_step(s, obs.listed)
        p.d.actions += actions
        p.notes(notes)
    return p.d


def _degraded_as_the_phase_says(p: _Pass) -> None:
    """Degraded once a pass went well: a Stale or Failed rebalance stays Degraded (as the
    phase's own conditions say) until a refresh or a spec change, whatever annotation comes
    meanwhile (Argo CD would show Progressing, and a sync wave wait instead of stopping); any
    other phase is as expected (an API error or an unknown annotation of an earlier pass is
    over)."""
    s = p.st
    stale, progressing = s.condition(STALE), s.condition(PROGRESSING)
    if s.phase == "Stale" and stale is not None and stale.status == "True":
        p.degrade("StaleProposal", stale.message)
    elif s.phase == "Failed" and progressing is not None and progressing.status == "False":
        p.degrade(progressing.reason, progressing.message)
    else:
        p.cond(DEGRADED, "False", "AsExpected")


def _spec_problem(obs: Observed) -> tuple[str, str] | None:
    if obs.spec is None:
        return "InvalidSpec", "; ".join(obs.problems) or "spec: invalid"
    longest = job_name(obs.name, 999)
    if len(longest) > MAX_JOB_NAME:
        return "NameTooLong", (
            f"metadata.name: {obs.name!r} is too long for the planner Job's name "
            f"({longest!r} must fit in {MAX_JOB_NAME} characters); use a name of at most "
            f"{MAX_JOB_NAME - len(longest) + len(obs.name)} characters")
    if not obs.cluster_known:
        ref = obs.spec.cluster_ref.name
        return "UnknownCluster", (f"spec.clusterRef.name: no KafkaCluster {ref!r} in namespace "
                                  f"{obs.namespace}; create it or fix the name")
    return None


def _new_proposal(p: _Pass, digest: str, why: str) -> Decision:
    s = p.st
    if s.proposal_id:
        p.d.actions.append(DeleteProposal(s.proposal_id))
    s.proposal_id += 1
    s.plan_digest = digest
    s.phase = "PendingProposal"
    s.proposal = None
    s.moves = s.data = s.eta = None
    s.steps, s.current, s.current_progress, s.progress = [], None, None, None
    s.decided_by = s.approved_at = s.completed_at = None
    s.brokers, s.cordon = [], None
    s.job = f"{p.obs.planner_namespace}/{job_name(p.obs.name, s.proposal_id)}"
    s.proposal_config_map = index_name(p.obs.name, s.proposal_id)
    p.d.actions.append(CreateJob(s.proposal_id))
    msg = f"proposal {s.proposal_id} requested ({why}): planner Job {s.job} started"
    p.cond(PROPOSAL_READY, "False", "Planning", msg)
    p.cond(APPROVED, "False", "Pending", "no proposal to approve yet")
    p.cond(STALE, "False", "Fresh", "")
    p.cond(READY, "False", "Planning", msg)
    p.cond(PROGRESSING, "True", "Planning", msg)
    p.event("ProposalRequested", msg)
    return p.d


def _pending(p: _Pass) -> Decision:
    s, obs = p.st, p.obs
    proposal = obs.proposal
    if proposal is not None and proposal.error is not None:
        return _failed(p, "PlannerFailed", f"planner Job {s.job}: {proposal.error}",
                       ready_reason="PlannerFailed")
    if proposal is not None and proposal.figures is not None:
        if isinstance(obs.steps, str):
            return _failed(p, "ProposalIncomplete", obs.steps, ready_reason="PlannerFailed")
        if obs.steps is not None:
            return _proposal_ready(p, proposal.figures, list(obs.steps))
    if obs.job == "failed":
        why = f" ({obs.job_failure})" if obs.job_failure else ""
        return _failed(p, "PlannerFailed", (
            f"planner Job {s.job} failed{why} without writing its proposal (ConfigMap "
            f"{s.proposal_config_map}); see `kubectl logs -n {obs.planner_namespace} "
            f"job/{job_name(obs.name, s.proposal_id)}`; annotate {ANNOTATION}=refresh to plan "
            "again"),
            ready_reason="PlannerFailed")
    if obs.job == "succeeded" and proposal is None:
        return _failed(p, "PlannerFailed", (
            f"planner Job {s.job} succeeded but wrote no ConfigMap {s.proposal_config_map}; "
            f"annotate {ANNOTATION}=refresh to plan again"), ready_reason="PlannerFailed")
    if obs.job == "missing":
        p.d.actions.append(CreateJob(s.proposal_id))  # deleted by someone: start it again
    msg = f"planner Job {s.job} is computing proposal {s.proposal_id}"
    p.cond(PROPOSAL_READY, "False", "Planning", msg)
    p.cond(PROGRESSING, "True", "Planning", msg)
    return p.d


def _proposal_ready(p: _Pass, figures: ProposalFigures, steps: list[RebalanceStep]) -> Decision:
    s = p.st
    s.phase = "ProposalReady"
    s.proposal = figures
    s.steps = steps
    s.moves = figures.replicas_to_move
    s.data = format_bytes(figures.bytes_to_move)
    s.eta = format_duration(figures.estimated_seconds)
    s.progress = f"0/{len(steps)}"
    msg = (f"proposal {s.proposal_id}: {figures.partitions_in_plan} of "
           f"{figures.partitions_total} partitions move ({figures.replicas_to_move} replicas, "
           f"{s.data}, ETA {s.eta}) in {len(steps)} PartitionReassignment(s)")
    balance = ", ".join(f"{k} {v.before:g} -> {v.after:g}" for k, v in figures.balance.items()
                        if k in ("replicas", "leaders", "disk_bytes"))
    if balance:
        msg += f"; max/mean {balance}"
    p.cond(PROPOSAL_READY, "True", "ProposalReady", msg)
    p.cond(APPROVED, "False", "Pending", f"approve with spec.approval: Approved or annotate "
           f"{ANNOTATION}=approve")
    p.cond(READY, "False", "ProposalReady", "waiting for approval")
    p.cond(PROGRESSING, "False", "WaitingForApproval", msg)
    p.event("ProposalReady", msg)
    return p.d


def _failed(p: _Pass, reason: str, message: str, *, ready_reason: str,
            event: bool = True) -> Decision:
    s = p.st
    s.phase = "Failed"
    p.degrade(reason, message)
    p.cond(READY, "False", ready_reason, message)
    p.cond(PROGRESSING, "False", reason, message)
    if reason in ("PlannerFailed", "ProposalIncomplete"):
        p.cond(PROPOSAL_READY, "False", reason, message)
    if event:
        p.event(reason, message, warning=True)
    return p.d


def _rejected(p: _Pass, spec: KafkaRebalanceSpec, action: str | None) -> bool:
    return action == "reject" or spec.approval == "Rejected"


def _source(action: str | None) -> str:
    return "annotation" if action is not None else "spec.approval"


def _reject(p: _Pass, spec: KafkaRebalanceSpec, action: str | None, when: str) -> Decision:
    s = p.st
    s.phase = "Rejected"
    s.decided_by = _source(action if action == "reject" else None)
    p.d.remove_annotation = action is not None
    msg = f"proposal {s.proposal_id} rejected {when} (by {s.decided_by})"
    p.cond(APPROVED, "False", "Rejected", msg)
    p.cond(READY, "False", "Rejected", msg)
    p.cond(PROGRESSING, "False", "Rejected", msg)
    p.event("Rejected", msg)
    return p.d


def _ready(p: _Pass, spec: KafkaRebalanceSpec, action: str | None) -> Decision:
    s, obs = p.st, p.obs
    if _rejected(p, spec, action):
        return _reject(p, spec, action, "before execution")
    if action == "approve" or spec.approval == "Approved":
        if obs.fingerprint is None:
            p.d.need_fingerprint = True
            return p.d
        s.decided_by = _source(action if action == "approve" else None)
        p.d.remove_annotation = action is not None
        planned = s.proposal.fingerprint if s.proposal else None
        if planned != obs.fingerprint:
            s.phase = "Stale"
            msg = (f"proposal {s.proposal_id} is stale: the cluster's replica assignment "
                   f"changed since it was computed (fingerprint {str(planned)[:12]} -> "
                   f"{obs.fingerprint[:12]}); nothing was executed; annotate "
                   f"{ANNOTATION}=refresh (or change the spec) for a new proposal")
            p.cond(STALE, "True", "AssignmentChanged", msg)
            p.degrade("StaleProposal", msg)
            p.cond(READY, "False", "Stale", msg)
            p.event("Stale", msg, warning=True)
            return p.d
        s.approved_at = p.now
        p.cond(APPROVED, "True", "Approved", f"approved by {s.decided_by}")
        p.event("Approved", f"proposal {s.proposal_id} approved by {s.decided_by}")
        if not s.steps:
            return _finish(p, spec, "nothing to move: the proposal is empty")
        cordon = rb.start(s, spec)
        if cordon is not None:
            p.d.actions.append(cordon)  # before the first move
        s.phase = "Rebalancing"
        return _create_next(p)
    if action is not None:  # "refresh" was handled before
        p.d.remove_annotation = True
    return p.d


def _create_next(p: _Pass) -> Decision:
    s = p.st
    i = next(i for i, step in enumerate(s.steps) if step.state == "Pending")
    step = s.steps[i]
    step.state = "Created"
    s.current, s.current_progress = step.name, "0%"
    done = sum(1 for x in s.steps if x.state == "Completed")
    s.progress = f"{done}/{len(s.steps)}"
    p.d.actions.append(CreateReassignment(step, s.proposal_id))
    msg = f"PartitionReassignment {step.name} ({i + 1} of {len(s.steps)}) created"
    p.cond(PROGRESSING, "True", "Rebalancing", msg)
    p.cond(READY, "False", "Rebalancing", msg)
    p.event("ReassignmentCreated", msg)
    return p.d


def _finish(p: _Pass, spec: KafkaRebalanceSpec, msg: str) -> Decision:
    """The last step Completed: Ready — for remove-brokers only once every broker is seen to
    hold nothing (a topic created meanwhile on a cluster that cannot cordon, or a move made by
    hand, can put a replica back); otherwise Failed, saying what each still holds."""
    brokers = rb.removing(spec)
    if not brokers:
        return _done(p, msg)
    if p.obs.drained is None:
        p.d.need_drain_check = brokers
        return p.d
    drained, notes = rb.verified(p.st, p.obs.drained)
    p.notes(notes)
    if not drained:
        p.st.current = p.st.current_progress = None
        return _failed(p, "NotDrained", (
            f"{notes[0].message}; annotate {ANNOTATION}=refresh for a proposal that moves "
            "the rest"), ready_reason="NotDrained", event=False)
    return _done(p, f"{msg}; {notes[0].message}")


def _done(p: _Pass, msg: str) -> Decision:
    s = p.st
    s.phase = "Ready"
    s.current = s.current_progress = None
    s.progress = f"{sum(1 for x in s.steps if x.state == 'Completed')}/{len(s.steps)}"
    s.completed_at = p.now
    p.cond(READY, "True", "Completed", msg)
    p.cond(PROGRESSING, "False", "Completed", msg)
    p.event("Completed", msg)
    return p.d


def _rebalancing(p: _Pass, spec: KafkaRebalanceSpec, action: str | None,
                 digest: str) -> Decision:
    s, obs = p.st, p.obs
    running = next((x for x in s.steps if x.state == "Created"), None)
    if running is None:  # a status edited by hand: go on with the next one, if any
        if any(x.state == "Pending" for x in s.steps):
            return _create_next(p)
        return _finish(p, spec, _summary_done(s))
    if _rejected(p, spec, action):
        running.state = "Cancelled"
        p.d.actions.append(CancelReassignment(running.name))
        _uncordon(p)
        done = sum(1 for x in s.steps if x.state == "Completed")
        return _reject(p, spec, action, (
            f"while rebalancing: {running.name} cancelled (its moves in flight roll back), "
            f"{done} of {len(s.steps)} reassignments had completed"))
    if action is not None:
        p.d.remove_annotation = True
        p.event("AnnotationIgnored", f"{ANNOTATION}={action} ignored while rebalancing; "
                f"annotate {ANNOTATION}=reject to stop, then refresh", warning=True)
    if s.plan_digest != digest:
        p.cond(PROGRESSING, "True", "Rebalancing", f"the spec changed while proposal "
               f"{s.proposal_id} runs: a new proposal is made when it ends")
    if obs.current is None:
        running.state = "Failed"
        _uncordon(p)  # its moves rolled back, as a cancel's do
        return _failed(p, "ReassignmentDeleted", (
            f"PartitionReassignment {running.name} was deleted while it ran (its moves in "
            f"flight were rolled back); annotate {ANNOTATION}=refresh for a new proposal"),
            ready_reason="Failed")
    phase, progress, message, stalled = obs.current
    _stall(p, running.name, "" if phase == "Completed" or phase in PREAS_FAILED else stalled)
    if phase == "Completed":
        running.state = "Completed"
        s.current_progress = "100%"
        if any(x.state == "Pending" for x in s.steps):
            return _create_next(p)
        return _finish(p, spec, _summary_done(s))
    if phase in PREAS_FAILED:
        running.state = "Cancelled" if phase == "Cancelled" else "Failed"
        if phase == "Cancelled":
            _uncordon(p)
        done = sum(1 for x in s.steps if x.state == "Completed")
        return _failed(p, "ReassignmentFailed", (
            f"PartitionReassignment {running.name} ended {phase}"
            f"{': ' + message if message else ''}; {done} of {len(s.steps)} had completed, the "
            f"rest were not created; see `kubectl describe preas {running.name}`, then "
            f"annotate {ANNOTATION}=refresh for a new proposal"), ready_reason="Failed")
    s.current, s.current_progress = running.name, progress or "0%"
    done = sum(1 for x in s.steps if x.state == "Completed")
    s.progress = f"{done}/{len(s.steps)}"
    return p.d


def _stall(p: _Pass, step: str, stalled: str) -> None:
    """The running step's Stalled condition, said on the rebalance too (with a warning Event
    when it starts, one when it clears), so an alert or Argo CD on the KafkaRebalance sees a
    stuck execution without looking for its steps."""
    was = p.st.condition(STALLED)
    if stalled:
        message = f"PartitionReassignment {step}: {stalled}"
        p.cond(STALLED, "True", "StepStalled", message)
        if was is None or was.status != "True":
            p.event("Stalled", message, warning=True)
    elif was is not None and was.status == "True":
        p.cond(STALLED, "False", "ProgressResumed", f"PartitionReassignment {step} copies "
               "again or has ended")
        p.event("ProgressResumed", f"PartitionReassignment {step}: the stalled moves copy "
                "again or have ended")


def _uncordon(p: _Pass) -> None:
    undo = rb.undo(p.st)
    if undo is not None:
        p.d.actions.append(undo)


def _summary_done(s: KafkaRebalanceStatus) -> str:
    n = len(s.steps)
    figures = s.proposal
    moved = (f"{figures.replicas_to_move} replicas ({s.data}) moved"
             if figures is not None else "done")
    return f"proposal {s.proposal_id} executed: {n} PartitionReassignment(s) Completed, {moved}"
