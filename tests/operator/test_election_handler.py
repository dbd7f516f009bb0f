"""The LeaderElection handlers' rules, called in-process (handler_driver.py): one-shot runs
once per spec (also across restarts), failures and unknown names are reported naming the
field, continuous mode elects only above its threshold and at its interval.
test_operator_kmock.py runs the same handlers under kopf."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kopf
import pytest
from handler_driver import CLUSTER, REF, Driver, deliver_events, outbox

from controller_core import errors
from controller_core.model import ElectionType, TopicPartition
from controller_core.orchestration.election import ElectionReport
from kraftsman.handlers.common import parse_spec
from kraftsman.handlers.election import report_doc
from kraftsman.handlers.opstate import saved_state
from kraftsman.handlers.runtime import spec_digest
from kraftsman.resources import LeaderElectionSpec


async def off_preferred(d: Driver, broker: int) -> None:
    """Broker ``broker`` dies (fenced: its partitions get other leaders) and comes back."""
    cluster = d.rt.clusters[("default", "demo")].cluster
    cluster.fail_broker(broker)
    cluster.advance(30)
    cluster.restore_broker(broker)
    cluster.advance(30)


@pytest.fixture
async def d(tmp_path: Path) -> Driver:
    drv = Driver(tmp_path)
    await drv.ready_cluster()
    return drv


def conds(obj: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"])
            for c in obj["status"]["conditions"]}


async def run(d: Driver, obj: dict[str, Any]) -> float | None:
    """One one-shot pass; the delay kopf is asked to retry after (None: done)."""
    try:
        await d.call(obj, "run")
    except kopf.TemporaryError as e:
        assert str(e) == "waiting; trying again"
        return float(e.delay) if e.delay is not None else None
    return None


async def test_a_one_shot_election_elects_once_and_reports_each_partition(d: Driver) -> None:
    await off_preferred(d, 0)
    le = d.create("LeaderElection", "el", {**REF, "allTopicPartitions": True, "runId": "a"})
    assert await run(d, le) == 1.0  # its Events wait to be posted: try again
    st = le["status"]
    msg = "2 elected, 0 not needed, 0 failed"
    assert conds(le) == {"Succeeded": ("True", "Completed", msg),
                         "Progressing": ("False", "Completed", msg),
                         "Degraded": ("False", "AsExpected", "")}
    assert (st["phase"], st["cluster"], st["electionType"], st["runId"]) == (
        "Completed", "demo", "PREFERRED", "a")
    assert st["counts"] == {"total": 2, "elected": 2, "notNeeded": 0, "failed": 0}
    assert [(r["partition"], r["result"], r["leader"], r.get("error")) for r in st["results"]] == [
        (0, "Elected", 0, None), (3, "Elected", 0, None)]
    assert st["completedAt"] and st["observedGeneration"] == 1
    assert outbox(le) == [("LeaderChanged", msg, False), ("Completed", msg, False)]
    state = saved_state(st)
    assert state is not None and state["digest"] == spec_digest(le["spec"])
    # The result and the digest went out together: the next pass does not elect again.
    await off_preferred(d, 0)
    assert await run(d, le) == 1.0
    assert outbox(le) == [("LeaderChanged", msg, False), ("Completed", msg, False)]
    deliver_events(le)
    assert await run(d, le) is None
    assert st["counts"]["elected"] == 2
    leaders = {p.tp.partition: p.leader for p in
               d.rt.clusters[("default", "demo")].cluster.describe_partitions()}
    assert leaders[0] != 0  # not elected again
    d.set_spec(le, {"runId": "b"})  # a new run
    assert await run(d, le) == 1.0
    assert le["status"]["runId"] == "b" and le["status"]["counts"]["elected"] == 2


async def test_a_restarted_operator_does_not_elect_again(d: Driver, tmp_path: Path) -> None:
    await off_preferred(d, 0)
    le = d.create("LeaderElection", "el", {**REF, "topics": ["orders"]})
    await run(d, le)
    deliver_events(le)
    await off_preferred(d, 0)
    d.exit()
    fresh = Driver(tmp_path)  # nothing in memory; the status holds the state
    fresh.objects, fresh.now = d.objects, d.now
    await fresh.call(d.objects[("KafkaCluster", "demo")], "reconcile")
    assert await run(fresh, le) is None
    assert outbox(le) == []


async def test_a_state_file_of_an_older_version_counts_as_elected(d: Driver) -> None:
    le = d.create("LeaderElection", "el", {**REF, "topics": ["orders"]})
    d.rt.save_op(le["metadata"]["uid"], {"digest": spec_digest(le["spec"]), "x": 1})
    await off_preferred(d, 0)
    assert await run(d, le) is None
    assert le["status"] == {}  # nothing to do, nothing written


async def test_a_partition_that_cannot_be_elected_fails_the_election(d: Driver) -> None:
    cluster = d.rt.clusters[("default", "demo")].cluster
    cluster.fail_broker(0)
    cluster.advance(30)  # broker 0 fenced: its partitions' preferred leader is gone
    le = d.create("LeaderElection", "el", {**REF, "partitions": [
        {"topic": "orders", "partition": 0}, {"topic": "orders", "partition": 1}]})
    await run(d, le)
    st = le["status"]
    msg = "0 elected, 1 not needed, 1 failed"
    assert st["phase"] == "Failed" and st["failed"] == 1
    assert conds(le) == {"Succeeded": ("False", "ElectionFailed", msg),
                         "Progressing": ("False", "Completed", msg),
                         "Degraded": ("False", "AsExpected", "")}
    assert st["results"][0]["result"] == "Failed"
    assert st["results"][0]["error"] == "PREFERRED_LEADER_NOT_AVAILABLE"
    assert st["results"][0]["message"]
    assert st["results"][1]["error"] == "ELECTION_NOT_NEEDED"
    assert outbox(le) == [("ElectionFailed", msg, True)]


async def test_unknown_topics_are_named_with_the_fix(d: Driver) -> None:
    le = d.create("LeaderElection", "el", {**REF, "topics": ["orders", "nope"]})
    await run(d, le)
    st = le["status"]
    problem = ("spec.topics: ['nope'] do not exist in cluster demo; fix the names or create "
               "the topics")
    assert st["phase"] == "Failed" and st["failed"] == 1 and st["counts"]["failed"] == 1
    assert conds(le)["Degraded"] == ("True", "UnknownTopic", problem)
    assert conds(le)["Succeeded"] == ("False", "UnknownTopic",
                                      "0 elected, 6 not needed, 1 failed")
    assert outbox(le) == [("ElectionFailed", problem, True)]


async def test_unknown_topics_count_as_failed_beside_the_partitions_that_failed(
        d: Driver) -> None:
    """LeaderElectionCommand reports an unknown topic as a failure of its own, beside the
    partitions whose preferred leader is not available."""
    cluster = d.rt.clusters[("default", "demo")].cluster
    cluster.fail_broker(0)
    cluster.advance(30)  # orders-0 and orders-3 cannot get their preferred leader 0
    le = d.create("LeaderElection", "el", {**REF, "topics": ["orders", "nope", "gone"]})
    await run(d, le)
    st = le["status"]
    assert (st["failed"], st["counts"]["failed"], st["counts"]["total"]) == (4, 4, 6)
    assert conds(le)["Succeeded"] == ("False", "UnknownTopic",
                                      "0 elected, 4 not needed, 4 failed")
    assert [r["partition"] for r in st["results"] if r["result"] == "Failed"] == [0, 3]


async def test_at_most_five_unknown_partitions_are_named(d: Driver) -> None:
    le = d.create("LeaderElection", "el", {**REF, "partitions": [
        {"topic": "orders", "partition": p} for p in (0, 90, 91, 92, 93, 94, 95, 96)]})
    await run(d, le)
    named = ", ".join(f"spec.partitions[{i}] (orders-{89 + i})" for i in range(1, 6))
    assert conds(le)["Degraded"] == (
        "True", "UnknownPartition", f"{named}: no such partition in cluster demo; fix the plan")
    assert le["status"]["counts"]["failed"] == 7


class CountingCluster:
    """Answers DescribeTopicPartitions with nothing; counts the partitions asked about."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def describe_partitions(self, partitions: list[TopicPartition] | None = None) -> list[Any]:
        self.asked.append(len(partitions or []))
        return []


def test_leaders_are_read_back_for_at_most_100000_results() -> None:
    """A cost guard: the rows of a huge election do not ask the cluster for every partition's
    leader again (the status shows 100 rows; the CLI prints the whole report)."""
    spec = LeaderElectionSpec.model_validate({**REF, "allTopicPartitions": True})
    cluster = CountingCluster()
    for n in (100_000, 100_001):
        report = ElectionReport(ElectionType.PREFERRED, {
            TopicPartition("t", p): errors.OK for p in range(n)})
        doc = report_doc(report, spec, cluster)  # type: ignore[arg-type]
        assert len(doc["rows"]) == n and doc["rows"][0][3] is None
    assert cluster.asked == [100_000]


async def test_unknown_partitions_are_named_by_their_index(d: Driver) -> None:
    le = d.create("LeaderElection", "el", {**REF, "partitions": [
        {"topic": "orders", "partition": 0}, {"topic": "orders", "partition": 99}]})
    await run(d, le)
    problem = "spec.partitions[1] (orders-99): no such partition in cluster demo; fix the plan"
    assert conds(le)["Degraded"] == ("True", "UnknownPartition", problem)
    assert conds(le)["Succeeded"][:2] == ("False", "UnknownPartition")
    assert le["status"]["phase"] == "Failed"


async def test_an_invalid_spec_is_permanent_for_its_generation(d: Driver) -> None:
    le = d.create("LeaderElection", "el", {**REF})  # no selector
    assert await run(d, le) is None
    assert le["status"]["phase"] == "Invalid"
    assert conds(le)["Degraded"][:2] == ("True", "InvalidSpec")
    assert "spec.allTopicPartitions" in conds(le)["Degraded"][2]
    assert conds(le)["Succeeded"] == ("False", "InvalidSpec", "the spec is invalid")
    assert conds(le)["Progressing"] == ("True", "Pending", "not run yet")
    assert le["status"]["observedGeneration"] == 1


async def test_every_problem_of_an_invalid_spec_is_named(d: Driver) -> None:
    le = d.create("LeaderElection", "el", {"clusterRef": {"name": "demo"},
                                           "electionType": "BOGUS", "topics": "orders"})
    assert await run(d, le) is None
    _, problems = parse_spec("LeaderElection", le["spec"])
    assert len(problems) == 2
    assert conds(le)["Degraded"][2] == f"{problems[0]}; {problems[1]}"
    assert "spec.electionType" in problems[0] and "spec.topics" in problems[1]


async def test_an_unknown_cluster_is_named_with_the_fix(d: Driver) -> None:
    le = d.create("LeaderElection", "el", {"clusterRef": {"name": "nope"},
                                           "allTopicPartitions": True})
    assert await run(d, le) == 5.0  # asked again: the cluster may come later
    assert le["status"]["phase"] == "Invalid"
    assert conds(le)["Degraded"] == (
        "True", "UnknownCluster", "spec.clusterRef.name: no KafkaCluster 'nope' in namespace "
        "default; create it or fix the name")
    assert le["status"]["observedGeneration"] == 1


async def test_an_unknown_cluster_is_looked_for_less_often_as_it_stays_unknown(
        d: Driver) -> None:
    """Each look is a write of kopf's progress annotation and its watch event, so a cluster
    that does not come is asked for at 5, 10, 20, 40 s, then each minute, not every 5 s."""
    le = d.create("LeaderElection", "el", {"clusterRef": {"name": "nope"},
                                           "allTopicPartitions": True})
    delays = []
    for retry in range(7):
        try:
            await d.call(le, "run", retry=retry)
        except kopf.TemporaryError as e:
            delays.append(e.delay)
    assert delays == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0, 60.0]
    assert conds(le)["Degraded"][1] == "UnknownCluster"


async def test_an_election_created_before_its_cluster_runs_once_the_cluster_comes(
        tmp_path: Path) -> None:
    """Applied together (one Argo CD sync), or seen by a standby whose index is still filling
    after a takeover: before, the election stayed Invalid for good."""
    d = Driver(tmp_path)
    le = d.create("LeaderElection", "el", {**REF, "allTopicPartitions": True})
    assert await run(d, le) == 5.0
    assert conds(le)["Degraded"][1] == "UnknownCluster"
    await d.ready_cluster()
    assert await run(d, le) != 5.0  # (at most the Events' own retry)
    assert le["status"]["phase"] == "Completed", le["status"]
    assert conds(le)["Succeeded"][:2] == ("True", "Completed")
    assert conds(le)["Degraded"] == ("False", "AsExpected", "")


async def test_a_cluster_not_ready_yet_is_waited_for(tmp_path: Path) -> None:
    d = Driver(tmp_path)
    d.create("KafkaCluster", "demo", {"embedded": {"brokers": [{"id": 0}]}})
    le = d.create("LeaderElection", "el", {**REF, "allTopicPartitions": True})
    assert await run(d, le) == 0.5  # the tick
    assert conds(le)["Progressing"] == ("True", "WaitingForCluster",
                                        "KafkaCluster demo is not Ready yet")
    assert conds(le)["Succeeded"] == ("Unknown", "Pending", "not run yet")
    assert "phase" not in le["status"]
    assert le["status"]["observedGeneration"] == 1


async def test_continuous_elects_above_the_threshold_at_its_interval(d: Driver) -> None:
    le = d.create("LeaderElection", "cont", {
        **REF, "topics": ["orders"], "mode": "Continuous", "intervalSeconds": 10,
        "imbalanceThresholdPercent": 20})
    await d.call(le, "reconcile")
    st = le["status"]
    msg = "leader imbalance 0.0% (threshold 20%); 1 runs"
    assert conds(le) == {"Succeeded": ("True", "Balanced", msg),
                         "Progressing": ("False", "Watching", msg),
                         "Degraded": ("False", "AsExpected", "")}
    assert (st["phase"], st["imbalancePercent"], st["runs"]) == ("Watching", 0.0, 1)
    assert [(r["elected"], r["failed"]) for r in st["recentRuns"]] == [(0, 0)]
    assert st["counts"]["total"] == 0 and outbox(le) == []
    cluster = d.rt.clusters[("default", "demo")].cluster
    cluster.advance(9)
    await d.call(le, "reconcile")
    assert le["status"]["runs"] == 1  # within the interval: not looked at again
    await off_preferred(d, 1)  # 2 of 6 partitions off-preferred: 33.3% > 20%
    await d.call(le, "reconcile")
    st = le["status"]
    assert (st["runs"], st["imbalancePercent"], st["counts"]["elected"]) == (2, 33.33, 2)
    assert st["recentRuns"][-1]["imbalancePercent"] == 33.33
    assert st["recentRuns"][-1]["elected"] == 2
    assert outbox(le) == [("LeaderChanged", "imbalance 33.3% > 20%: 2 preferred leaders "
                           "elected", False)]
    assert conds(le)["Succeeded"] == ("True", "Balanced",
                                      "leader imbalance 33.3% (threshold 20%); 2 runs")
    await off_preferred(d, 2)  # 33.3% again, but the threshold is now higher
    d.set_spec(le, {"imbalanceThresholdPercent": 50})
    cluster.advance(10)
    await d.call(le, "reconcile")
    assert le["status"]["runs"] == 3 and le["status"]["recentRuns"][-1]["elected"] == 0
    assert len(outbox(le)) == 1


async def test_continuous_is_watching_again_once_the_cluster_is_back_after_a_restart(
        d: Driver) -> None:
    """A restarted operator finds the cluster not open yet (WaitingForCluster); once it is,
    the resource says Watching again at once, not only at the next run of its interval."""
    le = d.create("LeaderElection", "cont", {
        **REF, "topics": ["orders"], "mode": "Continuous", "intervalSeconds": 300})
    await d.call(le, "reconcile")
    watching = conds(le)["Progressing"]
    assert watching[:2] == ("False", "Watching")
    opened = d.rt.clusters.pop(("default", "demo"))  # as after a restart, before it opens
    await d.call(le, "reconcile")
    assert conds(le)["Progressing"][:2] == ("True", "WaitingForCluster")
    d.rt.clusters[("default", "demo")] = opened
    await d.call(le, "reconcile")
    assert conds(le)["Progressing"] == watching and le["status"]["runs"] == 1


# The cluster of handler_driver plus a topic "logs" whose preferred leader is broker 5.
TWO_TOPICS = {"embedded": {**CLUSTER["embedded"], "topics": [
    *CLUSTER["embedded"]["topics"],  # type: ignore[index]
    {"name": "logs", "partitions": 3, "replicationFactor": 3,
     "assignment": [[5, 3, 4], [5, 4, 3], [5, 3, 4]]}]}}


async def test_continuous_looks_at_the_imbalance_of_its_own_partitions_topics(
        tmp_path: Path) -> None:
    d = Driver(tmp_path)
    await d.ready_cluster(spec=TWO_TOPICS)
    await off_preferred(d, 5)  # every "logs" partition off its preferred leader: 3 of 9
    le = d.create("LeaderElection", "cont", {
        **REF, "partitions": [{"topic": "orders", "partition": 0},
                              {"topic": "orders", "partition": 1}],
        "mode": "Continuous", "imbalanceThresholdPercent": 20})
    await d.call(le, "reconcile")
    st = le["status"]
    assert (st["imbalancePercent"], st["recentRuns"][-1]["elected"]) == (0.0, 0)
    assert outbox(le) == []
    by_topic = d.create("LeaderElection", "logs", {
        **REF, "topics": ["logs"], "mode": "Continuous", "imbalanceThresholdPercent": 20})
    await d.call(by_topic, "reconcile")
    assert by_topic["status"]["imbalancePercent"] == 100.0


async def test_a_pass_that_does_not_see_the_last_status_write_yet_does_not_elect_again(
        tmp_path: Path) -> None:
    """The next pass may get a body without the status the last pass wrote (a stale read);
    the operator's own copy of the state, with a later revision, wins over it."""
    d = Driver(tmp_path)
    kc = d.create("KafkaCluster", "demo", CLUSTER)
    le = d.create("LeaderElection", "el", {**REF, "allTopicPartitions": True})
    await run(d, le)  # waits for the cluster: the first state, revision 1
    stale = le["status"]["operationState"]
    await d.call(kc, "reconcile")
    await off_preferred(d, 0)
    await run(d, le)  # elected: revision 2
    assert le["status"]["counts"]["elected"] == 2
    await off_preferred(d, 0)
    le["status"]["operationState"] = stale
    await run(d, le)
    leaders = {p.tp.partition: p.leader for p in
               d.rt.clusters[("default", "demo")].cluster.describe_partitions()}
    assert leaders[0] != 0 and leaders[3] != 0  # not elected a second time


async def test_continuous_with_failures_reports_them(d: Driver) -> None:
    cluster = d.rt.clusters[("default", "demo")].cluster
    le = d.create("LeaderElection", "cont", {
        **REF, "partitions": [{"topic": "orders", "partition": 0},
                              {"topic": "orders", "partition": 1}],
        "mode": "Continuous", "imbalanceThresholdPercent": 0})
    cluster.fail_broker(0)
    cluster.advance(30)
    await d.call(le, "reconcile")
    st = le["status"]
    assert st["recentRuns"][-1]["failed"] == 1 and st["phase"] == "Watching"
    assert conds(le)["Succeeded"][:2] == ("False", "ElectionFailed")


async def test_the_index_lists_elections_that_still_use_the_cluster(d: Driver) -> None:
    one = d.create("LeaderElection", "one", {**REF, "allTopicPartitions": True})
    d.create("LeaderElection", "cont", {**REF, "allTopicPartitions": True,
                                        "mode": "Continuous"})
    d.create("LeaderElection", "noref", {"allTopicPartitions": True})
    assert await d.index("le_users") == {("default", "demo"): [
        "LeaderElection/one", "LeaderElection/cont"]}
    for phase in ("Completed", "Failed", "Invalid"):
        one["status"]["phase"] = phase
        assert await d.index("le_users") == {("default", "demo"): ["LeaderElection/cont"]}
    one["status"]["phase"] = "Watching"
    assert len((await d.index("le_users"))[("default", "demo")]) == 2


async def test_only_continuous_elections_have_a_timer(d: Driver) -> None:
    le = d.create("LeaderElection", "one", {**REF, "allTopicPartitions": True})
    timer = next(h for h in d.registry._spawning.get_all_handlers()
                 if h.selector is not None and h.selector.plural == "leaderelections")
    on_create = next(h for h in d.registry._changing.get_all_handlers()
                     if h.id == "run")
    assert timer.when(spec=le["spec"]) is False and on_create.when(spec=le["spec"]) is True
    cont = {**le["spec"], "mode": "Continuous"}
    assert timer.when(spec=cont) is True and on_create.when(spec=cont) is False
    assert timer.when(spec=None) is False



async def test_a_cluster_without_a_controller_is_retried_with_backoff(d: Driver) -> None:
    cluster = d.rt.clusters[("default", "demo")].cluster
    for node in (0, 1, 2):
        cluster.fail_controller(node)
    le = d.create("LeaderElection", "el", {**REF, "allTopicPartitions": True})
    assert await run(d, le) == 1.0
    assert conds(le)["Progressing"] == (
        "True", "Retrying", "NOT_CONTROLLER: no controller is active: the metadata quorum has "
        "no leader (a majority of controllers may be down); retrying in 1s")
    assert await run(d, le) == 1.0  # waits out the backoff, untried
    d.now += 1
    assert await run(d, le) == 2.0
    for node in (0, 1, 2):
        cluster.restore_controller(node)
    d.now += 2
    await d.call(d.objects[("KafkaCluster", "demo")], "reconcile")
    assert await run(d, le) == 1.0  # elected; its Events wait
    assert le["status"]["phase"] == "Completed" and d.rt.backoff.failures == {}
