"""The CRDs' CEL rules, evaluated by a CEL interpreter (cel-python) the way the API server
evaluates them at admission: what they refuse, what they let through, and what they say."""

from __future__ import annotations

from typing import Any

import celpy
import pytest

from kraftsman import crdgen
from kraftsman.cli_errors import UsageError
from kraftsman.resources import parse_resource

REF = {"clusterRef": {"name": "demo"}}
MOVES = [{"topic": "orders", "partition": 0, "replicas": [3, 4, 5]}]


def rules_at(node: dict[str, Any]) -> list[dict[str, str]]:
    return list(node.get("x-kubernetes-validations") or [])


def holds(rule: str, self_: Any, old: Any = None) -> bool:
    env = celpy.Environment()
    activation = {"self": celpy.json_to_cel(self_)}
    if old is not None:
        activation["oldSelf"] = celpy.json_to_cel(old)
    return bool(env.program(env.compile(rule)).evaluate(activation))


@pytest.mark.parametrize("kind", ["PartitionReassignment", "LeaderElection", "KafkaQuorum",
                                  "KafkaRebalance"])
def test_cluster_ref_cannot_change_and_the_message_says_delete_and_recreate(kind: str) -> None:
    prop = crdgen.crd_schema(kind)["properties"]["spec"]["properties"]["clusterRef"]
    [rule] = rules_at(prop)
    assert holds(rule["rule"], {"name": "demo"}, {"name": "demo"})  # unchanged: allowed
    assert not holds(rule["rule"], {"name": "other"}, {"name": "demo"})  # moved: refused
    assert "spec.clusterRef is immutable" in rule["message"]
    assert "delete" in rule["message"] and "create a new one" in rule["message"]


def test_cancel_with_dry_run_is_refused_by_the_crd_and_the_model() -> None:
    spec_rules = rules_at(crdgen.crd_schema("PartitionReassignment")["properties"]["spec"])
    [rule] = [r for r in spec_rules if "dryRun" in r["rule"]]
    both = {**REF, "partitions": MOVES, "cancel": True, "dryRun": True}
    assert not holds(rule["rule"], both)
    for fine in ({**REF, "partitions": MOVES, "cancel": True},
                 {**REF, "partitions": MOVES, "dryRun": True},
                 {**REF, "partitions": MOVES, "cancel": False, "dryRun": True}):
        assert holds(rule["rule"], fine)
    with pytest.raises(UsageError, match=r"spec\.cancel and spec\.dryRun cannot both be true"):
        parse_resource({"apiVersion": "kraftsman.io/v1alpha1", "kind": "PartitionReassignment",
                        "metadata": {"name": "x"}, "spec": both})


def rebalance_rules_failing(spec: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """The messages of the KafkaRebalance CRD's CEL rules that ``spec`` breaks, and the
    resource the model parses."""
    rules = rules_at(crdgen.crd_schema("KafkaRebalance")["properties"]["spec"])
    failing = [r["message"] for r in rules if not holds(r["rule"], spec)]
    return failing, {"apiVersion": "kraftsman.io/v1alpha1", "kind": "KafkaRebalance",
                     "metadata": {"name": "x"}, "spec": spec}


def refused_alike(spec: dict[str, Any], field: str, refused_by: str | None) -> None:
    """The CRD (admission) and the model (the operator, the planner Job) take ``spec`` alike,
    or both refuse it with the same message about ``field``."""
    failing, doc = rebalance_rules_failing(spec)
    if refused_by is None:
        assert failing == []
        parse_resource(doc)
        return
    [message] = failing
    assert message.startswith(f"{field}: {refused_by}")
    with pytest.raises(UsageError, match=message.split(";")[0].replace(".", r"\.")):
        parse_resource(doc)


@pytest.mark.parametrize(("spec", "refused_by"), [
    ({**REF, "goal": "add-brokers"}, "required"),
    ({**REF, "goal": "remove-brokers"}, "required"),
    ({**REF, "goal": "demote-brokers"}, "required"),
    ({**REF, "goal": "demote-brokers", "brokers": [3, 4]}, None),
    ({**REF, "brokers": [3]}, "only for"),  # goal defaults to rebalance
    ({**REF, "goal": "leader-balance", "brokers": [3]}, "only for"),
    ({**REF, "goal": "add-brokers", "brokers": [6]}, None),
    ({**REF, "goal": "rebalance"}, None),
    (REF, None),
])
def test_rebalance_brokers_fit_the_goal_in_the_crd_and_the_model(
        spec: dict[str, Any], refused_by: str | None) -> None:
    refused_alike(spec, "spec.brokers", refused_by)


@pytest.mark.parametrize(("spec", "refused"), [
    ({**REF, "goal": "remove-brokers", "brokers": [3], "unregister": True}, False),
    ({**REF, "goal": "remove-brokers", "brokers": [3], "unregister": False}, False),
    ({**REF, "goal": "add-brokers", "brokers": [3], "unregister": True}, True),
    ({**REF, "unregister": True}, True),  # goal defaults to rebalance
    ({**REF, "unregister": False}, False),
])
def test_rebalance_unregister_only_with_remove_brokers_in_the_crd_and_the_model(
        spec: dict[str, Any], refused: bool) -> None:
    failing, doc = rebalance_rules_failing(spec)
    if not refused:
        assert failing == []
        parse_resource(doc)
        return
    assert failing == ["spec.unregister: only for goal remove-brokers; remove it or change "
                       "spec.goal"]
    with pytest.raises(UsageError, match=r"spec\.unregister: only for goal remove-brokers"):
        parse_resource(doc)


DISKS = [{"broker": 3, "logDir": "/data/d1"}]


@pytest.mark.parametrize(("spec", "refused_by"), [
    ({**REF, "goal": "remove-disks"}, "required"),
    ({**REF, "goal": "remove-disks", "disks": DISKS}, None),
    ({**REF, "disks": DISKS}, "only for"),  # goal defaults to rebalance
    ({**REF, "goal": "remove-brokers", "brokers": [3], "disks": DISKS}, "only for"),
    ({**REF, "goal": "rebalance"}, None),
])
def test_rebalance_disks_fit_the_goal_in_the_crd_and_the_model(
        spec: dict[str, Any], refused_by: str | None) -> None:
    """spec.disks: required by remove-disks and refused for every other goal, by the CRD's
    CEL rules (admission) and the model (the operator and the planner Job) alike."""
    refused_alike(spec, "spec.disks", refused_by)


def test_rebalance_disks_schema_keys_each_directory_once() -> None:
    prop = crdgen.crd_schema("KafkaRebalance")["properties"]["spec"]["properties"]["disks"]
    assert prop["x-kubernetes-list-type"] == "map"
    assert prop["x-kubernetes-list-map-keys"] == ["broker", "logDir"]
    assert prop["items"]["required"] == ["broker", "logDir"]
