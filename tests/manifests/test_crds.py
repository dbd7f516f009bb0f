"""The generated CRDs: fresh, valid Kubernetes objects, structural, and as strict as the models."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_schemas import ROOT, k8s_errors, load_docs

from kraftsman import crdgen
from kraftsman.cli_errors import UsageError
from kraftsman.resources import API_VERSION, KINDS, parse_resource

CRD_FILES = sorted((ROOT / "crds").glob("*.yaml"))


def test_committed_crds_are_not_stale() -> None:
    stale = crdgen.stale_files(ROOT)
    assert not stale, "run `kraftsman crds generate`:\n" + "\n".join(stale)


def test_check_flag_reports_a_stale_file_and_generate_fixes_it(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", "import sys; from kraftsman.commands import crds; "
           "import argparse; p = argparse.ArgumentParser(); s = p.add_subparsers(); "
           "crds.register(s); a = p.parse_args(sys.argv[1:]); sys.exit(a.handler(a))"]
    gen = subprocess.run([*cmd, "crds", "generate", "--root", str(tmp_path)],
                         capture_output=True, text=True, check=False)
    assert gen.returncode == 0, gen.stderr
    ok = subprocess.run([*cmd, "crds", "generate", "--root", str(tmp_path), "--check"],
                        capture_output=True, text=True, check=False)
    assert ok.returncode == 0 and "up to date" in ok.stdout
    victim = tmp_path / "crds" / "leaderelections.kraftsman.io.yaml"
    victim.write_text(victim.read_text().replace("shortNames:", "shortNamez:"))
    bad = subprocess.run([*cmd, "crds", "generate", "--root", str(tmp_path), "--check"],
                         capture_output=True, text=True, check=False)
    assert bad.returncode == 1
    assert "leaderelections.kraftsman.io.yaml" in bad.stderr and "shortNamez" in bad.stderr


def test_check_flag_reports_a_hand_edited_health_script(tmp_path: Path) -> None:
    """The Lua health scripts are generated too: an edit of one copy is drift."""
    cmd = [sys.executable, "-m", "kraftsman.cli", "crds", "generate", "--root", str(tmp_path)]
    gen = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert gen.returncode == 0, gen.stderr
    rel = Path("manifests/argocd/resource_customizations/kraftsman.io/KafkaQuorum/health.lua")
    script = tmp_path / rel
    script.write_text(script.read_text().replace('"Healthy"', '"Healthy "'))
    bad = subprocess.run([*cmd, "--check"], capture_output=True, text=True, check=False)
    assert bad.returncode == 1
    assert str(rel) in bad.stderr and "1 generated file(s) are stale" in bad.stderr


PRELUDE = (crdgen.TEMPLATES / "argocd" / "prelude.lua").read_text()


def test_every_health_script_carries_the_one_prelude_once() -> None:
    """One source: the prelude is in every script exactly once and in no kind's body."""
    generated = crdgen.render_all()
    for kind in crdgen.KIND_INFO:
        for path in (crdgen.ARGOCD_SCRIPTS / kind / "health.lua",
                     crdgen.CHART_ARGOCD_DIR / f"{kind}.lua"):
            assert generated[path].count(PRELUDE) == 1, path
        body = (crdgen.TEMPLATES / "argocd" / f"{kind}.lua.j2").read_text()
        assert "local function condition" not in body
    snippet = generated[crdgen.ARGOCD_DIR / "argocd-cm-health.yaml"]
    assert snippet.count("local function condition(t)") == len(crdgen.KIND_INFO)


def test_an_edit_of_the_prelude_reaches_every_script(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    templates = tmp_path / "templates"
    shutil.copytree(crdgen.TEMPLATES, templates)
    prelude = templates / "argocd" / "prelude.lua"
    prelude.write_text(prelude.read_text() + "-- edited once\n")
    monkeypatch.setattr(crdgen, "TEMPLATES", templates)
    generated = crdgen.render_all()
    for kind in crdgen.KIND_INFO:
        assert "-- edited once\n" in generated[crdgen.ARGOCD_SCRIPTS / kind / "health.lua"]
        assert "-- edited once\n" in generated[crdgen.CHART_ARGOCD_DIR / f"{kind}.lua"]
    snippet = generated[crdgen.ARGOCD_DIR / "argocd-cm-health.yaml"]
    assert snippet.count("-- edited once") == len(crdgen.KIND_INFO)


def test_missing_root_is_a_usage_error(tmp_path: Path) -> None:
    import argparse

    from kraftsman.commands import crds
    p = argparse.ArgumentParser()
    crds.register(p.add_subparsers())
    args = p.parse_args(["crds", "generate", "--root", str(tmp_path / "nope")])
    with pytest.raises(UsageError, match="not a directory"):
        args.handler(args)


@pytest.mark.parametrize("path", CRD_FILES, ids=lambda p: p.name)
def test_crds_validate_against_official_schemas(path: Path) -> None:
    for crd in load_docs(path):
        assert k8s_errors(crd) == []


def _walk(node: Any, where: str) -> list[str]:
    """Structural-schema rules: every node typed (or preserve-unknown-fields), no $ref, no
    type-bearing anyOf/oneOf, no additionalProperties: false."""
    problems = []
    if not isinstance(node, dict):
        return problems
    if "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        problems.append(f"{where}: no type")
    for bad in ("$ref", "anyOf", "oneOf", "allOf", "const", "title", "$defs"):
        if bad in node:
            problems.append(f"{where}: {bad} not allowed")
    if node.get("additionalProperties") is False:
        problems.append(f"{where}: additionalProperties: false not allowed")
    if isinstance(node.get("exclusiveMinimum"), int | float) and not isinstance(
            node.get("exclusiveMinimum"), bool):
        problems.append(f"{where}: exclusiveMinimum must be a boolean in OpenAPI 3.0")
    for name, sub in node.get("properties", {}).items():
        problems += _walk(sub, f"{where}.{name}")
    if "items" in node:
        problems += _walk(node["items"], f"{where}[]")
    if node.get("x-kubernetes-list-type") == "map":
        item = node["items"]
        for key in node["x-kubernetes-list-map-keys"]:
            if key not in item.get("required", []) and "default" not in item["properties"][key]:
                problems.append(f"{where}: list-map key {key} must be required")
    return problems


@pytest.mark.parametrize("kind", list(crdgen.KIND_INFO))
def test_schemas_are_structural(kind: str) -> None:
    assert _walk(crdgen.crd_schema(kind), kind) == []


def test_kraftsman_bookkeeping_never_needs_preserve_unknown_fields() -> None:
    # kopf's progress and diff-base live in annotations (kraftsman.handlers settings), so no
    # kraftsman CRD has to keep unknown fields anywhere.
    for kind in crdgen.KIND_INFO:
        assert "preserve-unknown-fields" not in crdgen.render_crd(kind)


def test_crd_names_columns_and_categories() -> None:
    crds = {d["spec"]["names"]["kind"]: d for p in CRD_FILES for d in load_docs(p)}
    short = {k: crds[k]["spec"]["names"].get("shortNames") for k in KINDS}
    assert short == {"KafkaCluster": ["kc"], "KafkaQuorum": ["kq"],
                     "PartitionReassignment": ["preas"], "LeaderElection": ["le"],
                     "KafkaRebalance": ["kr"]}

    def cols(kind: str) -> list[str]:
        v = crds[kind]["spec"]["versions"][0]
        assert v["subresources"] == {"status": {}}
        assert crds[kind]["spec"]["names"]["categories"] == ["kraftsman"]
        return [c["name"].upper() for c in v["additionalPrinterColumns"] if not c.get("priority")]

    assert cols("PartitionReassignment") == ["CLUSTER", "PHASE", "PROGRESS", "MOVING", "DONE",
                                             "AGE"]
    assert cols("KafkaQuorum") == ["CLUSTER", "LEADER", "EPOCH", "HW", "VOTERS", "TARGET", "AGE"]
    assert cols("LeaderElection") == ["CLUSTER", "TYPE", "PHASE", "ELECTED", "FAILED", "AGE"]
    assert cols("KafkaCluster")[-1] == "AGE"
    assert cols("KafkaRebalance") == ["CLUSTER", "GOAL", "PHASE", "MOVES", "DATA", "ETA", "AGE"]


def test_printer_columns_point_at_real_fields() -> None:
    for kind, info in crdgen.KIND_INFO.items():
        schema = crdgen.crd_schema(kind)
        for col in info.columns:
            if col.json_path.startswith(".metadata."):
                continue
            path = col.json_path.split("[")[0].strip(".").split(".")
            node = schema
            for part in path:
                assert part in node.get("properties", {}), f"{kind} column {col.name}: {part}"
                node = node["properties"][part]


EXAMPLES = sorted((ROOT / "manifests" / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_validate_against_crds_and_models(
        path: Path, validate_cr: Callable[[dict[str, Any]], list[str]]) -> None:
    for doc in load_docs(path):
        assert validate_cr(doc) == []
        parse_resource(doc, source=path.name)


def test_every_kind_has_an_example() -> None:
    kinds = {d["kind"] for p in EXAMPLES for d in load_docs(p)}
    assert kinds == set(KINDS)


def _cr(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": "x"}, "spec": spec}


REF = {"clusterRef": {"name": "demo"}}
# Input both the CRD schema (at admission) and the models reject.
BAD = [
    ("LeaderElection", {**REF, "electionType": "RANDOM", "topics": ["t"]}, "electionType"),
    ("LeaderElection", {**REF, "topics": ["t", "t"]}, "topics"),
    ("LeaderElection", {**REF, "partitions": [{"topic": "t", "partition": -1}]}, "partition"),
    ("LeaderElection", {**REF, "topics": ["t"], "intervalSeconds": 0}, "intervalSeconds"),
    ("PartitionReassignment", {**REF, "partitions": []}, "partitions"),
    ("PartitionReassignment", {**REF, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [1, 1]}]}, "replicas"),
    ("PartitionReassignment", {**REF, "maxConcurrentMoves": 0, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [1]}]}, "maxConcurrentMoves"),
    ("PartitionReassignment", {"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}]},
     "clusterRef"),
    ("PartitionReassignment", {**REF, "partitions": [
        {"topic": "bad topic!", "partition": 0, "replicas": [1]}]}, "topic"),
    ("KafkaQuorum", {**REF, "voters": []}, "voters"),
    ("KafkaQuorum", {**REF, "voters": [1, 1]}, "voters"),
    ("KafkaQuorum", {"clusterRef": {"name": "Not_A_Name"}, "voters": [1]}, "name"),
    ("KafkaCluster", {"embedded": {"brokers": []}}, "brokers"),
    ("KafkaCluster", {"embedded": {"brokers": [{"id": 0}, {"id": 0}]}}, "brokers"),
    ("KafkaCluster", {"embedded": {"brokers": [{"id": 0}],
                                   "replicationBytesPerSecond": 0}}, "replicationBytesPerSecond"),
    ("KafkaCluster", {"embedded": {"brokers": [{"id": 0}], "topics": [
        {"name": "t", "partitions": 0, "replicationFactor": 1}]}}, "partitions"),
    ("KafkaCluster", {"bootstrapServers": ""}, "bootstrapServers"),
    ("KafkaCluster", {"bootstrapServers": "kafka-0:90x2"}, "bootstrapServers"),
    ("KafkaCluster", {"bootstrapServers": "kafka-0:9092,kafka-1"}, "bootstrapServers"),
    ("KafkaRebalance", {**REF, "goal": "shuffle"}, "goal"),
    ("KafkaRebalance", {**REF, "goal": "add-brokers", "brokers": [1, 1]}, "brokers"),
    ("KafkaRebalance", {**REF, "approval": "Yes"}, "approval"),
    ("KafkaRebalance", {**REF, "maxConcurrentMoves": 0}, "maxConcurrentMoves"),
]


@pytest.mark.parametrize(("kind", "spec", "field"), BAD, ids=lambda v: str(v)[:40])
def test_schema_and_model_reject_the_same_bad_input(
        kind: str, spec: dict[str, Any], field: str,
        validate_cr: Callable[[dict[str, Any]], list[str]]) -> None:
    errors = validate_cr(_cr(kind, spec))
    assert errors, f"CRD schema accepted {spec}"
    assert any(field in e for e in errors), errors
    with pytest.raises(UsageError):
        parse_resource(_cr(kind, spec))


# Input only the models reject: a plan's partition lists are atomic in the CRDs (a list-map
# would cost ~130 bytes of managedFields per partition on every write), so a partition listed
# twice is the operator's to refuse (Degraded/InvalidSpec naming it), as the CLI does.
MODEL_ONLY = [
    ("PartitionReassignment", {**REF, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [1]},
        {"topic": "t", "partition": 0, "replicas": [2]}]}, "t-0 more than once"),
    ("LeaderElection", {**REF, "partitions": [{"topic": "t", "partition": 0},
                                              {"topic": "t", "partition": 0}]},
     "t-0 more than once"),
]


@pytest.mark.parametrize(("kind", "spec", "said"), MODEL_ONLY, ids=lambda v: str(v)[:40])
def test_partitions_listed_twice_are_refused_by_the_model(
        kind: str, spec: dict[str, Any], said: str,
        validate_cr: Callable[[dict[str, Any]], list[str]]) -> None:
    assert validate_cr(_cr(kind, spec)) == []
    with pytest.raises(UsageError, match=said):
        parse_resource(_cr(kind, spec))


THROTTLED_KINDS = {
    "PartitionReassignment": {**REF, "partitions": [{"topic": "t", "partition": 0,
                                                     "replicas": [1]}]},
    "KafkaRebalance": REF,
}


@pytest.mark.parametrize("kind", sorted(THROTTLED_KINDS))
@pytest.mark.parametrize(("throttle", "taken"), [
    (-5, False), (0, False), (1, True), (2**63 - 1, True), (2**63, False)])
def test_the_crd_and_the_model_take_exactly_the_throttles_the_brokers_take(
        kind: str, throttle: int, taken: bool,
        validate_cr: Callable[[dict[str, Any]], list[str]]) -> None:
    """A broker takes a replication rate that is a Kafka LONG >= 0 (DynamicConfig.Broker);
    0 stops replication, so a resource's throttle is 1 to Long.MAX_VALUE — checked at
    admission by the schema's minimum (the maximum: see below), and by the model the CLI and
    operator parse with. A KafkaRebalance's 0 means unthrottled reassignments (its field has
    a default, so leaving it out cannot say that), as `kraftsman plan --throttle 0` does."""
    doc = _cr(kind, {**THROTTLED_KINDS[kind], "throttleBytesPerSecond": throttle})
    errors = validate_cr(doc)
    taken = taken or (kind == "KafkaRebalance" and throttle == 0)
    if taken:
        assert errors == []
        assert parse_resource(doc).spec.throttle_bytes_per_second == throttle
        return
    if throttle < 2**63:
        assert [e.split(":")[0] for e in errors] == ["spec.throttleBytesPerSecond"], errors
    # else: no maximum in the schema (kube-apiserver reads bounds as float64s, and 2**63 - 1
    # is none: crdgen leaves it out); kube-apiserver refuses 2**63 as no integer
    # (tests/operator/real/test_real_api.py), the model as out of range.
    with pytest.raises(UsageError, match=r"spec\.throttleBytesPerSecond: .*; give a whole "
                                         "number of bytes per second from 1 to "
                                         "9223372036854775807(, 0 for none)?, or leave the "
                                         "field out"):
        parse_resource(doc)


# Cross-field rules only CEL can express: present in the CRD, and the model agrees.
CEL = [
    ("KafkaCluster", {}, "exactly one of spec.embedded or spec.bootstrapServers"),
    ("KafkaCluster", {"bootstrapServers": "k:9092", "embedded": {"brokers": [{"id": 0}]}},
     "exactly one of spec.embedded or spec.bootstrapServers"),
    ("KafkaCluster", {"embedded": {"brokers": [{"id": 0}]}, "authSecretRef": {"name": "s"}},
     "authSecretRef only applies"),
    ("LeaderElection", {**REF}, "exactly one of spec.partitions"),
    ("LeaderElection", {**REF, "topics": ["t"], "allTopicPartitions": True},
     "exactly one of spec.partitions"),
    ("KafkaRebalance", {**REF, "goal": "add-brokers"}, "spec.brokers: required for goals"),
    ("KafkaRebalance", {**REF, "goal": "remove-brokers"}, "spec.brokers: required for goals"),
    ("KafkaRebalance", {**REF, "goal": "demote-brokers"}, "spec.brokers: required for goals"),
    ("KafkaRebalance", {**REF, "brokers": [3]}, "spec.brokers: only for goals"),
    ("KafkaRebalance", {**REF, "goal": "leader-balance", "brokers": [3]},
     "spec.brokers: only for goals"),
]


@pytest.mark.parametrize(("kind", "spec", "message"), CEL, ids=lambda v: str(v)[:40])
def test_cel_rules_mirror_model_validators(kind: str, spec: dict[str, Any], message: str) -> None:
    rules = crdgen.crd_schema(kind)["properties"]["spec"]["x-kubernetes-validations"]
    assert any(message in r["message"] for r in rules)
    with pytest.raises(UsageError, match=message.replace(".", r"\.")):
        parse_resource(_cr(kind, spec))


def test_unmappable_union_is_refused() -> None:
    from pydantic import BaseModel

    class Weird(BaseModel):
        x: int | str

    with pytest.raises(ValueError, match="structural schema"):
        crdgen.structural_schema(Weird)


def test_generated_yaml_parses_back_to_the_schema() -> None:
    for kind in crdgen.KIND_INFO:
        crd = yaml.safe_load(crdgen.render_crd(kind))
        assert crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"] == crdgen.crd_schema(kind)
