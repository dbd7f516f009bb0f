"""The differential scenarios (tests/diff/test_differential.py runs each on both clusters)."""

from __future__ import annotations

from controller_core.model import ElectionType, TopicPartition
from tests.diff.scenario import (
    Scenario,
    Step,
    Topic,
    add_voter,
    all_of,
    alter_dirs,
    brokers_listed,
    copying,
    cordon,
    create_topic,
    dir_throttle,
    elect,
    fenced,
    in_dir,
    in_isr,
    kill,
    led_by,
    moving,
    nothing_moving,
    observing,
    reassign,
    registered,
    remove_voter,
    sizes_answered,
    start,
    start_controller,
    stay,
    throttle,
    unregister,
    voters_are,
)
from tests.real.kafka import BROKERS

MB = 1_000_000
SLOW = 2_000  # bytes/s: a move of a few MB stays in flight for the whole scenario
PREFERRED, UNCLEAN = ElectionType.PREFERRED, ElectionType.UNCLEAN


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def _held(name: str) -> Step:
    return Step("throttle every replica", throttle(SLOW, [name], BROKERS))


def _lift(name: str, until: object = None) -> Step:
    return Step("lift the throttle", throttle(None, [name], BROKERS),
                until=until or nothing_moving)  # type: ignore[arg-type]


def start_and_complete() -> Scenario:
    t = "diff-move"
    p0, p1 = tp(t, 0), tp(t, 1)
    return Scenario("start-complete", (Topic(t, ((0, 1, 2), (1, 2, 3)), 2 * MB),), (
        _held(t),
        Step("move p0 0->3 and p1 in reverse order",
             reassign({p0: [3, 1, 2], p1: [3, 2, 1]}), until=moving(p0)),
        _lift(t),
    ))


def retarget() -> Scenario:
    t = "diff-retarget"
    p0 = tp(t, 0)
    return Scenario("retarget", (Topic(t, ((0, 1, 2),), 2 * MB),), (
        _held(t),
        Step("move 0->3", reassign({p0: [3, 1, 2]}), until=moving(p0)),
        Step("re-target to [3,0,2] mid-move", reassign({p0: [3, 0, 2]}), until=moving(p0)),
        Step("re-target to [2,1,0] mid-move", reassign({p0: [2, 1, 0]})),
        Step("lift the throttle: 3 catches up", throttle(None, [t], BROKERS),
             until=in_isr(p0, 3)),
        Step("cancel the move Kafka never completes", reassign({p0: None}),
             until=nothing_moving),
    ))


def retarget_regrow() -> Scenario:
    t = "diff-regrow"
    p0 = tp(t, 0)
    return Scenario("retarget-regrow", (Topic(t, ((0, 1, 2),), 2 * MB),), (
        _held(t),
        Step("move 0->3", reassign({p0: [3, 1, 2]}), until=moving(p0)),
        Step("re-target to keep 0 as well", reassign({p0: [3, 1, 2, 0]})),
        _lift(t),
    ))


def retarget_then_cancel() -> Scenario:
    t = "diff-retarget-cancel"
    p0 = tp(t, 0)
    return Scenario("retarget-cancel", (Topic(t, ((0, 1, 2),), 2 * MB),), (
        _held(t),
        Step("move 0->3", reassign({p0: [3, 1, 2]}), until=moving(p0)),
        Step("re-target to [3,0,2]", reassign({p0: [3, 0, 2]}), until=moving(p0)),
        Step("cancel", reassign({p0: None})),
        _lift(t),
    ))


def cancel_mid_move() -> Scenario:
    t = "diff-cancel"
    p0, p1 = tp(t, 0), tp(t, 1)
    return Scenario("cancel", (Topic(t, ((2, 0, 1), (0, 1, 2)), 2 * MB),), (
        _held(t),
        Step("move both", reassign({p0: [3, 1, 2], p1: [1, 3]}), until=moving(p0)),
        Step("cancel both", reassign({p0: None, p1: None}), until=moving(p0, False)),
        Step("cancel again", reassign({p0: None})),
        _lift(t),
    ))


def broker_failure_mid_move() -> Scenario:
    t = "diff-broker-fail"
    p0 = tp(t, 0)
    return Scenario("broker-failure", (Topic(t, ((0, 1, 2),), 2 * MB),), (
        _held(t),
        Step("move 0->3", reassign({p0: [3, 1, 2]}), until=moving(p0)),
        Step("kill broker 1", kill(1), until=all_of(fenced(1), in_isr(p0, 1, False))),
        Step("log sizes of the replicas", sizes_answered(p0, (0, 1, 2, 3))),
        Step("kill leader 0", kill(0), until=all_of(fenced(0), led_by(p0, 2))),
        Step("restart broker 1", start(1), until=all_of(fenced(1, False), in_isr(p0, 1))),
        Step("restart broker 0", start(0), until=all_of(fenced(0, False), in_isr(p0, 0))),
        _lift(t),
    ))


def cancel_offline() -> Scenario:
    t = "diff-cancel-offline"
    p0 = tp(t, 0)
    return Scenario("cancel-offline", (Topic(t, ((0,),), 2 * MB),), (
        _held(t),
        Step("move 0->1", reassign({p0: [1]}), until=moving(p0)),
        Step("kill broker 0", kill(0), until=all_of(fenced(0), led_by(p0, -1))),
        Step("cancel while offline", reassign({p0: None})),
        Step("restart broker 0", start(0), until=all_of(fenced(0, False), led_by(p0, 0))),
        _lift(t),
    ))


def cancel_offline_unclean() -> Scenario:
    t = "diff-cancel-offline-unclean"
    p0 = tp(t, 0)
    return Scenario("cancel-offline-unclean", (
        Topic(t, ((0,),), 2 * MB, {"unclean.leader.election.enable": "true"}),), (
        _held(t),
        Step("move 0->1", reassign({p0: [1]}), until=moving(p0)),
        Step("kill broker 0: the adding replica leads, uncleanly", kill(0),
             until=all_of(fenced(0), led_by(p0, 1))),
        Step("cancel: an unclean revert, leaderless", reassign({p0: None}),
             until=moving(p0, False)),
        Step("restart broker 0: Kafka 4.4's controller cannot register it", start(0),
             until=fenced(0)),
    ))


def eligible_leaders() -> Scenario:
    t = "diff-elr"
    p0 = tp(t, 0)
    return Scenario("eligible-leaders", (
        Topic(t, ((0, 1, 2),), 0, {"min.insync.replicas": "2"}),), (
        Step("kill follower 2", kill(2), until=all_of(fenced(2), in_isr(p0, 2, False))),
        Step("kill follower 1", kill(1), until=all_of(fenced(1), in_isr(p0, 1, False))),
        Step("kill leader 0", kill(0), until=all_of(fenced(0), led_by(p0, -1))),
        Step("restart 1 (crashed: not eligible)", start(1), until=fenced(1, False)),
        Step("unclean election", elect(UNCLEAN, [p0]), until=led_by(p0, 1)),
        Step("restart 0 and 2", lambda t_: (t_.start_broker(0), t_.start_broker(2)),
             until=all_of(fenced(0, False), fenced(2, False), in_isr(p0, 0), in_isr(p0, 2))),
    ))


def elections() -> Scenario:
    t = "diff-elect"
    p0, p1 = tp(t, 0), tp(t, 1)
    return Scenario("elections", (Topic(t, ((0, 1, 2), (1, 2, 3))),), (
        Step("kill broker 0", kill(0), until=all_of(fenced(0), led_by(p0, 1))),
        Step("restart broker 0", start(0), until=all_of(fenced(0, False), in_isr(p0, 0))),
        Step("preferred, no partition set", elect(PREFERRED, None), until=led_by(p0, 0)),
        Step("preferred, both partitions", elect(PREFERRED, [p0, p1])),
        Step("preferred, unknown partition", elect(PREFERRED, [tp(t, 9), tp("nope", 0)])),
        Step("unclean, led partition", elect(UNCLEAN, [p0])),
        Step("unclean, no partition set", elect(UNCLEAN, None)),
    ))


def unclean_election() -> Scenario:
    t = "diff-unclean"
    p0 = tp(t, 0)
    return Scenario("unclean", (Topic(t, ((0, 1),)),), (
        Step("kill follower 1", kill(1), until=all_of(fenced(1), in_isr(p0, 1, False))),
        Step("kill leader 0", kill(0), until=all_of(fenced(0), led_by(p0, -1))),
        Step("restart 1 (not in sync)", start(1), until=fenced(1, False)),
        Step("preferred fails", elect(PREFERRED, [p0])),
        Step("unclean elects 1", elect(UNCLEAN, [p0]), until=led_by(p0, 1)),
        Step("restart 0", start(0), until=all_of(fenced(0, False), in_isr(p0, 0))),
    ))


def unclean_mid_move() -> Scenario:
    t = "diff-unclean-move"
    p0 = tp(t, 0)
    return Scenario("unclean-mid-move", (Topic(t, ((0, 1),), 2 * MB),), (
        _held(t),
        Step("move to [2,3,0]", reassign({p0: [2, 3, 0]}), until=moving(p0)),
        Step("kill follower 1", kill(1), until=all_of(fenced(1), in_isr(p0, 1, False))),
        Step("kill leader 0", kill(0), until=all_of(fenced(0), led_by(p0, -1))),
        Step("restart 1", start(1), until=fenced(1, False)),
        # Kafka truncates the other replicas to the new leader's log: 3, copying beside 2,
        # is caught up at once and the move completes; "led by 2" alone would catch the real
        # cluster anywhere between the election and the completion.
        Step("unclean election", elect(UNCLEAN, [p0]),
             until=all_of(led_by(p0, 2), nothing_moving)),
        Step("restart 0", start(0), until=all_of(fenced(0, False), nothing_moving,
                                                 in_isr(p0, 0))),
        Step("lift the throttle", throttle(None, [t], BROKERS)),
    ))


def invalid_targets() -> Scenario:
    t = "diff-invalid"
    p = [tp(t, i) for i in range(6)]
    return Scenario("invalid", (Topic(t, ((0, 1, 2),) * 6),), (
        Step("unknown broker", reassign({p[0]: [0, 1, 99]})),
        Step("duplicate broker", reassign({p[1]: [0, 1, 1]})),
        Step("empty list", reassign({p[2]: []})),
        Step("negative broker", reassign({p[3]: [0, -1, 2]})),
        Step("unknown topic and partition", reassign({tp("nope", 0): [0, 1, 2],
                                                      tp(t, 99): [0, 1, 2]})),
        Step("cancel with nothing moving", reassign({p[4]: None})),
        Step("replication factor change", reassign({p[5]: [0, 1]}), until=nothing_moving),
        Step("fenced broker", kill(3), until=fenced(3)),
        Step("move onto the fenced broker", reassign({p[0]: [0, 1, 3]}), until=moving(p[0])),
        Step("restart it", start(3), until=all_of(fenced(3, False), nothing_moving,
                                                  in_isr(p[0], 3))),
    ))


def voter_changes() -> Scenario:
    """KIP-853 on the dynamic quorum: a spare controller (formatted with
    --no-initial-controllers) is promoted once it fetches; adding it twice, removing a node
    that is no voter, and removing an initial voter (perhaps the leader, which resigns)."""
    return Scenario("voters", (Topic("diff-voters", ((0, 1, 2),)),), (
        Step("start controller 103", start_controller(103), until=observing(103)),
        Step("add voter 103", add_voter(103), until=voters_are(100, 101, 102, 103)),
        Step("add voter 103 again", add_voter(103)),
        Step("remove 104, no voter", remove_voter(104)),
        Step("remove voter 100", remove_voter(100), until=voters_are(101, 102, 103)),
    ))


def removing_brokers() -> Scenario:
    """KIP-1066 and UnregisterBroker: a cordoned broker gets no replica of a new topic, and
    no manual assignment or reassignment may name it; uncordoned it takes replicas again.
    Running, it is unregistered all the same (kraftsman's own guard refuses that); stopped,
    it can be unregistered — and is gone from describe cluster — once only; started again,
    it registers anew."""
    t = "diff-cordon"
    p0 = tp(t, 0)

    return Scenario("removing-brokers", (Topic(t, ((0, 1, 2),)),), (
        Step("cordon broker 3", cordon({3: True})),
        Step("create a topic placed by the controller", create_topic("diff-cordon-new", 8, 3)),
        Step("create a topic on broker 3", create_topic("diff-cordon-manual", 0, 0, [[3, 1]])),
        Step("move p0 onto broker 3", reassign({p0: [3, 1, 2]})),
        Step("uncordon broker 3", cordon({3: False})),
        Step("create a topic on every broker", create_topic("diff-cordon-all", 1, 4)),
        # Kafka 4.4 unregisters a running broker too; killed and started, it registers anew
        Step("unregister running broker 3", unregister(3), until=registered(3, False)),
        Step("describe the cluster without 3", brokers_listed),
        Step("kill unregistered broker 3", kill(3)),
        Step("start broker 3 anew", start(3), until=fenced(3, False)),
        Step("kill broker 3", kill(3), until=fenced(3)),
        Step("unregister broker 3", unregister(3), until=registered(3, False)),
        Step("describe the cluster", brokers_listed),
        Step("unregister broker 3 again", unregister(3)),
        Step("move p0 onto broker 3", reassign({p0: [3, 1, 2]})),
        Step("start broker 3", start(3), until=fenced(3, False)),
        Step("describe the cluster again", brokers_listed),
    ))


def log_dirs() -> Scenario:
    """KIP-113 on brokers with two log directories: a replica copied into the other
    directory of its broker (slowly, under the log-dir throttle), asked there again, asked
    back (the copy is dropped), asked again and let finish; a missing directory, a broker
    without the replica; a replica a reassignment adds, created in the directory its broker
    was told of before."""
    t = "diff-jbod"
    p0 = tp(t, 0)
    return Scenario("log-dirs", (Topic(t, ((0, 1, 2),), size_bytes=4 * MB),), (
        Step("throttle copies between directories", dir_throttle(SLOW, [0])),
        Step("p0 on broker 0 to its other directory, on 1 to none, on 3 (no replica)",
             alter_dirs({(p0, 0): None, (p0, 1): "/no/such/dir", (p0, 3): 0}),
             until=copying(p0, 0)),
        Step("where p0 is on broker 0", in_dir(p0, 0)),
        Step("p0 on broker 0 to where it is", stay(p0, 0), until=copying(p0, 0, False)),
        Step("p0 on broker 0 to its other directory again", alter_dirs({(p0, 0): None}),
             until=copying(p0, 0)),
        Step("lift the throttle", dir_throttle(None, [0]), until=copying(p0, 0, False)),
        Step("where p0 is on broker 0 now", in_dir(p0, 0)),
        Step("tell broker 3 its second directory for p0", alter_dirs({(p0, 3): 1})),
        Step("move p0 onto broker 3", reassign({p0: [3, 1, 2]}), until=nothing_moving),
        Step("where p0 is on broker 3", in_dir(p0, 3, 1)),
    ))


ALL = (start_and_complete, retarget, retarget_regrow, retarget_then_cancel, cancel_mid_move,
       broker_failure_mid_move, cancel_offline, cancel_offline_unclean, eligible_leaders,
       elections, unclean_election, unclean_mid_move, invalid_targets,
       voter_changes, removing_brokers, log_dirs)
