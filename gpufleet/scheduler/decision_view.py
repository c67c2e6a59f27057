"""The view the core decides on, from the one `ViewBuilder.build_state` makes of the cache.

The scheduler's snapshot phase (loop.py, phase 1) and the admin API's what-if both go through
`decision_view`, so a what-if decides on what the scheduler would:
1. nodes holding a pod the ledger could not account for are closed to new pods
   (`hide_overcommitted`: their GPUs would look free);
2. with idle-node power-down, nodes marked off or waking are closed, with their boot times
   (`PowerMarks.hide_marked`);
3. nodes this process asked for a MIG layout are closed until it is applied
   (`hide_reconfiguring`);
4. the running gangs a PodDisruptionBudget protects are kept from preemption (`protect`): the
   scheduler learns them from the evictions a budget refused (`VictimEvictor.without_protected`);
   a what-if, which evicts nothing, reads the budgets instead (`budget_protected`), as the mover
   does for the gangs it could move. A gang a budget protects is thus never named as a victim:
   the scheduler would not evict it, and would pick another victim or wait;
5. the GPUs planned for each nominated gang (waiting for its victims, or gangs moved for it,
   to exit) that no pod holds are held for it (`nominated.hold`), so no gang takes them but
   one that could preempt it, which evicts nothing (`nominated.taken`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import replace

from gpufleet.core.policy import Policy
from gpufleet.scheduler.cache import CachedState
from gpufleet.scheduler.cluster_view import ClusterView, hide_overcommitted
from gpufleet.scheduler.disruption import Obj, gang_blocked
from gpufleet.scheduler.nominated import hold
from gpufleet.scheduler.power_marks import PowerMarks
from gpufleet.scheduler.repartition import hide_reconfiguring

__all__ = ["blocked_by_budget", "budget_protected", "decision_view"]


def decision_view(
    view: ClusterView,
    state: CachedState,
    policy: Policy,
    protect: Callable[[ClusterView], ClusterView],
    power: PowerMarks | None = None,
) -> ClusterView:
    """`view` (built from `state`) as the core decides on it (module docstring, steps 1-5)."""
    view = hide_overcommitted(view)
    if power is not None:
        view = power.hide_marked(view, power.marks(state.nodes), policy)
    view = hide_reconfiguring(view, state)
    return hold(protect(view), state.nominations)


def budget_protected(
    view: ClusterView, gangs: Collection[str], budgets: Sequence[Obj] | None
) -> ClusterView:
    """`view` with each of the running `gangs` not `disruptable` when a PodDisruptionBudget
    would not let all of its pods go now (`disruption.gang_blocked`, the check evictions
    make); all of them when the budgets could not be read (None)."""
    blocked = {
        gid
        for gid in gangs
        if budgets is None or blocked_by_budget(view, gid, budgets, {}) is not None
    }
    if not blocked:
        return view
    snapshot = view.snapshot
    running = tuple(
        replace(g, disruptable=False) if g.id in blocked else g for g in snapshot.running
    )
    return replace(view, snapshot=replace(snapshot, running=running))


def blocked_by_budget(
    view: ClusterView, gid: str, budgets: Sequence[Obj], spent: dict[str, int]
) -> str | None:
    """Why a budget would refuse to let all of running gang `gid`'s pods go now, given the
    disruptions already `spent` per budget (`disruption.gang_blocked`); None when it would not."""
    pods = [f.pod for k in view.running_pods.get(gid, ()) if (f := view.facts.get(k))]
    return gang_blocked(pods, budgets, spent)
