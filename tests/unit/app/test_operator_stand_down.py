"""The bound on a replica's shutdown after it lost its Lease (app/stand_down.py)."""

from __future__ import annotations

import threading

import pytest

from gpufleet.app.stand_down import exit_unless_stopped


def test_a_shutdown_that_finishes_in_time_is_left_alone() -> None:
    stopped, codes = threading.Event(), []
    watchdog = exit_unless_stopped(stopped, grace_s=5.0, hard_exit=codes.append)
    stopped.set()
    watchdog.join(2.0)
    assert not watchdog.is_alive()
    assert codes == []


def test_a_hung_shutdown_ends_the_process_with_code_1_and_its_stacks(
    capfd: pytest.CaptureFixture[str],
) -> None:
    stopped, codes = threading.Event(), []
    watchdog = exit_unless_stopped(stopped, grace_s=0.2, hard_exit=codes.append)
    watchdog.join(5.0)
    assert codes == [1]
    # Every thread's stack is printed, so a hang can be diagnosed from the log.
    assert "test_a_hung_shutdown_ends_the_process" in capfd.readouterr().err
