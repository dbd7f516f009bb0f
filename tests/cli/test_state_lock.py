"""One kraftsman at a time on a state directory, and reads that leave the cluster as it was.

Every command here is a subprocess of the installed ``kraftsman`` console script, started the
way a user starts it; concurrency is real (two processes, one directory).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import cluster_yaml

KRAFTSMAN = str(Path(sys.executable).parent / "kraftsman")

CLUSTER = cluster_yaml(
    "{name: orders, partitions: 2, replicationFactor: 2, sizeBytesPerPartition: 50000000, "
    "assignment: [[0, 1], [1, 2]]}",
    "{name: audit, partitions: 1, replicationFactor: 2, sizeBytesPerPartition: 1000000, "
    "assignment: [[0, 1]]}")

SLOW_MOVE = """
apiVersion: kraftsman.io/v1alpha1
kind: PartitionReassignment
metadata: {name: slow}
spec:
  clusterRef: {name: demo}
  partitions:
    - {topic: orders, partition: 0, replicas: [3, 1]}
    - {topic: orders, partition: 1, replicas: [3, 2]}
"""

OTHER_MOVE = """
apiVersion: kraftsman.io/v1alpha1
kind: PartitionReassignment
metadata: {name: other}
spec:
  clusterRef: {name: demo}
  partitions:
    - {topic: audit, partition: 0, replicas: [2, 3]}
"""


def kraftsman(*args: str, state: Path, wait: float | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if wait is not None:
        env["KRAFTSMAN_LOCK_WAIT"] = str(wait)
    return subprocess.run([KRAFTSMAN, *args, "--state-dir", str(state)], capture_output=True,
                          text=True, timeout=timeout, env=env)


def start(*args: str, state: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([KRAFTSMAN, *args, "--state-dir", str(state)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def holder_pid(state: Path, proc: subprocess.Popen[str], timeout: float = 60) -> int:
    """Wait (wall clock: another process, not the core) until ``proc`` holds the lock."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        text = (state / "lock").read_bytes() if (state / "lock").exists() else b""
        if text and json.loads(text)["pid"] == proc.pid:
            return proc.pid
        time.sleep(0.05)
    raise AssertionError("the first command never took the lock")


def files(state: Path) -> dict[str, bytes]:
    return {str(p.relative_to(state)): p.read_bytes()
            for p in sorted(state.rglob("*")) if p.is_file()}


@pytest.fixture
def state(tmp_path: Path) -> Path:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "slow.yaml").write_text(SLOW_MOVE)
    (tmp_path / "other.yaml").write_text(OTHER_MOVE)
    s = tmp_path / "state"
    r = kraftsman("apply", "-f", str(tmp_path / "cluster.yaml"), state=s)
    assert r.returncode == 0, r.stderr
    return s


def test_second_apply_and_quorum_alter_wait_or_are_refused_and_state_stays_whole(
        state: Path) -> None:
    """Before: `apply` + `quorum alter` corrupted the quorum log; two `apply` diverged."""
    base = state.parent
    # The first apply reads its plan from stdin, so it holds the lock exactly as long as the
    # test wants: until the plan is written, then for the whole (throttled) move.
    first = subprocess.Popen([KRAFTSMAN, "apply", "-f", "-", "--tick", "0.2", "--state-dir",
                              str(state)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    patient: subprocess.Popen[str] | None = None
    try:
        pid = holder_pid(state, first)
        busy = f"another kraftsman (pid {pid}) is using {state}"
        second = kraftsman("apply", "-f", str(base / "other.yaml"), state=state, wait=0)
        assert second.returncode == 2 and busy in second.stderr, second.stderr
        alter = kraftsman("quorum", "alter", "--voters", "0,1,3", state=state, wait=0.3)
        assert alter.returncode == 2 and busy in alter.stderr, alter.stderr
        for r in (second, alter):
            assert "Traceback" not in r.stderr and r.stdout == ""
        # given time, a second apply waits its turn and then runs
        env = {**os.environ, "KRAFTSMAN_LOCK_WAIT": "300"}
        patient = subprocess.Popen([KRAFTSMAN, "apply", "-f", str(base / "other.yaml"),
                                    "--state-dir", str(state)], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = first.communicate(SLOW_MOVE, timeout=300)
        p_out, p_err = patient.communicate(timeout=300)
    finally:
        for proc in (first, patient):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert first.returncode == 0, err
    assert "PartitionReassignment/slow completed: 2 moved" in out
    assert patient.returncode == 0, p_err
    assert "PartitionReassignment/other completed: 1 moved" in p_out
    alter = kraftsman("quorum", "alter", "--voters", "0,1,3", "-o", "json", state=state)
    assert alter.returncode == 0, alter.stderr
    assert json.loads(alter.stdout)["currentVoters"] == [0, 1, 3]
    topics = json.loads(kraftsman("describe", "topics", "-o", "json", state=state).stdout)
    assert {(p["topic"], p["partition"]): p["replicas"] for p in topics} == {
        ("orders", 0): [3, 1], ("orders", 1): [3, 2], ("audit", 0): [2, 3]}
    listed = kraftsman("reassignments", "list", state=state)
    assert listed.stdout.strip() == "No partition reassignments found."
    assert (state / "lock").read_bytes() == b""  # released, nobody named


def test_a_served_directory_refuses_other_commands_at_once(state: Path) -> None:
    serve = start("cluster", "serve", "--listen", "127.0.0.1:0", "--time-scale", "0",
                  state=state)
    try:
        assert serve.stdout is not None
        line = serve.stdout.readline()
        assert line.startswith("listening on "), line
        listen = line.split()[-1]
        for argv in (["cluster", "fail-broker", "1"], ["quorum", "alter", "--voters", "0,1,3"],
                     ["apply", "-f", str(state.parent / "other.yaml")]):
            t0 = time.monotonic()
            r = kraftsman(*argv, state=state, wait=60)
            assert r.returncode == 2, (argv, r.stderr)
            assert time.monotonic() - t0 < 30  # a server is not waited for
            assert f"another kraftsman (pid {serve.pid}) is using {state}" in r.stderr
            assert f"serves this cluster on {listen}" in r.stderr and "Traceback" not in r.stderr
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.communicate(timeout=60)
    assert serve.returncode == 0
    r = kraftsman("cluster", "fail-broker", "1", state=state)
    assert r.returncode == 0 and "Broker 1 is down" in r.stdout, r.stderr


def test_reads_leave_the_cluster_and_its_files_as_they_were(state: Path) -> None:
    """Before: every read restarted the controllers, so LeaderId flipped and the epoch grew."""
    kraftsman("apply", "-f", str(state.parent / "other.yaml"), "--no-wait", state=state)
    before = files(state)
    first = json.loads(kraftsman("quorum", "describe", "-o", "json", state=state).stdout)
    for argv in (["describe", "topics"], ["describe", "cluster"], ["reassignments", "list"],
                 ["reassignments", "status"], ["quorum", "describe", "--replication"]):
        r = kraftsman(*argv, state=state)
        assert r.returncode == 0, (argv, r.stderr)
    second = json.loads(kraftsman("quorum", "describe", "-o", "json", state=state).stdout)
    assert (second["leaderId"], second["leaderEpoch"], second["highWatermark"]) == (
        first["leaderId"], first["leaderEpoch"], first["highWatermark"])
    assert files(state) == before
    # a write does change it, so the comparison above could fail
    assert kraftsman("cluster", "advance", "1", state=state).returncode == 0
    assert files(state) != before


def test_each_cluster_has_its_own_id_shown_by_describe_and_quorum(
        state: Path, tmp_path: Path) -> None:
    other = tmp_path / "other-state"
    assert kraftsman("apply", "-f", str(tmp_path / "cluster.yaml"), state=other).returncode == 0

    def ids(s: Path) -> tuple[str, str]:
        cluster = json.loads(kraftsman("describe", "cluster", "-o", "json", state=s).stdout)
        quorum = kraftsman("quorum", "describe", state=s).stdout
        line = next(x for x in quorum.splitlines() if x.startswith("ClusterId:"))
        return cluster["clusterId"], line.split()[-1]

    a, b = ids(state), ids(other)
    assert a[0] == a[1] and b[0] == b[1] and len(a[0]) == 22
    assert a[0] != b[0]  # same spec, same seed: still two clusters
    assert kraftsman("cluster", "advance", "1", state=state).returncode == 0
    assert ids(state) == a  # the id is persisted


def test_no_quorum_leader_is_an_error_line_not_a_traceback(state: Path) -> None:
    for node in ("0", "1"):
        r = kraftsman("cluster", "fail-controller", node, state=state)
        assert r.returncode == 0, r.stderr
    for argv in (["describe", "cluster"], ["quorum", "describe"],
                 ["elect", "--all-topic-partitions"]):
        r = kraftsman(*argv, state=state, timeout=300)
        assert r.returncode == 1, (argv, r.stdout, r.stderr)
        assert "NOT_CONTROLLER" in r.stderr and "no controller is active" in r.stderr
        assert "Traceback" not in r.stderr


def test_piped_into_head_ends_quietly(tmp_path: Path) -> None:
    """More output than a pipe holds, read by `head -1`: BrokenPipeError, handled."""
    big = "      - {name: big, partitions: 4000, replicationFactor: 3}\n"
    (tmp_path / "big.yaml").write_text(CLUSTER.replace("    topics:\n", "    topics:\n" + big))
    state = tmp_path / "state"
    assert kraftsman("apply", "-f", str(tmp_path / "big.yaml"), state=state).returncode == 0
    r = subprocess.run(f"{KRAFTSMAN} describe topics --state-dir {state} | head -1; "
                       "exit ${PIPESTATUS[0]}", shell=True, executable="/bin/bash",
                       capture_output=True, text=True, timeout=120)
    assert r.stdout.startswith("Topic: ") and r.stderr == ""
    assert r.returncode == 141  # like coreutils killed by SIGPIPE: 128 + 13
