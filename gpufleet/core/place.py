"""The placement entry point: `place(snapshot, pending, policy) -> Decision`.

Phases: 1 build the working state, and hold the gangs that are better off waiting for a
switched-off node to boot than starting on slower powered GPUs (boot_wait.py, only with the
power-down rule on and nodes off); 2 greedy placement on free capacity, then gang-aware
preemption for what is still stuck; 3 with the CP-SAT engine, re-solve with the model over the
free GPUs plus the preempted ones (the gangs that preempted must be admitted), warm-started by
the greedy decision, preempt again for what is left, and keep the better-scoring decision
(greedy's when the solver finds nothing in time); skipped with the opt-in
`SolverSettings.skip_when_greedy_admits_all` when greedy admits everything, and when more gangs
are pending than `SolverSettings.max_gangs` (the solver finds nothing in time there); with
queues, place a gang still owed its nominal quota on a node that reclaims plus moves of the few
gangs no reclaim may take, to GPUs of their type elsewhere, clear (evacuation.py's reclaim with
moves); 4 explain every gang left pending; 5 move running gangs to faster types where the
expected gain is worth the restart (moves.py), on the capacity the decision leaves free, and
move the few small gangs off a node reserved for an aged wide gang where that costs them less
than the wide gang's wait (evacuation.py), and the few gangs that alone keep a reclaim from
clearing a node for a gang owed its nominal quota (evacuation.py), and flexible gangs off a
type whose single-type reserve demand confined to it has spent (refill.py); 6 with
`PowerCapRule.spare_only`, lift the caps the policy added on GPU types left without spare
capacity (spare_caps.py); 7 return the decision in a canonical order so equal inputs give equal
decisions.

With queues in the snapshot (queues.py), phase 1 also gives the working state a `QueueGate`
(admission.py): gangs of missing or unusable queues, or with a priority their queue does not
take, are explained at once; every phase then tries gangs in the queues' fair-share order,
admits them only within quota, and evicts across queues only to reclaim borrowed capacity; a
gang left pending is explained by its queue's quota first (QuotaExceeded, WaitingForReclaim),
unless only a disruption budget keeps it from preempting within its queue or reclaiming.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpufleet.core.admission import QueueGate
from gpufleet.core.boot_wait import BootHold, boot_holds
from gpufleet.core.decision import (
    Decision,
    GangPlacement,
    Pending,
    PendingReason,
    Preemption,
    Repartition,
    SolveStats,
    victim_waits,
)
from gpufleet.core.demand import Gang
from gpufleet.core.evacuation import plan_evacuations, plan_reclaim_moves, reclaim_with_moves
from gpufleet.core.explain import explain
from gpufleet.core.greedy import Memo, greedy_order, place_greedy, usable_types
from gpufleet.core.kept_order import closed_types, queue_line, within_order
from gpufleet.core.moves import plan_moves
from gpufleet.core.objective import evaluate
from gpufleet.core.policy import Engine, Policy
from gpufleet.core.preempt import preempt_for_pending, quota_waits
from gpufleet.core.rebalance import shrink_for_pending
from gpufleet.core.refill import plan_refills
from gpufleet.core.reservation import lift_reservations, renew_reservations, with_reservations
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.spare_caps import lift_contended_caps
from gpufleet.core.spread_hold import HOLD_S, spread_holds
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
    refused: list[Pending] = []
    if snapshot.queues is not None:
        initial.gate = QueueGate(
            snapshot,
            policy.queue_aging_s,
            tier_gpu_s=policy.service_tier_gpu_s,
            tier_rerun_s=policy.service_tier_rerun_s,
        )
        refused = [p for p in map(initial.gate.refusal, pending) if p is not None]
        if refused:
            out = {p.gang_id for p in refused}
            pending = [g for g in pending if g.id not in out]
    # Gangs better off waiting for a switched-off node to boot (boot_wait.py) wait.
    holds = boot_holds(snapshot, pending, policy)
    held: list[Gang] = []
    if holds:
        refused += [_held(gid, hold) for gid, hold in holds.items()]
        held = [g for g in pending if g.id in holds]
        pending = [g for g in pending if g.id not in holds]
    # Wide gangs that would start spread now wait a while for packed room (spread_hold.py).
    packed = spread_holds(initial, pending, policy, memo)
    if packed:
        refused += [_spread_held(g) for g in packed]
        held += packed
        out = {g.id for g in packed}
        pending = [g for g in pending if g.id not in out]
    # Greedy on free capacity, then preemption for what is still stuck.
    greedy_state = initial.copy()
    greedy = place_greedy(greedy_state, pending, policy, memo)
    extra, preemptions = _preempt(greedy_state, pending, greedy, policy, memo, frozenset())
    greedy.update(extra)
    best = _assemble(greedy_state, greedy, preemptions, SolveStats("greedy", "HEURISTIC"))
    best_state = greedy_state
    solve = policy.solver.engine is Engine.CPSAT and bool(pending)
    if solve and policy.solver.skip_when_greedy_admits_all and _admits_all(pending, best):
        # Opt-in shortcut (SolverSettings): nothing is left for the solver to admit.
        best = replace(best, stats=SolveStats("greedy", "ALL_ADMITTED"))
        solve = False
    if solve and len(pending) > policy.solver.max_gangs:
        best = replace(best, stats=SolveStats("greedy", "OVER_MAX_GANGS"))
        solve = False
    if solve:
        from gpufleet.core.cpsat import place_cpsat  # ortools import is heavy; load on use

        start = with_reservations(initial, greedy_state)
        state, placements, stats = place_cpsat(
            start, greedy_state, greedy, preemptions, pending, policy, memo
        )
        if stats.engine == "cpsat":
            evicted = frozenset(p.gang_id for p in preemptions)
            # The evictions for what is still stuck keep the queues' order as the solve did.
            line = queue_line(start, pending)
            closed = closed_types(state, line, greedy, placements, policy, memo)
            with within_order(state, pending, closed, policy, memo) as tried:
                more, later = _preempt(state, tried, placements, policy, memo, evicted)
            placements.update(more)
            solved = _assemble(state, placements, [*preemptions, *later], stats)
            # Preemption after the solve is a heuristic, so compare the finished decisions;
            # on a tie the CP-SAT one stays.
            if (
                evaluate(snapshot, pending, solved, policy).objective + 1e-9
                >= evaluate(snapshot, pending, best, policy).objective
            ):
                best, best_state = solved, state
            else:
                stats = replace(
                    stats, engine="greedy-fallback", status=f"{stats.status}_BELOW_GREEDY"
                )
        best = replace(best, stats=stats)
    admitted = best.admitted_ids
    waiting = [g for g in pending if g.id not in admitted]
    # Gangs owed their nominal quota on nodes no reclaim alone clears: reclaim and move.
    cleared = (
        []
        if initial.gate is None
        else reclaim_with_moves(
            best_state,
            greedy_order(waiting, best_state),
            frozenset(p.gang_id for p in best.preemptions),
            policy,
            memo,
            waiting,
        )
    )
    if cleared:
        best = replace(
            best,
            placements=tuple(
                sorted([*best.placements, *(c.placement for c in cleared)], key=_gang_id)
            ),
            preemptions=tuple(
                sorted([*best.preemptions, *(p for c in cleared for p in c.preemptions)],
                       key=_gang_id)
            ),
        )  # fmt: skip
        admitted = best.admitted_ids
        waiting = [g for g in pending if g.id not in admitted]
    if initial.gate is None:
        reasons = [explain(initial, g, policy, memo) for g in waiting] + refused
    else:
        # A gang on quota the victims give back waits for them too, whichever engine placed it.
        best = quota_waits(initial.gate, pending, best, snapshot.running)
        reasons = queue_reasons(initial, best, pending, waiting, policy, memo) + refused
    # Moves of running gangs to faster types, on what the decision leaves free.
    evicted = frozenset(p.gang_id for p in best.preemptions)
    moves = [m for c in cleared for m in c.moves]
    moves += plan_moves(best_state, evicted | {m.gang_id for m in moves}, policy, memo, waiting)
    owed = {p.gang_id for p in reasons if p.reason is PendingReason.WAITING_FOR_RECLAIM}
    moves += plan_reclaim_moves(
        best_state,
        [g for g in greedy_order(waiting, best_state) if g.id in owed],
        evicted | {m.gang_id for m in moves},
        policy,
        memo,
        waiting,
    )
    moves += plan_evacuations(
        best_state,
        _reservations(greedy_state, waiting),
        evicted | {m.gang_id for m in moves},
        policy,
        memo,
        waiting,
    )
    moves += plan_refills(best_state, evicted | {m.gang_id for m in moves}, policy, memo, waiting)
    if moves:
        best = replace(
            best,
            moves=tuple(sorted(moves, key=lambda m: m.gang_id)),
            repartitions=_assemble(best_state, {}, (), best.stats).repartitions,
        )
    if policy.power_caps.spare_only:
        # Caps the policy adds stay only on types with room to spare (spare_caps.py).
        gangs = {g.id: g for g in pending}
        gangs.update((r.id, r.demand) for r in snapshot.running if r.demand is not None)
        best = lift_contended_caps(best, best_state, gangs, [*waiting, *held], policy)
    return replace(best, pending=tuple(sorted(reasons, key=lambda p: p.gang_id)))


# Reasons a gang can never be placed, whatever its queue: they come before any quota reason.
_NEVER: frozenset[PendingReason] = frozenset(
    {
        PendingReason.UNKNOWN_GPU_TYPE,
        PendingReason.NO_NODES_OF_TYPE,
        PendingReason.NO_ELIGIBLE_NODE,
        PendingReason.MIG_PROFILE_UNSUPPORTED,
        PendingReason.REPLICA_TOO_LARGE,
        PendingReason.GANG_TOO_LARGE,
    }
)

# Capacity reasons that a reclaim of borrowed GPUs could resolve.
_CAPACITY: frozenset[PendingReason] = frozenset(
    {
        PendingReason.INSUFFICIENT_GPUS,
        PendingReason.INSUFFICIENT_MIG,
        PendingReason.TOPOLOGY,
        PendingReason.LOST_TO_OTHERS,
    }
)


def queue_reasons(
    initial: ClusterState,
    decision: Decision,
    pending: Sequence[Gang],
    waiting: Sequence[Gang],
    policy: Policy,
    memo: Memo,
) -> list[Pending]:
    """Why gangs wait when queues apply: a gang that can never fit says so first, and so
    does one only a disruption budget keeps from preempting; else its queue's quota, judged
    after the decision (QuotaExceeded, or WaitingForReclaim within nominal), else the
    capacity reason, which becomes WaitingForReclaim when the gang is within nominal and
    borrowers hold its types."""
    assert initial.gate is not None
    after = initial.gate.after(decision, pending)
    out: list[Pending] = []
    for gang in waiting:
        types = usable_types(initial, gang, policy, memo)
        reason = explain(initial, gang, policy, memo)
        # A budget's reason holds before the quota's: the what-if behind it released the
        # protected victims' usage too, and the gang then fit its queue's quota.
        if reason.reason in _NEVER or reason.reason is PendingReason.BUDGET:
            out.append(reason)
            continue
        quota = after.quota_reason(gang, types)
        if quota is not None:
            reason = quota
        else:
            note = after.reclaim_note(gang, types)
            if reason.reason in _CAPACITY and note is not None:
                reason = Pending(gang.id, PendingReason.WAITING_FOR_RECLAIM, note)
        out.append(reason)
    return out


def _reservations(
    state: ClusterState, waiting: Sequence[Gang]
) -> list[tuple[int, tuple[int, ...], Gang]]:
    """The greedy pass's node reservations whose gang the decision leaves waiting: (node, GPUs
    kept, gang). Both engines' final states hold these GPUs taken (`with_reservations`)."""
    gate = state.gate
    if gate is None:
        return []
    left = {g.id for g in waiting}
    return [
        (node, gpus, gate.reserved_for[node])
        for node, gpus in gate.reserved
        if node in gate.reserved_for and gate.reserved_for[node].id in left
    ]


def _gang_id(item: GangPlacement | Preemption) -> str:
    return item.gang_id


def _held(gang_id: str, hold: BootHold) -> Pending:
    return Pending(
        gang_id,
        PendingReason.WAITING_FOR_FASTER_TYPE,
        f"waits {hold.wait_s:.0f} s for switched-off {hold.placement.gpu_type} node(s) "
        f"{', '.join(hold.nodes)} to boot: faster over an expected run than starting now on "
        f"{hold.instead_of}",
    )


def _spread_held(gang: Gang) -> Pending:
    return Pending(
        gang.id,
        PendingReason.TOPOLOGY,
        f"waits up to {HOLD_S - gang.waited_s:.0f} s more for room on the fewest nodes that "
        f"hold it: spread over more it would train at {gang.spread_speed:.2f} of its speed",
    )


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
    """Place stuck gangs by preemption; mutates `state` and `placed` (growth taken back)."""
    stuck = [g for g in pending if g.id not in placed]
    # A running job's growth placed by this decision is opportunistic: it never preempts,
    # and the GPUs it took must not make a stuck gang of higher priority preempt instead
    # (it evicted a whole gang while the same decision grew an elastic job on free GPUs).
    # It is taken back while the stuck gangs look for room, and grows again when none of
    # them evicted anything; otherwise it waits for the next decision (the GPUs left free then
    # may be victims' that are still being evicted).
    regrow = _take_back_growth(state, pending, placed, stuck, policy)
    lifted = lift_reservations(state)  # preemption comes before a drain (reservation.py)
    placed_now, preemptions = preempt_for_pending(
        state, stuck, policy, memo, policy.max_preempting_gangs, evicted, lifted
    )
    # Then elastic jobs' growth that adds less than a stuck gang would (rebalance.py).
    still = [g for g in stuck if g.id not in placed_now]
    gone = evicted | {p.gang_id for p in preemptions}
    shrunk, shrinks = shrink_for_pending(state, still, policy, memo, gone)
    renew_reservations(state, lifted)
    out = {**placed_now, **shrunk}
    evictions = [*preemptions, *shrinks]
    if regrow and not evictions and not evicted:
        out.update(place_greedy(state, regrow, policy, memo))
    return out, evictions


def _take_back_growth(
    state: ClusterState,
    pending: Sequence[Gang],
    placed: dict[str, GangPlacement],
    stuck: Sequence[Gang],
    policy: Policy,
) -> list[Gang]:
    """Undo the placements of growth gangs (`Gang.grows_from`) of a priority below a stuck
    gang's, on whole GPUs this decision did not repartition; the gangs undone."""
    if not policy.allow_preemption or not stuck:
        return []
    top = max(g.priority for g in stuck)
    undone: list[Gang] = []
    for gang in pending:
        placement = placed.get(gang.id)
        if placement is None or not gang.grows_from or gang.priority >= top:
            continue
        spots = [(state.node_index[r.node], g) for r in placement.replicas for g in r.gpus]
        if any(r.mig is not None for r in placement.replicas) or any(
            spot in state.repartitioned for spot in spots
        ):
            continue
        for replica in placement.replicas:
            state.release(replica)
        if state.gate is not None:
            state.gate.book.free(gang.id)
        del placed[gang.id]
        undone.append(gang)
    return undone


def _assemble(
    state: ClusterState,
    placements: dict[str, GangPlacement],
    preemptions: Sequence[Preemption],
    stats: SolveStats,
) -> Decision:
    """A decision in canonical order (sorted by gang id, node and GPU), each placement saying
    which other gangs' victims it waits for (`victim_waits`)."""
    decision = Decision(
        placements=tuple(placements[k] for k in sorted(placements)),
        repartitions=tuple(
            Repartition(state.nodes[n].name, g, old, new) for n, g, old, new in state.repartitions()
        ),
        preemptions=tuple(sorted(preemptions, key=lambda p: p.gang_id)),
        stats=stats,
    )
    return victim_waits(decision, state.snapshot.running)
