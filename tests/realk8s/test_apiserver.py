"""tools/real-apiserver and the session fixture when something is wrong: no binaries, a binary
that dies at start or never answers, a directory with no server or one already running —
each one line saying what to do. (The server itself: tests/operator/real/.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.realk8s.apiserver import BINARIES, ROOT, ServerError, attach, down, up

TOOL = ROOT / "tools" / "real-apiserver"


def fake_bin(d: Path, script: str = "exit 1") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for name in BINARIES:
        path = d / name
        path.write_text(f"#!/bin/sh\necho '{name}: cannot start' >&2\n{script}\n")
        path.chmod(0o755)
    return d


def run_tool(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TOOL), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHON": sys.executable, **(env or {})})


def test_up_without_binaries_says_how_to_build_them(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    with pytest.raises(ServerError, match=r"etcd, kube-apiserver, kubectl not built in .*: run "
                                          r".*tools/build-real-apiserver"):
        up(tmp_path / "k8s", binaries=empty)
    done = run_tool("up", str(tmp_path / "k8s"), env={"KRAFTSMAN_K8S_BIN": str(empty)})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: etcd, kube-apiserver, kubectl not built in ")
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_binary_that_dies_at_start_is_reported_with_its_log(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match=r"etcd exited with 1 at start; its log .*etcd.log "
                                          r"ends:\netcd: cannot start"):
        up(tmp_path / "k8s", binaries=fake_bin(tmp_path / "bin"))
    assert not (tmp_path / "k8s" / "etcd.pid").exists()  # nothing left running


def test_a_server_that_never_answers_times_out_and_is_stopped(tmp_path: Path) -> None:
    binaries = tmp_path / "bin"
    binaries.mkdir()
    for name in BINARIES:  # a real process of that name that never serves
        shutil.copy("/bin/sleep", binaries / name)
    with pytest.raises(ServerError, match=r"etcd exited"):
        up(tmp_path / "k8s", binaries=binaries)  # sleep refuses etcd's flags at once
    server = attach(tmp_path / "k8s")
    server._etcd_argv = lambda: [str(binaries / "etcd"), "30"]  # type: ignore[method-assign]
    with pytest.raises(ServerError, match=r"etcd not ready after 1 s \(http://127\.0\.0\.1:\d+"
                                          r"/health: .*refused"):
        server.start_etcd(timeout=1)
    assert server.pid("etcd") is not None  # left running: up() stops it, here the test
    with pytest.raises(ServerError, match=r"etcd already running there; stop them first "
                                          r"\(tools/real-apiserver down "):
        up(tmp_path / "k8s", binaries=binaries)
    done = run_tool("down", str(tmp_path / "k8s"))
    assert done.returncode == 0 and "stopped kube-apiserver and etcd" in done.stdout
    assert server.pid("etcd") is None


def test_down_of_a_directory_without_a_server_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="no server started there"):
        down(tmp_path)
    done = run_tool("down", str(tmp_path))
    assert done.returncode == 2 and done.stderr.startswith("error: ")
    assert "no server started there" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("ci", [None, "true"])
def test_without_binaries_the_real_server_tests_skip_but_fail_under_ci(tmp_path: Path,
                                                                        ci: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["KRAFTSMAN_K8S_BIN"] = str(tmp_path)
    if ci:
        env["CI"] = ci
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "-n", "0",
         "tests/operator/real/test_deployed.py::test_manifest_pod_reconciles_a_cluster"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    reason = f"etcd, kube-apiserver, kubectl missing in {tmp_path}): run " \
             "tools/build-real-apiserver"
    assert reason in done.stdout, done.stdout[-2000:]
    if ci:
        assert done.returncode == 1 and "1 error" in done.stdout, done.stdout[-2000:]
        assert "CI is set and the real API server is not built" in done.stdout
    else:
        assert done.returncode == 0 and "1 skipped" in done.stdout, done.stdout[-2000:]
