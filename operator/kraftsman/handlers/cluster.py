"""KafkaCluster: open the embedded cluster in-process and run its clock, or connect the
``kafka`` backend to ``bootstrapServers`` (TLS/SASL from the ``authSecretRef`` Secret); report
the cluster's figures either way.

A cluster that operations still reference is not torn down under them. A real cluster that
cannot be reached or refuses the credentials is Degraded with a reason that says which; no
Secret value ever reaches a log line, a status or an Event.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from controller_core import errors
from controller_core.admin import ClusterAdmin
from controller_core.backends import SecretError
from controller_core.backends.kafka_admin import NETWORK_EXCEPTION, SASL_AUTHENTICATION_FAILED
from controller_core.errors import ErrorCode, KafkaApiError
from controller_core.units import counted
from kraftsman import auto_rebalance as ar
from kraftsman.handlers import auto_rebalance
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
from kraftsman.handlers.logfilter import Waiting
from kraftsman.handlers.runtime import ClusterBusy, OpenCluster, Runtime, spec_digest
from kraftsman.handlers.secrets import SecretUnavailable, read_secret
from kraftsman.resources import KafkaClusterSpec
from kraftsman.status import PROGRESSING, READY, KafkaClusterStatus, read_status

KIND = "KafkaCluster"
SECRET_RECHECK_SECONDS = 30.0  # a connected cluster re-reads its Secret this often
# Why a real cluster is not usable, by the Kafka error the backend raised.
KAFKA_REASONS: dict[ErrorCode, str] = {
    NETWORK_EXCEPTION: "BootstrapUnreachable",
    SASL_AUTHENTICATION_FAILED: "AuthenticationFailed",
    errors.CLUSTER_AUTHORIZATION_FAILED: "AuthorizationFailed",
}
# Errors after which the connection is dropped and opened afresh (with backoff).
RECONNECT = {SASL_AUTHENTICATION_FAILED, errors.CLUSTER_AUTHORIZATION_FAILED}


def figures(cluster: ClusterAdmin, st: KafkaClusterStatus) -> dict[int, bool]:
    """The status' figures; returns the registered brokers (id -> fenced)."""
    desc = cluster.describe_cluster()
    # counted, not described: each pass of a 100,000-partition cluster held a description
    # of every partition (with its log size) for a moment, ~100 MiB the allocators kept
    counts = cluster.partition_counts()
    st.brokers = len(desc.brokers)
    st.fenced_brokers = sum(1 for b in desc.brokers if b.fenced)
    st.topics = counts.topics
    st.partitions = counts.partitions
    st.under_replicated_partitions = counts.under_replicated  # KIP-352
    st.offline_partitions = counts.offline
    st.quorum_leader_id = desc.controller_id
    st.cluster_id = desc.cluster_id
    return {b.id: b.fenced for b in desc.brokers}


def figures_words(st: KafkaClusterStatus) -> str:
    return (f"{counted(st.brokers or 0, 'broker')}, {counted(st.topics or 0, 'topic')}, "
            f"{counted(st.partitions or 0, 'partition')}")


def announce_new_id(body: Any, status: Any, st: KafkaClusterStatus) -> None:
    """A Warning when the cluster reached is not the one reached before (spec.bootstrapServers
    repointed, an embedded cluster recreated after its state was lost)."""
    was = (status or {}).get("clusterId")
    if was and st.cluster_id and was != st.cluster_id:
        emit(body, "ClusterIdChanged", f"now reaches cluster {st.cluster_id}, not {was} as "
             f"before: operations started on {was} are not carried over to it (each waits "
             "for your decision, phase ClusterChanged)", warning=True)


def kafka_reason(e: KafkaApiError) -> str:
    return KAFKA_REASONS.get(e.error, "ClusterUnavailable")


def register(registry: kopf.OperatorRegistry, rt: Runtime) -> None:
    @kopf.index(**resource(KIND), registry=registry, id="kafkaclusters")
    async def kafkaclusters(namespace: str, name: str, spec: Any, **_: Any) -> Any:
        """(namespace, name) -> backend, for operations resolving spec.clusterRef."""
        return {(namespace, name): "embedded" if spec.get("embedded") else "kafka"}

    @kopf.index(**resource("KafkaRebalance"), registry=registry, id="auto_rebalances")
    async def auto_rebalances(namespace: str, name: str, spec: Any, status: Any, meta: Any,
                              **_: Any) -> Any:
        """(namespace, KafkaCluster uid) -> the add-brokers rebalances it created."""
        return ar.index_entry(namespace, name, meta, spec, status)

    @kopf.timer(**resource(KIND), interval=rt.tick, registry=registry, id="reconcile")
    async def reconcile(spec: Any, status: Any, meta: Any, body: Any, patch: Any, uid: str,
                        name: str, namespace: str, logger: logging.Logger,
                        auto_rebalances: Any, **_: Any) -> None:
        if not finalized(meta):
            return
        gen = generation(meta)
        st = read_status(KafkaClusterStatus, status)
        old = read_status(KafkaClusterStatus, status)
        seen = list(auto_rebalances.get((namespace, uid), []))
        # A bad spec.autoRebalance leaves the cluster usable (it is reported on its own).
        model, problems = parse_spec(KIND, ar.without_policy(spec))
        if model is None:
            st.phase = "Invalid"
            set_cond(st, READY, "False", "InvalidSpec", "; ".join(problems), gen)
            degrade(st, "InvalidSpec", "; ".join(problems), gen)
            publish(patch, status, st, gen)
            return
        assert isinstance(model, KafkaClusterSpec)
        if model.embedded is None:
            await reconcile_kafka(model, spec, status, body, patch, uid, name, namespace, st,
                                  gen, rt.settings, logger, old, seen)
            return
        key = (namespace, name)
        digest = spec_digest(ar.without_policy(spec))
        first = key not in rt.clusters
        try:
            opened = rt.clusters.get(key)
            if opened is None or opened.spec_digest != digest or opened.uid != uid:
                opened = rt.open_cluster(key, uid, model.embedded, digest)
            await rt.run(opened, lambda c: rt.advance(opened))
            registered = await rt.run(opened, lambda c: figures(c, st))
            st.backend = "embedded"
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
        except ClusterBusy as e:
            st.phase = "Unavailable"
            set_cond(st, READY, "False", "StateDirectoryBusy", str(e), gen)
            publish(patch, status, st, gen)
            return
        announce_new_id(body, status, st)
        st.phase = "Ready"
        message = (f"{figures_words(st)}, "
                   f"{st.under_replicated_partitions} under-replicated")
        set_cond(st, READY, "True", "ClusterReady", message, gen)
        set_cond(st, PROGRESSING, "False", "Idle", "", gen)
        healthy(st, gen)
        await auto_rebalance.run(rt, spec, old, st, registered, seen, body, uid, name,
                                 namespace, gen, logger)
        if publish(patch, status, st, gen) and first:
            emit(body, "ClusterReady", f"embedded cluster is running: {message}")

    async def reconcile_kafka(model: KafkaClusterSpec, spec: Any, status: Any, body: Any,
                              patch: Any, uid: str, name: str, namespace: str,
                              st: KafkaClusterStatus, gen: int, settings: kopf.OperatorSettings,
                              logger: logging.Logger, old: KafkaClusterStatus,
                              seen: list[ar.Seen]) -> None:
        """Connect (or keep) the kafka backend; Ready when DescribeCluster answers."""
        key, bkey = (namespace, name), f"{KIND}/{uid}"
        st.backend = "kafka"
        if not rt.backoff.ready(bkey, rt.clock()):
            return
        assert model.bootstrap_servers is not None
        opened = rt.clusters.get(key)
        first = opened is None
        try:
            opened = await connect(model, spec, uid, key, opened, settings, logger)
            registered = await rt.run(opened, lambda c: figures(c, st))
        except (SecretUnavailable, SecretError, KafkaApiError) as e:
            if isinstance(e, KafkaApiError):
                reason, message = kafka_reason(e), str(e)
                if e.error in RECONNECT:
                    rt.close_cluster(key)
            elif isinstance(e, SecretError):
                ref = model.auth_secret_ref.name if model.auth_secret_ref else "?"
                reason, message = "InvalidSecret", (
                    f"spec.authSecretRef.name: Secret {ref!r}: {e}; fix the Secret "
                    "(keys: docs/real-clusters.md)")
            else:
                reason, message = e.reason, str(e)
            delay = rt.backoff.failed(bkey, rt.clock())
            st.phase = "Degraded"
            set_cond(st, READY, "False", reason, message, gen)
            set_cond(st, PROGRESSING, "True", "Retrying", f"retrying in {delay:g}s", gen)
            degrade(st, reason, message, gen)
            was = read_status(KafkaClusterStatus, status).condition("Degraded")
            if publish(patch, status, st, gen) and (was is None or was.reason != reason):
                emit(body, reason, message, warning=True)
            return
        rt.backoff.succeeded(bkey)
        announce_new_id(body, status, st)
        st.phase = "Ready"
        message = (f"{figures_words(st)}, "
                   f"{st.under_replicated_partitions} under-replicated "
                   f"(via {model.bootstrap_servers})")
        set_cond(st, READY, "True", "ClusterReady", message, gen)
        set_cond(st, PROGRESSING, "False", "Idle", "", gen)
        healthy(st, gen)
        await auto_rebalance.run(rt, spec, old, st, registered, seen, body, uid, name,
                                 namespace, gen, logger)
        if publish(patch, status, st, gen) and first:
            emit(body, "ClusterReady", f"connected to {model.bootstrap_servers}: {message}")

    async def connect(model: KafkaClusterSpec, spec: Any, uid: str, key: tuple[str, str],
                      opened: OpenCluster | None, settings: kopf.OperatorSettings,
                      logger: logging.Logger) -> OpenCluster:
        """The open admin, re-connected when the spec or (re-read now and then) the Secret
        changed. The digest covers the Secret's data but is never published."""
        fresh = opened is not None and opened.uid == uid and \
            rt.clock() - opened.opened_at < SECRET_RECHECK_SECONDS
        if fresh and opened is not None and opened.spec_digest.startswith(
                spec_digest(ar.without_policy(spec)) + ":"):
            return opened
        data = None
        if model.auth_secret_ref is not None:
            data = await read_secret(key[0], model.auth_secret_ref.name, settings, logger)
        digest = f"{spec_digest(ar.without_policy(spec))}:{spec_digest(data)}"
        if opened is not None and opened.uid == uid and opened.spec_digest == digest:
            opened.opened_at = rt.clock()  # checked again: unchanged
            return opened
        assert model.bootstrap_servers is not None
        return await asyncio.to_thread(rt.open_kafka, key, uid, model.bootstrap_servers, data,
                                       digest)

    @kopf.on.delete(**resource(KIND), registry=registry, id="teardown")
    async def teardown(name: str, namespace: str, uid: str, patch: Any, status: Any, meta: Any,
                       body: Any, preas_users: Any, le_users: Any, kq_users: Any,
                       logger: logging.Logger, **_: Any) -> None:
        """Refuse while operations reference it (a condition says which); then tear down."""
        key = (namespace, name)
        active = [who for index in (preas_users, le_users, kq_users)
                  for who in index.get(key, [])]
        if active:
            problem = await keep_serving(body, uid, key, logger)
            st = read_status(KafkaClusterStatus, status)
            st.referenced_by = sorted(active)[:100]
            gen = generation(meta)
            msg = (f"still used by {', '.join(sorted(active)[:5])}"
                   f"{' and more' if len(active) > 5 else ''}; delete or finish those first")
            if problem:
                msg += f" (meanwhile the cluster is not usable: {problem})"
            set_cond(st, READY, "False", "InUse", msg, gen)
            degrade(st, "DeletionBlocked", msg, gen)
            publish(patch, status, st, gen)
            raise Waiting(msg, delay=max(rt.tick, 1.0))
        opened = rt.clusters.get(key)
        kafka = (opened is not None and not opened.embedded) or bool(
            (body.get("spec") or {}).get("bootstrapServers"))
        rt.close_cluster(key, remove_state_of=None if kafka else uid)
        emit(body, "ClusterDeleted", "connection to the cluster closed" if kafka
             else "embedded cluster stopped and its state removed")

    async def keep_serving(body: Any, uid: str, key: tuple[str, str],
                           logger: logging.Logger) -> str | None:
        """While its deletion waits for the operations that use it, the cluster stays in
        service: kopf runs no timer for a resource being deleted, so this opens it (after a
        restart nothing else does) and runs an embedded cluster's clock, that they can finish
        or roll back. What makes it unusable is returned; the next retry tries again."""
        spec = body.get("spec") or {}
        model, _problems = parse_spec(KIND, ar.without_policy(spec))
        if not isinstance(model, KafkaClusterSpec):
            return None  # an invalid cluster was never opened: nothing runs on it
        try:
            if model.embedded is None:
                await connect(model, spec, uid, key, rt.clusters.get(key), rt.settings, logger)
                return None
            opened = rt.open_cluster(key, uid, model.embedded,
                                     spec_digest(ar.without_policy(spec)))
            await rt.run(opened, lambda c: rt.advance(opened))
        except (ValueError, KafkaApiError, SecretUnavailable, SecretError, ClusterBusy) as e:
            return str(e)
        return None
