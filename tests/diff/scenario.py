"""Differential scenarios: one description, run on the embedded twin and on a real Kafka.

A scenario is a list of steps. Each step acts through the ``ClusterAdmin`` port (so it is the
same call on both clusters), or injects a fault the same way on both (a broker killed is
``fail_broker`` on the twin and SIGKILL on the real one), then waits for a *settle point*: a
condition on the cluster, never a time, so the twin (simulated clock) and Kafka (wall clock)
are compared at the same moment of the story. After each step the observables are recorded:
every partition of the scenario's topics (replica list in order, adding, removing, ISR,
leader, leader epoch), the reassignments listed, and the step's own results (error codes,
election results). The test compares the two records step by step.

Data matters: a move copies the partition's bytes. The scenario gives every partition the same
size on both clusters (the twin's ``sizeBytesPerPartition``; records produced into the real
one), and a throttle — set on both through the port — holds moves in flight until a step
lifts it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from controller_core.admin import ClusterAdmin
from controller_core.metadata.controller import ALTER_LOG_DIRS_RATE
from controller_core.model import ElectionType, TopicPartition

RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
REPLICA_KEYS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


@dataclass(frozen=True)
class Topic:
    name: str
    assignment: tuple[tuple[int, ...], ...]
    size_bytes: int = 0  # per partition
    configs: Mapping[str, str] = field(default_factory=dict)


class Target(Protocol):
    """A cluster a scenario runs on: the port, plus faults and waiting."""

    name: str
    admin: ClusterAdmin

    def kill_broker(self, broker: int) -> None: ...

    def log_dirs(self, broker: int) -> list[str]:
        """The broker's log directories (paths differ between the clusters; their last
        component does not)."""
        ...

    def start_broker(self, broker: int) -> None: ...

    def start_controller(self, node: int) -> None:
        """Start a controller formatted with --no-initial-controllers (an observer)."""
        ...

    def add_voter(self, node: int) -> Any:
        """AddRaftVoter for ``node``, with its controller endpoint where the cluster needs one."""
        ...

    def settle(self, what: str, done: Callable[[], bool], timeout: float) -> None:
        """Let the cluster run until ``done()``; fail naming ``what`` if it never is."""
        ...

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     assignment: Sequence[Sequence[int]] | None = None) -> Any:
        """CreateTopics of one topic: placed by the controller, or on ``assignment``;
        returns the ApiResult."""
        ...


Check = Callable[[ClusterAdmin], bool]


@dataclass(frozen=True)
class Step:
    """One action and the condition it waits for (None: none)."""

    label: str
    act: Callable[[Target], Any]
    until: Check | None = None
    timeout: float = 120.0


# -- the conditions ---------------------------------------------------------------------------
def moving(tp: TopicPartition, yes: bool = True) -> Check:
    return lambda a: (tp in a.list_partition_reassignments([tp])) == yes


def nothing_moving(a: ClusterAdmin) -> bool:
    return not a.list_partition_reassignments()


def fenced(broker: int, yes: bool = True) -> Check:
    def check(a: ClusterAdmin) -> bool:
        return any(b.id == broker and b.fenced == yes for b in a.describe_cluster().brokers)
    return check


def partition(a: ClusterAdmin, tp: TopicPartition) -> Any:
    (d,) = a.describe_partitions(partitions=[tp])
    return d


def in_isr(tp: TopicPartition, broker: int, yes: bool = True) -> Check:
    return lambda a: (broker in partition(a, tp).isr) == yes


def led_by(tp: TopicPartition, broker: int) -> Check:
    return lambda a: partition(a, tp).leader == broker


def all_of(*checks: Check) -> Check:
    return lambda a: all(c(a) for c in checks)


# -- the actions ----------------------------------------------------------------------------
def reassign(changes: Mapping[TopicPartition, Sequence[int] | None]) -> Callable[[Target], Any]:
    def act(t: Target) -> Any:
        results = t.admin.alter_partition_reassignments(
            {tp: None if r is None else list(r) for tp, r in changes.items()})
        return {str(tp): [r.error.name, r.message] for tp, r in sorted(results.items())}
    return act


def elect(kind: ElectionType, partitions: Sequence[TopicPartition] | None
          ) -> Callable[[Target], Any]:
    def act(t: Target) -> Any:
        outcome = t.admin.elect_leaders(kind, None if partitions is None else list(partitions))
        return {str(tp): [r.error.name, r.message] for tp, r in sorted(outcome.results.items())}
    return act


def throttle(rate: int | None, topics: Sequence[str], brokers: Sequence[int]
             ) -> Callable[[Target], Any]:
    """Every replica of ``topics`` throttled at ``rate`` on every broker (None: lifted)."""
    def act(t: Target) -> Any:
        value = None if rate is None else str(rate)
        changes: dict[tuple[str, str], dict[str, str | None]] = {
            ("BROKER", str(b)): dict.fromkeys(RATE_KEYS, value) for b in brokers}
        for name in topics:
            changes[("TOPIC", name)] = dict.fromkeys(REPLICA_KEYS, None if rate is None else "*")
        results = t.admin.incremental_alter_configs(changes)
        bad = {f"{k}/{n}": r.error.name for (k, n), r in results.items() if not r.ok}
        assert not bad, f"{t.name}: throttle refused: {bad}"
    return act


def registered(broker: int, yes: bool = True) -> Check:
    return lambda a: any(b.id == broker for b in a.describe_cluster().brokers) == yes


def create_topic(name: str, partitions: int, replication_factor: int,
                 assignment: Sequence[Sequence[int]] | None = None) -> Callable[[Target], Any]:
    """The result, and the brokers the topic's replicas landed on: where the controller
    places them is random in Kafka (StripedReplicaPlacer), which brokers it may use is not."""
    count = len(assignment) if assignment is not None else partitions

    def described(a: ClusterAdmin) -> list[Any]:
        return list(a.describe_partitions(topics=[name]))

    def act(t: Target) -> Any:
        r = t.create_topic(name, partitions, replication_factor, assignment)
        if r.ok:
            # CreateTopics answers once the controller committed the topic; the broker that
            # answers a describe may learn of it a moment later (a race CI lost under load)
            t.settle(f"topic {name} described with {count} partitions",
                     lambda: len(described(t.admin)) == count, 60.0)
        used = sorted({b for d in described(t.admin) for b in d.replicas})
        return [r.error.name, r.message, used]
    return act


def cordon(changes: Mapping[int, bool]) -> Callable[[Target], Any]:
    def act(t: Target) -> Any:
        return {str(b): [r.error.name, r.message]
                for b, r in sorted(t.admin.set_cordoned(dict(changes)).items())}
    return act


def unregister(broker: int) -> Callable[[Target], Any]:
    def act(t: Target) -> Any:
        r = t.admin.unregister_broker(broker)
        return [r.error.name, r.message]
    return act


def brokers_listed(t: Target) -> Any:
    """Describe cluster (fenced brokers included, KIP-1073): each broker and whether fenced."""
    return [[b.id, b.fenced] for b in t.admin.describe_cluster().brokers]


def voters_are(*nodes: int) -> Check:
    return lambda a: sorted(a.describe_quorum().current_voters) == sorted(nodes)


def observing(node: int) -> Check:
    return lambda a: any(r.replica_id == node for r in a.describe_quorum().replicas)


def _voter_words(message: str) -> str:
    """A metadata log directory's id is random at format time, and Kafka lists a voter set
    in its hash order: both are masked (ids) and sorted (the ReplicaKeys of a list)."""
    masked = re.sub(r"directoryId=[A-Za-z0-9_-]{22}", "directoryId=*", message)
    return re.sub(r"\[(ReplicaKey\(.*?\)(?:, ReplicaKey\(.*?\))*)\]",
                  lambda m: "[" + ", ".join(sorted(re.findall(r"ReplicaKey\(.*?\)",
                                                              m.group(1)))) + "]", masked)


def add_voter(node: int) -> Callable[[Target], Any]:
    def act(t: Target) -> Any:
        r = t.add_voter(node)
        return [r.error.name, _voter_words(r.message)]
    return act


def remove_voter(node: int) -> Callable[[Target], Any]:
    def act(t: Target) -> Any:
        r = t.admin.remove_raft_voter(node)
        return [r.error.name, _voter_words(r.message)]
    return act


def start_controller(node: int) -> Callable[[Target], Any]:
    return lambda t: t.start_controller(node)


def sizes_answered(tp: TopicPartition, brokers: Sequence[int]) -> Callable[[Target], Any]:
    """Which brokers answer DescribeLogDirs for their replica of ``tp`` (a dead one cannot:
    the stall watch reads progress this way). Sizes themselves depend on timing."""
    def act(t: Target) -> Any:
        return sorted(b for (_, b) in t.admin.replica_log_sizes([(tp, b) for b in brokers]))
    return act


def kill(broker: int) -> Callable[[Target], Any]:
    return lambda t: t.kill_broker(broker)


def start(broker: int) -> Callable[[Target], Any]:
    return lambda t: t.start_broker(broker)


def _replica_dirs(admin: ClusterAdmin, tp: TopicPartition, broker: int) -> list[Any]:
    """[(the directory's last path component, future?)] of ``tp`` on ``broker``."""
    dirs = admin.describe_log_dirs([broker], [tp]).get(broker, ())
    return sorted([d.path.rsplit("/", 1)[-1], r.future] for d in dirs for r in d.replicas
                  if r.tp == tp)


def copying(tp: TopicPartition, broker: int, yes: bool = True) -> Check:
    """A future replica of ``tp`` on ``broker`` (a copy between its directories)."""
    return lambda a: any(f for _, f in _replica_dirs(a, tp, broker)) == yes


def in_dir(tp: TopicPartition, broker: int, index: int | None = None
           ) -> Callable[[Target], Any]:
    """Where the replica is — in the broker's directory ``index``, or (None) in the one it
    was in when :func:`alter_dirs` first moved it — and whether each entry is a copy. (Which
    directory a new replica gets depends on the broker's other partitions, and the real Kafka
    has topics the twin has not: a scenario names directories, never assumes one.)"""
    def act(t: Target) -> Any:
        name = (t.log_dirs(broker)[index].rsplit("/", 1)[-1] if index is not None
                else _first_dirs(t)[(tp, broker)])
        return sorted([d == name, future] for d, future in _replica_dirs(t.admin, tp, broker))
    return act


def _first_dirs(t: Target) -> dict[tuple[TopicPartition, int], str]:
    """Per target, the directory each replica was in before it was first moved."""
    if not hasattr(t, "first_dirs"):
        t.first_dirs = {}  # type: ignore[attr-defined]
    return t.first_dirs  # type: ignore[attr-defined, no-any-return]


def alter_dirs(moves: Mapping[tuple[TopicPartition, int], int | str | None]
               ) -> Callable[[Target], Any]:
    """AlterReplicaLogDirs: each replica to the broker's directory of that index, to a path
    given as is, or (None) to the directory it is not in now."""
    def act(t: Target) -> Any:
        paths = {}
        for (tp, b), where in moves.items():
            if isinstance(where, int):
                paths[(tp, b)] = t.log_dirs(b)[where]
            elif where is None:
                here = {d for d, future in _replica_dirs(t.admin, tp, b) if not future}
                _first_dirs(t).setdefault((tp, b), *here)
                paths[(tp, b)] = next(p for p in t.log_dirs(b)
                                      if p.rsplit("/", 1)[-1] not in here)
            else:
                paths[(tp, b)] = where
        results = t.admin.alter_replica_log_dirs(paths)
        return {f"{tp}@{b}": r.error.name for (tp, b), r in sorted(results.items())}
    return act


def stay(tp: TopicPartition, broker: int) -> Callable[[Target], Any]:
    """AlterReplicaLogDirs to the directory the replica is in now (drops a copy)."""
    def act(t: Target) -> Any:
        here = next(d for d, future in _replica_dirs(t.admin, tp, broker) if not future)
        path = next(p for p in t.log_dirs(broker) if p.rsplit("/", 1)[-1] == here)
        r = t.admin.alter_replica_log_dirs({(tp, broker): path})[(tp, broker)]
        return r.error.name
    return act


def dir_throttle(rate: int | None, brokers: Sequence[int]) -> Callable[[Target], Any]:
    def act(t: Target) -> Any:
        results = t.admin.incremental_alter_configs({
            ("BROKER", str(b)): {ALTER_LOG_DIRS_RATE: None if rate is None else str(rate)}
            for b in brokers})
        return {n: r.error.name for (_, n), r in sorted(results.items())}
    return act


# -- running and observing ----------------------------------------------------------------------
def observe(admin: ClusterAdmin, topics: Sequence[str]) -> dict[str, Any]:
    parts = {str(d.tp): {"replicas": list(d.replicas), "isr": list(d.isr), "leader": d.leader,
                         "leaderEpoch": d.leader_epoch, "adding": list(d.adding),
                         "removing": list(d.removing)}
             for d in admin.describe_partitions(topics=list(topics))}
    ongoing = {tp: o for tp, o in admin.list_partition_reassignments().items()
               if tp.topic in topics}
    listing = {str(tp): {"replicas": list(o.replicas), "adding": list(o.adding),
                         "removing": list(o.removing)} for tp, o in ongoing.items()}
    # KIP-179's word for each replica of a move ("in sync", "behind", "offline", ...); the
    # number of messages behind depends on timing and is left out.
    status = {f"{s.tp}@{s.broker}": s.status.split(":")[0]
              for s in admin.replica_status([(tp, r) for tp, o in ongoing.items()
                                             for r in o.replicas])}
    voters = sorted(admin.describe_quorum().current_voters)
    return {"partitions": parts, "reassignments": listing, "replicaStatus": status,
            "voters": voters}


@dataclass(frozen=True)
class Scenario:
    name: str
    topics: tuple[Topic, ...]
    steps: tuple[Step, ...]
    why_unpinned: Mapping[str, str] = field(default_factory=dict)  # observable -> reason

    @property
    def topic_names(self) -> list[str]:
        return [t.name for t in self.topics]


class ScenarioFailed(AssertionError):
    """A settle point never came; ``record`` holds the steps up to it and what was seen."""

    def __init__(self, message: str, record: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.record = record


def run(scenario: Scenario, target: Target) -> list[dict[str, Any]]:
    """Each step's result and the observables at its settle point."""
    record: list[dict[str, Any]] = []
    for step in scenario.steps:
        result = step.act(target)
        until = step.until or _always
        try:
            target.settle(f"{scenario.name}: {step.label}",
                          lambda until=until: until(target.admin), step.timeout)  # type: ignore[misc]
        except AssertionError as e:
            seen = observe(target.admin, scenario.topic_names)
            record.append({"step": step.label, "result": result, **seen})
            raise ScenarioFailed(f"{e}\nseen: {seen}", record) from None
        record.append({"step": step.label, "result": result,
                       **observe(target.admin, scenario.topic_names)})
    return record


def _always(admin: ClusterAdmin) -> bool:
    return True


def differences(twin: list[dict[str, Any]], real: list[dict[str, Any]],
                ignore: Sequence[str] = ()) -> list[str]:
    """Human-readable differences, step by step (empty: the twin predicted Kafka)."""
    out: list[str] = []
    for a, b in zip(twin, real, strict=True):
        for key in ("result", "partitions", "reassignments", "replicaStatus", "voters"):
            if key in ignore:
                continue
            if a[key] != b[key]:
                out.append(f"after {a['step']!r}, {key}:\n  twin: {a[key]}\n  real: {b[key]}")
    return out
