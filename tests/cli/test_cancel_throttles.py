"""`kraftsman reassignments cancel` clears the throttles kraftsman placed, unless
--preserve-throttles — as ReassignPartitionsCommand's --cancel does (issue 11, row 6)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from controller_core.admin import THROTTLE_MARKER_TOPIC
from kraftsman.cli import main
from kraftsman.local_store import LocalStore
from tests.cli.test_cli import CLUSTER, MOVE, write
from tests.helpers import configs_in

THROTTLED = MOVE.replace("maxConcurrentMoves: 2",
                         "maxConcurrentMoves: 2\n  throttleBytesPerSecond: 500000")


def _throttles(state: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """Every config of kraftsman's on the cluster, and its markers."""
    store = LocalStore(state)
    c = store.open_cluster(store.pick_cluster(None))
    try:
        found = configs_in(c)
        if c.read_throttle_markers():
            found[("TOPIC", THROTTLE_MARKER_TOPIC)] = {"markers": c.read_throttle_markers()}
        return found
    finally:
        c.close()


@pytest.mark.parametrize("preserve", [False, True])
def test_reassignments_cancel_clears_throttles_unless_preserve_throttles(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, preserve: bool) -> None:
    state = tmp_path / "state"
    files = ["-f", write(tmp_path, "c.yaml", CLUSTER), "-f", write(tmp_path, "m.yaml", THROTTLED)]
    assert main(["apply", *files, "--state-dir", str(state), "--no-wait"]) == 0
    placed = _throttles(state)
    assert ("TOPIC", "orders") in placed and ("BROKER", "3") in placed
    assert ("TOPIC", THROTTLE_MARKER_TOPIC) in placed
    extra = ["--preserve-throttles"] if preserve else []
    assert main(["reassignments", "cancel", "--state-dir", str(state), *extra]) == 0
    assert "Successfully cancelled" in capsys.readouterr().out
    assert (_throttles(state) == placed) if preserve else (_throttles(state) == {})


def test_a_cancel_that_cannot_remove_the_markers_says_so_and_exits_1(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The throttles go, but the principal may not write kraftsman's marker topic (no WRITE
    on it): the moves are cancelled, the problem is printed and the exit code is 1 — a
    `kafka-reassign-partitions --cancel` that could not remove its throttles fails too."""
    from controller_core.wire.auth import AuthFile, Authorizer
    from tests.helpers import cluster
    from tests.serve.harness import served

    auth = Authorizer.from_file(AuthFile.model_validate({
        "users": [{"name": "admin", "password": "a"}, {"name": "ops", "password": "o"}],
        "acls": [{"principal": "User:admin", "operations": ["ALL"]},
                 {"principal": "User:ops", "operations": ["ALTER", "ALTER_CONFIGS", "READ"]}]}))

    def props(user: str, password: str) -> str:
        return write(tmp_path, f"{user}.properties", (
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=org."
            "apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{user}" password="{password}";\n'))

    with served(cluster(tmp_path / "c"), auth, time_scale=0) as s:
        target = ["--bootstrap-server", s.bootstrap, "--state-dir", str(tmp_path / "state")]
        plan = write(tmp_path, "m.yaml", THROTTLED
                     .replace("replicas: [3, 1]", "replicas: [3, 4, 5]")
                     .replace("replicas: [3, 2]", "replicas: [5, 4, 3]"))
        assert main(["apply", "-f", plan, "--no-wait", "--command-config",
                     props("admin", "a"), *target]) == 0
        assert s.call(lambda: s.cluster.read_throttle_markers())
        capsys.readouterr()
        rc = main(["reassignments", "cancel", "--command-config", props("ops", "o"), *target])
        out = capsys.readouterr().out
        assert rc == 1, out
        assert "Successfully cancelled partition reassignments for: orders-0, orders-1" in out
        assert "Could not remove the throttles kraftsman placed: Produce: not authorized on " \
               "topic __kraftsman_throttles" in out
        assert s.call(lambda: s.cluster.list_partition_reassignments()) == {}
        # the throttles themselves are gone; the markers wait for someone who may remove them
        assert s.call(lambda: {r: v for r, v in s.cluster.image.configs.items()
                               if r[1] != "__kraftsman_throttles"}) == {}


def test_a_rate_on_a_broker_fenced_at_the_end_is_owed_until_the_file_is_applied_again(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Broker 0 holds orders-0's data, is throttled, and dies mid-move; the move completes
    from broker 1. Its rate cannot be restored while it is fenced: `apply` says so, and
    applying the same file once it is back restores it."""
    state = tmp_path / "state"
    s = ["--state-dir", str(state)]
    files = ["-f", write(tmp_path, "c.yaml", CLUSTER), "-f", write(tmp_path, "m.yaml", THROTTLED)]
    assert main(["apply", *files, *s, "--no-wait"]) == 0
    assert ("BROKER", "0") in _throttles(state)
    assert main(["cluster", "fail-broker", "0", *s]) == 0
    capsys.readouterr()
    assert main(["apply", *files, *s]) == 0
    out = capsys.readouterr().out
    assert ("PartitionReassignment/move: the throttle rate on broker(s) [0] is restored once "
            "they are back: apply the same file again then") in out, out
    assert ("BROKER", "0") in _throttles(state)
    assert main(["apply", *files, *s, "-o", "json"]) == 0  # scripts read the same
    summary = {d["resource"]: d for d in json.loads(capsys.readouterr().out)}
    assert summary["PartitionReassignment/move"]["cleanupOwed"] == {
        "brokers": [0], "message": "the throttle rate on broker(s) [0] is restored once they "
                                   "are back"}
    assert main(["cluster", "restore-broker", "0", *s]) == 0
    capsys.readouterr()
    assert main(["apply", *files, *s, "-o", "json"]) == 0
    summary = {d["resource"]: d for d in json.loads(capsys.readouterr().out)}
    assert "cleanupOwed" not in summary["PartitionReassignment/move"]
    assert _throttles(state) == {}
