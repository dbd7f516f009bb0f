"""The ClusterAdmin port's JBOD operations (KIP-113) against the real Kafka, whose brokers
have two log directories each: DescribeLogDirs as Kafka's own ``kafka-log-dirs`` tool reads
it, and AlterReplicaLogDirs with its per-replica answers, its future replica and the
log-dir throttle ``replica.alter.log.dirs.io.max.bytes.per.second``."""

from __future__ import annotations

import json

from controller_core import errors
from controller_core.admin import LogDir
from controller_core.model import TopicPartition
from tests.real.fixtures import Session
from tests.real.kafka import BROKERS, run_tool
from tests.real.test_cli_real_kafka import topic, wait_for

LOG_DIR_THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"


def _where(dirs: dict[int, tuple[LogDir, ...]], tp: TopicPartition, broker: int
           ) -> dict[str, bool]:
    """path -> future, for each directory of ``broker`` holding ``tp``."""
    return {d.path: r.future for d in dirs.get(broker, ()) for r in d.replicas if r.tp == tp}


def test_describe_log_dirs_reads_as_kafkas_own_tool(real_kafka: Session) -> None:
    c = real_kafka.cluster
    name = topic(real_kafka, [[0, 1, 2]], mb=1)
    tp = TopicPartition(name, 0)
    with c.admin() as a:
        dirs = a.describe_log_dirs(BROKERS, [tp])
    assert sorted(dirs) == list(BROKERS)
    for b in BROKERS:
        assert [d.path for d in dirs[b]] == sorted(c.log_dirs(b))
        assert all(d.error is None and d.total_bytes and d.usable_bytes is not None
                   and 0 < d.usable_bytes <= d.total_bytes for d in dirs[b]), dirs[b]
    for b in (0, 1, 2):
        assert list(_where(dirs, tp, b).values()) == [False], dirs[b]
    assert _where(dirs, tp, 3) == {}
    out = run_tool("kafka-log-dirs", "--bootstrap-server", c.bootstrap(), "--describe",
                   "--broker-list", "0,1,2,3", "--topic-list", name).stdout
    theirs = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    for broker in theirs["brokers"]:
        b = broker["broker"]
        mine = {d.path: {(r.tp.topic, r.tp.partition, r.size_bytes, r.future)
                         for r in d.replicas} for d in dirs[b]}
        assert mine == {d["logDir"]: {(p["partition"].rsplit("-", 1)[0],
                                       int(p["partition"].rsplit("-", 1)[1]), p["size"],
                                       p["isFuture"]) for p in d["partitions"]}
                        for d in broker["logDirs"]}, (b, mine, broker)


def test_a_replica_moves_between_log_dirs_throttled(real_kafka: Session) -> None:
    c = real_kafka.cluster
    name = topic(real_kafka, [[0, 1, 2]], mb=2)
    tp = TopicPartition(name, 0)
    with c.admin() as a:
        before = _where(a.describe_log_dirs([0], [tp]), tp, 0)
        (current,) = before
        (other,) = [p for p in c.log_dirs(0) if p != current]
        assert a.incremental_alter_configs({("BROKER", "0"): {LOG_DIR_THROTTLE: "50000"}})[
            ("BROKER", "0")].ok
        results = a.alter_replica_log_dirs({
            (tp, 0): other, (tp, 1): "/no/such/dir", (tp, 3): c.log_dirs(3)[0],
            (tp, 2): next(p for p in c.log_dirs(2)
                          if p in _where(a.describe_log_dirs([2], [tp]), tp, 2))})
        assert results[(tp, 0)].ok, results
        assert results[(tp, 1)].error == errors.LOG_DIR_NOT_FOUND, results
        assert "no log directory" in results[(tp, 1)].message
        assert results[(tp, 3)].error == errors.REPLICA_NOT_AVAILABLE, results
        assert results[(tp, 2)].ok, results  # already there: nothing to do
        # 2 MB at 50 kB/s: the future replica is there, in the other directory, and partial.
        wait_for(lambda: _where(a.describe_log_dirs([0], [tp]), tp, 0).get(other) is True,
                 "the future replica in the other directory", 60)
        dirs = a.describe_log_dirs([0], [tp])
        future = next(r for d in dirs[0] if d.path == other for r in d.replicas if r.future)
        now = next(r for d in dirs[0] if d.path == current for r in d.replicas)
        assert future.size_bytes < now.size_bytes, (future, now)
        a.incremental_alter_configs({("BROKER", "0"): {LOG_DIR_THROTTLE: None}})
        wait_for(lambda: _where(a.describe_log_dirs([0], [tp]), tp, 0) == {other: False},
                 "the replica swapped into the other directory", 120)


def test_a_broker_that_is_down_answers_nothing(real_kafka: Session) -> None:
    c = real_kafka.cluster
    name = topic(real_kafka, [[3, 0, 1]])
    tp = TopicPartition(name, 0)
    c.kill(3)
    try:
        with c.admin() as a:
            assert 3 not in a.describe_log_dirs(BROKERS, [tp])
            result = a.alter_replica_log_dirs({(tp, 3): c.log_dirs(3)[1]})[(tp, 3)]
    finally:  # back, and answering, before the restore (whose client may pick broker 3)
        c.start(3)
        c.wait_ready()
        with c.admin() as a:
            wait_for(lambda: 3 in a.describe_log_dirs([3], []), "broker 3 answering", 120)
    assert result.error == errors.BROKER_NOT_AVAILABLE and "broker 3" in result.message
