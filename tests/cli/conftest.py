from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    names = {opt for o in parser._anonymous.options for opt in o.names()}
    if "--soak" not in names:
        parser.addoption("--soak", action="store_true", default=False,
                         help="also run the long tests (marked slow)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="long end-to-end variant: enable with --soak")
    for item in items:
        if "slow" in item.keywords and "tests/cli" in str(item.fspath):
            item.add_marker(skip)
