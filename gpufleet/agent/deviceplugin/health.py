"""Device health: which devices are unhealthy, and a way for streams to wait for a change.

Tests and operators mark devices unhealthy through a health file: one device id per line
(`3` for GPU 3, `3:1` for a MIG device; blank lines and `#` comments ignored). A GPU listed there
takes its MIG devices down with it, as an XID error on a real GPU does. The plugin re-reads the
file when it changes and at once on SIGHUP.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path

from gpufleet.agent.deviceplugin.devices import FakeDevice

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


def read_health_file(path: Path) -> frozenset[str]:
    """The device ids the file lists; a missing file means every device is healthy."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return frozenset()
    ids = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return frozenset(i for i in ids if i)


def unhealthy_devices(listed: Iterable[str], devices: Iterable[FakeDevice]) -> frozenset[str]:
    """Ids of the devices that are down: those listed, and every device on a listed GPU."""
    marked = set(listed)
    return frozenset(d.id for d in devices if d.id in marked or str(d.gpu) in marked)


class DeviceHealth:
    """The current set of unhealthy device ids, versioned so that watchers can wait for a change."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._unhealthy: frozenset[str] = frozenset()
        self._version = 0
        self._closed = False

    def set_unhealthy(self, ids: frozenset[str]) -> bool:
        """Replace the unhealthy set; True when it changed (watchers are then woken)."""
        with self._cond:
            if ids == self._unhealthy:
                return False
            self._unhealthy = ids
            self._version += 1
            self._cond.notify_all()
            return True

    def current(self) -> tuple[int, frozenset[str]]:
        with self._cond:
            return self._version, self._unhealthy

    def wait_change(self, seen: int, timeout: float) -> tuple[int, frozenset[str]] | None:
        """The state once its version differs from `seen`; None on timeout or after close()."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self._version != seen, timeout)
            if self._closed or self._version == seen:
                return None
            return self._version, self._unhealthy

    def close(self) -> None:
        """Wake every watcher for good (the plugin is stopping)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        with self._cond:
            return self._closed
