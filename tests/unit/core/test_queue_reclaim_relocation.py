"""A gang owed its nominal quota gets a node cleared when only a move stands in the way
(evacuation.py, relocation for a reclaim; then preempt.py's reclaim).

Hand-built after the owed gangs of the 2017-11-01 queue sample (seed 0): every node of the
type holds a gang a reclaim may not evict. a0: six one-GPU gangs of `ones` (nominal 0, all
borrowed) and two of `keeper` (nominal 1: it borrows one GPU, so a reclaim may take one of them
and then must stop); a1: eight GPUs of `full`, within its nominal quota; a2: four more of
`full` and four free GPUs. The lender's 8-GPU one-node gang is within its nominal 8. No reclaim
can free a node, so before this rule it waited until some gang ended (there: 26 minutes).
Now the decision moves the one blocking `keeper` gang to a2's free GPUs, and the next decision
reclaims a0 from the borrowers.
"""

from __future__ import annotations

from dataclasses import replace

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Policy
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import RunningGang, RunProgress, Snapshot
from gpufleet.core.validate import decision_problems
from tests.unit.core.placement_builders import cluster, gang

A100 = "A100-80GB"
HOURS = 2 * 3600.0  # expected remaining time of the running gangs


def snapshot(a2_free: bool = True, lender_nominal: int = 8, remaining_s: float = HOURS) -> Snapshot:
    nominal = {"lender": lender_nominal, "ones": 0, "keeper": 1, "full": 12}
    tree = QueueTree.build(
        [QueueSpec(q, None, 1.0, {A100: Quota(n)}, 0, None) for q, n in nominal.items()]
    )
    builder = cluster().nodes_of("a", A100, 3)
    for k in range(6):
        builder.run(f"one-{k}", "a0", (k,), queue="ones")
    builder.run("keep-0", "a0", (6,), queue="keeper")
    builder.run("keep-1", "a0", (7,), queue="keeper")
    builder.run("full-a1", "a1", tuple(range(8)), queue="full")
    builder.run("full-a2", "a2", (0, 1, 2, 3), queue="full")
    if not a2_free:
        builder.run("more-a2", "a2", (4, 5, 6, 7), queue="ones")
    snap = builder.queues(tree).build()
    running: list[RunningGang] = []
    for r in snap.running:
        gpus = sum(len(x.gpus) for x in r.replicas)
        demand = gang(r.id, types=A100, gpus=gpus, queue=r.queue)
        running.append(replace(r, demand=demand, progress=RunProgress(remaining_s, restart_s=60.0)))
    return replace(snap, running=tuple(running))


def lender(waited_s: float = 600.0) -> Gang:
    return gang("l", types=A100, gpus=8, queue="lender", waited_s=waited_s)


def decide(snap: Snapshot, pending: list[Gang]) -> Decision:
    decision = place(snap, pending, Policy())
    assert decision_problems(snap, pending, decision) == []
    return decision


def after(snap: Snapshot, decision: Decision) -> Snapshot:
    """The snapshot once the decision's moves are carried out."""
    moved = {m.gang_id: m.placement for m in decision.moves}
    running = []
    for r in snap.running:
        if r.id in moved:
            r = replace(r, gpu_type=moved[r.id].gpu_type, replicas=moved[r.id].replicas)
        running.append(r)
    return replace(snap, running=tuple(running))


def test_the_gang_that_blocks_a_reclaim_moves_and_the_lender_reclaims_the_node_next() -> None:
    snap = snapshot()
    first = decide(snap, [lender()])
    assert first.admitted_ids == set() and first.preemptions == ()
    (move,) = first.moves
    assert move.gang_id.startswith("keep-") and move.for_gang == "l"
    assert {r.node for r in move.placement.replicas} == {"a2"}
    nxt = decide(after(snap, first), [lender(610.0)])
    placement = nxt.placement("l")
    assert placement is not None and {r.node for r in placement.replicas} == {"a0"}
    victims = {p.gang_id for p in nxt.preemptions}
    assert all(p.reclaim for p in nxt.preemptions)
    assert {f"one-{k}" for k in range(6)} <= victims
    assert not any(v.startswith("full") for v in victims)
    assert move.gang_id not in victims  # the moved keeper gang keeps running on a2


def test_no_move_when_the_blocking_gang_has_nowhere_to_go() -> None:
    decision = decide(snapshot(a2_free=False), [lender()])
    assert decision.admitted_ids == set() and decision.moves == ()


def test_a_gang_beyond_its_nominal_quota_moves_nothing() -> None:
    # With a nominal 7 the lender's 8 GPUs are not owed: no reclaim, so no move for one.
    decision = decide(snapshot(lender_nominal=7), [lender()])
    assert decision.admitted_ids == set() and decision.moves == ()


def test_no_move_that_costs_more_than_the_wait_it_saves() -> None:
    # The keeper gang ends in 30 s: a 60 s restart elsewhere costs more than waiting for it.
    decision = decide(snapshot(remaining_s=30.0), [lender()])
    assert decision.admitted_ids == set() and decision.moves == ()
