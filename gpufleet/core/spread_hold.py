"""Wide gangs that wait a short while for packed room rather than start spread.

A synchronous topology-`any` gang whose only placements now span more nodes than it needs runs
at its `spread_speed` for its whole run (Gavel: down to about a tenth for some models), and a
long run placed so keeps the slowdown unless a move packs it later. Such a gang, when it is slow
spread (`spread_speed` <= `HOLD_BELOW`) and has waited less than `HOLD_S`, waits for room on
the fewest nodes of some acceptable type: the GPUs go to the gangs behind it meanwhile, so they
do not idle while others wait, and the bound keeps the wait short next to any run the slowdown
would stretch by half or more. It is held only when it would otherwise start spread now (some
type has a spread plan and none a packed one).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.core.demand import Gang, Topology
from gpufleet.core.greedy import Memo, plan_gang, usable_types
from gpufleet.core.policy import Policy
from gpufleet.core.spread import spread_factor
from gpufleet.core.state import ClusterState

__all__ = ["HOLD_BELOW", "HOLD_S", "spread_holds"]

HOLD_BELOW = 0.5  # spread at half its speed or less: a run at least twice as long
HOLD_S = 1800.0  # the longest wait for packed room (the gang's own wait so far)


def spread_holds(
    state: ClusterState, pending: Sequence[Gang], policy: Policy, memo: Memo
) -> list[Gang]:
    """The pending gangs to hold for packed room (module docstring), judged on `state`'s free
    GPUs (and queue quotas, when it has a gate); `state` is not changed."""
    held = []
    for gang in pending:
        if not _may_hold(gang):
            continue
        spread = False
        for t in usable_types(state, gang, policy, memo):
            plan = plan_gang(state, gang, t, policy, memo)
            if plan is None:
                continue
            if spread_factor(state, gang, t, plan.replicas) >= 1.0:
                spread = False
                break
            spread = True
        if spread:
            held.append(gang)
    return held


def _may_hold(gang: Gang) -> bool:
    return (
        gang.spread_speed <= HOLD_BELOW
        and gang.waited_s < HOLD_S
        and gang.topology is Topology.ANY
        and gang.mig_profile is None
        and gang.replicas_max > 1
        and gang.grows_from == 0
    )
