"""The embedded twin predicts what Apache Kafka 4.4 does: every scenario of
``tests/diff/scenarios.py`` runs on both, and every observable must be equal at every settle
point — the replica list in order, adding and removing, ISR, leader and leader epoch, the
reassignments listed, and each step's per-partition error codes.

When a scenario fails, both records are printed step by step; the twin is what must change
(real Kafka is the reference), unless the scenario itself cannot pin a moment down."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.diff import scenarios
from tests.diff.scenario import Scenario, ScenarioFailed, differences, run
from tests.diff.targets import Real, Twin
from tests.real.fixtures import Session


def _run(scenario: Scenario, target: Twin | Real) -> list[dict[str, object]]:
    try:
        return run(scenario, target)
    except ScenarioFailed as e:
        pytest.fail(f"{target.name}: {e}\nrecord so far:\n{json.dumps(e.record, indent=1)}",
                    pytrace=False)


@pytest.mark.parametrize("make", scenarios.ALL, ids=lambda m: m().name)
def test_the_twin_predicts_kafka(make: Callable[[], Scenario], real_kafka: Session,
                                 tmp_path: Path) -> None:
    scenario = make()
    twin = Twin(tmp_path / "twin", scenario.topics)
    try:
        predicted = _run(scenario, twin)
    finally:
        twin.close()
    real = Real(real_kafka, scenario.topics)
    try:
        seen = _run(scenario, real)
    finally:
        real.close()
    diffs = differences(predicted, seen)
    assert not diffs, "the twin differs from Kafka 4.4:\n" + "\n".join(diffs)
