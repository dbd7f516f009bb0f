"""Options shared by every test directory: ``--soak`` runs the long tests (marked ``slow``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.real.fixtures import real_kafka, real_kafka_session  # noqa: F401 (fixtures)


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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Iterator[None]:
    """Keep each phase's report on the item: fixtures that hold a shared server (the real
    Kafka) attach its logs when the test itself failed."""
    outcome = yield
    setattr(item, f"rep_{call.when}", outcome.get_result())
