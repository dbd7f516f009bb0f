"""Issue 11 rows 4-6 and issue 10's "edits that take effect": throttles that exist exactly
while some movement needs them, one plan at a time, and spec edits that reach the brokers."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from controller_core import errors
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.errors import ApiResult
from controller_core.model import TopicPartition
from controller_core.orchestration import throttles
from controller_core.orchestration.reassignment import (
    ExecutorState,
    Limits,
    Phase,
    ReassignmentExecutor,
    ReassignmentPlan,
)
from tests.helpers import PassThrough, cluster, configs_in, drive, tp

RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
LEADER = "leader.replication.throttled.replicas"
FOLLOWER = "follower.replication.throttled.replicas"


def plan_of(moves: dict[TopicPartition, list[int]], limits: Limits,
            additional: bool = False) -> ReassignmentPlan:
    plan, problems = ReassignmentPlan.from_moves(moves.items(), limits=limits,
                                                 additional=additional)
    assert not problems
    return plan


def throttles_in(c: EmbeddedCluster) -> dict[tuple[str, str], dict[str, Any]]:
    return configs_in(c)


def rate(c: EmbeddedCluster, broker: int, key: str = RATE_KEYS[1]) -> str | None:
    return c.describe_configs([("BROKER", str(broker))])[("BROKER", str(broker))].get(key)


def test_two_executors_sharing_a_broker_with_equal_rates_keep_it_throttled_until_both_end(
        tmp_path: Path) -> None:
    """Row 4. Two runs add replicas on broker 3 at the same rate. The first to finish used to
    delete the rate while the other still moved (unthrottled), and the second then "restored"
    the first's rate, which stayed for good. As ReassignPartitionsCommand keeps throttles
    until no reassignment needs them: the rate stays while either moves, then is gone."""
    c = cluster(tmp_path)
    a = ReassignmentExecutor(c, plan_of({tp("orders", 0): [3, 1, 2]}, Limits(2_000_000, 1)))
    b = ReassignmentExecutor(c, plan_of({tp("orders", 1): [3, 2, 0], tp("orders", 2): [3, 0, 1]},
                                        Limits(2_000_000, 1), additional=True))
    assert a.start() == [] and b.start() == []
    b.step()
    c.advance(5)  # b's first move is ahead: it ends first, its second outlives a's move
    while not a.step().phase.terminal:
        b.step()
        c.advance(1)
    assert b.moving, "the second run is still moving through broker 3"
    assert rate(c, 3) == "2000000", "the first run to end removed a rate the other needs"
    moving = next(iter(b.moving))
    follower = c.describe_configs([("TOPIC", "orders")])[("TOPIC", "orders")][FOLLOWER]
    assert f"{moving.partition}:3" in follower.split(",")
    assert "0:3" not in follower.split(","), "the finished run's entries are gone"
    assert drive(c, b).phase is Phase.COMPLETED
    assert throttles_in(c) == {}, "no throttle outlives the last movement"


class _StaleTopicConfigs(PassThrough):
    """The embedded cluster, describing topic configs as a broker whose copy of the
    metadata has not yet reached the latest change would: as they were at ``freeze()``."""

    def __init__(self, c: EmbeddedCluster) -> None:
        self.c = c
        self.frozen: dict[tuple[str, str], dict[str, str]] = {}

    def freeze(self, topic: str) -> None:
        self.frozen = self.c.describe_configs([("TOPIC", topic)])

    def describe_configs(self, resources: Any) -> dict[tuple[str, str], dict[str, str]]:
        fresh = self.c.describe_configs(resources)
        return {r: dict(self.frozen.get(r, v)) for r, v in fresh.items()}


def test_a_stale_read_of_the_topic_configs_never_drops_another_runs_entries(
        tmp_path: Path) -> None:
    """Run B's entries were committed, but the broker answering run A's DescribeConfigs has
    not caught up: A's read-modify-write used to write the list without them, so B moved
    unthrottled (CI, real Kafka under load). The markers say the entries are B's and B
    still moves: they are written back whatever the read says."""
    c = cluster(tmp_path)
    stale = _StaleTopicConfigs(c)
    stale.freeze("orders")  # before B placed anything
    b = ReassignmentExecutor(c, plan_of({tp("orders", 1): [3, 2, 0]}, Limits(2_000_000, 1)))
    assert b.start() == []
    b.step()
    placed_by_b = c.describe_configs([("TOPIC", "orders")])[("TOPIC", "orders")]
    assert "1:3" in placed_by_b[FOLLOWER].split(",")
    a = ReassignmentExecutor(stale, plan_of({tp("orders", 0): [3, 1, 2]}, Limits(2_000_000, 1),
                                            additional=True))
    assert a.start() == []
    a.step()
    now = c.describe_configs([("TOPIC", "orders")])[("TOPIC", "orders")]
    for key in (LEADER, FOLLOWER):
        assert set(placed_by_b[key].split(",")) <= set(now[key].split(",")), (key, now)
    assert {"0:3", "1:3"} <= set(now[FOLLOWER].split(","))
    assert b.moving and rate(c, 3) == "2000000"
    while not a.step().phase.terminal:
        c.advance(1)
    assert drive(c, b).phase is Phase.COMPLETED
    assert throttles_in(c) == {}


def test_crash_between_placing_rates_and_the_first_state_save_leaks_nothing(
        tmp_path: Path) -> None:
    """Row 4. The run places rates (over an operator's 777 on broker 0) and starts its moves,
    then dies before its state is saved; it is resumed with no state at all. It used to take
    its own rate for the operator's and "restore" it at the end. The marker in the cluster
    tells them apart: at the end the operator's 777 is back and nothing else is left."""
    c = cluster(tmp_path)
    c.incremental_alter_configs({("BROKER", "0"): {RATE_KEYS[0]: "777"}})
    plan = plan_of({tp("orders", 0): [3, 4, 5], tp("orders", 1): [4, 5, 3]},
                   Limits(5_000_000, 2))
    first = ReassignmentExecutor(c, plan)
    assert first.start() == []
    first.step()
    assert rate(c, 0, RATE_KEYS[0]) == "5000000" and c.list_partition_reassignments()
    resumed = ReassignmentExecutor(c, plan, ExecutorState())  # the state was never saved
    assert resumed.start() == [], "its own moves in flight are not another plan"
    assert drive(c, resumed).phase is Phase.COMPLETED
    assert throttles_in(c) == {("BROKER", "0"): {RATE_KEYS[0]: "777"}}


def test_state_wiped_and_run_abandoned_cleanup_still_removes_every_throttle_it_placed(
        tmp_path: Path) -> None:
    """Row 4, the operator's kill -9 with the state directory wiped, then the resource
    deleted: a fresh executor for the plan removes every throttle the lost one placed (and
    leaves an operator's entry on a partition that does not move)."""
    c = cluster(tmp_path)
    c.incremental_alter_configs({("TOPIC", "orders"): {LEADER: "5:1"}})
    plan = plan_of({tp("orders", 0): [3, 4, 5]}, Limits(5_000_000, 2))
    lost = ReassignmentExecutor(c, plan)
    lost.start()
    lost.step()
    assert len(throttles.placed(c)) == 6  # 0, 1, 2 lead; 3, 4, 5 follow
    ReassignmentExecutor(c, plan).cleanup()
    assert throttles_in(c) == {("TOPIC", "orders"): {LEADER: "5:1"}}


def test_leader_side_replica_throttles_are_placed_on_the_replicas_that_hold_the_data(
        tmp_path: Path) -> None:
    """ReassignPartitionsCommand throttles the existing replicas as leaders and the new ones
    as followers; both lists, and the rates on every broker involved."""
    c = cluster(tmp_path)
    ex = ReassignmentExecutor(c, plan_of({tp("orders", 0): [3, 1, 2]}, Limits(1_000_000, 1)))
    ex.start()
    ex.step()
    cfg = c.describe_configs([("TOPIC", "orders")])[("TOPIC", "orders")]
    assert set(cfg[LEADER].split(",")) == {"0:0", "0:1", "0:2"}
    assert cfg[FOLLOWER] == "0:3"
    assert {b for b in range(6) if rate(c, b)} == {0, 1, 2, 3}


def test_cleanup_leaves_a_rate_someone_changed_after_ours(tmp_path: Path) -> None:
    """A rate changed by someone else after kraftsman wrote it is theirs: cleanup neither
    restores nor deletes it (only the marker goes)."""
    c = cluster(tmp_path)
    ex = ReassignmentExecutor(c, plan_of({tp("orders", 0): [3, 1, 2]}, Limits(1_000_000, 1)))
    ex.start()
    ex.step()
    c.incremental_alter_configs({("BROKER", "3"): {RATE_KEYS[1]: "2000000"}})
    assert drive(c, ex).phase is Phase.COMPLETED
    assert throttles_in(c) == {("BROKER", "3"): {RATE_KEYS[1]: "2000000"}}


def test_a_new_limit_leaves_a_rate_someone_changed_mid_run_as_they_set_it(
        tmp_path: Path) -> None:
    """ReassignPartitionsCommand --execute with a new --throttle overwrites the rates; kraftsman
    changes only the rates that are still its own (the value it wrote): the follower rate an
    operator changed on broker 3 during the run keeps their value, the leader rate follows."""
    c = cluster(tmp_path)
    ex = ReassignmentExecutor(c, plan_of({tp("orders", 0): [3, 1, 2]}, Limits(1_000_000, 1)))
    ex.start()
    ex.step()
    c.incremental_alter_configs({("BROKER", "3"): {RATE_KEYS[1]: "3000000"}})
    ex.set_limits(Limits(2_000_000, 1))
    assert rate(c, 3) == "3000000" and rate(c, 0, RATE_KEYS[0]) == "2000000"
    assert rate(c, 3, RATE_KEYS[0]) == "2000000"  # broker 3's leader rate was still ours
    assert drive(c, ex).phase is Phase.COMPLETED
    assert throttles_in(c) == {("BROKER", "3"): {RATE_KEYS[1]: "3000000"}}


class _ConfigWrites(PassThrough):
    """The embedded cluster, keeping every IncrementalAlterConfigs request."""

    def __init__(self, c: EmbeddedCluster) -> None:
        self.c = c
        self.writes: list[dict[tuple[str, str], dict[str, str | None]]] = []

    def incremental_alter_configs(self, changes: Mapping[tuple[str, str],
                                                         Mapping[str, str | None]]
                                  ) -> dict[tuple[str, str], ApiResult]:
        self.writes.append({r: dict(kv) for r, kv in changes.items()})
        return self.c.incremental_alter_configs(changes)


def test_a_pass_writes_only_the_throttle_configs_that_change(tmp_path: Path) -> None:
    """When one move ends and the next starts, the brokers of the move still in flight keep
    their rate and marker as they are: the pass rewrites neither (IncrementalAlterConfigs
    carries only real changes)."""
    c = cluster(tmp_path, topics=[{"name": n, "partitions": 1, "replicationFactor": 1,
                                   "sizeBytesPerPartition": s, "assignment": [[b]]}
                                  for n, s, b in (("a", 20_000_000, 0), ("b", 1_000_000, 1),
                                                  ("c", 5_000_000, 2))])
    admin = _ConfigWrites(c)
    ex = ReassignmentExecutor(admin, plan_of(  # type: ignore[arg-type]
        {tp("a", 0): [3], tp("b", 0): [4], tp("c", 0): [5]}, Limits(1_000_000, 2)))
    ex.start()
    ex.step()
    assert set(ex.moving) == {tp("b", 0), tp("c", 0)}  # smallest first
    for _ in range(60):  # until a pass writes: b ended, a started
        c.advance(1)
        admin.writes.clear()
        ex.step()
        if admin.writes:
            break
    assert set(ex.moving) == {tp("a", 0), tp("c", 0)}  # c still copies, same throttle
    changed = {r for w in admin.writes for r in w}
    assert ("BROKER", "2") not in changed and ("BROKER", "5") not in changed, changed
    assert {("BROKER", "1"), ("BROKER", "4"), ("BROKER", "0"), ("BROKER", "3")} <= changed


class _MarkerReads(_ConfigWrites):
    """... and counting the reads of the throttle markers (one per throttle sync)."""

    def __init__(self, c: EmbeddedCluster) -> None:
        super().__init__(c)
        self.reads = 0

    def read_throttle_markers(self) -> dict[int, str]:
        self.reads += 1
        return self.c.read_throttle_markers()


def test_an_unthrottled_run_syncs_throttles_once_at_the_start_and_once_at_the_end(
        tmp_path: Path) -> None:
    """Without a limit the moves in flight change nothing a throttle sync would write: it
    ran on every pass where a move ended or started (DescribeConfigs of every broker, the
    marker topic read — a second a pass at 1,000 moves on real Kafka). Now once to remove
    what an earlier limit left, once at the end; a limit set mid-run still places at once."""
    c = cluster(tmp_path)
    admin = _MarkerReads(c)
    ex = ReassignmentExecutor(admin, plan_of(  # type: ignore[arg-type]
        {tp("orders", p): [3, 4, 5] for p in range(3)}, Limits(None, 1)))
    assert ex.start() == []
    passes = 0
    while len(ex.done) < 2:
        ex.step()
        c.advance(1)
        passes += 1
    assert passes > 2 and admin.reads == 1 and admin.writes == [], (passes, admin.reads)
    ex.set_limits(Limits(1_000_000, 1))
    assert admin.reads == 2 and rate(c, 3) == "1000000"
    assert drive(c, ex).phase is Phase.COMPLETED
    assert throttles_in(c) == {} and admin.reads >= 3


def test_second_plan_while_one_is_in_flight_is_refused_unless_additional(
        tmp_path: Path) -> None:
    """Row 5. ReassignPartitionsCommand refuses to execute while any reassignment is in
    progress ("Use --additional"), overlapping or not."""
    c = cluster(tmp_path)
    first = ReassignmentExecutor(c, plan_of({tp("orders", 0): [3, 1, 2]}, Limits(None, 1)))
    first.start()
    first.step()
    second = ReassignmentExecutor(c, plan_of({tp("orders", 3): [4, 1, 2]}, Limits(None, 1)))
    problems = second.start()
    assert [p.error for p in problems] == [errors.REASSIGNMENT_IN_PROGRESS]
    assert "orders-0" in problems[0].message and "additional" in problems[0].message
    assert second.state.phase is Phase.PENDING and tp("orders", 3) not in \
        c.list_partition_reassignments()
    extra = ReassignmentExecutor(c, plan_of({tp("orders", 3): [4, 1, 2]}, Limits(None, 1),
                                            additional=True))
    assert extra.start() == []


def _bytes_on(c: EmbeddedCluster, t: TopicPartition, broker: int) -> int:
    return c.replica_log_sizes([(t, broker)]).get((t, broker), 0)


def test_reapplied_with_only_the_throttle_changed_the_brokers_get_the_new_rate(
        tmp_path: Path) -> None:
    """Issue 10. A running reassignment is re-applied with the throttle 40 -> 10 MB/s: the
    resumed executor starts with the new limits already in its plan, and each pass compares
    them with the rates in force — measured as bytes copied per simulated minute."""
    c = cluster(tmp_path, replicationBytesPerSecond=100_000_000, topics=[{
        "name": "orders", "partitions": 1, "replicationFactor": 3,
        "sizeBytesPerPartition": 20_000_000_000, "assignment": [[0, 1, 2]]}])
    t = tp("orders", 0)
    moves = {t: [3, 1, 2]}
    ex = ReassignmentExecutor(c, plan_of(moves, Limits(40_000_000, 1)))
    ex.start()
    ex.step()
    before = _bytes_on(c, t, 3)
    c.advance(60)
    fast = _bytes_on(c, t, 3) - before
    saved = ex.state.model_dump_json()
    resumed = ReassignmentExecutor(c, plan_of(moves, Limits(10_000_000, 1)),
                                   ExecutorState.model_validate_json(saved))
    assert resumed.start() == []
    resumed.set_limits(Limits(10_000_000, 1))  # what the CLI and operator do: a no-op here
    resumed.step()
    before = _bytes_on(c, t, 3)
    c.advance(60)
    slow = _bytes_on(c, t, 3) - before
    assert abs(fast - 40_000_000 * 60) < 0.02 * 40_000_000 * 60, fast
    assert abs(slow - 10_000_000 * 60) < 0.02 * 10_000_000 * 60, slow
    assert rate(c, 3) == rate(c, 0, RATE_KEYS[0]) == "10000000"


def test_max_concurrent_moves_change_with_a_retarget_retargets_the_move_in_flight_at_once(
        tmp_path: Path) -> None:
    """Issue 10. maxConcurrentMoves 2 -> 1 together with a new target for a move in flight:
    the move is re-targeted in the same pass (KIP-455: a new target replaces the current
    one), although the lower limit leaves no free slot."""
    c = cluster(tmp_path)
    old = {tp("orders", 0): [3, 1, 2], tp("orders", 1): [4, 2, 0]}
    ex = ReassignmentExecutor(c, plan_of(old, Limits(None, 2)))
    ex.start()
    ex.step()
    c.advance(2)
    assert set(c.list_partition_reassignments()) == set(old)
    new = {tp("orders", 0): [3, 1, 2], tp("orders", 1): [5, 2, 0]}
    resumed = ReassignmentExecutor(c, plan_of(new, Limits(None, 1), additional=True))
    assert resumed.start() == []
    resumed.step()
    ongoing = c.list_partition_reassignments()
    assert ongoing[tp("orders", 1)].target == (5, 2, 0), "re-targeted at once"
    assert ongoing[tp("orders", 0)].target == (3, 1, 2)
    assert drive(c, resumed).phase is Phase.COMPLETED
    assert c.image.partition(tp("orders", 1)).replicas == (5, 2, 0)  # type: ignore[union-attr]


MAX_LONG = 2**63 - 1


def test_a_throttle_the_brokers_refuse_holds_the_moves_back_until_one_is_set(
        tmp_path: Path) -> None:
    """As ReassignPartitionsCommand.executeAssignment (modifyReassignmentThrottle, then
    alterPartitionReassignments: a refused throttle aborts before anything moves): a move
    never starts unthrottled. It waits, with the brokers' refusal in the message, and
    starts at the first pass whose throttle the brokers take."""
    c = cluster(tmp_path)
    ex = ReassignmentExecutor(c, plan_of({tp("orders", 0): [3, 4, 5]}, Limits(-1, 1)))
    assert ex.start() == []
    for _ in range(2):
        p = ex.step()
        assert (p.phase, p.moving, p.pending) == (Phase.RUNNING, 0, 1)
        assert c.list_partition_reassignments() == {}
        assert p.message.startswith("could not set throttles: broker ")
        assert p.message.endswith("must be a whole number of bytes/second; no move starts "
                                  "until the throttle is set"), p.message
        c.advance(1)
    assert throttles_in(c) == {}  # no rate, and no replica entry nothing would remove
    ex.set_limits(Limits(1_000_000, 1))
    p = ex.step()
    assert (p.moving, p.pending) == (1, 0)
    assert set(c.list_partition_reassignments()) == {tp("orders", 0)}
    assert rate(c, 3) == "1000000"
    assert drive(c, ex).phase is Phase.COMPLETED
    assert throttles_in(c) == {}


def test_without_a_throttle_a_refused_sync_does_not_hold_the_moves(tmp_path: Path) -> None:
    """Only a throttle that was asked for holds moves back: with none, they start."""
    c = cluster(tmp_path)
    ex = ReassignmentExecutor(c, plan_of({tp("orders", 0): [3, 4, 5]}, Limits(None, 1)))
    assert ex.start() == []
    assert ex.step().moving == 1


@pytest.mark.parametrize(("value", "why"), [
    ("-1", "must be a whole number of bytes/second"),
    ("1e9", "must be a whole number of bytes/second"),
    ("", "must be a whole number of bytes/second"),
    ("\u00b2", "must be a whole number of bytes/second"),  # '²': isdigit, but int() raises
    ("\u0661", "must be a whole number of bytes/second"),  # Arabic-Indic 1: int() reads 1
    (str(MAX_LONG + 1), f"must be at most {MAX_LONG} bytes/second (a LONG)"),
])
def test_the_embedded_brokers_refuse_a_rate_kafka_refuses(tmp_path: Path, value: str,
                                                          why: str) -> None:
    """As Kafka's DynamicConfig.Broker (LONG, atLeast(0)) through ConfigDef's parsing: a
    negative rate, one beyond Long.MAX_VALUE, or not a whole number is INVALID_CONFIG, and the
    broker keeps the rate it had."""
    c = cluster(tmp_path)
    res = ("BROKER", "0")
    assert c.incremental_alter_configs({res: {RATE_KEYS[0]: "1000"}})[res].ok
    result = c.incremental_alter_configs({res: {RATE_KEYS[0]: value}})[res]
    assert (result.error, result.message) == (errors.INVALID_CONFIG,
                                              f"{RATE_KEYS[0]}={value!r}: {why}")
    assert rate(c, 0, RATE_KEYS[0]) == "1000"
    assert c.incremental_alter_configs({res: {RATE_KEYS[0]: str(MAX_LONG)}})[res].ok


def test_a_fenced_brokers_rate_waits_until_it_is_back(tmp_path: Path) -> None:
    """A broker holding a throttled move's data dies: its configs are served by it alone, so
    a rate written there was retried against the dead broker for the whole retry budget — a
    minute per `kraftsman apply` on Kafka 4.4 (tests/real). No pass writes a fenced broker's
    configs; the rate is placed, and the operator's rate recorded, once it is back."""
    c = cluster(tmp_path)
    c.incremental_alter_configs({("BROKER", "1"): {RATE_KEYS[0]: "777"}})
    admin = _ConfigWrites(c)
    c.fail_broker(1)
    c.advance(30)  # fenced
    assert any(b.id == 1 and b.fenced for b in c.describe_cluster().brokers)
    ex = ReassignmentExecutor(admin, plan_of(  # type: ignore[arg-type]
        {tp("orders", 0): [3, 4, 5]}, Limits(1_000_000, 1)))
    assert ex.start() == []
    ex.step()
    assert ex.moving and ex.state.message == "", ex.state.message
    written = {r for w in admin.writes for r in w}
    assert ("BROKER", "1") not in written and ("BROKER", "3") in written, written
    assert throttles.placed(c)[1].rate is None and ex.state.throttles_waiting == [1]
    c.restore_broker(1)
    c.advance(1)
    ex.step()  # the next pass, with nothing else changed, places what is owed
    assert rate(c, 1, RATE_KEYS[0]) == "1000000" and ex.state.throttles_waiting == []
    assert throttles.placed(c)[1].previous[RATE_KEYS[0]] == "777"
    ex.cancel()
    assert drive(c, ex).phase is Phase.CANCELLED
    assert configs_in(c) == {("BROKER", "1"): {RATE_KEYS[0]: "777"}}


class _ConfigReads(PassThrough):
    """The embedded cluster, counting DescribeConfigs requests."""

    def __init__(self, c: EmbeddedCluster) -> None:
        self.c = c
        self.reads = 0

    def describe_configs(self, resources: Any) -> Any:
        self.reads += 1
        return self.c.describe_configs(resources)


def test_a_cleanup_owed_to_a_fenced_broker_is_retried_every_ten_seconds_not_every_pass(
        tmp_path: Path) -> None:
    """A finished run waiting for a dead broker asks the cluster again every
    CLEANUP_RETRY_MS, not on each pass (a broker can stay away for hours, and the operator
    passes every second)."""
    c = cluster(tmp_path)
    counted = _ConfigReads(c)
    ex = ReassignmentExecutor(counted, plan_of({tp("orders", 0): [3, 4, 5]},
                                               Limits(1_000_000, 1)))
    assert ex.start() == []
    ex.step()
    c.fail_broker(1)
    c.advance(30)  # fenced
    assert drive(c, ex).phase is Phase.COMPLETED and ex.state.cleanup_owed
    asked = []
    for _ in range(25):  # 25 passes a second apart
        c.advance(1)
        before = counted.reads
        ex.step()
        asked.append(counted.reads > before)
    assert asked.count(True) == 3, asked  # at 1, 11 and 21 s
    assert asked[0] and asked[10] and asked[20]
    c.restore_broker(1)
    for _ in range(10):  # within the next ten seconds the rate is restored
        c.advance(1)
        ex.step()
    assert not ex.state.cleanup_owed and throttles.placed(c) == {}


def test_a_rate_on_a_broker_fenced_when_the_run_ends_is_restored_once_it_is_back(
        tmp_path: Path) -> None:
    """A broker holding the data dies mid-move; the move completes without it. Its rate can
    be restored only once it is back: the marker keeps what to restore (dropped, the rate
    stayed for good, unclaimed), and the finished run keeps trying until it is done."""
    c = cluster(tmp_path)
    c.incremental_alter_configs({("BROKER", "1"): {RATE_KEYS[0]: "777"}})
    ex = ReassignmentExecutor(c, plan_of({tp("orders", 0): [3, 4, 5]}, Limits(1_000_000, 1)))
    assert ex.start() == []
    ex.step()
    assert rate(c, 1, RATE_KEYS[0]) == "1000000"
    c.fail_broker(1)
    c.advance(30)  # fenced
    assert drive(c, ex).phase is Phase.COMPLETED
    assert ex.state.cleanup_owed and ex.state.throttles_waiting == [1]
    assert throttles.placed(c)[1].entries == set()
    assert throttles.placed(c)[1].rate == "1000000"
    assert ExecutorState.model_validate(ex.state.model_dump(mode="json")) == ex.state
    c.restore_broker(1)
    c.advance(1)
    assert ex.step().phase is Phase.COMPLETED
    assert not ex.state.cleanup_owed and ex.state.throttles_waiting == []
    assert configs_in(c) == {("BROKER", "1"): {RATE_KEYS[0]: "777"}}
    assert throttles.placed(c) == {}
