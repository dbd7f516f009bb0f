"""Data-driven transcripts (tests/raft/testdata/*.txt); RAFT_REWRITE=1 regenerates them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from transcript import run_script

FILES = sorted((Path(__file__).parent / "testdata").glob("*.txt"))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_transcript(path: Path) -> None:
    text = path.read_text()
    actual = run_script(text)
    if os.environ.get("RAFT_REWRITE"):
        path.write_text(actual)
        return
    assert actual == text, (
        f"{path.name} differs; if the change is intended, rerun with RAFT_REWRITE=1 and "
        f"review the diff")
