"""The reassignment executor with log directories named (KIP-113) on the embedded twin: a
replica copied between two directories of its broker, a replica added straight into a named
directory, the log-dir throttle set while they copy and restored after, cancel, a broker
down, a resumed run, and the plan problems."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from controller_core import errors
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.errors import ApiResult
from controller_core.metadata.controller import ALTER_LOG_DIRS_RATE
from controller_core.model import TopicPartition
from controller_core.orchestration import log_dir_moves, throttles
from controller_core.orchestration.log_dir_moves import Placement
from controller_core.orchestration.reassignment import (
    ExecutorState,
    Limits,
    Phase,
    ReassignmentExecutor,
    ReassignmentPlan,
    dry_run,
)
from controller_core.orchestration.stall import StalledMove, StallWatch, describe
from tests.core.test_jbod import current_dir, dirs_of, jbod
from tests.helpers import PassThrough, drive, tp

T0, T1 = tp("orders", 0), tp("orders", 1)  # [0, 1, 2] and [1, 2, 0], 10 MB each
MB = 1_000_000


def other_dir(c: EmbeddedCluster, broker: int, t: TopicPartition) -> str:
    return next(d for d in dirs_of(broker) if d != current_dir(c, broker, t))


def plan(moves: dict[TopicPartition, tuple[list[int], list[str]]],
         throttle: int | None = None) -> ReassignmentPlan:
    p, problems = ReassignmentPlan.from_moves(
        [(t, r) for t, (r, _) in moves.items()], limits=Limits(throttle, 10),
        log_dirs={t: d for t, (_, d) in moves.items()})
    assert problems == []
    return p


def futures(c: EmbeddedCluster, broker: int, t: TopicPartition) -> list[str]:
    return [d.path for d in c.describe_log_dirs([broker], [t])[broker]
            for r in d.replicas if r.tp == t and r.future]


def rate(c: EmbeddedCluster, broker: int) -> str | None:
    return c.describe_configs([("BROKER", str(broker))])[("BROKER", str(broker))].get(
        ALTER_LOG_DIRS_RATE)


def test_a_replica_moves_into_another_directory_of_its_broker_throttled(tmp_path: Path) -> None:
    c = jbod(tmp_path)
    dest = other_dir(c, 0, T0)
    ex = ReassignmentExecutor(c, plan({T0: ([0, 1, 2], [dest, "any", "any"])}, 500_000))
    assert ex.start() == []
    p = ex.step()
    assert p.phase is Phase.RUNNING and p.moving == 1 and p.bytes_total == 10 * MB
    assert futures(c, 0, T0) == [dest]
    assert rate(c, 0) == "500000" and rate(c, 1) is None  # only where it copies
    marker = throttles.placed(c, [0])[0]
    assert {e.side for e in marker.entries} == {throttles.LOG_DIR_SIDE}
    assert c.describe_configs([("TOPIC", "orders")])[("TOPIC", "orders")] == {}  # no L/F
    c.advance(10)
    p = ex.step()
    assert 4 * MB <= p.bytes_moved <= 6 * MB, p  # 500 kB/s for 10 s
    p = drive(c, ex)
    assert p.phase is Phase.COMPLETED and p.done == 1 and p.bytes_moved == 10 * MB
    assert current_dir(c, 0, T0) == dest and futures(c, 0, T0) == []
    assert rate(c, 0) is None and throttles.placed(c) == {}
    assert c.image.partition(T0).replicas == (0, 1, 2)  # type: ignore[union-attr]


def test_a_replica_added_on_another_broker_lands_in_its_named_directory(tmp_path: Path) -> None:
    c = jbod(tmp_path)
    named = dirs_of(3)[2]
    ex = ReassignmentExecutor(c, plan({T0: ([0, 1, 3], ["any", "any", named])}))
    assert ex.start() == []
    p = drive(c, ex)
    assert p.phase is Phase.COMPLETED, p
    assert c.image.partition(T0).replicas == (0, 1, 3)  # type: ignore[union-attr]
    assert current_dir(c, 3, T0) == named


def test_a_replica_created_elsewhere_is_asked_into_its_directory_again(tmp_path: Path) -> None:
    """The broker forgot the directory it was asked for (it restarted before the replica
    came): the replica is created where the broker likes, then copied where the plan says."""
    c = jbod(tmp_path)
    named = dirs_of(3)[2]
    ex = ReassignmentExecutor(c, plan({T0: ([0, 1, 3], ["any", "any", named])}))
    assert ex.start() == []
    ex.step()
    c.fail_broker(3)  # its remembered directories go with it
    c.advance(5)
    c.restore_broker(3)
    p = drive(c, ex)
    assert p.phase is Phase.COMPLETED, p
    assert current_dir(c, 3, T0) == named


def test_cancel_drops_the_copies_and_restores_the_rate(tmp_path: Path) -> None:
    c = jbod(tmp_path)
    here = current_dir(c, 0, T0)
    ex = ReassignmentExecutor(c, plan({T0: ([0, 1, 2], [other_dir(c, 0, T0), "any", "any"]),
                                       T1: ([1, 2, 3], ["any", "any", dirs_of(3)[1]])},
                                      400_000))
    assert ex.start() == []
    ex.step()
    c.advance(3)
    ex.step()
    assert futures(c, 0, T0)
    ex.cancel()
    p = drive(c, ex)
    assert p.phase is Phase.CANCELLED and p.cancelled == 2, p
    assert current_dir(c, 0, T0) == here and futures(c, 0, T0) == []
    assert c.image.partition(T1).replicas == (1, 2, 0)  # type: ignore[union-attr]
    assert rate(c, 0) is None and throttles.placed(c) == {}


def test_a_broker_down_holds_its_copy_until_it_is_back(tmp_path: Path) -> None:
    c = jbod(tmp_path)
    dest = other_dir(c, 0, T0)
    ex = ReassignmentExecutor(c, plan({T0: ([0, 1, 2], [dest, "any", "any"])}))
    assert ex.start() == []
    ex.step()
    c.fail_broker(0)
    for _ in range(60):
        p = ex.step()
        c.advance(1)
    assert p.phase is Phase.RUNNING and p.moving == 1 and p.failed == 0, p
    c.restore_broker(0)
    p = drive(c, ex)
    assert p.phase is Phase.COMPLETED and current_dir(c, 0, T0) == dest, p


def test_a_resumed_run_finishes_the_copy_once(tmp_path: Path) -> None:
    c = jbod(tmp_path)
    dest = other_dir(c, 0, T0)
    the_plan = plan({T0: ([0, 1, 2], [dest, "any", "any"])}, 1_000_000)
    ex = ReassignmentExecutor(c, the_plan)
    assert ex.start() == []
    ex.step()
    c.advance(4)
    ex.step()
    saved = ExecutorState.model_validate(ex.state.model_dump())
    again = ReassignmentExecutor(c, the_plan, saved)
    assert again.start() == []
    p = drive(c, again)
    assert p.phase is Phase.COMPLETED and p.done == 1 and p.bytes_moved == 10 * MB, p
    assert current_dir(c, 0, T0) == dest and rate(c, 0) is None


def test_a_partition_already_in_its_directories_is_done_at_once(tmp_path: Path) -> None:
    c = jbod(tmp_path)
    ex = ReassignmentExecutor(c, plan({T0: ([0, 1, 2], [current_dir(c, 0, T0), "any",
                                                        "any"])}))
    assert ex.start() == []
    p = ex.step()
    assert p.phase is Phase.COMPLETED and p.done == 1 and p.bytes_total == 0, p


def test_a_directory_the_broker_lacks_is_a_plan_problem(tmp_path: Path) -> None:
    c = jbod(tmp_path)
    ex = ReassignmentExecutor(c, plan({T0: ([0, 1, 3], ["/nope", "any", "any"])}))
    [problem] = ex.start()
    assert problem.error == errors.LOG_DIR_NOT_FOUND
    assert problem.message == (f"orders-0: broker 0 has no log directory '/nope'; its log "
                               f"directories are {dirs_of(0)} (or give \"any\")")
    assert c.list_partition_reassignments() == {} and futures(c, 0, T0) == []


def test_log_dirs_not_one_per_replica_is_a_plan_problem() -> None:
    _, [problem] = ReassignmentPlan.from_moves([(T0, [0, 1, 2])],
                                               log_dirs={T0: ["/a", "any"]})
    assert problem.error == errors.INVALID_REQUEST
    assert "log_dirs has 2 entries for 3 replicas" in problem.message


@pytest.mark.parametrize("second_topic", ["orders", "audit"])
def test_another_runs_log_dir_entry_stays_while_its_broker_copies(
        tmp_path: Path, second_topic: str) -> None:
    """Two runs: one copies orders-0 between directories of broker 0, the other moves
    partition 1 of the same topic or of another over the network; the second ending must
    not take the first one's log-dir rate away — and once the first ends, nothing of either
    is left."""
    c = jbod(tmp_path, topics=[
        {"name": t, "partitions": 6, "replicationFactor": 3, "sizeBytesPerPartition": 10 * MB,
         "assignment": [[0, 1, 2], [1, 2, 0], [2, 0, 1]] * 2} for t in ("orders", "audit")])
    first = ReassignmentExecutor(c, plan({T0: ([0, 1, 2], [other_dir(c, 0, T0), "any",
                                                           "any"])}, 200_000))
    assert first.start() == []
    first.step()
    # unthrottled, the second ends long before the first (10 MB at 1 MB/s, not 200 kB/s)
    second_plan, _ = ReassignmentPlan.from_moves([(tp(second_topic, 1), [1, 2, 3])],
                                                 limits=Limits(None, 10), additional=True)
    second = ReassignmentExecutor(c, second_plan)
    assert second.start() == []
    for _ in range(100):
        p = second.step()
        first.step()
        if p.phase.terminal:
            break
        c.advance(1)
    assert p.phase is Phase.COMPLETED and rate(c, 0) == "200000", p
    assert drive(c, first).phase is Phase.COMPLETED
    assert rate(c, 0) is None and throttles.placed(c) == {}


def test_a_copy_between_directories_that_stands_still_is_stalled(tmp_path: Path) -> None:
    """The stall watch counts the copies between directories too: copying, it is not
    stalled; its broker down for longer than the window, it is, naming the broker."""
    c = jbod(tmp_path)
    ex = ReassignmentExecutor(c, plan({T0: ([0, 1, 2], [other_dir(c, 0, T0), "any", "any"])},
                                      100_000))
    assert ex.start() == []
    watch = StallWatch(30_000)

    def observe() -> list[StalledMove]:
        return watch.observe(c.now_ms(), ex.copied(), ex.between_dirs)
    for _ in range(40):
        ex.step()
        assert observe() == []
        c.advance(1)
    c.fail_broker(0)
    for _ in range(40):
        ex.step()
        stalled = observe()
        c.advance(1)
    [move] = stalled
    assert move.tp == T0 and move.brokers == (0,) and 3 * MB < move.bytes_moved < 5 * MB
    # named as what it is: no replica is being added to broker 0
    assert move.between == (0,)
    assert describe(stalled, c.now_ms()).startswith(
        "no byte progress: orders-0 (between log directories on broker 0; ")


def test_a_dry_run_counts_the_copies_between_directories(tmp_path: Path) -> None:
    c = jbod(tmp_path)
    report = dry_run(c, plan({T0: ([0, 1, 2], [other_dir(c, 0, T0), "any", "any"]),
                              T1: ([1, 2, 0], [current_dir(c, 1, T1), "any", "any"])}))
    assert (report.partitions_moving, report.partitions_unchanged) == (1, 1)
    assert report.replica_moves == 0
    assert report.bytes_to_move == 10 * MB and report.per_broker_in_bytes == {0: 10 * MB}
    assert futures(c, 0, T0) == []  # a dry run moves nothing


def test_the_log_dir_throttle_is_a_rate_of_its_own(tmp_path: Path) -> None:
    """Replication at 1 MB/s, copies between directories at 200 kB/s (as
    kafka-reassign-partitions' --throttle and --replica-alter-log-dirs-throttle); changed
    mid-run it follows; at the end neither is left."""
    c = jbod(tmp_path)
    p, problems = ReassignmentPlan.from_moves(
        [(T0, [0, 1, 2]), (T1, [1, 2, 3])],
        limits=Limits(1_000_000, 10, None, 200_000),
        log_dirs={T0: [other_dir(c, 0, T0), "any", "any"]})
    assert problems == []
    ex = ReassignmentExecutor(c, p)
    assert ex.start() == []
    ex.step()
    cfg = c.describe_configs([("BROKER", "0"), ("BROKER", "3")])
    assert cfg[("BROKER", "0")][ALTER_LOG_DIRS_RATE] == "200000"
    assert cfg[("BROKER", "0")]["leader.replication.throttled.rate"] == "1000000"  # T1 gives
    assert cfg[("BROKER", "3")] == {"leader.replication.throttled.rate": "1000000",
                                    "follower.replication.throttled.rate": "1000000"}
    c.advance(5)
    ex.step()
    ex.set_limits(Limits(1_000_000, 10, None, 400_000))
    ex.step()
    assert rate(c, 0) == "400000"
    p_end = drive(c, ex)
    assert p_end.phase is Phase.COMPLETED, p_end
    assert c.describe_configs([("BROKER", "0"), ("BROKER", "3")]) == {
        ("BROKER", "0"): {}, ("BROKER", "3"): {}}
    assert throttles.placed(c) == {}


def test_a_log_dir_throttle_alone_leaves_replication_unthrottled(tmp_path: Path) -> None:
    c = jbod(tmp_path)
    p, _ = ReassignmentPlan.from_moves(
        [(T0, [0, 1, 2])], limits=Limits(None, 10, None, 300_000),
        log_dirs={T0: [other_dir(c, 0, T0), "any", "any"]})
    ex = ReassignmentExecutor(c, p)
    assert ex.start() == []
    ex.step()
    assert c.describe_configs([("BROKER", "0")])[("BROKER", "0")] == {
        ALTER_LOG_DIRS_RATE: "300000"}
    marker = throttles.placed(c, [0])[0]
    assert (marker.rate, marker.dir_rate) == (None, "300000")
    c.advance(10)
    progress = ex.step()
    assert 2 * MB <= progress.bytes_moved <= 4 * MB, progress
    assert drive(c, ex).phase is Phase.COMPLETED
    assert rate(c, 0) is None and throttles.placed(c) == {}


def test_an_operators_log_dir_rate_is_restored_after_the_run(tmp_path: Path) -> None:
    c = jbod(tmp_path)
    assert c.incremental_alter_configs({("BROKER", "0"): {ALTER_LOG_DIRS_RATE: "777"}})[
        ("BROKER", "0")].ok
    ex = ReassignmentExecutor(c, plan({T0: ([0, 1, 2], [other_dir(c, 0, T0), "any", "any"])},
                                      2_000_000))
    assert ex.start() == []
    ex.step()
    assert rate(c, 0) == "2000000"
    assert drive(c, ex).phase is Phase.COMPLETED
    assert rate(c, 0) == "777"


# -- the pure rules of log_dir_moves -------------------------------------------------------------
def test_to_ask_skips_replicas_in_place_or_already_copying_there() -> None:
    want = {(T0, 0): "/b", (T0, 1): "/b", (T0, 2): "/b", (T0, 3): "/b", (T0, 4): "/b"}
    where = {(T0, 0): Placement("/b"), (T0, 1): Placement("/a", "/b", 5),
             (T0, 2): Placement("/a"), (T0, 3): Placement("/b", "/c", 5),
             (T0, 4): Placement(None)}
    assert log_dir_moves.to_ask(want, where) == {(T0, 2): "/b", (T0, 3): "/b", (T0, 4): "/b"}
    # a broker that did not answer is asked too (its answer says it is down)
    assert log_dir_moves.to_ask({(T1, 9): "/b"}, {}) == {(T1, 9): "/b"}
    assert not log_dir_moves.in_place({(T0, 3): "/b"}, where)  # its copy elsewhere runs
    assert log_dir_moves.in_place({(T0, 0): "/b"}, where)


def test_rollback_asks_only_the_copying_replicas_to_stay() -> None:
    where = {(T0, 0): Placement("/a", "/b", 5), (T0, 1): Placement("/a"),
             (T0, 2): Placement(None, "/b", 5)}
    assert log_dir_moves.rollback(where) == {(T0, 0): "/a"}


def test_refusals_name_the_first_refusal_of_each_partition_and_ignore_ask_again() -> None:
    not_found = ApiResult(errors.LOG_DIR_NOT_FOUND, "no such dir")
    results = {(T0, 1): ApiResult(errors.REPLICA_NOT_AVAILABLE, "later"),
               (T0, 2): not_found, (T0, 3): ApiResult(errors.KAFKA_STORAGE_ERROR, ""),
               (T1, 0): ApiResult(errors.BROKER_NOT_AVAILABLE, "down"),
               (T1, 1): ApiResult()}
    assert log_dir_moves.refusals(results) == {
        T0: "orders-0: broker 2: LOG_DIR_NOT_FOUND: no such dir"}
    assert log_dir_moves.refusals({(T0, 3): ApiResult(errors.KAFKA_STORAGE_ERROR, "")}) == {
        T0: "orders-0: broker 3: KAFKA_STORAGE_ERROR: KAFKA_STORAGE_ERROR"}


def test_copy_bytes_counts_the_copy_then_the_replica_in_place() -> None:
    want = {(T0, 0): "/b", (T0, 1): "/b", (T0, 2): "/b", (T0, 3): "/b"}
    where = {(T0, 1): Placement("/a", "/b", 7, 10), (T0, 2): Placement("/b", None, 0, 10),
             (T0, 3): Placement("/a", None, 0, 10)}
    assert log_dir_moves.copy_bytes(want, where, [(T0, 0), (T0, 1), (T0, 2), (T0, 3)]) == {
        (T0, 1): 7, (T0, 2): 10}


def test_a_directory_refused_while_moving_fails_that_partition(tmp_path: Path) -> None:
    """The directory vanished after the plan was checked (the broker lost the disk): the
    partition fails with Kafka's answer, the others go on."""
    c = jbod(tmp_path)

    class LostDisk(PassThrough):
        def alter_replica_log_dirs(self, moves: dict[Any, str]) -> dict[Any, ApiResult]:
            out = self.c.alter_replica_log_dirs({k: v for k, v in moves.items() if k[0] != T0})
            out.update({k: ApiResult(errors.KAFKA_STORAGE_ERROR, "the disk is offline")
                        for k in moves if k[0] == T0})
            return out

    ex = ReassignmentExecutor(LostDisk(c), plan({  # type: ignore[arg-type]
        T0: ([0, 1, 2], [other_dir(c, 0, T0), "any", "any"]),
        T1: ([1, 2, 0], [other_dir(c, 1, T1), "any", "any"])}))
    assert ex.start() == []
    p = drive(c, ex)
    assert (p.phase, p.done, p.failed) == (Phase.FAILED, 1, 1), p
    assert ex.state.failed == {
        "orders-0": "orders-0: broker 0: KAFKA_STORAGE_ERROR: the disk is offline"}


def test_placements_read_describe_log_dirs(tmp_path: Path) -> None:
    c = jbod(tmp_path)
    here, there = current_dir(c, 0, T0), other_dir(c, 0, T0)
    assert c.incremental_alter_configs({("BROKER", "0"): {ALTER_LOG_DIRS_RATE: "1000"}})[
        ("BROKER", "0")].ok
    assert c.alter_replica_log_dirs({(T0, 0): there})[(T0, 0)].ok
    c.advance(3)
    where = log_dir_moves.placements(c, [(T0, 0), (T0, 3)])
    assert where[(T0, 3)] == Placement(None)  # broker 3 holds no replica of it
    p = where[(T0, 0)]
    assert (p.current, p.future, p.current_bytes) == (here, there, 10 * MB)
    assert 0 < p.future_bytes <= 3_000
    assert log_dir_moves.rollback(where) == {(T0, 0): here}


def test_an_abandoned_runs_log_dir_rate_goes_once_its_copy_ended(tmp_path: Path) -> None:
    """A run lost its state mid-copy and never came back; the broker finished the copy on
    its own. The next run's sync sees no copy left on that broker and takes the rate away
    (restored to what it was), as it does for another run's replication entries."""
    c = jbod(tmp_path)
    gone = ReassignmentExecutor(c, plan({T0: ([0, 1, 2], [other_dir(c, 0, T0), "any", "any"])},
                                        1_000_000))
    assert gone.start() == []
    gone.step()
    assert rate(c, 0) == "1000000"
    c.advance(30)  # the copy completes without anyone watching
    assert futures(c, 0, T0) == []
    later, _ = ReassignmentPlan.from_moves([(T1, [1, 2, 3])], limits=Limits(None, 10))
    ex = ReassignmentExecutor(c, later)
    assert ex.start() == []
    assert drive(c, ex).phase is Phase.COMPLETED
    assert rate(c, 0) is None and throttles.placed(c) == {}


def test_an_operators_log_dir_rate_on_a_broker_kraftsman_throttles_already_is_kept(
        tmp_path: Path) -> None:
    """Broker 0 carries kraftsman's replication rate for one move when a copy between its
    directories starts: the operator's log-dir rate there is recorded then, and restored."""
    c = jbod(tmp_path)
    assert c.incremental_alter_configs({("BROKER", "0"): {ALTER_LOG_DIRS_RATE: "777"}})[
        ("BROKER", "0")].ok
    p, _ = ReassignmentPlan.from_moves(
        [(T0, [3, 1, 2]), (T1, [1, 2, 0])], limits=Limits(500_000, 1),
        log_dirs={T1: ["any", "any", other_dir(c, 0, T1)]})
    ex = ReassignmentExecutor(c, p)
    assert ex.start() == []
    # one move at a time, both 10 MB: orders-0 (off broker 0, over the network) first, then
    # orders-1 (between broker 0's directories), while broker 0 still has kraftsman's marker
    seen = set()
    for _ in range(200):
        progress = ex.step()
        seen.add((rate(c, 0), c.describe_configs([("BROKER", "0")])[("BROKER", "0")].get(
            "leader.replication.throttled.rate")))
        if progress.phase.terminal:
            break
        c.advance(1)
    assert progress.phase is Phase.COMPLETED, progress
    assert ("500000", None) in seen or ("500000", "500000") in seen, seen
    assert rate(c, 0) == "777"


def test_a_dry_run_estimates_the_copies_between_directories_as_they_run(tmp_path: Path) -> None:
    """The estimate counts a copy between two directories of a broker at the log-dir rate
    (before, only copies between brokers: a dry run of a move between disks said 0 s)."""
    c = jbod(tmp_path)
    p, problems = ReassignmentPlan.from_moves(
        [(T0, [0, 1, 2]), (T1, [1, 2, 3])], limits=Limits(1_000_000, 1, None, 400_000),
        log_dirs={T0: [other_dir(c, 0, T0), "any", "any"]})
    assert problems == []
    bandwidth = {b.id: c.spec.replication_bytes_per_second for b in c.spec.brokers}
    report = dry_run(c, p, bandwidth=bandwidth.__getitem__, poll_seconds=1.0)
    assert report.estimated_seconds is not None
    ex = ReassignmentExecutor(c, p)
    assert ex.start() == []
    assert drive(c, ex).phase is Phase.COMPLETED
    assert ex.state.finished_ms is not None and ex.state.started_ms is not None
    actual = (ex.state.finished_ms - ex.state.started_ms) / 1000
    # one at a time: 10 MB at 1 MB/s, then 10 MB at 0.4 MB/s (35 s, not the 10 s of before)
    assert actual > 30
    assert report.estimated_seconds == pytest.approx(actual, rel=0.10)
