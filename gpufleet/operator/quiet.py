"""Passes that plan first from what the process watches (TrainingJob and ServingJob).

A timer pass over a job first asks a check, with no API call, whether acting could change
anything: it plans from the body kopf watched and the job's children as the process's watches
show them. Only a check that says yes makes the pass take the job's lock and read afresh
(`fresh_read`). A check that said no is remembered (`QuietPasses`): the resourceVersions it saw
(the job's and its children's), the pods whose GPU time it charged, and when time alone may call
for a pass (a TTL, a deadline, an autoscaler tick, usage totals due); while none of that
changes, the next check answers no without planning again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpufleet.operator.accounting import UsageLedger

__all__ = ["Check", "Quiet", "QuietPasses", "versions"]

Obj = dict[str, Any]
# A check planned afresh: whether a pass would act, and (when not) the time after which it may.
Check = Callable[[], tuple[bool, datetime | None]]


def versions(*objects: Iterable[Mapping[str, Any]]) -> tuple[Any, ...]:
    """The resourceVersions of `objects` (groups of watched objects), in order."""
    return tuple(o["metadata"].get("resourceVersion") for group in objects for o in group)


@dataclass(frozen=True, slots=True)
class Quiet:
    """What a check that found nothing to do saw: the resourceVersions, the pods (to charge
    their GPU time up to the next check that sees them change), and when time alone may call
    for a pass."""

    seen: tuple[Any, ...]
    pods: list[Obj]
    until: datetime | None


class QuietPasses:
    """Per job uid, the last check that found nothing to do."""

    def __init__(self, usage: UsageLedger) -> None:
        self.usage = usage
        self._quiet: dict[str, Quiet] = {}
        self._guard = threading.Lock()

    def would_act(
        self, uid: str, seen: tuple[Any, ...], pods: list[Obj], now: datetime, check: Check
    ) -> bool:
        """Whether a pass over job `uid` would act: no while nothing in `seen` changed since a
        check that said no and nothing time-based is due; otherwise `check()` decides. `pods`
        are the job's pods that draw GPU time (charged up to `now` when they changed)."""
        with self._guard:
            quiet = self._quiet.pop(uid, None)
        if quiet is not None:
            if quiet.seen == seen and (quiet.until is None or now < quiet.until):
                with self._guard:
                    self._quiet.setdefault(uid, quiet)
                return False
            self.usage.accrue(uid, quiet.pods, now)  # what ran until now, before the change
        acts, due = check()
        if acts:
            return True
        dues = [t for t in (due, self.usage.flush_at(uid)) if t is not None]
        with self._guard:
            self._quiet[uid] = Quiet(seen, pods, min(dues, default=None))
        return False

    def forget(self, uid: str) -> None:
        with self._guard:
            self._quiet.pop(uid, None)
