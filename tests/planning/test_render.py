"""PartitionReassignment YAML: valid resources, split under the size limits, in order."""

from __future__ import annotations

import pytest
import yaml

from controller_core.planning.render import (
    RenderOptions,
    cluster_name_problem,
    dns_label,
    kafka_tool_json,
    render,
)
from controller_core.planning.report import estimate_seconds
from controller_core.planning.result import PartitionMove
from kraftsman.resources import parse_resources


def moves(n: int) -> list[PartitionMove]:
    return [PartitionMove(f"topic.with-long_name-{i % 7}", i, (1, 2, 3), (4, 2, 3) if i % 2
                          else (2, 1, 3), 1000 + i, 1) for i in range(n)]


def test_resources_parse_with_the_operators_model_and_keep_every_partition() -> None:
    ms = moves(2500)
    res = render(ms, RenderOptions("demo.cluster", "add-brokers 4", throttle_bytes_per_second=7,
                                   max_partitions=1000))
    assert [r.step for r in res] == [1, 2, 3]
    docs = [yaml.safe_load(r.text) for r in res]
    parsed = parse_resources(docs)
    assert [p.name for p in parsed] == [r.name for r in res]
    seen = [(p.topic, p.partition, p.replicas) for r in parsed for p in r.spec.partitions]
    assert seen == [(m.topic, m.partition, list(m.after)) for m in ms]
    for i, d in enumerate(docs, start=1):
        assert d["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"] == str(i)
        assert d["metadata"]["annotations"]["kraftsman.io/plan-step"] == f"{i}/3"
        assert d["spec"]["clusterRef"] == {"name": "demo.cluster"}
        assert d["spec"]["throttleBytesPerSecond"] == 7
        assert d["metadata"]["name"].startswith("demo-cluster-add-brokers-")
        assert d["spec"]["electPreferredLeaders"] is True  # leader 1 -> 2 or 4


def test_split_by_bytes_and_names_are_stable() -> None:
    ms = moves(3000)
    res = render(ms, RenderOptions("c", "rebalance", max_bytes=20_000, max_partitions=10_000))
    assert len(res) > 3
    assert all(len(r.text.encode()) <= 20_000 for r in res)
    again = render(ms, RenderOptions("c", "rebalance", max_bytes=20_000, max_partitions=10_000))
    assert [r.text for r in res] == [r.text for r in again]


def test_no_election_when_leaders_stay() -> None:
    ms = [PartitionMove("t", 0, (1, 2), (1, 3), 10, 1)]
    (r,) = render(ms, RenderOptions("c", "rebalance", throttle_bytes_per_second=None))
    doc = yaml.safe_load(r.text)
    assert doc["spec"]["electPreferredLeaders"] is False
    assert "throttleBytesPerSecond" not in doc["spec"]
    assert render([], RenderOptions("c", "rebalance")) == []


def test_tricky_topic_names_stay_strings_and_labels_are_dns() -> None:
    ms = [PartitionMove(name, 0, (1,), (2,), 1, 1) for name in ("true", "1e5", "null", "0123")]
    (r,) = render(ms, RenderOptions("x", "rebalance"))
    topics = [p["topic"] for p in yaml.safe_load(r.text)["spec"]["partitions"]]
    assert topics == ["true", "1e5", "null", "0123"]
    assert dns_label("My_Cluster.prod") == "my-cluster-prod"
    assert cluster_name_problem("demo") is None
    assert "pass --cluster-name 'my-cluster'" in (cluster_name_problem("My_Cluster") or "")
    tool = yaml.safe_load(kafka_tool_json(ms, rollback=True))
    assert tool["version"] == 1 and tool["partitions"][0]["replicas"] == [1]


def test_an_all_digit_plan_id_stays_a_string_label(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan id is 8 hex digits, all decimal about once in 40 plans: unquoted, YAML reads
    it as a number, and the API server refuses a number as a label value (400 Bad Request;
    seen on a real kube-apiserver: tests/operator/real/test_rebalance_deployed.py)."""
    import controller_core.planning.render as render_module

    monkeypatch.setattr(render_module, "plan_id", lambda *_: "15165527")
    (r,) = render([PartitionMove("orders", 0, (1,), (2,), 1, 1)], RenderOptions("x", "rebalance"))
    assert yaml.safe_load(r.text)["metadata"]["labels"]["kraftsman.io/plan"] == "15165527"


def test_per_broker_limit_is_rendered_and_slows_the_estimate() -> None:
    """Ten moves with distinct leaders and receivers all give up a replica on broker 0: ten
    at once take one move's time; one at a time on broker 0 (the executor counts a broker
    that gives up a replica, as ``ReassignmentExecutor`` does) take ten times as long."""
    ms = [PartitionMove("t", i, (100 + i, 0), (100 + i, 200 + i), 1000, 100 + i)
          for i in range(10)]
    free = render(ms, RenderOptions("c", "remove-brokers 0", throttle_bytes_per_second=100,
                                    max_concurrent_moves=10))
    one = render(ms, RenderOptions("c", "remove-brokers 0", throttle_bytes_per_second=100,
                                   max_concurrent_moves=10, max_concurrent_moves_per_broker=1))
    assert "maxConcurrentMovesPerBroker" not in yaml.safe_load(free[0].text)["spec"]
    (parsed,) = parse_resources([yaml.safe_load(one[0].text)])
    assert parsed.spec.max_concurrent_moves_per_broker == 1
    assert parsed.spec.max_concurrent_moves == 10
    assert estimate_seconds(free, 100) == pytest.approx(10)
    assert estimate_seconds(one, 100) == pytest.approx(100)
    # maxConcurrentMoves binds the same way
    two = render(ms, RenderOptions("c", "remove-brokers 0", throttle_bytes_per_second=100,
                                   max_concurrent_moves=2))
    assert estimate_seconds(two, 100) == pytest.approx(50)
