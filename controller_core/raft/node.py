"""A sans-IO KIP-595 Raft node, shaped like etcd-io/raft.

The caller drives it: :meth:`RaftNode.step` hands it a message, :meth:`RaftNode.tick`
tells it the time; :meth:`RaftNode.ready` returns what it wants done — persist the quorum
state, truncate/append the log, fsync, *then* send messages and apply committed batches —
and :meth:`RaftNode.advance` confirms that the Ready was carried out. The node never reads a
clock, never sleeps and draws randomness only from the injected ``random.Random``.

Voter changes are single-server steps recorded as VoterAssignment control records; a
configuration is used as soon as it is appended (and reverts when truncated), a leader
appends a VoterAssignment (a step, or a new target from AlterQuorum) only once an entry of its
own epoch is committed and only when no other VoterAssignment is uncommitted (Kafka's one
voter change in flight), and walks from CurrentVoters to TargetVoters one step at a time.
"""

from __future__ import annotations

import base64
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import kafka.errors as _kerr

from controller_core.errors import (
    INCONSISTENT_CLUSTER_ID,
    INVALID_REQUEST,
    NONE,
    REQUEST_TIMED_OUT,
    ErrorCode,
    KafkaApiError,
)
from controller_core.raft.config import RaftConfig
from controller_core.raft.describe import DescribeQuorumResponse, QuorumStatus, ReplicaStatus
from controller_core.raft.log import RaftLog
from controller_core.raft.messages import (
    NO_LEADER,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    Body,
    BrokerInfo,
    DiscoverBrokersRequest,
    DiscoverBrokersResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Envelope,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteRequest,
    VoteResponse,
)
from controller_core.raft.records import Batch, LeaderChange, VoterAssignment
from controller_core.raft.snapshot import (
    RaftSnapshot,
    SnapshotDecodeError,
    SnapshotId,
    decode_snapshot,
    encode_snapshot,
)
from controller_core.raft.state import QuorumState, Role

NOT_LEADER_OR_FOLLOWER = ErrorCode.of(_kerr.NotLeaderForPartitionError)
UNKNOWN_LEADER_EPOCH = ErrorCode.of(_kerr.UnknownLeaderEpochError)
DUPLICATE_VOTER = ErrorCode.of(_kerr.DuplicateVoterError)
VOTER_NOT_FOUND = ErrorCode.of(_kerr.VoterNotFoundError)
NOT_ENOUGH_REPLICAS = ErrorCode.of(_kerr.NotEnoughReplicasError)
FENCED_LEADER_EPOCH = ErrorCode.of(_kerr.FencedLeaderEpochError)
SNAPSHOT_NOT_FOUND = ErrorCode.of(_kerr.SnapshotNotFoundError)
POSITION_OUT_OF_RANGE = ErrorCode.of(_kerr.PositionOutOfRangeError)

NEVER = 1 << 62


class NotLeaderError(KafkaApiError):
    """A proposal reached a node that is not the leader; names the leader it knows."""

    def __init__(self, node_id: int, leader_id: int | None, epoch: int) -> None:
        hint = f"the leader is node {leader_id}" if leader_id is not None else "no leader known"
        super().__init__(NOT_LEADER_OR_FOLLOWER,
                         f"node {node_id} is not the quorum leader (epoch {epoch}; {hint})")
        self.leader_id = leader_id
        self.epoch = epoch


@dataclass(frozen=True, slots=True)
class Ready:
    """What the caller must do, in this order, before handing the node anything else."""

    quorum_state: QuorumState | None  # 1. write atomically (None: unchanged)
    truncate_to: int | None  # 2. truncate the log at this offset
    appends: tuple[Batch, ...]  # 3. append
    sync: bool  # 4. fsync the log
    messages: tuple[Envelope, ...]  # 5. send
    committed: tuple[Batch, ...]  # 6. apply (the high watermark passed them)
    high_watermark: int
    snapshot: RaftSnapshot | None = None
    """1b. (after the quorum state) write this snapshot atomically, then drop the log below its
    end — all of the log if ``snapshot_reset`` (a snapshot fetched from the leader replaces
    the local log and state: the application loads it before applying ``committed``)."""
    snapshot_reset: bool = False

    @property
    def empty(self) -> bool:
        return (self.quorum_state is None and self.truncate_to is None and not self.appends
                and not self.sync and not self.messages and not self.committed
                and self.snapshot is None)


@dataclass(slots=True)
class ReplicaProgress:
    """What the leader knows of one fetcher (voter or observer)."""

    log_end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    leader_end_at_last_fetch: int = -1


@dataclass(frozen=True, slots=True)
class AlterQuorumResult:
    error: ErrorCode
    message: str
    leader_id: int
    leader_epoch: int
    current_voters: tuple[int, ...]
    target_voters: tuple[int, ...] | None

    @property
    def ok(self) -> bool:
        return self.error == NONE


@dataclass(slots=True)
class _SnapshotFetch:
    """A snapshot being fetched from the leader of ``epoch`` (KIP-630 FetchSnapshot)."""

    id: SnapshotId
    epoch: int
    leader: int
    data: bytearray = field(default_factory=bytearray)


@dataclass(slots=True)
class _Parked:
    src: int
    request: FetchRequest
    expires_ms: int


@dataclass(slots=True)
class _LeaderState:
    epoch_start_offset: int
    since_ms: int
    progress: dict[int, ReplicaProgress] = field(default_factory=dict)
    begin_acked: set[int] = field(default_factory=set)
    begin_resend_ms: int = 0
    parked: dict[int, _Parked] = field(default_factory=dict)
    flush_at_ms: int = NEVER
    last_discover_ms: int = -NEVER


def majority(n: int) -> int:
    return n // 2 + 1


class RaftNode:
    _snapshot_out: tuple[RaftSnapshot, bool] | None  # (snapshot, reset) for the next Ready

    def __init__(
        self,
        node_id: int,
        *,
        voters: Sequence[int],
        rng: random.Random,
        now_ms: int,
        config: RaftConfig | None = None,
        quorum_state: QuorumState | None = None,
        log: Iterable[Batch] = (),
        cluster_id: str | None = None,
        bootstrap_servers: Sequence[int] = (),
        host: str = "",
        port: int = 0,
        snapshot: RaftSnapshot | None = None,
    ) -> None:
        if node_id < 0:
            raise ValueError(f"node_id must be >= 0, got {node_id}")
        if len(set(voters)) != len(voters) or any(v < 0 for v in voters):
            raise ValueError(f"quorum.voters must be distinct ids >= 0, got {list(voters)}")
        self.id = node_id
        self.cfg = config or RaftConfig()
        self.rng = rng
        self.now = now_ms
        self.bootstrap_voters = tuple(sorted(voters))
        self.bootstrap_servers = tuple(s for s in bootstrap_servers if s != node_id)
        self.log = RaftLog(list(log), snapshot=None if snapshot is None else (
            snapshot.id, snapshot.config))
        self._configured_cluster_id = cluster_id
        self.qs = quorum_state or QuorumState()
        self.role = Role.UNATTACHED
        self.hw = 0
        self._durable_end = self.log.end_offset
        self._applied = 0
        self.boot_timestamp = now_ms
        self.brokers: dict[int, BrokerInfo] = {
            node_id: BrokerInfo(node_id, now_ms, host, port)}
        # output buffers
        self._out: list[Envelope] = []
        self._qs_dirty = False
        self._persisted_end = self.log.end_offset
        self._truncate_to: int | None = None
        self._sync_needed = False
        # timers (node-local ms)
        self._election_deadline = NEVER
        self._fetch_deadline = NEVER  # follower: fetch timeout
        self._last_leader_contact = -NEVER
        self._fetch_inflight_since: int | None = None
        self._next_fetch_ms = NEVER
        self._next_discover_ms = now_ms
        self._backoff_attempts = 0
        # role state
        self._votes_granted: set[int] = set()
        self._votes_rejected: set[int] = set()
        self._leader: _LeaderState | None = None
        self._end_successors: tuple[int, ...] = ()
        self._end_pending: set[int] = set()
        self._end_resend_ms = NEVER
        self._lost_leader: tuple[int, int] | None = None  # (epoch, leader) we timed out on
        self._split_seen = False  # candidate: a rival candidate of our epoch asked for votes
        self._init_snapshots(snapshot)
        self._recover_role()

    # ================================================================== public queries
    @property
    def epoch(self) -> int:
        return self.qs.epoch

    @property
    def leader_id(self) -> int | None:
        return self.qs.leader_id

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def durable_end(self) -> int:
        return self._durable_end

    def cluster_id(self) -> str | None:
        """The cluster id this node checks requests against: configured, or written by the
        first leader and *committed* (an uncommitted one may still be truncated away)."""
        if self._configured_cluster_id is not None:
            return self._configured_cluster_id
        configs = self.log.configs
        if configs and configs[0][0] < self.hw:
            return configs[0][1].cluster_id
        return None

    def voters(self) -> tuple[int, ...]:
        """Voters in force on this node: the latest configuration in its log (even uncommitted)."""
        latest = self.log.latest_config()
        return latest[1].current_voters if latest else self.bootstrap_voters

    def target_voters(self) -> tuple[int, ...] | None:
        latest = self.log.latest_config()
        return latest[1].target_voters if latest else None

    def committed_voters(self) -> tuple[int, ...]:
        """The voters of the latest configuration below this node's high watermark."""
        at = self.log.config_at(self.hw - 1) if self.hw > 0 else None
        return at[1].current_voters if at else self.bootstrap_voters

    def pending_voters(self) -> tuple[int, ...] | None:
        """Where the voters are going: the target of the latest configuration, or, while that
        configuration is not committed, its own voters (the change is not done until then)."""
        latest = self.log.latest_config()
        if latest is None:
            return None
        if latest[0] >= self.hw:
            return latest[1].target_voters or latest[1].current_voters
        return latest[1].target_voters

    @property
    def is_voter(self) -> bool:
        return self.id in self.voters()

    def role_name(self) -> str:
        if self.role in (Role.FOLLOWER, Role.UNATTACHED) and not self.is_voter:
            return "Observer"
        return self.role.value

    def next_deadline(self) -> int:
        """The earliest local time at which :meth:`tick` has something to do."""
        ls = self._leader
        if ls is not None:
            d = min(ls.flush_at_ms, self._check_quorum_deadline(ls))
            if self._begin_targets():
                d = min(d, ls.begin_resend_ms)
            for p in ls.parked.values():
                d = min(d, p.expires_ms)
            return d
        if self.role is Role.FOLLOWER:
            if self._fetch_inflight_since is not None:
                return min(self._fetch_deadline,
                           self._fetch_inflight_since + self.cfg.request_timeout_ms)
            return min(self._fetch_deadline, self._next_fetch_ms)
        d = min(self._election_deadline, self._next_discover_ms)
        if self.role is Role.RESIGNED:
            d = min(d, self._end_resend_ms)
        return d

    # ================================================================== ready / advance
    def has_ready(self) -> bool:
        return (self._qs_dirty or self._truncate_to is not None
                or self._persisted_end < self.log.end_offset or self._sync_needed
                or bool(self._out) or self._applied < self.hw
                or self._snapshot_out is not None)

    def ready(self) -> Ready:
        appends = tuple(self.log.batches_from(self._persisted_end))
        committed: tuple[Batch, ...] = ()
        if self._applied < self.hw:
            committed = tuple(b.slice(b.base_offset, self.hw)
                              for b in self.log.read(self._applied, 1 << 62)
                              if b.base_offset < self.hw)
        r = Ready(
            quorum_state=self.qs if self._qs_dirty else None,
            truncate_to=self._truncate_to,
            appends=appends,
            sync=self._sync_needed,
            messages=tuple(self._out),
            committed=committed,
            high_watermark=self.hw,
            snapshot=self._snapshot_out[0] if self._snapshot_out else None,
            snapshot_reset=self._snapshot_out[1] if self._snapshot_out else False,
        )
        self._snapshot_out = None
        self._out = []
        self._qs_dirty = False
        self._truncate_to = None
        self._persisted_end = self.log.end_offset
        self._sync_needed = False
        self._applied = self.hw
        return r

    def advance(self, ready: Ready) -> None:
        """The caller carried out ``ready`` (persisted, synced, sent)."""
        if ready.truncate_to is not None:
            self._durable_end = min(self._durable_end, ready.truncate_to)
        if ready.sync:
            end = ready.appends[-1].end_offset if ready.appends else self._durable_end
            self._durable_end = max(self._durable_end, min(end, self.log.end_offset),
                                    min(self._persisted_end, self.log.end_offset))
            if self._leader is not None:
                self._leader_update_hw()

    # ================================================================== inputs
    def tick(self, now_ms: int) -> None:
        self._set_now(now_ms)
        now = self.now
        if self.role is Role.LEADER:
            self._leader_tick(now)
            return
        if self.role is Role.FOLLOWER:
            if now >= self._fetch_deadline:
                self._on_fetch_timeout(now)
            elif self._fetch_inflight_since is not None and (
                    now >= self._fetch_inflight_since + self.cfg.request_timeout_ms):
                self._fetch_inflight_since = None
                self._send_fetch(now)
            elif self._fetch_inflight_since is None and now >= self._next_fetch_ms:
                self._send_fetch(now)
            return
        if self.role is Role.RESIGNED and now >= self._end_resend_ms:
            self._send_end_quorum(now)
        if now >= self._next_discover_ms:
            self._discover(now)
        if now >= self._election_deadline:
            self._on_election_timeout(now)

    def step(self, env: Envelope, now_ms: int) -> None:
        self._set_now(now_ms)
        b = env.body
        src = env.src
        if isinstance(b, FetchRequest):
            self._on_fetch_request(src, b)
        elif isinstance(b, FetchResponse):
            self._on_fetch_response(src, b)
        elif isinstance(b, VoteRequest):
            self._on_vote_request(src, b)
        elif isinstance(b, VoteResponse):
            self._on_vote_response(src, b)
        elif isinstance(b, BeginQuorumEpochRequest):
            self._on_begin_request(src, b)
        elif isinstance(b, BeginQuorumEpochResponse):
            self._on_begin_response(src, b)
        elif isinstance(b, EndQuorumEpochRequest):
            self._on_end_request(src, b)
        elif isinstance(b, EndQuorumEpochResponse):
            self._on_end_response(src, b)
        elif isinstance(b, DiscoverBrokersRequest):
            self._on_discover_request(src, b)
        elif isinstance(b, DiscoverBrokersResponse):
            self._on_discover_response(src, b)
        elif isinstance(b, FetchSnapshotRequest):
            self._on_fetch_snapshot_request(src, b)
        elif isinstance(b, FetchSnapshotResponse):
            self._on_fetch_snapshot_response(src, b)
        else:  # pragma: no cover - exhaustive over Body
            raise TypeError(f"unknown message {type(b).__name__}")

    def propose(self, records: Sequence[bytes], now_ms: int) -> int:
        """Append ``records`` as one batch; returns the offset of the last one.

        It is committed once the high watermark passes that offset. Raises
        :class:`NotLeaderError` on any node but the leader.
        """
        self._set_now(now_ms)
        if self.role is not Role.LEADER:
            raise NotLeaderError(self.id, self.qs.leader_id, self.qs.epoch)
        if not records:
            raise ValueError("propose: records must not be empty")
        b = Batch(self.log.end_offset, self.qs.epoch, tuple(records))
        self._leader_append(b)
        return b.end_offset - 1

    def resign(self, now_ms: int) -> None:
        """Graceful leader shutdown: EndQuorumEpoch to the voters, best successor first."""
        self._set_now(now_ms)
        if self.role is Role.LEADER:
            self._become_resigned(self.now)

    # ================================================================== admin APIs
    def describe_quorum(self, now_ms: int) -> DescribeQuorumResponse:
        self._set_now(now_ms)
        now = self.now
        leader_hint = self.qs.leader_id if self.qs.leader_id is not None else NO_LEADER
        ls = self._leader
        if ls is None:
            return DescribeQuorumResponse(NOT_LEADER_OR_FOLLOWER, leader_hint, self.qs.epoch)
        # KIP-853: the committed voters, and the pending change apart (an appended but
        # uncommitted VoterAssignment may still be truncated away)
        voters = self.committed_voters()
        target = self.pending_voters()
        leo = self.log.end_offset
        rows: list[ReplicaStatus] = []
        ordered = ([self.id] if self.id in voters else []) + [v for v in voters if v != self.id]
        observers = sorted(set(ls.progress) - set(voters) - {self.id})
        if self.id not in voters:
            observers = [self.id, *observers]
        for rid in ordered + observers:
            is_target = target is not None and rid in target
            if rid == self.id:
                rows.append(ReplicaStatus(rid, leo, 0, 0, "Leader", is_target, now, now))
                continue
            p = ls.progress.get(rid, ReplicaProgress())
            lag = leo - p.log_end_offset if p.log_end_offset >= 0 else leo
            parked = ls.parked.get(rid)
            if parked is not None and parked.request.fetch_offset >= leo:
                p.last_caught_up_ms = now  # waiting in a long poll at our log end
            caught = p.last_caught_up_ms if p.last_caught_up_ms >= 0 else ls.since_ms
            rows.append(ReplicaStatus(
                rid, p.log_end_offset, lag, max(0, now - caught),
                "Follower" if rid in voters else "Observer", is_target,
                p.last_fetch_ms, p.last_caught_up_ms))
        followers = [r for r in rows if r.status == "Follower"]
        status = QuorumStatus(
            leader_id=self.id, leader_epoch=self.qs.epoch, high_watermark=self.hw,
            max_follower_lag=max((r.lag for r in followers), default=0),
            max_follower_lag_time_ms=max((r.lag_time_ms for r in followers), default=0),
            current_voters=voters, target_voters=target, replicas=tuple(rows))
        return DescribeQuorumResponse(NONE, self.id, self.qs.epoch, status)

    def known_node_ids(self) -> set[int]:
        ids = set(self.bootstrap_voters) | set(self.brokers) | {self.id}
        for _, c in self.log.configs:
            ids |= set(c.current_voters) | set(c.target_voters or ())
        if self._leader is not None:
            ids |= set(self._leader.progress)
        return ids

    def is_live(self, node: int) -> bool:
        """Leader's view: the node is itself or fetched within the fetch timeout."""
        if node == self.id:
            return True
        ls = self._leader
        if ls is None:
            return False
        p = ls.progress.get(node)
        return p is not None and p.last_fetch_ms >= 0 and (
            self.now - p.last_fetch_ms <= self.cfg.fetch_timeout_ms)

    def alter_quorum(self, target: Sequence[int] | None, now_ms: int) -> AlterQuorumResult:
        """Set TargetVoters (``None`` or the current voters cancel); validated, or no change."""
        self._set_now(now_ms)
        voters = self.voters()

        def result(err: ErrorCode, msg: str) -> AlterQuorumResult:
            return AlterQuorumResult(
                err, msg,
                self.qs.leader_id if self.qs.leader_id is not None else NO_LEADER,
                self.qs.epoch, self.voters(), self.target_voters())

        if self.role is not Role.LEADER:
            hint = (f"node {self.qs.leader_id}" if self.qs.leader_id is not None
                    else "unknown (election in progress)")
            return result(NOT_LEADER_OR_FOLLOWER,
                          f"node {self.id} is not the quorum leader; the leader is {hint}")
        if target is not None:
            ids = list(target)
            if not ids:
                return result(INVALID_REQUEST,
                              "targetVoters is empty: give at least one voter id, or null to "
                              "cancel")
            if any((not isinstance(i, int)) or i < 0 for i in ids):
                return result(INVALID_REQUEST,
                              f"targetVoters {ids}: voter ids must be integers >= 0")
            dups = sorted({i for i in ids if ids.count(i) > 1})
            if dups:
                return result(DUPLICATE_VOTER,
                              f"targetVoters lists node id(s) {dups} more than once")
            unknown = sorted(set(ids) - self.known_node_ids())
            if unknown:
                return result(VOTER_NOT_FOUND,
                              f"targetVoters names unknown node id(s) {unknown}: the quorum has "
                              f"never heard of them (known: {sorted(self.known_node_ids())}); "
                              f"start them as observers first")
            live = sorted(i for i in ids if self.is_live(i))
            if len(live) < majority(len(ids)):
                return result(NOT_ENOUGH_REPLICAS,
                              f"targetVoters {sorted(ids)} cannot form a majority of live "
                              f"nodes: only {live} are live, {majority(len(ids))} needed")
        cancel = target is None or set(target) == set(voters)
        pending = self.target_voters()
        if cancel and pending is None:
            return result(NONE, "no voter change in progress; nothing to cancel")
        new_target = None if target is None else tuple(sorted(target))
        if not cancel and pending == new_target:
            return result(NONE, "this target is already in progress")
        in_flight = self._voter_change_in_flight()
        if in_flight is not None:
            return result(REQUEST_TIMED_OUT, in_flight)
        if cancel:
            self._append_config(voters, None)
            return result(NONE, "voter change cancelled; the current voters stay")
        assert new_target is not None
        self._append_config(voters, new_target)
        self._leader_advance_reassignment()
        return result(NONE, "target accepted; the leader walks the voters one at a time")

    def _voter_change_in_flight(self) -> str | None:
        """Why no VoterAssignment may be appended now, or None (leader only).

        Kafka's AddVoterHandler / RemoveVoterHandler.handleRemoveVoterRequest answer
        REQUEST_TIMED_OUT until the leader has committed an entry of its epoch (its high
        watermark is established, earlier leaders' changes fenced) and while the latest
        VotersRecord is uncommitted: one voter change in flight, never a second record on top
        of an uncommitted one. That keeps the configuration before an uncommitted change
        committed, which is what a node removed by that change relies on to keep campaigning
        (:meth:`_may_stand`) - without it, a leader that removed itself, appended a new target
        on top and restarted sat outside both of its last configurations with the newest log,
        and the quorum never elected again."""
        ls = self._leader
        assert ls is not None
        if self.hw <= ls.epoch_start_offset:
            return (f"node {self.id} was elected leader of epoch {self.qs.epoch} and has not "
                    f"committed an entry of its epoch yet (high watermark {self.hw}); retry")
        latest = self.log.latest_config()
        if latest is not None and latest[0] >= self.hw:
            return (f"the voter assignment at offset {latest[0]} is not committed yet (high "
                    f"watermark {self.hw}); only one voter change may be in flight; retry "
                    f"once it commits")
        return None

    # ================================================================== transitions
    def _set_now(self, now_ms: int) -> None:
        # a node's clock never runs back, even if the caller's does
        self.now = max(self.now, now_ms)

    def _persist(self, qs: QuorumState) -> None:
        if qs.epoch < self.qs.epoch:
            raise AssertionError(f"node {self.id}: epoch would go back {self.qs.epoch}->{qs.epoch}")
        if (qs.epoch == self.qs.epoch and self.qs.voted_for is not None
                and qs.voted_for != self.qs.voted_for):
            raise AssertionError(f"node {self.id}: would change its vote in epoch {qs.epoch} "
                                 f"from {self.qs.voted_for} to {qs.voted_for}")
        if qs != self.qs:
            self.qs = qs
            self._qs_dirty = True

    def _recover_role(self) -> None:
        qs = self.qs
        now = self.now
        if qs.leader_id == self.id:
            # we led this epoch before the restart; we cannot lead it again
            self.role = Role.RESIGNED
            self._end_successors = ()
            self._election_deadline = now + self._random_election_timeout()
        elif qs.leader_id is not None:
            self._become_follower(qs.epoch, qs.leader_id, now)
        elif qs.voted_for is not None:
            self.role = Role.VOTED
            self._election_deadline = now + self._random_election_timeout()
        else:
            self.role = Role.UNATTACHED
            self._election_deadline = now + self._random_election_timeout()

    def _random_election_timeout(self) -> int:
        t = self.cfg.election_timeout_ms
        return t + self.rng.randrange(t)

    def _reset_role_state(self) -> None:
        if self._leader is not None:
            # tell parked fetchers we are no longer their leader
            for p in self._leader.parked.values():
                self._reply_fetch_error(p.src, p.request, NOT_LEADER_OR_FOLLOWER)
            self._leader = None
        self._votes_granted = set()
        self._votes_rejected = set()
        self._split_seen = False
        self._fetch_inflight_since = None
        self._next_fetch_ms = NEVER
        self._fetch_deadline = NEVER
        self._election_deadline = NEVER
        self._end_resend_ms = NEVER

    def _become_unattached(self, epoch: int, now: int, election_delay: int | None = None) -> None:
        self._reset_role_state()
        # a vote cast in this epoch stays cast (Kafka's QuorumState never goes back to
        # Unattached in the same epoch): forgetting it would let us vote twice
        voted = self.qs.voted_for if epoch == self.qs.epoch else None
        self._persist(QuorumState(epoch, None, voted))
        self.role = Role.UNATTACHED
        delay = self._random_election_timeout() if election_delay is None else election_delay
        self._election_deadline = now + delay
        self._next_discover_ms = now

    def _become_voted(self, epoch: int, candidate: int, now: int) -> None:
        self._reset_role_state()
        self._persist(QuorumState(epoch, None, candidate))
        self.role = Role.VOTED
        self._election_deadline = now + self._random_election_timeout()

    def _become_follower(self, epoch: int, leader: int, now: int) -> None:
        self._reset_role_state()
        voted = self.qs.voted_for if epoch == self.qs.epoch else None
        self._persist(QuorumState(epoch, leader, voted))
        self.role = Role.FOLLOWER
        self._backoff_attempts = 0
        self._arm_fetch_timer(now)  # not leader *contact*: that needs a message from it
        self._next_fetch_ms = now
        self._next_discover_ms = NEVER

    def _touch_leader(self, now: int) -> None:
        self._last_leader_contact = now
        self._arm_fetch_timer(now)

    def _arm_fetch_timer(self, now: int) -> None:
        # KIP-595: fetch.timeout is the *maximum* silence; randomising it below that
        # keeps followers the long poll synchronised from timing out together (split votes)
        spread = min(self.cfg.election_timeout_ms, self.cfg.fetch_timeout_ms // 2)
        self._fetch_deadline = now + self.cfg.fetch_timeout_ms - self.rng.randrange(spread + 1)

    def _become_prospective(self, now: int) -> None:
        """Pre-vote (KIP-996): ask whether we could win before bumping anyone's epoch, so a
        node that is cut off or removed cannot disrupt a healthy leader."""
        keep = self.role
        self._reset_role_state()
        if keep is Role.FOLLOWER and self.qs.leader_id is not None:
            # keep it in the quorum state: clearing it would let us grant a vote in an epoch
            # that already has a leader (two leaders in one epoch)
            self._lost_leader = (self.qs.epoch, self.qs.leader_id)
        self.role = Role.PROSPECTIVE
        self._votes_granted = {self.id}
        self._election_deadline = now + self._random_election_timeout()
        self._next_discover_ms = now + self.cfg.election_timeout_ms // 4
        if self._candidate_won():
            self._become_candidate(now)
            return
        req = VoteRequest(self.cluster_id(), self.qs.epoch + 1, self.id, self.log.last_epoch,
                          self.log.end_offset, pre_vote=True)
        for v in self.voters():
            if v != self.id:
                self._send(v, req)

    def _become_candidate(self, now: int) -> None:
        self._reset_role_state()
        epoch = self.qs.epoch + 1
        self._persist(QuorumState(epoch, None, self.id))
        self.role = Role.CANDIDATE
        self._votes_granted = {self.id}
        self._election_deadline = now + self._random_election_timeout()
        self._next_discover_ms = now + self.cfg.election_timeout_ms // 4
        if self._candidate_won():
            self._become_leader(now)
            return
        req = VoteRequest(self.cluster_id(), epoch, self.id, self.log.last_epoch,
                          self.log.end_offset)
        for v in self.voters():
            if v != self.id:
                self._send(v, req)

    def _become_leader(self, now: int) -> None:
        self._reset_role_state()
        self._persist(QuorumState(self.qs.epoch, self.id, self.qs.voted_for))
        self.role = Role.LEADER
        self._backoff_attempts = 0
        ls = _LeaderState(epoch_start_offset=self.log.end_offset, since_ms=now)
        self._leader = ls
        for v in self.voters():
            if v != self.id:
                ls.progress[v] = ReplicaProgress(last_fetch_ms=-1)
        ls.last_discover_ms = now
        if self.log.cluster_id() is None:
            cid = self._configured_cluster_id or self._new_cluster_id()
            self._leader_append(Batch(self.log.end_offset, self.qs.epoch, control=VoterAssignment(
                cid, self.voters(), None)))
        self._leader_append(Batch(self.log.end_offset, self.qs.epoch, control=LeaderChange(
            self.id, self.qs.epoch, self.voters())))
        self._send_begin(now)

    def _new_cluster_id(self) -> str:
        raw = bytes(self.rng.getrandbits(8) for _ in range(16))
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def _become_resigned(self, now: int) -> None:
        ls = self._leader
        succ: list[tuple[int, int]] = []
        if ls is not None:
            for v in self.voters():
                if v != self.id:
                    p = ls.progress.get(v, ReplicaProgress())
                    succ.append((-p.log_end_offset, v))
        self._reset_role_state()
        self.role = Role.RESIGNED
        self._end_successors = tuple(v for _, v in sorted(succ))
        self._end_pending = set(self._end_successors)
        self._send_end_quorum(now)
        self._election_deadline = now + self._random_election_timeout()
        self._next_discover_ms = now + self.cfg.election_timeout_ms

    def _observe_epoch(self, epoch: int, leader: int | None, now: int) -> None:
        """A message showed ``epoch`` (and maybe its leader): move there if it is news."""
        if epoch > self.qs.epoch:
            if leader is not None and leader != self.id:
                self._become_follower(epoch, leader, now)
            else:
                self._become_unattached(epoch, now)
        elif epoch == self.qs.epoch and leader is not None and leader != self.id and (
                self.role is not Role.FOLLOWER and self.role is not Role.LEADER):
            self._become_follower(epoch, leader, now)

    # ================================================================== timers
    def _on_fetch_timeout(self, now: int) -> None:
        if self._may_stand() and self._may_campaign():
            self._become_prospective(now)
        else:
            # an observer (or a voter that knows too few peers) looks for the leader
            self._become_unattached(self.qs.epoch, now)

    def _on_election_timeout(self, now: int) -> None:
        if self.role is Role.RESIGNED:
            self._end_resend_ms = NEVER
        if self._may_stand() and self._may_campaign():
            # a candidacy that timed out asks again with a pre-vote before it bumps the epoch
            # (Kafka's pollCandidate: "Election was not granted, transitioning to
            # prospective"): a hopeless candidate (a stale log) cannot push everyone's epoch
            # past a leader that the rest of the quorum still follows
            self._become_prospective(now)
        else:
            self._election_deadline = now + self._random_election_timeout()
            self._next_discover_ms = min(self._next_discover_ms, now)

    def _may_stand(self) -> bool:
        """A voter of its latest configuration may campaign; so may one that the latest
        configuration removes while that removal is not known to be committed: it may still
        be needed to commit it (Raft thesis 4.2.2: a leader that removed itself and restarted
        before the removal reached the others). It counts only the votes of that configuration.

        The configuration before the latest is committed: no VoterAssignment is appended on
        top of an uncommitted one (:meth:`_voter_change_in_flight`). Kafka does not let such
        a node campaign at all (QuorumState.transitionToProspective/-Candidate need
        ``isVoter()`` of the latest voter set); with two voters that removal could then never
        commit once the leader restarts before the other voter has the record."""
        if self.is_voter:
            return True
        configs = self.log.configs
        if not configs or configs[-1][0] < self.hw:
            return False
        before = configs[-2][1].current_voters if len(configs) > 1 else self.bootstrap_voters
        return self.id in before

    def _may_campaign(self) -> bool:
        """KIP-595 bootstrap: vote only once connection info of a majority of voters is known."""
        voters = self.voters()
        known = sum(1 for v in voters if v in self.brokers)
        return known >= majority(len(voters))

    def _election_backoff(self) -> int:
        self._backoff_attempts += 1
        cap = self.cfg.election_backoff_max_ms
        exp = min(cap, self.cfg.retry_backoff_ms * (1 << min(self._backoff_attempts, 20)))
        return 1 + self.rng.randrange(max(1, exp))

    def _discover(self, now: int) -> None:
        targets = set(self.bootstrap_servers) | (set(self.brokers) - {self.id})
        targets |= set(self.voters()) - {self.id}
        me = self.brokers[self.id]
        req = DiscoverBrokersRequest(self.id, me.boot_timestamp, me.host, me.port)
        for t in sorted(targets):
            self._send(t, req)
        self._next_discover_ms = now + max(self.cfg.retry_backoff_ms,
                                           self.cfg.election_timeout_ms // 4)

    # ================================================================== helpers
    def _send(self, dst: int, body: Body) -> None:
        self._out.append(Envelope(self.id, dst, body))

    def _cluster_ok(self, cid: str | None) -> bool:
        mine = self.cluster_id()
        return cid is None or mine is None or cid == mine

    def _candidate_won(self) -> bool:
        voters = self.voters()
        return sum(1 for v in voters if v in self._votes_granted) >= majority(len(voters))

    def _log_up_to_date(self, last_epoch: int, end_offset: int) -> bool:
        return (last_epoch, end_offset) >= (self.log.last_epoch, self.log.end_offset)

    def _leader_hint(self) -> int:
        lid = self.qs.leader_id
        if lid is None or (lid == self.id and self.role is not Role.LEADER):
            return NO_LEADER  # we led this epoch but resigned (or restarted)
        return lid

    # ================================================================== Vote
    def _on_vote_request(self, src: int, r: VoteRequest) -> None:
        now = self.now
        if not self._cluster_ok(r.cluster_id):
            self._send(src, VoteResponse(INCONSISTENT_CLUSTER_ID, self._leader_hint(),
                                         self.qs.epoch, False, r.candidate_epoch))
            return
        if r.pre_vote:
            # never changes our state; grant if the candidate could legitimately win
            fresh_leader = (self.role is Role.LEADER or (
                self.role is Role.FOLLOWER
                and now - self._last_leader_contact < self.cfg.election_timeout_ms))
            grant = (r.candidate_epoch > self.qs.epoch and not fresh_leader
                     and self._log_up_to_date(r.last_epoch, r.last_epoch_end_offset))
            self._send(src, VoteResponse(NONE, self._leader_hint(), self.qs.epoch, grant,
                                         r.candidate_epoch, pre_vote=True))
            return
        if r.candidate_epoch < self.qs.epoch:
            self._send(src, VoteResponse(FENCED_LEADER_EPOCH, self._leader_hint(),
                                         self.qs.epoch, False, r.candidate_epoch))
            return
        if (r.candidate_epoch > self.qs.epoch and self.role is Role.FOLLOWER
                and now - self._last_leader_contact < self.cfg.election_timeout_ms):
            # leader stickiness (Raft thesis 4.2.3): our leader is alive, a stray candidate
            # (e.g. a removed voter that missed its removal) must not disrupt it
            self._send(src, VoteResponse(NONE, self._leader_hint(), self.qs.epoch, False,
                                         r.candidate_epoch))
            return
        # Raft resets the election timer only on granting a vote or hearing from a leader:
        # a hopeless candidate (stale log) bumping the epoch must not postpone our election
        keep = (self._fetch_deadline if self.role is Role.FOLLOWER
                else self._election_deadline if self.role is not Role.LEADER else NEVER)
        if r.candidate_epoch > self.qs.epoch:
            self._become_unattached(r.candidate_epoch, now)
            if keep != NEVER:
                self._election_deadline = keep
        if (self.role is Role.CANDIDATE and r.candidate_epoch == self.qs.epoch
                and r.candidate_id != self.id and not self._split_seen):
            # a rival candidate in our epoch: the vote is likely split (both voted for
            # themselves). Retry after a short jittered backoff, not a whole election timeout
            # (Kafka backs off like this once a candidacy is lost); only candidates past
            # pre-vote get here, so a healthy leader is never disturbed
            self._split_seen = True
            self._election_deadline = min(self._election_deadline, now + max(
                self.cfg.election_timeout_ms // 10, self._election_backoff()))
        grant = False
        if self.qs.voted_for == r.candidate_id and self.qs.leader_id is None:
            grant = True  # a retransmission of a request we already granted
        elif (self.role in (Role.UNATTACHED, Role.PROSPECTIVE) and self.qs.voted_for is None
              and self.qs.leader_id is None
              and self._log_up_to_date(r.last_epoch, r.last_epoch_end_offset)):
            # our own membership is not consulted (Raft thesis 4.2.3, KIP-853): a new voter
            # whose log lacks its own addition must still be able to elect; the candidate
            # counts only the votes of its voters
            grant = True
            self._become_voted(r.candidate_epoch, r.candidate_id, now)
        self._send(src, VoteResponse(NONE, self._leader_hint(), self.qs.epoch, grant,
                                     r.candidate_epoch))

    def _on_vote_response(self, src: int, r: VoteResponse) -> None:
        now = self.now
        leader = r.leader_id if r.leader_id != NO_LEADER else None
        if r.leader_epoch > self.qs.epoch or (
                r.leader_epoch == self.qs.epoch and leader is not None and leader != self.id
                and not r.vote_granted and self.role in (Role.PROSPECTIVE, Role.CANDIDATE)):
            # (if it is the leader we timed out on, the voter still hears from it: go back
            # and fetch; our fetch timer is not reset by this, only by the leader itself)
            # a (newer) leader exists: follow it instead of campaigning
            self._observe_epoch(r.leader_epoch, leader, now)
            return
        expected = Role.PROSPECTIVE if r.pre_vote else Role.CANDIDATE
        want_epoch = self.qs.epoch + 1 if r.pre_vote else self.qs.epoch
        if self.role is not expected or r.candidate_epoch != want_epoch:
            return
        if r.vote_granted:
            self._votes_granted.add(src)
            if self._candidate_won():
                if r.pre_vote:
                    self._become_candidate(now)
                else:
                    self._become_leader(now)
            return
        self._votes_rejected.add(src)
        voters = self.voters()
        rejected = sum(1 for v in voters if v in self._votes_rejected)
        if len(voters) - rejected < majority(len(voters)):
            # lost: back off (exponentially, jittered) before the next attempt
            self._election_deadline = now + self._election_backoff()

    # ================================================================== Begin / End
    def _on_begin_request(self, src: int, r: BeginQuorumEpochRequest) -> None:
        now = self.now
        if not self._cluster_ok(r.cluster_id):
            self._send(src, BeginQuorumEpochResponse(INCONSISTENT_CLUSTER_ID, self._leader_hint(),
                                                     self.qs.epoch))
            return
        if r.leader_epoch < self.qs.epoch:
            self._send(src, BeginQuorumEpochResponse(FENCED_LEADER_EPOCH, self._leader_hint(),
                                                     self.qs.epoch))
            return
        if r.leader_epoch > self.qs.epoch or self.qs.leader_id != r.leader_id:
            self._become_follower(r.leader_epoch, r.leader_id, now)
        elif self.role is Role.FOLLOWER:
            self._touch_leader(now)
        self._send(src, BeginQuorumEpochResponse(NONE, r.leader_id, r.leader_epoch))

    def _on_begin_response(self, src: int, r: BeginQuorumEpochResponse) -> None:
        if r.leader_epoch > self.qs.epoch:
            self._observe_epoch(r.leader_epoch,
                                r.leader_id if r.leader_id != NO_LEADER else None, self.now)
            return
        if self._leader is not None and r.error == NONE and r.leader_epoch == self.qs.epoch:
            self._leader.begin_acked.add(src)

    def _begin_targets(self) -> set[int]:
        """Voters to (re)send BeginQuorumEpoch to: those that never acknowledged it, and those
        not fetching any more. A voter that moved to a higher epoch (it campaigned while cut
        off) answers with that epoch and we step down; with pre-vote it could otherwise never
        win nor rejoin (Kafka's leader resends BeginQuorumEpoch to voters without a recent
        fetch; etcd-raft answers a lower-term leader for the same reason)."""
        ls = self._leader
        assert ls is not None
        return {v for v in self.voters()
                if v != self.id and (v not in ls.begin_acked or not self.is_live(v))}

    def _send_begin(self, now: int) -> None:
        ls = self._leader
        assert ls is not None
        req = BeginQuorumEpochRequest(self.cluster_id(), self.id, self.qs.epoch)
        for v in self.voters():
            if v in self._begin_targets():
                self._send(v, req)
        ls.begin_resend_ms = now + max(self.cfg.retry_backoff_ms,
                                       self.cfg.election_timeout_ms // 4)

    def _send_end_quorum(self, now: int) -> None:
        req = EndQuorumEpochRequest(self.cluster_id(), self.id, self.id, self.qs.epoch,
                                    self._end_successors)
        for v in sorted(self._end_pending):
            self._send(v, req)
        self._end_resend_ms = (now + max(self.cfg.retry_backoff_ms,
                                         self.cfg.election_timeout_ms // 4)
                               if self._end_pending else NEVER)

    def _on_end_request(self, src: int, r: EndQuorumEpochRequest) -> None:
        now = self.now
        if not self._cluster_ok(r.cluster_id):
            self._send(src, EndQuorumEpochResponse(INCONSISTENT_CLUSTER_ID, self._leader_hint(),
                                                   self.qs.epoch))
            return
        if r.leader_epoch < self.qs.epoch:
            self._send(src, EndQuorumEpochResponse(FENCED_LEADER_EPOCH, self._leader_hint(),
                                                   self.qs.epoch))
            return
        ours = self.qs.leader_id == r.leader_id and self.role is Role.FOLLOWER
        if r.leader_epoch > self.qs.epoch or ours:
            # the leader resigned: the first preferred successor campaigns at once, the
            # others wait a little longer each, everyone else a normal election timeout
            if self.id in r.preferred_successors:
                pos = r.preferred_successors.index(self.id)
                delay = self.cfg.retry_backoff_ms * (1 + 4 * pos) + self.rng.randrange(
                    self.cfg.retry_backoff_ms)
            else:
                delay = self._random_election_timeout()
            if r.leader_epoch > self.qs.epoch:
                self._become_unattached(r.leader_epoch, now, election_delay=delay)
                self._next_discover_ms = now + delay
            else:
                # same epoch: the quorum state (our vote in it) stays as it is; only the
                # election comes sooner (Kafka: FollowerState.overrideFetchTimeout)
                self._fetch_deadline = now + delay
                self._last_leader_contact = -NEVER
        self._send(src, EndQuorumEpochResponse(NONE, self._leader_hint(), self.qs.epoch))

    def _on_end_response(self, src: int, r: EndQuorumEpochResponse) -> None:
        if r.leader_epoch > self.qs.epoch:
            self._observe_epoch(r.leader_epoch,
                                r.leader_id if r.leader_id != NO_LEADER else None, self.now)
            return
        self._end_pending.discard(src)

    # ================================================================== DiscoverBrokers
    def _learn_broker(self, info: BrokerInfo) -> None:
        if info.node_id < 0 or info.node_id == self.id:
            return
        known = self.brokers.get(info.node_id)
        if known is None or info.boot_timestamp > known.boot_timestamp:
            self.brokers[info.node_id] = info

    def _on_discover_request(self, src: int, r: DiscoverBrokersRequest) -> None:
        if r.replica_id >= 0:
            self._learn_broker(BrokerInfo(r.replica_id, r.boot_timestamp, r.host, r.port))
        self._send(src, DiscoverBrokersResponse(
            NONE, self.cluster_id(), self._leader_hint(), self.qs.epoch,
            tuple(self.brokers[k] for k in sorted(self.brokers))))

    def _on_discover_response(self, src: int, r: DiscoverBrokersResponse) -> None:
        for info in r.brokers:
            self._learn_broker(info)
        if not self._cluster_ok(r.cluster_id):
            return
        leader = r.leader_id if r.leader_id != NO_LEADER else None
        if r.leader_epoch > self.qs.epoch:
            # also how a zombie leader learns it was replaced
            self._observe_epoch(r.leader_epoch, leader, self.now)
        elif (r.leader_epoch == self.qs.epoch and leader is not None
              and self.role in (Role.UNATTACHED, Role.VOTED)):
            self._become_follower(r.leader_epoch, leader, self.now)

    # ================================================================== Fetch (follower)
    def _send_fetch(self, now: int) -> None:
        leader = self.qs.leader_id
        if leader is None:
            return
        if self._continue_snapshot_fetch(leader, now):
            return
        self._send(leader, FetchRequest(self.cluster_id(), self.id, self.qs.epoch,
                                        self.log.end_offset, self.log.last_epoch,
                                        self.cfg.fetch_max_bytes))
        self._fetch_inflight_since = now
        self._next_fetch_ms = NEVER

    def _on_fetch_response(self, src: int, r: FetchResponse) -> None:
        now = self.now
        leader = r.leader_id if r.leader_id != NO_LEADER else None
        if r.leader_epoch > self.qs.epoch:
            self._observe_epoch(r.leader_epoch, leader, now)
            return
        if self.role is not Role.FOLLOWER or src != self.qs.leader_id:
            return
        if r.error != NONE:
            if r.leader_epoch == self.qs.epoch and leader is not None and leader != src:
                self._become_follower(r.leader_epoch, leader, now)
                return
            self._fetch_inflight_since = None
            self._next_fetch_ms = now + self.cfg.retry_backoff_ms
            return
        if r.leader_epoch != self.qs.epoch or (
                r.fetch_offset != self.log.end_offset
                or r.last_fetched_epoch != self.log.last_epoch):
            return  # stale or duplicated answer to an older fetch
        self._fetch_inflight_since = None
        self._touch_leader(now)
        if r.snapshot_id is not None:
            self._start_snapshot_fetch(src, r.snapshot_id, now)
            return
        if r.diverging:
            _, own_end = self.log.end_offset_for_epoch(r.diverging_epoch)
            cut = min(r.diverging_end_offset, own_end)
            if cut < self.hw:
                raise AssertionError(
                    f"node {self.id}: leader {src} asked to truncate to {cut} below the "
                    f"high watermark {self.hw}")
            self._truncate(cut)
        else:
            for b in r.batches:
                if b.base_offset < self.log.end_offset:
                    if b.end_offset <= self.log.end_offset:
                        continue
                    b = b.slice(self.log.end_offset, b.end_offset)
                self.log.append(b)
                self._sync_needed = True
            new_hw = min(r.high_watermark, self.log.end_offset)
            if new_hw > self.hw:
                self.hw = new_hw
        self._next_fetch_ms = now

    def _truncate(self, offset: int) -> None:
        if offset >= self.log.end_offset:
            return
        self.log.truncate(offset)
        if offset < self._persisted_end:
            self._truncate_to = (offset if self._truncate_to is None
                                 else min(self._truncate_to, offset))
            self._persisted_end = offset
        self._durable_end = min(self._durable_end, offset)
        self._sync_needed = True

    # ================================================================== Fetch (leader)
    def _reply_fetch_error(self, src: int, r: FetchRequest, err: ErrorCode) -> None:
        self._send(src, FetchResponse(err, self._leader_hint(), self.qs.epoch, self.hw,
                                      fetch_offset=r.fetch_offset,
                                      last_fetched_epoch=r.last_fetched_epoch))

    def _on_fetch_request(self, src: int, r: FetchRequest) -> None:
        if not self._cluster_ok(r.cluster_id):
            self._reply_fetch_error(src, r, INCONSISTENT_CLUSTER_ID)
            return
        if r.leader_epoch < self.qs.epoch:
            self._reply_fetch_error(src, r, FENCED_LEADER_EPOCH)
            return
        if r.leader_epoch > self.qs.epoch:
            self._reply_fetch_error(src, r, UNKNOWN_LEADER_EPOCH)
            return
        ls = self._leader
        if ls is None:
            self._reply_fetch_error(src, r, NOT_LEADER_OR_FOLLOWER)
            return
        now = self.now
        ls.begin_acked.add(src)
        ls.parked.pop(src, None)
        if self._fetch_needs_snapshot(r):
            self._reply_snapshot_id(src, r)
            return
        if r.fetch_offset > 0:
            found, end = self.log.end_offset_for_epoch(r.last_fetched_epoch)
            if found != r.last_fetched_epoch or end < r.fetch_offset:
                self._send(src, FetchResponse(
                    NONE, self.id, self.qs.epoch, self.hw, (), found, end,
                    r.fetch_offset, r.last_fetched_epoch))
                return
        p = ls.progress.setdefault(src, ReplicaProgress())
        if r.fetch_offset >= self.log.end_offset:
            p.last_caught_up_ms = now
        elif p.leader_end_at_last_fetch >= 0 and r.fetch_offset >= p.leader_end_at_last_fetch:
            p.last_caught_up_ms = max(p.last_caught_up_ms, p.last_fetch_ms)
        p.log_end_offset = r.fetch_offset
        p.last_fetch_ms = now
        p.leader_end_at_last_fetch = self.log.end_offset
        self._leader_update_hw()
        if self._leader is None:
            return  # resigned while updating (removed itself)
        if r.fetch_offset >= self.log.end_offset and r.fetch_offset >= self.hw:
            # nothing to send: park (long poll) until data arrives or max wait passes;
            # an answer is due at once if the fetcher lags the high watermark
            ls.parked[src] = _Parked(src, r, now + self.cfg.fetch_max_wait_ms)
            return
        self._answer_fetch(src, r)

    def _answer_fetch(self, src: int, r: FetchRequest) -> None:
        if self._fetch_needs_snapshot(r):
            self._reply_snapshot_id(src, r)  # we took a snapshot while it was parked
            return
        batches = tuple(self.log.read(r.fetch_offset, r.max_bytes))
        self._send(src, FetchResponse(NONE, self.id, self.qs.epoch, self.hw, batches,
                                      fetch_offset=r.fetch_offset,
                                      last_fetched_epoch=r.last_fetched_epoch))

    def _wake_parked(self, only_expired: bool) -> None:
        ls = self._leader
        if ls is None or not ls.parked:
            return
        for src, p in list(ls.parked.items()):
            if not only_expired or self.now >= p.expires_ms:
                del ls.parked[src]
                self._answer_fetch(src, p.request)

    # ================================================================== snapshots (KIP-630)
    def _init_snapshots(self, snapshot: RaftSnapshot | None) -> None:
        self._snapshot = snapshot
        self._snapshot_bytes: dict[SnapshotId, bytes] = {}  # encoded, to serve FetchSnapshot
        self._snapshot_out = None
        self._snap_fetch: _SnapshotFetch | None = None
        if snapshot is not None:
            # a snapshot holds committed state only, and the application has loaded it
            self.hw = self._applied = snapshot.end_offset

    @property
    def snapshot(self) -> RaftSnapshot | None:
        """The latest snapshot (the log starts at its end)."""
        return self._snapshot

    @property
    def log_start_offset(self) -> int:
        return self.log.start_offset

    def create_snapshot(self, end_offset: int, records: Sequence[bytes]) -> RaftSnapshot:
        """The application's state at ``end_offset`` (everything below it applied) becomes a
        snapshot; the log below it is dropped (RaftClient.createSnapshot, then
        ReplicatedLog.deleteBeforeSnapshot). Only committed state can be snapshotted."""
        if end_offset > min(self.hw, self._applied):
            raise ValueError(f"node {self.id}: cannot snapshot at {end_offset}: only offsets up "
                             f"to the applied high watermark {min(self.hw, self._applied)} are "
                             f"committed")
        if end_offset <= self.log.start_offset:
            raise ValueError(f"node {self.id}: a snapshot at {end_offset} is not newer than the "
                             f"log start {self.log.start_offset}")
        sid = SnapshotId(end_offset, self.log.epoch_at(end_offset - 1))
        config = self.log.compact(sid)
        snap = RaftSnapshot(sid, config, tuple(records))
        self._persisted_end = max(self._persisted_end, end_offset)
        self._keep_snapshot(snap, reset=False)
        return snap

    def _keep_snapshot(self, snap: RaftSnapshot, *, reset: bool) -> None:
        self._snapshot = snap
        # the previous one stays servable for a FetchSnapshot already under way
        self._snapshot_bytes = {k: v for k, v in self._snapshot_bytes.items()
                                if k == max(self._snapshot_bytes)}
        pending_reset = self._snapshot_out is not None and self._snapshot_out[1]
        self._snapshot_out = (snap, reset or pending_reset)

    def _fetch_needs_snapshot(self, r: FetchRequest) -> bool:
        """Kafka's ReplicatedLog.validateOffsetAndEpoch (SNAPSHOT) and the empty-log shortcut
        of KafkaRaftClient.tryCompleteFetchRequest."""
        sid = self.log.snapshot_id
        if sid is None:
            return False
        start = self.log.start_offset
        return (r.fetch_offset == 0 or r.fetch_offset < start
                or (r.fetch_offset == start and r.last_fetched_epoch != sid.epoch)
                or r.last_fetched_epoch < sid.epoch)

    def _reply_snapshot_id(self, src: int, r: FetchRequest) -> None:
        ls = self._leader
        assert ls is not None and self.log.snapshot_id is not None
        p = ls.progress.setdefault(src, ReplicaProgress())
        p.last_fetch_ms = self.now  # alive (check quorum), though its log end is unknown
        self._send(src, FetchResponse(NONE, self.id, self.qs.epoch, self.hw,
                                      fetch_offset=r.fetch_offset,
                                      last_fetched_epoch=r.last_fetched_epoch,
                                      snapshot_id=self.log.snapshot_id))

    def _snapshot_data(self, sid: SnapshotId) -> bytes | None:
        data = self._snapshot_bytes.get(sid)
        if data is None and self._snapshot is not None and self._snapshot.id == sid:
            data = self._snapshot_bytes[sid] = encode_snapshot(self._snapshot)
        return data

    def _on_fetch_snapshot_request(self, src: int, r: FetchSnapshotRequest) -> None:
        """Leader: a chunk of a snapshot (KafkaRaftClient.handleFetchSnapshotRequest)."""
        def error(err: ErrorCode) -> None:
            self._send(src, FetchSnapshotResponse(err, self._leader_hint(), self.qs.epoch,
                                                  r.snapshot_id))
        if not self._cluster_ok(r.cluster_id):
            error(INCONSISTENT_CLUSTER_ID)
            return
        if r.current_leader_epoch < self.qs.epoch:
            error(FENCED_LEADER_EPOCH)
            return
        if r.current_leader_epoch > self.qs.epoch:
            error(UNKNOWN_LEADER_EPOCH)
            return
        ls = self._leader
        if ls is None:
            error(NOT_LEADER_OR_FOLLOWER)
            return
        ls.begin_acked.add(src)
        ls.progress.setdefault(src, ReplicaProgress()).last_fetch_ms = self.now
        data = self._snapshot_data(r.snapshot_id)
        if data is None:
            error(SNAPSHOT_NOT_FOUND)
            return
        if not 0 <= r.position <= len(data):
            error(POSITION_OUT_OF_RANGE)
            return
        chunk = data[r.position:r.position + max(1, r.max_bytes)]
        self._send(src, FetchSnapshotResponse(NONE, self.id, self.qs.epoch, r.snapshot_id,
                                              len(data), r.position, chunk))

    def _start_snapshot_fetch(self, leader: int, sid: SnapshotId, now: int) -> None:
        sf = self._snap_fetch
        if sf is None or (sf.id, sf.epoch, sf.leader) != (sid, self.qs.epoch, leader):
            self._snap_fetch = _SnapshotFetch(sid, self.qs.epoch, leader)
        self._send_fetch_snapshot(now)

    def _continue_snapshot_fetch(self, leader: int, now: int) -> bool:
        """A fetch of a snapshot from this leader is under way: ask for its next chunk."""
        sf = self._snap_fetch
        if sf is None:
            return False
        if (sf.epoch, sf.leader) != (self.qs.epoch, leader):
            self._snap_fetch = None  # a new leader: start again with a Fetch
            return False
        self._send_fetch_snapshot(now)
        return True

    def _send_fetch_snapshot(self, now: int) -> None:
        sf = self._snap_fetch
        assert sf is not None
        self._send(sf.leader, FetchSnapshotRequest(self.cluster_id(), self.id, self.qs.epoch,
                                                   sf.id, len(sf.data), self.cfg.fetch_max_bytes))
        self._fetch_inflight_since = now
        self._next_fetch_ms = NEVER

    def _on_fetch_snapshot_response(self, src: int, r: FetchSnapshotResponse) -> None:
        """Follower (KafkaRaftClient.handleFetchSnapshotResponse): append the chunk; once the
        snapshot is whole, verify and install it and go on fetching from its end."""
        now = self.now
        leader = r.leader_id if r.leader_id != NO_LEADER else None
        if r.leader_epoch > self.qs.epoch:
            self._observe_epoch(r.leader_epoch, leader, now)
            return
        sf = self._snap_fetch
        if (self.role is not Role.FOLLOWER or src != self.qs.leader_id or sf is None
                or r.leader_epoch != self.qs.epoch or r.snapshot_id != sf.id):
            return
        if r.error != NONE:
            if leader is not None and leader != src:
                self._become_follower(r.leader_epoch, leader, now)
                return
            # SNAPSHOT_NOT_FOUND / POSITION_OUT_OF_RANGE: the leader has a newer snapshot
            self._snap_fetch = None
            self._fetch_inflight_since = None
            self._next_fetch_ms = now + self.cfg.retry_backoff_ms
            return
        if r.position != len(sf.data):
            return  # a duplicate or a late answer to an earlier chunk
        self._fetch_inflight_since = None
        self._touch_leader(now)
        sf.data += r.data
        if len(sf.data) < r.size and r.data:
            self._send_fetch_snapshot(now)
            return
        self._snap_fetch = None
        self._next_fetch_ms = now
        try:
            snap = decode_snapshot(bytes(sf.data), f"snapshot {sf.id} from leader {src}")
        except SnapshotDecodeError:
            return  # damaged in transit: fetch again, from a Fetch
        if snap.id != sf.id or len(sf.data) != r.size:
            return
        self._install_snapshot(snap)

    def _install_snapshot(self, snap: RaftSnapshot) -> None:
        end = snap.end_offset
        if end <= self.log.start_offset:
            return
        if end <= self.log.end_offset and self.log.epoch_at(end - 1) == snap.id.epoch:
            # our log holds the snapshot's last entry: by Log Matching it holds the prefix
            self.log.compact(snap.id)
            self._persisted_end = max(self._persisted_end, end)
            self._keep_snapshot(snap, reset=False)
        else:
            # ReplicatedLog.truncateToLatestSnapshot: nothing of our log is committed beyond
            # what the snapshot holds (our entry at end-1 differs or is missing), so drop it all
            self.log.reset_to_snapshot(snap.id, snap.config)
            self._persisted_end = end
            self._durable_end = end
            self._truncate_to = None
            self._keep_snapshot(snap, reset=True)
        self.hw = max(self.hw, end)
        self._applied = max(self._applied, end)

    # ================================================================== leader internals
    def _leader_append(self, b: Batch) -> None:
        ls = self._leader
        assert ls is not None
        self.log.append(b)
        ls.flush_at_ms = min(ls.flush_at_ms, self.now + self.cfg.leader_flush_delay_ms)
        self._wake_parked(only_expired=False)

    def _append_config(self, current: Sequence[int], target: Sequence[int] | None) -> None:
        cid = self.log.cluster_id()
        assert cid is not None
        self._leader_append(Batch(self.log.end_offset, self.qs.epoch, control=VoterAssignment(
            cid, tuple(sorted(current)), None if target is None else tuple(sorted(target)))))

    def _leader_update_hw(self) -> None:
        ls = self._leader
        if ls is None:
            return
        voters = self.voters()
        matches = sorted(
            (self._durable_end if v == self.id else
             ls.progress.get(v, ReplicaProgress()).log_end_offset for v in voters),
            reverse=True)
        candidate = matches[majority(len(voters)) - 1]
        # only once an entry of our own epoch is committed (Raft 5.4.2 / KIP-595)
        if candidate > self.hw and candidate > ls.epoch_start_offset:
            self.hw = candidate
            self._wake_parked(only_expired=False)
            self._leader_after_commit()

    def _leader_after_commit(self) -> None:
        latest = self.log.latest_config()
        if latest is not None and latest[0] < self.hw and self.id not in latest[1].current_voters:
            # we removed ourselves and the removal is committed: hand over
            self._become_resigned(self.now)
            return
        self._leader_advance_reassignment()

    def _check_quorum_deadline(self, ls: _LeaderState) -> int:
        return ls.last_discover_ms + self.cfg.fetch_timeout_ms

    def _leader_tick(self, now: int) -> None:
        ls = self._leader
        assert ls is not None
        if now >= ls.flush_at_ms:
            ls.flush_at_ms = NEVER
            if self.log.end_offset > self._durable_end:
                self._sync_needed = True
        self._wake_parked(only_expired=True)
        if now >= ls.begin_resend_ms and self._begin_targets():
            self._send_begin(now)
        if now >= self._check_quorum_deadline(ls):
            # zombie check: without fetches from a majority within the fetch timeout, ask
            # around for a newer epoch (DiscoverBrokers); we step down once we hear of one
            heard = sum(1 for v in self.voters() if self.is_live(v) and (
                v == self.id or ls.progress[v].last_fetch_ms >= now - self.cfg.fetch_timeout_ms))
            if heard < majority(len(self.voters())):
                self._discover(now)
                ls.last_discover_ms = now - self.cfg.fetch_timeout_ms + self.cfg.election_timeout_ms
            else:
                ls.last_discover_ms = now
        self._leader_advance_reassignment()

    def _caught_up(self, node: int) -> bool:
        ls = self._leader
        assert ls is not None
        p = ls.progress.get(node)
        return (p is not None and p.log_end_offset >= self.hw and p.last_caught_up_ms >= 0
                and self.now - p.last_caught_up_ms <= self.cfg.fetch_timeout_ms
                and self.is_live(node))

    def _leader_advance_reassignment(self) -> None:
        """Take the next single-server step from CurrentVoters towards TargetVoters."""
        ls = self._leader
        if ls is None or self.hw <= ls.epoch_start_offset:
            return  # Ongaro's fix: first commit an entry of our own epoch
        latest = self.log.latest_config()
        if latest is None or latest[0] >= self.hw:
            return  # one change in flight at a time
        target = latest[1].target_voters
        if target is None:
            return
        cur = list(latest[1].current_voters)
        adds = sorted(n for n in target if n not in cur)
        removes = [n for n in cur if n not in target]
        new: list[int] | None = None
        ready_adds = [n for n in adds if self._caught_up(n)]
        if ready_adds and (len(cur) <= len(target) or not removes):
            new = [*cur, ready_adds[0]]
        elif removes and (len(cur) > len(target) or not adds):
            def removal_order(n: int) -> tuple[int, int, int, int]:
                p = ls.progress.get(n, ReplicaProgress())
                return (n == self.id, self.is_live(n), p.log_end_offset, n)
            new = [n for n in cur if n != min(removes, key=removal_order)]
        if new is None:
            return
        live = sum(1 for n in new if self.is_live(n))
        if live < majority(len(new)):
            return  # the step would leave no live majority: wait
        self._append_config(new, None if set(new) == set(target) else target)
