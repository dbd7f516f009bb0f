from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import cluster
from tests.serve.harness import ServedCluster, served


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServedCluster]:
    """Six brokers, topic `orders` (6 partitions, RF 3); the clock frozen unless a test moves
    it through ``server.call``."""
    with served(cluster(tmp_path / "c"), time_scale=0) as s:
        yield s
