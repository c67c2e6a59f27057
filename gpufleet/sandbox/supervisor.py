"""Keeps one sandbox process running, as a kubelet keeps a pod's container running.

`python -m gpufleet.sandbox.supervisor --status FILE -- ARGV...` starts ARGV and, whenever it
exits on its own (a crash, a `kill -9`, an operator that lost its Lease), starts it again with
the same arguments after a back-off: 0.5 s doubling up to 16 s, back to 0.5 s once a run lasted
10 s. That is the kubelet's CrashLoopBackOff (10 s doubling to 5 minutes, reset after 10 minutes
running) scaled down for a local sandbox, where a component that died should be back within
seconds. The child's output goes where the supervisor's goes (the component's log).

The status FILE (JSON, replaced atomically) says what runs: the child's `pid` (None while it
waits to restart), `restarts` (kept across supervisors of the same file, so a component that is
stopped and started on purpose keeps its count), `last_exit` (the exit status, negative for a
signal) and `argv`.

SIGTERM or SIGINT stops supervision for good: the child gets SIGTERM (SIGKILL after
`STOP_TIMEOUT_S`) and the supervisor exits without starting it again, so `sandbox down`
stopping the supervisor never races a restart.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

BACKOFF_START_S = 0.5
BACKOFF_MAX_S = 16.0
STABLE_RUN_S = 10.0  # a run this long resets the back-off
STOP_TIMEOUT_S = 15.0


def read_status(path: Path) -> dict[str, Any]:
    """The status a supervisor wrote, or an empty dict (none yet, or half gone)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _write_status(path: Path, status: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(status))
    tmp.replace(path)


def next_backoff(previous: float, ran_s: float) -> float:
    """The wait before the next start: doubled after a short run, reset after a stable one."""
    if ran_s >= STABLE_RUN_S or previous <= 0:
        return BACKOFF_START_S
    return min(previous * 2, BACKOFF_MAX_S)


class Supervisor:
    def __init__(self, argv: list[str], status_file: Path) -> None:
        self.argv = argv
        self.status_file = status_file
        previous = read_status(status_file)
        self.status: dict[str, Any] = {
            "pid": None,
            "restarts": int(previous.get("restarts") or 0),
            "last_exit": previous.get("last_exit"),
            "argv": argv,
        }
        self.stopping = threading.Event()
        self.child: subprocess.Popen[bytes] | None = None

    def stop(self, *_: object) -> None:
        """Signal handler: stop supervising and ask the child to exit."""
        self.stopping.set()
        child = self.child
        if child is not None and child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGTERM)

    def _start(self) -> subprocess.Popen[bytes]:
        child = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL)
        self.child = child
        self.status["pid"] = child.pid
        _write_status(self.status_file, self.status)
        return child

    def _wait(self, child: subprocess.Popen[bytes]) -> int:
        while True:
            try:
                return child.wait(timeout=None if not self.stopping.is_set() else STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    child.kill()

    def run(self) -> int:
        backoff = 0.0
        while not self.stopping.is_set():
            started = time.monotonic()
            child = self._start()
            if self.stopping.is_set():  # a stop that came while the child was being started
                self.stop()
            code = self._wait(child)
            self.status.update(pid=None, last_exit=code)
            if self.stopping.is_set():
                break
            backoff = next_backoff(backoff, time.monotonic() - started)
            self.status["restarts"] += 1
            _write_status(self.status_file, self.status)
            print(
                f"[supervisor] {self.argv[0]} exited with {code}; restart "
                f"{self.status['restarts']} in {backoff:.1f}s",
                file=sys.stderr,
                flush=True,
            )
            self.stopping.wait(backoff)
        _write_status(self.status_file, self.status)
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpufleet.sandbox.supervisor")
    parser.add_argument("--status", type=Path, required=True, help="status file (JSON)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- ARGV...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to supervise")
    supervisor = Supervisor(command, args.status)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, supervisor.stop)
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
