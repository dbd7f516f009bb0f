"""KafkaRebalance remove-brokers, the pure part (rebalance_flow.decide + rebalance_brokers):
cordon at approval, uncordon on reject or a cancelled/deleted step, Drained only after a
fresh check that finds nothing, Failed (NotDrained) saying what is left, and with
spec.unregister each broker unregistered once fenced (waiting while its process runs)."""

from __future__ import annotations

from typing import Any

from kraftsman import rebalance_brokers as rb
from kraftsman.handlers.rebalance import active
from kraftsman.rebalance_flow import (
    ANNOTATION,
    CancelReassignment,
    CreateReassignment,
    Decision,
    StepSeen,
    apply_notes,
    plan_digest,
)
from kraftsman.status import KafkaRebalanceStatus
from tests.operator.test_rebalance_flow import (
    FP,
    NOW,
    cond,
    obs,
    proposal_ready,
    spec,
    step,
)

REMOVE: dict[str, Any] = {"goal": "remove-brokers", "brokers": [3, 4]}
HELD = "broker 4 still holds orders-2 (replica) — not Drained"


def approved(**kw: Any) -> tuple[Any, Decision]:
    s = spec(**REMOVE, **kw)
    return s, step(proposal_ready(s), obs(s, annotation="approve", fingerprint=FP))


def cordoned(**kw: Any) -> tuple[Any, KafkaRebalanceStatus]:
    """Approved, and the handler's cordon of 3 and 4 went through."""
    s, d = approved(**kw)
    d.events += apply_notes(d.status, rb.cordoned(d.status, [3, 4], None, []), 1, NOW)
    return s, d.status


def last_step_completed(s: Any, st: KafkaRebalanceStatus, **kw: Any) -> Decision:
    st = step(st, obs(s, current=StepSeen("Completed", "100%", ""))).status  # step 1 of 2
    return step(st, obs(s, current=StepSeen("Completed", "100%", ""), **kw))


def test_approval_cordons_the_brokers_before_the_first_move() -> None:
    _, d = approved()
    assert d.status.phase == "Rebalancing"
    assert [type(a) for a in d.actions] == [rb.Cordon, CreateReassignment]
    assert d.actions[0] == rb.Cordon((3, 4))
    assert [(b.id, b.state) for b in d.status.brokers] == [(3, "Draining"), (4, "Draining")]


def test_the_cordon_outcome_lands_in_status_with_its_events() -> None:
    _, st = cordoned()
    assert [(b.id, b.state) for b in st.brokers] == [(3, "Cordoned"), (4, "Cordoned")]
    assert st.cordon is None
    st2 = KafkaRebalanceStatus(brokers=st.brokers)
    note = "cordoning needs metadata.version 4.3-IV0 (the cluster has 4.2-IV1); the brokers " \
           "are drained without it"
    for b in st2.brokers:
        b.state = "Draining"
    events = apply_notes(st2, rb.cordoned(st2, [], note, []), 1, NOW)
    assert st2.cordon == note and all(b.state == "Draining" and b.message == note
                                      for b in st2.brokers)
    assert [(e.reason, e.warning) for e in events] == [("CordonSkipped", True)]
    events = apply_notes(st2, rb.cordoned(st2, [3], None, ["broker 4: cannot cordon: x"]), 1,
                         NOW)
    assert [(e.reason, e.warning) for e in events] == [("Cordoned", False),
                                                       ("CordonFailed", True)]
    assert [(b.id, b.state) for b in st2.brokers] == [(3, "Cordoned"), (4, "Draining")]


def test_other_goals_neither_cordon_nor_check() -> None:
    s = spec()
    d = step(proposal_ready(s), obs(s, annotation="approve", fingerprint=FP))
    assert [type(a) for a in d.actions] == [CreateReassignment] and d.status.brokers == []
    d = last_step_completed(s, d.status)
    assert d.status.phase == "Ready" and not d.need_drain_check


def test_reject_while_draining_uncordons() -> None:
    s, st = cordoned()
    d = step(st, obs(s, annotation="reject"))
    assert d.status.phase == "Rejected"
    assert d.actions == [CancelReassignment("rb-1-0001"), rb.Uncordon((3, 4))]
    events = apply_notes(d.status, rb.uncordoned(d.status, [3, 4], []), 1, NOW)
    assert [e.reason for e in events] == ["Uncordoned"]
    assert [b.state for b in d.status.brokers] == ["Draining", "Draining"]


def test_an_uncordon_the_cluster_refuses_is_said_and_keeps_the_state() -> None:
    s, st = cordoned()
    d = step(st, obs(s, annotation="reject"))
    events = apply_notes(d.status, rb.uncordoned(d.status, [3, 4], ["broker 3: down"]), 1, NOW)
    assert [(e.reason, e.warning) for e in events] == [("UncordonFailed", True)]
    assert [b.state for b in d.status.brokers] == ["Cordoned", "Cordoned"]
    assert d.status.brokers[0].message == "broker 3: down"


def test_a_cancelled_or_deleted_step_uncordons_a_failed_one_does_not() -> None:
    s, st = cordoned()
    assert rb.Uncordon((3, 4)) in step(st, obs(s, current=StepSeen("Cancelled", "", ""))).actions
    assert rb.Uncordon((3, 4)) in step(st, obs(s, current=None)).actions
    assert step(st, obs(s, current=StepSeen("Failed", "40%", "broker 5 is gone"))).actions == []


def test_nothing_cordoned_nothing_to_uncordon() -> None:
    s, d = approved()
    d.events += apply_notes(d.status, rb.cordoned(d.status, [], "too old", []), 1, NOW)
    assert step(d.status, obs(s, annotation="reject")).actions == [
        CancelReassignment("rb-1-0001")]


def test_the_last_step_asks_for_a_fresh_check_then_says_drained() -> None:
    s, st = cordoned()
    first = last_step_completed(s, st)
    assert first.need_drain_check == (3, 4) and first.status.phase == "Rebalancing"
    d = last_step_completed(s, st, drained=[
        rb.Drain(3, True, "broker 3: Drained (no replica, leads nothing)"),
        rb.Drain(4, True, "broker 4: Drained (no replica, leads nothing)")])
    assert d.status.phase == "Ready"
    assert [(b.id, b.state) for b in d.status.brokers] == [(3, "Drained"), (4, "Drained")]
    assert cond(d.status, rb.BROKERS_DRAINED)[:2] == ("True", "Drained")
    assert "brokers 3, 4 Drained" in cond(d.status, "Ready")[2]
    assert [e.reason for e in d.events] == ["Drained", "Completed"]


def test_a_broker_that_still_holds_something_is_never_drained() -> None:
    s, st = cordoned()
    d = last_step_completed(s, st, drained=[
        rb.Drain(3, True, "broker 3: Drained (no replica, leads nothing)"),
        rb.Drain(4, False, HELD)])
    assert d.status.phase == "Failed"
    assert [(b.id, b.state) for b in d.status.brokers] == [(3, "Drained"), (4, "NotDrained")]
    assert d.status.brokers[1].message == HELD
    assert cond(d.status, rb.BROKERS_DRAINED) == ("False", "NotDrained", HELD)
    status, reason, message = cond(d.status, "Degraded")
    assert (status, reason) == ("True", "NotDrained")
    assert message == f"{HELD}; annotate {ANNOTATION}=refresh for a proposal that moves the rest"
    assert [(e.reason, e.warning) for e in d.events] == [("NotDrained", True)]


def test_an_empty_proposal_is_checked_too() -> None:
    s = spec(**REMOVE)
    st = proposal_ready(s)
    st.steps = []
    d = step(st, obs(s, annotation="approve", fingerprint=FP))
    assert d.need_drain_check == (3, 4) and d.actions == []


def ready_drained(**kw: Any) -> tuple[Any, KafkaRebalanceStatus]:
    s, st = cordoned(unregister=True, **kw)
    d = last_step_completed(s, st, drained=[rb.Drain(3, True, "ok"), rb.Drain(4, True, "ok")])
    assert d.status.phase == "Ready"
    return s, d.status


def test_unregister_waits_for_the_process_then_unregisters_the_fenced_broker() -> None:
    s, st = ready_drained()
    assert step(st, obs(s)).need_listing
    d = step(st, obs(s, listed={0: False, 3: False, 4: True}))
    assert d.actions == [rb.Unregister(4)]
    assert (d.status.brokers[0].state, d.status.brokers[0].message) == (
        "WaitingForShutdown", "broker 3 is Drained; stop its process: it is unregistered "
                              "once fenced")
    assert [e.reason for e in d.events] == ["WaitingForShutdown"]
    events = apply_notes(d.status, rb.unregistered(d.status, 4, True, ""), 1, NOW)
    assert [e.reason for e in events] == ["Unregistered"]
    again = step(d.status, obs(s, listed={0: False, 3: False}))
    assert again.actions == [] and again.events == []  # said once
    done = step(again.status, obs(s, listed={0: False, 3: True}))
    assert done.actions == [rb.Unregister(3)]
    events = apply_notes(done.status, rb.unregistered(done.status, 3, True, ""), 1, NOW)
    assert [e.reason for e in events] == ["Unregistered", rb.BROKERS_UNREGISTERED]
    assert cond(done.status, rb.BROKERS_UNREGISTERED)[0] == "True"
    assert not rb.wants_unregister(done.status, s)


def test_a_refused_unregister_is_said_and_tried_again() -> None:
    s, st = ready_drained()
    d = step(st, obs(s, listed={3: True, 4: True}))
    events = apply_notes(d.status, rb.unregistered(d.status, 3, False, "broker 3 still holds "
                                                   "x-0 (replica) — not Drained"), 1, NOW)
    assert [(e.reason, e.warning) for e in events] == [("UnregisterFailed", True)]
    assert d.status.brokers[0].state == "Drained"
    assert d.status.brokers[0].message.startswith("cannot unregister: broker 3 still holds")
    assert rb.Unregister(3) in step(d.status, obs(s, listed={3: True, 4: True})).actions


def test_a_broker_unregistered_elsewhere_counts_as_unregistered() -> None:
    s, st = ready_drained()
    d = step(st, obs(s, listed={}))
    assert [b.state for b in d.status.brokers] == ["Unregistered", "Unregistered"]
    assert cond(d.status, rb.BROKERS_UNREGISTERED)[0] == "True"


def test_without_spec_unregister_nothing_is_unregistered() -> None:
    s, st = cordoned()
    d = last_step_completed(s, st, drained=[rb.Drain(3, True, "ok"), rb.Drain(4, True, "ok")])
    later = step(d.status, obs(s))
    assert not later.need_listing and later.actions == []


def test_unregister_is_no_planning_input_and_wakes_the_idle_timer() -> None:
    assert plan_digest(spec(**REMOVE)) == plan_digest(spec(**REMOVE, unregister=True))
    _, st = ready_drained()
    raw = {**st.model_dump(mode="json", by_alias=True), "observedGeneration": 1}
    meta = {"generation": 1}
    assert active({"unregister": True}, raw, meta)
    assert not active({}, raw, meta)
    for b in raw["brokers"]:
        b["state"] = "Unregistered"
    assert not active({"unregister": True}, raw, meta)


def test_unregister_is_refused_for_other_goals() -> None:
    import pytest
    from pydantic import ValidationError
    with pytest.raises(ValidationError, match=r"spec\.unregister: only for goal remove-brokers"):
        spec(unregister=True)
