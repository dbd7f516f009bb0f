"""KafkaRebalance: gather what a pass needs, let ``rebalance_flow.decide`` choose, act.

Reads the planner Job and the proposal's ConfigMaps (REBALANCE-CONTRACT.md), computes the
cluster's assignment fingerprint when an approval needs the staleness check, creates the
Job and the PartitionReassignments, cancels the running one on a reject, and removes the
``kraftsman.io/rebalance`` annotation once acted on. When an API call fails, the status keeps
its phase and says why (Degraded), and the next pass tries again.

Deleting a KafkaRebalance deletes the PartitionReassignment it is running (whose own finalizer
rolls its moves in flight back; completed ones stay moved) and its planner Jobs; the rest
(completed reassignments, proposal ConfigMaps) is owned by it and goes with Kubernetes'
garbage collection.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import kopf
import yaml
from pydantic import ValidationError

from controller_core.errors import KafkaApiError
from controller_core.orchestration import brokers_out
from controller_core.planning.fingerprint import admin_fingerprint
from kraftsman import rebalance_brokers as rb
from kraftsman.handlers import kube
from kraftsman.handlers.common import (
    PLURALS,
    degrade,
    emit,
    finalized,
    generation,
    parse_spec,
    publish,
    resource,
    set_cond,
)
from kraftsman.handlers.runtime import Runtime
from kraftsman.planner_job_spec import PlannerUnavailable, job_failure, job_state, planner_job
from kraftsman.proposal import LABEL_PROPOSAL, LABEL_REBALANCE, owner_reference
from kraftsman.rebalance_flow import (
    ANNOTATION,
    APPROVED,
    LABEL_NAMESPACE,
    WAITING_PHASES,
    CancelReassignment,
    CreateJob,
    CreateReassignment,
    DeleteProposal,
    Observed,
    Proposal,
    StepSeen,
    apply_notes,
    decide,
    index_name,
    job_name,
    parse_index,
    steps_of,
)
from kraftsman.resources import API_VERSION, KafkaRebalanceSpec, PartitionReassignmentSpec
from kraftsman.status import (
    READY,
    STALLED,
    KafkaRebalanceStatus,
    RebalanceStep,
    now_rfc3339,
    read_status,
)

KIND = "KafkaRebalance"
PREAS = "partitionreassignments"


def active(spec: Any, status: Any, meta: Any, **_: Any) -> bool:
    """A kopf ``when=`` filter: the timer idles while the rebalance waits for the user (a
    proposal to approve, or a finished one), and wakes on a spec change or the annotation."""
    st = status or {}
    if (meta.get("annotations") or {}).get(ANNOTATION):
        return True
    if st.get("observedGeneration") != generation(meta):
        return True
    phase = st.get("phase")
    if phase == "Ready" and (spec or {}).get("unregister") and any(
            (b or {}).get("state") in rb.PENDING_UNREGISTER for b in st.get("brokers") or []):
        return True  # waits for the removed brokers' processes to stop, then unregisters
    if phase in WAITING_PHASES:
        return False
    return not (phase == "ProposalReady" and (spec or {}).get("approval", "Pending") == "Pending")


def register(registry: kopf.OperatorRegistry, rt: Runtime) -> None:
    @kopf.timer(**resource(KIND), interval=rt.tick, registry=registry, id="reconcile",
                when=active)
    async def reconcile(spec: Any, status: Any, meta: Any, body: Any, patch: Any, uid: str,
                        name: str, namespace: str, kafkaclusters: Any, logger: Any,
                        **_: Any) -> None:
        if not finalized(meta):
            return
        gen = generation(meta)
        st = read_status(KafkaRebalanceStatus, status)
        model, problems = parse_spec(KIND, spec)
        ref = model.cluster_ref.name if isinstance(model, KafkaRebalanceSpec) else None
        obs = Observed(
            name=name, namespace=namespace, generation=gen,
            spec=model if isinstance(model, KafkaRebalanceSpec) else None, problems=problems,
            annotation=(meta.get("annotations") or {}).get(ANNOTATION),
            cluster_known=ref is not None and (namespace, ref) in kafkaclusters,
            planner_namespace=rt.planner.job_namespace(namespace))
        io = _Io(rt, name, namespace, uid, logger)
        try:
            if st.phase == "PendingProposal" and obs.spec is not None and obs.cluster_known:
                obs = await io.proposal(obs, st)
            if st.phase == "Rebalancing":
                obs = dataclasses.replace(obs, current=await io.current(st))
            now = now_rfc3339()
            decision = decide(st, obs, now)
            if decision.need_fingerprint:
                assert ref is not None
                fingerprint, why = await io.fingerprint(ref)
                if fingerprint is None:
                    st.with_condition(APPROVED, "False", "WaitingForCluster", why,
                                      generation=gen, now=now)
                    publish(patch, status, st, gen)
                    return
                decision = decide(st, dataclasses.replace(obs, fingerprint=fingerprint), now)
            if decision.need_drain_check or decision.need_listing:
                assert ref is not None
                obs = await io.brokers(ref, obs, decision.need_drain_check)
                decision = decide(st, obs, now)
            embedded = ref is not None and "embedded" in list(
                kafkaclusters.get((namespace, ref), []))
            for action in decision.actions:
                notes = await io.perform(action, obs.spec, embedded, ref, decision.status)
                decision.events += apply_notes(decision.status, notes, gen, now)
            if decision.remove_annotation:
                await io.status_first(status, decision.status, gen)
        except (kube.KubeError, PlannerUnavailable, ProposalError, ClusterUnavailable) as e:
            reason = {PlannerUnavailable: "PlannerUnavailable",
                      ProposalError: "ProposalInvalid",
                      ClusterUnavailable: "ClusterUnavailable"}.get(type(e), "ApiError")
            degrade(st, reason, str(e), gen)
            if isinstance(e, PlannerUnavailable) and st.phase is None:
                # No proposal could start: say so in the phase `kubectl get` shows; the next
                # pass (a fixed operator) starts proposal 1 from here.
                st.phase = "Unavailable"
                set_cond(st, READY, "False", "PlannerUnavailable", str(e), gen)
            publish(patch, status, st, gen)
            return
        for event in decision.events:
            emit(body, event.reason, event.message, warning=event.warning)
        if decision.remove_annotation:
            patch.metadata.annotations[ANNOTATION] = None
        publish(patch, status, decision.status, gen)

    @kopf.on.delete(**resource(KIND), registry=registry, id="cleanup")
    async def cleanup(status: Any, name: str, namespace: str, uid: str, body: Any, logger: Any,
                      **_: Any) -> None:
        """The running reassignment goes (its finalizer rolls its moves in flight back), and
        the planner Jobs (which may live in the operator's namespace, out of reach of owner
        references)."""
        st = read_status(KafkaRebalanceStatus, status)
        io = _Io(rt, name, namespace, uid, logger)
        try:
            for step in st.steps:
                if step.state == "Created":
                    await io.delete_reassignment(step.name)
            await io.delete_jobs()
        except kube.KubeError as e:
            raise kopf.TemporaryError(str(e), delay=max(rt.tick, 1.0)) from None
        undo = rb.undo(st)
        if undo is not None:  # deleted while draining: the removal is stopped
            ref = st.cluster
            try:
                notes = [] if ref is None else await io.perform(undo, None, False, ref, st)
            except ClusterUnavailable as e:
                notes = [rb.Note("UncordonFailed", str(e), warning=True)]
            for n in notes:
                emit(body, n.reason, n.message, warning=n.warning)
        running = [s.name for s in st.steps if s.state == "Created"]
        if running:
            emit(body, "Deleted", f"deleted while rebalancing: PartitionReassignment "
                 f"{', '.join(running)} deleted (its moves in flight roll back)")


class ClusterUnavailable(Exception):
    """The KafkaCluster a broker step needs is not open, or refused the call."""


class ProposalError(Exception):
    """A proposal document cannot become a PartitionReassignment; names the ConfigMap, key and
    field."""


@dataclasses.dataclass
class _Io:
    rt: Runtime
    name: str
    namespace: str
    uid: str
    logger: Any

    @property
    def settings(self) -> kopf.OperatorSettings:
        return self.rt.settings  # type: ignore[no-any-return]

    def _ours(self, obj: dict[str, Any]) -> bool:
        owners = (obj.get("metadata") or {}).get("ownerReferences") or []
        return not owners or any(o.get("uid") == self.uid for o in owners)

    async def _cm(self, cm: str) -> dict[str, Any] | None:
        obj = await kube.get(kube.url("v1", "configmaps", self.namespace, cm),
                             f"ConfigMap {self.namespace}/{cm}", self.settings, self.logger)
        return obj if obj is not None and self._ours(obj) else None

    async def proposal(self, obs: Observed, st: KafkaRebalanceStatus) -> Observed:
        """The planner Job's state and the proposal's ConfigMaps."""
        jns, jname = obs.planner_namespace, job_name(self.name, st.proposal_id)
        job = await kube.get(kube.url("batch/v1", "jobs", jns, jname), f"Job {jns}/{jname}",
                             self.settings, self.logger)
        state, failure = job_state(job), job_failure(job)
        index = index_name(self.name, st.proposal_id)
        cm = await self._cm(index)
        proposal: Proposal | None = None if cm is None else parse_index(
            index, cm.get("data") or {})
        steps: list[RebalanceStep] | str | None = None
        if proposal is not None and proposal.figures is not None:
            parts = []
            for part in proposal.parts:
                part_cm = await self._cm(part)
                if part_cm is None:
                    if state == "running":
                        return dataclasses.replace(obs, job=state)  # still being written
                    steps = (f"ConfigMap {self.namespace}/{part}, part of proposal "
                             f"{st.proposal_id}, is missing; annotate {ANNOTATION}=refresh to "
                             "plan again")
                    break
                parts.append((part, dict(part_cm.get("data") or {})))
            else:
                found = steps_of(self.name, st.proposal_id, parts)
                expected = proposal.figures.resources
                steps = found if expected in (0, len(found)) else (
                    f"ConfigMap {self.namespace}/{index}: summary.json counts {expected} "
                    f"reassignments but its parts hold {len(found)}; annotate "
                    f"{ANNOTATION}=refresh to plan again")
        return dataclasses.replace(obs, job=state, job_failure=failure, proposal=proposal,
                                   steps=steps)

    async def current(self, st: KafkaRebalanceStatus) -> StepSeen | None:
        running = next((s for s in st.steps if s.state == "Created"), None)
        if running is None:
            return StepSeen("", "", "")
        obj = await kube.get(kube.url(API_VERSION, PREAS, self.namespace, running.name),
                             f"PartitionReassignment {self.namespace}/{running.name}",
                             self.settings, self.logger)
        if obj is None:
            return None
        pst = obj.get("status") or {}
        message = next((c.get("message") or "" for c in pst.get("conditions") or []
                        if c.get("type") == "Degraded" and c.get("status") == "True"), "")
        if not message:
            message = next((c.get("message") or "" for c in pst.get("conditions") or []
                            if c.get("type") == "Succeeded"), "")
        stalled = next((c.get("message") or "moves in flight copy nothing"
                        for c in pst.get("conditions") or []
                        if c.get("type") == STALLED and c.get("status") == "True"), "")
        return StepSeen(str(pst.get("phase") or ""), str(pst.get("progress") or ""), message,
                        stalled)

    async def fingerprint(self, ref: str) -> tuple[str | None, str]:
        opened = self.rt.clusters.get((self.namespace, ref))
        if opened is None:
            return None, (f"approved; waiting for KafkaCluster {ref} to be Ready to check "
                          "that the proposal is not stale")
        try:
            return await self.rt.run(opened, admin_fingerprint), ""
        except KafkaApiError as e:
            return None, f"approved; cannot read the assignment of KafkaCluster {ref}: {e}"

    async def admin(self, ref: str, fn: Any, what: str) -> Any:
        """``fn(cluster)`` on the KafkaCluster ``ref``, in the runtime's worker."""
        opened = self.rt.clusters.get((self.namespace, ref))
        if opened is None:
            raise ClusterUnavailable(f"{what}: KafkaCluster {ref} is not Ready; the next pass "
                                     "tries again")
        try:
            return await self.rt.run(opened, fn)
        except KafkaApiError as e:
            raise ClusterUnavailable(f"{what}: KafkaCluster {ref}: {e}") from None

    async def brokers(self, ref: str, obs: Observed, check: tuple[int, ...]) -> Observed:
        """What the broker steps of ``decide`` asked for: each broker's holdings, and the
        brokers describe cluster lists (fenced or not)."""
        if check:
            checks = await self.admin(ref, lambda a: brokers_out.check_drained(a, check),
                                      f"checking brokers {list(check)}")
            return dataclasses.replace(obs, drained=[
                rb.Drain(c.broker, c.drained, c.message) for c in checks])
        listed = await self.admin(ref, lambda a: {b.id: b.fenced
                                                  for b in a.describe_cluster().brokers},
                                  "describing the cluster")
        return dataclasses.replace(obs, listed=listed)

    async def perform(self, action: Any, spec: KafkaRebalanceSpec | None, embedded: bool,
                      ref: str | None = None, st: KafkaRebalanceStatus | None = None
                      ) -> list[rb.Note]:
        """Do one action; a broker action's outcome is written into ``st`` and returned as
        notes (Events, conditions)."""
        if isinstance(action, rb.Cordon | rb.Uncordon | rb.Unregister):
            assert ref is not None and st is not None
            return await self._broker_action(action, ref, st)
        assert spec is not None
        if isinstance(action, CreateJob):
            body = planner_job(self.rt.planner, name=self.name, namespace=self.namespace,
                               uid=self.uid, proposal_id=action.proposal_id, embedded=embedded,
                               spark_master=spec.spark_master)
            ns = body["metadata"]["namespace"]
            await kube.create(kube.url("batch/v1", "jobs", ns), body,
                              f"Job {ns}/{body['metadata']['name']}", self.settings,
                              self.logger)
        elif isinstance(action, DeleteProposal):
            await self.delete_jobs(action.proposal_id)
            labels = {LABEL_REBALANCE: self.name, LABEL_PROPOSAL: str(action.proposal_id)}
            path = kube.url("v1", "configmaps", self.namespace)
            for cm in await kube.list_names(path, labels, f"ConfigMaps in {self.namespace}",
                                            self.settings, self.logger):
                await kube.delete(f"{path}/{cm}", f"ConfigMap {self.namespace}/{cm}",
                                  self.settings, self.logger)
        elif isinstance(action, CreateReassignment):
            await self.create_reassignment(action.step, action.proposal_id, spec)
        elif isinstance(action, CancelReassignment):
            await kube.patch(kube.url(API_VERSION, PREAS, self.namespace, action.name),
                             {"spec": {"cancel": True}},
                             f"PartitionReassignment {self.namespace}/{action.name}",
                             self.settings, self.logger)
        return []

    async def _broker_action(self, action: rb.Cordon | rb.Uncordon | rb.Unregister, ref: str,
                             st: KafkaRebalanceStatus) -> list[rb.Note]:
        """A broker step on the cluster (brokers_out's rules); its outcome into ``st``."""
        if isinstance(action, rb.Cordon):
            out = await self.admin(ref, lambda a: brokers_out.cordon(a, action.brokers),
                                   f"cordoning brokers {list(action.brokers)}")
            return rb.cordoned(st, out.cordoned, out.note, out.problems)
        if isinstance(action, rb.Uncordon):
            problems = await self.admin(ref, lambda a: brokers_out.uncordon(a, action.brokers),
                                        f"uncordoning brokers {list(action.brokers)}")
            return rb.uncordoned(st, action.brokers, problems)
        r = await self.admin(ref, lambda a: brokers_out.unregister(a, action.broker),
                             f"unregistering broker {action.broker}")
        return rb.unregistered(st, action.broker, r.ok, r.message or r.error.name)

    async def status_first(self, old: Any, st: KafkaRebalanceStatus, gen: int) -> None:
        """Write the pass's status before the annotation it consumed goes. kopf patches a
        timer's metadata before its status, so the API server would show the annotation
        gone with the old status (ProposalReady and Pending: idle to ``active``); kopf stops
        the timer on that event and, when the status write is slow, keeps the stopping timer
        instead of starting one on the next event — and the rebalance waits for good
        (tests/operator/test_timer_continuity.py)."""
        scratch = kopf.Patch()
        if publish(scratch, old, st.model_copy(deep=True), gen, early=True):
            await kube.patch(kube.url(API_VERSION, PLURALS[KIND], self.namespace, self.name)
                             + "/status", {"status": dict(scratch.status)},
                             f"{KIND} {self.namespace}/{self.name} status", self.settings,
                             self.logger)

    async def create_reassignment(self, step: RebalanceStep, proposal_id: int,
                                  spec: KafkaRebalanceSpec) -> None:
        cm = await self._cm(step.config_map)
        where = f"ConfigMap {self.namespace}/{step.config_map} key {step.key}"
        text = None if cm is None else (cm.get("data") or {}).get(step.key)
        if text is None:
            raise ProposalError(f"{where}: missing; annotate {ANNOTATION}=refresh (or reject) "
                                "for a new proposal")
        body = reassignment_body(text, where, step.name, self.namespace, self.name, self.uid,
                                 proposal_id, spec)
        path = kube.url(API_VERSION, PREAS, self.namespace)
        what = f"PartitionReassignment {self.namespace}/{step.name}"
        if not await kube.create(path, body, what, self.settings, self.logger):
            existing = await kube.get(f"{path}/{step.name}", what, self.settings, self.logger)
            if existing is not None and not any(
                    o.get("uid") == self.uid
                    for o in existing["metadata"].get("ownerReferences") or []):
                raise kube.KubeError(f"{what} exists and is not part of this KafkaRebalance; "
                                     "delete it, or rename this KafkaRebalance")

    async def delete_reassignment(self, name: str) -> None:
        await kube.delete(kube.url(API_VERSION, PREAS, self.namespace, name),
                          f"PartitionReassignment {self.namespace}/{name}", self.settings,
                          self.logger)

    async def delete_jobs(self, proposal_id: int | None = None) -> None:
        jns = self.rt.planner.job_namespace(self.namespace)
        path = kube.url("batch/v1", "jobs", jns)
        labels = {LABEL_REBALANCE: self.name, LABEL_NAMESPACE: self.namespace}
        if proposal_id is not None:
            labels[LABEL_PROPOSAL] = str(proposal_id)
        for job in await kube.list_names(path, labels, f"Jobs in {jns}", self.settings,
                                         self.logger):
            await kube.delete(f"{path}/{job}", f"Job {jns}/{job}", self.settings, self.logger)


def reassignment_body(text: str, where: str, name: str, namespace: str, rebalance: str,
                      uid: str, proposal_id: int, spec: KafkaRebalanceSpec) -> dict[str, Any]:
    """The PartitionReassignment to create from one proposal document: its spec (checked
    with the same model as the kind's), on this rebalance's cluster, owned by it."""
    try:
        doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        raise ProposalError(f"{where}: not YAML ({type(e).__name__}); annotate "
                            f"{ANNOTATION}=refresh for a new proposal") from None
    if not isinstance(doc, dict) or doc.get("kind") != "PartitionReassignment":
        raise ProposalError(f"{where}: not a PartitionReassignment document; annotate "
                            f"{ANNOTATION}=refresh for a new proposal")
    raw = dict(doc.get("spec") or {})
    raw["clusterRef"] = {"name": spec.cluster_ref.name}
    try:
        PartitionReassignmentSpec.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ProposalError(f"{where}: spec.{loc}: {first['msg']}; annotate "
                            f"{ANNOTATION}=refresh for a new proposal") from None
    meta = doc.get("metadata") or {}
    # Label and annotation values are strings to the API server (a number is a 400): a
    # planner before 0.1's quoting wrote an all-digit plan id unquoted, which YAML reads as one.
    labels = {**{str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
              LABEL_REBALANCE: rebalance, LABEL_PROPOSAL: str(proposal_id)}
    # Argo CD's sync wave is for plans kept in Git; here the operator orders the steps.
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()
                   if not str(k).startswith("argocd.argoproj.io/")}
    return {"apiVersion": API_VERSION, "kind": "PartitionReassignment",
            "metadata": {"name": name, "namespace": namespace, "labels": labels,
                         "annotations": annotations,
                         "ownerReferences": [owner_reference(rebalance, uid)]},
            "spec": raw}
