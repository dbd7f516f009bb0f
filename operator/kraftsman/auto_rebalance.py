"""KafkaCluster ``spec.autoRebalance.addBrokers``: the pure decisions (no I/O).

Each KafkaCluster pass describes the cluster (DescribeCluster). :func:`decide` compares the
brokers registered now with those the status recorded before (``status.knownBrokers``):

* the first observation (nothing recorded, or the cluster id changed) records them and
  creates nothing: brokers present when the policy first sees the cluster are not new;
* a broker that unregistered leaves the known set (registering again later, it is new);
* a new broker counts once it is unfenced (a broker starts fenced until it has caught up
  with the metadata; a plan must not fill a broker that cannot take replicas yet);
* policy off (absent, or ``enabled: false``): new brokers are recorded, nothing is created;
* policy on: the new brokers get one KafkaRebalance ``goal: add-brokers`` — unless an
  add-brokers rebalance this cluster created earlier is still under way (not Ready, Failed,
  Rejected, Stale or Invalid): then they wait for it, since two plans made from the same
  assignment would fight (the second would be stale once the first executed). Brokers an
  unfinished one already names are taken as covered (a pass that created it but whose
  status write was lost);
* policy invalid: nothing is created and the new brokers stay unrecorded, so fixing the
  template rebalances them.

The name is deterministic (``<cluster>-add-brokers-<ids>``), so two operator replicas, or a
pass repeated after a lost status write, create the same object and the API server's 409
AlreadyExists makes the second create a no-op.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from kraftsman.rebalance_flow import MAX_JOB_NAME, job_name
from kraftsman.resources import (
    API_VERSION,
    AutoRebalance,
    KafkaRebalanceSpec,
    format_validation_error,
)

LABEL_AUTO = "kraftsman.io/auto-rebalance"  # value: the mode, "add-brokers"
LABEL_CLUSTER = "kraftsman.io/cluster"
MODE = "add-brokers"
# Phases in which a KafkaRebalance does nothing more by itself ("Deleted": being deleted).
FINISHED = ("Ready", "Failed", "Rejected", "Stale", "Invalid", "Deleted")
# The longest name whose planner Jobs (`<name>-plan-<id>`, id up to 999) fit in 63 characters.
MAX_NAME = MAX_JOB_NAME - len(job_name("", 999))
Mode = Literal["off", "on", "invalid"]


@dataclass(frozen=True)
class Seen:
    """An add-brokers KafkaRebalance this cluster created, as the operator's index sees it."""

    name: str
    brokers: tuple[int, ...]
    phase: str | None

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED


@dataclass(frozen=True)
class Decision:
    known: tuple[int, ...]  # status.knownBrokers after this pass, if nothing is created
    create: tuple[int, ...] = ()  # brokers of a new KafkaRebalance (empty: none)
    name: str | None = None  # its name
    waiting: tuple[int, ...] = ()  # new brokers not covered (for the status)
    waiting_for: str | None = None  # the unfinished rebalance they wait for
    adopted: tuple[int, ...] = field(default=())  # covered by an unfinished one already

    def known_after_create(self) -> tuple[int, ...]:
        """status.knownBrokers once the create succeeded (or found it existing)."""
        return tuple(sorted({*self.known, *self.create}))


def decide(known: Iterable[int] | None, registered: Mapping[int, bool], mode: Mode,
           seen: Iterable[Seen], cluster: str) -> Decision:
    """``registered``: broker id -> fenced, as DescribeCluster lists them now; ``known``:
    status.knownBrokers (None: never recorded, or recorded for another cluster id)."""
    if known is None:
        return Decision(known=tuple(sorted(registered)))
    kept = {b for b in known if b in registered}
    new = {b for b, fenced in registered.items() if not fenced} - kept
    if not new or mode == "off":
        return Decision(known=tuple(sorted(kept | new)))
    if mode == "invalid":
        return Decision(known=tuple(sorted(kept)), waiting=tuple(sorted(new)))
    seen = list(seen)
    unfinished = sorted((s for s in seen if not s.finished), key=lambda s: s.name)
    covered = {b for s in unfinished for b in s.brokers}
    adopted = new & covered
    rest = tuple(sorted(new - covered))
    known_now = tuple(sorted(kept | adopted))
    if not rest:
        return Decision(known=known_now, adopted=tuple(sorted(adopted)))
    if unfinished:
        return Decision(known=known_now, waiting=rest, waiting_for=unfinished[0].name,
                        adopted=tuple(sorted(adopted)))
    return Decision(known=known_now, create=rest,
                    name=rebalance_name(cluster, rest, {s.name for s in seen}),
                    adopted=tuple(sorted(adopted)))


def rebalance_name(cluster: str, brokers: Iterable[int], taken: Iterable[str] = ()) -> str:
    """``<cluster>-add-brokers-<id>-<id>...``; a digest of the ids when that is longer than
    :data:`MAX_NAME`; ``-2``, ``-3``... after a name an earlier (finished) rebalance of this
    cluster holds — a broker that unregistered and registers again gets a new rebalance."""
    ids = "-".join(str(b) for b in brokers)
    used = set(taken)
    for n in itertools.count(1):
        suffix = "" if n == 1 else f"-{n}"
        name = f"{cluster}-add-brokers-{ids}{suffix}"
        if len(name) > MAX_NAME:
            digest = hashlib.sha256(f"{cluster}/{ids}".encode()).hexdigest()[:8]
            tail = f"-add-brokers-{digest}{suffix}"
            name = cluster[:MAX_NAME - len(tail)].rstrip("-.") + tail
        if name not in used:
            return name
    raise AssertionError("unreachable")


def parse_policy(raw: Any) -> tuple[Mode, AutoRebalance | None, str | None]:
    """(mode, the policy, the problem) of ``spec.autoRebalance``; the problem names the field
    and the fix. The KafkaCluster itself stays usable with a bad policy."""
    if raw is None:
        return "off", None, None
    try:
        policy = AutoRebalance.model_validate(raw)
    except ValidationError as e:
        lines = [p.replace("spec.", "spec.autoRebalance.", 1) for p in
                 format_validation_error("", e, AutoRebalance)]
        problem = "; ".join(line.removeprefix(": ") for line in lines)
        return "invalid", None, (
            f"{problem}; fix spec.autoRebalance (the template takes the KafkaRebalance fields "
            "balance, throttleBytesPerSecond, maxConcurrentMoves, maxPartitionsPerResource "
            "and sparkMaster; goal, brokers and clusterRef are the operator's)")
    if policy.add_brokers is None or not policy.add_brokers.enabled:
        return "off", policy, None
    return "on", policy, None


def without_policy(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The KafkaCluster spec without ``autoRebalance``: how to reach the cluster, which a bad
    policy must not make unusable."""
    return {k: v for k, v in spec.items() if k != "autoRebalance"}


def rebalance_spec(policy: AutoRebalance, cluster: str, brokers: Iterable[int]
                   ) -> dict[str, Any]:
    """The KafkaRebalance spec for ``brokers``: the template, goal add-brokers, approval
    Approved with autoApprove (the spec field a GitOps user sets), else Pending."""
    assert policy.add_brokers is not None
    template = policy.add_brokers.template.model_dump(by_alias=True, exclude_none=True)
    spec = {**template, "clusterRef": {"name": cluster}, "goal": MODE,
            "brokers": sorted(brokers),
            "approval": "Approved" if policy.add_brokers.auto_approve else "Pending"}
    KafkaRebalanceSpec.model_validate(spec)  # the template's fields are the kind's own
    return spec


def cluster_owner(cluster: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "KafkaCluster", "name": cluster, "uid": uid,
            "controller": True}


def rebalance_body(policy: AutoRebalance, cluster: str, uid: str, namespace: str, name: str,
                   brokers: Iterable[int]) -> dict[str, Any]:
    """The KafkaRebalance to create, owned by the KafkaCluster (garbage-collected with it;
    Argo CD shows it under the KafkaCluster and does not prune it)."""
    return {"apiVersion": API_VERSION, "kind": "KafkaRebalance",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {LABEL_AUTO: MODE, LABEL_CLUSTER: cluster},
                         "ownerReferences": [cluster_owner(cluster, uid)]},
            "spec": rebalance_spec(policy, cluster, brokers)}


def index_entry(namespace: str, name: str, meta: Mapping[str, Any], spec: Mapping[str, Any],
                status: Mapping[str, Any] | None) -> dict[tuple[str, str], Seen]:
    """The operator's index of auto-created rebalances: (namespace, owner KafkaCluster uid) ->
    :class:`Seen`. One being deleted counts as finished."""
    if (meta.get("labels") or {}).get(LABEL_AUTO) != MODE:
        return {}
    phase = (status or {}).get("phase")
    if meta.get("deletionTimestamp"):
        phase = "Deleted"
    brokers = tuple(int(b) for b in spec.get("brokers") or () if isinstance(b, int))
    seen = Seen(name, brokers, phase)
    return {(namespace, str(o.get("uid"))): seen
            for o in meta.get("ownerReferences") or () if o.get("kind") == "KafkaCluster"}


def ours(obj: Mapping[str, Any] | None, uid: str) -> bool:
    """Whether an existing KafkaRebalance (a create answered 409) is this cluster's."""
    owners = ((obj or {}).get("metadata") or {}).get("ownerReferences") or ()
    return any(o.get("uid") == uid for o in owners)
