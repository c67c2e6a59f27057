"""A replica that saw another one take its Lease must be gone soon: the new leader already acts,
and a process whose graceful shutdown hangs (kopf waits for its timers and handlers to finish)
would stay up with stale caches. This is the bound on that shutdown, as client-go's leader
election exits the process at once; nothing is lost by exiting, since every part of the state
is rebuilt from the cluster by the next start."""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import sys
import threading
from collections.abc import Callable

log = logging.getLogger("gpufleet.operator")

# Seconds a replica that lost its Lease may take to stop gracefully before it exits by force.
STAND_DOWN_S = 10.0


def exit_unless_stopped(
    stopped: threading.Event,
    grace_s: float = STAND_DOWN_S,
    hard_exit: Callable[[int], object] = os._exit,
) -> threading.Thread:
    """Start a watchdog: unless `stopped` is set within `grace_s`, print every thread's stack
    (what the shutdown waited on) and end the process with exit code 1."""

    def watch() -> None:
        if stopped.wait(grace_s):
            return
        log.error("not stopped %.0fs after losing the Lease; exiting now", grace_s)
        # A stderr without a file descriptor must not keep the process up.
        with contextlib.suppress(OSError, ValueError):
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        logging.shutdown()
        hard_exit(1)

    watchdog = threading.Thread(target=watch, name="stand-down", daemon=True)
    watchdog.start()
    return watchdog
