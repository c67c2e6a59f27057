"""At most two glibc malloc arenas in a `gpufleet operator` process.

glibc gives a thread that finds the arenas busy an arena of its own, up to eight per core, and
memory freed in one arena serves only the threads of that arena. The operator runs some fifty
threads (kopf's executor, the pod-creation pool, the binder, the informers), and pools grow
thread by thread as bursts of work come; in the soak's runs resident memory grew with the
number of threads (32 -> 43 threads and 222 -> 239 MiB over some 1,450 short jobs on 200
nodes) while the number of live Python objects stayed flat. Two arenas keep the freed memory
shared: in a stand-alone test of the same pattern (32 threads decoding and keeping JSON
objects, 2,000 live) resident memory was 93 MiB with two arenas against 108 MiB with glibc's
default, and 80 MiB with two threads. `MALLOC_ARENA_MAX` in the environment, which glibc reads
itself, wins. Elsewhere than glibc nothing is done.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

__all__ = ["ARENAS", "limit_arenas"]

ARENAS = 2
_M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)


def limit_arenas(arenas: int = ARENAS, libc: Any = None) -> bool:
    """Cap glibc's malloc arenas at `arenas` (call before the process starts threads); whether
    the cap was set. Nothing when `MALLOC_ARENA_MAX` is set or the C library has no mallopt."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        lib = libc if libc is not None else ctypes.CDLL(None)
        mallopt = lib.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_ARENA_MAX, arenas))
