"""The scheduler loop's stateful steps, in the order of `Scheduler.run_cycle`: the loop and the
admin API's what-if both go through `remembered` (phase 1) and `offer` (phase 3), so that the
what-if decides on the snapshot the scheduler would, with what the scheduler remembers.

`decision_view.py` holds the stateless snapshot steps; these use what a scheduler learns from
cycle to cycle (`StatefulSteps`). Phase 1, after `decision_view`:
1. `hold`: the GPUs reserved for moved gangs are shown held (`mover.held`);
2. `progress`: each movable running gang's progress: run time, expected remaining time from
   the finished run lengths seen, unsaved run time, restart time (`progress.ProgressTracker`),
   without which the core neither prices the work a service-tier eviction throws away
   (`borrowing.restarts_paid_back`) nor plans moves;
3. the service each gang of a queue has received (`attained.AttainedService`, stateless);
4. `protect_moves` (with moves enabled): the gangs the core could move that a
   PodDisruptionBudget protects are not disruptable;
5. `estimate`: the online workload estimate, every pending gang counted once
   (`arrivals.ArrivalTracker`).
Phase 3, after the heal phase (which the what-if does not take: it restarts nothing):
6. the heads (`offer.heads`, stateless);
7. of many identical gangs only as many as could fit, plus one (`offer.cap_identical`, past
   `cap_identical_above` offered gangs);
8. `take`: gangs with a reserved placement are not offered; once their old pods are gone they
   are bound there (`mover.taken`), if it passes the node filters and fits the nodes' CPU and
   memory (checked by step 1, `mover.held`: else the gang is offered, decided afresh);
9. a nominated gang whose wait ended, its planned placement still free, passing the node
   filters and fitting the nodes' CPU and memory beside what the moved gangs' reservations
   keep there (checked again by step 1: `nominated.refit`), held for it, is bound there
   rather than offered (`nominated.ready`).
The loop's steps (`LoopSteps`) update the scheduler's trackers; the admin API's
(`gpufleet.admin.steps`) only read them, or what the cluster shows when it runs standalone.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from gpufleet.core.decision import GangPlacement
from gpufleet.core.policy import Policy
from gpufleet.scheduler.arrivals import ArrivalTracker
from gpufleet.scheduler.attained import AttainedService
from gpufleet.scheduler.cache import CachedState
from gpufleet.scheduler.cluster_view import ClusterView, PendingGang
from gpufleet.scheduler.mover import GangMover
from gpufleet.scheduler.nominated import ready
from gpufleet.scheduler.offer import cap_identical, heads
from gpufleet.scheduler.progress import ProgressTracker

__all__ = ["LoopSteps", "Offer", "StatefulSteps", "offer", "remembered"]


class StatefulSteps(Protocol):
    """The steps that use what a scheduler remembers (module docstring, steps 1, 2, 4, 5, 7
    and 8)."""

    @property
    def cap_identical_above(self) -> int:
        """Past this many offered gangs, identical ones are capped (step 7)."""
        ...

    def hold(self, view: ClusterView) -> ClusterView: ...

    def progress(self, view: ClusterView) -> ClusterView: ...

    def protect_moves(self, view: ClusterView) -> ClusterView: ...

    def estimate(self, view: ClusterView) -> ClusterView: ...

    def take(
        self, view: ClusterView, offered: Sequence[PendingGang]
    ) -> tuple[list[PendingGang], list[GangPlacement], dict[str, PendingGang]]: ...


def remembered(
    view: ClusterView, policy: Policy, steps: StatefulSteps, attained: AttainedService
) -> ClusterView:
    """Phase 1 after `decision_view`: `view` as the core decides on it (steps 1-5)."""
    view = steps.progress(steps.hold(view))
    view = attained.attach(view, policy)
    if policy.moves.enabled:  # gangs a PodDisruptionBudget protects are not moved
        view = steps.protect_moves(view)
    return steps.estimate(view)


@dataclass(frozen=True, slots=True)
class Offer:
    """Phase 3's outcome: the gangs offered to the core; gang -> why it is not offered (those
    that say why); gang -> the identical gang offered in its place (capped); the reserved
    placements of moved gangs and the planned placements of nominated gangs whose wait ended
    to bind now, and those gangs by id."""

    gangs: list[PendingGang]
    waiting: dict[str, str]
    capped: dict[str, str]
    reserved: list[GangPlacement]
    reserved_by_id: dict[str, PendingGang]


def offer(
    view: ClusterView,
    state: CachedState,
    settling: Collection[str],
    policy: Policy,
    steps: StatefulSteps,
) -> Offer:
    """Phase 3: the gangs to offer the core (steps 6-9)."""
    offered, waiting = heads(view, state, settling)
    offered, capped = cap_identical(
        offered, view.snapshot, policy.allow_preemption, steps.cap_identical_above
    )
    offered, reserved, reserved_by_id = steps.take(view, offered)
    offered, planned, planned_by_id = ready(view, state.nominations, offered)
    return Offer(offered, waiting, capped, [*reserved, *planned], reserved_by_id | planned_by_id)


class LoopSteps:
    """The scheduler's own steps: they update its trackers and reservations. `cycle` is the
    cycle number (for the mover's log lines)."""

    def __init__(
        self,
        progress_tracker: ProgressTracker,
        mover: GangMover,
        arrivals: ArrivalTracker,
        cap_identical_above: int,
        cycle: int = 0,
    ) -> None:
        self.progress_tracker = progress_tracker
        self.mover = mover
        self.arrivals = arrivals
        self.cap_identical_above = cap_identical_above
        self.cycle = cycle

    def hold(self, view: ClusterView) -> ClusterView:
        return self.mover.hold(view)

    def progress(self, view: ClusterView) -> ClusterView:
        self.progress_tracker.observe(view.facts.values())
        return self.progress_tracker.attach(view)

    def protect_moves(self, view: ClusterView) -> ClusterView:
        return self.mover.protect(view, self.cycle)

    def estimate(self, view: ClusterView) -> ClusterView:
        # Every pending gang counts, offered or not (arrivals.py): the estimate sees them all.
        self.arrivals.observe(pg.gang for pg in view.pending)
        return replace(view, snapshot=self.arrivals.with_estimate(view.snapshot))

    def take(
        self, view: ClusterView, offered: Sequence[PendingGang]
    ) -> tuple[list[PendingGang], list[GangPlacement], dict[str, PendingGang]]:
        return self.mover.take(view, offered)
