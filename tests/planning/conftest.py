"""Fixtures of the planning tests: one local SparkSession for the whole test session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller_core.planning.snapshot import Snapshot, write_snapshot
from controller_core.planning.synthetic import make_snapshot


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """local[2], few shuffle partitions, no UI; skipped (saying why) when Java is missing."""
    pytest.importorskip("pyspark")
    from controller_core.planning.spark_job import JavaMissingError, check_java, make_session

    try:
        check_java()
    except JavaMissingError as e:
        pytest.skip(str(e))
    session = make_session("local[2]", {
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.driver.memory": "1g",
        "spark.ui.enabled": "false",
    })
    yield session
    session.stop()


def save(snapshot: Snapshot, directory: Path) -> Path:
    write_snapshot(snapshot, directory)
    return directory


@pytest.fixture(scope="session")
def skewed_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """9 brokers on 3 racks, 300 partitions, brokers 0-1 holding twice their share."""
    return save(make_snapshot(brokers=9, partitions=300, seed=5, skew=1.0, skewed_fraction=0.25),
                tmp_path_factory.mktemp("snap") / "skewed")


@pytest.fixture(scope="session")
def added_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """6 brokers; 6, 7 and 8 just joined and are empty."""
    return save(make_snapshot(brokers=9, partitions=240, seed=6, empty=(6, 7, 8)),
                tmp_path_factory.mktemp("snap") / "added")
