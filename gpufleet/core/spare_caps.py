"""Power caps only on spare capacity (`PowerCapRule.spare_only`, the `energy` preset).

A power cap trades a gang's speed for energy: at the energy preset's 5 %, its GPUs hold it
5 % longer. That costs only the gang itself while its GPU type has room to spare. On a type that
other work is waiting for (a pending gang that accepts it, or a gang on a slower type that would
move there as soon as a GPU frees), the capped gang delays all of them, and in a queue the delay
compounds: on one Philly sample (2017-11-06, `hetero-mix-b`, seed 3) the caps alone made the
average completion time 6 % longer, with idle-node power-down 12 %, because jobs that started on
T4s and V100s reached the (capped, so longer held) H100s and A100s hours later.

So with `spare_only`, after the decision the caps the policy's `cap_all` adds are lifted from
placements and moves on a *contended* type: one with no empty schedulable GPU left, or one that
a gang left pending accepts. Caps a gang asked for (an `efficient` energy preference, or its own
`max_slowdown`) are kept. The rule reads only the decision's own state (no forecast); a gang
capped on a spare type keeps its cap while it runs (caps are written when it starts).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from gpufleet.core.decision import Decision, GangPlacement
from gpufleet.core.demand import EnergyPreference, Gang
from gpufleet.core.policy import Policy
from gpufleet.core.state import ClusterState

__all__ = ["contended_types", "lift_contended_caps"]


def contended_types(state: ClusterState, waiting: Iterable[Gang]) -> frozenset[str]:
    """GPU types with no empty schedulable GPU in `state`, or accepted by a waiting gang."""
    out = {t for g in waiting for t in g.type_names()}
    for gpu_type, buckets in state.buckets.items():
        if not any(buckets[1:]):
            out.add(gpu_type)
    return frozenset(out)


def _policy_cap(gang: Gang | None) -> bool:
    """Whether a cap on this gang comes from the policy's `cap_all` alone (it did not ask)."""
    return (
        gang is not None and gang.energy is EnergyPreference.BALANCED and gang.max_slowdown is None
    )


def lift_contended_caps(
    decision: Decision,
    state: ClusterState,
    gangs: Mapping[str, Gang],
    waiting: Iterable[Gang],
    policy: Policy,
) -> Decision:
    """The decision with the `cap_all` caps on contended types removed (module docstring).
    `state`: the cluster after the decision (placements and moves applied); `gangs`: the
    demand of every placed or moved gang by id; `waiting`: the gangs it leaves pending."""
    rule = policy.power_caps
    if not (rule.enabled and rule.cap_all and rule.spare_only):
        return decision
    busy = contended_types(state, waiting)

    def lifted(p: GangPlacement) -> GangPlacement:
        if p.power_cap_w is None or p.gpu_type not in busy or not _policy_cap(gangs.get(p.gang_id)):
            return p
        return replace(p, power_cap_w=None)

    placements = tuple(lifted(p) for p in decision.placements)
    moves = tuple(replace(m, placement=lifted(m.placement)) for m in decision.moves)
    if placements == decision.placements and moves == decision.moves:
        return decision
    return replace(decision, placements=placements, moves=moves)
