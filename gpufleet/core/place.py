"""The placement entry point: `place(snapshot, pending, policy) -> Decision`.

Phases: 1 build the working state; 2 greedy placement on free capacity, then gang-aware
preemption for what is still stuck; 3 with the CP-SAT engine, re-solve with the model over the
free GPUs plus the preempted ones (the gangs that preempted must be admitted), warm-started by
the greedy decision, preempt again for what is left, and keep the better-scoring decision
(greedy's when the solver finds nothing in time); skipped with the opt-in
`SolverSettings.skip_when_greedy_admits_all` when greedy admits everything; 4 explain every gang
left pending; 5 return the decision in a canonical order so equal inputs give equal decisions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpufleet.core.decision import Decision, GangPlacement, Preemption, Repartition, SolveStats
from gpufleet.core.demand import Gang
from gpufleet.core.explain import explain
from gpufleet.core.greedy import Memo, place_greedy
from gpufleet.core.objective import evaluate
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
    memo = Memo()
    initial = ClusterState(snapshot)
    # Greedy on free capacity, then preemption for what is still stuck.
    greedy_state = initial.copy()
    greedy = place_greedy(greedy_state, pending, policy, memo)
    extra, preemptions = _preempt(greedy_state, pending, greedy, policy, memo, frozenset())
    greedy.update(extra)
    best = _assemble(greedy_state, greedy, preemptions, SolveStats("greedy", "HEURISTIC"))
    solve = policy.solver.engine is Engine.CPSAT and bool(pending)
    if solve and policy.solver.skip_when_greedy_admits_all and _admits_all(pending, best):
        # Opt-in shortcut (SolverSettings): nothing is left for the solver to admit.
        best = replace(best, stats=SolveStats("greedy", "ALL_ADMITTED"))
        solve = False
    if solve:
        from gpufleet.core.cpsat import place_cpsat  # ortools import is heavy; load on use

        state, placements, stats = place_cpsat(
            initial, greedy_state, greedy, preemptions, pending, policy, memo
        )
        if stats.engine == "cpsat":
            evicted = frozenset(p.gang_id for p in preemptions)
            more, later = _preempt(state, pending, placements, policy, memo, evicted)
            placements.update(more)
            solved = _assemble(state, placements, [*preemptions, *later], stats)
            # Preemption after the solve is a heuristic, so compare the finished decisions;
            # on a tie the CP-SAT one stays.
            if (
                evaluate(snapshot, pending, solved, policy).objective + 1e-9
                >= evaluate(snapshot, pending, best, policy).objective
            ):
                best = solved
            else:
                stats = replace(
                    stats, engine="greedy-fallback", status=f"{stats.status}_BELOW_GREEDY"
                )
        best = replace(best, stats=stats)
    admitted = best.admitted_ids
    pending_out = tuple(
        explain(initial, g, policy, memo)
        for g in sorted(pending, key=lambda g: g.id)
        if g.id not in admitted
    )
    return replace(best, pending=pending_out)


def _admits_all(pending: Sequence[Gang], decision: Decision) -> bool:
    """Every pending gang placed at its largest size, without preemption or MIG changes."""
    if decision.preemptions or decision.repartitions:
        return False
    size = {p.gang_id: len(p.replicas) for p in decision.placements}
    return all(size.get(g.id) == g.replicas_max for g in pending)


def _preempt(
    state: ClusterState,
    pending: Sequence[Gang],
    placed: dict[str, GangPlacement],
    policy: Policy,
    memo: Memo,
    evicted: frozenset[str],
) -> tuple[dict[str, GangPlacement], list[Preemption]]:
    stuck = [g for g in pending if g.id not in placed]
    return preempt_for_pending(state, stuck, policy, memo, policy.max_preempting_gangs, evicted)


def _assemble(
    state: ClusterState,
    placements: dict[str, GangPlacement],
    preemptions: Sequence[Preemption],
    stats: SolveStats,
) -> Decision:
    """A decision in canonical order (sorted by gang id, node and GPU)."""
    return Decision(
        placements=tuple(placements[k] for k in sorted(placements)),
        repartitions=tuple(
            Repartition(state.nodes[n].name, g, old, new) for n, g, old, new in state.repartitions()
        ),
        preemptions=tuple(sorted(preemptions, key=lambda p: p.gang_id)),
        stats=stats,
    )
