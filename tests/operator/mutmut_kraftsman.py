"""Under `mutmut run`: make the operator's tests exercise mutmut's copy of ``kraftsman``.

mutmut copies ``operator/kraftsman`` to ``mutants/operator/kraftsman`` and names each mutant
after the file's path (``operator.kraftsman.reconcile.x_plan_of__mutmut_3``), but the package
imports as ``kraftsman`` (``operator`` is a stdlib module, and the editable install maps
``kraftsman`` to the original sources). Without help the tests import the original code and
mutmut's trampolines never switch a mutant on: every mutant "survives".

:func:`use_mutants` (called by conftest.py before anything imports ``kraftsman``) puts the
mutated copy first on ``sys.path`` and translates between the two names where mutmut's
trampoline reads the active mutant and records which tests call which function. Outside a
mutmut run it does nothing. Tests that start the operator as a subprocess still run the
original code: the mutation run relies on the in-process tests (pyproject ``[tool.mutmut]``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

PATH_NAME = "operator."  # the prefix mutmut's names carry (the source directory)
PACKAGE = "kraftsman."


def _running_in_mutants() -> Path | None:
    """The ``mutants/`` directory when these tests run from mutmut's copy, else None."""
    root = Path(__file__).resolve().parents[2]
    if root.name != "mutants" or "mutmut" not in sys.modules:
        return None
    return root


def use_mutants() -> None:
    root = _running_in_mutants()
    if root is None:
        return
    source = root / "operator"
    if str(source) not in sys.path:
        sys.path.insert(0, str(source))
    loaded = sys.modules.get("kraftsman")
    if loaded is not None and source not in Path(str(loaded.__file__)).resolve().parents:
        raise RuntimeError(f"kraftsman was imported from {loaded.__file__} before "
                           f"{__name__}.use_mutants(): its mutants would not take effect")
    from mutmut.mutation import trampoline

    if getattr(trampoline, "_kraftsman_names", False):
        return
    active = trampoline.get_mutant_under_test
    record = getattr(trampoline, "record_trampoline_hit")  # noqa: B009 (not exported)

    def get_mutant_under_test() -> str:
        name = active()
        return name.removeprefix(PATH_NAME) if name.startswith(PATH_NAME + PACKAGE) else name

    def as_path_name(name: str | None) -> str | None:
        return PATH_NAME + name if name is not None and name.startswith(PACKAGE) else name

    def record_trampoline_hit(name: str, caller: str | None = None, **kw: Any) -> None:
        record(as_path_name(name) or name, caller=as_path_name(caller), **kw)

    trampoline.get_mutant_under_test = get_mutant_under_test
    setattr(trampoline, "record_trampoline_hit", record_trampoline_hit)  # noqa: B010
    trampoline._kraftsman_names = True  # type: ignore[attr-defined]
