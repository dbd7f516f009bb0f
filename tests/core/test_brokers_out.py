"""Removing brokers on the twin: KIP-1066 cordoning and UnregisterBroker as Kafka 4.4 does
them (each rule below was seen on a real 4.4.0 cluster, tests/diff/ compares them), and
kraftsman's own guards around them (controller_core/orchestration/brokers_out.py)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from controller_core import errors
from controller_core.admin import CORDONED_LOG_DIRS
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.errors import ApiResult, KafkaApiError
from controller_core.metadata.versions import NAMES, cordon_unsupported_message, name_of
from controller_core.orchestration import brokers_out
from tests.helpers import PassThrough, cluster, run_until, tp

CORDONED_MSG = ("The manual partition assignment includes broker 3, but all its log "
                "directories are cordoned.")


def four(tmp_path: Path, **kw: Any) -> EmbeddedCluster:
    """Brokers 0-3 on racks a, b, c, a (as the real test cluster); orders on 0-2."""
    return cluster(tmp_path, brokers=4, topics=[
        {"name": "orders", "partitions": 2, "replicationFactor": 3,
         "assignment": [[0, 1, 2], [1, 2, 0]]}], **kw)


def create(c: EmbeddedCluster, name: str, partitions: int = 1, rf: int = 1,
           assignment: list[list[int]] | None = None) -> ApiResult:
    result = c.controller.create_topic(name, partitions, rf, rng=random.Random(7),
                                       assignment=assignment)
    c.checkpoint()
    return result


def brokers_of(c: EmbeddedCluster, topic: str) -> set[int]:
    return {b for d in c.describe_partitions(topics=[topic]) for b in d.replicas}


# -- cordoning (KIP-1066) --------------------------------------------------------------------
def test_a_cordoned_broker_gets_no_replica_of_a_new_topic(tmp_path: Path) -> None:
    c = four(tmp_path)
    assert c.set_cordoned({3: True}) == {3: ApiResult(errors.NONE, "")}
    assert create(c, "placed", partitions=12, rf=3).ok
    assert brokers_of(c, "placed") == {0, 1, 2}
    assert c.set_cordoned({3: False})[3].ok
    assert create(c, "placed-again", partitions=1, rf=4).ok  # every broker: 3 is back
    assert brokers_of(c, "placed-again") == {0, 1, 2, 3}


def test_too_few_uncordoned_brokers_is_kafkas_replication_factor_error(tmp_path: Path) -> None:
    c = four(tmp_path)
    c.set_cordoned({3: True})
    r = create(c, "x", partitions=1, rf=4)
    assert r.error == errors.INVALID_REPLICATION_FACTOR
    assert r.message == ("Unable to replicate the partition 4 time(s): The target replication "
                         "factor of 4 cannot be reached because only 3 broker(s) are registered "
                         "or some brokers have all their log directories cordoned.")


def test_a_manual_assignment_or_a_reassignment_onto_a_cordoned_broker_is_refused(
        tmp_path: Path) -> None:
    c = four(tmp_path)
    c.set_cordoned({3: True})
    assert create(c, "manual", assignment=[[3, 1]]) == ApiResult(
        errors.INVALID_REPLICA_ASSIGNMENT, CORDONED_MSG)
    assert c.alter_partition_reassignments({tp("orders", 0): [3, 1, 2]}) == {
        tp("orders", 0): ApiResult(errors.INVALID_REPLICA_ASSIGNMENT, CORDONED_MSG)}
    assert c.alter_partition_reassignments({tp("orders", 0): [2, 1, 0]})[tp("orders", 0)].ok


def test_a_move_keeping_a_replica_on_a_cordoned_broker_is_refused_but_its_cancel_is_not(
        tmp_path: Path) -> None:
    """Kafka validates the whole target of a reassignment, so a partition that keeps a replica
    on a cordoned broker cannot be re-targeted; cancelling (no target) is not validated."""
    c = four(tmp_path)
    c.set_cordoned({2: True})
    refused = c.alter_partition_reassignments({tp("orders", 0): [3, 1, 2]})[tp("orders", 0)]
    assert refused.error == errors.INVALID_REPLICA_ASSIGNMENT and "broker 2" in refused.message
    c.set_cordoned({2: False})
    assert c.alter_partition_reassignments({tp("orders", 0): [3, 1, 2]})[tp("orders", 0)].ok
    c.set_cordoned({2: True})
    assert c.alter_partition_reassignments({tp("orders", 0): None})[tp("orders", 0)].ok


@pytest.mark.parametrize(("name", "value", "error", "message"), [
    ("", "*", errors.INVALID_REQUEST, "Cannot update these configs at default cluster level, "
     "broker id must be specified: [cordoned.log.dirs]"),
    ("3", "*,/data", errors.INVALID_REQUEST, "requirement failed: When cordoned.log.dirs is set "
     "to *, it must not contain other values"),
    ("3", "/a,/b", errors.INVALID_REQUEST, "requirement failed: All entries in "
     "cordoned.log.dirs must be present in log.dirs or log.dir. Missing entries : /a, /b"),
])
def test_cordoned_log_dirs_values_kafka_refuses(tmp_path: Path, name: str, value: str,
                                                error: errors.ErrorCode, message: str) -> None:
    c = four(tmp_path)
    assert c.incremental_alter_configs({("BROKER", name): {CORDONED_LOG_DIRS: value}}) == {
        ("BROKER", name): ApiResult(error, message)}


def test_an_empty_value_cordons_nothing_and_the_value_is_described(tmp_path: Path) -> None:
    c = four(tmp_path)
    assert c.incremental_alter_configs({("BROKER", "3"): {CORDONED_LOG_DIRS: ""}})[
        ("BROKER", "3")].ok
    assert c.describe_configs([("BROKER", "3")]) == {("BROKER", "3"): {CORDONED_LOG_DIRS: ""}}
    assert create(c, "everywhere", rf=4).ok
    c.set_cordoned({3: True})  # a config Kafka knows: its value is shown, not masked
    assert c.describe_configs([("BROKER", "3")]) == {("BROKER", "3"): {CORDONED_LOG_DIRS: "*"}}
    assert brokers_out.cordoned_brokers(c) == {3: "*"}


def test_cordoning_below_metadata_version_4_3_is_refused_as_kafka_refuses_it(
        tmp_path: Path) -> None:
    c = four(tmp_path, metadataVersion="4.2-IV1")
    message = ("The cordoned.log.dirs configuration value cannot be set because it requires "
               "metadata.version >= 4.3-IV0")
    assert c.set_cordoned({3: True}) == {3: ApiResult(errors.INVALID_CONFIG, message)}
    assert c.set_cordoned({3: False}) == {3: ApiResult(errors.INVALID_CONFIG, message)}
    assert c.metadata_version() == 29
    assert four(tmp_path / "new", metadataVersion="4.3-IV0").set_cordoned({3: True})[3].ok


def test_an_unknown_metadata_version_name_is_refused() -> None:
    from pydantic import ValidationError

    from tests.helpers import spec
    with pytest.raises(ValidationError, match=r"not a Kafka metadata\.version"):
        spec(metadataVersion="4.9-IV7")
    assert name_of(30) == "4.3-IV0" and name_of(99) == "level 99" and NAMES[33] == "4.4-IV2"


def test_the_cordon_survives_a_restart_from_the_log(tmp_path: Path) -> None:
    c = four(tmp_path)
    c.set_cordoned({3: True})
    c.close()
    c = four(tmp_path)
    assert create(c, "after-restart", rf=3, partitions=8).ok
    assert 3 not in brokers_of(c, "after-restart")


# -- UnregisterBroker ------------------------------------------------------------------------
def test_unregistering_a_stopped_broker_takes_it_out_of_describe_cluster(tmp_path: Path) -> None:
    c = four(tmp_path)
    c.fail_broker(3)
    run_until(c, lambda: any(b.id == 3 and b.fenced for b in c.describe_cluster().brokers))
    assert c.unregister_broker(3).ok
    assert [b.id for b in c.describe_cluster().brokers] == [0, 1, 2]
    assert c.unregister_broker(3) == ApiResult(errors.BROKER_ID_NOT_REGISTERED,
                                               "Broker ID 3 is not currently registered")
    refused = c.alter_partition_reassignments({tp("orders", 0): [3, 1, 2]})[tp("orders", 0)]
    assert refused.message == ("The manual partition assignment includes broker 3, but no such "
                               "broker is registered.")
    c.close()
    c = four(tmp_path)  # reopened: the stopped broker stays unregistered
    assert [b.id for b in c.describe_cluster().brokers] == [0, 1, 2]
    c.restore_broker(3)  # its process starts again: it registers anew
    run_until(c, lambda: any(b.id == 3 and not b.fenced for b in c.describe_cluster().brokers))


def test_kafka_unregisters_a_running_broker_too(tmp_path: Path) -> None:
    """Kafka 4.4.0 answers NONE and drops the registration of a broker that still runs (the
    broker then heartbeats in vain with STALE_BROKER_EPOCH): the twin does the same, and the
    broker leaves every ISR it was in."""
    c = four(tmp_path)
    assert c.unregister_broker(2).ok
    assert 2 not in [b.id for b in c.describe_cluster().brokers]
    assert all(2 not in d.isr and d.leader != 2 for d in c.describe_partitions())
    c.fail_broker(2)  # its process, still running, is killed; started again it registers
    c.restore_broker(2)
    run_until(c, lambda: any(b.id == 2 and not b.fenced for b in c.describe_cluster().brokers))
    with pytest.raises(ValueError, match="unknown broker 9"):
        c.fail_broker(9)


def test_unregister_over_the_wire_protocol(tmp_path: Path) -> None:
    from controller_core.wire.handlers import Handlers

    class Everyone:
        def allowed(self, principal: str, op: object) -> bool:
            return True

    class Session:
        principal = "admin"

    from controller_core.wire.broker_messages import UnregisterBrokerRequest
    c = four(tmp_path)
    h = Handlers(c, Everyone(), {})  # type: ignore[arg-type]
    r = h.handle(64, 0, UnregisterBrokerRequest(broker_id=9), Session())  # type: ignore[arg-type]
    assert (r.error_code, r.error_message) == (102, "Broker ID 9 is not currently registered")
    versions = h.handle(18, 3, None, Session())  # type: ignore[arg-type]
    assert [(f.name, f.max_version_level) for f in versions.finalized_features] == [
        ("metadata.version", 33)]
    assert versions.encode(version=3)  # a client can read it


# -- kraftsman's guards (orchestration/brokers_out.py) -----------------------------------------
def test_cordon_on_an_old_cluster_sends_nothing_and_says_why(tmp_path: Path) -> None:
    c = four(tmp_path, metadataVersion="4.1-IV1")
    out = brokers_out.cordon(c, [3])
    assert out == brokers_out.CordonOutcome(note=cordon_unsupported_message(27))
    assert out.note == ("cordoning needs metadata.version 4.3-IV0 (the cluster has 4.1-IV1); "
                        "the brokers are drained without it")
    assert brokers_out.cordoned_brokers(c) == {}
    assert brokers_out.uncordon(c, [3]) == []


def test_cordon_at_exactly_metadata_version_4_3_iv0_cordons(tmp_path: Path) -> None:
    """The first version with cordoning (Kafka's MetadataVersion.isCordonedLogDirsSupported:
    IBP_4_3_IV0 and later) is enough."""
    c = four(tmp_path, metadataVersion="4.3-IV0")
    out = brokers_out.cordon(c, [3])
    assert out == brokers_out.CordonOutcome(cordoned=(3,))
    assert brokers_out.cordoned_brokers(c) == {3: "*"}


def test_cordon_on_a_cluster_that_does_not_say_its_version_reads_kafkas_refusal(
        tmp_path: Path) -> None:
    class Silent(PassThrough):
        def metadata_version(self) -> int | None:
            return None

    out = brokers_out.cordon(Silent(four(tmp_path, metadataVersion="4.0-IV3")), [3])  # type: ignore[arg-type]
    assert out.cordoned == () and out.note is not None and "4.3-IV0" in out.note


def test_cordon_and_uncordon_report_refusals_and_unreachable_clusters(tmp_path: Path) -> None:
    c = four(tmp_path)
    out = brokers_out.cordon(c, [3, 7])
    assert out.cordoned == (3,)
    assert out.problems == ("broker 7: cannot cordon: broker '7' is not registered",)

    class Down(PassThrough):
        def set_cordoned(self, brokers: Any) -> Any:
            raise KafkaApiError(errors.REQUEST_TIMED_OUT, "the controller did not answer")

    assert brokers_out.cordon(Down(c), [3]).problems == (  # type: ignore[arg-type]
        "cordoning brokers [3]: the controller did not answer",)
    assert brokers_out.uncordon(Down(c), [3]) == [  # type: ignore[arg-type]
        "uncordoning brokers [3]: the controller did not answer"]
    c.fail_broker(3)
    run_until(c, lambda: any(b.id == 3 and b.fenced for b in c.describe_cluster().brokers))
    assert brokers_out.uncordon(c, [3]) == [
        "broker 3: not running, so still cordoned (its cordoned.log.dirs stays set until it "
        "runs again)"]
    assert brokers_out.cordoned_brokers(c) == {}  # a stopped broker is not asked


def test_a_broker_is_drained_only_when_it_holds_no_replica(tmp_path: Path) -> None:
    c = four(tmp_path)
    two, three = brokers_out.check_drained(c, [3, 2])  # in broker order
    assert three.drained and three.message == "broker 3: Drained (no replica, leads nothing)"
    assert not two.drained
    assert two.message == ("broker 2 still holds orders-0 (replica), orders-1 (replica) — not "
                           "Drained")
    create(c, "many", assignment=[[2]] * 7)
    assert brokers_out.check_drained(c, [2])[0].message.endswith(
        "and 4 more partition(s) — not Drained")
    assert "many-0 (replica, leader)" in brokers_out.check_drained(c, [2])[0].message


def test_unregister_guard_refuses_a_running_or_holding_broker(tmp_path: Path) -> None:
    c = four(tmp_path)
    r = brokers_out.unregister(c, 3)
    assert r.error == errors.INVALID_REQUEST and r.message.startswith(
        "broker 3 is running (registered and unfenced): stop its process first")
    assert 3 in [b.id for b in c.describe_cluster().brokers]  # nothing was sent
    c.fail_broker(2)
    run_until(c, lambda: any(b.id == 2 and b.fenced for b in c.describe_cluster().brokers))
    r = brokers_out.unregister(c, 2)
    assert r.error == errors.INVALID_REQUEST and r.message == (
        "broker 2 still holds orders-0 (replica), orders-1 (replica) — not Drained: reassign "
        "its partitions first (kraftsman plan --goal remove-brokers 2), then unregister it")
    c.fail_broker(3)
    run_until(c, lambda: any(b.id == 3 and b.fenced for b in c.describe_cluster().brokers))
    assert brokers_out.unregister(c, 3).ok
    assert brokers_out.unregister(c, 3).error == errors.BROKER_ID_NOT_REGISTERED
