"""The CLI over a metadata quorum with KIP-630 snapshots: restarts load them, damage is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller_core.raft.snapshot import snapshot_files
from tests.cli.test_cli import CLUSTER, run, write

SNAPSHOTTING = CLUSTER.replace("replicationBytesPerSecond: 1000000",
                               "replicationBytesPerSecond: 1000000\n    snapshotEveryRecords: 5")


def test_commands_reopen_from_the_quorum_snapshot_and_name_a_damaged_one(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    s = ["--state-dir", str(tmp_path / "state")]
    assert run(capsys, "apply", "-f", write(tmp_path, "c.yaml", SNAPSHOTTING), *s)[0] == 0
    assert run(capsys, "cluster", "fail-broker", "3", *s)[0] == 0
    assert run(capsys, "cluster", "advance", "20", *s)[0] == 0
    quorum = tmp_path / "state" / "clusters" / "demo" / "quorum"
    files = [f for d in sorted(quorum.glob("node-*")) for f in snapshot_files(d)]
    assert files, "the quorum snapshotted with the metadata"
    assert run(capsys, "cluster", "advance", "1", *s)[0] == 0  # reopened from snapshot + tail
    (_, path) = files[0]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    # a read starts no controller, so it does not read the quorum's files ...
    assert run(capsys, "describe", "cluster", *s)[0] == 0
    # ... the next command that starts the controllers names the damage
    code, _, err = run(capsys, "cluster", "advance", "1", *s)
    assert code == 2 and "cluster 'demo'" in err and str(path) in err
    assert "Traceback" not in err
