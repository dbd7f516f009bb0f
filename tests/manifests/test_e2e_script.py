"""tests/e2e/kind-e2e.sh cannot run here (no Docker); check its syntax and what it uses."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from k8s_schemas import ROOT

SCRIPT = ROOT / "tests" / "e2e" / "kind-e2e.sh"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_script_parses() -> None:
    result = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr


def test_script_is_executable_and_strict() -> None:
    assert SCRIPT.stat().st_mode & 0o111
    text = SCRIPT.read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    assert "trap cleanup EXIT" in text


def test_referenced_files_exist() -> None:
    text = SCRIPT.read_text()
    refs = re.findall(r'="\$ROOT/([^"]+)"', text)
    assert set(refs) >= {"charts/kraftsman", "manifests/examples", "Dockerfile"}
    for ref in refs:
        assert (ROOT / ref).exists(), ref
    assert (ROOT / "charts/kraftsman/Chart.yaml").is_file()
    assert list((ROOT / "manifests/examples").glob("*.yaml"))


def test_waits_for_every_kind_with_its_condition() -> None:
    text = SCRIPT.read_text()
    assert "KafkaCluster|KafkaQuorum) echo Ready" in text
    assert "KafkaRebalance) echo ProposalReady" in text
    # the planner Job of an embedded cluster mounts the state claim (docs/rebalance.md)
    assert "--set state.type=persistentVolumeClaim" in text
    assert "*) echo Succeeded" in text
    assert '--for=condition="$(condition_for "$kind")"' in text
    assert 'for file in "$EXAMPLES"/*.yaml' in text
    assert "kubectl get kraftsman" in text
