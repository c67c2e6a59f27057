"""The live scheduler's online workload estimate (issue 14): the request shapes seen so far.

The core weighs fragmentation (FGD) and keeps node-shaped reserves against the workload it is
told to expect (`Snapshot.workload`, `gpufleet.core.workload`). Here every gang is counted once,
the first cycle it is offered, into decayed counts over about the last `window` tasks, so the
estimate follows the arrivals the scheduler has seen and never anything else. With a store
(`estimate_store.py`) the counts are kept in a ConfigMap at most every `save_every_s` while they
change, and a new process (a restart, or a standby taking over the Lease) starts from them: the
prior from history. Without one, or before anything was kept, it starts empty (no estimate, no
fragmentation term) until gangs have been seen.

The admin API's what-if reads a running scheduler's tracker from another thread
(`with_arrivals`): the estimate as the scheduler's next cycle would make it, with the gangs it
has not counted yet counted, and nothing counted or kept for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Protocol

from gpufleet.core.demand import Gang
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.workload import ArrivalCounts

__all__ = ["WINDOW_TASKS", "ArrivalTracker", "CountsStore", "with_counts"]

log = logging.getLogger("gpufleet.scheduler")

# The simulator's default window (`SimSettings.workload_window`), measured by bench/robustness.py.
WINDOW_TASKS = 2000.0


class CountsStore(Protocol):
    """Where the counts outlive the process (`estimate_store.EstimateStore`)."""

    def load(self) -> ArrivalCounts | None: ...

    def save(self, counts: ArrivalCounts) -> None: ...


class ArrivalTracker:
    """Counts each gang once and hands the estimate to the core's snapshot."""

    def __init__(
        self,
        window: float = WINDOW_TASKS,
        remember: int = 20_000,
        store: CountsStore | None = None,
        save_every_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        restored = store.load() if store is not None else None
        # The stored counts under this process's window (a changed setting applies at once).
        self.counts = ArrivalCounts(window, dict(restored.counts) if restored else {})
        if restored is not None:
            log.info("workload estimate restored: %d request shapes", len(restored.counts))
        # Gang ids already counted (oldest forgotten first): a gang that waits for many cycles,
        # or is preempted and pending again, is one arrival.
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._remember = remember
        self._store = store
        self._save_every_s = save_every_s
        self._clock = clock
        self._saved_at: float | None = None
        self._unsaved = False
        # Guards `counts` and `_seen` (the admin API reads them from its own threads).
        self._lock = threading.Lock()

    def _new(self, gangs: Iterable[Gang]) -> list[Gang]:
        """The gangs not counted before; `<gang>#rest` (the rest of a partly bound gang) is
        part of a gang already counted. Under the lock."""
        return [g for g in gangs if g.id not in self._seen and "#" not in g.id]

    def observe(self, gangs: Iterable[Gang]) -> None:
        """Count the gangs not seen before. Keeps the counts in the store when due."""
        with self._lock:
            new = self._new(gangs)
            for gang in new:
                self._seen[gang.id] = None
            while len(self._seen) > self._remember:
                self._seen.popitem(last=False)
            if new:
                self.counts = self.counts.observed_gangs(new)
                self._unsaved = True
        self._save_when_due()

    def _save_when_due(self) -> None:
        if self._store is None or not self._unsaved:
            return
        now = self._clock()
        if self._saved_at is not None and now - self._saved_at < self._save_every_s:
            return
        self._saved_at = now  # a failed write is tried again a period later, not every cycle
        try:
            self._store.save(self.counts)
        except Exception as exc:  # an outage or a refusal must not stop scheduling
            log.warning("workload estimate not kept (again in %.0fs): %s", self._save_every_s, exc)
            return
        self._unsaved = False

    def with_estimate(self, snapshot: Snapshot) -> Snapshot:
        """`snapshot` with the estimate so far (unchanged while nothing has been seen)."""
        return with_counts(snapshot, self.counts)

    def with_arrivals(self, snapshot: Snapshot, gangs: Iterable[Gang]) -> Snapshot:
        """`snapshot` with the estimate `observe(gangs)` then `with_estimate` would give, with
        nothing counted (a read for another thread: the admin API's what-if)."""
        with self._lock:
            new, counts = self._new(gangs), self.counts
        return with_counts(snapshot, counts.observed_gangs(new) if new else counts)


def with_counts(snapshot: Snapshot, counts: ArrivalCounts) -> Snapshot:
    """`snapshot` with the estimate of `counts` (unchanged while nothing has been counted)."""
    estimate = counts.estimate()
    return replace(snapshot, workload=estimate) if estimate.shapes else snapshot
