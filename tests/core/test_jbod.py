"""JBOD in the embedded twin (KIP-113 AlterReplicaLogDirs / DescribeLogDirs, KIP-858
directories): placement, future replicas, throttles, failures and restarts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from controller_core import errors
from controller_core.admin import LogDir, LogDirReplica
from controller_core.config import EmbeddedClusterSpec
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.metadata.controller import ALTER_LOG_DIRS_RATE
from controller_core.metadata.records import (
    PartitionChangeRecord,
    PartitionRecord,
    decode_record,
    encode_record,
)
from controller_core.model import TopicPartition
from tests.helpers import cluster, run_until, spec, tp

T0 = tp("orders", 0)  # replicas [0, 1, 2], 10 MB; brokers copy at 1 MB/s
CAPACITY = 100_000_000


def dirs_of(b: int, n: int = 3) -> list[str]:
    return [f"/data/{b}/d{i}" for i in range(n)]


def jbod_spec(dirs: int = 3, **kw: Any) -> EmbeddedClusterSpec:
    doc = spec(**kw).model_dump(by_alias=True, exclude_none=True)
    for b in doc["brokers"]:
        b["logDirs"] = [{"path": p, "capacityBytes": CAPACITY} for p in dirs_of(b["id"], dirs)]
    return EmbeddedClusterSpec.model_validate(doc)


def jbod(path: Path, **kw: Any) -> EmbeddedCluster:
    return EmbeddedCluster.open(path, jbod_spec(**kw), fsync=False)


def where(c: EmbeddedCluster, broker: int, t: TopicPartition = T0) -> dict[str, LogDirReplica]:
    """path -> the entry of ``t`` there (current or future) on ``broker``."""
    return {d.path: r for d in c.describe_log_dirs([broker], [t])[broker] for r in d.replicas}


def current_dir(c: EmbeddedCluster, broker: int, t: TopicPartition = T0) -> str:
    p = c.image.partition(t)
    assert p is not None
    return c.replica_dir(t, p, broker)


def move_elsewhere(c: EmbeddedCluster, broker: int = 0, t: TopicPartition = T0) -> str:
    dest = next(d for d in dirs_of(broker) if d != current_dir(c, broker, t))
    assert c.alter_replica_log_dirs({(t, broker): dest})[(t, broker)].ok
    return dest


def future_size(c: EmbeddedCluster, broker: int = 0, t: TopicPartition = T0) -> int:
    [f] = [r for r in where(c, broker, t).values() if r.future]
    return f.size_bytes


# -- configuration --------------------------------------------------------------------------
def test_without_log_dirs_a_broker_has_its_one_default_directory(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    [d] = c.describe_log_dirs([0])[0]
    assert d.path == "/var/lib/kraftsman/broker-0"
    assert d.total_bytes is None and d.usable_bytes is None and not d.cordoned
    assert {r.tp.partition for r in d.replicas} == {0, 1, 2, 3, 4, 5}
    assert c.image.partition(T0).directories == ()  # type: ignore[union-attr]
    sized = EmbeddedClusterSpec.model_validate(
        {"brokers": [{"id": 0, "diskBytes": 5_000}]}).brokers[0].directories()
    assert [(d.path, d.capacity_bytes) for d in sized] == [("/var/lib/kraftsman/broker-0", 5_000)]


@pytest.mark.parametrize(("dirs", "words"), [
    ([], "logDirs"),
    ([{"path": "data/d0"}], "logDirs.0.path"),
    ([{"path": "/d"}, {"path": "/d"}], "logDirs: duplicate path(s) ['/d']"),
    ([{"path": "/d", "capacityBytes": 0}], "logDirs.0.capacityBytes"),
])
def test_a_bad_log_dirs_spec_is_refused_naming_the_field(dirs: list[Any], words: str) -> None:
    with pytest.raises(ValidationError) as e:
        EmbeddedClusterSpec.model_validate({"brokers": [{"id": 0, "logDirs": dirs}]})
    assert words in str(e.value)


# -- placement --------------------------------------------------------------------------------
def test_new_replicas_spread_over_the_directories_with_fewest_partitions(tmp_path: Path) -> None:
    c = jbod(tmp_path)
    dirs = c.describe_log_dirs([0])[0]
    assert [len(d.replicas) for d in dirs] == [2, 2, 2]
    assert [d.usable_bytes for d in dirs] == [CAPACITY - 20_000_000] * 3
    assert all(d.total_bytes == CAPACITY for d in dirs)


def test_a_preferred_directory_is_used_when_a_reassignment_adds_the_replica(
        tmp_path: Path) -> None:
    c = jbod(tmp_path)
    # broker 3 hosts nothing: the least-loaded choice would be its first directory
    got = c.alter_replica_log_dirs({(T0, 3): "/data/3/d2"})[(T0, 3)]
    assert got.error == errors.REPLICA_NOT_AVAILABLE
    assert c.alter_partition_reassignments({T0: [3, 1, 2]})[T0].ok
    assert current_dir(c, 3) == "/data/3/d2"
    run_until(c, lambda: not c.list_partition_reassignments())
    assert current_dir(c, 3) == "/data/3/d2"


# -- AlterReplicaLogDirs answers ---------------------------------------------------------------
def test_alter_answers_with_kafkas_error_codes(tmp_path: Path) -> None:
    c = jbod(tmp_path)
    here = current_dir(c, 0)
    got = c.alter_replica_log_dirs({
        (T0, 0): here, (T0, 1): "/data/0/d0", (tp("orders", 9), 2): "/data/2/d0"})
    assert got[(T0, 0)].error == errors.NONE
    assert got[(T0, 1)].error == errors.LOG_DIR_NOT_FOUND  # broker 0's path, not broker 1's
    assert got[(tp("orders", 9), 2)].error == errors.UNKNOWN_TOPIC_OR_PARTITION  # as Kafka
    assert c.alter_replica_log_dirs({(T0, 4): "/data/4/d1"})[(T0, 4)].error \
        == errors.REPLICA_NOT_AVAILABLE  # a partition broker 4 does not host
    assert c.data.futures == {}  # already there: nothing happens
    c.fail_broker(2)
    assert c.alter_replica_log_dirs({(T0, 2): "/data/2/d0"})[(T0, 2)].error \
        == errors.BROKER_NOT_AVAILABLE


# -- future replicas ---------------------------------------------------------------------------
def test_a_future_replica_grows_then_replaces_the_current_one(tmp_path: Path) -> None:
    c = jbod(tmp_path)
    here = current_dir(c, 0)
    dest = move_elsewhere(c)
    c.advance(3)
    seen = where(c, 0)
    assert seen[here] == LogDirReplica(T0, 10_000_000, 0)
    assert seen[dest].future and seen[dest].size_bytes == pytest.approx(3_000_000, rel=0.02)
    assert seen[dest].offset_lag == pytest.approx(7_000_000 / 1024, rel=0.02)
    # the current replica answers as before everywhere else
    assert c.replica_log_sizes([(T0, 0)]) == {(T0, 0): 10_000_000}
    usable = {d.path: d.usable_bytes for d in c.describe_log_dirs([0])[0]}
    assert usable[dest] == CAPACITY - 2 * 10_000_000 - seen[dest].size_bytes
    c.advance(3)
    assert future_size(c) > seen[dest].size_bytes
    run_until(c, lambda: current_dir(c, 0) == dest, limit=10)
    assert where(c, 0) == {dest: LogDirReplica(T0, 10_000_000, 0)}
    assert 9.5 <= c.now <= 11.5 and c.data.futures == {}


def test_the_copy_is_capped_by_the_broker_throttle_until_it_is_removed(tmp_path: Path) -> None:
    c = jbod(tmp_path)
    assert c.incremental_alter_configs(
        {("BROKER", "0"): {ALTER_LOG_DIRS_RATE: "250000"}})[("BROKER", "0")].ok
    move_elsewhere(c)
    c.advance(4)
    assert future_size(c) == pytest.approx(1_000_000, abs=1024)
    c.incremental_alter_configs({("BROKER", "0"): {ALTER_LOG_DIRS_RATE: None}})
    c.advance(2)
    assert future_size(c) == pytest.approx(3_000_000, abs=1024)  # + the broker's 1 MB/s


def test_the_cluster_default_throttle_applies_to_every_broker(tmp_path: Path) -> None:
    c = jbod(tmp_path)
    assert c.incremental_alter_configs(
        {("BROKER", ""): {ALTER_LOG_DIRS_RATE: "500000"}})[("BROKER", "")].ok
    move_elsewhere(c)
    c.advance(4)
    assert future_size(c) == pytest.approx(2_000_000, abs=1024)


def test_a_second_alter_retargets_the_future(tmp_path: Path) -> None:
    c = jbod(tmp_path)
    here = current_dir(c, 0)
    first = move_elsewhere(c)
    c.advance(4)
    second = next(d for d in dirs_of(0) if d not in (here, first))
    assert c.alter_replica_log_dirs({(T0, 0): second})[(T0, 0)].ok
    assert set(where(c, 0)) == {here, second} and future_size(c) == 0
    c.advance(2)
    assert future_size(c) == pytest.approx(2_000_000, rel=0.02)
    run_until(c, lambda: current_dir(c, 0) == second, limit=20)
    # back to where the replica is, while a future is under way: the future is dropped
    move_elsewhere(c)
    assert c.alter_replica_log_dirs({(T0, 0): second})[(T0, 0)].ok and c.data.futures == {}


def test_a_down_broker_copies_nothing_and_is_omitted(tmp_path: Path) -> None:
    c = jbod(tmp_path)
    move_elsewhere(c)
    c.advance(2)
    before = future_size(c)
    c.fail_broker(0)
    c.advance(5)
    assert 0 not in c.describe_log_dirs([0, 1])
    assert c.data.futures[(T0, 0)].leo * 1024 == pytest.approx(before, abs=1024)
    c.restore_broker(0)
    c.advance(2)
    assert future_size(c) == pytest.approx(before + 2_000_000, rel=0.02)


def test_a_reassignment_off_the_broker_deletes_its_future(tmp_path: Path) -> None:
    c = jbod(tmp_path)
    move_elsewhere(c)
    c.advance(1)
    assert c.alter_partition_reassignments({T0: [3, 1, 2]})[T0].ok
    run_until(c, lambda: not c.list_partition_reassignments())
    assert (T0, 0) not in c.data.futures
    assert all(not d.replicas for d in c.describe_log_dirs([0], [T0])[0])


def test_a_restart_keeps_directories_and_resumes_the_future(tmp_path: Path) -> None:
    """Kafka resumes a future replica after a restart (it is on disk); so does the twin."""
    c = jbod(tmp_path)
    c.incremental_alter_configs({("BROKER", "0"): {ALTER_LOG_DIRS_RATE: "250000"}})
    dest = move_elsewhere(c)
    other = move_elsewhere(c, 1, tp("orders", 1))
    run_until(c, lambda: current_dir(c, 1, tp("orders", 1)) == other, limit=20)
    size = future_size(c)  # broker 0's copy is throttled: still under way
    assert 0 < size < 10_000_000
    placed = {t: c.image.partition(t) for t in (T0, tp("orders", 1))}
    c.close()
    c = jbod(tmp_path)
    assert {t: c.image.partition(t) for t in placed} == placed
    assert current_dir(c, 1, tp("orders", 1)) == other
    assert future_size(c) == size
    run_until(c, lambda: current_dir(c, 0) == dest, limit=60)
    c.close()
    c = jbod(tmp_path)
    assert current_dir(c, 0) == dest


def test_an_old_state_directory_gets_its_replicas_placed(tmp_path: Path) -> None:
    """A state directory written before JBOD (no directories in its records) still loads;
    given more directories, the brokers place their replicas."""
    cluster(tmp_path).close()
    c = jbod(tmp_path)
    assert [len(d.replicas) for d in c.describe_log_dirs([0])[0]] == [2, 2, 2]


# -- cordoning (KIP-1066) --------------------------------------------------------------------
def test_cordoned_log_dirs_name_paths_or_all(tmp_path: Path) -> None:
    c = jbod(tmp_path)
    assert c.incremental_alter_configs(
        {("BROKER", "0"): {"cordoned.log.dirs": "/data/0/d1"}})[("BROKER", "0")].ok
    assert [d.cordoned for d in c.describe_log_dirs([0])[0]] == [False, True, False]
    assert not c.controller.cordoned(0)  # new replicas may still land on broker 0
    assert not c.incremental_alter_configs(
        {("BROKER", "0"): {"cordoned.log.dirs": "/data/1/d1"}})[("BROKER", "0")].ok
    c.incremental_alter_configs({("BROKER", "0"): {"cordoned.log.dirs": "*"}})
    assert all(d.cordoned for d in c.describe_log_dirs([0])[0]) and c.controller.cordoned(0)


def test_log_dir_is_the_port_type(tmp_path: Path) -> None:
    c = jbod(tmp_path)
    assert all(isinstance(d, LogDir) for d in c.describe_log_dirs([0])[0])


def test_directories_survive_a_snapshot(tmp_path: Path) -> None:
    c = jbod(tmp_path)
    placed = dict(c.image.iter_partitions())
    assert all(len(p.directories) == 3 for p in placed.values())
    c.snapshot()
    c.close()
    c = jbod(tmp_path)
    assert dict(c.image.iter_partitions()) == placed


def test_directories_round_trip_through_the_record_encoding() -> None:
    for r in (PartitionRecord("t", 0, (1, 2), (1, 2), 1, directories=("/a", "")),
              PartitionChangeRecord("t", 0, directories=("/a", "/b")),
              PartitionRecord("t", 0, (1, 2), (1, 2), 1)):
        assert decode_record(encode_record(r)) == r
    # an old record (no directories) keeps its short encoding
    assert len(encode_record(PartitionRecord("t", 0, (1,), (1,), 1))) == 10


def test_a_new_replica_keeps_no_directory_of_the_replica_it_replaces(tmp_path: Path) -> None:
    """KIP-858: a replica that stays keeps its directory; a new one gets its broker's."""
    c = jbod(tmp_path)
    before = c.image.partition(T0)
    assert before is not None
    assert c.alter_partition_reassignments({T0: [3, 1, 2]})[T0].ok
    after = c.image.partition(T0)
    assert after is not None and after.replicas == (3, 1, 2, 0)
    assert after.directory_of(1) == before.directory_of(1)
    assert after.directory_of(0) == before.directory_of(0)
    assert after.directory_of(3) == "/data/3/d0"  # placed by broker 3: its emptiest, first
