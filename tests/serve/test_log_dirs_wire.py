"""DescribeLogDirs (35) and AlterReplicaLogDirs (34) on the wire, with kafka-python's client,
against a twin whose brokers have several log directories (KIP-113)."""

from __future__ import annotations

from pathlib import Path

import kafka.errors as kerr
from kafka import KafkaAdminClient
from kafka.structs import TopicPartitionReplica

from controller_core.wire.auth import AuthFile, Authorizer
from tests.core.test_jbod import T0, jbod
from tests.serve.harness import served


def _dirs(admin: KafkaAdminClient, broker: int) -> dict[str, list[tuple[int, int, bool]]]:
    [answer] = admin.describe_log_dirs({"orders": [0]}, brokers=[broker])
    return {d["log_dir"]: [(p["partition_index"], p["partition_size"], p["is_future_key"])
                           for t in d["topics"] for p in t["partitions"]]
            for d in answer["log_dirs"]}


def test_alter_then_describe_shows_the_future_then_the_move(tmp_path: Path) -> None:
    with served(jbod(tmp_path / "c"), time_scale=0) as s:
        admin = KafkaAdminClient(bootstrap_servers=s.bootstrap, request_timeout_ms=5000)
        try:
            here = next(d for d, ps in _dirs(admin, 0).items() if ps)
            dest = next(d for d in _dirs(admin, 0) if d != here)
            got = admin.alter_replica_log_dirs({
                TopicPartitionReplica("orders", 0, 0): dest,
                TopicPartitionReplica("orders", 0, 1): "/nowhere",
                TopicPartitionReplica("orders", 0, 4): "/data/4/d0"})
            assert {k.broker_id: v for k, v in got.items()} == {
                0: kerr.NoError, 1: kerr.LogDirNotFoundError, 4: kerr.ReplicaNotAvailableError}
            s.call(lambda: s.cluster.advance(3))
            seen = _dirs(admin, 0)
            assert seen[here] == [(0, 10_000_000, False)]
            [(_, size, future)] = seen[dest]
            assert future and 2_900_000 <= size <= 3_100_000
            s.call(lambda: s.cluster.advance(10))
            assert _dirs(admin, 0)[dest] == [(0, 10_000_000, False)]
            [answer] = admin.describe_log_dirs(brokers=[0])
            totals = {d["log_dir"]: (d["total_bytes"], d["usable_bytes"])
                      for d in answer["log_dirs"]}
            assert totals[dest] == (100_000_000, 100_000_000 - 3 * 10_000_000)
        finally:
            admin.close()
        assert s.call(lambda: s.cluster.replica_dir(T0, s.cluster.image.partition(T0), 0)) \
            == dest


def test_alter_replica_log_dirs_needs_alter_on_cluster(tmp_path: Path) -> None:
    auth = Authorizer.from_file(AuthFile.model_validate({
        "users": [{"name": "viewer", "password": "viewer-secret"}],
        "acls": [{"principal": "User:viewer", "operations": ["DESCRIBE"]}]}))
    with served(jbod(tmp_path / "c"), auth, time_scale=0) as s:
        admin = KafkaAdminClient(
            bootstrap_servers=s.bootstrap, request_timeout_ms=5000,
            security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
            sasl_plain_username="viewer", sasl_plain_password="viewer-secret")
        try:
            got = admin.alter_replica_log_dirs({TopicPartitionReplica("orders", 0, 0):
                                                "/data/0/d2"})
            assert list(got.values()) == [kerr.ClusterAuthorizationFailedError]
            assert _dirs(admin, 0)  # DESCRIBE is enough to describe
        finally:
            admin.close()
        assert s.call(lambda: dict(s.cluster.data.futures)) == {}
