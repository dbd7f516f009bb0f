"""The `status` of each kraftsman.io custom resource — what `kubectl get/describe` shows.

Conditions follow the Kubernetes API conventions (a list keyed by `type`; status
True/False/Unknown; CamelCase reason; lastTransitionTime changes only when status does).
Each kind also carries the figures of the matching Kafka tool. Per-partition detail is
capped (failures first) so a status stays far below the object size limit at 100,000
partitions; the full detail comes from the CLI.

The CRD status schemas are generated from these models, so every field here is public API:
add fields freely, rename none.
"""

from __future__ import annotations

import datetime as dt
import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

R = TypeVar("R")

# Condition types.
READY = "Ready"
SUCCEEDED = "Succeeded"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
STALLED = "Stalled"  # a PartitionReassignment's moves copy nothing (spec.stalledAfterSeconds)

ConditionStatus = Literal["True", "False", "Unknown"]
REASON_PATTERN = r"^[A-Z][A-Za-z0-9]*$"

# Detail lists in a status never hold more than this many entries.
DETAIL_CAP = 100
# Continuous leader election keeps this many past runs.
RUN_HISTORY_CAP = 10
# Hard ceiling a status must stay below (the API object limit is 1.5 MiB).
STATUS_BUDGET_BYTES = 256 * 1024
# While an operation runs, its status says at least this often that the operator is alive.
HEARTBEAT_SECONDS = 60
_OPERATION_STATE = ("The operator's resume state (compressed; private bookkeeping, not an API: "
                    "do not edit).")


class StatusModel(BaseModel):
    """Base of status models: camelCase on the wire, unknown fields ignored when read back."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def to_wire(self) -> dict[str, Any]:
        """The JSON-able dict to patch into `.status` (camelCase keys)."""
        return self.model_dump(by_alias=True, mode="json", exclude_none=True)


def parse_rfc3339(text: str | None) -> float | None:
    """Seconds since the epoch of a Kubernetes `Time`, or None when absent or malformed."""
    if not text:
        return None
    try:
        return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=dt.UTC).timestamp()
    except ValueError:
        return None


def now_rfc3339(clock: Callable[[], float] | None = None) -> str:
    """A Kubernetes `Time`: RFC 3339, UTC, whole seconds."""
    t = dt.datetime.now(dt.UTC) if clock is None else dt.datetime.fromtimestamp(clock(), dt.UTC)
    return t.replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


class Condition(StatusModel):
    """One observation of the resource's state (Kubernetes `metav1.Condition`)."""

    type: str = Field(description="Condition type: Ready, Succeeded, Progressing or Degraded.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(pattern=REASON_PATTERN, description="CamelCase machine-readable reason.")
    message: str = Field(default="", description="Human-readable detail, naming the fix.")
    last_transition_time: str = Field(description="When status last changed (RFC 3339).")
    observed_generation: int = Field(default=0, ge=0, description="Generation this is about.")


def set_condition(
    conditions: Sequence[Condition],
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    *,
    generation: int,
    now: str,
) -> list[Condition]:
    """Return the conditions with `type_` set; lastTransitionTime moves only on a status change.

    Pure: the input list is not modified. The order of existing types is kept; a new type is
    appended.
    """
    out: list[Condition] = []
    found = False
    for c in conditions:
        if c.type != type_:
            out.append(c)
            continue
        found = True
        when = c.last_transition_time if c.status == status else now
        out.append(Condition(type=type_, status=status, reason=reason, message=message,
                             last_transition_time=when, observed_generation=generation))
    if not found:
        out.append(Condition(type=type_, status=status, reason=reason, message=message,
                             last_transition_time=now, observed_generation=generation))
    return out


def get_condition(conditions: Iterable[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


class BaseStatus(StatusModel):
    observed_generation: int = Field(default=0, ge=0, description="metadata.generation handled.")
    conditions: list[Condition] = Field(default_factory=list, description="Current conditions.")
    phase: str | None = Field(default=None, description="Summary for `kubectl get` only; "
                              "automation should read conditions.")
    cluster: str | None = Field(default=None, description="Name of the KafkaCluster acted on.")
    last_reconcile_time: str | None = Field(
        default=None, description="When the operator last looked at this resource (RFC 3339); "
        f"refreshed at least every {HEARTBEAT_SECONDS} s while it works on it, so a stalled "
        "operator shows.")
    # written by kopf's diff-base storage (handlers/diffbase.py), never by a status write
    handled_digest: str | None = Field(
        default=None, exclude=True, max_length=64,
        description="SHA-256 of the spec, labels and annotations the operator last handled "
        "(how it tells a change from a status write).")

    def condition(self, type_: str) -> Condition | None:
        return get_condition(self.conditions, type_)

    def with_condition(
        self, type_: str, status: ConditionStatus, reason: str, message: str, *,
        generation: int, now: str,
    ) -> None:
        """Set one condition in place (see :func:`set_condition`)."""
        self.conditions = set_condition(self.conditions, type_, status, reason, message,
                                        generation=generation, now=now)


# ---------------------------------------------------------------- KafkaCluster

class AutoRebalanceStatus(StatusModel):
    """Where spec.autoRebalance.addBrokers stands."""

    rebalance: str | None = Field(default=None, description="The last KafkaRebalance created "
                                  "for newly registered brokers.")
    brokers: list[int] = Field(default_factory=list, description="The brokers it adds.")
    waiting_brokers: list[int] = Field(
        default_factory=list, description="New brokers no KafkaRebalance covers yet (waiting "
        "for the previous one to finish, for a valid template, or for a create to succeed).")
    message: str | None = Field(default=None, description="What the policy waits for.")


class KafkaClusterStatus(BaseStatus):
    backend: Literal["embedded", "kafka"] | None = Field(default=None, description="Backend.")
    cluster_id: str | None = Field(default=None, description="The cluster's id "
                                   "(DescribeCluster).")
    brokers: int | None = Field(default=None, ge=0, description="Registered brokers.")
    fenced_brokers: int | None = Field(default=None, ge=0, description="Fenced brokers.")
    topics: int | None = Field(default=None, ge=0, description="Topics.")
    partitions: int | None = Field(default=None, ge=0, description="Partitions.")
    under_replicated_partitions: int | None = Field(
        default=None, ge=0, description="Under-replicated partitions (KIP-352: fewer in-sync "
        "replicas than the replicas minus those being added; a healthy move is not one).")
    offline_partitions: int | None = Field(
        default=None, ge=0, description="Partitions without a leader.")
    quorum_leader_id: int | None = Field(default=None, description="Active controller id.")
    referenced_by: list[str] = Field(
        default_factory=list, description="Kind/name of resources that use this cluster "
        f"(at most {DETAIL_CAP}).")
    known_brokers: list[int] | None = Field(
        default=None, description="Broker ids seen registered (DescribeCluster). "
        "spec.autoRebalance.addBrokers compares each pass's registered brokers with these: "
        "the first observation only records them; a broker that unregisters leaves the set.")
    auto_rebalance: AutoRebalanceStatus | None = Field(
        default=None, description="spec.autoRebalance: the last KafkaRebalance created and "
        "the new brokers still waiting for one.")


# ---------------------------------------------------------------- KafkaQuorum

class QuorumReplica(StatusModel):
    """One row of `kafka-metadata-quorum describe --replication`."""

    node_id: int
    log_end_offset: int = Field(ge=-1)
    lag: int = Field(ge=0)
    lag_time_ms: int | None = Field(default=None, ge=0, description="LagTimeMs: since the "
                                    "replica last caught up with the leader.")
    last_fetch_timestamp: int | None = Field(default=None, description="ms since the epoch.")
    last_caught_up_timestamp: int | None = Field(default=None, description="ms since the epoch.")
    status: Literal["Leader", "Follower", "Observer"]


class KafkaQuorumStatus(BaseStatus):
    """The figures of `kafka-metadata-quorum describe --status`, plus the voter plan."""

    cluster_id: str | None = None
    leader_id: int | None = Field(default=None, description="LeaderId.")
    leader_epoch: int | None = Field(default=None, ge=0, description="LeaderEpoch.")
    high_watermark: int | None = Field(default=None, ge=-1, description="HighWatermark.")
    max_follower_lag: int | None = Field(default=None, ge=0, description="MaxFollowerLag.")
    max_follower_lag_time_ms: int | None = Field(
        default=None, ge=0, description="MaxFollowerLagTimeMs.")
    current_voters: list[int] = Field(default_factory=list, description="CurrentVoters.")
    current_observers: list[int] = Field(default_factory=list, description="CurrentObservers.")
    target_voters: list[int] = Field(default_factory=list, description="spec.voters being "
                                     "walked to.")
    next_step: str | None = Field(default=None, description="The voter change in flight.")
    replicas: list[QuorumReplica] = Field(
        default_factory=list, description=f"describe --replication (at most {DETAIL_CAP}).")


# ---------------------------------------------------------------- PartitionReassignment

PartitionState = Literal["Pending", "Moving", "Done", "Failed", "Cancelled", "RolledBack"]
# Order in which capped detail is kept: failures first.
_STATE_PRIORITY = {"Failed": 0, "Moving": 1, "Pending": 2, "Cancelled": 3, "RolledBack": 3,
                   "Done": 4}


class PartitionProgress(StatusModel):
    """One partition of a reassignment, as `kafka-reassign-partitions --verify` reports it."""

    topic: str
    partition: int = Field(ge=0)
    state: PartitionState
    current_replicas: list[int] = Field(default_factory=list)
    target_replicas: list[int] = Field(default_factory=list)
    adding_replicas: list[int] = Field(default_factory=list)
    removing_replicas: list[int] = Field(default_factory=list)
    bytes_to_move: int | None = Field(default=None, ge=0)
    bytes_moved: int | None = Field(default=None, ge=0)
    error: str | None = Field(default=None, description="Kafka error name, e.g. "
                              "UNKNOWN_TOPIC_OR_PARTITION.")
    message: str | None = None


class ReassignmentCounts(StatusModel):
    total: int = Field(default=0, ge=0)
    done: int = Field(default=0, ge=0)
    moving: int = Field(default=0, ge=0)
    pending: int = Field(default=0, ge=0)
    failed: int = Field(default=0, ge=0)
    cancelled: int = Field(default=0, ge=0)


class ReassignmentPlanSummary(StatusModel):
    """What a dry run (or the plan of a real run) moves."""

    replica_movements: int = Field(default=0, ge=0, description="Replicas added anywhere.")
    leader_movements: int = Field(default=0, ge=0, description="Partitions whose preferred "
                                  "leader changes.")
    bytes_to_move: int = Field(default=0, ge=0)
    estimated_seconds: float | None = Field(default=None, ge=0, description="At the throttle "
                                            "or the brokers' replication rate.")
    brokers_added: list[int] = Field(default_factory=list, description="Brokers gaining replicas.")
    brokers_removed: list[int] = Field(default_factory=list, description="Brokers losing replicas.")


class PartitionReassignmentStatus(BaseStatus):
    counts: ReassignmentCounts = Field(default_factory=ReassignmentCounts)
    # Flat copies of the counts printer columns read.
    moving: int = Field(default=0, ge=0, description="Partitions moving now.")
    done: int = Field(default=0, ge=0, description="Partitions done.")
    bytes_to_move: int = Field(default=0, ge=0, description="Bytes the whole plan copies.")
    bytes_moved: int = Field(default=0, ge=0, description="Bytes copied so far.")
    percent: float = Field(default=0.0, ge=0, le=100, description="Done, by bytes (by "
                           "partitions when sizes are unknown).")
    progress: str = Field(default="0%", description="percent, for printer columns.")
    eta_seconds: float | None = Field(default=None, ge=0, description="Estimated time left.")
    stalled_moves: int = Field(default=0, ge=0, description="Moves in flight whose adding "
                               "replicas copied nothing for spec.stalledAfterSeconds (the "
                               "Stalled condition names them).")
    throttle_bytes_per_second: int | None = Field(default=None, ge=1, description="Throttle "
                                                  "in force.")
    plan: ReassignmentPlanSummary | None = Field(default=None, description="The plan (dry run "
                                                 "and real runs).")
    started_at: str | None = None
    completed_at: str | None = None
    batches_completed: int = Field(default=0, ge=0, description="Passes in which moves "
                                   "completed (a BatchDone event each).")
    warnings: list[str] = Field(default_factory=list, description="Plan warnings: replication "
                                "factor changes, a throttle too low for a sensible ETA.")
    operation_state: str | None = Field(default=None, description=_OPERATION_STATE)
    partitions: list[PartitionProgress] = Field(
        default_factory=list,
        description=f"Per-partition detail, failures first, at most {DETAIL_CAP} entries.")
    partitions_omitted: int = Field(default=0, ge=0, description="Entries left out of "
                                    "`partitions`; see `kraftsman reassignments --verify`.")

    def set_progress(
        self, rows: Iterable[PartitionProgress], *, cap: int = DETAIL_CAP,
    ) -> None:
        """Fill counts, byte figures and the capped detail from every partition's row."""
        c = {"Pending": 0, "Moving": 0, "Done": 0, "Failed": 0, "Cancelled": 0, "RolledBack": 0}
        sizes = [0, 0]  # bytes to move, bytes moved (never more than the row's size)

        def tally(all_rows: Iterable[PartitionProgress]) -> Iterator[PartitionProgress]:
            for row in all_rows:
                c[row.state] += 1
                if row.bytes_to_move is not None:
                    sizes[0] += row.bytes_to_move
                    sizes[1] += min(row.bytes_moved or 0, row.bytes_to_move)
                yield row

        kept = _smallest(cap, tally(rows), _row_order)
        total = sum(c.values())
        counts = ReassignmentCounts(total=total, done=c["Done"], moving=c["Moving"],
                                    pending=c["Pending"], failed=c["Failed"],
                                    cancelled=c["Cancelled"] + c["RolledBack"])
        self.counts = counts
        self.moving, self.done = counts.moving, counts.done
        self.bytes_to_move, self.bytes_moved = sizes[0], sizes[1]
        if sizes[0] > 0:  # by bytes when sizes are known (then at most 100: moved <= size)
            pct = 100.0 * sizes[1] / sizes[0]
        else:
            pct = 100.0 * counts.done / total if total else 0.0
        self.percent = round(pct, 1)
        self.progress = f"{self.percent:g}%"
        self.partitions = kept
        self.partitions_omitted = total - len(kept)


def _smallest(cap: int, rows: Iterator[R], key: Callable[[R], Any]) -> list[R]:
    """The `cap` first rows in `key` order; always consumes every row (they are counted)."""
    if cap <= 0:
        for _ in rows:  # counted as they go by
            pass
        return []
    return heapq.nsmallest(cap, rows, key=key)


def _row_order(row: PartitionProgress) -> tuple[int, str, int]:
    return (_STATE_PRIORITY[row.state], row.topic, row.partition)


# ---------------------------------------------------------------- LeaderElection

ElectionOutcome = Literal["Elected", "NotNeeded", "Failed"]
_OUTCOME_PRIORITY = {"Failed": 0, "Elected": 1, "NotNeeded": 2}


class ElectionResult(StatusModel):
    """One partition's result, as `kafka-leader-election` prints it."""

    topic: str
    partition: int = Field(ge=0)
    result: ElectionOutcome
    leader: int | None = Field(default=None, description="Leader after the election.")
    error: str | None = Field(default=None, description="Kafka error name, e.g. "
                              "ELECTION_NOT_NEEDED or PREFERRED_LEADER_NOT_AVAILABLE.")
    message: str | None = None


class ElectionCounts(StatusModel):
    total: int = Field(default=0, ge=0)
    elected: int = Field(default=0, ge=0)
    not_needed: int = Field(default=0, ge=0)
    failed: int = Field(default=0, ge=0)


class ElectionRun(StatusModel):
    """One run of a Continuous election."""

    time: str
    imbalance_percent: float = Field(ge=0, le=100)
    elected: int = Field(default=0, ge=0)
    failed: int = Field(default=0, ge=0)


class LeaderElectionStatus(BaseStatus):
    election_type: Literal["PREFERRED", "UNCLEAN"] | None = None
    run_id: str | None = Field(default=None, description="spec.runId of the last run.")
    counts: ElectionCounts = Field(default_factory=ElectionCounts)
    elected: int = Field(default=0, ge=0, description="Partitions whose leader changed.")
    failed: int = Field(default=0, ge=0, description="Partitions that could not be elected.")
    results: list[ElectionResult] = Field(
        default_factory=list, description=f"Per-partition results, failures first, at most "
        f"{DETAIL_CAP} entries.")
    results_omitted: int = Field(default=0, ge=0)
    completed_at: str | None = None
    imbalance_percent: float | None = Field(default=None, ge=0, le=100, description="Share of "
                                            "partitions not led by their preferred replica.")
    last_run_time: str | None = None
    runs: int = Field(default=0, ge=0, description="Continuous: runs so far.")
    recent_runs: list[ElectionRun] = Field(
        default_factory=list, description=f"Continuous: the last {RUN_HISTORY_CAP} runs.")
    operation_state: str | None = Field(default=None, description=_OPERATION_STATE)

    def set_results(self, rows: Iterable[ElectionResult], *, cap: int = DETAIL_CAP) -> None:
        """Fill counts and the capped per-partition results (failures first)."""
        counts = {"Elected": 0, "NotNeeded": 0, "Failed": 0}

        def tally(all_rows: Iterable[ElectionResult]) -> Iterator[ElectionResult]:
            for row in all_rows:
                counts[row.result] += 1
                yield row

        kept = _smallest(cap, tally(rows), _result_order)
        total = sum(counts.values())
        self.counts = ElectionCounts(total=total, elected=counts["Elected"],
                                     not_needed=counts["NotNeeded"], failed=counts["Failed"])
        self.elected, self.failed = counts["Elected"], counts["Failed"]
        self.results = kept
        self.results_omitted = total - len(kept)

    def record_run(self, run: ElectionRun) -> None:
        self.runs += 1
        self.last_run_time = run.time
        self.recent_runs = [*self.recent_runs, run][-RUN_HISTORY_CAP:]


def _result_order(r: ElectionResult) -> tuple[int, str, int]:
    return (_OUTCOME_PRIORITY[r.result], r.topic, r.partition)


# ---------------------------------------------------------------- KafkaRebalance

class BalanceFigure(StatusModel):
    """max/mean of one load over the brokers that stay (1.0 is perfectly even)."""

    before: float = Field(ge=0)
    after: float = Field(ge=0)


class ProposalFigures(StatusModel):
    """The proposal's figures, from the planner's summary.json."""

    goal: str = Field(description="The goal as the planner read it.")
    partitions_in_plan: int = Field(default=0, ge=0, description="Partitions that move.")
    partitions_total: int = Field(default=0, ge=0, description="Partitions in the cluster.")
    replicas_to_move: int = Field(default=0, ge=0, description="Replicas copied.")
    bytes_to_move: int = Field(default=0, ge=0, description="Bytes copied.")
    replicas_to_move_between_dirs: int | None = Field(
        default=None, ge=0, description="JBOD: replicas copied between log directories of "
        "their broker (no network); unset when the snapshot has no log directories.")
    bytes_to_move_between_dirs: int | None = Field(
        default=None, ge=0, description="JBOD: bytes copied between log directories of their "
        "broker, apart from bytesToMove.")
    estimated_seconds: float | None = Field(default=None, ge=0, description="At the throttle, "
                                            "reassignments one after another.")
    throttle_bytes_per_second: int | None = Field(default=None, description="Throttle the ETA "
                                                  "assumes.")
    resources: int = Field(default=0, ge=0, description="PartitionReassignments to create.")
    balance: dict[str, BalanceFigure] = Field(
        default_factory=dict, description="max/mean before and after, by load: replicas, "
        "leaders, disk_bytes, ...")
    violations: list[str] = Field(default_factory=list, description=f"Constraints the plan "
                                  f"does not meet (at most {DETAIL_CAP}).")
    targets_not_reached: list[str] = Field(default_factory=list, description=f"Shortfalls (at "
                                           f"most {DETAIL_CAP}).")
    fingerprint: str | None = Field(default=None, description="Assignment fingerprint the "
                                    "plan was computed from (staleness check).")
    created_at: str | None = Field(default=None, description="When the planner ran.")
    sources: dict[str, str] = Field(default_factory=dict, description="Where each input "
                                    "figure came from.")


ReassignmentStep = Literal["Pending", "Created", "Completed", "Failed", "Cancelled"]


class RebalanceStep(StatusModel):
    """One PartitionReassignment of the proposal: its name, where its document is, how far."""

    name: str
    config_map: str = Field(description="The part ConfigMap holding its document.")
    key: str = Field(description="The document's key in that ConfigMap.")
    state: ReassignmentStep = "Pending"


RemovedBrokerState = Literal["Draining", "Cordoned", "Drained", "NotDrained",
                             "WaitingForShutdown", "Unregistered"]


class RemovedBroker(StatusModel):
    """remove-brokers: one broker being taken out, and where it stands (docs/rebalance.md,
    Removing brokers)."""

    id: int
    state: RemovedBrokerState = Field(description="Draining (not cordoned: the cluster is too "
                                      "old, or the cordon was refused), Cordoned, Drained (no "
                                      "replica, leads nothing), NotDrained, WaitingForShutdown "
                                      "(spec.unregister: its process still runs), Unregistered.")
    message: str = ""


class KafkaRebalanceStatus(BaseStatus):
    proposal_id: int = Field(default=0, ge=0, description="Counter of proposals (1, 2, ...); "
                             "the Job and ConfigMaps of the current one carry it.")
    plan_digest: str | None = Field(default=None, description="Digest of the spec fields the "
                                    "current proposal was made for.")
    job: str | None = Field(default=None, description="namespace/name of the planner Job of "
                            "the current proposal.")
    proposal_config_map: str | None = Field(default=None, description="The index ConfigMap of "
                                            "the current proposal.")
    proposal: ProposalFigures | None = Field(default=None, description="The figures of the "
                                             "current proposal.")
    # Flat copies for printer columns.
    moves: int | None = Field(default=None, ge=0, description="Replicas the proposal copies.")
    data: str | None = Field(default=None, description="Bytes the proposal copies, readable.")
    eta: str | None = Field(default=None, description="Estimated duration, readable "
                            "(h:mm:ss).")
    decided_by: str | None = Field(default=None, description="What approved or rejected the "
                                   "proposal: spec.approval or the kraftsman.io/rebalance "
                                   "annotation.")
    approved_at: str | None = None
    steps: list[RebalanceStep] = Field(default_factory=list, description="The "
                                       "PartitionReassignments of the proposal, in apply order.")
    current: str | None = Field(default=None, description="The PartitionReassignment running.")
    current_progress: str | None = Field(default=None, description="Its status.progress.")
    progress: str | None = Field(default=None, description="Reassignments completed/total.")
    completed_at: str | None = None
    brokers: list[RemovedBroker] = Field(default_factory=list, description="remove-brokers: "
                                         "each broker being removed and where it stands.")
    cordon: str | None = Field(default=None, description="remove-brokers: why the brokers were "
                               "not cordoned (the cluster's metadata.version), if so.")


STATUS_MODELS: dict[str, type[BaseStatus]] = {
    "KafkaCluster": KafkaClusterStatus,
    "KafkaQuorum": KafkaQuorumStatus,
    "PartitionReassignment": PartitionReassignmentStatus,
    "LeaderElection": LeaderElectionStatus,
    "KafkaRebalance": KafkaRebalanceStatus,
}

# Which condition says "done/healthy" for each kind.
PRIMARY_CONDITION: dict[str, str] = {
    "KafkaCluster": READY,
    "KafkaQuorum": READY,
    "PartitionReassignment": SUCCEEDED,
    "LeaderElection": SUCCEEDED,
    "KafkaRebalance": READY,
}

S = TypeVar("S", bound=BaseStatus)


def read_status(model: type[S], raw: Any) -> S:
    """Parse a status read from the API server; garbage yields an empty status, not a crash."""
    if not isinstance(raw, Mapping):  # kopf passes a read-only mapping view
        return model()
    try:
        return model.model_validate(dict(raw))
    except ValueError:
        return model()
