"""`processes.is_ours` for children this interpreter started: ours while they run, also before
their exec, when their command line is still this interpreter's and names no marker."""

from __future__ import annotations

import sys
from pathlib import Path

from gpufleet.sandbox import processes


def test_a_running_child_is_ours_before_its_command_line_names_the_marker(tmp_path: Path) -> None:
    pid = processes.spawn([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "log")
    try:
        # The marker stands for what the command line says only after exec (e.g. a config
        # path): a child that runs is ours without it.
        assert processes.is_ours(pid, "a marker its command line does not carry")
    finally:
        processes.stop(pid, "time.sleep(60)")
    assert not processes.is_ours(pid, "time.sleep(60)")
    assert not processes.is_ours(pid, "a marker its command line does not carry")


def test_a_child_that_exited_is_not_ours(tmp_path: Path) -> None:
    pid = processes.spawn([sys.executable, "-c", "pass"], tmp_path / "log")
    processes._STARTED[pid].wait(30)
    assert not processes.is_ours(pid, sys.executable)
