"""EmbeddedCluster.open_read_only: views of a cluster that start nothing and write nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller_core.embedded.cluster import EmbeddedCluster
from tests.helpers import spec, tp


def files(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_read_only_sees_the_last_state_and_changes_nothing(tmp_path: Path) -> None:
    s = spec()
    c = EmbeddedCluster.open(tmp_path, s, fsync=False)
    assert c.alter_partition_reassignments({tp("orders", 0): [3, 4, 5]})[tp("orders", 0)].ok
    c.advance(2)
    quorum, cluster_id, now = c.describe_quorum(), c.image.cluster_id, c.now
    c.close()
    before = files(tmp_path)
    for _ in range(2):
        r = EmbeddedCluster.open_read_only(tmp_path, s)
        assert r.describe_quorum() == quorum  # no election: same leader, same epoch
        assert r.describe_cluster().cluster_id == cluster_id
        assert r.describe_cluster().controller_id == quorum.leader_id and r.now == now
        assert list(r.list_partition_reassignments()) == [tp("orders", 0)]
        with pytest.raises(RuntimeError, match="read-only"):
            r.advance(1)
        with pytest.raises(RuntimeError, match="read-only"):
            r.alter_partition_reassignments({tp("orders", 0): None})
        r.close()
    assert files(tmp_path) == before


def test_two_clusters_from_one_spec_have_two_ids(tmp_path: Path) -> None:
    a = EmbeddedCluster.open(tmp_path / "a", spec(), fsync=False)
    b = EmbeddedCluster.open(tmp_path / "b", spec(), fsync=False)
    assert a.image.cluster_id != b.image.cluster_id and len(a.image.cluster_id) == 22
    assert a.describe_quorum() is not None
    a.close()
    b.close()
