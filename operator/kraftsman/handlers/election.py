"""LeaderElection: run the core's election runner once per generation, or continuously.

One-shot: the result of a run is saved on the state volume before the status is written, so
a restart publishes it instead of electing again; a new `spec.runId` (any spec change) runs
it again. Continuous: every `intervalSeconds`, elect preferred leaders when more than
`imbalanceThresholdPercent` of the partitions are led by another replica.
"""

from __future__ import annotations

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
from kraftsman.reconcile import election_of
from kraftsman.resources import LeaderElectionSpec
from kraftsman.status import (
    PROGRESSING,
    SUCCEEDED,
    ElectionResult,
    ElectionRun,
    LeaderElectionStatus,
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
    for tp, r in sorted(report.results.items(), key=lambda item: item[0]):
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


def register(registry: kopf.OperatorRegistry, rt: Runtime) -> None:
    @kopf.index(**resource(KIND), registry=registry, id="le_users")
    async def le_users(namespace: str, name: str, spec: Any, status: Any, **_: Any) -> Any:
        ref = (spec.get("clusterRef") or {}).get("name")
        phase = (status or {}).get("phase")
        if not ref or (spec.get("mode") != "Continuous" and phase in ("Completed", "Failed",
                                                                      "Invalid")):
            return None
        return {(namespace, ref): f"{KIND}/{name}"}

    @kopf.timer(**resource(KIND), interval=rt.tick, registry=registry, id="reconcile",
                when=settled("Completed", "Failed", continuous_ok=True))
    async def reconcile(spec: Any, status: Any, meta: Any, body: Any, patch: Any, uid: str,
                        namespace: str, kafkaclusters: Any, **_: Any) -> None:
        gen = generation(meta)
        st = read_status(LeaderElectionStatus, status)
        if not st.conditions:
            set_cond(st, SUCCEEDED, "Unknown", "Pending", "not run yet", gen)
            set_cond(st, PROGRESSING, "True", "Pending", "not run yet", gen)
            healthy(st, gen)
        model, problems = parse_spec(KIND, spec)
        if model is None:
            st.phase = "Invalid"
            degrade(st, "InvalidSpec", "; ".join(problems), gen)
            set_cond(st, SUCCEEDED, "False", "InvalidSpec", "the spec is invalid", gen)
            publish(patch, status, st, gen)
            return
        assert isinstance(model, LeaderElectionSpec)
        st.cluster, st.election_type = model.cluster_ref.name, model.election_type
        st.run_id = model.run_id
        key = f"{KIND}/{uid}"
        digest = spec_digest(dict(spec))
        saved = rt.load_op(uid)
        if model.mode == "OneShot" and saved is not None and saved.get("digest") == digest \
                and st.phase in ("Completed", "Failed") and st.observed_generation == gen:
            return  # done for this spec
        ref = model.cluster_ref.name
        if (namespace, ref) not in kafkaclusters:
            st.phase = "Invalid"
            degrade(st, "UnknownCluster", f"spec.clusterRef.name: no KafkaCluster {ref!r} in "
                    f"namespace {namespace}; create it or fix the name", gen)
            publish(patch, status, st, gen)
            return
        opened = rt.clusters.get((namespace, ref))
        if opened is None or not rt.backoff.ready(key, rt.clock()):
            if opened is None:
                set_cond(st, PROGRESSING, "True", "WaitingForCluster",
                         f"KafkaCluster {ref} is not Ready yet", gen)
                publish(patch, status, st, gen)
            return
        try:
            if model.mode == "Continuous":
                events = await rt.run(opened, lambda c: continuous(c, uid, model, st, gen))
            else:
                events = await rt.run(opened, lambda c: one_shot(c, uid, digest, saved, model,
                                                                 st, gen))
        except KafkaApiError as e:
            delay = rt.backoff.failed(key, rt.clock())
            set_cond(st, PROGRESSING, "True", "Retrying", f"{e}; retrying in {delay:g}s", gen)
            publish(patch, status, st, gen)
            return
        rt.backoff.succeeded(key)
        publish(patch, status, st, gen)
        for reason, message, warning in events:
            emit(body, reason, message, warning=warning)

    def one_shot(cluster: ClusterAdmin, uid: str, digest: str, saved: dict[str, Any] | None,
                 spec: LeaderElectionSpec, st: LeaderElectionStatus,
                 gen: int) -> list[tuple[str, str, bool]]:
        events: list[tuple[str, str, bool]] = []
        if saved is not None and saved.get("digest") == digest:
            doc = saved["result"]  # elected before a restart: publish, do not elect again
        else:
            doc = report_doc(election_of(cluster, spec), spec, cluster)
            rt.save_op(uid, {"digest": digest, "result": doc})
        problems = fill(st, doc, spec)
        st.completed_at = now_rfc3339()
        msg = (f"{st.counts.elected} elected, {st.counts.not_needed} not needed, "
               f"{st.failed} failed")
        set_cond(st, PROGRESSING, "False", "Completed", msg, gen)
        if problems:
            st.phase = "Failed"
            reason = "UnknownTopic" if "spec.topics" in problems[0] else "UnknownPartition"
            degrade(st, reason, "; ".join(problems), gen)
            set_cond(st, SUCCEEDED, "False", reason, msg, gen)
            events.append(("ElectionFailed", "; ".join(problems), True))
        elif st.failed:
            st.phase = "Failed"
            set_cond(st, SUCCEEDED, "False", "ElectionFailed", msg, gen)
            healthy(st, gen)
            events.append(("ElectionFailed", msg, True))
        else:
            st.phase = "Completed"
            set_cond(st, SUCCEEDED, "True", "Completed", msg, gen)
            healthy(st, gen)
            if st.counts.elected:
                events.append(("LeaderChanged", msg, False))
            events.append(("Completed", msg, False))
        return events

    def continuous(cluster: ClusterAdmin, uid: str, spec: LeaderElectionSpec,
                   st: LeaderElectionStatus, gen: int) -> list[tuple[str, str, bool]]:
        events: list[tuple[str, str, bool]] = []
        saved = rt.load_op(uid) or {}
        now_ms = cluster.now_ms()
        last = saved.get("lastRunMs")
        if last is not None and now_ms - int(last) < spec.interval_seconds * 1000 \
                and st.phase is not None:
            return events
        topics = spec.topics if spec.topics is not None else (
            sorted({p.topic for p in spec.partitions}) if spec.partitions is not None else None)
        imbalance = leader_imbalance(cluster, topics)
        st.imbalance_percent = round(imbalance.percent, 2)
        elected = failed = 0
        if imbalance.percent > spec.imbalance_threshold_percent:
            report = election_of(cluster, spec)
            doc = report_doc(report, spec, cluster)
            fill(st, doc, spec)
            elected, failed = report.elected, report.failed
            if elected:
                events.append(("LeaderChanged", f"imbalance {imbalance.percent:.1f}% > "
                               f"{spec.imbalance_threshold_percent:g}%: {elected} preferred "
                               "leaders elected", False))
        st.record_run(ElectionRun(time=now_rfc3339(), imbalance_percent=st.imbalance_percent,
                                  elected=elected, failed=failed))
        rt.save_op(uid, {"lastRunMs": now_ms})
        st.phase = "Watching"
        msg = (f"leader imbalance {imbalance.percent:.1f}% (threshold "
               f"{spec.imbalance_threshold_percent:g}%); {st.runs} runs")
        set_cond(st, SUCCEEDED, "True" if not failed else "False",
                 "Balanced" if not failed else "ElectionFailed", msg, gen)
        set_cond(st, PROGRESSING, "False", "Watching", msg, gen)
        healthy(st, gen)
        return events
