"""Every Argo CD health script, run in a real Lua interpreter on its own testdata."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lupa
import pytest
import yaml
from k8s_schemas import ROOT

from kraftsman.resources import KINDS

SCRIPTS = ROOT / "manifests" / "argocd" / "resource_customizations" / "kraftsman.io"
CASES = [
    (kind, case)
    for kind in sorted(KINDS)
    for case in yaml.safe_load((SCRIPTS / kind / "health_test.yaml").read_text())["tests"]
]


def _to_lua(lua: Any, value: Any) -> Any:
    """JSON-like Python value -> Lua value; lists become 1-based sequences, as Argo CD does."""
    if isinstance(value, dict):
        return lua.table_from({k: _to_lua(lua, v) for k, v in value.items()})
    if isinstance(value, list):
        return lua.table_from([_to_lua(lua, v) for v in value])
    return value


def run_health(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = _to_lua(lua, obj)
    result = lua.execute((SCRIPTS / kind / "health.lua").read_text())
    return dict(result.items())


def test_every_kind_has_a_script_and_tests() -> None:
    for kind in KINDS:
        assert (SCRIPTS / kind / "health.lua").is_file()
        assert len(yaml.safe_load((SCRIPTS / kind / "health_test.yaml").read_text())["tests"]) >= 3


@pytest.mark.parametrize(("kind", "case"), CASES, ids=lambda v: v if isinstance(v, str)
                         else Path(v["inputPath"]).stem)
def test_health_script_on_testdata(kind: str, case: dict[str, Any]) -> None:
    obj = yaml.safe_load((SCRIPTS / kind / case["inputPath"]).read_text())
    assert obj["kind"] == kind
    assert run_health(kind, obj) == case["healthStatus"]


def test_statuses_cover_argo_vocabulary() -> None:
    seen = {case["healthStatus"]["status"] for _, case in CASES}
    assert seen == {"Progressing", "Healthy", "Degraded", "Suspended"}


def test_testdata_statuses_are_valid_for_the_crds(validate_cr: Any) -> None:
    for kind, case in CASES:
        obj = yaml.safe_load((SCRIPTS / kind / case["inputPath"]).read_text())
        assert validate_cr(obj) == [], case["inputPath"]


def test_argocd_cm_snippet_carries_each_script() -> None:
    cm = yaml.safe_load((ROOT / "manifests" / "argocd" / "argocd-cm-health.yaml").read_text())
    for kind in KINDS:
        key = f"resource.customizations.health.kraftsman.io_{kind}"
        assert cm["data"][key].rstrip("\n") == (SCRIPTS / kind / "health.lua").read_text(
        ).rstrip("\n")
