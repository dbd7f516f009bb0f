"""KafkaQuorum: validate the desired voters against the cluster and report the quorum.

The embedded cluster does not yet run its metadata quorum on the Raft implementation
(controller_core.raft), and the ClusterAdmin port has no DescribeQuorum/AddRaftVoter yet, so
voter changes are not executed: the resource says so in a clear condition (Ready=False,
reason QuorumChangesNotSupported) instead of pretending. What can be checked is checked:
every desired voter must be a node of the cluster.
"""

from __future__ import annotations

from typing import Any

import kopf

from controller_core.embedded.cluster import EmbeddedCluster
from kraftsman.handlers.common import (
    degrade,
    generation,
    healthy,
    parse_spec,
    publish,
    resource,
    set_cond,
)
from kraftsman.handlers.runtime import Runtime
from kraftsman.resources import KafkaQuorumSpec
from kraftsman.status import PROGRESSING, READY, KafkaQuorumStatus, read_status

KIND = "KafkaQuorum"


def observe(cluster: EmbeddedCluster, st: KafkaQuorumStatus) -> set[int]:
    """Fill what the cluster knows of its quorum; return the node ids it has."""
    desc = cluster.describe_cluster()
    st.cluster_id = desc.cluster_id
    st.current_voters = list(cluster.spec.voters)
    st.leader_id = desc.controller_id
    st.current_observers = sorted(b.id for b in desc.brokers if b.id not in st.current_voters)
    return {b.id for b in desc.brokers} | set(cluster.spec.voters)


def register(registry: kopf.OperatorRegistry, rt: Runtime) -> None:
    @kopf.index(**resource(KIND), registry=registry, id="kq_users")
    async def kq_users(namespace: str, name: str, spec: Any, **_: Any) -> Any:
        ref = (spec.get("clusterRef") or {}).get("name")
        return {(namespace, ref): f"{KIND}/{name}"} if ref else None

    @kopf.timer(**resource(KIND), interval=rt.tick, registry=registry, id="reconcile")
    async def reconcile(spec: Any, status: Any, meta: Any, patch: Any, namespace: str,
                        kafkaclusters: Any, **_: Any) -> None:
        gen = generation(meta)
        st = read_status(KafkaQuorumStatus, status)
        model, problems = parse_spec(KIND, spec)
        if model is None:
            st.phase = "Invalid"
            set_cond(st, READY, "False", "InvalidSpec", "; ".join(problems), gen)
            degrade(st, "InvalidSpec", "; ".join(problems), gen)
            publish(patch, status, st, gen)
            return
        assert isinstance(model, KafkaQuorumSpec)
        ref = model.cluster_ref.name
        st.cluster = ref
        st.target_voters = list(model.voters)
        if (namespace, ref) not in kafkaclusters:
            st.phase = "Invalid"
            msg = (f"spec.clusterRef.name: no KafkaCluster {ref!r} in namespace {namespace}; "
                   "create it or fix the name")
            set_cond(st, READY, "False", "UnknownCluster", msg, gen)
            degrade(st, "UnknownCluster", msg, gen)
            publish(patch, status, st, gen)
            return
        opened = rt.clusters.get((namespace, ref))
        if opened is None:
            set_cond(st, READY, "False", "WaitingForCluster", f"KafkaCluster {ref} is not "
                     "Ready yet", gen)
            set_cond(st, PROGRESSING, "True", "WaitingForCluster", "", gen)
            publish(patch, status, st, gen)
            return
        nodes = await rt.run(opened, lambda c: observe(c, st))
        unknown = sorted(set(model.voters) - nodes)
        if unknown:
            st.phase = "Invalid"
            msg = (f"spec.voters: node(s) {unknown} are not nodes of KafkaCluster {ref} "
                   f"(nodes: {sorted(nodes)}); list existing node ids")
            set_cond(st, READY, "False", "UnknownNode", msg, gen)
            degrade(st, "UnknownNode", msg, gen)
        elif sorted(model.voters) == sorted(st.current_voters):
            st.phase = "Ready"
            set_cond(st, READY, "True", "QuorumReady", f"voters {st.current_voters}", gen)
            set_cond(st, PROGRESSING, "False", "Idle", "", gen)
            healthy(st, gen)
        else:
            st.phase = "NotSupported"
            msg = (f"voters {st.current_voters} -> {list(model.voters)}: voter changes "
                   "(KIP-853) are not yet supported by the embedded cluster of this version; "
                   "set spec.voters to the current voters")
            set_cond(st, READY, "False", "QuorumChangesNotSupported", msg, gen)
            set_cond(st, PROGRESSING, "False", "QuorumChangesNotSupported", msg, gen)
            degrade(st, "QuorumChangesNotSupported", msg, gen)
        publish(patch, status, st, gen)
