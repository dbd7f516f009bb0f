from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("raft")
    names = {opt for o in parser._anonymous.options for opt in o.names()}
    if "--soak" not in names:
        group.addoption("--soak", action="store_true", default=False,
                        help="run the long randomised Raft soak (tests marked slow)")
    group.addoption("--raft-seed", type=int, default=None,
                    help="replay one seed of the randomised Raft simulation")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="soak test: enable with --soak")
    for item in items:
        if "slow" in item.keywords and "tests/raft" in str(item.fspath):
            item.add_marker(skip)
