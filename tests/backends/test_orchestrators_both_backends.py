"""The orchestrators, unchanged, on both backends: the embedded cluster in-process, and the
``kafka`` backend (kafka-python) against ``cluster serve`` of the same cluster.

For the kafka backend the server's simulated clock runs at 50x wall time; tests poll the
orchestrator with a deadline — never a fixed sleep standing in for the core.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from controller_core import errors
from controller_core.admin import ClusterAdmin
from controller_core.backends import KafkaAdmin, RetryPolicy, open_kafka_admin
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.errors import KafkaApiError
from controller_core.model import ElectionType
from controller_core.orchestration import throttles as throttles_mod
from controller_core.orchestration.election import run_election
from controller_core.orchestration.reassignment import (
    Limits,
    Phase,
    Progress,
    ReassignmentExecutor,
    ReassignmentPlan,
)
from tests.helpers import cluster, configs_in, tp
from tests.serve.harness import served

RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
FOLLOWER = "follower.replication.throttled.replicas"


@dataclass
class Backend:
    admin: ClusterAdmin
    cluster: EmbeddedCluster
    run: Callable[[Callable[[], object]], object]  # touch the cluster safely
    tick: Callable[[], None]  # let time pass (simulated directly, or wall time for serve)


@pytest.fixture(params=["embedded", "kafka"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    c = cluster(tmp_path / "c")
    if request.param == "embedded":
        yield Backend(c, c, lambda fn: fn(), lambda: c.advance(1.0))
        return
    with served(c, time_scale=50) as s:
        opened = open_kafka_admin(s.bootstrap, retry=RetryPolicy(total_seconds=10))

        def checked_sleep(seconds: float) -> None:  # a crashed server fails the test at once
            s.check()
            time.sleep(seconds)

        admin = KafkaAdmin(opened.client, opened.bootstrap_servers, retry=opened.retry,
                           sleep=checked_sleep)
        try:
            yield Backend(admin, c, s.call, lambda: checked_sleep(0.02))
        finally:
            admin.close()


def within(b: Backend, simulated: float, wall: float = 30.0) -> Callable[[], bool]:
    """True while less than ``simulated`` seconds of cluster time (and ``wall`` seconds) have
    passed: a cluster that does not do what the test waits for fails it after that much
    cluster time, instead of after a wall-clock budget sized for a loaded machine."""
    now = lambda: b.run(lambda: b.cluster.now)  # noqa: E731
    sim_end, wall_end = now() + simulated, time.monotonic() + wall
    return lambda: now() < sim_end and time.monotonic() < wall_end


def drive(b: Backend, ex: ReassignmentExecutor, simulated: float = 600.0) -> Progress:
    """Step ``ex`` to the end; the plans here finish within 150 s of cluster time."""
    running = within(b, simulated)
    while True:
        p = ex.step()
        if p.phase.terminal:
            return p
        assert running(), f"not finished within {simulated} s of cluster time: {p}"
        b.tick()


def spread_plan(b: Backend, limits: Limits, **kw: bool) -> ReassignmentPlan:
    moves = [(d.tp, [r + 3 for r in d.replicas])
             for d in b.admin.describe_partitions(["orders"])]
    plan, problems = ReassignmentPlan.from_moves(moves, limits=limits, **kw)
    assert not problems
    return plan


def throttles(b: Backend) -> dict[tuple[str, str], dict[str, str]]:
    res = [("BROKER", str(i)) for i in range(6)] + [("TOPIC", "orders")]
    return {r: v for r, v in b.admin.describe_configs(res).items() if v}


def test_plan_runs_to_completion_with_throttles_placed_and_removed(backend: Backend) -> None:
    plan = spread_plan(backend, Limits(throttle_bytes_per_second=5_000_000,
                                       max_concurrent_moves=2), elect_preferred_leaders=True)
    ex = ReassignmentExecutor(backend.admin, plan)
    assert ex.start() == []
    ex.step()
    placed = throttles(backend)
    # the rates, and no config of kraftsman's own: the marker saying kraftsman placed them is
    # a record of its topic (orchestration/throttles.py)
    assert placed[("BROKER", "3")] == dict.fromkeys(RATE_KEYS, "5000000")
    assert FOLLOWER in placed[("TOPIC", "orders")]
    markers = throttles_mod.placed(backend.admin)
    assert markers[3].rate == "5000000" and {e.side for e in markers[3].entries} == {"F"}
    # the concurrency limit: two started, and no more on the cluster. (Not "exactly two
    # there": the served cluster's clock runs at 50x wall time, so on a busy machine a
    # move can finish between the step and this look.)
    assert len(ex.moving) == 2 and len(backend.admin.list_partition_reassignments()) <= 2
    p = drive(backend, ex)
    assert p.phase is Phase.COMPLETED and p.done == 6 and p.failed == 0
    assert throttles(backend) == {}  # every throttle it placed is gone
    assert configs_in(backend.admin) == {}  # and nothing else of kraftsman's on any resource
    assert throttles_mod.placed(backend.admin) == {}  # nor a live marker
    for d in backend.admin.describe_partitions(["orders"]):
        assert set(d.replicas) <= {3, 4, 5} and d.leader == d.replicas[0]
    assert backend.admin.list_partition_reassignments() == {}


def test_cancel_rolls_back(backend: Backend) -> None:
    plan = spread_plan(backend, Limits(throttle_bytes_per_second=100_000,
                                       max_concurrent_moves=3))
    ex = ReassignmentExecutor(backend.admin, plan)
    assert ex.start() == []
    ex.step()
    assert backend.admin.list_partition_reassignments()
    ex.cancel()
    p = drive(backend, ex)
    assert p.phase is Phase.CANCELLED and p.cancelled == 6
    assert backend.admin.list_partition_reassignments() == {}
    assert throttles(backend) == {}
    for d in backend.admin.describe_partitions(["orders"]):
        assert set(d.replicas) == {0, 1, 2}


def test_plan_problems_are_reported_per_partition(backend: Backend) -> None:
    plan, _ = ReassignmentPlan.from_moves([(tp("orders", 0), [0, 0, 1]),
                                           (tp("orders", 1), [9, 1, 2]),
                                           (tp("ghost", 0), [1])])
    problems = {p.tp: p.error for p in ReassignmentExecutor(backend.admin, plan).start()}
    assert problems == {tp("orders", 0): errors.INVALID_REPLICA_ASSIGNMENT,
                        tp("orders", 1): errors.INVALID_REPLICA_ASSIGNMENT,
                        tp("ghost", 0): errors.UNKNOWN_TOPIC_OR_PARTITION}


def test_alter_results_match_spec(backend: Backend) -> None:
    a = backend.admin
    out = a.alter_partition_reassignments({tp("orders", 0): None, tp("orders", 1): [],
                                           tp("nope", 0): [1]})
    assert out[tp("orders", 0)].error == errors.NO_REASSIGNMENT_IN_PROGRESS
    assert out[tp("orders", 1)].error == errors.INVALID_REPLICA_ASSIGNMENT
    assert out[tp("nope", 0)].error == errors.UNKNOWN_TOPIC_OR_PARTITION
    assert out[tp("orders", 1)].message  # a message a person can act on crosses the wire


def test_elections(backend: Backend) -> None:
    report = run_election(backend.admin, ElectionType.PREFERRED, topics=["orders", "ghost"])
    assert report.not_needed == 6 and report.unknown_topics == ("ghost",)
    backend.run(lambda: backend.cluster.fail_broker(2))
    running = within(backend, 120)  # fenced after broker.session.timeout.ms (9 s)
    while next(d for d in backend.admin.describe_partitions(partitions=[tp("orders", 2)])
               ).leader == 2:
        assert running()
        if isinstance(backend.admin, KafkaAdmin):
            backend.tick()
        else:
            backend.cluster.advance(5)
    report = run_election(backend.admin, ElectionType.PREFERRED, partitions=[tp("orders", 2)])
    assert report.results[tp("orders", 2)].error == errors.PREFERRED_LEADER_NOT_AVAILABLE
    backend.run(lambda: backend.cluster.restore_broker(2))
    running = within(backend, 300)  # 2 catches up 10 MB at 1 MB/s and rejoins the ISR
    while True:
        report = run_election(backend.admin, ElectionType.PREFERRED,
                              partitions=[tp("orders", 2)])
        if report.elected == 1:
            break
        assert running(), report.results
        if isinstance(backend.admin, KafkaAdmin):
            backend.tick()
        else:
            backend.cluster.advance(5)
    d = next(iter(backend.admin.describe_partitions(partitions=[tp("orders", 2)])))
    assert d.leader == 2
    everything = run_election(backend.admin, ElectionType.PREFERRED)
    # ReplicationControlManager.electLeaders: with no set, ELECTION_NOT_NEEDED is left out;
    # orders-5 (preferred 2, like orders-2) is the one left to elect
    assert everything.attempted_all and set(everything.results) == {tp("orders", 5)}


def test_kafka_backend_errors_name_the_bootstrap_servers(tmp_path: Path) -> None:
    with pytest.raises(KafkaApiError) as e:
        open_kafka_admin("127.0.0.1:1", retry=RetryPolicy(total_seconds=1.0))
    assert "127.0.0.1:1" in str(e.value) and e.value.error.name == "NETWORK_EXCEPTION"


def test_a_failed_connect_leaves_no_client_thread_behind() -> None:
    """kafka-python starts its IO thread before bootstrapping; a failed bootstrap must stop it
    (else each failed connect leaks a thread, and a later fork, such as mutmut's, can hang)."""
    def io_threads() -> list[str]:
        return [t.name for t in threading.enumerate() if t.name.startswith("kafka-io-")]

    before = io_threads()
    with pytest.raises(KafkaApiError):
        open_kafka_admin("127.0.0.1:1", retry=RetryPolicy(total_seconds=0.5),
                         client_id="kraftsman-failed-connect")
    assert "kafka-io-kraftsman-failed-connect" not in io_threads()
    assert io_threads() == before
