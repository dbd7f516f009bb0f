"""KafkaCluster ``spec.autoRebalance.addBrokers``, the I/O: a KafkaCluster pass hands over the
brokers DescribeCluster listed; :func:`kraftsman.auto_rebalance.decide` chooses; this creates
the KafkaRebalance, records the outcome in the status and posts the Events. A refused create
is a condition and an Event (and a retry with backoff), never an exception out of the pass."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kraftsman import auto_rebalance as ar
from kraftsman.handlers import kube
from kraftsman.handlers.common import degrade, emit
from kraftsman.handlers.runtime import Runtime
from kraftsman.resources import API_VERSION
from kraftsman.status import DEGRADED, AutoRebalanceStatus, KafkaClusterStatus

PLURAL = "kafkarebalances"
INVALID, FAILED = "InvalidAutoRebalance", "AutoRebalanceFailed"


def _ids(brokers: tuple[int, ...] | list[int]) -> str:
    return ", ".join(str(b) for b in brokers)


async def run(rt: Runtime, spec: Mapping[str, Any], old: KafkaClusterStatus,
              st: KafkaClusterStatus, registered: Mapping[int, bool], seen: list[ar.Seen],
              body: Any, uid: str, name: str, namespace: str, gen: int, logger: Any) -> None:
    """One pass of the policy, after the cluster was described (``st`` is the new status;
    ``old`` the status as read, for what changed)."""
    mode, policy, problem = ar.parse_policy(spec.get("autoRebalance"))
    if mode != "invalid" and (policy is None or policy.add_brokers is None):
        st.known_brokers, st.auto_rebalance = None, None  # no policy: nothing to track
        return
    same_cluster = old.cluster_id in (None, st.cluster_id)
    known = old.known_brokers if same_cluster else None
    d = ar.decide(known, registered, mode, seen, name)
    st.known_brokers = list(d.known)
    was = old.auto_rebalance or AutoRebalanceStatus()
    now = st.auto_rebalance = AutoRebalanceStatus(rebalance=was.rebalance, brokers=was.brokers)
    was_degraded = old.condition(DEGRADED)
    if problem is not None:
        now.waiting_brokers, now.message = list(d.waiting), "the policy is invalid"
        degrade(st, INVALID, problem, gen)
        if was_degraded is None or was_degraded.reason != INVALID:
            emit(body, INVALID, problem, warning=True)
        return
    if d.waiting_for is not None:
        now.waiting_brokers = list(d.waiting)
        now.message = (f"brokers [{_ids(d.waiting)}] wait for KafkaRebalance {d.waiting_for} "
                       "to finish (Ready, Failed, Rejected or Stale; approve, reject or delete "
                       "it): then one KafkaRebalance adds them")
        if list(d.waiting) != was.waiting_brokers:
            emit(body, "BrokersWaiting", now.message)
        return
    if not d.create or d.name is None:
        return
    assert policy is not None
    key = f"AutoRebalance/{uid}"
    if not rt.backoff.ready(key, rt.clock()):
        now.waiting_brokers, now.message = list(d.create), "the create failed"
        if was_degraded is not None and was_degraded.reason == FAILED:
            degrade(st, FAILED, was_degraded.message, gen)  # still failing: retried later
        return
    what = f"KafkaRebalance {namespace}/{d.name}"
    try:
        created = await create(rt, ar.rebalance_body(policy, name, uid, namespace, d.name,
                                                     d.create), what, uid, logger)
    except kube.KubeError as e:
        delay = rt.backoff.failed(key, rt.clock())
        message = (f"spec.autoRebalance.addBrokers: brokers [{_ids(d.create)}] registered but "
                   f"{e}; retrying in {delay:g}s")
        now.waiting_brokers, now.message = list(d.create), "the create failed"
        degrade(st, FAILED, message, gen)
        if was_degraded is None or was_degraded.reason != FAILED:
            emit(body, FAILED, message, warning=True)
        return
    rt.backoff.succeeded(key)
    st.known_brokers = list(d.known_after_create())
    now.rebalance, now.brokers = d.name, list(d.create)
    if created:
        approval = policy.add_brokers.auto_approve if policy.add_brokers else False
        emit(body, "RebalanceCreated", (
            f"brokers [{_ids(d.create)}] registered: created {what} (goal add-brokers); "
            + ("autoApprove: its proposal executes once ready" if approval else
               f"approve its proposal with `kubectl annotate kr {d.name} "
               "kraftsman.io/rebalance=approve`")))


async def create(rt: Runtime, body: dict[str, Any], what: str, uid: str, logger: Any) -> bool:
    """Create the KafkaRebalance: True when created here; False when it exists and is this
    cluster's (another replica, or a pass whose status write was lost, created it)."""
    path = kube.url(API_VERSION, PLURAL, body["metadata"]["namespace"])
    if await kube.create(path, body, what, rt.settings, logger):
        return True
    existing = await kube.get(f"{path}/{body['metadata']['name']}", what, rt.settings, logger)
    if existing is not None and not ar.ours(existing, uid):
        raise kube.KubeError(f"{what} exists and is not this KafkaCluster's (no "
                             "ownerReference to it); delete or rename that KafkaRebalance")
    return False
