"""A gang owed its nominal quota is placed in one decision by reclaiming and moving
(evacuation.py, "Reclaim with moves").

Hand-built after the owed gangs of the fresh queue sample 2017-11-18 (seed 2): every H100 node
holds a gang that a reclaim stopping at its queue's nominal quota may not take. h0: four GPUs
of `big` (nominal 0, all borrowed), two one-GPU gangs of `ones` (nominal 0) and two one-GPU
gangs of `keeper` (nominal 1: it borrows one GPU, so a reclaim may take one of them and then
must stop); h1: eight GPUs of `full`, within its nominal quota; h2: four GPUs of `full` and four
one-GPU gangs of `ones`. The lender's 8-GPU one-node gang is within its nominal 8 and no GPU is
free. A reclaim alone frees 7 GPUs on h0 and 4 on h2, and a relocation for a later decision
finds no free GPU for the keeper gang left on h0, so before this rule the lender waited until
some gang ended. Now the same decision reclaims h0's borrowers and one `keeper` gang, reclaims
one `ones` gang on h2 and moves the other `keeper` gang there, and places the lender on h0.
"""

from __future__ import annotations

from dataclasses import replace

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Policy
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.quota import QuotaBook
from gpufleet.core.snapshot import RunningGang, RunProgress, Snapshot
from gpufleet.core.validate import decision_problems
from tests.unit.core.placement_builders import cluster, gang

H100 = "H100-80GB"
HOURS = 2 * 3600.0  # expected remaining time of the running gangs


def snapshot(
    remaining_s: float = HOURS, keeper_movable: bool = True, h2_ones: bool = True
) -> Snapshot:
    nominal = {"lender": 8, "big": 0, "ones": 0, "keeper": 1, "full": 12, "other": 4}
    tree = QueueTree.build(
        [QueueSpec(q, None, 1.0, {H100: Quota(n)}, 0, None) for q, n in nominal.items()]
    )
    builder = cluster().nodes_of("h", H100, 3)
    builder.run("big-0", "h0", (0, 1, 2, 3), queue="big")
    builder.run("one-0", "h0", (4,), queue="ones")
    builder.run("one-1", "h0", (5,), queue="ones")
    builder.run("keep-0", "h0", (6,), queue="keeper")
    builder.run("keep-1", "h0", (7,), queue="keeper")
    builder.run("full-h1", "h1", tuple(range(8)), queue="full")
    builder.run("full-h2", "h2", (0, 1, 2, 3), queue="full")
    for k in range(4):
        builder.run(f"one-h2-{k}", "h2", (4 + k,), queue="ones" if h2_ones else "other")
    snap = builder.queues(tree).build()
    running: list[RunningGang] = []
    for r in snap.running:
        gpus = sum(len(x.gpus) for x in r.replicas)
        demand = gang(r.id, types=H100, gpus=gpus, queue=r.queue)
        progress = RunProgress(remaining_s, restart_s=60.0)
        if r.queue == "keeper" and not keeper_movable:
            progress = None  # the caller knows nothing of its progress: never moved
        running.append(replace(r, demand=demand, progress=progress))
    return replace(snap, running=tuple(running))


def lender() -> Gang:
    return gang("l", types=H100, gpus=8, queue="lender", waited_s=600.0)


def decide(snap: Snapshot, pending: list[Gang]) -> Decision:
    decision = place(snap, pending, Policy())
    assert decision_problems(snap, pending, decision) == []
    return decision


def test_the_owed_gang_is_placed_at_once_by_reclaiming_and_moving_a_blocker() -> None:
    snap = snapshot()
    decision = decide(snap, [lender()])
    placement = decision.placement("l")
    assert placement is not None and {r.node for r in placement.replicas} == {"h0"}
    (move,) = decision.moves
    assert move.gang_id.startswith("keep-") and move.for_gang == "l"
    assert move.placement.gpu_type == H100 and {r.node for r in move.placement.replicas} == {"h2"}
    victims = {p.gang_id for p in decision.preemptions}
    assert all(p.reclaim and p.for_gang == "l" for p in decision.preemptions)
    assert {"big-0", "one-0", "one-1"} <= victims
    assert len(victims & {"keep-0", "keep-1"}) == 1 and move.gang_id not in victims
    assert len([v for v in victims if v.startswith("one-h2-")]) == 1  # room for the move only
    assert not any(v.startswith("full") for v in victims)
    # The keeper queue ends at its nominal quota: a reclaim takes only what it borrowed.
    assert snap.queues is not None
    kept = tuple(r for r in snap.running if r.id not in victims)
    book = QuotaBook(snap.queues, replace(snap, running=kept))
    assert book.used("keeper", H100) == 1


def test_without_a_same_type_place_for_the_blocker_the_gang_waits() -> None:
    # h2's one-GPU gangs are of a queue within its nominal quota: no reclaim frees room there.
    decision = decide(snapshot(h2_ones=False), [lender()])
    assert decision.admitted_ids == set() and decision.preemptions == ()
    assert decision.moves == ()


def test_a_blocker_that_may_not_move_keeps_the_gang_waiting() -> None:
    decision = decide(snapshot(keeper_movable=False), [lender()])
    assert decision.admitted_ids == set() and decision.moves == ()


def test_no_move_of_gangs_that_end_before_their_restart_is_done() -> None:
    # The keeper gangs end in 30 s: a 60 s restart costs more than waiting for them.
    decision = decide(snapshot(remaining_s=30.0), [lender()])
    assert decision.placement("l") is None and decision.moves == ()
