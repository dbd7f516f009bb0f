"""Replication throttles on a real Apache Kafka 4.4: placed, changed and removed by the
``kraftsman`` console script as users run it, and checked with Kafka's own ``kafka-configs``.

kraftsman once marked its throttles with a custom broker config, ``kraftsman.throttle``. A
real broker takes the name but hides it as sensitive (DescribeConfigs answers null), so the
marker was never read back and a finished move left every rate and replica list behind. The
marker now lives in kraftsman's compacted topic ``__kraftsman_throttles``; these tests hold
kraftsman to "at completion no config of kraftsman's is left on any broker or topic" on the
real thing, with data in the topic so that a throttled move takes long enough to look at.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from controller_core.admin import THROTTLE_MARKER_TOPIC
from tests.real.fixtures import Session
from tests.real.kafka import RealKafka, run_tool

BIN = Path(sys.executable).parent / "kraftsman"
LEADER_RATE, FOLLOWER_RATE = ("leader.replication.throttled.rate",
                              "follower.replication.throttled.rate")
LEADER, FOLLOWER = ("leader.replication.throttled.replicas",
                    "follower.replication.throttled.replicas")
THROTTLE_KEYS = {LEADER_RATE, FOLLOWER_RATE, LEADER, FOLLOWER}
SLOW = 100_000  # B/s: 8 MB take over a minute, so a move is surely in flight when looked at
FAST = 50_000_000
MB = 1_000_000


# -- the cluster, seen with Kafka's own tools and clients -------------------------------------
def kafka_configs(c: RealKafka, entity_type: str, name: str | None = None
                  ) -> dict[str, dict[str, str]]:
    """``kafka-configs --describe``: the dynamic configs of every broker (or topic), as the
    tool prints them (a sensitive value as ``null``)."""
    args = ["--bootstrap-server", c.bootstrap(), "--describe", "--entity-type", entity_type]
    if name is not None:
        args += ["--entity-name", name]
    out: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in run_tool("kafka-configs", *args).stdout.splitlines():
        head = re.match(r"(?:Dynamic|Default) configs for (?:broker|topic) ?(\S*) ", line)
        if head or line.startswith("Default configs for brokers"):
            current = out.setdefault(head[1] if head else "default", {})
        elif line.startswith("  ") and current is not None:
            key, _, rest = line.strip().partition("=")
            current[key] = rest.rsplit(" sensitive=", 1)[0]
    return out


def kafka_configs_both(c: RealKafka, topic: str | None = None
                       ) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]:
    """The brokers' and the topics' (or one topic's) configs, the two JVMs side by side."""
    with ThreadPoolExecutor(2) as pool:
        brokers = pool.submit(kafka_configs, c, "brokers")
        topics = pool.submit(kafka_configs, c, "topics", topic)
        return brokers.result(), topics.result()


def until(check: Callable[[], None], timeout: float = 90) -> None:
    """Run ``check`` (its asserts) until it passes. IncrementalAlterConfigs answers once the
    controller committed a change; each broker describes it once its copy of the metadata
    log gets there, a moment later (seconds on a busy machine)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def applied(c: RealKafka, rtype: str, name: str, expected: dict[str, str | None]) -> None:
    """Until every broker kraftsman may ask (a broker's own configs: that broker; a topic's:
    any) describes ``expected`` (None: unset) — so a test's own change is in place before
    kraftsman reads it."""
    from kafka.protocol.admin import DescribeConfigsRequest

    from tests.serve.raw_wire import Wire

    _D = DescribeConfigsRequest.DescribeConfigsResource
    nodes = [int(name)] if rtype == "BROKER" else c.brokers
    w = Wire(c.bootstrap())
    try:
        def check() -> None:
            for node in nodes:
                r = w.send(DescribeConfigsRequest(resources=[_D(
                    resource_type=4 if rtype == "BROKER" else 2, resource_name=name,
                    configuration_keys=list(expected))], include_synonyms=False), node=node)
                dynamic = {x.name: x.value for x in r.results[0].configs
                           if x.config_source in (1, 2)}
                assert {k: dynamic.get(k) for k in expected} == expected, (node, dynamic)
        until(check)
    finally:
        w.close()


def kraftsmans(configs: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """What of ``configs`` a throttle of kraftsman's could be: the throttle keys and any
    ``kraftsman.*`` config."""
    found = {name: {k: v for k, v in cfg.items()
                    if k in THROTTLE_KEYS or k.startswith("kraftsman")}
             for name, cfg in configs.items()}
    return {name: cfg for name, cfg in found.items() if cfg}


def marker_records(c: RealKafka) -> dict[str, str | None]:
    """The marker topic read with kafka-python's consumer (no group), the latest record of
    each key: kraftsman's own reader is what is under test."""
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition as KTP

    consumer = KafkaConsumer(bootstrap_servers=c.bootstrap(), group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        if THROTTLE_MARKER_TOPIC not in consumer.topics():
            return {}
        tp = KTP(THROTTLE_MARKER_TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        latest: dict[str, str | None] = {}
        deadline = time.monotonic() + 30
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, "the marker topic could not be read to its end"
            for records in consumer.poll(timeout_ms=500).values():
                for r in records:
                    latest[r.key.decode()] = None if r.value is None else r.value.decode()
        return latest
    finally:
        consumer.close()


def live_markers(c: RealKafka) -> dict[int, dict[str, object]]:
    return {int(k): orjson.loads(v) for k, v in marker_records(c).items() if v is not None}


def create_topic(c: RealKafka, name: str, assignment: dict[int, list[int]]) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    client = KafkaAdminClient(bootstrap_servers=c.bootstrap())
    try:
        client.create_topics([NewTopic(name, replica_assignments=assignment)],
                             timeout_ms=30_000)
    finally:
        client.close()


def produce(c: RealKafka, topic: str, sizes: dict[int, int]) -> None:
    """``sizes[p]`` bytes of incompressible data into partition ``p``, acknowledged."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=c.bootstrap(), acks=1, linger_ms=5,
                             batch_size=1 << 20, max_request_size=2 << 20)
    try:
        chunk = 100_000
        for p, size in sizes.items():
            for _ in range(max(1, size // chunk)):
                producer.send(topic, os.urandom(chunk), partition=p)
        producer.flush(timeout=60)
    finally:
        producer.close()


def replicas(c: RealKafka, topic: str) -> dict[int, list[int]]:
    with c.admin() as a:
        return {d.tp.partition: list(d.replicas) for d in a.describe_partitions([topic])}


def moving(c: RealKafka) -> set[str]:
    with c.admin() as a:
        return {str(tp) for tp in a.list_partition_reassignments()}


# -- kraftsman, as users run it --------------------------------------------------------------
@dataclass
class Cli:
    cluster: RealKafka
    state: Path
    tmp: Path
    listener: str = "PLAINTEXT"

    def run(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        target = ["--bootstrap-server", self.cluster.bootstrap(self.listener)]
        if self.listener == "SASL_SSL":
            target += ["--command-config", str(self.cluster.client_properties)]
        return subprocess.run([str(BIN), *args, *target, "--state-dir", str(self.state)],
                              capture_output=True, text=True, timeout=timeout)

    def apply(self, name: str, moves: Iterable[tuple[str, int, list[int]]], throttle: int,
              *flags: str, **spec: object) -> subprocess.CompletedProcess[str]:
        parts = "\n".join(f"    - {{topic: {t}, partition: {p}, replicas: {r}}}"
                          for t, p, r in moves)
        extra = "".join(f"  {k}: {str(v).lower()}\n" for k, v in spec.items())
        path = self.tmp / f"{name}.yaml"
        path.write_text(
            "apiVersion: kraftsman.io/v1alpha1\nkind: PartitionReassignment\n"
            f"metadata: {{name: {name}}}\nspec:\n  clusterRef: {{name: real}}\n"
            f"  throttleBytesPerSecond: {throttle}\n  maxConcurrentMoves: 4\n{extra}"
            f"  partitions:\n{parts}\n")
        r = self.run("apply", "-f", str(path), *flags)
        assert r.returncode == 0, r.stdout + r.stderr
        return r


@pytest.fixture
def cli(real_kafka: Session, tmp_path: Path) -> Cli:
    assert BIN.exists(), f"console script {BIN} not installed (pip install -e .)"
    return Cli(real_kafka.cluster, tmp_path / "state", tmp_path)


def rates(brokers: dict[str, dict[str, str]], broker: int) -> dict[str, str]:
    return {k: v for k, v in brokers.get(str(broker), {}).items() if k in THROTTLE_KEYS}


# -- the tests --------------------------------------------------------------------------------
def test_a_throttled_move_places_changes_and_removes_every_throttle(
        real_kafka: Session, cli: Cli) -> None:
    """Over SASL_SSL with --command-config: the rates on both brokers of the move and the
    topic's replica lists while it moves, the new rate on the brokers after a re-apply with
    another throttle, and at completion no config of kraftsman's on any broker or topic and
    no live marker."""
    c = real_kafka.cluster
    cli.listener = "SASL_SSL"
    t = real_kafka.topic("moving")
    create_topic(c, t, {0: [0]})
    produce(c, t, {0: 8 * MB})
    cli.apply("move", [(t, 0, [1])], SLOW, "--no-wait")
    assert moving(c) == {f"{t}-0"}, "the move is in flight"

    def placed() -> None:
        brokers, topics = kafka_configs_both(c, t)
        for b in (0, 1):  # the replica that holds the data (leader side) and the new one
            assert rates(brokers, b) == {LEADER_RATE: str(SLOW), FOLLOWER_RATE: str(SLOW)}, \
                brokers
        assert rates(brokers, 2) == rates(brokers, 3) == {}
        assert not any(k.startswith("kraftsman") for cfg in brokers.values() for k in cfg)
        assert topics == {t: {LEADER: "0:0", FOLLOWER: "0:1"}}
    until(placed)
    markers = live_markers(c)
    assert sorted(markers) == [0, 1]
    assert markers[0]["rate"] == str(SLOW) and markers[0]["replicas"] == [f"L:0:{t}"]
    assert markers[1]["replicas"] == [f"F:0:{t}"]
    shown = cli.run("reassignments", "verify")
    assert f"Placed by kraftsman (its markers in {THROTTLE_MARKER_TOPIC}):" in shown.stdout

    cli.apply("move", [(t, 0, [1])], FAST, "--no-wait")  # the throttle changed mid-flight

    def changed() -> None:
        brokers = kafka_configs(c, "brokers")
        for b in (0, 1):
            assert rates(brokers, b) == {LEADER_RATE: str(FAST), FOLLOWER_RATE: str(FAST)}, \
                brokers
    until(changed)
    assert live_markers(c)[1]["rate"] == str(FAST)

    done = cli.apply("move", [(t, 0, [1])], FAST, "--tick", "0.5")
    assert "completed" in (done.stdout + done.stderr).lower(), done.stdout + done.stderr
    assert replicas(c, t) == {0: [1]} and moving(c) == set()

    def removed() -> None:
        brokers, topics = kafka_configs_both(c)  # every topic, the marker topic too
        assert kraftsmans(brokers) == kraftsmans(topics) == {}
    until(removed)
    assert live_markers(c) == {}, "the markers went with the throttles (tombstones)"
    shown = cli.run("reassignments", "verify")
    assert "No throttles in force." in shown.stdout and "Placed by" not in shown.stdout


def test_a_cancel_removes_the_throttles_and_restores_an_operators_rate(
        real_kafka: Session, cli: Cli) -> None:
    """An operator's rate set before the move is overwritten while kraftsman throttles, then
    restored; an operator's rate changed during the move is theirs and stays;
    ``reassignments cancel`` removes everything else of kraftsman's."""
    c = real_kafka.cluster
    t = real_kafka.topic("cancelled")
    create_topic(c, t, {0: [0]})
    produce(c, t, {0: 8 * MB})
    run_tool("kafka-configs", "--bootstrap-server", c.bootstrap(), "--alter", "--entity-type",
             "brokers", "--entity-name", "0", "--add-config", f"{LEADER_RATE}=7777777")
    applied(c, "BROKER", "0", {LEADER_RATE: "7777777"})
    cli.apply("slow", [(t, 0, [1])], SLOW, "--no-wait")
    # kraftsman throttles as the plan says, over the operator's rate
    applied(c, "BROKER", "0", {LEADER_RATE: str(SLOW), FOLLOWER_RATE: str(SLOW)})
    applied(c, "BROKER", "1", {FOLLOWER_RATE: str(SLOW)})
    with c.admin() as a:  # the operator, mid-move, with kraftsman's own backend (quicker)
        a.incremental_alter_configs({("BROKER", "1"): {FOLLOWER_RATE: "5555555"}})
    applied(c, "BROKER", "1", {FOLLOWER_RATE: "5555555"})
    cancelled = cli.run("reassignments", "cancel")
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    assert f"Successfully cancelled partition reassignments for: {t}-0" in cancelled.stdout
    assert moving(c) == set() and replicas(c, t) == {0: [0]}

    def left() -> None:
        brokers, topics = kafka_configs_both(c)
        assert kraftsmans(brokers) == {
            "0": {LEADER_RATE: "7777777"},  # restored
            "1": {FOLLOWER_RATE: "5555555"}}  # theirs, untouched
        assert kraftsmans(topics) == {}
    until(left)
    assert live_markers(c) == {}


def test_two_runs_share_a_broker_and_a_run_resumed_without_its_state_cleans_up_its_own(
        real_kafka: Session, cli: Cli) -> None:
    """Run B moves a big partition onto broker 1, run A a small one: when A completes, the
    rates B still needs stay and only A's entries go. Then B's local state is deleted and B
    is cancelled by a fresh `apply`: exactly B's throttles go, the operator's stay."""
    c = real_kafka.cluster
    t = real_kafka.topic("shared")
    create_topic(c, t, {0: [0], 1: [2], 2: [3]})
    # B must outlast all of run A, which on a busy machine took most of a minute (CI, load
    # ~7): 24 MB at SLOW keep it in flight for minutes
    produce(c, t, {0: 200_000, 1: 24 * MB, 2: 100_000})
    with c.admin() as a:  # the operator's own throttles, on what kraftsman does not move
        assert all(r.ok for r in a.incremental_alter_configs({
            ("BROKER", "3"): {LEADER_RATE: "4444444"},
            ("TOPIC", t): {LEADER: "2:3"}}).values())
    applied(c, "TOPIC", t, {LEADER: "2:3"})
    cli.apply("b", [(t, 1, [1])], SLOW, "--no-wait")
    applied(c, "TOPIC", t, {LEADER: "1:2,2:3", FOLLOWER: "1:1"})  # before A reads them
    cli.apply("a", [(t, 0, [1])], SLOW, "--tick", "0.5", additional=True)  # to the end
    now = replicas(c, t), moving(c), kafka_configs_both(c, t)
    assert now[0][0] == [1] and now[1] == {f"{t}-1"}, now

    def shared() -> None:
        brokers, topics = kafka_configs_both(c, t)
        assert rates(brokers, 0) == {}, "only run A moved through broker 0"
        for b in (1, 2):  # B still moves from 2 to 1
            assert rates(brokers, b) == {LEADER_RATE: str(SLOW), FOLLOWER_RATE: str(SLOW)}, \
                brokers
        assert rates(brokers, 3) == {LEADER_RATE: "4444444"}
        assert topics == {t: {LEADER: "1:2,2:3", FOLLOWER: "1:1"}}
    until(shared)
    markers = live_markers(c)
    assert sorted(markers) == [1, 2]
    assert markers[1]["replicas"] == [f"F:1:{t}"]

    shutil.rmtree(cli.state)  # B's executor state is lost
    cli.apply("b", [(t, 1, [1])], SLOW, "--tick", "0.5", cancel=True)
    assert moving(c) == set() and replicas(c, t)[1] == [2]

    def own_gone() -> None:
        brokers, topics = kafka_configs_both(c)
        assert kraftsmans(brokers) == {"3": {LEADER_RATE: "4444444"}}
        assert kraftsmans(topics) == {t: {LEADER: "2:3"}}
    until(own_gone)
    assert live_markers(c) == {}


def test_an_older_kraftsmans_broker_config_marker_is_deleted(
        real_kafka: Session, cli: Cli) -> None:
    """A cluster an older kraftsman marked: the broker takes ``kraftsman.throttle`` and shows
    it masked (``null``, sensitive). The next throttle sync — here `reassignments cancel`
    with nothing in flight — deletes it from every broker."""
    c = real_kafka.cluster
    with c.admin() as a:
        assert all(r.ok for r in a.incremental_alter_configs({
            ("BROKER", str(b)): {"kraftsman.throttle": '{"rate": "1", "replicas": []}'}
            for b in c.brokers}).values())
    def masked() -> None:
        before = kafka_configs(c, "brokers")
        assert all(before[str(b)].get("kraftsman.throttle") == "null" for b in c.brokers), \
            before
    until(masked)
    shown = cli.run("reassignments", "verify")
    assert "An older kraftsman's kraftsman.throttle config is on broker(s) 0, 1, 2, 3" \
        in shown.stdout, shown.stdout
    r = cli.run("reassignments", "cancel")
    assert r.returncode == 0 and "No partition reassignments found." in r.stdout, r.stdout
    until(lambda: _none(kraftsmans(kafka_configs(c, "brokers"))))


def _none(found: dict[str, dict[str, str]]) -> None:
    assert found == {}, found


def test_a_broker_dead_when_its_move_ends_gets_its_rate_back_once_it_returns(
        real_kafka: Session, cli: Cli) -> None:
    """Broker 1 holds the data (leader side, throttled) and dies; the move completes without
    it. Kafka serves a broker's configs on that broker alone, so its rate cannot be restored
    then: `apply` says so, the marker keeps the rate (before, it was dropped and the rate
    stayed for good), and the same file applied once the broker is back restores it."""
    c = real_kafka.cluster
    t = real_kafka.topic("owed")
    create_topic(c, t, {0: [0, 1]})
    produce(c, t, {0: 4 * MB})
    cli.apply("owed", [(t, 0, [0, 2])], SLOW, "--no-wait")
    until(lambda: _assert_equal(rates(kafka_configs(c, "brokers"), 1),
                                {LEADER_RATE: str(SLOW), FOLLOWER_RATE: str(SLOW)}))
    c.kill(1)
    try:
        def fenced() -> None:
            with c.admin() as a:
                assert all(b.fenced for b in a.describe_cluster().brokers if b.id == 1)
        until(fenced)
        done = cli.apply("owed", [(t, 0, [0, 2])], FAST, "--tick", "0.5")
        assert "completed: 1 moved" in done.stdout, done.stdout + done.stderr
        assert ("the throttle rate on broker(s) [1] is restored once they are back: apply the "
                "same file again then") in done.stdout, done.stdout
        assert live_markers(c)[1]["rate"] == str(SLOW) and live_markers(c)[1]["replicas"] == []
    finally:
        c.start(1)
        c.wait_ready(brokers=[1])
    again = cli.apply("owed", [(t, 0, [0, 2])], FAST, "--tick", "0.5")
    assert "restored once" not in again.stdout, again.stdout
    assert replicas(c, t) == {0: [0, 2]}
    until(lambda: _assert_equal(rates(kafka_configs(c, "brokers"), 1), {}))
    assert 1 not in live_markers(c)


def _assert_equal(a: object, b: object) -> None:
    assert a == b, (a, b)


def test_a_move_retargeted_mid_flight_ends_on_the_new_target_with_its_throttles_moved(
        real_kafka: Session, cli: Cli) -> None:
    """The same resource applied with another target while the first is in flight: the
    move ends on the new target (KIP-455: a new target replaces the current one), the
    throttles follow it (broker 1 is throttled only while it was a target), and at the end
    nothing of kraftsman's is left."""
    c = real_kafka.cluster
    t = real_kafka.topic("retarget")
    create_topic(c, t, {0: [0]})
    produce(c, t, {0: 8 * MB})
    cli.apply("retarget", [(t, 0, [1])], SLOW, "--no-wait")
    assert moving(c) == {f"{t}-0"}
    until(lambda: _assert_equal(rates(kafka_configs(c, "brokers"), 1),
                                {LEADER_RATE: str(SLOW), FOLLOWER_RATE: str(SLOW)}))
    done = cli.apply("retarget", [(t, 0, [2])], FAST, "--tick", "0.5")
    out = done.stdout + done.stderr
    assert "re-targeted" in out and "completed: 1 moved" in out, out
    assert replicas(c, t) == {0: [2]} and moving(c) == set()

    def removed() -> None:
        brokers, topics = kafka_configs_both(c, t)
        assert all(rates(brokers, b) == {} for b in (0, 1, 2)), brokers
        assert kraftsmans(topics) == {}, topics
    until(removed)
    assert not {0, 1, 2} & set(live_markers(c))
