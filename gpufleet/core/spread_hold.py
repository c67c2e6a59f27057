"""Wide gangs that wait a short while for packed room rather than start spread.

A synchronous topology-`any` gang whose only placements now span more nodes than it needs runs
at its `spread_speed` for its whole run (Gavel: down to about a tenth for some models), and a
long run placed so keeps the slowdown unless a move packs it later. Such a gang, when it is slow
spread (`spread_speed` <= `HOLD_BELOW`) and has waited less than `HOLD_S`, may wait for room on
the fewest nodes of some acceptable type; the GPUs go to the gangs behind it meanwhile, so they
do not idle while others wait. It is held only when it would otherwise start spread now (some
type has a spread plan and none a packed one), and only while packed room is in sight: some
acceptable type has, on its fewest nodes, enough GPUs that are free or held by running gangs
expected to end within the hold's time left (`RunProgress`; a gang without an estimate counts as
staying), so a gang with no room coming starts now. The bound does not cover room in sight that
then does not come or that gangs ahead take: the held gang keeps none, and its wait can exceed the
hold (bench/README.md, Queues, fortieth and forty-seventh passes: a 24-GPU gang waited 4.6 h
after a hold of 20 s, with and without the bound); once it has waited the queues' aging time,
reservation.py keeps its fewest nodes for it. Two held gangs never count the same node's room.

Keeping the room's free GPUs for a held gang as well (a reservation) was measured and not kept:
it made CP-SAT's worst tenant worse on a diagnosis sample (bench/README.md, Queues, forty-sixth
pass).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from gpufleet.core.demand import Gang, Topology
from gpufleet.core.greedy import Memo, eligible_nodes, plan_gang, usable_types
from gpufleet.core.policy import Policy
from gpufleet.core.spread import fewest_node_count, spread_factor
from gpufleet.core.state import ClusterState

__all__ = ["HOLD_BELOW", "HOLD_S", "spread_holds"]

HOLD_BELOW = 0.5  # spread at half its speed or less: a run at least twice as long
HOLD_S = 1800.0  # the longest wait for packed room (the gang's own wait so far)


def spread_holds(
    state: ClusterState, pending: Sequence[Gang], policy: Policy, memo: Memo
) -> list[Gang]:
    """The pending gangs to hold for packed room (module docstring), judged on `state`'s free
    GPUs, running gangs' estimates (and queue quotas, when it has a gate); `state` is not
    changed."""
    held: list[Gang] = []
    claimed: set[int] = set()
    ending = _ending(state)
    for gang in pending:
        if not _may_hold(gang):
            continue
        types = usable_types(state, gang, policy, memo)
        if not _only_spread(state, gang, types, policy, memo):
            continue
        room = _room_in_sight(state, gang, types, ending, claimed, memo)
        if room is not None:
            held.append(gang)
            claimed.update(room)
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


def _only_spread(
    state: ClusterState, gang: Gang, types: Sequence[str], policy: Policy, memo: Memo
) -> bool:
    """Some type has a plan on the free GPUs now, and every such plan is spread."""
    spread = False
    for t in types:
        plan = plan_gang(state, gang, t, policy, memo)
        if plan is None:
            continue
        if spread_factor(state, gang, t, plan.replicas) >= 1.0:
            return False
        spread = True
    return spread


def _ending(state: ClusterState) -> dict[int, list[tuple[float, int]]]:
    """Per node: (expected remaining s, whole GPUs) of each running gang with an estimate."""
    out: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for running in state.snapshot.running:
        if running.progress is None:
            continue
        left = running.progress.expected_remaining_s
        for replica in running.replicas:
            n = state.node_index.get(replica.node)
            if n is not None and replica.mig is None:
                out[n].append((left, len(replica.gpus)))
    return out


def _room_in_sight(
    state: ClusterState,
    gang: Gang,
    types: Sequence[str],
    ending: dict[int, list[tuple[float, int]]],
    claimed: set[int],
    memo: Memo,
) -> list[int] | None:
    """The nodes that make packed room in sight on the first of `types` (best first) that has
    it; None when no type has it."""
    within = HOLD_S - gang.waited_s
    size = gang.gpus_per_replica
    need = gang.replicas_min
    allowed = eligible_nodes(state, gang, memo)
    gate = state.gate
    for t in types:
        if gate is not None and not gate.allows(gang, t, need):
            continue
        fewest = fewest_node_count(state, t, size, need)
        if fewest is None:
            continue
        soon: list[tuple[int, int, int]] = []  # (replicas it holds soon, free GPUs, node)
        for n in state.nodes_by_type.get(t, []):
            if n in claimed or (allowed is not None and n not in allowed):
                continue
            free = len(state.whole_mode_gpus(n))
            freed = sum(gpus for left, gpus in ending.get(n, ()) if left <= within)
            soon.append(((free + freed) // size, free, n))
        soon.sort(key=lambda s: (-s[0], -s[1], s[2]))
        chosen = soon[:fewest]
        if sum(s[0] for s in chosen) < need:
            continue
        return [n for _, _, n in chosen]
    return None
