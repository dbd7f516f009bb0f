"""The embedded cluster's metadata goes through the KIP-595 quorum of its controllers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from controller_core import errors
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.errors import ApiResult, KafkaApiError
from controller_core.orchestration.voters import VoterChangeWalker, WalkPhase
from tests.helpers import cluster, run_until, spec, tp

T0 = tp("orders", 0)


def test_every_change_is_committed_by_the_quorum(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    before = c.quorum.committed_end
    c.alter_partition_reassignments({T0: [3, 4, 5]})
    assert c.quorum.committed_end > before
    q = c.describe_quorum()
    assert q.leader_id in (0, 1, 2) and set(q.current_voters) == {0, 1, 2}
    assert q.high_watermark == c.quorum.committed_end
    assert c.describe_cluster().controller_id == q.leader_id


def test_killing_the_leading_controller_mid_reassignment_loses_nothing(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    c.alter_partition_reassignments({T0: [3, 4, 5], tp("orders", 1): [3, 4, 5]})
    c.advance(3)
    old = c.describe_quorum()
    c.fail_controller(old.leader_id)
    run_until(c, lambda: not c.list_partition_reassignments())
    new = c.describe_quorum()
    assert new.leader_id != old.leader_id and new.leader_epoch > old.leader_epoch
    for t in (T0, tp("orders", 1)):
        assert c.image.partition(t).replicas == (3, 4, 5)  # type: ignore[union-attr]
    state = {n: list(t.partitions) for n, t in c.image.topics.items()}
    c.close()
    again = EmbeddedCluster.open(tmp_path, c.spec, fsync=False)
    assert {n: list(t.partitions) for n, t in again.image.topics.items()} == state


def test_without_a_majority_changes_time_out_and_nothing_changes(tmp_path: Path) -> None:
    c = cluster(tmp_path, controllerRequestTimeoutMs=3_000)
    c.fail_controller(0)
    c.fail_controller(1)
    with pytest.raises(KafkaApiError) as e:
        c.alter_partition_reassignments({T0: [3, 4, 5]})
    assert e.value.error in (errors.NOT_CONTROLLER, errors.REQUEST_TIMED_OUT)
    assert c.image.partition(T0).replicas == (0, 1, 2)  # type: ignore[union-attr]
    c.restore_controller(0)
    assert c.alter_partition_reassignments({T0: [3, 4, 5]})[T0].ok


def test_a_voter_change_right_after_another_waits_for_it_to_commit(tmp_path: Path) -> None:
    """One voter change in flight: the quorum leader answers REQUEST_TIMED_OUT while the last
    voter assignment is uncommitted (Kafka's AddVoterHandler / RemoveVoterHandler). The
    embedded controllers wait for it in their own time, as an admin client retries within its
    timeout, so a cancel sent right after a new target is taken, not refused."""
    c = cluster(tmp_path)
    assert c.alter_quorum([0, 1, 2, 3]).ok
    res = c.alter_quorum(None)
    assert res.ok and "cancelled" in res.message, res


def test_replacing_all_voters_one_step_at_a_time(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    first_leader = c.describe_quorum().leader_id
    walker = VoterChangeWalker(c, [3, 4, 5])
    actions = []
    for _ in range(400):
        p = walker.step()
        actions.append(p.action)
        if p.phase is WalkPhase.COMPLETED:
            break
        c.advance(0.5)
        # the cluster stays available all along: a metadata change commits at every step
        assert c.alter_partition_reassignments({T0: [0, 1, 2]})  # no-op target, still answered
    assert p.phase is WalkPhase.COMPLETED, actions[-5:]
    assert set(c.describe_quorum().current_voters) == {3, 4, 5}
    steps = [a for a in actions if a.startswith(("adding", "removing"))]
    # one voter at a time, never more than four voters, the first leader removed last
    assert steps[0::2] == ["adding voter 3", "adding voter 4", "adding voter 5"]
    assert sorted(s.split()[-1] for s in steps[1::2]) == ["0", "1", "2"]
    assert steps[-1] == f"removing voter {first_leader}"


def test_bad_voter_sets_are_refused_and_nothing_changes(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    voters = set(c.describe_quorum().current_voters)
    unknown = c.alter_quorum([0, 1, 42])
    assert not unknown.ok and "unknown node id(s) [42]" in unknown.message
    empty = c.alter_quorum([])
    assert not empty.ok and "empty" in empty.message
    c.fail_broker(4)
    c.fail_broker(5)
    dead = c.alter_quorum([3, 4, 5])
    assert not dead.ok and "majority" in dead.message
    assert set(c.describe_quorum().current_voters) == voters
    assert c.describe_quorum().target_voters is None


def test_dedicated_controllers_share_the_id_space(tmp_path: Path) -> None:
    c = EmbeddedCluster.open(tmp_path, spec(controllers=[100, 101, 102]), fsync=False)
    assert set(c.describe_quorum().current_voters) == {100, 101, 102}
    assert c.quorum_node_ids() >= {0, 1, 2, 3, 4, 5, 100, 101, 102}
    with pytest.raises(ValueError, match="not a controller"):
        c.fail_controller(7)


def test_a_spare_controller_observes_until_a_voter_change_promotes_it(tmp_path: Path) -> None:
    """spec.spareControllers: controllers formatted with --no-initial-controllers. They
    fetch as observers from the start (DescribeQuorum lists them), so the walker's catch-up
    check passes and AddRaftVoter promotes one; a restart keeps the voters the log holds."""
    c = cluster(tmp_path, controllers=[100, 101, 102], spareControllers=[103])
    run_until(c, lambda: any(r.replica_id == 103 and r.status == "Observer" and r.lag == 0
                             for r in c.describe_quorum().replicas))
    walker = VoterChangeWalker(c, [101, 102, 103])
    for _ in range(100):
        if walker.step().phase is WalkPhase.COMPLETED:
            break
        c.advance(0.5)
    assert sorted(c.describe_quorum().current_voters) == [101, 102, 103]
    c.close()
    again = EmbeddedCluster.open(tmp_path, c.spec, fsync=False)
    assert sorted(again.describe_quorum().current_voters) == [101, 102, 103]


@pytest.mark.parametrize("spare, problem", [
    ([101], "spareControllers: [101]: a spare controller is listed once and is not an initial "
            "voter"),
    ([103, 103], "spareControllers: duplicate node ids"),
])
def test_a_spare_controller_is_no_initial_voter(spare: list[int], problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        spec(controllers=[100, 101, 102], spareControllers=spare)


def test_voter_refusals_answer_in_kafkas_words(tmp_path: Path) -> None:
    """As Kafka 4.4 answers kraftsman's requests (tests/diff, scenario 'voters'): a voter
    added twice is DUPLICATE_VOTER naming ReplicaKeys with directory ids; removing a node that
    is no voter sends no directory id, which Kafka refuses as an invalid request."""
    c = cluster(tmp_path, controllers=[100, 101, 102])
    dup = c.add_raft_voter(101)
    assert dup.error == errors.DUPLICATE_VOTER
    assert re.fullmatch(r"The voter id for ReplicaKey\(id=101, directoryId=[\w-]{22}\) is "
                        r"already part of the set of voters \[ReplicaKey\(id=100, directoryId="
                        r"[\w-]{22}\), ReplicaKey\(id=101, .*\), ReplicaKey\(id=102, .*\)\]\.",
                        dup.message), dup.message
    assert c.remove_raft_voter(104) == ApiResult(
        errors.INVALID_REQUEST, "Remove voter request didn't include a valid voter")
    assert sorted(c.describe_quorum().current_voters) == [100, 101, 102]
