"""Standby replicas lend their GPUs: preemptible work borrows them until the replica wakes.

A standby serving replica is asleep (vLLM sleep mode level 1: weights in CPU memory, GPU memory
freed, the server process alive) but keeps its GPU, since the process lives on that device. The
core lends such GPUs to work that the replica's owner could preempt anyway, so lending never
gives anyone a right they did not have: only **preemptible** gangs of **strictly lower
priority** than every lender may borrow. `place_with_lending` makes the decision in two steps of
the same core:

1. `place` on the snapshot with every lent GPU held by its lender: every pending gang, with the
   usual preemption;
2. `place` again, without preemption, for the gangs still pending that may borrow, on the result
   of step 1 with the lent GPUs free.

A caller may narrow the borrowers further (`may_lend_to`), e.g. to gangs that checkpoint when
their pods get SIGTERM and so lose no progress when a lender wakes.

The decision is step 1's with step 2's placements added; `borrowed` names, for each lender whose
GPUs a step-2 placement uses, the borrowing gang. When a lender wakes, its borrower is preempted
whole (the contract it was placed under: borrowing.py's order does not apply, the lender's GPU
is the one it needs back); when the borrower ends first, the GPU is lendable again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gpufleet.core.decision import Decision, victim_waits
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import RunningGang, Snapshot

__all__ = ["LendingDecision", "may_borrow", "place_with_lending"]


@dataclass(frozen=True, slots=True)
class LendingDecision:
    """A decision plus the loans it makes: (lender id, borrowing gang id) pairs, sorted."""

    decision: Decision
    borrowed: tuple[tuple[str, str], ...] = ()


def may_borrow(gang: Gang, lenders: Sequence[RunningGang]) -> bool:
    """Whether `gang` may run on lent GPUs: preemptible and below every lender's priority."""
    return gang.preemptible and all(gang.priority < lender.priority for lender in lenders)


def _gpus(gangs: Sequence[RunningGang]) -> dict[tuple[str, int], str]:
    return {(r.node, g): gang.id for gang in gangs for r in gang.replicas for g in r.gpus}


Decide = Callable[[Snapshot, Sequence[Gang], Policy], Decision]


def place_with_lending(
    snapshot: Snapshot,
    pending: Sequence[Gang],
    policy: Policy,
    lenders: Sequence[RunningGang],
    decide: Decide = place,
    may_lend_to: Callable[[Gang], bool] | None = None,
) -> LendingDecision:
    """Decide with the lenders' GPUs lent to the pending gangs that may borrow them (both
    steps by `decide`: `place`, or the live scheduler's own entry to it), and only to those
    `may_lend_to` accepts when given."""
    held = replace(snapshot, running=(*snapshot.running, *lenders))
    first = decide(held, pending, policy)
    if not lenders:
        return LendingDecision(first)
    admitted = first.admitted_ids
    borrowers = [
        g
        for g in pending
        if g.id not in admitted
        and may_borrow(g, lenders)
        and (may_lend_to is None or may_lend_to(g))
    ]
    if not borrowers:
        return LendingDecision(first)
    # The result of step 1 as running gangs, with the lenders' GPUs free.
    evicted = {p.gang_id for p in first.preemptions}
    by_id = {g.id: g for g in pending}
    placed = tuple(
        RunningGang(
            p.gang_id,
            p.gpu_type,
            p.replicas,
            by_id[p.gang_id].priority,
            by_id[p.gang_id].preemptible,
        )
        for p in first.placements
    )
    running = tuple(r for r in snapshot.running if r.id not in evicted)
    nodes = snapshot.nodes
    if first.repartitions:  # step 2 sees the MIG layouts step 1 asked for
        changed = {(r.node, r.gpu): r.new_layout for r in first.repartitions}
        nodes = tuple(
            replace(
                n,
                gpus=tuple(
                    replace(g, mig_layout=changed.get((n.name, g.index), g.mig_layout))
                    for g in n.gpus
                ),
            )
            for n in nodes
        )
    lent_snapshot = replace(snapshot, nodes=nodes, running=(*running, *placed))
    second = decide(lent_snapshot, borrowers, replace(policy, allow_preemption=False))
    lent = _gpus(lenders)
    borrowed = sorted(
        {
            (lent[(r.node, g)], p.gang_id)
            for p in second.placements
            for r in p.replicas
            for g in r.gpus
            if (r.node, g) in lent
        }
    )
    taken = second.admitted_ids
    decision = replace(
        first,
        placements=tuple(sorted((*first.placements, *second.placements), key=lambda p: p.gang_id)),
        repartitions=(*first.repartitions, *second.repartitions),
        pending=tuple(p for p in first.pending if p.gang_id not in taken),
    )
    # Step 2 saw step 1's victims gone: a borrower on their GPUs waits for them too.
    decision = victim_waits(decision, snapshot.running)
    return LendingDecision(decision, tuple(borrowed))
