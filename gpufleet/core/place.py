"""The placement entry point: `place(snapshot, pending, policy) -> Decision`.

Phases: 1 build the working state; 2 decide placements on free capacity (CP-SAT warm-started by
greedy, or greedy alone; greedy again when the solver finds nothing in time); 3 let stuck
high-priority gangs preempt lower-priority ones; 4 explain every gang left pending; 5 assemble a
decision in a canonical order so equal inputs give equal decisions.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.core.decision import Decision, GangPlacement, Repartition, SolveStats
from gpufleet.core.demand import Gang
from gpufleet.core.explain import explain
from gpufleet.core.greedy import Memo, place_greedy
from gpufleet.core.policy import Engine, Policy
from gpufleet.core.preempt import preempt_for_pending
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.state import ClusterState


def place(snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
    """Decide placements, MIG repartitions, preemptions, power caps and pending reasons."""
    ids = [g.id for g in pending]
    if len(set(ids)) != len(ids):
        raise ValueError("pending gang ids must be unique")
    running_ids = {r.id for r in snapshot.running}
    if running_ids & set(ids):
        raise ValueError("a pending gang id is also running")
    layouts = Memo()
    initial = ClusterState(snapshot)
    state = initial.copy()
    placements: dict[str, GangPlacement]
    if policy.solver.engine is Engine.CPSAT and pending:
        from gpufleet.core.cpsat import place_cpsat  # ortools import is heavy; load on use

        state, placements, stats = place_cpsat(snapshot, initial, state, pending, policy, layouts)
    else:
        placements = place_greedy(state, pending, policy, layouts)
        stats = SolveStats("greedy", "HEURISTIC")
    stuck = [g for g in pending if g.id not in placements]
    extra, preemptions = preempt_for_pending(
        state, stuck, policy, layouts, policy.max_preempting_gangs
    )
    placements.update(extra)
    pending_out = tuple(
        explain(initial, g, policy, layouts)
        for g in sorted(pending, key=lambda g: g.id)
        if g.id not in placements
    )
    repartitions = tuple(
        Repartition(state.nodes[n].name, g, old, new) for n, g, old, new in state.repartitions()
    )
    return Decision(
        placements=tuple(placements[k] for k in sorted(placements)),
        repartitions=repartitions,
        preemptions=tuple(sorted(preemptions, key=lambda p: p.gang_id)),
        pending=pending_out,
        stats=stats,
    )
