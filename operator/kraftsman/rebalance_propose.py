"""`kraftsman rebalance propose`: the planner Job of a KafkaRebalance (docs/rebalance.md).

Logs in as the operator does, reads the KafkaRebalance and its KafkaCluster, snapshots the
cluster with the code of ``kraftsman snapshot`` (the embedded cluster read-only from the
operator's state volume, or the ``kafka`` backend with the KafkaCluster's bootstrapServers and
Secret), runs the pipeline of ``kraftsman plan`` in a temporary directory and writes the
proposal as ConfigMaps (:mod:`kraftsman.proposal`). Any failure is one line naming the field
and the fix: on stderr (exit 2) and as the index ConfigMap's ``error``. The Job never writes
the KafkaRebalance: its status is the operator's.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from controller_core.planning.fingerprint import table_fingerprint
from controller_core.planning.goals import GOAL_KINDS, Goal, GoalError, check_goal, disks_text
from controller_core.planning.snapshot import Snapshot, SnapshotError
from kraftsman.auto_rebalance import without_policy
from kraftsman.resources import (
    GOALS_WITH_BALANCE,
    KafkaClusterSpec,
    KafkaRebalanceSpec,
    format_validation_error,
)

log = logging.getLogger("kraftsman.planner")
_GOAL_FLAG = re.compile(r"--goal ([a-z-]+)( [0-9]+:\S*?(?=:(?:\s|$))| [0-9,]+)?")


def _spec_field(m: re.Match[str]) -> str:
    if m[1] == "remove-disks":
        return f"spec.disks{m[2] or ''} (goal remove-disks)"
    return f"spec.brokers{m[2] or ''} (goal {m[1]})"


class ProposeError(Exception):
    """The proposal cannot be made; the message is one line naming the field and the fix.
    ``owner_uid``: the KafkaRebalance's uid when it was read (the error ConfigMap's owner)."""

    owner_uid: str | None = None


@dataclass
class ProposeRequest:
    namespace: str
    name: str
    proposal_id: str
    state_dir: Path
    master: str | None = None
    spark_conf: dict[str, str] = field(default_factory=dict)
    connect_timeout: float = 30.0
    kubeconfig: str | None = None
    service_account_dir: Path | None = None


def parse_rebalance(name: str, spec: Any) -> KafkaRebalanceSpec:
    """The operator's own model of the spec (the CRD's schema), problems in one line."""
    try:
        return KafkaRebalanceSpec.model_validate(dict(spec or {}))
    except ValidationError as e:
        problems = format_validation_error(f"KafkaRebalance {name}", e, KafkaRebalanceSpec)
        hint = f" (goals: {', '.join(GOAL_KINDS)})" if any(
            err["loc"] == ("goal",) for err in e.errors()) else ""
        raise ProposeError(one_line(problems) + hint) from None


def goal_of(name: str, spec: KafkaRebalanceSpec) -> Goal:
    """The plan's goal (the model already checked brokers against the goal)."""
    brokers = tuple(spec.brokers or ())
    if spec.balance and spec.goal not in GOALS_WITH_BALANCE:
        raise ProposeError(f"KafkaRebalance {name}: spec.balance: only with goal add-brokers or "
                           f"remove-brokers (goal is {spec.goal}, which already balances or "
                           "moves no data); remove it")
    disks = tuple((d.broker, d.log_dir) for d in spec.disks or ())
    return Goal(spec.goal, brokers, spec.balance, disks)


def check_goal_fits(name: str, goal: Goal, snapshot: Snapshot) -> None:
    problems = check_goal(goal, snapshot)
    if problems:
        # the shared checks speak of the CLI's --goal KIND IDS; here the field is spec.brokers
        # (remove-disks: spec.disks, the CLI's BROKER:DIR list)
        text = "; ".join(_GOAL_FLAG.sub(_spec_field, p) for p in problems)
        raise ProposeError(f"KafkaRebalance {name}: {text}")


def one_line(problems: list[str] | str) -> str:
    items = [problems] if isinstance(problems, str) else problems
    return " ".join("; ".join(items).split())


# ---------------------------------------------------------------------------------------
# snapshots


EMBEDDED_SOURCES = {
    "brokers": "the embedded cluster's metadata image (state volume, read-only)",
    "racks": "spec.embedded.brokers[].rack",
    "replicas": "the embedded cluster's metadata image (partition replicas and leaders)",
    "sizeBytes": "the embedded cluster's replica logs",
    "diskCapacityBytes": "spec.embedded.brokers[].diskBytes, else 1 TiB",
    "networkCapacityBytesPerSecond": "spec.embedded replicationBytesPerSecond (per broker, "
                                     "else the cluster's)",
    "bytesInPerSecond": "the embedded cluster's producer rates",
    "bytesOutPerSecond": "bytes in x 1 (consumer fanout)",
}


def embedded_snapshot(req: ProposeRequest, cluster_name: str, uid: str,
                      spec: KafkaClusterSpec) -> Snapshot:
    from controller_core.embedded.cluster import EmbeddedCluster
    from controller_core.storage.framing import CorruptFileError
    from kraftsman.commands.plan import embedded_snapshot as take
    from kraftsman.handlers.runtime import embedded_cluster_dir

    assert spec.embedded is not None
    path = embedded_cluster_dir(req.state_dir, (req.namespace, cluster_name), uid)
    if not (path / "quorum").is_dir():
        raise ProposeError(f"--state-dir {req.state_dir}: no state of the embedded KafkaCluster "
                           f"{req.namespace}/{cluster_name} (uid {uid}) at {path}; mount the "
                           "operator's state volume there (read-only) and wait until the "
                           "KafkaCluster is Ready")
    try:
        cluster = EmbeddedCluster.open_read_only(path, spec.embedded)
    except (CorruptFileError, OSError) as e:
        raise ProposeError(f"--state-dir {req.state_dir}: embedded cluster at {path} cannot "
                           f"be read ({e})") from None
    try:
        return take(cluster, spec.embedded, cluster_name, default_disk_bytes=1 << 40,
                    consumer_fanout=1.0, sources=dict(EMBEDDED_SOURCES))
    finally:
        cluster.close()


def kafka_snapshot(req: ProposeRequest, cluster_name: str, spec: KafkaClusterSpec,
                   secret: Mapping[str, str] | None) -> Snapshot:
    from controller_core.backends import RetryPolicy, SecretError, open_kafka_admin
    from controller_core.errors import KafkaApiError
    from kraftsman.commands import real_snapshot

    assert spec.bootstrap_servers is not None
    where = f"KafkaCluster {cluster_name}"
    # kafka-python logs every failed attempt; the one line at the end says it all
    logging.getLogger("kafka").addHandler(logging.NullHandler())
    logging.getLogger("kafka").propagate = False
    try:
        admin = open_kafka_admin(spec.bootstrap_servers, secret,
                                 retry=RetryPolicy(total_seconds=req.connect_timeout),
                                 client_id="kraftsman-planner")
    except SecretError as e:
        ref = spec.auth_secret_ref.name if spec.auth_secret_ref else "?"
        raise ProposeError(f"{where}: spec.authSecretRef.name: Secret {ref!r}: {e}; fix the "
                           "Secret (keys: docs/real-clusters.md)") from None
    except KafkaApiError as e:
        raise ProposeError(f"{where}: spec.bootstrapServers {spec.bootstrap_servers}: "
                           f"{e.error.name}: {e.message}; check the address, that the brokers "
                           "are up and reachable from the Job's pod, and the credentials"
                           ) from None
    try:
        snap, _ = real_snapshot.take(admin, cluster_name)
        return snap  # type: ignore[no-any-return]
    except KafkaApiError as e:
        raise ProposeError(f"{where}: spec.bootstrapServers {spec.bootstrap_servers}: "
                           f"{e.error.name}: {e.message}") from None
    finally:
        admin.close()


# ---------------------------------------------------------------------------------------
# the command


def plan_request(spec: KafkaRebalanceSpec, goal: Goal, work: Path, *, master: str,
                 cluster: str, spark_conf: dict[str, str]) -> Any:
    """The `kraftsman plan` request of a KafkaRebalance: its snapshot in ``work/snapshot``,
    output to ``work/plan``; ``throttleBytesPerSecond: 0`` plans unthrottled reassignments."""
    from controller_core.planning import pipeline

    words = [goal.kind] + ([",".join(map(str, goal.brokers))] if goal.brokers else []) + \
        ([disks_text(goal.disks)] if goal.disks else [])
    return pipeline.PlanRequest(
        snapshot_dir=work / "snapshot", goal=words, out=work / "plan", balance=goal.balance,
        master=master, throttle=spec.throttle_bytes_per_second or None,
        log_dir_throttle=spec.log_dir_throttle_bytes_per_second,
        max_concurrent_moves=spec.max_concurrent_moves, cluster_name=cluster,
        spark_conf=spark_conf, max_partitions=spec.max_partitions_per_resource)


def plan(req: ProposeRequest, name: str, spec: KafkaRebalanceSpec, snap: Snapshot,
         goal: Goal) -> tuple[dict[str, Any], list[str]]:
    """Run ``kraftsman plan``'s pipeline on ``snap`` in a temporary directory: the summary
    and the PartitionReassignment documents in apply order."""
    from controller_core.planning import pipeline
    from controller_core.planning.snapshot import write_snapshot
    from controller_core.planning.spark_job import JavaMissingError
    from kraftsman.commands.plan import now_text

    check_goal_fits(name, goal, snap)
    fingerprint = table_fingerprint(snap.partitions)
    master = req.master or spec.spark_master or "local[*]"
    with tempfile.TemporaryDirectory(prefix="kraftsman-propose-") as tmp:
        write_snapshot(snap, Path(tmp) / "snapshot")
        request = plan_request(spec, goal, Path(tmp), master=master,
                               cluster=snap.cluster_name, spark_conf=req.spark_conf)
        try:
            out = pipeline.run(request)
        except JavaMissingError as e:
            raise ProposeError(str(e)) from None
    summary = dict(out.summary)
    if "disks" in summary:
        summary.update(disks_shown(summary["disks"]))
    summary.update({
        "fingerprint": fingerprint,
        "createdAt": now_text(),
        "snapshotCreatedAt": snap.created_at,
        "shortfalls": list(out.result.shortfalls),
        "sources": dict(snap.extra.get("sources") or {}),
        "clusterRef": {"name": snap.cluster_name},
        "sparkMaster": master,
    })
    return summary, [r.text for r in out.resources]


# log directories a proposal's summary.json lists (the index ConfigMap is at most 1 MiB;
# report.json of `kraftsman plan` lists them all)
PROPOSAL_DISK_ROWS = 100


def disks_shown(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """At most :data:`PROPOSAL_DISK_ROWS` log directories: the removed ones, then those
    whose utilisation changes most (then broker, directory); ``disksTotal`` counts all."""
    ranked = sorted(rows, key=lambda d: (not d["removed"], -abs(d["utilisationAfter"] -
                                                                  d["utilisationBefore"]),
                                         d["broker"], d["logDir"]))
    shown = sorted(ranked[:PROPOSAL_DISK_ROWS], key=lambda d: (d["broker"], d["logDir"]))
    return {"disks": shown, "disksTotal": len(rows)}


def make(req: ProposeRequest, kube: Any) -> tuple[str | None, list[dict[str, Any]]]:
    """Read, snapshot, plan: the KafkaRebalance's uid and the ConfigMaps to write. Raises
    ProposeError (with the uid known so far on ``owner_uid``)."""
    from controller_core.backends import SecretError
    from controller_core.backends.security import decode_secret_data
    from kraftsman.handlers.common import PLURALS
    from kraftsman.kube_client import KubeError
    from kraftsman.proposal import REBALANCE_PLURAL, proposal_config_maps

    ns, name = req.namespace, req.name
    uid: str | None = None
    try:
        try:
            rb = kube.get_custom(REBALANCE_PLURAL, ns, name)
        except KubeError as e:
            raise _kube_problem(e, f"--name {name}: KafkaRebalance {ns}/{name}",
                                "create it or fix --namespace/--name",
                                "get on kafkarebalances") from None
        uid = str((rb.get("metadata") or {}).get("uid") or "") or None
        spec = parse_rebalance(name, rb.get("spec"))
        goal = goal_of(name, spec)
        cname = spec.cluster_ref.name
        try:
            kc = kube.get_custom(PLURALS["KafkaCluster"], ns, cname)
        except KubeError as e:
            raise _kube_problem(e, f"KafkaRebalance {name}: spec.clusterRef.name: "
                                f"KafkaCluster {ns}/{cname}",
                                "create it or fix the name", "get on kafkaclusters") from None
        try:
            kc_spec = KafkaClusterSpec.model_validate(without_policy(kc.get("spec") or {}))
        except ValidationError as e:
            raise ProposeError(one_line(format_validation_error(f"KafkaCluster {cname}", e))
                               ) from None
        if kc_spec.embedded is not None:
            kc_uid = str((kc.get("metadata") or {}).get("uid") or "")
            snap = embedded_snapshot(req, cname, kc_uid, kc_spec)
        else:
            secret = None
            if kc_spec.auth_secret_ref is not None:
                sname = kc_spec.auth_secret_ref.name
                try:
                    data, string_data = kube.secret_data(ns, sname)
                except KubeError as e:
                    raise _kube_problem(e, f"KafkaCluster {cname}: spec.authSecretRef.name: "
                                        f"Secret {ns}/{sname}", "create it or fix the name",
                                        "get on secrets") from None
                try:
                    secret = decode_secret_data(data)
                except SecretError as e:
                    raise ProposeError(f"KafkaCluster {cname}: spec.authSecretRef.name: "
                                       f"Secret {sname!r}: {e}") from None
                secret.update(string_data)
            snap = kafka_snapshot(req, cname, kc_spec, secret)
        summary, documents = plan(req, name, spec, snap, goal)
        assert uid is not None
        return uid, proposal_config_maps(ns, name, req.proposal_id, uid, summary, documents)
    except ProposeError as e:
        e.owner_uid = uid
        raise
    except (SnapshotError, GoalError) as e:
        err = ProposeError(f"KafkaRebalance {name}: {one_line(e.problems)}")
        err.owner_uid = uid
        raise err from None
    except Exception as e:  # a Job's failure is one line, never a traceback
        log.debug("proposal failed", exc_info=True)
        err = ProposeError(f"internal error ({type(e).__name__}: {one_line(str(e))}); "
                           "report it with the Job's log")
        err.owner_uid = uid
        raise err from None


def _kube_problem(e: Any, what: str, fix: str, verb: str) -> ProposeError:
    if e.status == 404:
        return ProposeError(f"{what} not found; {fix}")
    if e.status in (401, 403):
        return ProposeError(f"{what}: the Job's service account may not read it (HTTP "
                            f"{e.status}); grant {verb} to the planner ServiceAccount")
    return ProposeError(f"{what}: cannot be read ({e})")


def run(req: ProposeRequest) -> int:
    """The whole Job; returns the exit code (0, or 2 after one line on stderr). Whatever
    fails, and however, the Job ends with one line and no traceback."""
    try:
        return _run(req)
    except Exception as e:
        log.debug("the Job failed", exc_info=True)
        return _fail(internal_error(e))


def internal_error(e: BaseException) -> str:
    return (f"internal error ({type(e).__name__}: {one_line(str(e))}); report it with the "
            "Job's log")


def _run(req: ProposeRequest) -> int:
    import kopf

    from kraftsman.handlers.login import SERVICE_ACCOUNT_DIR, NoCredentials, choose
    from kraftsman.kube_client import KubeClient

    try:
        login = choose(req.kubeconfig, os.environ, req.service_account_dir or SERVICE_ACCOUNT_DIR)
        info = login.connection(kopf.OperatorSettings())
    except NoCredentials as e:
        return _fail(str(e))
    with KubeClient(info) as kube:
        try:
            uid, config_maps = make(req, kube)
        except ProposeError as e:
            message = one_line(str(e))
            return _fail(message + _record(kube, req, e.owner_uid, message))
        for cm in config_maps:
            problem = _write(kube, req, cm)
            if problem is not None:
                # parts written so far stay (the planner may not delete ConfigMaps); the index
                # says the proposal failed, so the operator never reads them
                return _fail(problem + _record(kube, req, uid, problem))
    index = config_maps[-1]
    print(f"proposal {index['metadata']['name']} written: "
          f"{len(config_maps) - 1} part ConfigMap(s), KafkaRebalance uid {uid}")
    return 0


def _write(kube: Any, req: ProposeRequest, cm: Mapping[str, Any]) -> str | None:
    """Create or update one ConfigMap; None, or one line naming it, why not, and the fix."""
    from kraftsman.kube_client import KubeError

    try:
        kube.upsert_config_map(cm)
        return None
    except KubeError as e:
        return f"ConfigMap {req.namespace}/{cm['metadata']['name']}: {write_problem(e, req)}"


def write_problem(e: Any, req: ProposeRequest) -> str:
    """Why the API refused a ConfigMap write (a KubeError), and what to do about it."""
    from kraftsman.rebalance_flow import ANNOTATION

    what = f"cannot be written ({e})"
    again = (f"plan again with kubectl annotate kr -n {req.namespace} {req.name} "
             f"{ANNOTATION}=refresh")
    if e.status in (401, 403):
        return (f"{what}; grant get, create and patch on configmaps in namespace "
                f"{req.namespace} to the planner ServiceAccount")
    if e.status == 409:
        return f"{what}: another writer changed it meanwhile; {again}"
    if e.status == 422:
        return f"{what}: the API server refused it as invalid; report it with the Job's log"
    if e.status == 0:
        return f"{what}; check that the Job's pod reaches the API server, then {again}"
    return f"{what}; {again}"


def _record(kube: Any, req: ProposeRequest, owner_uid: str | None, message: str) -> str:
    """Write ``message`` as the index's ``error``; "" when done, else a clause saying why
    it could not be (the operator then reports a failed Job and points to its log)."""
    from kraftsman.proposal import error_config_map

    problem = _write(kube, req, error_config_map(req.namespace, req.name, req.proposal_id,
                                                 owner_uid, message))
    return "" if problem is None else f" (and the error could not be recorded: {problem})"


def _fail(message: str) -> int:
    print(f"error: {one_line(message)}", file=sys.stderr)
    return 2
