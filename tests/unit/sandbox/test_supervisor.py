"""The sandbox's supervisor as a real process: it restarts a child that dies (counting the
restarts, backing off after short runs), keeps the count across supervisors of one status file,
and on SIGTERM stops its child and never starts it again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.sandbox import processes, supervisor


def test_backoff_doubles_after_short_runs_and_resets_after_a_stable_one() -> None:
    waits = [supervisor.next_backoff(0.0, 0.1)]
    for _ in range(8):
        waits.append(supervisor.next_backoff(waits[-1], 0.1))
    assert waits[:4] == [0.5, 1.0, 2.0, 4.0]
    assert max(waits) == supervisor.BACKOFF_MAX_S
    assert supervisor.next_backoff(supervisor.BACKOFF_MAX_S, supervisor.STABLE_RUN_S) == 0.5


def _wait(check: object, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def supervised(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A supervisor of a long sleep (marked so its PID can be told apart)."""
    status = tmp_path / "child.json"
    marker = f"supervised-{tmp_path.name}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufleet.sandbox.supervisor", f"--status={status}", "--",
         sys.executable, "-c", f"import time; time.sleep(300)  # {marker}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        yield proc, status
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        child = supervisor.read_status(status).get("pid")
        if child is not None:
            processes.kill(int(child), marker)


def _child(status: Path) -> int | None:
    pid = supervisor.read_status(status).get("pid")
    return None if pid is None else int(pid)


def test_a_killed_child_is_started_again_and_counted(
    supervised: tuple[subprocess.Popen[bytes], Path],
) -> None:
    proc, status = supervised
    _wait(lambda: _child(status), "the first child")
    first = _child(status)
    assert first is not None
    os.kill(first, signal.SIGKILL)
    _wait(lambda: _child(status) not in (None, first), "a restarted child")
    doc = supervisor.read_status(status)
    assert doc["restarts"] == 1
    assert doc["last_exit"] == -signal.SIGKILL
    assert proc.poll() is None


def test_sigterm_stops_the_child_and_nothing_is_restarted(
    supervised: tuple[subprocess.Popen[bytes], Path],
) -> None:
    proc, status = supervised
    _wait(lambda: _child(status), "the first child")
    child = _child(status)
    assert child is not None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    doc = supervisor.read_status(status)
    assert doc["pid"] is None and doc["restarts"] == 0
    assert doc["last_exit"] == -signal.SIGTERM
    time.sleep(supervisor.BACKOFF_START_S * 2)  # past the first restart's back-off
    assert not processes.is_ours(child, "time.sleep(300)")


def test_the_count_survives_a_new_supervisor_of_the_same_file(tmp_path: Path) -> None:
    status = tmp_path / "s.json"
    status.write_text('{"pid": null, "restarts": 4, "last_exit": 1, "argv": ["x"]}')
    assert supervisor.Supervisor(["true"], status).status["restarts"] == 4
