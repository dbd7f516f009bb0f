"""The `kraftsman` CLI end to end: apply, the Kafka-tool-like views, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kraftsman.cli import main
from tests.helpers import cluster_yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

CLUSTER = cluster_yaml("{name: orders, partitions: 2, replicationFactor: 2, "
                       "sizeBytesPerPartition: 20000000, assignment: [[0, 1], [1, 2]]}")

MOVE = """
apiVersion: kraftsman.io/v1alpha1
kind: PartitionReassignment
metadata: {name: move}
spec:
  clusterRef: {name: demo}
  maxConcurrentMoves: 2
  partitions:
    - {topic: orders, partition: 0, replicas: [3, 1]}
    - {topic: orders, partition: 1, replicas: [3, 2]}
"""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_the_examples_run_end_to_end(capsys: pytest.CaptureFixture[str], state: Path) -> None:
    code, out, err = run(capsys, "apply", "-f", str(EXAMPLES), "--state-dir", str(state))
    assert code == 0, err
    assert "KafkaCluster/demo created" in out
    assert "PartitionReassignment/spread-orders completed: 7 moved" in out
    assert "leader election" in out or "Valid replica already elected" in out
    code, out, _ = run(capsys, "reassignments", "list", "--state-dir", str(state))
    assert code == 0 and out.strip() == "No partition reassignments found."
    code, out, _ = run(capsys, "describe", "topics", "--topic", "orders", "-o", "json",
                       "--state-dir", str(state))
    parts = json.loads(out)
    assert next(p["replicas"] for p in parts) == [3, 1, 2]
    assert all(p["leader"] == p["replicas"][0] for p in parts)  # electPreferredLeaders


def test_second_apply_cancels_what_the_first_left_in_flight(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, state: Path) -> None:
    files = ["-f", write(tmp_path, "c.yaml", CLUSTER), "-f", write(tmp_path, "m.yaml", MOVE)]
    code, out, _ = run(capsys, "apply", *files, "--state-dir", str(state), "--no-wait")
    assert code == 0 and "is running" in out
    code, out, _ = run(capsys, "reassignments", "list", "--state-dir", str(state))
    assert "orders-0: replicas: 3,1,0. adding: 3. removing: 0." in out
    code, out, _ = run(capsys, "reassignments", "status", "--state-dir", str(state))
    assert "behind: " in out and "in sync" in out
    cancel = MOVE.replace("maxConcurrentMoves: 2", "maxConcurrentMoves: 2\n  cancel: true")
    code, out, _ = run(capsys, "apply", "-f", write(tmp_path, "m.yaml", cancel),
                       "--state-dir", str(state))
    assert code == 0 and "PartitionReassignment/move cancelled" in out
    code, out, _ = run(capsys, "describe", "topics", "-o", "json", "--state-dir", str(state))
    # rolled back to the original sets (KIP-455: the order may differ)
    assert [set(p["replicas"]) for p in json.loads(out)] == [{0, 1}, {1, 2}]


def test_changed_target_retargets_and_for_limits_the_run(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, state: Path) -> None:
    files = ["-f", write(tmp_path, "c.yaml", CLUSTER), "-f", write(tmp_path, "m.yaml", MOVE)]
    code, out, _ = run(capsys, "apply", *files, "--state-dir", str(state), "--for", "5")
    assert code == 0 and "is running" in out
    changed = MOVE.replace("replicas: [3, 2]", "replicas: [2, 0]")
    code, out, _ = run(capsys, "apply", "-f", write(tmp_path, "m.yaml", changed),
                       "--state-dir", str(state), "-o", "json")
    assert code == 0
    summary = json.loads(out)
    assert summary[0]["phase"] == "Completed" and summary[0]["done"] == 2
    code, out, _ = run(capsys, "describe", "topics", "-o", "json", "--state-dir", str(state))
    assert [p["replicas"] for p in json.loads(out)] == [[3, 1], [2, 0]]


def test_dry_run_moves_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                               state: Path) -> None:
    dry = MOVE.replace("maxConcurrentMoves: 2", "maxConcurrentMoves: 2\n  dryRun: true\n"
                       "  throttleBytesPerSecond: 1000000")
    code, out, _ = run(capsys, "apply", "-f", write(tmp_path, "c.yaml", CLUSTER), "-f",
                       write(tmp_path, "m.yaml", dry), "--state-dir", str(state))
    assert code == 0
    assert "(dry run): 2 partitions would move" in out and "40.0 MB to copy" in out
    assert "estimated 0:40 (1.0 MB/s, 2 moves at once)" in out
    code, out, _ = run(capsys, "reassignments", "list", "--state-dir", str(state))
    assert "No partition reassignments found." in out


BAD = {
    "malformed YAML": ("kind: [unclosed", "malformed YAML at line 1"),
    "unknown kind": ("apiVersion: kraftsman.io/v1alpha1\nkind: KafkaTopic\nmetadata: {name: x}\n"
                     "spec: {}\n", "unknown kind 'KafkaTopic'"),
    "wrong type": (MOVE.replace("maxConcurrentMoves: 2", "maxConcurrentMoves: lots"),
                   "PartitionReassignment/move: spec.maxConcurrentMoves: Input should be a valid "
                   "integer"),
    "unknown broker": (MOVE.replace("[3, 1]", "[9, 1]"),
                       "PartitionReassignment/move: spec.partitions[0].replicas: unknown broker "
                       "id(s) [9]"),
    "empty replicas": (MOVE.replace("[3, 1]", "[]"), "spec.partitions[0].replicas"),
    "duplicate replicas": (MOVE.replace("[3, 1]", "[1, 1]"),
                           "spec.partitions[0]: replicas [1, 1] names a broker twice"),
    "unknown topic": (MOVE.replace("topic: orders, partition: 1", "topic: audit, partition: 1"),
                      "spec.partitions[1].topic: topic 'audit' does not exist in cluster 'demo'"),
    "unknown partition": (MOVE.replace("partition: 1,", "partition: 7,"),
                          "spec.partitions[1].partition: orders has partitions 0..1, not 7"),
    "unknown cluster": (MOVE.replace("name: demo", "name: prod"),
                        "spec.clusterRef.name: cluster 'prod' not found"),
    "missing topic in election": (
        "apiVersion: kraftsman.io/v1alpha1\nkind: LeaderElection\nmetadata: {name: e}\n"
        "spec: {clusterRef: {name: demo}, topics: [ghost]}\n",
        "LeaderElection/e: spec.topics[0]: topic 'ghost' does not exist"),
    "real cluster": (CLUSTER.replace("embedded:", "bootstrapServers: kafka:9092\n  x:"),
                     "spec"),
    "operator-only kind": (
        "apiVersion: kraftsman.io/v1alpha1\nkind: KafkaRebalance\nmetadata: {name: r}\n"
        "spec: {clusterRef: {name: demo}}\n",
        "KafkaRebalance/r: KafkaRebalance is reconciled by the operator only (its planner runs "
        "as a Kubernetes Job); on the command line run `kraftsman snapshot` and `kraftsman "
        "plan`"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_exits_2_names_the_field_and_applies_nothing(
        case: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, state: Path) -> None:
    text, expected = BAD[case]
    docs = text if "kind: KafkaCluster" in text else CLUSTER + "\n---\n" + text
    code, _out, err = run(capsys, "apply", "-f", write(tmp_path, "bad.yaml", docs),
                         "--state-dir", str(state))
    assert code == 2
    assert expected in err, err
    assert "Traceback" not in err
    assert not (state / "clusters").exists()  # nothing applied, not even the cluster


@pytest.mark.parametrize(("throttle", "says"), [
    (-5, "Input should be greater than or equal to 1"),
    (0, "Input should be greater than or equal to 1"),
    (2**63, "Input should be less than or equal to 9223372036854775807"),
])
def test_a_throttle_the_brokers_would_refuse_is_one_line_and_moves_nothing(
        throttle: int, says: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        state: Path) -> None:
    """A broker refuses a rate that is not a Kafka LONG >= 0 only once the executor sets it —
    after the move started. So it is refused with the resource, before anything moves."""
    s = ["--state-dir", str(state)]
    assert run(capsys, "apply", "-f", write(tmp_path, "c.yaml", CLUSTER), *s)[0] == 0
    bad = MOVE.replace("  maxConcurrentMoves: 2\n",
                       f"  maxConcurrentMoves: 2\n  throttleBytesPerSecond: {throttle}\n")
    code, out, err = run(capsys, "apply", "-f", write(tmp_path, "m.yaml", bad), *s)
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"error: {tmp_path / 'm.yaml'}: PartitionReassignment/move: "
        f"spec.throttleBytesPerSecond: {says}; give a whole number of bytes per second from 1 "
        "to 9223372036854775807, or leave the field out for no throttle"]
    code, out, _ = run(capsys, "reassignments", "list", *s)
    assert (code, out.strip()) == (0, "No partition reassignments found.")
    assert not (state / "rollback").exists()


def test_every_problem_is_reported_at_once(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                           state: Path) -> None:
    bad = MOVE.replace("[3, 1]", "[9, 1]").replace("partition: 1,", "partition: 7,")
    code, _, err = run(capsys, "apply", "-f", write(tmp_path, "b.yaml", CLUSTER + "---\n" + bad),
                       "--state-dir", str(state))
    assert code == 2 and len(err.strip().splitlines()) == 2


def test_schema_and_cluster_problems_of_one_resource_come_together(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, state: Path) -> None:
    """A broker listed twice (the schema's problem) used to hide an unknown topic and an
    unknown broker in the same resource until the next run."""
    bad = (MOVE.split("  partitions:")[0] + "  partitions:\n"
           "    - {topic: orders, partition: 0, replicas: [1, 1]}\n"
           "    - {topic: nope, partition: 0, replicas: [0, 1]}\n"
           "    - {topic: orders, partition: 1, replicas: [0, 9]}\n")
    code, _, err = run(capsys, "apply", "-f", write(tmp_path, "b.yaml", CLUSTER + "---\n" + bad),
                       "--state-dir", str(state))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 3, err
    assert "spec.partitions[0]: replicas [1, 1] names a broker twice" in lines[0]
    assert "spec.partitions[1].topic: topic 'nope' does not exist" in lines[1]
    assert "spec.partitions[2].replicas: unknown broker id(s) [9]" in lines[2]


def test_missing_file_and_empty_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "apply", "-f", str(tmp_path / "nope.yaml"))
    assert code == 2 and "cannot read" in err
    code, _, err = run(capsys, "apply", "-f", write(tmp_path, "e.yaml", "---\n"))
    assert code == 2 and "no resources" in err


def test_views_without_a_cluster_say_what_to_do(capsys: pytest.CaptureFixture[str],
                                                state: Path) -> None:
    code, _, err = run(capsys, "reassignments", "list", "--state-dir", str(state))
    assert code == 2 and "kraftsman apply" in err


def test_elect_cancel_and_fault_injection(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                          state: Path) -> None:
    s = ["--state-dir", str(state)]
    assert run(capsys, "apply", "-f", write(tmp_path, "c.yaml", CLUSTER), *s)[0] == 0
    code, out, _ = run(capsys, "cluster", "fail-broker", "0", *s)
    assert code == 0
    run(capsys, "cluster", "advance", "10", *s)
    code, out, _ = run(capsys, "describe", "topics", *s)
    assert "Partition: 0\tLeader: 1" in out
    run(capsys, "cluster", "restore-broker", "0", *s)
    run(capsys, "cluster", "advance", "30", *s)
    code, out, _ = run(capsys, "elect", "--all-topic-partitions", *s)
    assert code == 0
    assert "Successfully completed leader election (PREFERRED) for partitions orders-0" in out
    # balanced now: like kafka-leader-election --all-topic-partitions, nothing is printed
    assert run(capsys, "elect", "--all-topic-partitions", *s)[:2] == (0, "")
    code, out, _ = run(capsys, "elect", "--topic", "ghost", "-o", "json", *s)
    assert code == 1 and json.loads(out)["unknownTopics"] == ["ghost"]
    code, out, _ = run(capsys, "reassignments", "cancel", *s)
    assert code == 0 and out.strip() == "No partition reassignments found."
    code, out, _ = run(capsys, "reassignments", "cancel", "--partition", "orders:0", *s)
    assert code == 1 and "NO_REASSIGNMENT_IN_PROGRESS" in out
    code, _, err = run(capsys, "reassignments", "cancel", "--partition", "orders", *s)
    assert code == 2 and "TOPIC:PARTITION" in err
    code, _, err = run(capsys, "cluster", "fail-broker", "42", *s)
    assert code == 2 and "unknown broker 42" in err
    code, out, _ = run(capsys, "describe", "cluster", "-o", "json", *s)
    assert [b["id"] for b in json.loads(out)["brokers"]] == [0, 1, 2, 3]


def test_console_script_runs_as_a_process(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kraftsman.cli", "apply", "-f", str(EXAMPLES / "00-cluster.yaml"),
         "--state-dir", str(tmp_path / "s")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "KafkaCluster/demo created: 6 brokers" in proc.stdout


QUORUM = """
apiVersion: kraftsman.io/v1alpha1
kind: KafkaQuorum
metadata: {name: q}
spec: {clusterRef: {name: demo}, voters: [0, 1, 3]}
"""


def test_quorum_describe_alter_and_kafkaquorum(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path, state: Path) -> None:
    s = ["--state-dir", str(state)]
    c3 = CLUSTER.replace("brokers: [", "controllers: [0, 1, 2]\n    brokers: [")
    assert run(capsys, "apply", "-f", write(tmp_path, "c.yaml", c3), *s)[0] == 0
    code, out, _ = run(capsys, "quorum", "describe", *s)
    assert code == 0 and "LeaderEpoch:" in out
    rows = dict(line.split(":", 1) for line in out.splitlines())
    assert [k for k in rows] == ["ClusterId", "LeaderId", "LeaderEpoch", "HighWatermark",
                                 "MaxFollowerLag", "MaxFollowerLagTimeMs", "CurrentVoters",
                                 "CurrentObservers"]  # as MetadataQuorumCommand prints them
    # broker 3 fetches the metadata log as an observer, as a Kafka broker does
    assert rows["CurrentVoters"].strip() == "[0,1,2]" and rows["CurrentObservers"].strip() == "[3]"
    assert "None" not in out
    code, out, _ = run(capsys, "quorum", "describe", "--replication", *s)
    assert out.splitlines()[0].split() == ["ReplicaId", "LogEndOffset", "Lag", "LagTimeMs",
                                           "Status", "IsReassignTarget"]
    code, out, _ = run(capsys, "apply", "-f", write(tmp_path, "q.yaml", QUORUM), *s, "-o",
                       "json")
    assert code == 0
    summary = json.loads(out)[0]
    assert summary["phase"] == "Ready" and summary["currentVoters"] == [0, 1, 3]
    code, out, _ = run(capsys, "quorum", "alter", "--voters", "0,1,2", *s)
    assert code == 0 and "removing voter 3" in out and "CurrentVoters:          [0,1,2]" in out
    code, _, err = run(capsys, "quorum", "alter", "--voters", "0,1,9", *s)
    assert code == 2 and "unknown node id(s) [9]" in err
    code, _, err = run(capsys, "quorum", "alter", "--voters", "zero", *s)
    assert code == 2 and "comma-separated node ids" in err
    code, _, err = run(capsys, "quorum", "alter", "--voters", "0,1,\u00b2", *s)  # '²'
    assert code == 2 and "comma-separated node ids" in err and "Traceback" not in err
    run(capsys, "cluster", "fail-controller", "3", *s)
    run(capsys, "cluster", "fail-controller", "2", *s)
    code, _, err = run(capsys, "quorum", "alter", "--voters", "2,3,1", *s)
    assert code == 2 and "majority" in err
    code, out, _ = run(capsys, "quorum", "describe", "-o", "json", *s)
    assert json.loads(out)["currentVoters"] == [0, 1, 2]  # nothing changed
    bad = QUORUM.replace("[0, 1, 3]", "[0, 1, 77]")
    code, _, err = run(capsys, "apply", "-f", write(tmp_path, "b.yaml", bad), *s)
    assert code == 2 and "KafkaQuorum/q: spec.voters: unknown node id(s) [77]" in err


def test_controller_fault_injection(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                    state: Path) -> None:
    s = ["--state-dir", str(state)]
    c3 = CLUSTER.replace("brokers: [", "controllers: [0, 1, 2]\n    brokers: [")
    assert run(capsys, "apply", "-f", write(tmp_path, "c.yaml", c3), *s)[0] == 0
    code, out, _ = run(capsys, "quorum", "describe", "-o", "json", *s)
    leader = json.loads(out)["leaderId"]
    assert run(capsys, "cluster", "fail-controller", str(leader), *s)[0] == 0
    code, _, err = run(capsys, "cluster", "fail-controller", "7", *s)
    assert code == 2 and "not a controller" in err
    code, _, err = run(capsys, "cluster", "restore-controller", str((leader + 1) % 3), *s)
    assert code == 2 and "already running" in err


@pytest.mark.parametrize(("argv", "module", "extra"), [
    (["operator", "run"], "kopf", "operator"),
    (["snapshot"], "pyarrow", "plan"),
])
def test_a_missing_optional_extra_is_named_not_a_traceback(
        argv: list[str], module: str, extra: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    state = ["--state-dir", str(tmp_path / "s")]
    assert run(capsys, "apply", "-f", write(tmp_path, "c.yaml", CLUSTER), *state)[0] == 0
    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    for name in [m for m in sys.modules if m.startswith(module + ".")]:
        monkeypatch.setitem(sys.modules, name, None)
    argv = [*argv, *state, "--out", str(tmp_path / "snap")] if argv[0] == "snapshot" else argv
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert f"pip install 'kraftsman[{extra}]'" in err and "Traceback" not in err


def test_error_paths_of_a_cluster_already_there(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path, state: Path) -> None:
    s = ["--state-dir", str(state)]
    assert run(capsys, "apply", "-f", write(tmp_path, "c.yaml", CLUSTER), *s)[0] == 0
    code, out, _ = run(capsys, "reassignments", "status", *s)
    assert code == 0 and out.strip() == "No partition reassignments found."
    code, _, err = run(capsys, "cluster", "advance", "-5", *s)
    assert code == 2 and "must not be negative" in err
    # a spec that drops a broker or reshapes a topic is refused, naming the field
    fewer = CLUSTER.replace(", {id: 3, rack: a}]", "]")
    code, _, err = run(capsys, "apply", "-f", write(tmp_path, "c2.yaml", fewer), *s)
    assert code == 2 and "spec.embedded.brokers: broker(s) [3] were removed" in err
    reshaped = CLUSTER.replace("partitions: 2,", "partitions: 4,").replace(
        "assignment: [[0, 1], [1, 2]]", "assignment: [[0, 1], [1, 2], [2, 3], [3, 0]]")
    code, _, err = run(capsys, "apply", "-f", write(tmp_path, "c3.yaml", reshaped), *s)
    assert code == 2 and "spec.embedded.topics[orders]" in err
    # a second plan overlapping one in flight is refused unless additional
    assert run(capsys, "apply", "-f", write(tmp_path, "m.yaml", MOVE), *s, "--no-wait")[0] == 0
    other = MOVE.replace("name: move", "name: other").replace("[3, 1]", "[2, 1]")
    code, _, err = run(capsys, "apply", "-f", write(tmp_path, "o.yaml", other), *s)
    assert code == 2 and "REASSIGNMENT_IN_PROGRESS" in err and "additional" in err
    extra = other.replace("maxConcurrentMoves: 2", "maxConcurrentMoves: 2\n  additional: true")
    assert run(capsys, "apply", "-f", write(tmp_path, "o.yaml", extra), *s)[0] == 0


def test_a_corrupt_state_directory_is_a_clear_error(capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path, state: Path) -> None:
    s = ["--state-dir", str(state)]
    assert run(capsys, "apply", "-f", write(tmp_path, "c.yaml", CLUSTER), *s)[0] == 0
    assert run(capsys, "cluster", "fail-broker", "3", *s)[0] == 0
    assert run(capsys, "cluster", "advance", "20", *s)[0] == 0  # fencing: a second batch
    seg = sorted((state / "clusters" / "demo" / "metadata").glob("log-*.log"))[-1]
    data = bytearray(seg.read_bytes())
    data[12] ^= 0xFF  # damage the first batch, which is followed by more
    seg.write_bytes(bytes(data))
    code, _, err = run(capsys, "describe", "cluster", *s)
    assert code == 2 and "cluster 'demo'" in err and str(seg) in err and "offset 0" in err
    assert "Traceback" not in err


def test_apply_says_once_when_its_moves_copy_nothing(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, state: Path) -> None:
    """Broker 3 dies as its copies start: `apply` names the stalled moves and their broker
    after spec.stalledAfterSeconds, once; back up, the next run completes without a word of
    it (test_apply_says_when_stalled_moves_copy_again has it back within one run)."""
    s = ["--state-dir", str(state)]
    assert run(capsys, "apply", "-f", write(tmp_path, "c.yaml", CLUSTER), *s)[0] == 0
    watched = MOVE.replace("maxConcurrentMoves: 2",
                           "maxConcurrentMoves: 2\n  stalledAfterSeconds: 5")
    move = write(tmp_path, "m.yaml", watched)
    assert run(capsys, "apply", "-f", move, *s, "--no-wait")[0] == 0
    assert run(capsys, "cluster", "fail-broker", "3", *s)[0] == 0
    code, out, err = run(capsys, "apply", "-f", move, *s, "--for", "12")
    text = out + err
    assert code == 0, text
    assert text.count("stalled — no byte progress: orders-0 (adding on broker 3; ") == 1, text
    assert "orders-1 (adding on broker 3; " in text and "check those brokers" in text
    assert "copy again" not in text
    assert run(capsys, "cluster", "restore-broker", "3", *s)[0] == 0
    code, out, err = run(capsys, "apply", "-f", move, *s)
    assert code == 0 and "stalled" not in out + err, out + err


def test_apply_says_when_stalled_moves_copy_again(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, state: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Broker 3 dies as its copies start and restarts 15 simulated seconds into the run:
    `apply` says once that the moves stalled, once that they copy again, and completes."""
    from controller_core.embedded.cluster import EmbeddedCluster

    s = ["--state-dir", str(state)]
    assert run(capsys, "apply", "-f", write(tmp_path, "c.yaml", CLUSTER), *s)[0] == 0
    move = write(tmp_path, "m.yaml", MOVE.replace(
        "maxConcurrentMoves: 2", "maxConcurrentMoves: 2\n  stalledAfterSeconds: 5"))
    assert run(capsys, "apply", "-f", move, *s, "--no-wait")[0] == 0
    assert run(capsys, "cluster", "fail-broker", "3", *s)[0] == 0
    advance = EmbeddedCluster.advance
    restart_at: float | None = None  # 15 s after the run's first step
    restarted = False

    def advance_then_restart(cluster: EmbeddedCluster, seconds: float) -> None:
        nonlocal restart_at, restarted
        if restart_at is None:
            restart_at = cluster.now + 15
        advance(cluster, seconds)
        if not restarted and cluster.now >= restart_at:
            restarted = True
            cluster.restore_broker(3)

    monkeypatch.setattr(EmbeddedCluster, "advance", advance_then_restart)
    code, out, err = run(capsys, "apply", "-f", move, *s, "--for", "120")
    text = out + err
    assert code == 0, text
    stalled = text.index("stalled — no byte progress: orders-0 (adding on broker 3; ")
    again = text.index("the stalled moves copy again or have ended")
    assert stalled < again and text.count("copy again") == 1, text
    assert restarted and "Completed" in text[again:], text
