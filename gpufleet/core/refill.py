"""Refilling a spent reserve: move a flexible gang off a scarce type once demand confined to
that type has taken the GPUs kept for it.

A single-type GPU reserve (scarcity.py) keeps a few empty GPUs of a type for tasks that accept
only that type. When such a task takes the last of them, the reserve is spent; while gangs end,
the next GPU of the type that frees refills it (a flexible gang pays the reserve's price to take
it). When none ends for a long time, nothing refills it: flexible gangs keep the other GPUs of
the type for their speed, and the next confined task waits while GPUs of other types sit free
(Alibaba `gpuspec10`, orders 37 and 38: an H100-only pod took the one H100 kept, the next one
waited about 22k s with 22 A100 GPUs free; every other H100 held a flexible pod, and moves.py
only moves gangs to faster types).

A refill moves a flexible whole-GPU gang from the type to free GPUs of another type it accepts,
priced in the objective's units, the same trade a placement makes: the move restores reserve
units (each worth the reserve's price, what a flexible gang pays to take one) and costs the
moved gang the throughput it loses over its expected remaining time R, with its restart:

    loss_s = restart + (R + unsaved) x v0 / v1 - R       (moves.py's price, v0 > v1)
    lost   = w0 x loss_s / (R + loss_s)                   (w0: its work value where it runs)

`lost` is the drop in its average work rate until it ends (without a restart it is w0 - w1,
what a new placement on the slower type gives up). A refill is taken when `lost` plus the
fragmentation it adds where it lands is below the value of the units it restores, and only
where it lands on no GPU or slot another reserve keeps, on whole GPUs without a MIG change.
Only reserves that keep at least one GPU are refilled: the estimate expects another confined
task. Of the refills worth their price, those that cost the least completion time go first
(a gang near its end, to the fastest type with room), as many as the reserve is short. Only
preemptible gangs that no disruption budget protects and whose caller gives their demand and
progress move, within the hourly move limit; the moves are ordinary `Move`s (with
`for_reserve` set, `gain_s` the completion time the gang loses), carried out as moves to faster
types are.

Why not seconds against the confined task's expected wait, as evacuation.py prices: the wait is
until a GPU of the type frees, and the gang expected to end soonest is the youngest there,
often the confined task that just spent the reserve (R is the run so far when no run has been
seen to finish, as in a packing replay), so the expected wait is short and no refill would ever
pay, while the moved gang's loss grows with its own run. The reserve's price is what the
objective already trades against speed when it places a flexible gang; a refill holds running
gangs to the same trade. Like such a placement, it may send a gang to a much slower type when
that is the only room no reserve keeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpufleet.core.borrowing import growth_job
from gpufleet.core.decision import Move
from gpufleet.core.demand import Gang
from gpufleet.core.greedy import Memo, Plan, commit_priced, plan_gang, usable_types
from gpufleet.core.moves import move_gain_s, release_priced, work_value
from gpufleet.core.policy import Policy
from gpufleet.core.preempt import release_gang, retake
from gpufleet.core.pricing import Pricing, empty_gpus
from gpufleet.core.scarcity import Reserve
from gpufleet.core.snapshot import RunningGang
from gpufleet.core.state import ClusterState
from gpufleet.core.valuation import base_throughput

__all__ = ["plan_refills"]


@dataclass(frozen=True, slots=True)
class _Refill:
    loss_s: float  # seconds of completion time the move costs the gang
    gang: RunningGang
    plan: Plan


def plan_refills(
    state: ClusterState,
    excluded: frozenset[str],
    policy: Policy,
    memo: Memo,
    waiting: Sequence[Gang] = (),
) -> list[Move]:
    """Moves that refill spent single-type reserves (module docstring); mutates `state`.
    `excluded`: gangs already evicted or moved by this decision; `waiting`: the gangs it leaves
    pending (for the reserves' prices, as moves.py)."""
    if not policy.moves.enabled or state.snapshot.workload is None:
        return []
    grown = {growth_job(r) for r in state.snapshot.running} - {None}
    movable = [
        r
        for r in state.snapshot.running
        if r.id not in excluded and r.id not in grown and _movable(r, policy)
    ]
    if not movable:
        return []  # before pricing: nothing could move
    pricing = Pricing(state, policy, waiting)
    kept = {types: r for types, r in pricing.gpu_reserves.items() if len(types) == 1}
    out: list[Move] = []
    moved: set[str] = set()
    for (gpu_type,), reserve in sorted(kept.items()):
        if reserve.reserved < 1:
            continue
        while (short := reserve.reserved - empty_gpus(state, gpu_type)) > 0:
            best: _Refill | None = None
            for running in movable:
                if running.id in moved or running.gpu_type != gpu_type:
                    continue
                found = _refill(state, running, reserve, short, policy, memo, pricing)
                if found is not None and (best is None or found.loss_s < best.loss_s):
                    best = found
            if best is None:
                break
            release_priced(state, [best.gang], pricing)
            placement = commit_priced(state, best.plan, policy, pricing)
            moved.add(best.gang.id)
            out.append(Move(best.gang.id, gpu_type, placement, -best.loss_s, for_reserve=gpu_type))
    return out


def _movable(running: RunningGang, policy: Policy) -> bool:
    """A preemptible whole-GPU gang with demand and progress that no disruption budget protects,
    within its hourly move limit."""
    progress = running.progress
    return (
        progress is not None
        and running.demand is not None
        and growth_job(running) is None
        and running.preemptible
        and running.disruptable
        and progress.recent_moves < policy.moves.max_per_hour
        and all(r.mig is None for r in running.replicas)
    )


def _refill(
    state: ClusterState,
    running: RunningGang,
    reserve: Reserve,
    short: float,
    policy: Policy,
    memo: Memo,
    pricing: Pricing,
) -> _Refill | None:
    """The gang's refill move off its type that costs it the least completion time, among those
    worth their price (module docstring)."""
    progress, demand = running.progress, running.demand
    assert progress is not None and demand is not None  # `_movable`
    catalog = state.catalog
    size = len(running.replicas)
    fixed = replace(demand, queue=running.queue, replicas_min=size, replicas_max=size)
    rate = base_throughput(fixed, catalog[running.gpu_type])
    if rate <= 0:
        return None
    freed = sum(len(r.gpus) for r in running.replicas)
    value = reserve.price * min(float(freed), short)
    w0 = work_value(fixed, catalog[running.gpu_type], size, policy)
    best: _Refill | None = None
    release_gang(state, running)
    try:
        for gpu_type in usable_types(state, fixed, policy, memo):
            if gpu_type == running.gpu_type:
                continue
            new_rate = base_throughput(fixed, catalog[gpu_type])
            if new_rate <= 0:
                continue
            p = progress
            loss_s = -move_gain_s(p.expected_remaining_s, p.unsaved_s, p.restart_s, new_rate / rate)
            if best is not None and loss_s >= best.loss_s:
                continue
            plan = plan_gang(state, fixed, gpu_type, policy, memo)
            if plan is None or _changes_layout(state, plan):
                continue
            price = pricing.move_price(
                state, fixed, gpu_type, plan.replicas, plan.repartitions, running.replicas
            )
            if price.reserved > 0:
                continue  # room another reserve keeps
            span = p.expected_remaining_s + loss_s
            lost = w0 * loss_s / span if span > 0 else w0
            if lost + price.fragmentation < value:
                best = _Refill(loss_s, running, plan)
    finally:
        retake(state, running)
    return best


def _changes_layout(state: ClusterState, plan: Plan) -> bool:
    """Whether the plan cuts a GPU or takes an empty MIG-mode GPU whole (switching it back).
    A decision's repartitions are carried out before its moves, so a layout change on a GPU a
    faster-type move leaves in the same decision would hit a busy GPU (the simulator refused
    "repartition of busy GPU" when a refill took whole the A100 GPU a MIG pod's move to an H100
    left); a refill changes no layout at all."""
    if plan.repartitions:
        return True
    return any(
        state.layout[state.node_index[r.node]][g] is not None
        for r in plan.replicas
        if r.mig is None
        for g in r.gpus
    )
