"""A gang owed its nominal quota gets a node cleared when only a move stands in the way
(evacuation.py, relocation for a reclaim; then preempt.py's reclaim).

Hand-built after the owed gangs of the 2017-11-01 queue sample (seed 0): every node of the type
holds a gang a reclaim may not evict. a0: six one-GPU gangs of `ones` (nominal 0, all borrowed) and
two of `keeper` (nominal 1: it borrows one GPU, so a reclaim may take one of them and then must
stop); a1: eight GPUs of `full`, within its nominal quota; a2: four more of `full` and four of
`other`, within its nominal quota; an A100-40GB node is free, and the `keeper` gangs take either
A100. The lender's 8-GPU one-node gang is within its nominal 8. No reclaim can free a node, so
before this rule it waited until some gang ended (there: 26 minutes). Now the decision moves the
blocking `keeper` gang to the free A100-40GBs, and then the other one too (the first move brings
`keeper` back within its nominal A100 quota), and the next decision reclaims a0 from the borrowers.
When the blocking gang has room on its own type (a2's last four GPUs free), the reclaim with moves
places the lender in the same decision instead (test_queue_reclaim_with_moves.py).
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
A40 = "A100-40GB"
HOURS = 2 * 3600.0  # expected remaining time of the running gangs


def snapshot(
    a2_free: bool = False,
    spare: bool = True,
    lender_nominal: int = 8,
    remaining_s: float = HOURS,
) -> Snapshot:
    nominal = {"lender": lender_nominal, "ones": 0, "keeper": 1, "full": 12, "other": 4}
    tree = QueueTree.build(
        [
            QueueSpec(q, None, 1.0, {A100: Quota(n), A40: Quota(8 if q == "keeper" else 0)}, 0,
                      None)
            for q, n in nominal.items()
        ]
    )  # fmt: skip
    builder = cluster().nodes_of("a", A100, 3)
    if spare:
        builder.nodes_of("b", A40, 1)
    for k in range(6):
        builder.run(f"one-{k}", "a0", (k,), queue="ones")
    builder.run("keep-0", "a0", (6,), queue="keeper")
    builder.run("keep-1", "a0", (7,), queue="keeper")
    builder.run("full-a1", "a1", tuple(range(8)), queue="full")
    builder.run("full-a2", "a2", (0, 1, 2, 3), queue="full")
    if not a2_free:
        builder.run("more-a2", "a2", (4, 5, 6, 7), queue="other")
    snap = builder.queues(tree).build()
    running: list[RunningGang] = []
    for r in snap.running:
        gpus = sum(len(x.gpus) for x in r.replicas)
        types = (A100, A40) if r.queue == "keeper" else A100
        demand = gang(r.id, types=types, gpus=gpus, queue=r.queue)
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
    # Moving one keeper gang off the A100s brings `keeper` back within its nominal A100
    # quota, so the other one could no longer be reclaimed: it moves too.
    assert {m.gang_id for m in first.moves} == {"keep-0", "keep-1"}
    for move in first.moves:
        assert move.for_gang == "l" and {r.node for r in move.placement.replicas} == {"b0"}
    nxt = decide(after(snap, first), [lender(610.0)])
    placement = nxt.placement("l")
    assert placement is not None and {r.node for r in placement.replicas} == {"a0"}
    victims = {p.gang_id for p in nxt.preemptions}
    assert all(p.reclaim for p in nxt.preemptions)
    assert victims == {f"one-{k}" for k in range(6)}  # the moved keeper gangs keep running


def test_no_move_when_the_blocking_gang_has_nowhere_to_go() -> None:
    decision = decide(snapshot(spare=False), [lender()])
    assert decision.admitted_ids == set() and decision.moves == ()


def test_with_room_on_its_own_type_the_blocker_moves_in_the_lenders_decision() -> None:
    decision = decide(snapshot(a2_free=True), [lender()])
    placement = decision.placement("l")
    assert placement is not None and {r.node for r in placement.replicas} == {"a0"}
    (move,) = decision.moves
    assert move.placement.gpu_type == A100 and {r.node for r in move.placement.replicas} == {"a2"}


def test_a_gang_beyond_its_nominal_quota_moves_nothing() -> None:
    # With a nominal 7 the lender's 8 GPUs are not owed: no reclaim, so no move for one.
    decision = decide(snapshot(lender_nominal=7), [lender()])
    assert decision.admitted_ids == set() and decision.moves == ()


def test_no_move_that_costs_more_than_the_wait_it_saves() -> None:
    # The keeper gang ends in 30 s: a 60 s restart elsewhere costs more than waiting for it.
    decision = decide(snapshot(a2_free=True, remaining_s=30.0), [lender()])
    assert decision.admitted_ids == set() and decision.moves == ()
