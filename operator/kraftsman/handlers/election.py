"""LeaderElection: run the core's election runner once per generation, or continuously.

One-shot: the result of a run and the digest of the spec it ran for go out in one status
write (``operationState``, see :mod:`~kraftsman.handlers.opstate`), so a restarted operator
— with or without its state volume — does not elect again; a new `spec.runId` (any spec
change) runs it again. Continuous: every `intervalSeconds`, elect preferred leaders when more than
`imbalanceThresholdPercent` of the partitions are led by another replica.
"""

from __future__ import annotations

import copy
from typing import Any

import kopf

from controller_core import errors
from controller_core.admin import ClusterAdmin
from controller_core.errors import KafkaApiError
from controller_core.orchestration.election import (
    ElectionReport,
    leader_imbalance,
)
from kraftsman.handlers.common import (
    degrade,
    finalized,
    generation,
    healthy,
    parse_spec,
    publish,
    resource,
    set_cond,
)
from kraftsman.handlers.logfilter import Waiting
from kraftsman.handlers.opstate import Outbox, bump, saved_state
from kraftsman.handlers.runtime import Runtime, spec_digest
from kraftsman.reconcile import election_of
from kraftsman.resources import LeaderElectionSpec
from kraftsman.status import (
    PROGRESSING,
    SUCCEEDED,
    ElectionResult,
    ElectionRun,
    LeaderElectionStatus,
    get_condition,
    now_rfc3339,
    read_status,
)

KIND = "LeaderElection"


def report_doc(report: ElectionReport, spec: LeaderElectionSpec,
               cluster: ClusterAdmin) -> dict[str, Any]:
    """The saved (and published) form of a run: per-partition rows and the unknown names."""
    leaders = {d.tp: d.leader for d in cluster.describe_partitions(
        partitions=list(report.results))} if len(report.results) <= 100_000 else {}
    rows = []
    for tp, r in sorted(report.results.items()):  # by partition (the keys are distinct)
        outcome = ("Elected" if r.ok else "NotNeeded" if r.error == errors.ELECTION_NOT_NEEDED
                   else "Failed")
        rows.append([tp.topic, tp.partition, outcome, leaders.get(tp),
                     None if r.ok else r.error.name, r.message or None])
    return {"rows": rows, "unknownTopics": list(report.unknown_topics)}


def fill(st: LeaderElectionStatus, doc: dict[str, Any], spec: LeaderElectionSpec) -> list[str]:
    """Status from a saved run; returns the problems naming a spec field."""
    st.set_results(ElectionResult(topic=t, partition=p, result=o, leader=leader, error=e,
                                  message=m) for t, p, o, leader, e, m in doc["rows"])
    problems = []
    if doc["unknownTopics"]:
        problems.append(f"spec.topics: {doc['unknownTopics']} do not exist in cluster "
                        f"{spec.cluster_ref.name}; fix the names or create the topics")
        st.failed += len(doc["unknownTopics"])
        st.counts.failed += len(doc["unknownTopics"])
    if spec.partitions is not None:
        index = {(p.topic, p.partition): i for i, p in enumerate(spec.partitions)}
        missing = [f"spec.partitions[{index[(t, p)]}] ({t}-{p})" for t, p, o, _, e, _ in
                   doc["rows"] if e == errors.UNKNOWN_TOPIC_OR_PARTITION.name]
        if missing:
            problems.append(f"{', '.join(missing[:5])}: no such partition in cluster "
                            f"{spec.cluster_ref.name}; fix the plan")
    return problems


# How often a one-shot election naming an unknown KafkaCluster looks for it again: soon at
# first (applied in the same sync as its cluster, or seen by a standby whose index is still
# filling), then less often, since each look is a write (kopf's progress annotation) and its
# watch event: 5, 10, 20, 40, then every 60 s.
UNKNOWN_CLUSTER_RETRY_SECONDS = 5.0
UNKNOWN_CLUSTER_RETRY_MAX_SECONDS = 60.0


def unknown_cluster_delay(retry: int, tick: float) -> float:
    """The wait before look ``retry + 1`` (kopf's count of the handler's retries so far)."""
    grown = UNKNOWN_CLUSTER_RETRY_SECONDS * 2 ** min(max(retry, 0), 8)
    return max(tick, min(UNKNOWN_CLUSTER_RETRY_MAX_SECONDS, grown))


def register(registry: kopf.OperatorRegistry, rt: Runtime) -> None:
    live: dict[str, dict[str, Any]] = {}  # uid -> the newest operation state of this process

    @kopf.index(**resource(KIND), registry=registry, id="le_users")
    async def le_users(namespace: str, name: str, spec: Any, status: Any, **_: Any) -> Any:
        ref = (spec.get("clusterRef") or {}).get("name")
        phase = (status or {}).get("phase")
        # An invalid election (continuous or not) never acts on the cluster: it does not hold
        # a KafkaCluster's deletion; a finished one-shot election neither.
        if not ref or phase == "Invalid" or parse_spec(KIND, spec)[0] is None or (
                spec.get("mode") != "Continuous" and phase in ("Completed", "Failed")):
            return {}  # not None: kopf keeps an object's old entries when given None
        return {(namespace, ref): f"{KIND}/{name}"}

    def current_doc(uid: str, status: Any) -> dict[str, Any]:
        stored = saved_state(status)
        mine = live.get(uid)
        if mine is not None and (stored is None or
                                 int(stored.get("rev", 0)) <= int(mine.get("rev", 0))):
            return mine
        if stored is None:  # a state file of an older version (state volume)
            legacy = rt.load_op(uid) or {}
            stored = {k: legacy[k] for k in ("digest", "lastRunMs") if k in legacy}
        return stored

    def continuous_mode(spec: Any, **_: Any) -> bool:
        return bool((spec or {}).get("mode") == "Continuous")

    def one_shot_mode(spec: Any, **_: Any) -> bool:
        return not continuous_mode(spec)

    # Continuous elections look at the cluster every pass; a one-shot election acts on events
    # only (created, spec changed, operator started) and retries while it must wait — no timer
    # per object polling every tick.
    @kopf.timer(**resource(KIND), interval=rt.tick, registry=registry, id="reconcile",
                when=continuous_mode)
    async def reconcile(meta: Any, **kw: Any) -> None:
        if finalized(meta):
            await attempt(meta=meta, **kw)

    @kopf.on.resume(**resource(KIND), registry=registry, id="resume", when=one_shot_mode)
    @kopf.on.create(**resource(KIND), registry=registry, id="run", when=one_shot_mode)
    @kopf.on.update(**resource(KIND), registry=registry, id="rerun", field="spec",
                    when=one_shot_mode)
    async def run(**kw: Any) -> None:
        delay = await attempt(**kw)
        if delay is not None:
            raise Waiting("waiting; trying again", delay=delay)

    async def attempt(spec: Any, status: Any, meta: Any, body: Any, patch: Any, uid: str,
                      namespace: str, kafkaclusters: Any, logger: Any, retry: int = 0,
                      **_: Any) -> float | None:
        """One pass; returns when to try again (None: nothing left to do for this spec)."""
        gen = generation(meta)
        st = read_status(LeaderElectionStatus, status)
        if not st.conditions:
            set_cond(st, SUCCEEDED, "Unknown", "Pending", "not run yet", gen)
            set_cond(st, PROGRESSING, "True", "Pending", "not run yet", gen)
            healthy(st, gen)
        base = current_doc(uid, status)
        doc = copy.deepcopy(base)
        outbox = Outbox(doc)

        async def save() -> None:
            await outbox.post(body, rt.settings, logger)
            st.operation_state = bump(doc, base)
            live[uid] = doc

        model, problems = parse_spec(KIND, spec)
        if model is None:
            st.phase = "Invalid"
            degrade(st, "InvalidSpec", "; ".join(problems), gen)
            set_cond(st, SUCCEEDED, "False", "InvalidSpec", "the spec is invalid", gen)
            await save()
            publish(patch, status, st, gen)
            return None  # permanent for this generation: a spec change runs it again
        assert isinstance(model, LeaderElectionSpec)
        st.cluster, st.election_type = model.cluster_ref.name, model.election_type
        st.run_id = model.run_id
        key = f"{KIND}/{uid}"
        digest = spec_digest(dict(spec))
        if model.mode == "OneShot" and doc.get("digest") == digest:
            # Elected for this spec: the result went out with the digest. Only Events the
            # API server refused are left to post.
            if not doc["outbox"]:
                return None
            await save()
            publish(patch, status, st, gen)
            return retry_outbox(doc)
        ref = model.cluster_ref.name
        if (namespace, ref) not in kafkaclusters:
            st.phase = "Invalid"
            degrade(st, "UnknownCluster", f"spec.clusterRef.name: no KafkaCluster {ref!r} in "
                    f"namespace {namespace}; create it or fix the name", gen)
            await save()
            publish(patch, status, st, gen)
            # Asked again, not given up: the KafkaCluster may come after it (applied in one
            # sync), or this replica's index may still be filling (a standby that just took
            # over acted on a new election before it knew the cluster: CI saw it).
            return unknown_cluster_delay(retry, rt.tick)
        if st.phase == "Invalid":  # the KafkaCluster it waited for is known now
            st.phase = None
            healthy(st, gen)
        opened = rt.clusters.get((namespace, ref))
        if opened is None or not rt.backoff.ready(key, rt.clock()):
            if opened is None:
                set_cond(st, PROGRESSING, "True", "WaitingForCluster",
                         f"KafkaCluster {ref} is not Ready yet", gen)
                await save()
                publish(patch, status, st, gen)
            return max(rt.tick, rt.backoff.not_before.get(key, 0.0) - rt.clock())
        try:
            if model.mode == "Continuous":
                await rt.run(opened, lambda c: continuous(c, doc, outbox, model, st, gen))
            else:
                await rt.run(opened, lambda c: one_shot(c, digest, doc, outbox, model, st, gen))
        except KafkaApiError as e:
            delay = rt.backoff.failed(key, rt.clock())
            set_cond(st, PROGRESSING, "True", "Retrying", f"{e}; retrying in {delay:g}s", gen)
            publish(patch, status, st, gen)
            return delay
        rt.backoff.succeeded(key)
        await save()
        publish(patch, status, st, gen)
        return retry_outbox(doc)

    def retry_outbox(doc: dict[str, Any]) -> float | None:
        return max(rt.tick, 1.0) if doc["outbox"] else None

    def one_shot(cluster: ClusterAdmin, digest: str, doc: dict[str, Any], outbox: Outbox,
                 spec: LeaderElectionSpec, st: LeaderElectionStatus, gen: int) -> None:
        """Elect; the result and the spec's digest go out in the same status write, so a
        restarted operator sees that this spec was elected and does not elect again."""
        result = report_doc(election_of(cluster, spec), spec, cluster)
        doc["digest"] = digest
        problems = fill(st, result, spec)
        st.completed_at = now_rfc3339()
        msg = (f"{st.counts.elected} elected, {st.counts.not_needed} not needed, "
               f"{st.failed} failed")
        set_cond(st, PROGRESSING, "False", "Completed", msg, gen)
        if problems:
            st.phase = "Failed"
            reason = "UnknownTopic" if "spec.topics" in problems[0] else "UnknownPartition"
            degrade(st, reason, "; ".join(problems), gen)
            set_cond(st, SUCCEEDED, "False", reason, msg, gen)
            outbox.add("ElectionFailed", "; ".join(problems), warning=True)
        elif st.failed:
            st.phase = "Failed"
            set_cond(st, SUCCEEDED, "False", "ElectionFailed", msg, gen)
            healthy(st, gen)
            outbox.add("ElectionFailed", msg, warning=True)
        else:
            st.phase = "Completed"
            set_cond(st, SUCCEEDED, "True", "Completed", msg, gen)
            healthy(st, gen)
            if st.counts.elected:
                outbox.add("LeaderChanged", msg)
            outbox.add("Completed", msg)

    def continuous(cluster: ClusterAdmin, doc: dict[str, Any], outbox: Outbox,
                   spec: LeaderElectionSpec, st: LeaderElectionStatus, gen: int) -> None:
        now_ms = cluster.now_ms()
        last = doc.get("lastRunMs")
        if last is not None and now_ms - int(last) < spec.interval_seconds * 1000 \
                and st.phase is not None:
            # Between runs. A pass that found the cluster not open (a restarted operator)
            # said WaitingForCluster: it is open now, so the resource is watching again.
            watching = get_condition(st.conditions, SUCCEEDED)
            set_cond(st, PROGRESSING, "False", "Watching",
                     watching.message if watching is not None else "", gen)
            return
        topics = spec.topics if spec.topics is not None else (
            sorted({p.topic for p in spec.partitions}) if spec.partitions is not None else None)
        imbalance = leader_imbalance(cluster, topics)
        st.imbalance_percent = round(imbalance.percent, 2)
        elected = failed = 0
        if imbalance.percent > spec.imbalance_threshold_percent:
            report = election_of(cluster, spec)
            result = report_doc(report, spec, cluster)
            fill(st, result, spec)
            elected, failed = report.elected, report.failed
            if elected:
                outbox.add("LeaderChanged", f"imbalance {imbalance.percent:.1f}% > "
                           f"{spec.imbalance_threshold_percent:g}%: {elected} preferred "
                           "leaders elected")
        st.record_run(ElectionRun(time=now_rfc3339(), imbalance_percent=st.imbalance_percent,
                                  elected=elected, failed=failed))
        doc["lastRunMs"] = now_ms
        st.phase = "Watching"
        msg = (f"leader imbalance {imbalance.percent:.1f}% (threshold "
               f"{spec.imbalance_threshold_percent:g}%); {st.runs} runs")
        set_cond(st, SUCCEEDED, "True" if not failed else "False",
                 "Balanced" if not failed else "ElectionFailed", msg, gen)
        set_cond(st, PROGRESSING, "False", "Watching", msg, gen)
        healthy(st, gen)
