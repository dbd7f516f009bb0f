from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("raft")
    group.addoption("--raft-seed", type=int, default=None,
                    help="replay one seed of the randomised Raft simulation")

