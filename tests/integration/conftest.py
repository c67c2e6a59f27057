"""One real sandbox control plane for the whole integration test session.

It is started in a private state directory (never the user's own sandbox) and stopped when the
session ends. If the binaries cannot be built or the cluster does not come up, every test that
uses it errors with the reason: nothing is skipped.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpufleet.sandbox.binaries import BuildError
from gpufleet.sandbox.cluster import Sandbox


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """A running sandbox with the default fleet and gpufleet's CRDs installed."""
    sbx = Sandbox(tmp_path_factory.mktemp("sandbox"))
    try:
        sbx.up(progress=lambda msg: print(f"[sandbox] {msg}"))
    except BuildError as exc:
        sbx.down(progress=lambda _: None)
        pytest.fail(f"cannot build the sandbox's control-plane binaries: {exc}", pytrace=False)
    except Exception as exc:
        sbx.down(progress=lambda _: None)
        pytest.fail(f"the sandbox did not start: {exc}", pytrace=False)
    yield sbx
    sbx.down(progress=lambda _: None)
