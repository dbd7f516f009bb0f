"""Errors the CLI reports to a person: one line per problem on stderr, exit code 2."""

from __future__ import annotations

import importlib
import importlib.util

# Modules of the optional extras (pyproject.toml), and the extra that brings each.
OPTIONAL_MODULES = {
    "kopf": "operator", "kubernetes": "operator",
    "pyspark": "plan", "pandas": "plan", "pyarrow": "plan", "matplotlib": "plan", "numpy": "plan",
}


class UsageError(Exception):
    """Bad input. Each problem names the resource and the field, and says how to fix it."""

    exit_code = 2

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


def missing_extra(command: str, module: str) -> str | None:
    """The message for `kraftsman COMMAND` lacking ``module``, or None if no extra brings it."""
    top = module.split(".")[0]
    extra = OPTIONAL_MODULES.get(top)
    if extra is None:
        return None
    return (f"`kraftsman {command}` needs {top}, which comes with the '{extra}' extra: "
            f"pip install 'kraftsman[{extra}]'")


# Looked up, not imported, by require_extra: importing pyspark costs a second or more, and a
# plan that runs on the driver never needs it (an import that fails later is still named
# by the CLI's handler of ModuleNotFoundError, through missing_extra)
FOUND_NOT_IMPORTED = frozenset({"pyspark"})


def require_extra(command: str, extra: str) -> None:
    """Check up front that an extra is installed, so its absence is named as such — not
    reported later as, say, an unreadable Parquet file."""
    for module in sorted(m for m, e in OPTIONAL_MODULES.items() if e == extra):
        if module in FOUND_NOT_IMPORTED:
            if importlib.util.find_spec(module) is None:
                raise UsageError(missing_extra(command, module) or module)
            continue
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            raise UsageError(missing_extra(command, e.name or module) or str(e)) from None
