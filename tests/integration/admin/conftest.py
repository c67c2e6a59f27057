"""The admin API its modules share: a standalone server beside the module's operator."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from admin_helpers import AdminApi, admin_with_token

from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.operator import Kube, OperatorProcess


@pytest.fixture(scope="module")
def admin(
    sandbox: Sandbox,
    kube: Kube,
    operator: OperatorProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[AdminApi, str]]:
    """A standalone admin API (the module's operator schedules) and an all-routes token."""
    with admin_with_token(sandbox, kube, tmp_path_factory.mktemp("admin"), "admin") as made:
        yield made
