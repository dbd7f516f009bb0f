"""`kraftsman reassignments cancel` clears the throttles kraftsman placed, unless
--preserve-throttles — as ReassignPartitionsCommand's --cancel does (issue 11, row 6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraftsman.cli import main
from kraftsman.local_store import LocalStore
from tests.cli.test_cli import CLUSTER, MOVE, write

THROTTLED = MOVE.replace("maxConcurrentMoves: 2",
                         "maxConcurrentMoves: 2\n  throttleBytesPerSecond: 500000")


def _throttles(state: Path) -> dict[tuple[str, str], dict[str, str]]:
    store = LocalStore(state)
    c = store.open_cluster(store.pick_cluster(None))
    try:
        res = [("BROKER", str(b)) for b in range(4)] + [("TOPIC", "orders")]
        return {r: v for r, v in c.describe_configs(res).items() if v}
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
    extra = ["--preserve-throttles"] if preserve else []
    assert main(["reassignments", "cancel", "--state-dir", str(state), *extra]) == 0
    assert "Successfully cancelled" in capsys.readouterr().out
    assert (_throttles(state) == placed) if preserve else (_throttles(state) == {})
