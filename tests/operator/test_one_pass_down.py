"""One pass down (issue 22): a PartitionReassignment spec is translated into the executor's
plan once per call of ``reconcile.executor_for``, and the executor describes each partition
once — also when a changed spec re-targets a run in flight (two plans, one describe)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.model import TopicPartition
from controller_core.orchestration.reassignment import ReassignmentPlan
from kraftsman import reconcile
from kraftsman.resources import PartitionReassignmentSpec
from tests.helpers import cluster as embedded


def _spec(moves: list[tuple[int, list[int]]], **extra: Any) -> PartitionReassignmentSpec:
    return PartitionReassignmentSpec.model_validate({
        "clusterRef": {"name": "demo"},
        "partitions": [{"topic": "orders", "partition": p, "replicas": r} for p, r in moves],
        "throttleBytesPerSecond": 500_000, "maxConcurrentMoves": 2, **extra})


class _Counting:
    """Counts the describes and the partitions each names; translations of a spec too."""

    def __init__(self, c: EmbeddedCluster, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        self.described: Counter[TopicPartition] = Counter()
        self.translations = 0
        describe = c.describe_partitions

        def counted(*args: Any, **kw: Any) -> Any:
            out = describe(*args, **kw)
            self.calls += 1
            self.described.update(d.tp for d in out)
            return out

        monkeypatch.setattr(c, "describe_partitions", counted)
        from_moves = ReassignmentPlan.from_moves.__func__  # type: ignore[attr-defined]

        def translated(cls: type[ReassignmentPlan], *args: Any, **kw: Any) -> Any:
            self.translations += 1
            return from_moves(cls, *args, **kw)

        monkeypatch.setattr(ReassignmentPlan, "from_moves", classmethod(translated))

    def reset(self) -> None:
        self.calls, self.translations = 0, 0
        self.described.clear()


def test_a_new_run_translates_once_and_describes_each_partition_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = embedded(tmp_path)
    count = _Counting(c, monkeypatch)
    spec = _spec([(0, [3, 1, 2]), (1, [4, 2, 0]), (2, [5, 0, 1])], paused=True)
    ex, problems, _ = reconcile.executor_for(c, spec, None, None)
    assert problems == [] and ex.state.paused and ex.limits == ex.plan.limits
    assert count.translations == 1
    assert count.calls == 1 and set(count.described.values()) == {1}
    assert len(count.described) == 3


def test_a_retarget_describes_both_plans_partitions_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = embedded(tmp_path)
    old = _spec([(0, [3, 1, 2]), (1, [4, 2, 0])])
    ex, problems, _ = reconcile.executor_for(c, old, None, None)
    assert problems == []
    ex.step()
    c.advance(2)
    ex.step()
    count = _Counting(c, monkeypatch)
    new = _spec([(0, [3, 1, 2]), (2, [5, 0, 1])])
    ex2, problems, retargeted = reconcile.executor_for(
        c, new, ex.state.model_dump(mode="json"), old)
    assert problems == [] and retargeted
    # the old plan (translated to learn what it had in flight) and the new one: one each
    assert count.translations == 2
    assert count.calls == 1, "one describe for both plans"
    assert count.described == Counter({TopicPartition("orders", i): 1 for i in range(3)})
    assert ex2.plan.additional, "it names a partition the old run had in flight"
    assert TopicPartition("orders", 1) not in c.list_partition_reassignments()
