"""The live scheduler's online workload estimate (issue 14): the request shapes seen so far.

The core weighs fragmentation (FGD) and keeps node-shaped reserves against the workload it is
told to expect (`Snapshot.workload`, `gpufleet.core.workload`). Here every gang is counted once,
the first cycle it is offered, into decayed counts over about the last `window` tasks, so the
estimate follows the arrivals the scheduler has seen and never anything else. It starts empty at
each process start (no estimate, no fragmentation term) until gangs have been seen; a prior
persisted across restarts is not kept yet.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import replace

from gpufleet.core.demand import Gang
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.workload import ArrivalCounts

__all__ = ["WINDOW_TASKS", "ArrivalTracker"]

# The simulator's default window (`SimSettings.workload_window`), measured by bench/robustness.py.
WINDOW_TASKS = 2000.0


class ArrivalTracker:
    """Counts each gang once and hands the estimate to the core's snapshot."""

    def __init__(self, window: float = WINDOW_TASKS, remember: int = 20_000) -> None:
        self.counts = ArrivalCounts(window)
        # Gang ids already counted (oldest forgotten first): a gang that waits for many cycles,
        # or is preempted and pending again, is one arrival.
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._remember = remember

    def observe(self, gangs: Iterable[Gang]) -> None:
        """Count the gangs not seen before; `<gang>#rest` (the rest of a partly bound gang) is
        part of a gang already counted."""
        new = [g for g in gangs if g.id not in self._seen and "#" not in g.id]
        for gang in new:
            self._seen[gang.id] = None
        while len(self._seen) > self._remember:
            self._seen.popitem(last=False)
        self.counts = self.counts.observed_gangs(new)

    def with_estimate(self, snapshot: Snapshot) -> Snapshot:
        """`snapshot` with the estimate so far (unchanged while nothing has been seen)."""
        estimate = self.counts.estimate()
        return replace(snapshot, workload=estimate) if estimate.shapes else snapshot
