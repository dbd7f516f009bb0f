"""Status models: conditions per the API conventions, capped detail, size at 100,000 partitions."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from types import MappingProxyType

import pytest
from pydantic import ValidationError

from kraftsman.status import (
    DEGRADED,
    DETAIL_CAP,
    PROGRESSING,
    READY,
    RUN_HISTORY_CAP,
    STATUS_BUDGET_BYTES,
    Condition,
    ElectionResult,
    ElectionRun,
    KafkaQuorumStatus,
    LeaderElectionStatus,
    PartitionProgress,
    PartitionReassignmentStatus,
    now_rfc3339,
    parse_rfc3339,
    read_status,
    set_condition,
)

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def test_set_condition_adds_then_keeps_transition_time_while_status_unchanged() -> None:
    conds = set_condition([], READY, "False", "Reconciling", "starting", generation=1, now=T0)
    assert [(c.type, c.status, c.last_transition_time) for c in conds] == [(READY, "False", T0)]
    conds2 = set_condition(conds, READY, "False", "Waiting", "still", generation=2, now=T1)
    assert conds2[0].last_transition_time == T0  # status unchanged: time kept
    assert (conds2[0].reason, conds2[0].message, conds2[0].observed_generation) == (
        "Waiting", "still", 2)
    conds3 = set_condition(conds2, READY, "True", "Ready", "up", generation=2, now=T1)
    assert conds3[0].last_transition_time == T1
    assert conds[0].reason == "Reconciling"  # input untouched (pure)


def test_set_condition_is_keyed_by_type_and_keeps_order() -> None:
    conds = set_condition([], READY, "False", "A", "", generation=1, now=T0)
    conds = set_condition(conds, PROGRESSING, "True", "B", "", generation=1, now=T0)
    conds = set_condition(conds, DEGRADED, "False", "C", "", generation=1, now=T0)
    conds = set_condition(conds, READY, "True", "D", "", generation=1, now=T1)
    assert [c.type for c in conds] == [READY, PROGRESSING, DEGRADED]
    assert len({c.type for c in conds}) == 3


def test_condition_rejects_bad_status_and_non_camelcase_reason() -> None:
    with pytest.raises(ValidationError):
        Condition(type=READY, status="Yes", reason="Ok", last_transition_time=T0)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        Condition(type=READY, status="True", reason="not camel", last_transition_time=T0)


def test_wire_form_is_camel_case_and_round_trips() -> None:
    st = KafkaQuorumStatus(leader_id=1, leader_epoch=5, high_watermark=10, max_follower_lag=0,
                           max_follower_lag_time_ms=3, current_voters=[0, 1, 2],
                           target_voters=[0, 1, 3])
    st.with_condition(READY, "True", "QuorumReady", "ok", generation=3, now=T0)
    wire = st.to_wire()
    assert {"leaderId", "leaderEpoch", "highWatermark", "maxFollowerLag", "maxFollowerLagTimeMs",
            "currentVoters", "targetVoters"} <= wire.keys()
    assert wire["conditions"][0]["lastTransitionTime"] == T0
    assert wire["conditions"][0]["observedGeneration"] == 3
    assert read_status(KafkaQuorumStatus, wire) == st


def test_read_status_tolerates_garbage_and_unknown_fields() -> None:
    assert read_status(KafkaQuorumStatus, None) == KafkaQuorumStatus()
    assert read_status(KafkaQuorumStatus, {"leaderEpoch": "x"}) == KafkaQuorumStatus()
    assert read_status(KafkaQuorumStatus, {"kopf": {"progress": {}}, "leaderId": 2}).leader_id == 2
    assert read_status(KafkaQuorumStatus, MappingProxyType({"leaderId": 3})).leader_id == 3


def test_now_rfc3339_uses_injected_clock() -> None:
    assert now_rfc3339(lambda: 0.0) == "1970-01-01T00:00:00Z"


def _rows(n: int) -> list[PartitionProgress]:
    states = ["Done", "Moving", "Pending", "Failed"]
    return [
        PartitionProgress(topic=f"topic-{i // 1000:03d}", partition=i % 1000,
                          state=states[i % 4] if i % 997 else "Failed",  # type: ignore[arg-type]
                          current_replicas=[1, 2, 3], target_replicas=[4, 5, 6],
                          adding_replicas=[4, 5, 6], removing_replicas=[1, 2, 3],
                          bytes_to_move=1000, bytes_moved=1000 if i % 4 == 0 else 250,
                          error="REASSIGNMENT_IN_PROGRESS" if i % 4 == 3 else None)
        for i in range(n)
    ]


def test_reassignment_counts_percent_and_failures_first() -> None:
    st = PartitionReassignmentStatus()
    rows = _rows(40)
    st.set_progress(rows, cap=5)
    assert st.counts.total == 40
    assert st.counts.done + st.counts.moving + st.counts.pending + st.counts.failed == 40
    assert [r.state for r in st.partitions] == ["Failed"] * 5
    assert st.partitions_omitted == 35
    assert st.bytes_to_move == 40_000
    assert st.bytes_moved == sum(min(r.bytes_moved or 0, 1000) for r in rows)
    assert st.percent == round(100 * st.bytes_moved / 40_000, 1)
    assert st.progress == f"{st.percent:g}%"
    assert (st.moving, st.done) == (st.counts.moving, st.counts.done)


def test_reassignment_percent_by_partitions_when_sizes_unknown() -> None:
    st = PartitionReassignmentStatus()
    st.set_progress([PartitionProgress(topic="t", partition=i,
                                       state="Done" if i < 3 else "Pending") for i in range(4)])
    assert st.percent == 75.0
    st.set_progress([], cap=0)
    assert (st.percent, st.counts.total) == (0.0, 0)


def test_a_known_size_sets_the_percent_even_before_a_byte_moved() -> None:
    """Once any row has a size, the percent goes by bytes (here none copied of 1), not by the
    partitions done (1 of 2)."""
    st = PartitionReassignmentStatus()
    st.set_progress([PartitionProgress(topic="t", partition=0, state="Moving",
                                       bytes_to_move=1, bytes_moved=0),
                     PartitionProgress(topic="t", partition=1, state="Done")])
    assert (st.percent, st.bytes_to_move, st.counts.done) == (0.0, 1, 1)


def test_a_cap_of_one_keeps_the_first_failure() -> None:
    st = PartitionReassignmentStatus()
    st.set_progress(_rows(8), cap=1)
    assert [(r.partition, r.state) for r in st.partitions] == [(0, "Failed")]
    assert (st.counts.total, st.partitions_omitted) == (8, 7)


def test_zero_cap_still_counts_everything() -> None:
    st = PartitionReassignmentStatus()
    st.set_progress(_rows(8), cap=0)
    assert st.counts.total == 8 and st.partitions == []


def test_reassignment_status_under_budget_at_100k_partitions() -> None:
    st = PartitionReassignmentStatus(cluster="demo", throttle_bytes_per_second=50_000_000)
    st.set_progress(_rows(100_000))
    st.with_condition(PROGRESSING, "True", "Moving", "x" * 1000, generation=1, now=T0)
    size = len(json.dumps(st.to_wire()))
    assert st.counts.total == 100_000
    assert len(st.partitions) == DETAIL_CAP
    assert all(r.state == "Failed" for r in st.partitions)  # 25,100 failures: all shown are
    assert size < STATUS_BUDGET_BYTES, size


def test_election_results_capped_failures_first_under_budget() -> None:
    st = LeaderElectionStatus(election_type="PREFERRED")
    rows = [ElectionResult(topic=f"t{i // 1000}", partition=i % 1000,
                           result="Failed" if i % 500 == 0 else
                           ("Elected" if i % 3 else "NotNeeded"),
                           leader=i % 7, error="PREFERRED_LEADER_NOT_AVAILABLE"
                           if i % 500 == 0 else None)
            for i in range(100_000)]
    st.set_results(rows)
    assert st.counts.total == 100_000
    assert st.counts.failed == 200 and st.failed == 200
    assert st.counts.elected + st.counts.not_needed + st.counts.failed == 100_000
    assert [r.result for r in st.results] == ["Failed"] * DETAIL_CAP
    assert st.results_omitted == 100_000 - DETAIL_CAP
    assert len(json.dumps(st.to_wire())) < STATUS_BUDGET_BYTES


def test_continuous_run_history_is_capped() -> None:
    st = LeaderElectionStatus()
    for i in range(RUN_HISTORY_CAP + 5):
        st.record_run(ElectionRun(time=f"2026-01-01T00:{i:02d}:00Z", imbalance_percent=1.0))
    assert st.runs == RUN_HISTORY_CAP + 5
    assert len(st.recent_runs) == RUN_HISTORY_CAP
    assert st.last_run_time == st.recent_runs[-1].time


def test_progress_counts_every_state_and_orders_the_detail_failures_first() -> None:
    def row(topic: str, p: int, state: str, to_move: int | None = None,
            moved: int | None = None) -> PartitionProgress:
        return PartitionProgress(topic=topic, partition=p, state=state,  # type: ignore[arg-type]
                                 bytes_to_move=to_move, bytes_moved=moved)

    rows = [row("b", 1, "Done", 100, 100), row("b", 0, "Moving", 100, 500),
            row("a", 2, "Pending", 200), row("a", 1, "Failed"), row("a", 0, "Cancelled"),
            row("a", 3, "RolledBack", 100, 30), row("a", 4, "Moving", 100, 10)]
    st = PartitionReassignmentStatus()
    st.set_progress(rows, cap=6)
    assert st.counts.model_dump() == {"total": 7, "done": 1, "moving": 2, "pending": 1,
                                      "failed": 1, "cancelled": 2}
    assert (st.moving, st.done) == (2, 1)
    assert (st.bytes_to_move, st.bytes_moved) == (600, 240)  # moved never counts past the size
    assert (st.percent, st.progress) == (40.0, "40%")
    assert [(r.topic, r.partition) for r in st.partitions] == [
        ("a", 1), ("a", 4), ("b", 0), ("a", 2), ("a", 0), ("a", 3)]
    assert st.partitions_omitted == 1
    sizeless = PartitionReassignmentStatus()
    sizeless.set_progress([row("t", 0, "Done", 0, 0), row("t", 1, "Moving", 0, 0),
                           row("t", 2, "Moving")])
    assert (sizeless.percent, sizeless.progress) == (33.3, "33.3%")  # by partitions


def test_set_condition_keeps_other_types_untouched_and_stamps_the_generation() -> None:
    conds = set_condition([], READY, "True", "A", "a", generation=1, now=T0)
    conds = set_condition(conds, DEGRADED, "False", "B", "b", generation=2, now=T1)
    assert conds[0].observed_generation == 1 and conds[0].last_transition_time == T0
    assert conds[1].model_dump() == {"type": DEGRADED, "status": "False", "reason": "B",
                                     "message": "b", "last_transition_time": T1,
                                     "observed_generation": 2}
    st = LeaderElectionStatus()
    st.with_condition(READY, "Unknown", "Pending", "", generation=4, now=T0)
    assert st.condition(READY) is not None and st.condition(DEGRADED) is None
    assert st.condition(READY).observed_generation == 4  # type: ignore[union-attr]


def test_kubernetes_times_parse_and_print() -> None:
    assert parse_rfc3339("1970-01-01T00:01:40Z") == 100.0
    assert parse_rfc3339(None) is None and parse_rfc3339("") is None
    assert parse_rfc3339("yesterday") is None
    assert now_rfc3339(lambda: 100.7) == "1970-01-01T00:01:40Z"
    now = now_rfc3339()
    assert now.endswith("Z") and len(now) == 20 and parse_rfc3339(now) is not None


@pytest.fixture
def away_from_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process runs five hours behind UTC (a POSIX TZ: no tz database needed)."""
    monkeypatch.setenv("TZ", "EST+5")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_kubernetes_times_are_utc_whatever_the_process_s_time_zone(away_from_utc: None) -> None:
    """A pod's TZ (or a node's /etc/localtime) must not shift status times: `Time` is UTC."""
    assert time.localtime(0).tm_hour == 19  # the zone is in force
    assert now_rfc3339(lambda: 100.7) == "1970-01-01T00:01:40Z"
    assert parse_rfc3339("1970-01-01T00:01:40Z") == 100.0
    now = parse_rfc3339(now_rfc3339())
    assert now is not None and abs(now - time.time()) < 5


def test_the_wire_form_leaves_unset_fields_out() -> None:
    wire = KafkaQuorumStatus(leader_id=1).to_wire()
    assert wire["leaderId"] == 1 and "leaderEpoch" not in wire and wire["currentVoters"] == []


def test_election_results_are_counted_per_outcome_failures_first() -> None:
    st = LeaderElectionStatus()
    st.set_results([ElectionResult(topic="b", partition=0, result="NotNeeded"),
                    ElectionResult(topic="b", partition=1, result="Elected"),
                    ElectionResult(topic="a", partition=5, result="Elected"),
                    ElectionResult(topic="c", partition=0, result="Failed")], cap=3)
    assert st.counts.model_dump() == {"total": 4, "elected": 2, "not_needed": 1, "failed": 1}
    assert (st.elected, st.failed, st.results_omitted) == (2, 1, 1)
    assert [(r.topic, r.partition) for r in st.results] == [("c", 0), ("a", 5), ("b", 1)]
    st.set_results([], cap=0)
    assert st.counts.total == 0 and st.results == []
