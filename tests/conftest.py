"""Options shared by every test directory: ``--soak`` runs the long tests (marked ``slow``)."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", default=False,
                     help="also run the long tests (marked slow): Raft soaks, long end-to-end "
                          "variants")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="long test: enable with --soak")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
