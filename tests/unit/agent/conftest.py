"""Fixtures for the device-plugin tests: a fake kubelet in a short socket folder."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakekubelet import FakeKubelet


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # Unix socket paths are limited to 107 bytes; pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="dp-") as tmp:
        yield Path(tmp)


@pytest.fixture
def kubelet(socket_dir: Path) -> Iterator[FakeKubelet]:
    fake = FakeKubelet(socket_dir / "device-plugins")
    fake.start()
    yield fake
    fake.stop()
