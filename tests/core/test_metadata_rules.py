"""Rules of the metadata controller that the mutation run of ``controller_core/metadata``
found unpinned (docs/mutation.md). Each test states what Kafka does and cites the class."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import orjson
import pytest

from controller_core import errors
from controller_core.errors import OK, ApiResult
from controller_core.metadata import image as image_module
from controller_core.metadata import partition_change as pc
from controller_core.metadata.controller import (
    Controller,
    format_throttled_replicas,
    parse_throttled_replicas,
)
from controller_core.metadata.image import MetadataImage
from controller_core.metadata.placement import assign_replicas, rack_alternated
from controller_core.metadata.records import (
    BrokerFencingRecord,
    ClusterRecord,
    ConfigRecord,
    PartitionChangeRecord,
    PartitionRecord,
    Record,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    decode_record,
    encode_record,
)
from controller_core.model import NO_LEADER, ElectionType, PartitionRegistration, TopicPartition
from controller_core.storage.framing import read_frames
from controller_core.storage.metadata_log import MetadataLog

TP = TopicPartition("orders", 0)


class Harness:
    """A controller over an image; ``log`` is every record it emitted, in order."""

    def __init__(self, brokers: dict[int, str | None], fenced: Sequence[int] = ()) -> None:
        self.image = MetadataImage()
        self.log: list[Record] = []
        self.controller = Controller(self.image, self._emit)
        for b, rack in brokers.items():
            self.controller.register_broker(b, rack)
        for b in fenced:
            self.controller.fence_broker(b)

    def _emit(self, record: Record) -> None:
        self.image.apply(record)
        self.log.append(record)

    def emitted_by(self, action: object) -> list[Record]:
        """The records emitted while running ``action()``."""
        start = len(self.log)
        assert callable(action)
        action()
        return self.log[start:]


def seed_with_start(n: int, start: int, shift: int) -> int:
    """A seed whose first two draws are Kafka's ``fixedStartIndex`` for ``n`` brokers: the
    placement takes a seeded RNG, AdminUtils' tests pass the start index directly."""
    for seed in range(100_000):
        r = random.Random(seed)
        if (r.randrange(n), r.randrange(n)) == (start, shift):
            return seed
    raise AssertionError("no such seed")


# -- placement (AdminUtils.assignReplicasToBrokers) -------------------------------------------
def test_rack_alternated_broker_list_is_kafkas() -> None:
    """AdminUtils.getRackAlternatedBrokerList: racks in name order, one broker of each in
    turn, brokers of a rack in id order; a rack that runs out is skipped."""
    assert rack_alternated({0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2",
                            5: "rack1"}) == [0, 3, 1, 5, 4, 2]
    three = {b: f"rack{b // 3 + 1}" for b in range(9)}
    assert rack_alternated(three) == [0, 3, 6, 1, 4, 7, 2, 5, 8]
    uneven = {0: "a", 1: "a", 2: "a", 3: "b"}
    assert rack_alternated(uneven) == [0, 3, 1, 2]


def test_rack_aware_assignment_is_kafkas_worked_example() -> None:
    """The example of AdminUtils.assignReplicasToBrokers' javadoc (start index 0): the
    rack-alternated list 0,3,1,5,4,2 assigned round robin; partition 6 starts the second
    round with the followers shifted (0,4,2 instead of repeating 0,3,1)."""
    racks: dict[int, str | None] = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2",
                                    4: "rack2", 5: "rack1"}
    got = assign_replicas(racks, 7, 3, random.Random(seed_with_start(6, 0, 0)))
    assert got == [[0, 3, 1], [3, 1, 5], [1, 5, 4], [5, 4, 2], [4, 2, 0], [2, 0, 3],
                   [0, 4, 2]]


def test_rack_unaware_assignment_is_kafkas_table() -> None:
    """AdminUtils' javadoc table for 5 brokers, 10 partitions, 3 replicas (start index 0):
    first replicas round robin, followers at an increasing shift, the shift growing by one
    after each full round."""
    brokers: dict[int, str | None] = {b: None for b in range(5)}
    got = assign_replicas(brokers, 10, 3, random.Random(seed_with_start(5, 0, 0)))
    assert got == [[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 0], [4, 0, 1],
                   [0, 2, 3], [1, 3, 4], [2, 4, 0], [3, 0, 1], [4, 1, 2]]


def test_the_start_index_and_shift_come_from_the_rng() -> None:
    """AdminUtils draws the start index and the first shift at random (RAND.nextInt): a
    different draw rotates the leaders and the followers."""
    brokers: dict[int, str | None] = {b: None for b in range(5)}
    got = assign_replicas(brokers, 2, 3, random.Random(seed_with_start(5, 2, 1)))
    # first replica at index 2; followers at shift 1 + (1 + j) % 4 = 2, 3
    assert got == [[2, 4, 0], [3, 0, 1]]
    three = assign_replicas(dict.fromkeys(range(3)), 9, 2, random.Random(seed_with_start(3, 0, 1)))
    # the follower of partition p sits 1 + (1 + p // 3) % 2 after its leader: 2, 1, 2 by round
    assert three == [[0, 2], [1, 0], [2, 1], [0, 1], [1, 2], [2, 0], [0, 2], [1, 0], [2, 1]]


@pytest.mark.parametrize(("racks", "rf"), [("ab", 2), ("abc", 3), ("abc", 2), ("ab", 3)])
def test_rack_aware_placement_uses_every_rack_before_repeating_one(racks: str, rf: int) -> None:
    """AdminUtils.assignReplicasToBrokersRackAware: a partition gets replicas on distinct
    brokers, on distinct racks until every rack holds one; leaders spread evenly."""
    brokers: dict[int, str | None] = {b: racks[b % len(racks)] for b in range(6)}
    for seed in range(20):
        got = assign_replicas(brokers, 12, rf, random.Random(seed))
        for replicas in got:
            assert len(replicas) == len(set(replicas)) == rf
            on = [brokers[r] for r in replicas]
            assert len(set(on)) == min(rf, len(racks)), (seed, replicas)
        leaders = [replicas[0] for replicas in got]
        assert sorted(leaders) == sorted(list(range(6)) * 2), (seed, leaders)


def test_the_search_for_a_follower_continues_where_the_previous_one_stopped() -> None:
    """AdminUtils.assignReplicasToBrokersRackAware keeps one counter k across a partition's
    followers: a broker skipped for its rack is not reconsidered from the start once every
    rack holds a replica. Worked by hand with Kafka's loop for start 0, shift 2 (offsets
    1 + (2 * 2 + k) % 3 from the leader in the rack-alternated list)."""
    seed = seed_with_start(4, 0, 2)
    # list 0a 1b 2a 3b: k=0 -> 2 (rack a, skipped), k=1 -> 3 (b), k=2 -> 1 (racks full)
    assert assign_replicas({0: "a", 1: "b", 2: "a", 3: "b"}, 1, 3, random.Random(seed)) == [
        [0, 3, 1]]
    # list 0a 1b 2a 3a: k=0 -> 2, k=1 -> 3 (rack a, skipped), k=2 -> 1 (b), k=3 -> 2
    assert assign_replicas({0: "a", 1: "b", 2: "a", 3: "a"}, 1, 3, random.Random(seed)) == [
        [0, 1, 2]]


def test_one_rack_places_as_without_racks() -> None:
    """With a single rack every rack holds a replica from the start, so Kafka's rack-aware
    loop takes the brokers in round-robin order, as the rack-unaware assignment does."""
    for seed in range(10):
        assert (assign_replicas(dict.fromkeys(range(5), "a"), 10, 3, random.Random(seed))
                == assign_replicas(dict.fromkeys(range(5)), 10, 3, random.Random(seed)))


def test_brokers_without_a_rack_among_racked_ones_get_rack_unaware_placement() -> None:
    """AdminUtils refuses to place rack-aware when only some brokers have a rack; kraftsman
    then places as Kafka does with rack awareness disabled: the racks are ignored."""
    mixed: dict[int, str | None] = {0: "a", 1: None, 2: "b", 3: "a", 4: "c"}
    plain: dict[int, str | None] = dict.fromkeys(mixed)
    for seed in range(10):
        assert (assign_replicas(mixed, 10, 4, random.Random(seed))
                == assign_replicas(plain, 10, 4, random.Random(seed)))


def test_one_broker_gets_every_replica_and_too_few_brokers_are_refused() -> None:
    """AdminUtils refuses a replication factor above the broker count, naming both."""
    assert assign_replicas({7: "a"}, 3, 1, random.Random(0)) == [[7], [7], [7]]
    with pytest.raises(ValueError, match="replication factor 4 exceeds 3 brokers"):
        assign_replicas({0: None, 1: None, 2: None}, 1, 4, random.Random(0))
    assert assign_replicas({0: None, 1: None, 2: None}, 1, 3, random.Random(0))[0] != []


# -- topics (ReplicationControlManager.createTopic) ---------------------------------------------
def test_created_partitions_have_the_live_replicas_in_sync_and_the_first_leading() -> None:
    """ReplicationControlManager.createTopic: the ISR is the assigned replicas that are
    active, and buildPartitionRegistration makes the first of them the leader (epoch 0)."""
    h = Harness({0: "a", 1: "b", 2: "c"}, fenced=[0])
    assert h.controller.create_topic("orders", 2, 3, rng=random.Random(1),
                                     assignment=[[0, 1, 2], [2, 0, 1]]).ok
    assert h.image.partition(TopicPartition("orders", 0)) == PartitionRegistration(
        (0, 1, 2), (1, 2), 1, 0, 0)
    assert h.image.partition(TopicPartition("orders", 1)) == PartitionRegistration(
        (2, 0, 1), (2, 1), 2, 0, 0)


def test_a_manual_assignment_onto_fenced_brokers_only_is_refused() -> None:
    """ReplicationControlManager.createTopic answers INVALID_REPLICA_ASSIGNMENT, in Kafka
    4.4's words naming the partition, instead of creating a partition with no leader;
    nothing is written."""
    h = Harness({0: "a", 1: "b", 2: "c"}, fenced=[1, 2])
    before = len(h.log)
    r = h.controller.create_topic("orders", 2, 2, rng=random.Random(1),
                                  assignment=[[0, 1], [1, 2]])
    assert r == ApiResult(errors.INVALID_REPLICA_ASSIGNMENT,
                          "All brokers specified in the manual partition assignment for "
                          "partition 1 are fenced or in controlled shutdown.")
    assert len(h.log) == before and "orders" not in h.image.topics


def test_create_topic_refusals_name_the_problem() -> None:
    """ReplicationControlManager.createTopic, in Kafka 4.4's words: TOPIC_ALREADY_EXISTS,
    INVALID_REPLICATION_FACTOR from StripedReplicaPlacer for more replicas than brokers,
    INVALID_REPLICA_ASSIGNMENT for a broker that is not registered
    (validateManualPartitionAssignment names the lowest such id); none of them writes a
    record."""
    h = Harness({0: "a", 1: "b"})
    rng = random.Random(3)
    assert h.controller.create_topic("orders", 1, 2, rng=rng).ok
    before = len(h.log)
    assert h.controller.create_topic("orders", 1, 2, rng=rng) == ApiResult(
        errors.TOPIC_ALREADY_EXISTS, "Topic 'orders' already exists.")
    assert h.controller.create_topic("billing", 1, 3, rng=rng) == ApiResult(
        errors.INVALID_REPLICATION_FACTOR,
        "Unable to replicate the partition 3 time(s): The target replication factor of 3 "
        "cannot be reached because only 2 broker(s) are registered or some brokers have all "
        "their log directories cordoned.")
    unknown = h.controller.create_topic("billing", 1, 2, rng=rng, assignment=[[0, 9, 8]])
    assert unknown == ApiResult(errors.INVALID_REPLICA_ASSIGNMENT,
                                "The manual partition assignment includes broker 8, but no "
                                "such broker is registered.")
    assert len(h.log) == before


@pytest.mark.xfail(strict=True, reason="kraftsman places replicas on live brokers only; Kafka "
                   "4.4's StripedReplicaPlacer counts and uses fenced brokers too")
def test_automatic_placement_counts_fenced_brokers_as_kafka_does() -> None:
    """StripedReplicaPlacer (Kafka 4.4) refuses a replication factor only above the
    registered brokers, fenced ones included, and places replicas on fenced brokers after
    the unfenced ones (they are not in the ISR). Known divergence of the twin."""
    h = Harness({0: "a", 1: "b", 2: "c"}, fenced=[2])
    assert h.controller.create_topic("billing", 1, 3, rng=random.Random(3)).ok
    p = h.image.partition(TopicPartition("billing", 0))
    assert p is not None and set(p.replicas) == {0, 1, 2} and set(p.isr) == {0, 1}


def test_automatic_placement_uses_live_brokers_only_and_keeps_the_topic_figures() -> None:
    """ReplicationControlManager places new replicas on usable (unfenced) brokers only; the
    topic record carries its id (a UUID drawn from the seeded RNG) and the size figures."""
    h = Harness({0: "a", 1: "b", 2: "c", 3: "a"}, fenced=[3])
    assert h.controller.create_topic("orders", 6, 3, rng=random.Random(5), message_bytes=512,
                                     produce_bytes_per_second=2.5).ok
    topic = h.image.topics["orders"]
    assert (topic.message_bytes, topic.produce_bytes_per_second) == (512, 2.5)
    assert all(3 not in p.replicas for p in topic.partitions)
    assert all(p.isr == p.replicas and p.leader == p.replicas[0] for p in topic.partitions)
    other = Harness({0: "a", 1: "b", 2: "c", 3: "a"}, fenced=[3])
    assert other.controller.create_topic("orders", 6, 3, rng=random.Random(5)).ok
    assert other.image.topics["orders"].topic_id == topic.topic_id  # same seed, same id
    # CreateTopics carries no size figures: such a topic has TopicRecord's defaults
    assert (other.image.topics["orders"].message_bytes,
            other.image.topics["orders"].produce_bytes_per_second) == (1024, 0.0)
    assert len(topic.topic_id) == 36 and topic.topic_id[14] == "4"  # a version-4 UUID


# -- brokers (ClusterControlManager / ReplicationControlManager.handleBrokerFenced) ------------
def test_fencing_an_unknown_or_already_fenced_broker_writes_nothing() -> None:
    """ClusterControlManager only writes a BrokerRegistrationChangeRecord for a change: a
    broker that is not registered, or is already fenced, gets none (and no ISR changes)."""
    h = Harness({0: "a", 1: "b"}, fenced=[1])
    assert h.emitted_by(lambda: h.controller.fence_broker(9)) == []
    assert h.emitted_by(lambda: h.controller.fence_broker(1)) == []
    assert h.emitted_by(lambda: h.controller.unfence_broker(0)) == []
    assert h.emitted_by(lambda: h.controller.unfence_broker(9)) == []
    assert h.emitted_by(lambda: h.controller.fence_broker(0)) == [
        BrokerFencingRecord(0, fenced=True)]
    assert h.emitted_by(lambda: h.controller.unfence_broker(1)) == [
        BrokerFencingRecord(1, fenced=False)]
    assert h.image.brokers[1].fenced is False and h.image.live_brokers() == {1}


def test_registering_a_broker_again_writes_only_a_changed_rack() -> None:
    """ClusterControlManager.registerBroker: the same registration again changes nothing; a
    new rack is a new registration."""
    h = Harness({0: "a"})
    assert h.emitted_by(lambda: h.controller.register_broker(0, "a")) == []
    assert h.emitted_by(lambda: h.controller.register_broker(0, "b")) == [
        RegisterBrokerRecord(0, "b", fenced=False)]
    assert h.image.brokers[0].rack == "b"


# -- elections (PartitionChangeBuilder, ReplicationControlManager.electLeader) ----------------
def test_an_unclean_election_with_no_live_replica_answers_in_kafkas_words() -> None:
    """ReplicationControlManager.electLeader answers ``new ApiError(ELIGIBLE_LEADERS_NOT_
    AVAILABLE)`` when the builder elects nobody (no replica is alive): the message is that
    error's default one, which electLeaders sends with the partition's result."""
    p = PartitionRegistration((1, 2, 3), (), NO_LEADER, 4, elr=(1,), last_known_elr=(1,))
    assert pc.elect_leader(TP, p, False, lambda r: r == 7, pc.Rules()) == ApiResult(
        errors.ELIGIBLE_LEADERS_NOT_AVAILABLE, "Eligible topic partition leaders are not "
        "available.")


# -- the on-disk batch ------------------------------------------------------------------------
def test_both_ways_of_appending_write_the_same_documented_batch(tmp_path: Path) -> None:
    """A batch is one frame {o, e, t, q, r} (records.py: the shape of a Raft log entry, so
    the quorum can carry it): appending records and appending the rows the quorum already
    encoded write the same bytes."""
    records = [TopicRecord("orders", "id-1"), PartitionRecord("orders", 0, (1, 2), (1, 2), 1)]
    a, b = MetadataLog(tmp_path / "a", fsync=False), MetadataLog(tmp_path / "b", fsync=False)
    a.recover()
    b.recover()
    a.append(records, epoch=3, timestamp_ms=1234, quorum_end=9)
    b.append_encoded(orjson.dumps([encode_record(r) for r in records]), len(records), epoch=3,
                     timestamp_ms=1234, quorum_end=9)
    a.close()
    b.close()
    [(_, written)] = read_frames(next((tmp_path / "a").glob("*.log"))).frames
    [(_, carried)] = read_frames(next((tmp_path / "b").glob("*.log"))).frames
    assert written == carried == (b'{"o":0,"e":3,"t":1234,"q":9,"r":[["T","orders","id-1",1024,'
                                  b'0.0],["P","orders",0,[1,2],[1,2],1,0,0,[],[]]]}')


# -- the image and its snapshot (KRaft's MetadataImage, ImageWriter, MetadataLoader) ----------
# Brokers (one fenced, one without a rack), two topics, a partition in the ISR-shrunk state,
# one leaderless, two mid-move, and configs of both resource types.
BUSY: list[Record] = [
    ClusterRecord("c-1"), RegisterBrokerRecord(0, "a", False),
    RegisterBrokerRecord(1, "b", False), RegisterBrokerRecord(2, None, False),
    RegisterBrokerRecord(3, "a", False), BrokerFencingRecord(3, True),
    TopicRecord("orders", "id-o", 512, 3.5), TopicRecord("billing", "id-b"),
    PartitionRecord("orders", 0, (0, 1, 2), (0, 1, 2), 0, 4, 7),
    PartitionRecord("orders", 1, (1, 2, 0), (1, 2), 1, 2, 3),
    PartitionRecord("orders", 2, (2, 0, 3), (3,), NO_LEADER, 9, 11),
    PartitionRecord("orders", 3, (1, 2, 3, 0), (0, 1, 2), 0, 5, 6, (1,), (0,)),
    PartitionRecord("orders", 4, (0, 2, 1), (0, 2, 1), 2, 1, 1),
    PartitionRecord("billing", 0, (2, 1), (2, 1), 2),
    PartitionRecord("billing", 1, (2, 1, 0), (2, 1), 2, 0, 0, (), (0,)),  # only removing
    ConfigRecord("BROKER", "1", "follower.replication.throttled.rate", "100"),
    ConfigRecord("TOPIC", "orders", "follower.replication.throttled.replicas", "3:1"),
]


def _busy_image() -> MetadataImage:
    img = MetadataImage()
    for r in BUSY:
        img.apply(r)
    return img


def _state(img: MetadataImage) -> tuple[object, ...]:
    return (img.cluster_id, img.brokers, img.topics, img.configs, img.reassigning)


@pytest.mark.parametrize("block", [50_000, 2, 1])
def test_a_snapshot_rebuilds_exactly_the_image_it_was_taken_from(
        monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    """A KRaft snapshot holds the records that rebuild the image (ImageWriter), replayed by
    MetadataLoader into an equal image; kraftsman writes a topic's partitions in columnar
    blocks, so topics larger than one block (here blocks of 1 and 2) must round-trip too."""
    monkeypatch.setattr(image_module, "SNAPSHOT_BLOCK", block)
    img = _busy_image()
    rebuilt = MetadataImage()
    rebuilt.apply_rows(list(img.snapshot_rows()))
    assert _state(rebuilt) == _state(img)
    assert rebuilt.reassigning == {TopicPartition("orders", 3), TopicPartition("billing", 1)}
    assert list(rebuilt.to_records()) == list(img.to_records()) == [
        ClusterRecord("c-1"), RegisterBrokerRecord(0, "a", False),
        RegisterBrokerRecord(1, "b", False), RegisterBrokerRecord(2, None, False),
        RegisterBrokerRecord(3, "a", True), TopicRecord("orders", "id-o", 512, 3.5),
        TopicRecord("billing", "id-b"),
        ConfigRecord("BROKER", "1", "follower.replication.throttled.rate", "100"),
        ConfigRecord("TOPIC", "orders", "follower.replication.throttled.replicas", "3:1"),
        *(r for r in BUSY if isinstance(r, PartitionRecord))]
    assert rebuilt.live_brokers() == {0, 1, 2}
    blocks = -(-5 // block) + -(-2 // block)  # orders' 5 partitions, billing's 2
    assert [row[0] for row in img.snapshot_rows()] == [
        "C", "B", "B", "B", "B", "T", "T", "CF", "CF", *["PB"] * blocks]


def test_a_snapshot_applied_over_an_image_replaces_its_partitions(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a snapshot replaces what the image held (MetadataLoader starts from the
    snapshot): partitions are overwritten from each block's first index, none left over, and
    a move the snapshot does not hold is not listed any more."""
    monkeypatch.setattr(image_module, "SNAPSHOT_BLOCK", 2)
    img = _busy_image()
    stale = _busy_image()
    stale.apply(PartitionRecord("orders", 5, (0, 1), (0,), 0, 0, 0, (1,), ()))  # extra, moving
    stale.apply(PartitionRecord("orders", 1, (0, 1), (0,), 0, 0, 0, (), (1,)))  # moving
    stale.apply(PartitionRecord("orders", 4, (0, 1), (0,), 0, 0, 0, (), (1,)))  # a block's first
    stale.apply(PartitionRecord("orders", 0, (0, 1), (0,), 0, 0, 0, (), (1,)))  # the first's first
    stale.apply_rows(list(img.snapshot_rows()))
    assert stale.topics == img.topics
    assert stale.reassigning == img.reassigning == {TopicPartition("orders", 3),
                                                    TopicPartition("billing", 1)}


@pytest.mark.parametrize("block", [50_000, 1])
def test_a_snapshot_keeps_the_eligible_leader_replicas(monkeypatch: pytest.MonkeyPatch,
                                                       block: int) -> None:
    """KIP-966's fields — the eligible leader replicas and the last known leader — are part
    of a partition's registration (PartitionRecord / PartitionChangeRecord carry them), so a
    snapshot and the log rows rebuild them: a restarted controller still knows which replica
    may lead an offline partition."""
    monkeypatch.setattr(image_module, "SNAPSHOT_BLOCK", block)
    img = _busy_image()
    img.apply(PartitionChangeRecord("orders", 2, isr=(), elr=(3,), last_known_elr=(3,)))
    img.apply(PartitionChangeRecord("billing", 0, isr=(2,), elr=(1,)))
    rebuilt = MetadataImage()
    rebuilt.apply_rows(list(img.snapshot_rows()))
    assert _state(rebuilt) == _state(img)
    assert rebuilt.partition(TopicPartition("orders", 2)) == PartitionRegistration(
        (2, 0, 3), (), NO_LEADER, 9, 12, elr=(3,), last_known_elr=(3,))
    assert rebuilt.partition(TopicPartition("billing", 0)) == PartitionRegistration(
        (2, 1), (2,), 2, 0, 1, elr=(1,))
    by_rows = MetadataImage()
    by_rows.apply_rows(orjson.loads(orjson.dumps([encode_record(r) for r in img.to_records()])))
    assert _state(by_rows) == _state(img)


def test_the_record_rows_of_a_log_batch_build_the_same_image_as_the_records() -> None:
    """The metadata log replays encoded rows; PartitionRecord rows take a fast path that
    must agree with applying the decoded records, offsets and moves included."""
    records = [
        *_busy_image().to_records(),
        PartitionRecord("orders", 3, (1, 2, 0), (1, 2), 1, 6, 7),  # the move completed
        PartitionRecord("billing", 2, (1, 2, 0), (1, 2, 0), 1, 0, 0, (0,), ()),
    ]
    by_record, by_row = MetadataImage(), MetadataImage()
    rows = orjson.loads(orjson.dumps([encode_record(r) for r in records]))
    for row in rows:
        by_record.apply(decode_record(row))
    by_row.apply_rows(rows)
    assert _state(by_row) == _state(by_record)
    assert by_row.next_offset == by_record.next_offset == len(records)
    assert by_row.reassigning == {TopicPartition("billing", 1), TopicPartition("billing", 2)}
    for image in (by_row, by_record):  # an unshrunk ISR shares the replica tuple (memory)
        assert image.topics["orders"].partitions[0].isr is image.topics["orders"].partitions[
            0].replicas
    assert MetadataImage().live_brokers() == frozenset()  # no broker registered: none live


def test_deleting_a_config_and_removing_a_topic_leave_nothing_behind() -> None:
    """ConfigurationControlManager: deleting a resource's last dynamic config leaves it with
    none (describe shows nothing); deleting a topic drops its partitions, its moves and its
    topic configs (ReplicationControlManager.deleteTopic)."""
    img = _busy_image()
    img.apply(ConfigRecord("BROKER", "1", "leader.replication.throttled.rate", "5"))
    img.apply(ConfigRecord("BROKER", "1", "follower.replication.throttled.rate", None))
    assert img.config("BROKER", "1") == {"leader.replication.throttled.rate": "5"}
    img.apply(ConfigRecord("BROKER", "1", "leader.replication.throttled.rate", None))
    assert img.config("BROKER", "1") == {} and ("BROKER", "1") not in img.configs
    img.apply(ConfigRecord("BROKER", "2", "leader.replication.throttled.rate", None))
    assert ("BROKER", "2") not in img.configs
    offset = img.next_offset
    img.apply(RemoveTopicRecord("orders"))
    assert "orders" not in img.topics and img.reassigning == {TopicPartition("billing", 1)}
    assert ("TOPIC", "orders") not in img.configs and img.partition(TP) is None
    assert img.next_offset == offset + 1
    assert img.partition_count() == 2
    img.apply(RemoveTopicRecord("billing"))  # a topic without configs goes as well
    assert img.topics == {} and img.reassigning == set() and img.partition_count() == 0


def test_partition_lookups_and_scans() -> None:
    """What the controller reads: a partition by index (none past the end or below 0), the
    partitions with a replica or an ISR member on a broker, in topic and index order."""
    img = _busy_image()
    assert img.partition(TopicPartition("orders", 4)) is not None
    assert img.partition(TopicPartition("orders", 5)) is None
    assert img.partition(TopicPartition("orders", -1)) is None
    assert img.partition(TopicPartition("ghost", 0)) is None
    on_3 = [tp for tp, _ in img.partitions_on(3)]
    assert on_3 == [TopicPartition("orders", 2), TopicPartition("orders", 3)]
    assert [tp for tp, _ in img.partitions_in_isr_of(3)] == [TopicPartition("orders", 2)]
    assert [tp for tp, _ in img.iter_partitions()] == [
        *(TopicPartition("orders", i) for i in range(5)), TopicPartition("billing", 0),
        TopicPartition("billing", 1)]
    assert img.partition_count() == 7


# -- requests to the controller (ReplicationControlManager, ConfigurationControlManager) -------
def _with_topic(fenced: Sequence[int] = ()) -> Harness:
    h = Harness({0: "a", 1: "b", 2: "c", 3: "a"})
    assert h.controller.create_topic("orders", 2, 3, rng=random.Random(0),
                                     assignment=[[0, 1, 2], [1, 2, 0]]).ok
    for b in fenced:
        h.controller.fence_broker(b)
    return h


def test_reassignment_targets_are_validated_before_anything_changes() -> None:
    """ReplicationControlManager.alterPartitionReassignments: an unknown topic or partition
    is UNKNOWN_TOPIC_OR_PARTITION; an empty list, a negative or repeated broker id, or a
    broker that is not registered is INVALID_REPLICA_ASSIGNMENT (validateManualPartition
    Assignment, over the ids in ascending order); a cancel of a partition not moving is
    NO_REASSIGNMENT_IN_PROGRESS. Each message is Kafka 4.4's (differential scenario
    invalid); a refused partition writes nothing."""
    h = _with_topic()
    before = len(h.log)
    out = h.controller.alter_partition_reassignments({
        TopicPartition("ghost", 0): [0, 1, 2],
        TopicPartition("orders", 7): [0, 1, 2],
        TopicPartition("orders", 0): [],
        TopicPartition("orders", 1): [0, -1, -2],
    })
    assert {tp.topic + str(tp.partition): r.error for tp, r in out.items()} == {
        "ghost0": errors.UNKNOWN_TOPIC_OR_PARTITION, "orders7": errors.UNKNOWN_TOPIC_OR_PARTITION,
        "orders0": errors.INVALID_REPLICA_ASSIGNMENT, "orders1": errors.INVALID_REPLICA_ASSIGNMENT}
    assert out[TopicPartition("ghost", 0)].message == "Unable to find a topic named ghost."
    assert out[TopicPartition("orders", 7)].message == "Unable to find partition orders:7."
    assert out[TopicPartition("orders", 0)].message == (
        "The manual partition assignment includes an empty replica list.")
    assert out[TopicPartition("orders", 1)].message == (
        "The manual partition assignment includes broker -2, but no such broker is registered.")
    out = h.controller.alter_partition_reassignments({
        TopicPartition("orders", 0): [3, 1, 3, 1, 2],
        TopicPartition("orders", 1): [9, 3, 7],
    })
    assert out[TopicPartition("orders", 0)].message == (
        "The manual partition assignment includes the broker 1 more than once.")
    assert out[TopicPartition("orders", 1)].message == (
        "The manual partition assignment includes broker 7, but no such broker is registered.")
    cancel = h.controller.alter_partition_reassignments({TopicPartition("orders", 0): None})
    assert cancel[TopicPartition("orders", 0)] == ApiResult(
        errors.NO_REASSIGNMENT_IN_PROGRESS, "")
    assert len(h.log) == before
    assert h.controller.validate_target(TopicPartition("orders", 0), [0]).ok


def test_a_move_onto_brokers_holding_the_data_completes_in_the_same_request() -> None:
    """ReplicationControlManager: a reassignment whose target replicas are all in sync needs
    no copy, so the request both starts and completes it: one PartitionChangeRecord, which
    bumps the leader epoch once (PartitionChangeBuilder.build); the removed leader 0 hands
    over to the first target replica in sync."""
    h = _with_topic()
    before = len(h.log)
    out = h.controller.alter_partition_reassignments({TopicPartition("orders", 0): [2, 1]})
    assert out[TopicPartition("orders", 0)].ok and len(h.log) == before + 1
    p = h.image.partition(TopicPartition("orders", 0))
    assert p == PartitionRegistration((2, 1), (1, 2), 2, 1, 1)
    assert h.image.reassigning == set()


def test_throttled_replica_lists_parse_as_kafka_reads_them() -> None:
    """Kafka's ThrottledReplicaListValidator: ``*`` or a comma-separated list of
    ``partition:broker`` (whitespace around entries allowed); anything else is malformed.
    The list is written back sorted."""
    assert parse_throttled_replicas(" * ") == "*"
    assert parse_throttled_replicas("") == set() and parse_throttled_replicas("  ") == set()
    assert parse_throttled_replicas(" 0:1 , 12:3") == {(0, 1), (12, 3)}
    for bad in ("0-1", "0:", ":1", "a:1", "1:b", "0:1,", "*,0:1", "-1:2", "0:1:2", "0:\u0661"):
        assert parse_throttled_replicas(bad) is None, bad
    assert format_throttled_replicas({(2, 3), (0, 1), (0, 0)}) == "0:0,0:1,2:3"
    assert format_throttled_replicas([]) == ""


def test_dynamic_configs_are_validated_per_resource_all_or_nothing() -> None:
    """ConfigurationControlManager.incrementalAlterConfigs: a broker resource must name a
    registered broker (INVALID_REQUEST), a topic one an existing topic (UNKNOWN_TOPIC_OR_
    PARTITION); a topic config name Kafka does not know is refused in Kafka's words, one it
    knows but the embedded cluster does not model in ours (naming the supported ones), while
    a broker takes any unknown name as a custom config (as Kafka does: the old
    ``kraftsman.throttle`` marker); a rate is a whole number and a replica list parses. A
    resource with one bad entry changes nothing; deleting needs no valid value; the same
    value again writes no record."""
    h = _with_topic()
    rate, marker = "leader.replication.throttled.rate", "kraftsman.throttle"
    replicas = "follower.replication.throttled.replicas"
    before = len(h.log)
    out = h.controller.incremental_alter_configs({
        ("BROKER", "x"): {rate: "1"},
        ("BROKER", "\u00b9"): {rate: "1"},  # '¹': str.isdigit, but int() raises
        ("BROKER", "9"): {rate: "1"},
        ("GROUP", "g"): {rate: "1"},
        ("TOPIC", "ghost"): {replicas: "*"},
        ("BROKER", "1"): {marker: "run-1", rate: "1.5"},
        ("TOPIC", "orders"): {replicas: "0:1", rate: "5"},
    })
    assert out[("BROKER", "x")] == ApiResult(errors.INVALID_REQUEST,
                                             "broker 'x' is not registered")
    assert out[("BROKER", "\u00b9")] == ApiResult(errors.INVALID_REQUEST,
                                                  "broker '\u00b9' is not registered")
    assert out[("BROKER", "9")].error == errors.INVALID_REQUEST
    assert out[("GROUP", "g")] == ApiResult(errors.INVALID_REQUEST,
                                            "unsupported resource type 'GROUP'")
    assert out[("TOPIC", "ghost")] == ApiResult(errors.UNKNOWN_TOPIC_OR_PARTITION,
                                                "unknown topic 'ghost'")
    assert out[("BROKER", "1")] == ApiResult(
        errors.INVALID_CONFIG, "leader.replication.throttled.rate='1.5': must be a whole "
        "number of bytes/second")
    # Kafka 4.4's own answer (tests/real/test_throttles_real.py asks a real broker)
    assert out[("TOPIC", "orders")] == ApiResult(
        errors.INVALID_CONFIG, "Unknown topic config name: leader.replication.throttled.rate")
    unmodelled = h.controller.incremental_alter_configs(
        {("TOPIC", "orders"): {replicas: "0:1", "retention.ms": "5"}})
    assert unmodelled[("TOPIC", "orders")] == ApiResult(
        errors.INVALID_CONFIG, "topic orders: 'retention.ms' is not a dynamic config here; "
        "supported: ['cleanup.policy', 'follower.replication.throttled.replicas', "
        "'leader.replication.throttled.replicas', 'min.insync.replicas', "
        "'unclean.leader.election.enable']")
    assert len(h.log) == before and h.image.configs == {}
    bad_list = h.controller.incremental_alter_configs({("TOPIC", "orders"): {replicas: "0-1"}})
    assert bad_list[("TOPIC", "orders")] == ApiResult(
        errors.INVALID_CONFIG,
        "Invalid value [0-1] for configuration follower.replication.throttled.replicas: "
        "follower.replication.throttled.replicas must be the literal '*' or a list of replicas "
        "in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")
    ok = h.controller.incremental_alter_configs({
        ("BROKER", "1"): {marker: "run-1", rate: "100", "follower.replication.throttled.rate":
                          None},
        ("TOPIC", "orders"): {replicas: "0:1,1:2"}})
    assert all(r.ok for r in ok.values())
    assert h.image.config("BROKER", "1") == {marker: "run-1", rate: "100"}
    assert h.image.config("TOPIC", "orders") == {replicas: "0:1,1:2"}
    assert h.emitted_by(lambda: h.controller.incremental_alter_configs(
        {("BROKER", "1"): {rate: "100", "follower.replication.throttled.rate": None}})) == []
    after_a_delete = h.controller.incremental_alter_configs(
        {("BROKER", "1"): {marker: None, rate: "fast"}})  # a delete does not end the checks
    assert after_a_delete[("BROKER", "1")].error == errors.INVALID_CONFIG
    assert h.image.config("BROKER", "1") == {marker: "run-1", rate: "100"}


def test_isr_reports_for_unknown_partitions_are_ignored() -> None:
    """ReplicationControlManager.alterPartition answers UNKNOWN_TOPIC_OR_PARTITION for a
    partition it does not have and changes nothing."""
    h = _with_topic()
    ghost = TopicPartition("ghost", 0)
    assert h.emitted_by(lambda: h.controller.replica_caught_up(ghost, 1)) == []
    assert h.emitted_by(lambda: h.controller.replica_fell_behind(ghost, 1)) == []
    assert h.emitted_by(lambda: h.controller.replica_fell_behind(
        TopicPartition("orders", 5), 1)) == []


def test_elect_leaders_answers_as_replication_control_manager() -> None:
    """ReplicationControlManager.electLeaders: with a partition set, every named partition is
    answered once (UNKNOWN_TOPIC_OR_PARTITION "No such topic as ..." for one that does not
    exist); without one, every partition is attempted but only those that needed an
    election are answered. A preferred election needs the preferred replica alive and in
    sync. With ELR (Kafka 4.4's default) a partition whose last in-sync replica is fenced
    has an empty ISR; an unclean election takes a live replica outside the ISR and the ELR.
    Refusals carry the error's default message (``new ApiError(Errors.X)``)."""
    h = _with_topic()
    orders0, orders1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
    ghost = TopicPartition("ghost", 3)
    preferred, unclean = ElectionType.PREFERRED, ElectionType.UNCLEAN
    results, attempted = h.controller.elect_leaders(preferred, [ghost, orders1, ghost, orders1])
    assert attempted == [ghost, orders1] and set(results) == {ghost, orders1}
    assert results[ghost] == ApiResult(errors.UNKNOWN_TOPIC_OR_PARTITION,
                                       "No such topic as ghost")
    assert results[orders1] == ApiResult(errors.ELECTION_NOT_NEEDED,
                                         "Leader election not needed for topic partition.")
    h.controller.fence_broker(0)  # orders-0 moves to 1, orders-1's follower 0 leaves the ISR
    h.controller.unfence_broker(0)
    results, attempted = h.controller.elect_leaders(preferred, None)
    assert attempted == [orders0, orders1]
    assert results == {orders0: ApiResult(errors.PREFERRED_LEADER_NOT_AVAILABLE,
                                          "The preferred leader was not available.")}
    h.controller.replica_caught_up(orders0, 0)  # the leader's new ISR, in hash-set order
    results, _ = h.controller.elect_leaders(preferred, None)
    assert results == {orders0: OK}
    assert h.image.partition(orders0) == PartitionRegistration((0, 1, 2), (0, 1, 2), 0, 2, 3)
    assert h.controller.elect_leaders(preferred, None)[0] == {}
    for b in (1, 2, 0):  # every broker down: the last in-sync replica becomes eligible (ELR)
        h.controller.fence_broker(b)
    assert h.controller.elect_leaders(unclean, [orders0])[0] == {orders0: ApiResult(
        errors.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        "Eligible topic partition leaders are not available.")}
    h.controller.unfence_broker(1)  # 1 is in neither ISR nor ELR: no clean leader comes back
    assert h.image.partition(orders0) == PartitionRegistration(
        (0, 1, 2), (), NO_LEADER, 3, 6, elr=(0,), last_known_elr=(0,))
    assert h.controller.elect_leaders(unclean, [orders0])[0] == {orders0: OK}
    assert h.image.partition(orders0) == PartitionRegistration((0, 1, 2), (1,), 1, 4, 7)
    results, attempted = h.controller.elect_leaders(unclean, None)
    assert attempted == [orders0, orders1] and results == {orders1: OK}
    assert h.image.partition(orders1) == PartitionRegistration((1, 2, 0), (1,), 1, 3, 4)


# -- reassignment edges (ReplicationControlManager.changePartitionReassignment) --------------
RULES = pc.Rules()  # Kafka 4.4's defaults: min.insync.replicas 1, ELR on, no unclean


def _alive(*ids: int) -> pc.Acceptable:
    return lambda r: r in ids


ALL = _alive(*range(10))


def test_a_reorder_of_the_replicas_moves_nothing_and_keeps_the_leader_epoch() -> None:
    """A target with the same replicas in another order copies nothing: the replica list is
    rewritten at once and, as no replica leaves and the leader stays, PartitionChangeBuilder
    does not bump the leader epoch."""
    p = PartitionRegistration((1, 2, 3), (1, 2, 3), 2, 7, 9)
    q = pc.after(p, _change(pc.change_reassignment(TP, p, [3, 1, 2], _alive(1, 2, 3), RULES)))
    assert q == PartitionRegistration((3, 1, 2), (1, 2, 3), 2, 7, 10)


def test_retargeting_a_shrinking_move_to_its_full_replica_set_changes_nothing() -> None:
    """[1,2,3] -> [1,2] waits for 2 to be in sync (3 is being removed, fewer adding than
    removing: the whole target must be in sync). A new target of [1,2,3] names the current
    replicas: changePartitionReassignment finds nothing to add or remove and sets neither
    list, so Kafka 4.4 keeps the stale removing [3] (differential scenario retarget-regrow)
    and the move still ends on [1,2]. would_strand flags the target; a cancel is the way
    back to [1,2,3], without a leader-epoch bump (nothing leaves)."""
    p = PartitionRegistration((1, 2, 3), (1, 3), 1, 4, 4)
    live = _alive(1, 2, 3)
    moving = pc.after(p, _change(pc.change_reassignment(TP, p, [1, 2], live, RULES)))
    assert (moving.replicas, moving.adding, moving.removing) == ((1, 2, 3), (), (3,))
    assert pc.would_strand(moving.replicas, moving.adding, moving.removing, [1, 2, 3])
    assert pc.change_reassignment(TP, moving, [1, 2, 3], live, RULES) is None
    done = pc.after(moving, _change(pc.alter_isr(TP, moving, [1, 2, 3], live, RULES)))
    assert (done.replicas, done.isr, done.leader, done.is_reassigning) == ((1, 2), (1, 2), 1,
                                                                          False)
    back = pc.after(moving, _change(pc.cancel_reassignment(TP, moving, live, RULES)))
    assert (back.replicas, back.isr, back.leader, back.leader_epoch) == ((1, 2, 3), (1, 3), 1, 4)
    assert not back.is_reassigning


def _change(c: object) -> PartitionChangeRecord:
    assert isinstance(c, PartitionChangeRecord), c
    return c


def test_every_record_type_round_trips_through_json_and_an_unknown_tag_is_named() -> None:
    """Records go to disk and through the quorum as JSON rows (KRaft's metadata records are
    versioned messages; an unknown type is an error naming it, never skipped silently)."""
    records: list[Record] = [
        ClusterRecord("c"), RegisterBrokerRecord(1, None, True), BrokerFencingRecord(1, False),
        TopicRecord("t", "id", 10, 0.5), RemoveTopicRecord("t"),
        PartitionRecord("t", 2, (1, 2), (2,), 2, 3, 4, (2,), (1,)),
        PartitionRecord("t", 3, (1, 2), (), NO_LEADER, 3, 4, elr=(2,), last_known_elr=(2,)),
        PartitionChangeRecord("t", 2, isr=(1, 2), leader_epoch=5),
        PartitionChangeRecord("t", 3, isr=(), elr=(1,), last_known_elr=(1,)),
        ConfigRecord("TOPIC", "t", "k", None)]
    assert [decode_record(orjson.loads(orjson.dumps(encode_record(r)))) for r in records] == (
        records)
    with pytest.raises(ValueError, match="unknown record type 'ZZ'"):
        decode_record(["ZZ", 1])


def test_cancelling_keeps_a_leader_that_stays_in_sync_and_names_a_refusal() -> None:
    """ReplicationControlManager.cancelPartitionReassignment (PartitionReassignmentRevert):
    the replicas minus the adding ones in their current order, the ISR minus the adding
    ones; the leader stays when it is an original replica, alive and in sync, even if it is
    not the first of them; only otherwise is one elected. Kafka 4.4 reverts even when no
    original replica is alive (the partition is then leaderless) and refuses only a revert
    that would need an unclean election — every in-sync replica an adding one — unless
    the topic allows one (differential scenarios cancel, cancel-offline)."""
    moving = PartitionRegistration((4, 2, 3, 1), (1, 2, 3), 3, 6, 8, (4,), (1,))
    back = pc.after(moving, _change(pc.cancel_reassignment(TP, moving, _alive(1, 2, 3), RULES)))
    assert (back.replicas, back.isr, back.leader, back.leader_epoch) == ((2, 3, 1), (1, 2, 3),
                                                                         3, 7)
    led_by_4 = moving._replace(isr=(1, 2, 3, 4), leader=4)
    moved = pc.after(led_by_4, _change(pc.cancel_reassignment(TP, led_by_4, _alive(3, 4),
                                                              RULES)))
    assert (moved.replicas, moved.leader) == ((2, 3, 1), 3)  # 2 is dead: 3 is the first
    still = PartitionRegistration((1, 2, 3), (1, 2, 3), 1)
    assert pc.cancel_reassignment(TP, still, _alive(1), RULES) == ApiResult(
        errors.NO_REASSIGNMENT_IN_PROGRESS, "")
    dark = pc.after(moving, _change(pc.cancel_reassignment(TP, moving, _alive(4), RULES)))
    assert (dark.replicas, dark.isr, dark.leader, dark.leader_epoch) == ((2, 3, 1), (1, 2, 3),
                                                                         NO_LEADER, 7)
    only_4 = moving._replace(isr=(4,), leader=4)
    assert pc.cancel_reassignment(TP, only_4, _alive(1, 2, 3, 4), RULES) == ApiResult(
        errors.INVALID_REPLICA_ASSIGNMENT, "Unable to revert partition assignment for orders:0 "
        "because it would require an unclean leader election.")


def test_a_leaderless_partition_takes_no_isr_change_and_leads_again_with_an_eligible_replica(
        ) -> None:
    """AlterPartition comes from the partition's leader (validateAlterPartitionData refuses
    any other sender): a leaderless partition takes no ISR change, so a caught-up replica
    cannot join it. It leads again when an eligible leader replica (KIP-966) is unfenced:
    PartitionChangeBuilder elects it from the ELR, which makes it the ISR and clears the
    last known leader. A led partition's ISR grows without a leader-epoch bump."""
    p = PartitionRegistration((1, 2, 3), (), NO_LEADER, 5, 9, elr=(1,), last_known_elr=(1,))
    assert pc.alter_isr(TP, p, [1, 2], ALL, RULES).error == errors.INVALID_REQUEST  # type: ignore[union-attr]
    q = pc.after(p, _change(pc.leader_and_isr_update(TP, p, _alive(2, 3), RULES, add=1)))
    assert q == PartitionRegistration((1, 2, 3), (1,), 1, 6, 10)
    led = PartitionRegistration((1, 2, 3), (1,), 1, 5, 9)
    assert pc.after(led, _change(pc.alter_isr(TP, led, [1, 3], _alive(1, 3), RULES))) == (
        PartitionRegistration((1, 2, 3), (1, 3), 1, 5, 10))


def test_a_refused_partition_does_not_stop_the_rest_of_the_request() -> None:
    """ReplicationControlManager.alterPartitionReassignments answers per partition: a cancel
    that would need an unclean election is refused (INVALID_REPLICA_ASSIGNMENT, Kafka 4.4's
    cancelPartitionReassignment) and the next partition of the same request still starts
    its move."""
    h = _with_topic()
    orders0, orders1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
    # orders-0 moves 0 -> 3, 3 has caught up and leads, the originals fell out of the ISR
    h.image.apply(PartitionRecord("orders", 0, (3, 1, 2, 0), (3,), 3, 2, 2, (3,), (0,)))
    out = h.controller.alter_partition_reassignments({orders0: None, orders1: [1, 0, 3]})
    assert out[orders0] == ApiResult(
        errors.INVALID_REPLICA_ASSIGNMENT, "Unable to revert partition assignment for orders:0 "
        "because it would require an unclean leader election.")
    assert out[orders1].ok and h.image.reassigning == {orders0, orders1}


def test_retargeting_a_move_to_the_same_replicas_in_another_order_reorders_them() -> None:
    """The target's order is the new preferred order (ReplicationControlManager writes the
    target as given): a re-target of a move to the same replicas in another order is a
    change, not an identical resubmit; no replica leaves and the leader stays, so
    PartitionChangeBuilder leaves the leader epoch alone (the partition epoch bumps)."""
    moving = PartitionRegistration((4, 2, 3, 1), (1, 2, 3), 1, 6, 8, (4,), (1,))
    live = _alive(1, 2, 3, 4)
    q = pc.after(moving, _change(pc.change_reassignment(TP, moving, [2, 4, 3], live, RULES)))
    assert q == PartitionRegistration((2, 4, 3, 1), (1, 2, 3), 1, 6, 9, (4,), (1,))
    assert pc.change_reassignment(TP, q, [2, 4, 3], live, RULES) is None


def test_completing_a_move_keeps_a_leader_that_is_in_the_target_and_in_sync() -> None:
    """PartitionChangeBuilder keeps the current leader when it stays eligible: the ISR
    change that brings the adding 4 in sync completes [1,2,3] -> [4,2,3] while 3 leads and 3
    keeps leading (not the first target replica 4); dropping 1 bumps the leader epoch once.
    A removed leader hands over to the first in-sync target replica."""
    p = PartitionRegistration((4, 2, 3, 1), (1, 2, 3), 3, 5, 7, (4,), (1,))
    live = _alive(1, 2, 3, 4)
    done = pc.after(p, _change(pc.alter_isr(TP, p, [1, 2, 3, 4], live, RULES)))
    assert done == PartitionRegistration((4, 2, 3), (2, 3, 4), 3, 6, 8)
    led_by_1 = p._replace(leader=1)
    done = pc.after(led_by_1, _change(pc.alter_isr(TP, led_by_1, [1, 2, 3, 4], live, RULES)))
    assert (done.leader, done.leader_epoch) == (4, 6)


def test_a_topic_named_like_a_record_tag_replays_from_log_rows() -> None:
    """Topic names are data (Kafka allows "P"); the replay of encoded rows tells records apart
    by their tag only, so a topic called "P" or "PB" rebuilds like any other."""
    records: list[Record] = [TopicRecord("P", "id-p"), TopicRecord("PB", "id-pb"),
                             PartitionRecord("P", 0, (1,), (1,), 1),
                             PartitionRecord("PB", 0, (1,), (1,), 1)]
    by_record, by_row = MetadataImage(), MetadataImage()
    for r in records:
        by_record.apply(r)
    by_row.apply_rows([encode_record(r) for r in records])
    assert _state(by_row) == _state(by_record) and set(by_row.topics) == {"P", "PB"}
