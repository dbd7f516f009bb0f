"""``cluster serve`` answers Produce, ListOffsets and Fetch for kraftsman's throttle-marker
topic from the embedded cluster's metadata log, so the ``kafka`` backend keeps its markers
there exactly as on a real Kafka cluster; other topics get the error a broker gives for a
partition it cannot serve. (tests/real/test_marker_parity_real.py compares the answers that
a real Kafka 4.4 also gives.)"""

from __future__ import annotations

import base64
import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.record import MemoryRecords

from controller_core import errors
from controller_core.admin import THROTTLE_MARKER_TOPIC
from controller_core.backends.kafka_admin import (
    MARKER_BATCH_RAW_BYTES,
    KafkaAdmin,
    RetryPolicy,
    _marker_batches,
    open_kafka_admin,
)
from controller_core.errors import KafkaApiError
from controller_core.metadata.controller import MAX_MESSAGE_BYTES
from controller_core.orchestration import throttles
from controller_core.wire.auth import AuthFile, Authorizer
from tests.helpers import cluster
from tests.serve.harness import ServedCluster, served
from tests.serve.raw_wire import Wire, batch

T = THROTTLE_MARKER_TOPIC


@pytest.fixture
def admin(server: ServedCluster) -> Iterator[KafkaAdmin]:
    a = open_kafka_admin(server.bootstrap, retry=RetryPolicy(total_seconds=5))
    try:
        yield a
    finally:
        a.close()


@pytest.fixture
def wire(server: ServedCluster) -> Iterator[Wire]:
    w = Wire(server.bootstrap)
    try:
        yield w
    finally:
        w.close()


def test_markers_round_trip_through_the_kafka_backend_and_a_restart(
        tmp_path: Path, server: ServedCluster, admin: KafkaAdmin) -> None:
    """Created by CreateTopics, written with Produce, read back with ListOffsets and Fetch;
    the records are in the metadata log, so a new process sees them."""
    assert admin.read_throttle_markers() == {}  # no topic yet: nothing, and none made
    assert T not in server.call(lambda: set(server.cluster.image.topics))
    assert admin.write_throttle_markers({1: '{"rate": "1"}', 2: '{"rate": "2"}'}) == []
    assert admin.write_throttle_markers({2: None, 3: '{"rate": "3"}'}) == []
    assert admin.read_throttle_markers() == {1: '{"rate": "1"}', 3: '{"rate": "3"}'}
    [d] = admin.describe_partitions([T])
    assert len(d.replicas) == 3
    assert admin.describe_configs([("TOPIC", T)]) == {("TOPIC", T): {"cleanup.policy": "compact"}}
    server.call(lambda: server.cluster.close())
    again = cluster(tmp_path / "c")
    try:
        assert again.read_throttle_markers() == {1: '{"rate": "1"}', 3: '{"rate": "3"}'}
    finally:
        again.close()


def test_fetch_and_list_offsets_read_the_compacted_log(
        server: ServedCluster, admin: KafkaAdmin, wire: Wire) -> None:
    """A compacted log: the latest record of each key at its offset (tombstones too), the
    log start at the oldest kept, the high watermark past the newest; a fetch from within
    the log gets the records from there, one outside it OFFSET_OUT_OF_RANGE."""
    assert admin.write_throttle_markers({0: "a", 1: "b"}) == []
    assert admin.write_throttle_markers({0: "c"}) == []
    assert admin.write_throttle_markers({1: None}) == []
    leader, topic_id, _ = wire.marker_partition()
    assert wire.list_offset(leader, -2) == (0, 2)  # offsets 0 and 1 were overwritten
    assert wire.list_offset(leader, -1) == (0, 4)
    assert wire.list_offset(leader, -3) == (0, 3)
    assert wire.list_offset(leader, 1_000) == (0, -1)  # the records carry no timestamps
    for version in (12, None):  # by name (v12), by topic id (v13+)
        r = wire.fetch(leader, topic_id, 2, version=version)
        p = r.responses[0].partitions[0]
        assert (r.error_code, p.error_code, p.high_watermark, p.log_start_offset) == (0, 0, 4, 2)
        got = [(rec.offset, rec.key, rec.value) for b in MemoryRecords(bytes(p.records))
               for rec in b]
        assert got == [(2, b"0", b"c"), (3, b"1", None)]
    assert wire.fetch(leader, topic_id, 4).responses[0].partitions[0].records in (b"", None)
    for offset in (1, 5):
        p = wire.fetch(leader, topic_id, offset).responses[0].partitions[0]
        assert p.error_code == errors.OFFSET_OUT_OF_RANGE.code
    assert wire.fetch(leader, topic_id, 0, session_id=7).error_code == 70  # no fetch sessions


def test_produce_is_validated_as_kafka_validates_it(server: ServedCluster, admin: KafkaAdmin,
                                                   wire: Wire) -> None:
    assert admin.write_throttle_markers({0: "{}"}) == []
    leader, topic_id, brokers = wire.marker_partition()
    two = batch([(b"1", b"x")]) + batch([(b"2", b"y")])
    assert wire.produce(leader, topic_id, [], raw=two)[0] == errors.INVALID_RECORD.code
    corrupt = bytearray(batch([(b"1", b"x")]))
    corrupt[-1] ^= 0xFF
    assert wire.produce(leader, topic_id, [], raw=bytes(corrupt))[0] == \
        errors.CORRUPT_MESSAGE.code
    code, _, message = wire.produce(leader, topic_id, [(b"\xff", b"x")])
    assert code == errors.INVALID_RECORD.code and "UTF-8" in (message or "")
    code, record_errors, _ = wire.produce(leader, topic_id, [(b"1", b"x"), (None, b"y"),
                                                             (None, b"z")])
    assert code == errors.INVALID_RECORD.code and [i for i, _ in record_errors] == [1, 2]
    assert wire.produce(leader, topic_id, [(b"5", b"x" * (MAX_MESSAGE_BYTES + 1))])[0] == \
        errors.MESSAGE_TOO_LARGE.code
    assert admin.read_throttle_markers() == {0: "{}"}, "nothing of the refused batches"
    # acks=0: no answer comes back, and the connection goes on
    assert wire.produce(leader, topic_id, [(b"6", b"q")], acks=0) == (0, [], None)
    assert wire.produce(leader, topic_id, [(b"7", b"r")], version=12)[0] == 0
    assert admin.read_throttle_markers() == {0: "{}", 6: "q", 7: "r"}
    follower = next(b for b in brokers if b != leader)
    assert wire.produce(follower, topic_id, [(b"1", b"x")])[0] == \
        errors.NOT_LEADER_OR_FOLLOWER.code
    assert wire.list_offset(follower, -1)[0] == errors.NOT_LEADER_OR_FOLLOWER.code


def test_other_topics_have_no_data_here(server: ServedCluster, wire: Wire) -> None:
    """The embedded cluster keeps no record data: an existing topic answers what a broker
    answers for a partition whose log it cannot serve, an unknown one what Kafka answers."""
    orders = wire.metadata("orders").topics[0]
    leader = orders.partitions[0].leader_id
    code, _, message = wire.produce(leader, orders.topic_id, [(b"k", b"v")])
    assert code == errors.KAFKA_STORAGE_ERROR.code and T in (message or "")
    assert wire.fetch(leader, orders.topic_id, 0).responses[0].partitions[0].error_code == \
        errors.KAFKA_STORAGE_ERROR.code
    assert wire.list_offset(leader, -1, topic="orders")[0] == errors.KAFKA_STORAGE_ERROR.code
    assert wire.produce(leader, uuid.uuid4(), [(b"k", b"v")])[0] == errors.UNKNOWN_TOPIC_ID.code
    assert wire.produce(leader, None, [(b"k", b"v")], topic="nope", version=12)[0] == \
        errors.UNKNOWN_TOPIC_OR_PARTITION.code
    assert wire.list_offset(leader, -1, topic="nope")[0] == \
        errors.UNKNOWN_TOPIC_OR_PARTITION.code


def _sasl(s: ServedCluster, user: str) -> KafkaAdmin:
    return open_kafka_admin(s.bootstrap, {"security.protocol": "SASL_PLAINTEXT",
                                          "sasl.mechanism": "PLAIN", "sasl.username": user,
                                          "sasl.password": f"{user}-secret"},
                            retry=RetryPolicy(total_seconds=5))


def test_a_principal_without_the_marker_acls_gets_one_message_naming_them(
        tmp_path: Path) -> None:
    """READ, WRITE and CREATE (the embedded authorizer's grants stand for every resource):
    each refusal is one problem naming the topic and the ACLs to grant, and a throttled run
    is held back by it."""
    users = ["admin", "nocreate", "nowrite", "noread"]
    acls = {"admin": ["ALL"],
            "nocreate": ["ALTER", "ALTER_CONFIGS", "READ", "WRITE"],
            "nowrite": ["ALTER", "ALTER_CONFIGS", "READ"],
            "noread": ["ALTER", "ALTER_CONFIGS"]}
    auth = Authorizer.from_file(AuthFile.model_validate({
        "users": [{"name": u, "password": f"{u}-secret"} for u in users],
        "acls": [{"principal": f"User:{u}", "operations": ops} for u, ops in acls.items()]}))
    with served(cluster(tmp_path / "c"), auth, time_scale=0) as s:
        grant = f"grant DESCRIBE, READ and WRITE on TOPIC {T}"
        nocreate = _sasl(s, "nocreate")
        try:
            [problem] = nocreate.write_throttle_markers({1: "{}"})
            assert problem.startswith(f"cannot create topic {T} (TOPIC_AUTHORIZATION_FAILED)")
            assert grant in problem
        finally:
            nocreate.close()
        admin = _sasl(s, "admin")
        try:
            assert admin.write_throttle_markers({1: '{"rate": "1"}'}) == []
        finally:
            admin.close()
        nowrite = _sasl(s, "nowrite")
        try:
            assert nowrite.read_throttle_markers() == {1: '{"rate": "1"}'}
            [problem] = nowrite.write_throttle_markers({1: None})
            assert problem.startswith(f"Produce: not authorized on topic {T}") and grant in problem
            moves = {throttles.TopicPartition("orders", 0): throttles.Move((0, 1, 2), (3,))}
            assert throttles.sync(nowrite, moves, 1000).problems == [problem]
            assert throttles.placed(nowrite) == {1: throttles.Marker("1", {}, set())}
        finally:
            nowrite.close()
        noread = _sasl(s, "noread")
        try:
            with pytest.raises(KafkaApiError) as e:
                noread.read_throttle_markers()
            assert e.value.error == errors.TOPIC_AUTHORIZATION_FAILED and grant in e.value.message
        finally:
            noread.close()
        assert s.call(lambda: s.cluster.image.config("BROKER", "3")) == {}, "nothing placed"


def test_a_marker_above_max_message_bytes_is_one_problem_naming_the_config(
        server: ServedCluster, admin: KafkaAdmin) -> None:
    blob = base64.b64encode(random.Random(1).randbytes(1_500_000)).decode()  # gzip: ~1.5 MB
    [problem] = admin.write_throttle_markers({4: blob})
    assert problem.startswith("the throttle marker of broker(s) 4 is ")
    assert f"--entity-name {T} --add-config max.message.bytes=" in problem
    assert admin.read_throttle_markers() == {}


def test_markers_go_in_batches_that_fit_max_message_bytes() -> None:
    """JSON never grows under gzip, so batches of at most MARKER_BATCH_RAW_BYTES of keys
    and values fit Kafka's default max.message.bytes once compressed; a larger record goes
    alone (compressed, a marker of 75,000 entries is 180 kB)."""
    small = [(str(b).encode(), b"x" * 300_000) for b in range(5)]
    assert [len(g) for g in _marker_batches(small)] == [3, 2]
    big = [(b"1", b"y" * 10), (b"2", b"z" * (MARKER_BATCH_RAW_BYTES + 1)), (b"3", None)]
    assert [[k for k, _ in g] for g in _marker_batches(big)] == [[b"1"], [b"2"], [b"3"]]
    assert MARKER_BATCH_RAW_BYTES < MAX_MESSAGE_BYTES


def test_the_markers_of_100k_moving_partitions_on_6_brokers_fit(
        server: ServedCluster, admin: KafkaAdmin) -> None:
    """Every partition of 100,000 (RF 3, six brokers) moving at once: each broker's marker
    holds about 75,000 entries (1.34 MB of JSON); together 8 MB, 1.07 MB in one gzip batch —
    over Kafka's 1,048,588 — so they go one batch each (about 180 kB), and read back whole."""
    rng = random.Random(7)
    brokers = range(6)
    entries: dict[int, set[throttles.Entry]] = {b: set() for b in brokers}
    for t in range(100):
        for p in range(1000):
            old, new = rng.sample(brokers, 3), rng.sample(brokers, 3)
            for r in old:
                entries[r].add(throttles.Entry(f"topic-{t:03d}", p, r, "L"))
            for r in set(new) - set(old):
                entries[r].add(throttles.Entry(f"topic-{t:03d}", p, r, "F"))
    markers = {b: throttles.Marker("50000000", dict.fromkeys(("a", "b")), entries[b]).encode()
               for b in brokers}
    assert sum(map(len, markers.values())) > 7 * MAX_MESSAGE_BYTES
    started = time.monotonic()
    assert admin.write_throttle_markers(markers) == []
    took = time.monotonic() - started
    assert admin.read_throttle_markers() == markers
    print(f"100,000 partitions x 6 brokers: markers written in {took:.1f} s")


def test_an_unreadable_marker_topic_is_said_in_verify(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`reassignments verify` of a principal that may not read the markers still lists the
    throttles in force, and says why it cannot tell which are kraftsman's."""
    from kraftsman.cli import main
    auth = Authorizer.from_file(AuthFile.model_validate({
        "users": [{"name": "noread", "password": "noread-secret"}],
        "acls": [{"principal": "User:noread", "operations": ["DESCRIBE", "DESCRIBE_CONFIGS"]}]}))
    with served(cluster(tmp_path / "c"), auth, time_scale=0) as s:
        props = tmp_path / "c.properties"
        props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                         "sasl.jaas.config=org.apache.kafka.common.security.plain."
                         'PlainLoginModule required username="noread" password="noread-secret";\n')
        s.call(lambda: s.cluster.incremental_alter_configs(
            {("BROKER", "2"): {"leader.replication.throttled.rate": "5"}}))
        assert s.call(lambda: s.cluster.write_throttle_markers({2: "{}"})) == []
        rc = main(["reassignments", "verify", "--bootstrap-server", s.bootstrap,
                   "--command-config", str(props), "--state-dir", str(tmp_path / "st")])
    text = capsys.readouterr().out
    assert rc == 0
    assert "broker 2: leader.replication.throttled.rate 5 B/s" in text, text
    assert f"Cannot tell which throttles kraftsman placed: Fetch: not authorized on topic {T}" \
        in text, text
