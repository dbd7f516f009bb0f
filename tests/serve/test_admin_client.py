"""kafka-python's own KafkaAdminClient drives `cluster serve` and sees the SPEC semantics."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kafka.errors as kerr
import pytest
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.structs import TopicPartition as KTP

from controller_core.model import TopicPartition
from controller_core.wire.auth import Authorizer, load_auth_file
from tests.helpers import cluster
from tests.serve.harness import ServedCluster, served

ARABIC_ONE = "\u0661"  # str.isdigit() and int() take it; Kafka does not


@pytest.fixture
def admin(server: ServedCluster) -> Iterator[KafkaAdminClient]:
    a = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=5000)
    yield a
    a.close()


def test_api_versions_advertise_only_what_is_served(admin: KafkaAdminClient,
                                                    server: ServedCluster) -> None:
    versions = {int(k): v for k, v in admin.api_versions().items()}
    # Produce, Fetch and ListOffsets: for kraftsman's throttle-marker topic only
    assert versions[0] == (3, 13) and versions[1] == (4, 18) and versions[2] == (1, 11)
    assert 8 not in versions and 9 not in versions  # no consumer-group offsets
    assert versions[45] == (0, 1) and versions[46] == (0, 0) and versions[43] == (0, 2)
    assert (55 in versions) == callable(getattr(server.cluster, "describe_quorum", None))


def test_describe_cluster_and_topics(admin: KafkaAdminClient, server: ServedCluster) -> None:
    desc = admin.describe_cluster()
    assert desc["cluster_id"] == server.cluster.image.cluster_id
    assert [b["broker_id"] for b in desc["brokers"]] == list(range(6))
    ports = {b["port"] for b in desc["brokers"]}
    assert len(ports) == 6  # every broker at its own listener
    [topic] = admin.describe_topics(["orders"])
    p0 = next(p for p in topic["partitions"] if p["partition_index"] == 0)
    assert p0["replica_nodes"] == [0, 1, 2] and p0["leader_id"] == 0


def test_create_topic_then_exists(admin: KafkaAdminClient, server: ServedCluster) -> None:
    admin.create_topics([NewTopic("payments", 3, 2)])
    assert "payments" in server.call(lambda: set(server.cluster.image.topics))
    with pytest.raises(kerr.TopicAlreadyExistsError):
        admin.create_topics([NewTopic("payments", 3, 2)])
    with pytest.raises(kerr.InvalidReplicationFactorError):
        admin.create_topics([NewTopic("wide", 1, 7)])


def test_reassignment_worked_example_and_cancel(admin: KafkaAdminClient,
                                                server: ServedCluster) -> None:
    # SPEC 2.6: R[1,2,3] -> TR[4,3,2] — here orders-1 is [1,2,0]; move it to [4,2,0]
    assert admin.alter_partition_reassignments({KTP("orders", 1): [4, 2, 0]}) == {
        KTP("orders", 1): None}
    listing = admin.list_partition_reassignments()
    assert listing == {KTP("orders", 1): {"replicas": [4, 2, 0, 1], "adding_replicas": [4],
                                          "removing_replicas": [1]}}
    # cancel = rollback
    assert admin.alter_partition_reassignments({KTP("orders", 1): None}) == {
        KTP("orders", 1): None}
    assert admin.list_partition_reassignments() == {}
    # cancelling again: NO_REASSIGNMENT_IN_PROGRESS per partition
    again = admin.alter_partition_reassignments({KTP("orders", 1): None})
    assert again[KTP("orders", 1)] is kerr.NoReassignmentInProgressError


def test_reassignment_validation_errors(admin: KafkaAdminClient) -> None:
    out = admin.alter_partition_reassignments({
        KTP("orders", 0): [0, 0, 1], KTP("orders", 2): [9], KTP("nope", 0): [1],
        KTP("orders", 3): [-1, 2]})
    assert out[KTP("orders", 0)] is kerr.InvalidReplicationAssignmentError
    assert out[KTP("orders", 2)] is kerr.InvalidReplicationAssignmentError
    assert out[KTP("orders", 3)] is kerr.InvalidReplicationAssignmentError
    assert out[KTP("nope", 0)] is kerr.UnknownTopicOrPartitionError


def test_reassignment_completes_as_time_moves(admin: KafkaAdminClient,
                                              server: ServedCluster) -> None:
    admin.alter_partition_reassignments({KTP("orders", 0): [3, 4, 5]})
    server.call(lambda: server.cluster.advance(120))
    assert admin.list_partition_reassignments() == {}
    [topic] = admin.describe_topics(["orders"])
    p0 = next(p for p in topic["partitions"] if p["partition_index"] == 0)
    assert p0["replica_nodes"] == [3, 4, 5] and p0["leader_id"] == 3
    assert p0["leader_epoch"] > 0  # a new leader from the target bumps the epoch


def test_elections(admin: KafkaAdminClient, server: ServedCluster) -> None:
    def elect(kind: int, tps: dict[str, list[int]] | None) -> dict[tuple[str, int], int]:
        r = admin.elect_leaders(kind, tps, raise_errors=False)
        return {(t.topic, p.partition_id): p.error_code
                for t in r.replica_election_results for p in t.partition_result}

    assert elect(0, {"orders": [0]}) == {("orders", 0): 84}  # ELECTION_NOT_NEEDED
    assert elect(0, {"orders": [0, 0]}) == {("orders", 0): 84}  # duplicates are fine
    assert elect(0, {"ghost": [0]}) == {("ghost", 0): 3}
    # broker 2 dies: once fenced, its partitions move leadership; back, preferred election
    server.call(lambda: server.cluster.fail_broker(2))
    server.call(lambda: server.cluster.advance(60))
    p2 = server.call(lambda: server.cluster.image.partition(TopicPartition("orders", 2)))
    assert p2 is not None and p2.leader != 2
    assert elect(0, {"orders": [2]}) == {("orders", 2): 80}  # PREFERRED_LEADER_NOT_AVAILABLE
    server.call(lambda: server.cluster.restore_broker(2))
    server.call(lambda: server.cluster.advance(60))
    assert elect(0, {"orders": [2]}) == {("orders", 2): 0}
    after = server.call(lambda: server.cluster.image.partition(TopicPartition("orders", 2)))
    assert after is not None and after.leader == 2 and after.leader_epoch > p2.leader_epoch
    all_results = elect(0, None)
    assert len(all_results) == 6  # with no set, the partitions attempted are reported


def test_describe_log_dirs_per_broker(admin: KafkaAdminClient) -> None:
    [b0] = admin.describe_log_dirs({"orders": [0, 1]}, brokers=[0])
    parts = {p["partition_index"]: p for t in b0["log_dirs"][0]["topics"]
             for p in t["partitions"]}
    assert set(parts) == {0, 1} and parts[0]["partition_size"] == 10_000_000
    [b4] = admin.describe_log_dirs({"orders": [0]}, brokers=[4])
    assert b4["log_dirs"][0]["topics"] == []  # broker 4 does not host orders-0


def test_throttle_configs(admin: KafkaAdminClient, server: ServedCluster) -> None:
    broker = ConfigResource(ConfigResourceType.BROKER, "1",
                            {"leader.replication.throttled.rate": "1000"})
    admin.alter_configs([broker], incremental=True)
    got = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")])
    assert "leader.replication.throttled.rate" in str(got) and "'1000'" in str(got)
    assert server.call(lambda: server.cluster.describe_configs([("BROKER", "1")])) == {
        ("BROKER", "1"): {"leader.replication.throttled.rate": "1000"}}
    bad = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "1",
                                              {"leader.replication.throttled.rate": "fast"})],
                              incremental=True)
    assert "InvalidConfiguration" in bad["broker"]["1"] and "whole number" in bad["broker"]["1"]


def test_auth_acls(tmp_path: Path) -> None:
    f = tmp_path / "auth.yaml"
    f.write_text("users:\n  - {name: admin, password: a-secret}\n"
                 "  - {name: viewer, password: v-secret}\n"
                 "acls:\n  - {principal: 'User:admin', operations: [ALTER]}\n"
                 "  - {principal: 'User:viewer', operations: [DESCRIBE]}\n")
    auth = load_auth_file(f)
    with served(cluster(tmp_path / "c"), auth, time_scale=0) as s:
        def client(user: str, password: str) -> KafkaAdminClient:
            return KafkaAdminClient(
                bootstrap_servers=s.bootstrap, security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="PLAIN", sasl_plain_username=user,
                sasl_plain_password=password, request_timeout_ms=5000,
                bootstrap_timeout_ms=3000)

        viewer = client("viewer", "v-secret")
        try:
            assert viewer.list_partition_reassignments() == {}
            with pytest.raises(kerr.ClusterAuthorizationFailedError):
                viewer.alter_partition_reassignments({KTP("orders", 0): [3, 4, 5]})
            with pytest.raises(kerr.ClusterAuthorizationFailedError):
                viewer.elect_leaders(0, {"orders": [0]})
        finally:
            viewer.close()
        admin = client("admin", "a-secret")
        try:
            assert admin.alter_partition_reassignments({KTP("orders", 0): [3, 4, 5]}) == {
                KTP("orders", 0): None}
        finally:
            admin.close()
        with pytest.raises((kerr.SaslAuthenticationFailedError, kerr.KafkaTimeoutError)):
            client("admin", "wrong").close()
        assert any("authentication failed" in line for line in s.logs)


def test_open_server_without_sasl_refuses_sasl_clients(server: ServedCluster) -> None:
    with pytest.raises(kerr.KafkaError):
        KafkaAdminClient(bootstrap_servers=server.bootstrap, security_protocol="SASL_PLAINTEXT",
                         sasl_mechanism="PLAIN", sasl_plain_username="u",
                         sasl_plain_password="p", bootstrap_timeout_ms=2000).close()


def test_open_authorizer_allows_everything() -> None:
    from controller_core.wire.auth import Operation
    assert Authorizer.open().allowed("User:anyone", Operation.ALTER)


def test_a_broker_config_name_that_is_not_ascii_digits_is_refused(
        admin: KafkaAdminClient, server: ServedCluster) -> None:
    """BROKER U+0661 (Arabic-Indic one, which Python's int() reads as 1) is no broker: Describe-
    and AlterConfigs answer INVALID_REQUEST for it (kafka-python shows the describe error as
    an empty config) — broker 1's configs are neither shown nor changed."""
    rate = "leader.replication.throttled.rate"
    admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "1", {rate: "1000"})],
                        incremental=True)
    assert "'1000'" in str(admin.describe_configs([ConfigResource(ConfigResourceType.BROKER,
                                                                   "1")]))
    described = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, ARABIC_ONE)])
    assert described == {"broker": {ARABIC_ONE: {}}}, described

    async def describe_raw() -> Any:  # the answer itself, which kafka-python flattens
        request = admin._describe_configs_request(
            [ConfigResource(ConfigResourceType.BROKER, ARABIC_ONE)], False)
        return await admin._manager.send(request)
    (result,) = admin._manager.run(describe_raw).results
    assert (result.error_code, result.error_message) == (
        kerr.InvalidRequestError.errno, f"broker {ARABIC_ONE!r} is not registered")
    got = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, ARABIC_ONE, {rate: "5"})],
                              incremental=True, raise_on_unknown=False)
    assert "InvalidRequest" in got["broker"][ARABIC_ONE], got
    assert f"broker {ARABIC_ONE!r} is not registered" in got["broker"][ARABIC_ONE], got
    assert server.call(lambda: server.cluster.describe_configs([("BROKER", "1")])) == {
        ("BROKER", "1"): {rate: "1000"}}


def test_kraftsmans_kafka_backend_cordons_and_unregisters_through_serve(
        server: ServedCluster) -> None:
    """The ``kafka`` backend against the served twin: metadata.version from ApiVersions, a
    cordon confirmed by the controller probe, and UnregisterBroker (API key 64)."""
    from controller_core import errors
    from controller_core.backends.kafka_admin import RetryPolicy, open_kafka_admin
    from controller_core.errors import ApiResult
    with open_kafka_admin(server.bootstrap, retry=RetryPolicy(total_seconds=5.0)) as a:
        assert a.metadata_version() == 33
        assert a.set_cordoned({5: True}) == {5: ApiResult(errors.NONE, "")}
        assert a._sees_cordoned(5) and not a._sees_cordoned(4)
        assert a.describe_configs([("BROKER", "5")]) == {("BROKER", "5"): {
            "cordoned.log.dirs": "*"}}
        assert a.set_cordoned({5: False})[5].ok and not a._sees_cordoned(5)
        assert a.unregister_broker(9) == ApiResult(errors.BROKER_ID_NOT_REGISTERED,
                                                   "Broker ID 9 is not currently registered")
        assert a.unregister_broker(5).ok
        assert 5 not in [b.id for b in a.describe_cluster().brokers]
