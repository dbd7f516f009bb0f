"""Goals: parsing, whether a snapshot allows them, and what demote-brokers plans (on the
driver engine; tests/planning/test_local_table.py checks Spark plans the same)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller_core.planning.goals import Goal, GoalError, check_goal, parse_goal
from controller_core.planning.local_table import run_plan_on_driver
from controller_core.planning.objective import LEADERS
from controller_core.planning.result import PlanResult
from controller_core.planning.snapshot import (
    Broker,
    PartitionTable,
    Snapshot,
    read_snapshot,
    write_snapshot,
)
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
    demote = parse_goal(["demote-brokers", "3,4"])
    assert demote == Goal("demote-brokers", (3, 4)) and demote.demoted == {3, 4}
    assert not demote.moves_data and not demote.drain_only and not demote.receivers_limited
    assert Goal("remove-brokers", (3,)).demoted == frozenset()


@pytest.mark.parametrize("words", [["rebalance"], ["leader-balance"],
                                   ["demote-brokers", "3"], []])
def test_balance_only_with_add_or_remove(words: list[str]) -> None:
    with pytest.raises(GoalError, match="--balance: only with --goal add-brokers or "
                                        "remove-brokers"):
        parse_goal(words, balance=True)


@pytest.mark.parametrize(("words", "message"), [
    ([], "--goal: missing"),
    (["shuffle"], "unknown goal 'shuffle'"),
    (["add-brokers"], "name the brokers"),
    (["demote-brokers"], "--goal demote-brokers: name the brokers, e.g. --goal demote-brokers"),
    (["demote-brokers", "3,x"], "'x' is not a broker id"),
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


def test_demoting_unknown_brokers_or_every_broker_is_refused() -> None:
    snap = make_snapshot(brokers=4, partitions=30)
    assert check_goal(Goal("demote-brokers", (3, 9)), snap) == [
        "--goal demote-brokers 3,9: unknown broker(s) [9]; the snapshot knows [0, 1, 2, 3] — "
        "name brokers of this cluster (take the snapshot again if one just joined)"]
    assert check_goal(Goal("demote-brokers", (0, 1, 2, 3)), snap) == [
        "--goal demote-brokers 0,1,2,3: would leave no broker to lead; the snapshot knows "
        "[0, 1, 2, 3] — leave at least one broker undemoted"]
    # unlike remove-brokers, demoting leaves every replica where it is: no rack/RF limit
    assert check_goal(Goal("demote-brokers", (0, 1, 2)), snap) == []


# ---------------------------------------------------------------------------------------
# demote-brokers plans


def plan_demote(tmp_path: Path, snap: Snapshot, goal: str) -> PlanResult:
    d = tmp_path / "snap"
    write_snapshot(snap, d)
    words = goal.split()
    return run_plan_on_driver(d, read_snapshot(d), parse_goal(words))


def brokers(n: int, racks: bool = False) -> list[Broker]:
    return [Broker(b, f"r{b % 3}" if racks else None, 10**12, 1e8, 1e8) for b in range(n)]


def test_demote_reorders_only_the_partitions_a_demoted_broker_prefers_to_lead(
        tmp_path: Path) -> None:
    snap = make_snapshot(brokers=9, partitions=300, seed=4)
    res = plan_demote(tmp_path, snap, "demote-brokers 2,7")
    demoted = {2, 7}
    pt = snap.partitions
    led = {(t, p): r for t, p, r in zip(pt.topic, pt.partition, pt.replicas, strict=True)
           if r[0] in demoted}
    assert {(m.topic, m.partition) for m in res.moves} == set(led)  # those, and only those
    assert res.replicas_moved == 0 and res.bytes_moved == 0
    for m in res.moves:
        assert sorted(m.after) == sorted(m.before)  # the same set: no byte moves
        assert m.after[0] not in demoted
        rest = [r for r in m.before if r != m.after[0]]
        # the other brokers that stay keep their order, the demoted ones go last in theirs
        assert list(m.after[1:]) == [r for r in rest if r not in demoted] + \
            [r for r in rest if r in demoted]
    assert res.loads_after[2][LEADERS] == res.loads_after[7][LEADERS] == 0
    assert [r.phase for r in res.rounds] == ["demote"]
    assert res.violations == []


def test_demote_shares_the_leadership_out_as_leader_balance_would(tmp_path: Path) -> None:
    """Broker 3 leads 8 partitions whose other replicas are 0 and 1, equally loaded: half go
    to each. Always taking the next replica in the list would give broker 0 all 8."""
    t = PartitionTable()
    for i in range(8):
        t.append("lead", i, [3, 0, 1], 3, 1000, 10.0, 10.0)
    for i in range(6):  # brokers 0, 1, 2 lead 2 each
        t.append("other", i, [i % 3, 3], i % 3, 1000, 10.0, 10.0)
    res = plan_demote(tmp_path, Snapshot(brokers(4), t, "demo"), "demote-brokers 3")
    assert len(res.moves) == 8
    assert sorted(m.after[0] for m in res.moves) == [0] * 4 + [1] * 4
    assert {b: res.loads_after[b][LEADERS] for b in range(4)} == {0: 6, 1: 6, 2: 2, 3: 0}


def test_partitions_only_on_demoted_brokers_or_led_off_order_are_reported(tmp_path: Path) -> None:
    t = PartitionTable()
    for i in range(7):
        t.append("stuck", i, [3, 4], 3, 100, 0.0, 0.0)
    t.append("free", 0, [4, 3, 0], 4, 100, 0.0, 0.0)
    t.append("free", 1, [0, 3], 0, 100, 0.0, 0.0)  # 0 leads: nothing to do
    t.append("free", 2, [0, 3], 3, 100, 0.0, 0.0)  # 0 preferred, 3 leads: reported
    res = plan_demote(tmp_path, Snapshot(brokers(5), t, "demo"), "demote-brokers 3,4")
    assert [(m.topic, m.partition, m.after) for m in res.moves] == [("free", 0, (0, 4, 3))]
    assert res.violations == []
    assert res.shortfalls[0] == (
        "demote-brokers: 7 partition(s) keep a demoted preferred leader: every replica is on "
        "a demoted broker (stuck-0 [3, 4], stuck-1 [3, 4], stuck-2 [3, 4], stuck-3 [3, 4], "
        "stuck-4 [3, 4], ...); add a replica on another broker to move their leadership, or "
        "demote fewer brokers")
    assert res.shortfalls[1] == (
        "demote-brokers: 1 partition(s) are led by a demoted broker though another replica is "
        "their preferred leader (free-2 led by 3); the plan leaves them as they are: elect "
        "their preferred leaders (a LeaderElection with electionType PREFERRED) to move that "
        "leadership")
    assert res.loads_after[3][LEADERS] == 8


def applied(snap: Snapshot, res: PlanResult) -> Snapshot:
    """The snapshot once the plan ran and a preferred election followed."""
    after = {(m.topic, m.partition): list(m.after) for m in res.moves}
    pt = snap.partitions
    for i, key in enumerate(zip(pt.topic, pt.partition, strict=True)):
        if key in after:
            pt.replicas[i] = after[key]
            pt.leader[i] = after[key][0]
    return snap


def test_a_later_leader_balance_gives_the_demoted_brokers_their_share_back(
        tmp_path: Path) -> None:
    snap = make_snapshot(brokers=6, partitions=120, seed=3, size_sigma=0.0, round_robin=True)
    n = len(snap.partitions)  # equal traffic: the leader count is all leader-balance weighs
    snap.partitions.bytes_in_per_second = [100.0] * n
    snap.partitions.bytes_out_per_second = [100.0] * n
    res = plan_demote(tmp_path / "a", snap, "demote-brokers 1,4")
    assert res.loads_after[1][LEADERS] == res.loads_after[4][LEADERS] == 0
    again = plan_demote(tmp_path / "b", applied(snap, res), "leader-balance")
    share = 120 / 6
    for b in (1, 4):  # back within the leader band (±2%, at least one leader) of 20
        assert abs(again.loads_after[b][LEADERS] - share) <= 1, again.loads_after
    assert again.replicas_moved == 0
