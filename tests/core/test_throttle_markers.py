"""kraftsman's throttle markers in its compacted topic ``__kraftsman_throttles`` — on the
embedded cluster (a real topic, its records kept in the metadata log) and in the throttle
bookkeeping that relies on them (orchestration/throttles.py): written before what they claim,
removed after, and nothing placed when the cluster refuses them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from controller_core import errors
from controller_core.admin import THROTTLE_MARKER_TOPIC
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.errors import ApiResult, KafkaApiError
from controller_core.model import TopicPartition
from controller_core.orchestration import throttles
from controller_core.orchestration.reassignment import (
    Limits,
    Phase,
    ReassignmentExecutor,
    ReassignmentPlan,
)
from tests.helpers import PassThrough, cluster, configs_in, drive, spec, tp

T = THROTTLE_MARKER_TOPIC
RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


def reopen(path: Path, **kw: Any) -> EmbeddedCluster:
    return EmbeddedCluster.open(path, spec(**kw), fsync=False)


def plan_of(moves: dict[TopicPartition, list[int]], limits: Limits) -> ReassignmentPlan:
    plan, problems = ReassignmentPlan.from_moves(moves.items(), limits=limits)
    assert not problems
    return plan


# -- the topic on the embedded cluster ------------------------------------------------------
def test_the_marker_topic_is_made_on_the_first_write_compacted_with_three_replicas(
        tmp_path: Path) -> None:
    """As CreateTopics would make it on Kafka: one partition, cleanup.policy=compact, three
    replicas; a read or an empty write makes nothing."""
    c = cluster(tmp_path)
    assert c.read_throttle_markers() == {} and c.write_throttle_markers({}) == []
    assert T not in c.image.topics
    assert c.write_throttle_markers({3: '{"rate": "5"}', 4: '{"rate": "6"}'}) == []
    [d] = c.describe_partitions([T])
    assert len(d.replicas) == 3 and d.leader == d.replicas[0]
    assert c.describe_configs([("TOPIC", T)]) == {("TOPIC", T): {"cleanup.policy": "compact"}}
    assert c.write_throttle_markers({4: None, 3: '{"rate": "7"}'}) == []
    assert c.read_throttle_markers() == {3: '{"rate": "7"}'}  # the latest of each key
    assert c.image.marker_end == 4  # four records: two values, a tombstone, a value


@pytest.mark.parametrize("brokers", [1, 2])
def test_a_small_cluster_gets_a_marker_topic_on_every_broker(tmp_path: Path,
                                                             brokers: int) -> None:
    c = cluster(tmp_path, brokers=brokers, topics=[])
    assert c.write_throttle_markers({0: "{}"}) == []
    assert len(c.describe_partitions([T])[0].replicas) == brokers


def test_markers_survive_a_restart_a_snapshot_and_a_controller_fail_over(
        tmp_path: Path) -> None:
    """The records go through the metadata quorum and the metadata log: a restart, a
    snapshot and a new active controller keep them, offsets and tombstones included."""
    c = cluster(tmp_path)
    assert c.write_throttle_markers({1: '{"rate": "1"}', 2: '{"rate": "2"}'}) == []
    assert c.write_throttle_markers({2: None}) == []
    c.close()
    c = reopen(tmp_path)
    assert c.read_throttle_markers() == {1: '{"rate": "1"}'} and c.image.marker_end == 3
    c.snapshot()
    c.close()
    c = reopen(tmp_path)
    assert c.read_throttle_markers() == {1: '{"rate": "1"}'} and c.image.marker_end == 3
    leader = c.quorum.leader()
    assert leader is not None
    c.fail_controller(leader)
    assert c.write_throttle_markers({5: '{"rate": "5"}'}) == []  # a new leader commits it
    assert c.quorum.leader() not in (None, leader)
    c.close()
    c = reopen(tmp_path)
    assert c.read_throttle_markers() == {1: '{"rate": "1"}', 5: '{"rate": "5"}'}


def test_a_write_waits_for_a_new_leader_and_fails_without_one(tmp_path: Path) -> None:
    """Like a producer retrying NOT_LEADER_OR_FOLLOWER within its request timeout: the
    leader's broker failing, the write waits until the controller fences it and elects
    another; with every replica down it gives up, and a read says why."""
    c = cluster(tmp_path)
    assert c.write_throttle_markers({0: "{}"}) == []
    [d] = c.describe_partitions([T])
    c.fail_broker(d.leader)
    before = c.now
    assert c.write_throttle_markers({0: None}) == []
    assert c.now - before >= c.spec.broker_session_timeout_ms / 1000
    assert c.describe_partitions([T])[0].leader != d.leader
    for b in d.replicas:
        if c.alive(b):
            c.fail_broker(b)
    [problem] = c.write_throttle_markers({0: "{}"})
    assert problem.startswith(f"topic {T}: no running leader for its partition (replicas ")
    with pytest.raises(KafkaApiError) as e:
        c.read_throttle_markers()
    assert e.value.error == errors.NOT_LEADER_OR_FOLLOWER


def test_an_unknown_broker_config_is_kept_and_described_as_sensitive(tmp_path: Path) -> None:
    """As Kafka: a broker takes a config name it does not know, and hides its value."""
    c = cluster(tmp_path)
    assert c.incremental_alter_configs(
        {("BROKER", "1"): {"kraftsman.throttle": "x", RATE_KEYS[0]: "9"}})[
        ("BROKER", "1")].ok
    assert c.image.config("BROKER", "1")["kraftsman.throttle"] == "x"
    assert c.describe_configs([("BROKER", "1")]) == {
        ("BROKER", "1"): {"kraftsman.throttle": None, RATE_KEYS[0]: "9"}}


def test_an_older_state_dirs_broker_config_markers_move_into_the_topic(
        tmp_path: Path) -> None:
    """A state directory of a kraftsman that kept markers in ``kraftsman.throttle`` broker
    configs: opening it moves them into the marker topic, so a run in flight keeps its
    throttles' ownership; nothing of the old configs stays."""
    c = cluster(tmp_path)
    old = '{"previous": {}, "rate": "5", "replicas": ["F:0:orders"]}'
    c.controller.incremental_alter_configs({("BROKER", "3"): {"kraftsman.throttle": old}})
    c.close()
    c = reopen(tmp_path)
    assert c.read_throttle_markers() == {3: old}
    assert configs_in(c) == {}
    assert throttles.placed(c)[3].entries == {throttles.Entry("orders", 0, 3, "F")}


# -- the bookkeeping -----------------------------------------------------------------------
class _Refusing(PassThrough):
    """The embedded cluster, refusing marker writes or broker config writes on demand."""

    def __init__(self, c: EmbeddedCluster) -> None:
        self.c = c
        self.refuse_markers = False
        self.refuse_brokers = 0  # how many broker config writes to refuse
        self.refuse_reads: KafkaApiError | None = None

    def read_throttle_markers(self) -> dict[int, str]:
        if self.refuse_reads is not None:
            raise self.refuse_reads
        return self.c.read_throttle_markers()

    def write_throttle_markers(self, changes: Mapping[int, str | None]) -> list[str]:
        if self.refuse_markers:
            return [f"topic {T}: TOPIC_AUTHORIZATION_FAILED"]
        return self.c.write_throttle_markers(changes)

    def incremental_alter_configs(self, changes: Mapping[tuple[str, str], Mapping[str, str | None]]
                                  ) -> dict[tuple[str, str], ApiResult]:
        if self.refuse_brokers and any(kind == "BROKER" for kind, _ in changes):
            self.refuse_brokers -= 1
            return {r: ApiResult(errors.CLUSTER_AUTHORIZATION_FAILED, "no ALTER_CONFIGS")
                    for r in changes}
        return self.c.incremental_alter_configs(changes)


def test_a_refused_marker_write_places_nothing_and_holds_the_moves(tmp_path: Path) -> None:
    """Markers first: while the cluster refuses the marker, no rate and no replica entry is
    placed that nothing would claim — and no move starts unthrottled."""
    c = cluster(tmp_path)
    a = _Refusing(c)
    a.refuse_markers = True
    ex = ReassignmentExecutor(a, plan_of({tp("orders", 0): [3, 1, 2]}, Limits(1_000_000, 1)))
    assert ex.start() == []
    p = ex.step()
    assert p.moving == 0 and c.list_partition_reassignments() == {}
    assert p.message == (f"could not set throttles: topic {T}: TOPIC_AUTHORIZATION_FAILED; "
                         "no move starts until the throttle is set")
    assert configs_in(c) == {}
    a.refuse_markers = False
    assert drive(c, ex).phase is Phase.COMPLETED
    assert configs_in(c) == {} and throttles.placed(c) == {}


def test_a_rate_refused_after_its_marker_is_still_kraftsmans_on_the_next_pass(
        tmp_path: Path) -> None:
    """The marker (the rate, and the operator's rate it replaces) is written, then the
    brokers refuse the rate (or the process dies there): the operator's value still in force
    is what kraftsman recorded as replaced, so the next sync for the same moves — a retry,
    or the resumed run — writes the rate, and the end restores the operator's."""
    c = cluster(tmp_path)
    c.incremental_alter_configs({("BROKER", "3"): {RATE_KEYS[1]: "777"}})
    a = _Refusing(c)
    a.refuse_brokers = 1
    moves = {tp("orders", 0): throttles.Move((0, 1, 2), (3,))}
    problems = throttles.sync(a, moves, 1_000_000).problems
    assert problems and all(p.endswith(": no ALTER_CONFIGS") for p in problems), problems
    assert throttles.placed(c)[3].previous == {RATE_KEYS[0]: None, RATE_KEYS[1]: "777"}
    assert configs_in(c, [3], [])[("BROKER", "3")] == {RATE_KEYS[1]: "777"}
    assert throttles.sync(a, moves, 1_000_000).problems == []
    assert configs_in(c, [3], [])[("BROKER", "3")] == dict.fromkeys(RATE_KEYS, "1000000")
    assert throttles.sync(a, {}, None).problems == []
    assert configs_in(c) == {("BROKER", "3"): {RATE_KEYS[1]: "777"}}


def test_until_the_configs_are_written_the_markers_claim_what_goes_and_what_comes(
        tmp_path: Path) -> None:
    """A pass that ends one move and starts another writes markers claiming both before it
    touches a config: refused there (or dead), nothing placed is unclaimed — the ended
    move's entries, the rate of the broker it alone used, the log-dir rate of a copy that
    goes on. The next pass finishes it."""
    c = cluster(tmp_path)
    a = _Refusing(c)
    p0, p1, p2 = tp("orders", 0), tp("orders", 1), tp("orders", 2)
    copy = throttles.Move((0, 1, 2), (), (5,))  # p2 copied between directories of broker 5
    first = {p0: throttles.Move((0, 1, 2), (3,)), p2: copy}
    assert throttles.sync(a, first, 1_000_000, {p0, p1, p2}, dir_rate=500).problems == []
    before = throttles.placed(c)
    assert {e.partition for e in before[0].entries} == {0} and before[5].dir_rate == "500"
    a.refuse_brokers = 1  # broker 4's new rate: refused after the claims are written
    second = {p1: throttles.Move((0, 1, 2), (4,)), p2: copy}
    assert throttles.sync(a, second, 1_000_000, {p0, p1, p2}, dir_rate=500).problems
    held = throttles.placed(c)
    for b in (0, 1, 2):
        assert {(e.partition, e.side) for e in held[b].entries} == {(0, "L"), (1, "L")}, b
    assert held[3] == before[3]  # its rate is still in force: still claimed
    assert {(e.partition, e.side) for e in held[4].entries} == {(1, "F")}
    assert held[5].dir_rate == "500" and held[5].entries == before[5].entries
    assert throttles.sync(a, second, 1_000_000, {p0, p1, p2}, dir_rate=500).problems == []
    done = throttles.placed(c)
    assert 3 not in done and ("BROKER", "3") not in configs_in(c)
    assert {(e.partition, e.side) for e in done[0].entries} == {(1, "L")}


def test_a_rate_change_the_brokers_refused_is_still_removed_at_the_end(tmp_path: Path) -> None:
    """A new limit is claimed before it is written, the old one kept as possibly in force:
    the brokers refusing the change leave the old rate, and the cancel still removes it."""
    c = cluster(tmp_path)
    a = _Refusing(c)
    ex = ReassignmentExecutor(a, plan_of({tp("orders", 0): [3, 4, 5]}, Limits(1_000_000, 1)))
    assert ex.start() == []
    ex.step()
    a.refuse_brokers = 1
    ex.set_limits(Limits(2_000_000, 1))
    assert ex.state.message.startswith("could not set throttles: broker ")
    assert configs_in(c, [3], [])[("BROKER", "3")] == dict.fromkeys(RATE_KEYS, "1000000")
    m = throttles.placed(c)[3]
    assert (m.rate, m.also) == ("2000000", {"1000000"})
    ex.cancel()
    assert drive(c, ex).phase is Phase.CANCELLED
    assert configs_in(c) == {} and throttles.placed(c) == {}


def test_without_access_to_the_markers_only_an_unthrottled_run_goes_on(tmp_path: Path) -> None:
    """A principal that may not read the marker topic could not have written a marker: an
    unthrottled run needs none and goes on; a throttled one is held with the refusal."""
    c = cluster(tmp_path)
    a = _Refusing(c)
    a.refuse_reads = KafkaApiError(errors.TOPIC_AUTHORIZATION_FAILED,
                                   f"not authorized on topic {T}")
    free = ReassignmentExecutor(a, plan_of({tp("orders", 0): [3, 1, 2]}, Limits(None, 1)))
    assert free.start() == []
    p = free.step()
    assert p.moving == 1 and p.message == ""
    assert throttles.sync(a, {}, None) == throttles.Synced([])  # `reassignments cancel`: nothing
    plan, _ = ReassignmentPlan.from_moves([(tp("orders", 1), [4, 2, 0])],
                                          limits=Limits(1000, 1), additional=True)
    held = ReassignmentExecutor(a, plan)
    assert held.start() == []
    p = held.step()
    assert p.moving == 0 and p.message.startswith(
        f"could not set throttles: not authorized on topic {T}")
    a.refuse_reads = KafkaApiError(errors.REQUEST_TIMED_OUT, "slow")
    with pytest.raises(KafkaApiError):  # not a refusal: the caller's error handling sees it
        throttles.sync(a, {}, None)


def test_a_sync_deletes_an_older_kraftsmans_broker_config_once(tmp_path: Path) -> None:
    """Whatever its value — a real broker shows it masked — ``kraftsman.throttle`` goes at
    the next sync, even one with nothing to place; the sync after writes nothing."""
    c = cluster(tmp_path)
    c.incremental_alter_configs({("BROKER", str(b)): {"kraftsman.throttle": "?"}
                                 for b in (1, 4)})
    writes = _Refusing(c)
    assert throttles.sync(writes, {}, None).problems == []
    assert configs_in(c) == {}
    writes.refuse_brokers = 1  # a second sync must not write any broker config
    assert throttles.sync(writes, {}, None).problems == [] and writes.refuse_brokers == 1


def test_an_unthrottled_run_deletes_an_older_kraftsmans_broker_config_at_its_end(
        tmp_path: Path) -> None:
    """An unthrottled run does not read every broker's configs before its first move (most
    of a second on a busy real cluster): the older marker goes at the run's end."""
    c = cluster(tmp_path)
    c.incremental_alter_configs({("BROKER", "1"): {"kraftsman.throttle": "?"}})
    ex = ReassignmentExecutor(c, plan_of({tp("orders", 0): [3, 1, 2]}, Limits(None, 1)))
    assert ex.start() == []
    ex.step()
    # (shown masked, as a real broker shows a config it does not know)
    assert ex.moving and configs_in(c) == {("BROKER", "1"): {"kraftsman.throttle": None}}
    assert drive(c, ex).phase is Phase.COMPLETED
    assert configs_in(c) == {}
