"""Options shared by every test directory: ``--soak`` runs the long tests (marked ``slow``);
the tests of a real server share one xdist worker (``real_server_group``)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.real.fixtures import real_kafka, real_kafka_session  # noqa: F401 (fixtures)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", default=False,
                     help="also run the long tests (marked slow): Raft soaks, long end-to-end "
                          "variants")


# The session-scoped real servers, each with the xdist group of the tests that use it. Under
# xdist (addopts: two workers, --dist loadgroup) a session fixture is per worker: without the
# groups both workers would start a 9-JVM Kafka cluster and an API server. A test that uses
# both servers goes in the first group that matches: the API server (about 10 s to start) then
# starts in the Kafka worker as well, which is cheaper than a second Kafka cluster.
REAL_SERVER_GROUPS = (("real_kafka_session", "real-kafka"), ("real_server", "real-apiserver"))
# xdist's loadgroup learns a test's group from a suffix its worker appends to the test's id
# (`@group`), which pytest 9.2's structured ids silently drop (pytest-xdist issue 1386): every
# test would be scheduled alone. So the workers write the groups to a file that the
# controller's scheduler (FixtureGroupScheduling) reads; the marker stays for xdist versions
# that fix it.
_GROUPS_DIR = "kraftsman_xdist_groups"
_groups_dir_key = pytest.StashKey[Path]()


def real_server_group(item: pytest.Item) -> str | None:
    """The xdist group of a test by the fixtures it uses (directly or through other
    fixtures), so a new test of a real server is grouped without a marker of its own."""
    used = getattr(item, "fixturenames", ())
    return next((group for fixture, group in REAL_SERVER_GROUPS if fixture in used), None)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups = {}
    for item in items:
        group = real_server_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
            groups[item.nodeid] = group
    workerinput = getattr(config, "workerinput", None)  # set in an xdist worker only
    if workerinput is not None and _GROUPS_DIR in workerinput:
        out = Path(workerinput[_GROUPS_DIR]) / f"{workerinput['workerid']}.json"
        out.write_text(json.dumps(groups))  # before the worker reports its collection
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="long test: enable with --soak")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config, "workerinput", None) is None and config.pluginmanager.has_plugin(
            "xdist") and config.getoption("dist", "no") == "loadgroup":
        config.stash[_groups_dir_key] = Path(tempfile.mkdtemp(prefix="kraftsman-xdist-"))


def pytest_unconfigure(config: pytest.Config) -> None:
    directory = config.stash.get(_groups_dir_key, None)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """(xdist, in the controller) tells each worker where to write its groups."""
    directory = node.config.stash.get(_groups_dir_key, None)
    if directory is not None:
        node.workerinput[_GROUPS_DIR] = str(directory)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    directory = config.stash.get(_groups_dir_key, None)
    if directory is None:
        return None
    from xdist.scheduler import LoadGroupScheduling

    class FixtureGroupScheduling(LoadGroupScheduling):  # type: ignore[misc]
        """loadgroup, with the groups the workers wrote (read once every worker has
        reported its collection, which is when the first test is scheduled)."""

        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                written = sorted(directory.glob("*.json"))
                if len(written) < len(self.nodes):
                    raise RuntimeError(f"{len(written)} of {len(self.nodes)} xdist workers "
                                       f"wrote their test groups in {directory}")
                self.groups = {}
                for path in written:
                    self.groups.update(json.loads(path.read_text()))
            group = self.groups.get(nodeid)
            return group if group is not None else str(super()._split_scope(nodeid))

    return FixtureGroupScheduling(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Iterator[None]:
    """Keep each phase's report on the item: fixtures that hold a shared server (the real
    Kafka) attach its logs when the test itself failed."""
    outcome = yield
    setattr(item, f"rep_{call.when}", outcome.get_result())
