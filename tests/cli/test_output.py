"""Output a person can trust: paused runs return, cancelled moves are announced as restarted,
lists sort by partition number and accept what they print, a missing extra is named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kraftsman.cli import main
from tests.helpers import cluster_yaml

CLUSTER = cluster_yaml(
    "{name: orders, partitions: 12, replicationFactor: 2, sizeBytesPerPartition: 5000000, "
    f"assignment: {[[0, 1]] * 12}}}")


def move(*, paused: bool = False, count: int = 12) -> str:
    parts = "\n".join(f"    - {{topic: orders, partition: {i}, replicas: [3, 2]}}"
                      for i in range(count))
    return f"""
apiVersion: kraftsman.io/v1alpha1
kind: PartitionReassignment
metadata: {{name: move}}
spec:
  clusterRef: {{name: demo}}
  maxConcurrentMoves: 2
  paused: {str(paused).lower()}
  partitions:
{parts}
"""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def s(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    state = ["--state-dir", str(tmp_path / "state")]
    (tmp_path / "c.yaml").write_text(CLUSTER)
    assert run(capsys, "apply", "-f", str(tmp_path / "c.yaml"), *state)[0] == 0
    return state


def test_paused_returns_saying_how_many_are_pending(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, s: list[str]) -> None:
    """Before: `paused: true` made `apply` wait forever."""
    f = tmp_path / "m.yaml"
    f.write_text(move())
    code, out, _ = run(capsys, "apply", "-f", str(f), "--for", "3", *s)
    assert code == 0 and "2 moving" in out  # two in flight when the run stops
    f.write_text(move(paused=True))
    code, out, _ = run(capsys, "apply", "-f", str(f), *s)
    assert code == 0
    assert "PartitionReassignment/move paused, 10 pending (2 done)" in out  # in flight finished
    code, out, _ = run(capsys, "reassignments", "list", *s)
    assert out.strip() == "No partition reassignments found."  # nothing new started
    f.write_text(move())
    code, out, _ = run(capsys, "apply", "-f", str(f), *s)
    assert code == 0 and "completed: 12 moved" in out


def test_cancel_then_apply_says_the_cancelled_moves_restart(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, s: list[str]) -> None:
    f = tmp_path / "m.yaml"
    f.write_text(move())
    assert run(capsys, "apply", "-f", str(f), "--no-wait", *s)[0] == 0
    code, out, _ = run(capsys, "reassignments", "cancel", *s)
    assert code == 0 and "Successfully cancelled partition reassignments for: " in out
    assert "PartitionReassignment/move still lists 2 of these; a later `kraftsman apply`" in out
    code, out, _ = run(capsys, "apply", "-f", str(f), *s)
    assert code == 0
    assert ("PartitionReassignment/move: 2 move(s) it had started were cancelled outside it "
            "(e.g. `kraftsman reassignments cancel`) and are restarted: orders-") in out
    assert "completed: 12 moved" in out


def test_partition_accepts_the_printed_form_and_lists_sort_by_number(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, s: list[str]) -> None:
    f = tmp_path / "m.yaml"
    f.write_text(move().replace("maxConcurrentMoves: 2", "maxConcurrentMoves: 12"))
    assert run(capsys, "apply", "-f", str(f), "--no-wait", *s)[0] == 0
    code, out, _ = run(capsys, "reassignments", "list", *s)
    listed = [line.split(":")[0] for line in out.splitlines()[1:]]
    assert listed == [f"orders-{i}" for i in range(12)]  # 2 before 10
    code, out, _ = run(capsys, "reassignments", "cancel", "--partition", "orders-10",
                       "--partition", "orders:2", *s)
    assert code == 0
    assert "Successfully cancelled partition reassignments for: orders-2, orders-10" in out
    code, _, err = run(capsys, "reassignments", "cancel", "--partition", "orders", *s)
    assert code == 2 and "expected TOPIC-PARTITION" in err
    code, _, err = run(capsys, "reassignments", "cancel", "--partition", "orders-\u00b2", *s)
    assert code == 2 and "expected TOPIC-PARTITION" in err  # '²' is no partition number


def test_plan_without_the_plan_extra_names_it(tmp_path: Path) -> None:
    """Before: a missing pyarrow was reported as 'not a readable Parquet file'."""
    kraftsman = str(Path(sys.executable).parent / "kraftsman")
    state = str(tmp_path / "state")
    (tmp_path / "c.yaml").write_text(CLUSTER)
    for argv in (["apply", "-f", str(tmp_path / "c.yaml")],
                 ["snapshot", "--out", str(tmp_path / "snap")]):
        r = subprocess.run([kraftsman, *argv, "--state-dir", state], capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr
    stubs = tmp_path / "not-installed"
    stubs.mkdir()  # an environment without pyarrow, as a user without the extra has
    (stubs / "pyarrow.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'pyarrow'\", name='pyarrow')\n")
    r = subprocess.run([kraftsman, "plan", "--snapshot", str(tmp_path / "snap"), "--out",
                        str(tmp_path / "plan"), "--goal", "rebalance"], capture_output=True,
                       text=True, timeout=300, env={"PYTHONPATH": str(stubs), "PATH": ""})
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == ("error: `kraftsman plan` needs pyarrow, which comes with the "
                                "'plan' extra: pip install 'kraftsman[plan]'")
    assert not (tmp_path / "plan").exists()


def test_quorum_describe_json_has_no_none_for_scripts(
        capsys: pytest.CaptureFixture[str], s: list[str]) -> None:
    code, out, _ = run(capsys, "quorum", "describe", "-o", "json", *s)
    doc = json.loads(out)
    # the brokers that are no voter fetch the metadata log as observers, as in Kafka
    assert code == 0 and len(doc["clusterId"]) == 22 and doc["currentObservers"] == [3]


def test_bad_input_reports_every_problem_of_a_file_at_once(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, s: list[str]) -> None:
    """Schema problems (a typo, a wrong type) and cluster problems (an unknown broker and
    topic) of one file in one run, each with the file name and the field; nothing applied."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(move(count=1).replace("maxConcurrentMoves: 2", "maxConcurentMoves: 2\n"
                                         "  throttleBytesPerSecond: fast") + """---
apiVersion: kraftsman.io/v1alpha1
kind: PartitionReassignment
metadata: {name: other}
spec:
  clusterRef: {name: demo}
  partitions:
    - {topic: orders, partition: 0, replicas: [3, 9]}
    - {topic: ghost, partition: 0, replicas: [1, 2]}
---
apiVersion: kraftsman.io/v1alpha1
kind: LeaderElection
metadata: {name: elect}
sepc: {clusterRef: {name: demo}, allTopicPartitions: true}
""")
    code, out, err = run(capsys, "apply", "-f", str(bad), *s)
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert all(line.startswith(f"error: {bad}: ") for line in lines), err
    assert any("PartitionReassignment/move: spec.maxConcurentMoves: unknown field; did you mean "
               "'maxConcurrentMoves'?" in line for line in lines), err
    assert any("PartitionReassignment/move: spec.throttleBytesPerSecond:" in ln for ln in lines)
    assert any("PartitionReassignment/other: spec.partitions[0].replicas: unknown broker id(s) "
               "[9]" in line for line in lines), err
    assert any("PartitionReassignment/other: spec.partitions[1].topic: topic 'ghost'" in line
               for line in lines), err
    assert any("LeaderElection/elect: sepc: unknown field; did you mean 'spec'?" in line
               for line in lines), err
    assert len(lines) == 5, err
    code, out, _ = run(capsys, "reassignments", "list", *s)
    assert out.strip() == "No partition reassignments found."


def test_a_big_plan_is_announced_while_it_parses(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, s: list[str]) -> None:
    import yaml

    assert yaml.__with_libyaml__  # the C loader is what parses it
    big = tmp_path / "big.yaml"
    big.write_text(move(count=12).replace("metadata: {name: move}", "metadata: {name: move}\n"
                                          + "# " + "x" * 1_100_000 + "\n"))
    code, _, err = run(capsys, "apply", "-f", str(big), "--no-wait", *s)
    assert code == 0 and f"parsing {big} (1.1 MB)..." in err


def test_verify_shows_what_moves_and_the_throttles_in_force(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, s: list[str]) -> None:
    f = tmp_path / "m.yaml"
    f.write_text(move().replace("maxConcurrentMoves: 2",
                                "maxConcurrentMoves: 2\n  throttleBytesPerSecond: 400000"))
    assert run(capsys, "apply", "-f", str(f), "--for", "3", *s)[0] == 0
    code, out, _ = run(capsys, "reassignments", "verify", *s)
    lines = out.splitlines()
    assert code == 0 and lines[0] == "Status of partition reassignment:"
    # adding replicas in Kafka's (hash-set) order
    assert sum("is still in progress (to 3,2: 2 has " in line for line in lines) == 2, out
    assert "Throttles in force:" in lines
    assert any(line.startswith("  broker 3: follower.replication.throttled.rate 400.0 KB/s")
               for line in lines), out
    assert any(line.startswith("  topic orders: follower.replication.throttled.replicas=")
               for line in lines), out
    placed = lines.index("Placed by kraftsman (its markers in __kraftsman_throttles):")
    assert lines[placed + 1:placed + 5] == [  # 0 and 1 give up replicas, 2 and 3 take them
        f"  broker {b}: rate 400.0 KB/s, 2 replica entries" for b in range(4)], out
    assert run(capsys, "apply", "-f", str(f), *s)[0] == 0
    code, out, _ = run(capsys, "reassignments", "verify", "-o", "json", *s)
    assert json.loads(out) == {"moving": [], "brokerThrottles": {}, "topicThrottles": {},
                               "placedByKraftsman": {}}
    code, out, _ = run(capsys, "reassignments", "verify", *s)
    assert "No partition reassignments in progress." in out and "No throttles in force." in out


def test_apply_saves_the_current_assignment_for_rollback(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, s: list[str]) -> None:
    f = tmp_path / "m.yaml"
    f.write_text(move(count=3))
    code, out, _ = run(capsys, "apply", "-f", str(f), *s)
    rollback = Path(s[1]) / "rollback" / "move.yaml"
    assert code == 0 and f"current assignment of the 3 moving partition(s) saved for rollback " \
                         f"in {rollback}" in out
    code, out, _ = run(capsys, "apply", "-f", str(rollback), *s)
    assert code == 0 and "PartitionReassignment/move-rollback completed: 3 moved" in out
    code, out, _ = run(capsys, "describe", "topics", "-o", "json", *s)
    assert [p["replicas"] for p in json.loads(out)][:3] == [[0, 1]] * 3


def test_describe_under_replicated_partitions(
        capsys: pytest.CaptureFixture[str], s: list[str]) -> None:
    code, out, _ = run(capsys, "describe", "topics", "--under-replicated-partitions", *s)
    assert code == 0 and out == ""
    assert run(capsys, "cluster", "fail-broker", "1", *s)[0] == 0
    assert run(capsys, "cluster", "advance", "60", *s)[0] == 0
    code, out, _ = run(capsys, "describe", "topics", "--under-replicated-partitions", *s)
    lines = out.splitlines()
    assert code == 0 and len(lines) == 12
    assert lines[0].startswith("\tTopic: orders\tPartition: 0\tLeader: 0\tReplicas: 0,1\tIsr: 0")
    assert [line.split("\t")[2] for line in lines] == [f"Partition: {i}" for i in range(12)]


def test_a_bad_lock_wait_is_named(capsys: pytest.CaptureFixture[str], s: list[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KRAFTSMAN_LOCK_WAIT", "soon")
    code, _, err = run(capsys, "describe", "cluster", *s)
    assert code == 2 and "KRAFTSMAN_LOCK_WAIT='soon': expected a number of seconds" in err


def test_describe_topics_sorts_by_topic_then_partition_number(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(CLUSTER.replace("    topics:\n", "    topics:\n      - {name: zeta, partitions: "
                                 "11, replicationFactor: 1}\n      - {name: alpha, partitions: "
                                 "2, replicationFactor: 1}\n"))
    state = ["--state-dir", str(tmp_path / "state")]
    assert run(capsys, "apply", "-f", str(f), *state)[0] == 0
    code, out, _ = run(capsys, "describe", "topics", *state)
    headers = [line.split("\t")[0] for line in out.splitlines() if line.startswith("Topic: ")]
    assert code == 0 and headers == ["Topic: alpha", "Topic: orders", "Topic: zeta"]
    code, out, _ = run(capsys, "describe", "topics", "-o", "json", *state)
    keys = [(p["topic"], p["partition"]) for p in json.loads(out)]
    assert keys == sorted(keys) and ("zeta", 10) in keys and keys[-1] == ("zeta", 10)
