"""The custom resources of kraftsman.io/v1alpha1 — the spec models both the CLI and the
operator parse with, and from which the CRD schemas are generated.

Field names follow the Kafka tools' own JSON where one exists (kafka-reassign-partitions,
kafka-leader-election), so a user's plan files carry over.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from controller_core.config import TOPIC_NAME_PATTERN, BrokerId, CamelModel, EmbeddedClusterSpec
from controller_core.metadata.controller import MAX_THROTTLE_RATE
from kraftsman.cli_errors import UsageError

GROUP = "kraftsman.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

K8S_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
CANCEL_WITH_DRY_RUN = ("spec.cancel and spec.dryRun cannot both be true: a dry run moves "
                       "nothing, so there is nothing to cancel; drop one of them")


class ObjectRef(CamelModel):
    name: str = Field(pattern=K8S_NAME_PATTERN, description="Name of a resource in this namespace.")


# HOST:PORT[,HOST:PORT...] with a numeric port (a host name, an IPv4 address or a bracketed IPv6
# one): what the CRD admits; the model also refuses a port over 65535, saying what to write.
_HOST = r"(\[[0-9A-Fa-f:.]+\]|[^\s,:/\[\]]+)"
BOOTSTRAP_SERVERS_PATTERN = rf"^{_HOST}:[0-9]{{1,5}}(, *{_HOST}:[0-9]{{1,5}})*$"


class AddBrokersTemplate(CamelModel):
    """The KafkaRebalance fields an auto-created add-brokers rebalance takes (unset: the
    KafkaRebalance's own default). goal, brokers and clusterRef are the operator's."""

    balance: bool | None = Field(
        default=None, description="Also balance the other brokers in the same plan "
        "(KafkaRebalance spec.balance; default false).")
    throttle_bytes_per_second: int | None = Field(
        default=None, ge=0, le=MAX_THROTTLE_RATE, description="Replication throttle of the "
        "reassignments in bytes/s (KafkaRebalance spec.throttleBytesPerSecond; default "
        "50000000, 0: unthrottled).")
    max_concurrent_moves: int | None = Field(
        default=None, ge=1, description="Partitions moving at once in each reassignment "
        "(default 10).")
    max_partitions_per_resource: int | None = Field(
        default=None, ge=1, description="Partitions per PartitionReassignment (default 1000).")
    spark_master: str | None = Field(
        default=None, min_length=1, description="Spark master URL of the planner Job "
        "(default: local[*] in the Job's pod).")


class AddBrokersPolicy(CamelModel):
    """Rebalance onto brokers that newly register (Strimzi's auto-rebalancing on scale-up,
    mode add-brokers)."""

    enabled: bool = Field(default=True, description="false: record new brokers, create "
                          "nothing (the policy kept in Git, switched off).")
    auto_approve: bool = Field(
        default=False, description="true: the KafkaRebalance is created with "
        "spec.approval: Approved and executes its proposal without a person (Strimzi's "
        "strimzi.io/rebalance-auto-approval); false: it stops at ProposalReady for review.")
    template: AddBrokersTemplate = Field(
        default_factory=AddBrokersTemplate, description="KafkaRebalance spec fields of the "
        "created rebalance.")


class AutoRebalance(CamelModel):
    """Rebalances the operator creates by itself when the cluster's brokers change."""

    add_brokers: AddBrokersPolicy | None = Field(
        default=None, description="When brokers newly register (DescribeCluster), create a "
        "KafkaRebalance goal add-brokers for them.")


class KafkaClusterSpec(CamelModel):
    """How to reach a cluster: exactly one of `embedded` or `bootstrapServers`."""

    embedded: EmbeddedClusterSpec | None = Field(
        default=None, description="An in-process cluster (demos, tests, rehearsals).")
    bootstrap_servers: str | None = Field(
        default=None, min_length=1, description="host:port[,host:port] of a real cluster.",
        json_schema_extra={"pattern": BOOTSTRAP_SERVERS_PATTERN})
    auth_secret_ref: ObjectRef | None = Field(
        default=None, description="Secret with TLS/SASL settings for bootstrapServers.")
    auto_rebalance: AutoRebalance | None = Field(
        default=None, description="Rebalances the operator creates when brokers register "
        "(off unless set; docs/rebalance.md#adding-brokers).")

    @field_validator("bootstrap_servers")
    @classmethod
    def _host_ports(cls, v: str | None) -> str | None:
        if v is None:
            return v
        bad = [s.strip() for s in v.split(",") if not re.match(
            rf"^{_HOST}:[0-9]{{1,5}}$", s.strip()) or int(s.rsplit(":", 1)[1]) > 65535]
        if bad or not re.match(BOOTSTRAP_SERVERS_PATTERN, v):
            raise ValueError(
                f"{', '.join(repr(b) for b in bad) or repr(v)} is not HOST:PORT with a numeric "
                "port (0-65535); write HOST:PORT[,HOST:PORT...], e.g. kafka-0:9092,kafka-1:9092")
        return v

    @model_validator(mode="after")
    def _exactly_one(self) -> KafkaClusterSpec:
        if (self.embedded is None) == (self.bootstrap_servers is None):
            raise ValueError("set exactly one of spec.embedded or spec.bootstrapServers")
        if self.auth_secret_ref is not None and self.bootstrap_servers is None:
            raise ValueError("spec.authSecretRef only applies with spec.bootstrapServers")
        return self


CONTROLLER_ENDPOINT_PATTERN = r"^[A-Za-z0-9_.-]+://(\[[0-9A-Fa-f:.]+\]|[^:/\[\]]+):[0-9]{1,5}$"


class ControllerEndpoints(CamelModel):
    """How the quorum's leader reaches a controller that is not a voter yet — what
    kafka-metadata-quorum add-controller reads from that controller's own config."""

    id: BrokerId = Field(description="The controller's node id.")
    endpoints: list[Annotated[str, Field(pattern=CONTROLLER_ENDPOINT_PATTERN)]] = Field(
        min_length=1, description='Its advertised controller listeners, e.g. '
                                  '"CONTROLLER://kafka-controller-3:9093".')


class KafkaQuorumSpec(CamelModel):
    cluster_ref: ObjectRef = Field(description="The KafkaCluster whose metadata quorum this is.")
    voters: list[BrokerId] = Field(min_length=1, description="Desired quorum voters (node ids).")
    controllers: list[ControllerEndpoints] = Field(
        default_factory=list,
        description="Endpoints of the controllers to add as voters (a real cluster needs "
                    "them: brokers list only the voters' endpoints; an embedded one does not).")

    @model_validator(mode="after")
    def _distinct(self) -> KafkaQuorumSpec:
        if len(set(self.voters)) != len(self.voters):
            raise ValueError("spec.voters lists a node id twice; list each voter once")
        ids = [c.id for c in self.controllers]
        if len(set(ids)) != len(ids):
            raise ValueError("spec.controllers names a node id twice; give each one once")
        return self

    @property
    def endpoints(self) -> dict[int, list[str]]:
        return {c.id: list(c.endpoints) for c in self.controllers}


class PartitionMove(CamelModel):
    """One entry of a kafka-reassign-partitions plan."""

    topic: str = Field(pattern=TOPIC_NAME_PATTERN)
    partition: int = Field(ge=0)
    replicas: list[BrokerId] = Field(min_length=1, description="Target replicas, preferred first.")
    log_dirs: list[str] | None = Field(
        default=None, alias="log_dirs",
        description="As kafka-reassign-partitions: one per replica, the log directory "
                    "(an absolute path on that broker) or \"any\" where the broker chooses. "
                    "A replica named in another directory of the broker it is on is copied "
                    "there (KIP-113).")

    @model_validator(mode="after")
    def _log_dirs_any(self) -> PartitionMove:
        if self.log_dirs is not None:
            if len(self.log_dirs) != len(self.replicas):
                raise ValueError(
                    f"log_dirs has {len(self.log_dirs)} entries for {len(self.replicas)} "
                    "replicas: give one per replica, \"any\" where the broker may choose")
            bad = [d for d in self.log_dirs if d != "any" and not d.startswith("/")]
            if bad:
                raise ValueError(f"log_dirs {bad}: each entry is \"any\" or an absolute path "
                                 "(a log directory of that broker, as describe log dirs lists it)")
        if len(set(self.replicas)) != len(self.replicas):
            raise ValueError(f"replicas {self.replicas} names a broker twice; a partition has "
                             "at most one replica per broker")
        return self


def _duplicate_partitions(entries: Iterable[TopicPartitionRef | PartitionMove]) -> list[str]:
    seen: set[tuple[str, int]] = set()
    dups: list[str] = []
    for e in entries:
        key = (e.topic, e.partition)
        if key in seen:
            dups.append(f"{e.topic}-{e.partition}")
        seen.add(key)
    return dups


class PartitionReassignmentSpec(CamelModel):
    cluster_ref: ObjectRef
    partitions: list[PartitionMove] = Field(
        min_length=1, description="Partition -> target replicas.")
    throttle_bytes_per_second: int | None = Field(
        default=None, ge=1, le=MAX_THROTTLE_RATE,
        description="Replication throttle on the moving replicas (bytes/s); none if unset.")
    log_dir_throttle_bytes_per_second: int | None = Field(
        default=None, ge=1, le=MAX_THROTTLE_RATE,
        description="Throttle of the copies between log directories of a broker (bytes/s; "
                    "replica.alter.log.dirs.io.max.bytes.per.second on the brokers that copy, "
                    "while they do); throttleBytesPerSecond if unset.")
    max_concurrent_moves: int = Field(default=10, ge=1, description="Partitions moving at once.")
    max_concurrent_moves_per_broker: int | None = Field(
        default=None, ge=1, description="Moves touching one broker at once.")
    elect_preferred_leaders: bool = Field(
        default=False, description="Elect preferred leaders of the moved partitions at the end.")
    cancel: bool = Field(default=False, description="Roll back everything in flight.")
    additional: bool = Field(
        default=False, description="Allow overlap with reassignments already in progress.")
    dry_run: bool = Field(default=False, description="Validate and report; move nothing.")
    paused: bool = Field(default=False, description="Finish the moves in flight, start no more.")
    stalled_after_seconds: int = Field(
        default=600, ge=1, le=7 * 24 * 3600,
        description="A move in flight whose adding replicas copy no byte for this long is "
                    "reported: condition Stalled naming its partitions and brokers, a Stalled "
                    "Event, Argo CD health Degraded; it clears when the copy goes on.")

    @model_validator(mode="after")
    def _each_partition_once(self) -> PartitionReassignmentSpec:
        if self.cancel and self.dry_run:
            raise ValueError(CANCEL_WITH_DRY_RUN)
        dups = _duplicate_partitions(self.partitions)
        if dups:
            raise ValueError(f"spec.partitions lists {', '.join(dups[:5])} more than once; "
                             "give each partition one target")
        return self


class TopicPartitionRef(CamelModel):
    topic: str = Field(pattern=TOPIC_NAME_PATTERN)
    partition: int = Field(ge=0)


class LeaderElectionSpec(CamelModel):
    cluster_ref: ObjectRef
    election_type: Literal["PREFERRED", "UNCLEAN"] = "PREFERRED"
    partitions: list[TopicPartitionRef] | None = Field(default=None, min_length=1)
    topics: list[Annotated[str, Field(pattern=TOPIC_NAME_PATTERN)]] | None = Field(
        default=None, min_length=1)
    all_topic_partitions: bool = False
    run_id: str | None = Field(default=None, description="Change it to run the election again.")
    mode: Literal["OneShot", "Continuous"] = "OneShot"
    imbalance_threshold_percent: float = Field(
        default=10.0, ge=0, le=100,
        description="Continuous: elect when more than this share of partitions is off-preferred.")
    interval_seconds: int = Field(default=300, ge=1, description="Continuous: how often to check.")

    @model_validator(mode="after")
    def _one_selector(self) -> LeaderElectionSpec:
        chosen = [self.partitions is not None, self.topics is not None, self.all_topic_partitions]
        if sum(chosen) != 1:
            raise ValueError(
                "set exactly one of spec.partitions, spec.topics or spec.allTopicPartitions: true")
        dups = _duplicate_partitions(self.partitions or [])
        if dups:
            raise ValueError(f"spec.partitions lists {', '.join(dups[:5])} more than once")
        if self.topics is not None and len(set(self.topics)) != len(self.topics):
            raise ValueError("spec.topics lists a topic twice; list each topic once")
        return self


RebalanceGoal = Literal["rebalance", "add-brokers", "remove-brokers", "leader-balance",
                        "demote-brokers", "remove-disks"]
GOALS_WITH_BROKERS = ("add-brokers", "remove-brokers", "demote-brokers")
# the goals spec.balance widens (a fill or a drain that also balances the others)
GOALS_WITH_BALANCE = ("add-brokers", "remove-brokers")
Approval = Literal["Pending", "Approved", "Rejected"]


BROKERS_REQUIRED = ("spec.brokers: required for goals add-brokers, remove-brokers and "
                    "demote-brokers; list the broker ids to add, remove or demote, e.g. "
                    "brokers: [6, 7]")
UNREGISTER_REFUSED = ("spec.unregister: only for goal remove-brokers; remove it or change "
                      "spec.goal")
BROKERS_REFUSED = ("spec.brokers: only for goals add-brokers, remove-brokers and "
                   "demote-brokers; remove spec.brokers or change spec.goal")
DISKS_REQUIRED = ("spec.disks: required for goal remove-disks; list the log directories to "
                  "empty, e.g. disks: [{broker: 3, logDir: /data/d1}]")
DISKS_REFUSED = ("spec.disks: only for goal remove-disks; remove spec.disks or change "
                 "spec.goal")


class DiskRef(CamelModel):
    """A log directory of a broker (remove-disks)."""

    broker: BrokerId = Field(description="The broker's node id.")
    log_dir: str = Field(min_length=1, pattern=r"^[^,]+$", description="The directory's path "
                         "as in the broker's log.dirs, e.g. /data/d1.")


class KafkaRebalanceSpec(CamelModel):
    """A plan computed by the operator (the PySpark planner in a Job), reviewed in status and
    executed on approval as PartitionReassignments, one after another."""

    cluster_ref: ObjectRef = Field(description="The KafkaCluster to plan for.")
    goal: RebalanceGoal = Field(default="rebalance", description="What the plan does: "
                                "rebalance, add-brokers, remove-brokers, leader-balance, "
                                "demote-brokers or remove-disks (the goals of `kraftsman "
                                "plan`).")
    brokers: list[BrokerId] | None = Field(
        default=None, min_length=1, description="Brokers to fill (add-brokers), drain "
        "(remove-brokers) or move preferred leadership away from, moving no data "
        "(demote-brokers); refused for the other goals.")
    disks: list[DiskRef] | None = Field(
        default=None, min_length=1, description="remove-disks: the log directories to empty "
        "into the other directories of their broker (no data crosses the network); refused "
        "for the other goals.")
    balance: bool = Field(default=False, description="add/remove-brokers: also balance the "
                          "other brokers in the same plan (`kraftsman plan --balance`).")
    throttle_bytes_per_second: int | None = Field(
        default=50_000_000, ge=0, le=MAX_THROTTLE_RATE, description="Replication throttle "
        "of the reassignments (bytes/s); the plan's ETA assumes it. 0: unthrottled (as "
        "`kraftsman plan --throttle 0`).")
    log_dir_throttle_bytes_per_second: int | None = Field(
        default=None, ge=1, le=MAX_THROTTLE_RATE, description="Throttle of the copies between "
        "log directories of a broker (remove-disks, or any plan on a JBOD snapshot), as "
        "`kraftsman plan --log-dir-throttle`; throttleBytesPerSecond if unset.")
    max_concurrent_moves: int = Field(default=10, ge=1, description="Partitions moving at once "
                                      "in each reassignment.")
    max_partitions_per_resource: int = Field(
        default=1000, ge=1, description="Partitions per PartitionReassignment the plan is "
        "split into.")
    spark_master: str | None = Field(
        default=None, min_length=1, description="Spark master URL the planner Job's driver "
        "connects to; unset: Spark local[*] inside the Job's pod.")
    unregister: bool = Field(
        default=False, description="remove-brokers: once a broker is Drained and its process "
        "has stopped (it is fenced), unregister it (UnregisterBroker) so that describe cluster "
        "no longer lists it. Not a planning input.")
    approval: Approval = Field(
        default="Pending", description="Pending: propose only. Approved: execute the proposal "
        "for this spec once it is ready. Rejected: execute nothing (stops a running "
        "rebalance after cancelling the reassignment in flight).")

    @model_validator(mode="after")
    def _brokers_fit_goal(self) -> KafkaRebalanceSpec:
        if self.goal in GOALS_WITH_BROKERS and self.brokers is None:
            raise ValueError(BROKERS_REQUIRED)
        if self.goal not in GOALS_WITH_BROKERS and self.brokers is not None:
            raise ValueError(f"{BROKERS_REFUSED} (goal is {self.goal})")
        if self.unregister and self.goal != "remove-brokers":
            raise ValueError(UNREGISTER_REFUSED)
        if self.brokers is not None and len(set(self.brokers)) != len(self.brokers):
            raise ValueError("spec.brokers lists a broker twice; list each broker once")
        if self.goal == "remove-disks" and self.disks is None:
            raise ValueError(DISKS_REQUIRED)
        if self.goal != "remove-disks" and self.disks is not None:
            raise ValueError(f"{DISKS_REFUSED} (goal is {self.goal})")
        pairs = [(d.broker, d.log_dir) for d in self.disks or ()]
        if len(set(pairs)) != len(pairs):
            raise ValueError("spec.disks lists a log directory twice; list each one once")
        return self


KINDS: dict[str, type[CamelModel]] = {
    "KafkaCluster": KafkaClusterSpec,
    "KafkaQuorum": KafkaQuorumSpec,
    "PartitionReassignment": PartitionReassignmentSpec,
    "LeaderElection": LeaderElectionSpec,
    "KafkaRebalance": KafkaRebalanceSpec,
}


class Resource(CamelModel):
    """A parsed custom resource: kind, name, namespace and its validated spec."""

    kind: str
    name: str
    namespace: str = "default"
    generation: int = 1
    spec: Any
    source: str = Field(default="input", exclude=True)  # the file it came from
    # metadata.annotations; `kraftsman plan` writes its goal there (kraftsman.io/plan-goal)
    annotations: dict[str, str] = Field(default_factory=dict, exclude=True)

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.name}"

    @property
    def where(self) -> str:
        """How a problem names it: the file, then kind/name."""
        return f"{self.source}: {self.key}"


TOP_LEVEL = ("apiVersion", "kind", "metadata", "spec", "status")


def _fields_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The field names (as written in YAML) of the model found at ``loc`` under ``model``."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        field = next((f for n, f in current.model_fields.items()
                      if part in (n, f.alias)), None)
        if field is None:
            return []
        current = _model_in(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or n for n, f in current.model_fields.items()]
    return []


def _model_in(annotation: Any) -> Any:
    """The pydantic model inside Optional[...] / list[...] / Annotated[...], if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is None and not isinstance(annotation, types.UnionType):
        return None
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


_THROTTLE_RANGE = f"a whole number of bytes per second from 1 to {MAX_THROTTLE_RATE}"
# The fix of a bad value, for fields whose bare constraint ("greater than or equal to 1") does
# not say what to write instead.
FIELD_FIXES = {
    ("PartitionReassignmentSpec", "spec.throttleBytesPerSecond"):
        f"give {_THROTTLE_RANGE}, or leave the field out for no throttle",
    ("KafkaRebalanceSpec", "spec.throttleBytesPerSecond"):
        f"give {_THROTTLE_RANGE}, 0 for none, or leave the field out for the default "
        "50000000",
}


def format_validation_error(where: str, err: ValidationError,
                            model: type[BaseModel] | None = None) -> list[str]:
    problems = []
    for e in err.errors():
        loc = "spec" + "".join(
            f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"]) if e["loc"] else "spec"
        msg = str(e["msg"]).removeprefix("Value error, ")
        fix = FIELD_FIXES.get((model.__name__ if model else "", loc))
        if fix is not None:
            msg = f"{msg}; {fix}"
        if e["type"] == "extra_forbidden" and e["loc"]:
            known = _fields_at(model, tuple(e["loc"][:-1])) if model is not None else []
            msg = (f"unknown field{did_you_mean(str(e['loc'][-1]), known)}"
                   + (f" (fields here: {', '.join(known)})" if known else ""))
        problems.append(f"{where}: {loc}: {msg}")
    return problems


def parse_resource(doc: Any, *, source: str = "input") -> Resource:
    """Validate one YAML document as a kraftsman resource; UsageError names every problem."""
    if not isinstance(doc, dict):
        raise UsageError(f"{source}: a resource must be a mapping, got {type(doc).__name__}")
    kind = doc.get("kind")
    meta = doc.get("metadata") or {}
    name = meta.get("name") if isinstance(meta, dict) else None
    where = f"{source}: {kind or '?'}/{name or '?'}"
    problems: list[str] = []
    if doc.get("apiVersion") != API_VERSION:
        problems.append(
            f"{where}: apiVersion must be {API_VERSION!r}, got {doc.get('apiVersion')!r}")
    if kind not in KINDS:
        problems.append(f"{where}: unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
    if not isinstance(name, str) or not name:
        problems.append(f"{where}: metadata.name is required")
    for key in doc:
        if key not in TOP_LEVEL:
            problems.append(f"{where}: {key}: unknown field{did_you_mean(str(key), TOP_LEVEL)}")
    if problems:
        raise UsageError(problems)
    assert isinstance(kind, str) and isinstance(name, str)
    spec_doc = doc.get("spec")
    if not isinstance(spec_doc, dict):
        raise UsageError(f"{where}: spec is required and must be a mapping")
    try:
        spec = KINDS[kind].model_validate(spec_doc)
    except ValidationError as e:
        raise UsageError(format_validation_error(where, e, KINDS[kind])) from None
    namespace = meta.get("namespace") or "default"
    generation = int(meta.get("generation") or 1)
    raw = meta.get("annotations")
    annotations = ({str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {})
    return Resource(kind=kind, name=name, namespace=namespace, generation=generation, spec=spec,
                    source=source, annotations=annotations)


def parse_resources(docs: Iterable[Any], *, source: str = "input") -> list[Resource]:
    """Parse every document; report all problems of all documents at once."""
    resources: list[Resource] = []
    problems: list[str] = []
    seen: set[str] = set()
    for doc in docs:
        if doc is None:
            continue
        try:
            r = parse_resource(doc, source=source)
        except UsageError as e:
            problems.extend(e.problems)
            continue
        if r.key in seen:
            problems.append(f"{source}: {r.key} appears twice; give each resource a unique name")
        seen.add(r.key)
        resources.append(r)
    if problems:
        raise UsageError(problems)
    return resources
