"""Hypothesis profiles of the core property tests.

``HYPOTHESIS_PROFILE=soak`` runs many more and longer random histories (minutes to hours);
the default profile keeps the properties within the budget of the whole suite, with the same
examples on every run. The profiles
are only registered here, never loaded globally, so other test packages keep their own
settings: the core tests read them through :func:`core_profile`.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

PROFILE_ENV = "HYPOTHESIS_PROFILE"

settings.register_profile(
    "core-base",
    deadline=None,  # a busy 2-core machine makes per-example timings meaningless
    suppress_health_check=(HealthCheck.too_slow, HealthCheck.data_too_large),
    print_blob=True,  # a failure prints @reproduce_failure(...) as well as the example
)
_BASE = settings.get_profile("core-base")
# CI runs the same examples every time (derandomize): a latent bug a random example happens
# upon turns CI red on an unrelated change, found once and not again. Finding such bugs is the
# soak profile's job, random on every run.
settings.register_profile("core-default", _BASE, max_examples=120, stateful_step_count=40,
                          derandomize=True)
settings.register_profile("soak", _BASE, max_examples=1500, stateful_step_count=80)
# For mutation runs: few examples, and no shrinking — a mutant is killed by the first failing
# example (printed with its @reproduce_failure blob); shrinking it only burns the shared CPUs.
settings.register_profile("core-quick", _BASE, max_examples=8, stateful_step_count=15,
                          phases=(Phase.explicit, Phase.reuse, Phase.generate))


PROFILES = ("core-default", "core-quick", "soak")


def core_profile() -> str:
    """The profile named by ``HYPOTHESIS_PROFILE`` (default ``core-default``)."""
    name = os.environ.get(PROFILE_ENV, "core-default")
    if name not in PROFILES:
        raise ValueError(f"{PROFILE_ENV}={name!r}: the core property tests know the profiles "
                         f"{', '.join(PROFILES)}; unset it or pick one of them")
    return name
