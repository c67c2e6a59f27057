"""Start, track and stop the sandbox's background processes by PID.

Processes run in their own session so they outlive `gpufleet sandbox up`; they are found again
through the PIDs recorded in the state file, and a PID only counts as ours while its command line
still names the binary we started (a recycled PID is never signalled).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


# The processes this interpreter started, by PID: their Popen objects are kept and reaped
# through (a Popen dropped while its process runs warns that it is still running).
_STARTED: dict[int, subprocess.Popen[bytes]] = {}


def spawn(
    argv: list[str], log: Path, env: dict[str, str] | None = None, append: bool = False
) -> int:
    """Start `argv` detached, its output written to `log` (a fresh log unless `append`);
    returns its PID."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab" if append else "wb") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    _STARTED[proc.pid] = proc
    return proc.pid


def _reap(pid: int) -> None:
    # When the caller is the parent (pytest's fixture), collect the exit status so the PID does
    # not linger as a zombie; for processes started by another `gpufleet` run this is a no-op.
    proc = _STARTED.get(pid)
    if proc is not None:
        if proc.poll() is not None:
            del _STARTED[pid]
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def is_ours(pid: int, marker: str) -> bool:
    """Whether `pid` is alive and its command line contains `marker`; a child this interpreter
    started and has not reaped is ours while it runs, whatever its command line says: until
    its exec it shows this interpreter's (a check right after `spawn` once took a starting
    Prometheus for one that had exited), and its PID cannot be reused before it is reaped."""
    proc = _STARTED.get(pid)
    if proc is not None:
        if proc.poll() is None:
            return True
        del _STARTED[pid]
        return False
    _reap(pid)
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z" and marker in cmdline


def stop(pid: int, marker: str, timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after `timeout`; only if the PID is still the process we started."""
    if not is_ours(pid, marker):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_ours(pid, marker):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    while is_ours(pid, marker):
        time.sleep(0.05)


def kill(pid: int, marker: str) -> None:
    """SIGKILL at once (a crash, not a shutdown) and wait until it is gone; only if the PID is
    still the process we started."""
    if not is_ours(pid, marker):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    while is_ours(pid, marker):
        time.sleep(0.05)


def wait_until(
    check: Callable[[], bool], what: str, timeout: float, log: Path | None = None
) -> None:
    """Poll `check` until true; on timeout raise with the tail of `log` to say why."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.2)
    tail = ""
    if log is not None and log.exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        tail = f"\nlast lines of {log.name}:\n{tail}"
    raise TimeoutError(f"{what} not ready after {timeout:.0f}s{tail}")
