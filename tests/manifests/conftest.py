"""Fixtures for the CRD / manifest / chart tests (helpers live in k8s_schemas)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from k8s_schemas import cr_errors, crd_index


@pytest.fixture(scope="session")
def crds() -> dict[tuple[str, str], dict[str, Any]]:
    return crd_index()


@pytest.fixture(scope="session")
def validate_cr(crds: dict[tuple[str, str], dict[str, Any]]) -> Callable[[dict[str, Any]],
                                                                         list[str]]:
    return lambda obj: cr_errors(obj, crds)
