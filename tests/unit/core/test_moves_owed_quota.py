"""Moves do not deepen a queue's debt (moves.py `_Owed`, only with queues).

Issue 13 ("owed" gangs, scoring window 2017-12-01): (1) a decision that left an owed 8-GPU gang
seven free GPUs on a node moved running gangs onto them, so the next cycle no reclaim could make
room; (2) a decision moved a queue's own gang from T4, where the queue was within its nominal
quota and had gangs waiting for T4, to an H100 where it borrows, re-opening a T4 slot that its
waiting gangs were owed.
"""

from __future__ import annotations

from dataclasses import replace

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Policy
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import RunProgress, Snapshot
from gpufleet.core.validate import decision_problems
from tests.unit.core.placement_builders import cluster, gang

FAST, SLOW = "H100-80GB", "T4"


def _snapshot(
    nominal: dict[str, dict[str, int]], builder_runs: list[tuple], slow_gpus: int = 8
) -> Snapshot:
    tree = QueueTree.build(
        [
            QueueSpec(q, None, 1.0, {t: Quota(n) for t, n in quotas.items()}, 0, None)
            for q, quotas in nominal.items()
        ]
    )
    builder = cluster().nodes_of("h", FAST, 1).nodes_of("t", SLOW, 1, slow_gpus)
    for gang_id, node, gpus, queue, _disruptable in builder_runs:
        builder.run(gang_id, node, gpus, queue=queue)
    snap = builder.queues(tree).build()
    protected = {r[0] for r in builder_runs if not r[4]}
    running = []
    for r in snap.running:
        gpus = sum(len(x.gpus) for x in r.replicas)
        demand = gang(r.id, types=(SLOW, FAST), gpus=gpus, queue=r.queue)
        running.append(
            replace(
                r,
                demand=demand,
                progress=RunProgress(4 * 3600.0, restart_s=60.0),
                disruptable=r.id not in protected,
            )
        )
    return replace(snap, running=tuple(running))


def _decide(snap: Snapshot, pending: list[Gang]) -> Decision:
    decision = place(snap, pending, Policy())
    assert decision_problems(snap, pending, decision) == []
    return decision


def _owed_room(waiting: bool) -> Decision:
    # h0: one GPU of `other`, which borrows H100 (a disruption budget protects the gang now),
    # so `owner`'s 8-GPU gang, within its nominal 8 of H100, does not fit in the seven free
    # GPUs; a later reclaim can give it the node, unless moves fill it first.
    snap = _snapshot(
        {"owner": {FAST: 8, SLOW: 0}, "other": {FAST: 0, SLOW: 8}},
        [("blk", "h0", (0,), "other", False), ("slow", "t0", (0,), "other", True)],
    )
    pending = [gang("big", types=FAST, gpus=8, queue="owner")] if waiting else []
    return _decide(snap, pending)


def test_no_move_takes_gpus_of_a_type_an_owed_gang_waits_for() -> None:
    decision = _owed_room(waiting=True)
    assert decision.admitted_ids == set()
    assert [m for m in decision.moves if m.placement.gpu_type == FAST] == []


def test_without_an_owed_gang_the_same_move_is_made() -> None:
    decision = _owed_room(waiting=False)
    assert [(m.gang_id, m.placement.gpu_type) for m in decision.moves] == [("slow", FAST)]


def _own_slot(waiting: bool) -> Decision:
    # `q` holds its whole nominal T4 (1) with `mine`, on the only T4 GPU; its other gang waits
    # for T4 only.
    # `lender`'s unused H100 nominal is what `mine` would borrow by moving.
    snap = _snapshot(
        {"q": {SLOW: 1, FAST: 0}, "lender": {FAST: 8, SLOW: 0}},
        [("mine", "t0", (0,), "q", True)],
        slow_gpus=1,
    )
    pending = [gang("wait", types=SLOW, gpus=1, queue="q")] if waiting else []
    return _decide(snap, pending)


def test_a_queue_does_not_move_off_its_owed_type_to_borrow_while_its_gangs_wait_for_it() -> None:
    decision = _own_slot(waiting=True)
    assert decision.admitted_ids == set()
    assert decision.moves == ()


def test_with_nothing_waiting_the_queue_moves_to_borrow() -> None:
    decision = _own_slot(waiting=False)
    assert [(m.gang_id, m.placement.gpu_type) for m in decision.moves] == [("mine", FAST)]
