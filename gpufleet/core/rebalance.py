"""Rebalancing elastic jobs by marginal goodput: shrink an elastic job's growth for a gang that
adds more.

An elastic job grown past its minimum reaches the core as its minimum gang plus one unit per
replica beyond it (`borrowing.elastic_units`). A unit whose `demand` has `grows_from = i >= 1` is
the job's replica number i + 1: its value (`objective.running_value`) is the job's scaling
curve's step from i to i + 1 replicas, what the job loses if the unit goes. Preemption
(preempt.py) takes such units only for gangs of strictly higher priority; growth itself never
preempts. So without this rule a gang of the same priority (a new job, or another elastic job's
room to grow) waits while GPUs are held by replicas that add less to their job than they would
add to it: Pollux and Sia re-divide GPUs among jobs by goodput for this reason.

`shrink_for_pending`: for each gang still stuck after placement and preemption, the victims are
growth units of preemptible running jobs, of at most its priority, on a type and node it may use
(with queues, of its own queue only: across queues the reclaim rules decide), cheapest first
(least value per GPU, then the job's highest replica first, so a job shrinks from the top of its
curve and the values of its released units sum to its real loss). Units are released until the
gang fits and unnecessary ones put back. A new job (not a running job's growth) then always
takes them: growth past a minimum is opportunistic (it never preempts), and a job that waits
does no work at all (Pollux's fairness has the same effect: its utility of a speedup of 0 is
the worst). A running job's room to grow (`Gang.grows_from`) takes them only if

    gain > loss + disruption x units                       (objective units, rates)
    (gain - loss) x T > job value x (restart + unsaved)    for each shrunk job with progress

where gain is the curve's step of its plan from its running count (`valuation.gang_value`),
loss the units' values, T the shrunk job's expected remaining time and the right-hand side the
work it loses restarting its workers at the new size (a membership change restarts them from
their last checkpoint). A job's own growth (`<job>#rest`) never takes its own units: giving a
job's replica back to it changes nothing but restarts it (with a concave curve the rule would
refuse it anyway; a curve refined from reports need not be concave: a job that reported it got
slower at 4 replicas, faster again at 5, would otherwise trade its 4th for a "5th").
Decisions are expressed as `Preemption`s of the units, which the live scheduler and the
simulator apply as the graceful eviction of one replica.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpufleet.core.borrowing import growth_job, jobs_of, restarts_paid_back
from gpufleet.core.decision import GangPlacement, Preemption
from gpufleet.core.demand import Gang
from gpufleet.core.greedy import (
    Memo,
    commit,
    eligible_nodes,
    greedy_order,
    usable_types,
)
from gpufleet.core.objective import running_value
from gpufleet.core.policy import Policy
from gpufleet.core.preempt import put_back_unneeded, release_until_fits, retake_all
from gpufleet.core.snapshot import RunningGang
from gpufleet.core.state import ClusterState
from gpufleet.core.valuation import gang_value

__all__ = ["shrink_for_pending"]

MAX_UNITS_PER_GANG = 16  # bounds the what-if work per stuck gang
REST_SUFFIX = "#rest"  # a running job's room to grow is the pending gang `<job>#rest`


def _gpus(gang: RunningGang) -> int:
    return sum(len(r.gpus) for r in gang.replicas) or 1


def shrink_for_pending(
    state: ClusterState,
    pending: Sequence[Gang],
    policy: Policy,
    memo: Memo,
    evicted: frozenset[str] = frozenset(),
) -> tuple[dict[str, GangPlacement], list[Preemption]]:
    """Place stuck gangs on GPUs of elastic jobs' growth units that add less (module
    docstring); mutates `state`. Units in `evicted` are gone already."""
    placed: dict[str, GangPlacement] = {}
    preemptions: list[Preemption] = []
    if not policy.allow_preemption:
        return placed, preemptions
    snapshot = state.snapshot
    units = [
        r for r in snapshot.running if growth_job(r) is not None and r.preemptible and r.disruptable
    ]
    if not units:
        return placed, preemptions
    values = {r.id: running_value(snapshot, r, policy) for r in snapshot.running}
    taken: set[str] = set(evicted)
    jobs = jobs_of(snapshot.running)  # job -> its running parts (for its value)
    gate = state.gate
    tried = 0
    # New jobs first (they always take growth), then running jobs' room to grow.
    for gang in sorted(greedy_order(pending, state), key=lambda g: g.grows_from > 0):
        if tried >= policy.max_preempting_gangs:
            break
        types = set(usable_types(state, gang, policy, memo))
        allowed = eligible_nodes(state, gang, memo)
        candidates = [
            r
            for r in units
            if r.id not in taken
            and r.gpu_type in types
            and r.priority <= gang.priority
            and not _own(r, gang)
            and (gate is None or r.queue == gang.queue)
            and (allowed is None or any(state.node_index[p.node] in allowed for p in r.replicas))
        ]
        if not candidates:
            continue
        tried += 1
        # At its minimum, as greedy places it first (more replicas would be growth again).
        fixed = replace(gang, replicas_max=gang.replicas_min)
        candidates.sort(key=lambda r: (values[r.id] / _gpus(r), -_position(r), r.id))
        bound = max(MAX_UNITS_PER_GANG, gang.gpus_needed(gang.replicas_min))
        released, plan = release_until_fits(state, fixed, candidates[:bound], policy, memo)
        if plan is None:
            continue
        released, plan = put_back_unneeded(state, fixed, released, plan, policy, memo)
        gain = gang_value(plan.gang, state.catalog[plan.gpu_type], policy, len(plan.replicas))
        if gang.grows_from and not _worth(gain, released, values, jobs, policy):
            retake_all(state, released)
            continue
        placed[gang.id] = commit(state, plan, policy)
        for unit in sorted(released, key=lambda r: r.id):
            taken.add(unit.id)
            preemptions.append(Preemption(unit.id, gang.id))
    return placed, preemptions


def _own(unit: RunningGang, gang: Gang) -> bool:
    """Whether `unit` is growth of the job `gang` is the room to grow of (`<job>#rest`)."""
    return gang.grows_from > 0 and growth_job(unit) == gang.id.removesuffix(REST_SUFFIX)


def _position(unit: RunningGang) -> int:
    return unit.demand.grows_from if unit.demand is not None else 0


def _worth(
    gain: float,
    released: Sequence[RunningGang],
    values: dict[str, float],
    jobs: dict[str, list[RunningGang]],
    policy: Policy,
) -> bool:
    """The rule for growth (module docstring): the gang adds more than the units do, by more
    than the disruption, and each shrunk job's restart is paid back before it is expected to
    end (borrowing.restarts_paid_back)."""
    net = gain - sum(values[u.id] for u in released)
    if net <= policy.weights.disruption * len(released):
        return False
    return restarts_paid_back(net, released, values, jobs)
