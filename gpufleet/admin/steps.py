"""The what-if's stateful steps (`scheduler.stateful_steps`): what the scheduler remembers from
cycle to cycle, read and never changed.

Beside the scheduler (`gpufleet operator`, `BesideScheduler`), the scheduler's own state,
read from the API's threads:
- progress: a copy of its `ProgressTracker` (the finished run lengths it has seen, copied
  under the tracker's lock), which observes the cache's pods as its next cycle would;
- the GPUs reserved for moved gangs: its `GangMover`'s reservations (a mapping the mover
  replaces whole, never changes), shown held (`mover.held`) and taken (`mover.taken`) without
  dropping or binding any; a gang whose reservation `held` would drop, or the mover dropped
  in an earlier cycle (`GangMover.dropped`), says why in its pending message, as the
  scheduler writes it on its pods (`mover.with_dropped`, which `GangMover.explain` uses too),
  unless its reason changed since (`GangMover.said`);
- the workload estimate: its `ArrivalTracker`'s counts with the pending gangs it has not counted
  yet (the manifest's among them) counted, nothing kept (`ArrivalTracker.with_arrivals`);
- the cap on identical gangs: its `scheduler.cap_identical_above`.
Standalone (`gpufleet admin`, `Standalone`), what the cluster shows:
- progress: a `ProgressTracker` of the API's own, which observes the pods it sees at each
  what-if: the run lengths it knows are those of the Succeeded pods in the cluster then (the
  scheduler also remembers those it saw before they were deleted, and restarts with none), so
  a running gang's expected remaining time may differ from the scheduler's;
- the workload estimate: the counts the scheduler keeps in its ConfigMap (`estimate_store.py`,
  written at most every `scheduler.estimate_save_s` while they change; none when it is not
  kept), read at each what-if, with the manifest's gangs counted: the gangs that arrived since
  the last write are missing from it;
- the cap on identical gangs: the settings' `scheduler.cap_identical_above`;
- the GPUs reserved for moved gangs are not knowable (the scheduler keeps them in memory only):
  they look free, and a gang waiting for its reserved placement is offered like any other
  (nor is why a reservation was dropped).
In both, the moves a PodDisruptionBudget forbids (step 4) need nothing more: the what-if reads
the budgets of every preemptible running gang before these steps (`live.protected`), and the
gangs the core could move are among them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from gpufleet.core.decision import GangPlacement
from gpufleet.core.workload import ArrivalCounts
from gpufleet.model.contract.reasons import WaitReason
from gpufleet.scheduler.arrivals import WINDOW_TASKS, CountsStore, with_counts
from gpufleet.scheduler.cluster_view import ClusterView, PendingGang
from gpufleet.scheduler.loop import Scheduler
from gpufleet.scheduler.loop_settings import SchedulerSettings
from gpufleet.scheduler.mover import Reservation, dropped_texts, held, taken, with_dropped
from gpufleet.scheduler.progress import ProgressTracker
from gpufleet.scheduler.stateful_steps import StatefulSteps

__all__ = ["BesideScheduler", "ReadSteps", "Standalone", "StepsSource", "WhatIfSteps"]

Estimate = Callable[[ClusterView], ClusterView]


class WhatIfSteps(StatefulSteps, Protocol):
    """The stateful steps, and what the scheduler adds to a waiting gang's reason from them."""

    def explain(self, pending: Mapping[str, str]) -> dict[str, str]:
        """`pending` (gang -> why it waits) as the scheduler writes it on the pods."""
        ...


class StepsSource(Protocol):
    """Gives each what-if its stateful steps; `arriving`: the ids of the manifest's gangs."""

    def look(self, arriving: Collection[str]) -> WhatIfSteps: ...


class ReadSteps:
    """One what-if's stateful steps: nothing they read is changed."""

    def __init__(
        self,
        cap_identical_above: int,
        tracker: ProgressTracker,
        estimate: Estimate,
        reservations: Mapping[str, Reservation] | None = None,
        now: float = 0.0,
        reserve_s: float = 0.0,
        dropped: Mapping[str, str] | None = None,
        said: Mapping[str, WaitReason | None] | None = None,
    ) -> None:
        self.cap_identical_above = cap_identical_above
        self.tracker = tracker
        self._estimate = estimate
        self.reservations: Mapping[str, Reservation] = reservations or {}
        self.now = now
        self.reserve_s = reserve_s
        # Gang -> why its move's reservation was dropped (`GangMover.dropped`), with those
        # `hold` drops added: what the scheduler's pending messages add (`explain`).
        self.dropped: Mapping[str, str] = dropped or {}
        # Gang -> the reason its message gave when that text was first added (`GangMover.said`):
        # a gang given another reason now no longer says it.
        self.said: Mapping[str, WaitReason | None] = said or {}

    def hold(self, view: ClusterView) -> ClusterView:
        if not self.reservations:
            return view
        # The reservations the scheduler would keep this cycle are those `take` then sees.
        reserved = self.reservations
        view, self.reservations, dropped, given_up = held(reserved, view, self.now, self.reserve_s)
        self.dropped = {**self.dropped, **dropped_texts(reserved, dropped), **given_up}
        self.said = {g: c for g, c in self.said.items() if g not in dropped and g not in given_up}
        return view

    def explain(self, pending: Mapping[str, str]) -> dict[str, str]:
        return with_dropped(pending, self.dropped, self.said)

    def progress(self, view: ClusterView) -> ClusterView:
        self.tracker.observe(view.facts.values())
        return self.tracker.attach(view)

    def protect_moves(self, view: ClusterView) -> ClusterView:
        return view  # read for every preemptible gang already (module docstring)

    def estimate(self, view: ClusterView) -> ClusterView:
        return self._estimate(view)

    def take(
        self, view: ClusterView, offered: Sequence[PendingGang]
    ) -> tuple[list[PendingGang], list[GangPlacement], dict[str, PendingGang]]:
        if not self.reservations:
            return list(offered), [], {}
        left = taken(self.reservations, view, offered)
        return left.offered, left.placements, left.by_id


class BesideScheduler:
    """The steps of a what-if beside the running `scheduler`, on its own state (read only)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def look(self, arriving: Collection[str]) -> ReadSteps:
        s = self.scheduler
        arrivals = s.arrivals  # read now: the runtime may replace it before the loop starts

        def estimate(view: ClusterView) -> ClusterView:
            gangs = [pg.gang for pg in view.pending]
            return replace(view, snapshot=arrivals.with_arrivals(view.snapshot, gangs))

        mover = s.mover
        return ReadSteps(
            s.settings.cap_identical_above,
            s.progress.copy(),
            estimate,
            mover.reservations,
            mover.clock(),
            mover.reserve_s,
            mover.dropped,
            mover.said,
        )


class Standalone:
    """The steps of a what-if without a scheduler in the process (module docstring)."""

    def __init__(self, settings: SchedulerSettings, store: CountsStore | None = None) -> None:
        self.cap_identical_above = settings.cap_identical_above
        self.tracker = ProgressTracker(settings.move_restart_s)
        self.store = store

    def look(self, arriving: Collection[str]) -> ReadSteps:
        kept = self.store.load() if self.store is not None else None
        # Under the scheduler's window, as a new leader starts from them (arrivals.py).
        counts = ArrivalCounts(WINDOW_TASKS, dict(kept.counts) if kept is not None else {})
        ours = set(arriving)

        def estimate(view: ClusterView) -> ClusterView:
            new = [pg.gang for pg in view.pending if pg.gang.id in ours]
            return replace(view, snapshot=with_counts(view.snapshot, counts.observed_gangs(new)))

        return ReadSteps(self.cap_identical_above, self.tracker, estimate)
