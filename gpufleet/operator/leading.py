"""The Lease fence of the operator's handlers: a replica whose Lease was not renewed within its
duration (an API server or etcd outage, a paused process) must not act, since a standby may
have taken over meanwhile; the pass is retried once the Lease is renewed."""

from __future__ import annotations

from collections.abc import Callable

import kopf

FENCE_RETRY_S = 1.0


def always() -> bool:
    """The fence of a process that does not elect a leader (unit tests, a single replica)."""
    return True


def ensure_leading(may_act: Callable[[], bool]) -> None:
    """Raise kopf's TemporaryError (the pass is retried) unless this replica may act."""
    if not may_act():
        raise kopf.TemporaryError(
            "the Lease was not renewed within its duration; waiting to lead again",
            delay=FENCE_RETRY_S,
        )
