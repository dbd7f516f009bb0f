"""Run mutmut with only some of ``[tool.mutmut] paths_to_mutate`` mutated.

``pyproject.toml`` lists every mutated package (the core's and the operator's), and mutmut has
no option to narrow what it *generates*: a first ``mutmut run "controller_core.storage*"``
still writes all ~6,900 mutants. This wrapper sets mutmut's ``only_mutate`` to the glob
patterns in ``MUTMUT_ONLY`` (comma-separated, matched against file paths) and then runs the
ordinary ``mutmut`` command line, so files outside them are copied unmutated and the tests
(``tests_dir``, unchanged) run exactly as in a full run::

    MUTMUT_ONLY='controller_core/orchestration/*' HYPOTHESIS_PROFILE=core-quick \\
      nice -n 19 .venv/bin/python tools/mutmut_only.py run --max-children 1
    MUTMUT_ONLY='controller_core/orchestration/*' .venv/bin/python tools/mutmut_only.py results

``MUTMUT_TESTS`` (optional, comma-separated test paths) narrows the tests each mutant runs to
those files, for code only a few test files reach (the KafkaRebalance handler's)::

    MUTMUT_ONLY='operator/kraftsman/handlers/rebalance.py' \
      MUTMUT_TESTS='tests/operator/test_rebalance_handler.py' \
      HYPOTHESIS_PROFILE=core-quick .venv/bin/python tools/mutmut_only.py run --max-children 1

Use one ``mutants/`` directory per selection (files and tests): mutmut forgets its verdicts
when the test selection changes, and it skips a file whose copy in ``mutants/`` is newer than
the source, so a file copied unmutated here stays unmutated in a later run without the
wrapper until ``mutants/`` is removed.
"""

from __future__ import annotations

import os
import sys

from mutmut.__main__ import cli
from mutmut.configuration import config


def _env_list(name: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]


def main() -> None:
    patterns = _env_list("MUTMUT_ONLY")
    if not patterns:
        sys.exit("MUTMUT_ONLY is not set: give the file patterns to mutate, e.g. "
                 "MUTMUT_ONLY='controller_core/orchestration/*' (or run plain `mutmut`)")
    config().only_mutate = patterns  # mutmut's own setting; forked workers inherit it
    tests = _env_list("MUTMUT_TESTS")
    if tests:
        config().pytest_add_cli_args_test_selection = tests
    cli()


if __name__ == "__main__":
    main()
