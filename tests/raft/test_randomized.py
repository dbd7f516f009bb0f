"""Randomised fault injection over many seeds; every event is checked against SPEC §3.

A failure names its seed; replay it with ``pytest tests/raft/test_randomized.py
--raft-seed N``.
"""

from __future__ import annotations

import pytest
from chaos import run_chaos

DEFAULT_SEEDS = range(60)
EVENTS = 3000


def test_randomised_quorum(request: pytest.FixtureRequest) -> None:
    one = request.config.getoption("--raft-seed")
    seeds = [one] if one is not None else list(DEFAULT_SEEDS)
    for seed in seeds:
        try:
            report = run_chaos(seed, EVENTS)
        except AssertionError as e:
            pytest.fail(f"seed {seed} failed (replay: pytest tests/raft/test_randomized.py "
                        f"--raft-seed {seed}): {e}")
        assert report.committed > 0, f"seed {seed}: nothing was committed"


def test_runs_replay_exactly() -> None:
    assert run_chaos(7, 1500) == run_chaos(7, 1500)


@pytest.mark.slow
def test_soak() -> None:
    for seed in range(1000, 1600):
        try:
            run_chaos(seed, 10_000)
        except AssertionError as e:
            pytest.fail(f"seed {seed} failed (replay: run_chaos({seed}, 10_000)): {e}")
