"""KafkaCluster: open the embedded cluster in-process, run its clock, report its figures.

A cluster that operations still reference is not torn down under them; `bootstrapServers`
clusters (the kafka backend) get a clear "not yet supported" condition.
"""

from __future__ import annotations

from typing import Any

import kopf

from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.errors import KafkaApiError
from kraftsman.handlers.common import (
    degrade,
    emit,
    generation,
    healthy,
    parse_spec,
    publish,
    resource,
    set_cond,
)
from kraftsman.handlers.runtime import Runtime, spec_digest
from kraftsman.resources import KafkaClusterSpec
from kraftsman.status import PROGRESSING, READY, KafkaClusterStatus, read_status

KIND = "KafkaCluster"


def figures(cluster: EmbeddedCluster, st: KafkaClusterStatus) -> None:
    desc = cluster.describe_cluster()
    parts = cluster.describe_partitions()
    st.backend = "embedded"
    st.brokers = len(desc.brokers)
    st.fenced_brokers = sum(1 for b in desc.brokers if b.fenced)
    st.topics = len({p.tp.topic for p in parts})
    st.partitions = len(parts)
    st.under_replicated_partitions = sum(1 for p in parts if len(p.isr) < len(p.replicas))
    st.offline_partitions = sum(1 for p in parts if p.leader < 0)
    st.quorum_leader_id = desc.controller_id


def register(registry: kopf.OperatorRegistry, rt: Runtime) -> None:
    @kopf.index(**resource(KIND), registry=registry, id="kafkaclusters")
    async def kafkaclusters(namespace: str, name: str, spec: Any, **_: Any) -> Any:
        """(namespace, name) -> backend, for operations resolving spec.clusterRef."""
        return {(namespace, name): "embedded" if spec.get("embedded") else "kafka"}

    @kopf.timer(**resource(KIND), interval=rt.tick, registry=registry, id="reconcile")
    async def reconcile(spec: Any, status: Any, meta: Any, body: Any, patch: Any, uid: str,
                        name: str, namespace: str, **_: Any) -> None:
        gen = generation(meta)
        st = read_status(KafkaClusterStatus, status)
        model, problems = parse_spec(KIND, spec)
        if model is None:
            st.phase = "Invalid"
            set_cond(st, READY, "False", "InvalidSpec", "; ".join(problems), gen)
            degrade(st, "InvalidSpec", "; ".join(problems), gen)
            publish(patch, status, st, gen)
            return
        assert isinstance(model, KafkaClusterSpec)
        if model.embedded is None:
            st.backend = "kafka"
            st.phase = "NotSupported"
            msg = ("spec.bootstrapServers: the kafka backend (a real cluster) is not yet "
                   "supported by this operator version; use spec.embedded for now")
            set_cond(st, READY, "False", "BackendNotSupported", msg, gen)
            set_cond(st, PROGRESSING, "False", "BackendNotSupported", msg, gen)
            degrade(st, "BackendNotSupported", msg, gen)
            if publish(patch, status, st, gen):
                emit(body, "BackendNotSupported", msg, warning=True)
            return
        key = (namespace, name)
        digest = spec_digest(dict(spec))
        first = key not in rt.clusters
        try:
            opened = rt.clusters.get(key)
            if opened is None or opened.spec_digest != digest or opened.uid != uid:
                opened = rt.open_cluster(key, uid, model.embedded, digest)
            await rt.run(opened, lambda c: rt.advance(opened))
            await rt.run(opened, lambda c: figures(c, st))
        except ValueError as e:  # the spec cannot be applied to the cluster as it is
            st.phase = "Invalid"
            set_cond(st, READY, "False", "InvalidSpec", f"spec.embedded: {e}", gen)
            degrade(st, "InvalidSpec", f"spec.embedded: {e}; fix the spec", gen)
            publish(patch, status, st, gen)
            return
        except KafkaApiError as e:
            st.phase = "Unavailable"
            set_cond(st, READY, "False", "ControllerUnavailable", str(e), gen)
            publish(patch, status, st, gen)
            return
        st.phase = "Ready"
        message = (f"{st.brokers} brokers, {st.topics} topics, {st.partitions} partitions, "
                   f"{st.under_replicated_partitions} under-replicated")
        set_cond(st, READY, "True", "ClusterReady", message, gen)
        set_cond(st, PROGRESSING, "False", "Idle", "", gen)
        healthy(st, gen)
        if publish(patch, status, st, gen) and first:
            emit(body, "ClusterReady", f"embedded cluster is running: {message}")

    @kopf.on.delete(**resource(KIND), registry=registry, id="teardown")
    async def teardown(name: str, namespace: str, uid: str, patch: Any, status: Any, meta: Any,
                       body: Any, preas_users: Any, le_users: Any, kq_users: Any,
                       **_: Any) -> None:
        """Refuse while operations reference it (a condition says which); then tear down."""
        key = (namespace, name)
        active = [who for index in (preas_users, le_users, kq_users)
                  for who in index.get(key, [])]
        if active:
            st = read_status(KafkaClusterStatus, status)
            st.referenced_by = sorted(active)[:100]
            gen = generation(meta)
            msg = (f"still used by {', '.join(sorted(active)[:5])}"
                   f"{' and more' if len(active) > 5 else ''}; delete or finish those first")
            set_cond(st, READY, "False", "InUse", msg, gen)
            degrade(st, "DeletionBlocked", msg, gen)
            publish(patch, status, st, gen)
            raise kopf.TemporaryError(msg, delay=max(rt.tick, 1.0))
        rt.close_cluster((namespace, name), remove_state=True, uid=uid)
        emit(body, "ClusterDeleted", "embedded cluster stopped and its state removed")
