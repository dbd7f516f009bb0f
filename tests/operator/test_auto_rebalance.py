"""KafkaCluster spec.autoRebalance.addBrokers: the pure decisions of kraftsman/auto_rebalance.py
(which brokers are new, when a KafkaRebalance is created, waits or is refused, its name and
body). The handler around them: test_auto_rebalance_handler.py; on the real API server:
tests/operator/real/test_auto_rebalance_deployed.py."""

from __future__ import annotations

import pytest

from kraftsman import auto_rebalance as ar
from kraftsman.rebalance_flow import MAX_JOB_NAME, job_name
from kraftsman.resources import AutoRebalance, KafkaClusterSpec, KafkaRebalanceSpec

UP = {b: False for b in range(6)}  # brokers 0-5 registered, unfenced


def with_(**brokers: bool) -> dict[int, bool]:
    return {**UP, **{int(k.removeprefix("b")): v for k, v in brokers.items()}}


def test_the_first_observation_records_every_registered_broker_and_creates_nothing() -> None:
    d = ar.decide(None, {**UP, 6: True}, "on", [], "demo")  # 6 fenced: recorded all the same
    assert d == ar.Decision(known=(0, 1, 2, 3, 4, 5, 6))


def test_a_broker_that_newly_registers_gets_one_add_brokers_rebalance() -> None:
    d = ar.decide([0, 1, 2, 3, 4, 5], with_(b6=False, b7=False), "on", [], "demo")
    assert (d.create, d.name, d.known) == ((6, 7), "demo-add-brokers-6-7", tuple(range(6)))
    assert d.known_after_create() == tuple(range(8))
    assert d.waiting == () and d.waiting_for is None


def test_nothing_new_nothing_created() -> None:
    assert ar.decide(list(range(6)), UP, "on", [], "demo") == ar.Decision(known=tuple(range(6)))


def test_a_new_broker_still_fenced_waits_until_it_is_unfenced() -> None:
    d = ar.decide(list(range(6)), with_(b6=True), "on", [], "demo")
    assert d.create == () and d.known == tuple(range(6))  # not recorded either
    d = ar.decide(list(d.known), with_(b6=False), "on", [], "demo")
    assert d.create == (6,)


def test_a_broker_that_unregisters_leaves_the_known_set_and_is_new_when_it_comes_back() -> None:
    gone = {b: False for b in range(5)}  # broker 5 unregistered
    d = ar.decide(list(range(6)), gone, "on", [], "demo")
    assert d == ar.Decision(known=(0, 1, 2, 3, 4))
    old = ar.Seen("demo-add-brokers-5", (5,), "Ready")  # its rebalance of long ago
    d = ar.decide(list(d.known), UP, "on", [old], "demo")
    assert (d.create, d.name) == ((5,), "demo-add-brokers-5-2")


def test_policy_off_records_new_brokers_without_a_rebalance() -> None:
    d = ar.decide(list(range(6)), with_(b6=False), "off", [], "demo")
    assert d == ar.Decision(known=tuple(range(7)))


def test_an_invalid_policy_creates_nothing_and_keeps_the_new_brokers_for_when_it_is_fixed(
        ) -> None:
    d = ar.decide(list(range(6)), with_(b6=False), "invalid", [], "demo")
    assert d.create == () and d.known == tuple(range(6)) and d.waiting == (6,)
    d = ar.decide(list(d.known), with_(b6=False), "on", [], "demo")  # fixed
    assert d.create == (6,)


@pytest.mark.parametrize("phase", [None, "PendingProposal", "ProposalReady", "Rebalancing",
                                   "Unavailable"])
def test_new_brokers_wait_while_an_earlier_auto_rebalance_is_unfinished(
        phase: str | None) -> None:
    running = ar.Seen("demo-add-brokers-6", (6,), phase)
    d = ar.decide(list(range(7)), with_(b6=False, b7=False), "on", [running], "demo")
    assert d.create == () and d.waiting == (7,) and d.waiting_for == "demo-add-brokers-6"
    assert d.known == tuple(range(7))  # 7 stays new: it gets its rebalance later


@pytest.mark.parametrize("phase", ["Ready", "Failed", "Rejected", "Stale", "Invalid",
                                   "Deleted"])
def test_a_finished_auto_rebalance_does_not_hold_new_brokers(phase: str) -> None:
    done = ar.Seen("demo-add-brokers-6", (6,), phase)
    d = ar.decide(list(range(7)), with_(b6=False, b7=False), "on", [done], "demo")
    assert (d.create, d.name) == ((7,), "demo-add-brokers-7")


def test_brokers_an_unfinished_one_names_are_adopted_not_created_twice() -> None:
    """The pass that created it lost its status write: the next pass sees the broker new
    again, but the rebalance for it is there."""
    mine = ar.Seen("demo-add-brokers-6", (6,), "PendingProposal")
    d = ar.decide(list(range(6)), with_(b6=False), "on", [mine], "demo")
    assert d.create == () and d.adopted == (6,) and d.known == tuple(range(7))
    assert d.waiting_for is None


def test_names_are_deterministic_and_fit_the_planner_jobs_name() -> None:
    assert ar.rebalance_name("demo", [3, 4]) == "demo-add-brokers-3-4"
    assert ar.rebalance_name("demo", [3], ["demo-add-brokers-3", "demo-add-brokers-3-2"]) == \
        "demo-add-brokers-3-3"
    long = ar.rebalance_name("a-rather-long-cluster-name-for-kafka", list(range(100, 120)))
    assert long == ar.rebalance_name("a-rather-long-cluster-name-for-kafka",
                                     list(range(100, 120)))
    assert len(long) <= ar.MAX_NAME and len(job_name(long, 999)) <= MAX_JOB_NAME
    assert long.startswith("a-rather-long-cluster-name-for-") and "-add-brokers-" in long
    assert long != ar.rebalance_name("a-rather-long-cluster-name-for-kafka",
                                     list(range(100, 121)))
    huge = ar.rebalance_name("c" * 253, [1])
    assert len(huge) <= ar.MAX_NAME


def test_parse_policy_modes_and_a_bad_template_named_with_its_fix() -> None:
    assert ar.parse_policy(None) == ("off", None, None)
    assert ar.parse_policy({})[0] == "off"
    assert ar.parse_policy({"addBrokers": {"enabled": False}})[0] == "off"
    mode, policy, problem = ar.parse_policy({"addBrokers": {}})
    assert mode == "on" and problem is None and policy is not None
    mode, policy, problem = ar.parse_policy(
        {"addBrokers": {"template": {"goal": "rebalance", "maxConcurrentMoves": 0}}})
    assert (mode, policy) == ("invalid", None)
    assert problem is not None
    assert "spec.autoRebalance.addBrokers.template.goal: unknown field" in problem
    assert "spec.autoRebalance.addBrokers.template.maxConcurrentMoves: Input should be " \
        "greater than or equal to 1" in problem
    assert "goal, brokers and clusterRef are the operator's" in problem
    _, _, typo = ar.parse_policy({"addBrokers": {"autoAprove": True}})
    assert typo is not None and "did you mean 'autoApprove'" in typo


def test_the_body_carries_the_template_the_approval_the_owner_and_labels() -> None:
    policy = AutoRebalance.model_validate({"addBrokers": {
        "autoApprove": True, "template": {"balance": True, "maxConcurrentMoves": 4,
                                          "throttleBytesPerSecond": 0}}})
    body = ar.rebalance_body(policy, "demo", "uid-1", "kafka", "demo-add-brokers-6", [7, 6])
    assert body["spec"] == {"clusterRef": {"name": "demo"}, "goal": "add-brokers",
                            "brokers": [6, 7], "balance": True, "maxConcurrentMoves": 4,
                            "throttleBytesPerSecond": 0, "approval": "Approved"}
    KafkaRebalanceSpec.model_validate(body["spec"])
    meta = body["metadata"]
    assert (meta["name"], meta["namespace"]) == ("demo-add-brokers-6", "kafka")
    assert meta["labels"] == {ar.LABEL_AUTO: "add-brokers", ar.LABEL_CLUSTER: "demo"}
    assert meta["ownerReferences"] == [{"apiVersion": "kraftsman.io/v1alpha1",
                                        "kind": "KafkaCluster", "name": "demo",
                                        "uid": "uid-1", "controller": True}]
    manual = AutoRebalance.model_validate({"addBrokers": {}})
    assert ar.rebalance_spec(manual, "demo", [6])["approval"] == "Pending"  # off by default


def test_the_index_keeps_only_auto_created_rebalances_by_owner_uid() -> None:
    meta = {"labels": {ar.LABEL_AUTO: "add-brokers"},
            "ownerReferences": [{"kind": "KafkaCluster", "uid": "u1"}]}
    spec = {"brokers": [6]}
    assert ar.index_entry("ns", "x", meta, spec, {"phase": "Rebalancing"}) == {
        ("ns", "u1"): ar.Seen("x", (6,), "Rebalancing")}
    assert ar.index_entry("ns", "x", {**meta, "labels": {}}, spec, None) == {}
    going = ar.index_entry("ns", "x", {**meta, "deletionTimestamp": "t"}, spec, None)
    assert going[("ns", "u1")].finished


def test_a_bad_policy_does_not_make_the_cluster_spec_unusable() -> None:
    spec = {"bootstrapServers": "k:9092", "autoRebalance": {"addBrokers": {"template": {
        "goal": "x"}}}}
    KafkaClusterSpec.model_validate(ar.without_policy(spec))
    with pytest.raises(ValueError):
        KafkaClusterSpec.model_validate(spec)
