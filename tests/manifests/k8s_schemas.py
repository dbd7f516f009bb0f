"""Helpers for the CRD / manifest / chart tests: official Kubernetes schemas and CRD schemas."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
# Oldest and newest Kubernetes minor versions we validate against (kubernetes-validate ships
# 1.25 .. 1.37 offline); CEL validation rules in the CRDs need >= 1.25 (GA in 1.29).
K8S_VERSIONS = ("1.29", "1.37")


def load_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def k8s_errors(obj: dict[str, Any]) -> list[str]:
    """Validate one object against the official schemas (strict: unknown fields are errors)."""
    errors = []
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{version}: {obj.get('kind')}/{obj.get('metadata', {}).get('name')}: "
                          f"{e.message}")
    return errors


def _to_jsonschema(node: Any) -> Any:
    """OpenAPI 3.0 (Kubernetes subset) -> JSON Schema draft 4, which it is closest to."""
    if isinstance(node, list):
        return [_to_jsonschema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _to_jsonschema(v) for k, v in node.items()
           if not k.startswith("x-kubernetes-") and k != "nullable"}
    if "properties" in node:
        out["properties"] = {k: _to_jsonschema(v) for k, v in node["properties"].items()}
        out["additionalProperties"] = False  # the API server prunes unknown fields
    return out


def _list_type_errors(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    """Enforce x-kubernetes-list-type set/map, which JSON Schema cannot say."""
    errors: list[str] = []
    if isinstance(value, dict) and "properties" in schema:
        for k, v in value.items():
            if k in schema["properties"]:
                errors += _list_type_errors(schema["properties"][k], v, f"{path}.{k}")
    if isinstance(value, list):
        kind = schema.get("x-kubernetes-list-type")
        if kind == "set":
            seen = [yaml.safe_dump(v) for v in value]
            if len(set(seen)) != len(seen):
                errors.append(f"{path}: duplicate entries in a set")
        elif kind == "map":
            keys = schema["x-kubernetes-list-map-keys"]
            seen_keys = [tuple(v.get(k) for k in keys) for v in value if isinstance(v, dict)]
            if len(set(seen_keys)) != len(seen_keys):
                errors.append(f"{path}: duplicate entries for keys {keys}")
        for i, v in enumerate(value):
            errors += _list_type_errors(schema.get("items", {}), v, f"{path}[{i}]")
    return errors


def crd_index() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> openAPIV3Schema of every CRD in crds/."""
    index = {}
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        for crd in load_docs(path):
            for v in crd["spec"]["versions"]:
                api = f"{crd['spec']['group']}/{v['name']}"
                index[(api, crd["spec"]["names"]["kind"])] = v["schema"]["openAPIV3Schema"]
    return index


def cr_errors(obj: dict[str, Any], index: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """Validate a custom resource against the generated CRD schema (as the API server would,
    short of CEL rules, which tests/manifests/test_crds.py checks against pydantic)."""
    key = (obj.get("apiVersion", ""), obj.get("kind", ""))
    if key not in index:
        return [f"no CRD for {key}"]
    schema = copy.deepcopy(index[key])
    for implicit in ("apiVersion", "kind", "metadata"):  # the API server always allows these
        schema.setdefault("properties", {}).setdefault(
            implicit, {"type": "object" if implicit == "metadata" else "string"})
    validator = jsonschema.Draft4Validator(_to_jsonschema(copy.deepcopy(schema)))
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
              for e in validator.iter_errors(obj)]
    return errors + _list_type_errors(schema, obj, "")


