"""Removing a disk from the CLI, end to end on an embedded cluster whose brokers have two
log directories: `kraftsman snapshot` records the directories, `kraftsman plan --goal
remove-disks` moves every replica of the named one into the broker's other directory, and
`kraftsman apply` of that plan copies them there (AlterReplicaLogDirs), after which the
directory holds nothing and no throttle is left."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kraftsman.cli import main

DIRS = "logDirs: [{path: /data/BROKER/a, capacityBytes: 1000000000}, " \
       "{path: /data/BROKER/b, capacityBytes: 1000000000}]"
CLUSTER = "\n".join([
    "apiVersion: kraftsman.io/v1alpha1", "kind: KafkaCluster", "metadata: {name: demo}",
    "spec:", "  embedded:", "    brokers:",
    *(f"    - {{id: {b}, rack: {'abca'[b]}, {DIRS.replace('BROKER', str(b))}}}"
      for b in range(4)),
    "    replicationBytesPerSecond: 1000000", "    topics:",
    "    - {name: orders, partitions: 8, replicationFactor: 2, sizeBytesPerPartition: 1000000}",
]) + "\n"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_snapshot_plan_and_apply_empty_a_log_directory(capsys: pytest.CaptureFixture[str],
                                                       tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    (tmp_path / "c.yaml").write_text(CLUSTER)
    code, _, err = run(capsys, "apply", "-f", str(tmp_path / "c.yaml"), "--state-dir", state)
    assert code == 0, err
    code, _, err = run(capsys, "snapshot", "--state-dir", state, "--out",
                       str(tmp_path / "snap"))
    assert code == 0, err
    assert (tmp_path / "snap" / "log_dirs.parquet").exists()
    code, out, err = run(capsys, "plan", "--snapshot", str(tmp_path / "snap"), "--goal",
                         "remove-disks", "0:/data/0/a", "--engine", "driver", "--throttle",
                         "500000", "--log-dir-throttle", "300000", "--out",
                         str(tmp_path / "plan"))
    assert code == 0, err
    steps = sorted((tmp_path / "plan" / "reassignments").glob("*.yaml"))
    assert steps, out
    text = "".join(p.read_text() for p in steps)
    assert "/data/0/b" in text and "log_dirs" in text
    assert "logDirThrottleBytesPerSecond: 300000" in text
    # the estimate counts the copies between directories at their throttle (before: 0 s)
    report = json.loads((tmp_path / "plan" / "report.json").read_text())["summary"]
    # one copy into broker 0's other directory at 300 kB/s (report.json rounds to 0.1 s)
    assert report["bytesToMoveBetweenDirs"] > 0, report
    assert report["estimatedSeconds"] == pytest.approx(
        report["bytesToMoveBetweenDirs"] / 300_000, abs=0.05), report
    args = [a for p in steps for a in ("-f", str(p))]
    code, out, err = run(capsys, "apply", *args, "--state-dir", state, "-o", "json")
    assert code == 0, err + out
    summaries = json.loads(out)
    assert all(s["phase"] == "Completed" for s in summaries), summaries
    code, out, err = run(capsys, "describe", "log-dirs", "--broker", "0", "-o", "json",
                         "--state-dir", state)
    assert code == 0, err
    held = {d["path"]: [r["future"] for r in d["replicas"]] for d in json.loads(out)}
    assert held["/data/0/a"] == [] and held["/data/0/b"] and not any(held["/data/0/b"]), held
    code, out, _ = run(capsys, "describe", "log-dirs", "--broker", "0", "--state-dir", state)
    assert "broker 0  /data/0/a  (1,000,000,000 of 1,000,000,000 bytes free)" in out, out
    code, _, err = run(capsys, "describe", "log-dirs", "--broker", "9", "--state-dir", state)
    assert code == 2 and "--broker 9: no such broker; the cluster has [0, 1, 2, 3]" in err


def test_a_log_dir_throttle_of_zero_is_refused(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    code, _, err = run(capsys, "plan", "--snapshot", str(tmp_path / "none"), "--goal",
                       "rebalance", "--log-dir-throttle", "0")
    assert code == 2
    assert "--log-dir-throttle 0: give a whole number of bytes per second from 1 to " \
           "9223372036854775807, or leave it out for --throttle" in err


def test_only_resources_that_copy_between_directories_carry_the_log_dir_throttle() -> None:
    from controller_core.planning.render import RenderOptions, render
    from controller_core.planning.result import PartitionMove
    between = PartitionMove("orders", 0, (0, 1), (0, 1), 10, 0, ("/a", "/a"), ("/b", "/a"))
    network = PartitionMove("orders", 1, (0, 1), (2, 1), 10, 0, ("/a", "/a"), ("/a", "/a"))
    opts = RenderOptions(cluster="demo", goal="rebalance", max_partitions=1,
                         log_dir_throttle_bytes_per_second=300_000)
    first, second = render([between, network], opts)
    texts = {r.moves[0].partition: r.text for r in (first, second)}
    assert "logDirThrottleBytesPerSecond: 300000" in texts[0]
    assert "logDirThrottleBytesPerSecond" not in texts[1]
    throttles = {r.moves[0].partition: r.log_dir_throttle_bytes_per_second for r in (first, second)}
    assert throttles == {0: 300_000, 1: None}  # what the plan's duration estimate reads
