"""The knobs of a plan's rounds (shared by the Spark and the driver-side table)."""

from __future__ import annotations

from dataclasses import dataclass

from controller_core.planning.objective import DEFAULT_TOLERANCE, DEFAULT_WEIGHTS


@dataclass(frozen=True, slots=True)
class PlanOptions:
    seed: int = 0
    max_rounds: int = 40
    choices: int = 4
    weights: tuple[float, ...] = DEFAULT_WEIGHTS
    tolerance: tuple[float, ...] = DEFAULT_TOLERANCE
    # a round that lowers the imbalance by less than this share of the imbalance before
    # the plan ends the phase (filling rounds of new brokers excepted): see settled()
    min_round_gain: float = 0.002
