"""Hypothesis profiles of the core property tests.

``HYPOTHESIS_PROFILE=soak`` runs many more and longer random histories (minutes to hours);
the default profile keeps the properties within the budget of the whole suite. The profiles
are only registered here, never loaded globally, so other test packages keep their own
settings: the core tests read them through :func:`core_settings`.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

PROFILE_ENV = "HYPOTHESIS_PROFILE"

_COMMON = {
    "deadline": None,  # a busy 2-core machine makes per-example timings meaningless
    "suppress_health_check": (HealthCheck.too_slow, HealthCheck.data_too_large),
    "print_blob": True,  # a failure prints @reproduce_failure(...) as well as the example
}
settings.register_profile("core-default", max_examples=40, stateful_step_count=30, **_COMMON)
settings.register_profile("soak", max_examples=1500, stateful_step_count=80, **_COMMON)
settings.register_profile("core-quick", max_examples=8, stateful_step_count=15, **_COMMON)


def core_profile() -> str:
    name = os.environ.get(PROFILE_ENV, "core-default")
    return name if name in ("core-default", "soak", "core-quick") else "core-default"
