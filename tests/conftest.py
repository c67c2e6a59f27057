"""Shared test helpers: the repository root and the shared data folder beside it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

# The processes the tests start (the operator, the CLI, the node agent) run this checkout's
# code, as the test process does (pyproject's `pythonpath`), whichever checkout the installed
# package points at: a second worktree's tests would otherwise drive the first one's operator.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Everything under tests/integration needs the sandbox; mark it so `-m "not integration"`
    # selects the quick tests.
    for item in items:
        if "integration" in item.path.parts:
            item.add_marker(pytest.mark.integration)
