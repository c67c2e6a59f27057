"""Shared test helpers: the repository root and the shared data folder beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Everything under tests/integration needs the sandbox; mark it so `-m "not integration"`
    # selects the quick tests.
    for item in items:
        if "integration" in item.path.parts:
            item.add_marker(pytest.mark.integration)
