"""Goals: parsing and whether a snapshot allows them."""

from __future__ import annotations

import pytest

from controller_core.planning.goals import Goal, GoalError, check_goal, parse_goal
from controller_core.planning.synthetic import make_snapshot


def test_parse() -> None:
    assert parse_goal(["rebalance"]) == Goal("rebalance")
    assert parse_goal(["add-brokers", "7,8"]) == Goal("add-brokers", (7, 8))
    assert parse_goal(["remove-brokers", "3"]) == Goal("remove-brokers", (3,))
    assert parse_goal(["add-brokers", "7", "8"]) == Goal("add-brokers", (7, 8))
    assert parse_goal(["leader-balance"]).moves_data is False
    both = parse_goal(["remove-brokers", "3"], balance=True)
    assert both == Goal("remove-brokers", (3,), True)
    assert not both.drain_only and parse_goal(["remove-brokers", "3"]).drain_only
    assert parse_goal(["add-brokers", "7"]).receivers_limited
    assert not parse_goal(["add-brokers", "7"], balance=True).receivers_limited
    assert both.describe() == "remove-brokers 3 +balance"


@pytest.mark.parametrize("words", [["rebalance"], ["leader-balance"], []])
def test_balance_only_with_add_or_remove(words: list[str]) -> None:
    with pytest.raises(GoalError, match="--balance: only with --goal add-brokers or "
                                        "remove-brokers"):
        parse_goal(words, balance=True)


@pytest.mark.parametrize(("words", "message"), [
    ([], "--goal: missing"),
    (["shuffle"], "unknown goal 'shuffle'"),
    (["add-brokers"], "name the brokers"),
    (["remove-brokers", "x"], "'x' is not a broker id"),
    (["remove-brokers", "3,3"], "repeat"),
    (["rebalance", "3"], "takes no broker list"),
])
def test_parse_errors(words: list[str], message: str) -> None:
    with pytest.raises(GoalError, match=message):
        parse_goal(words)


def test_unknown_brokers_are_refused() -> None:
    snap = make_snapshot(brokers=6, partitions=30)
    p = check_goal(Goal("add-brokers", (7, 8)), snap)
    assert len(p) == 1 and "unknown broker(s) [7, 8]" in p[0]
    assert "unknown broker(s) [9]" in check_goal(Goal("remove-brokers", (9,)), snap)[0]


def test_removal_leaving_too_few_brokers_or_racks() -> None:
    snap = make_snapshot(brokers=4, partitions=30, racks=0)
    p = check_goal(Goal("remove-brokers", (0, 1)), snap)
    assert any("leaves 2 broker(s) but a partition has replication factor 3" in x for x in p)
    racked = make_snapshot(brokers=6, partitions=30, racks=3)  # racks a,b,c,a,b,c
    p = check_goal(Goal("remove-brokers", (2, 5)), racked)
    assert any("leaves 2 rack(s) ['rack-a', 'rack-b'] but replication factor 3" in x for x in p)
    assert check_goal(Goal("remove-brokers", (5,)), racked) == []
    assert check_goal(Goal("rebalance"), racked) == []
