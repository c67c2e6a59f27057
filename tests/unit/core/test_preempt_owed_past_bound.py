"""A gang owed its nominal quota is still tried for a reclaim when the decision's bound on
preempting gangs (`Policy.max_preempting_gangs`) was spent on gangs ahead of it that found no
victim set making room (preempt.py, MAX_OWED_GANGS).

Hand-built after tuning window 2017-10-23 (seed 1) replayed with 30-minute checkpoints: a
one-GPU gang owed a T4, 25th of 31 stuck gangs, was never tried and its queue's T4 stayed
borrowed. Here `borrower` holds both 4-GPU T4 nodes beyond its nominal quota of 0; `wide`'s
gangs (within its nominal quota and waiting past the queue aging, so ahead in line) each need
8 GPUs on one node, which no eviction gives them, and use up a bound of 2; `lender` is owed
one T4.
"""

from __future__ import annotations

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Policy
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.validate import decision_problems
from tests.unit.core.placement_builders import cluster, gang

T4 = "T4"


def snapshot() -> Snapshot:
    tree = QueueTree.build(
        [
            QueueSpec("borrower", quotas={T4: Quota(0)}),
            QueueSpec("lender", quotas={T4: Quota(1)}),
            QueueSpec("wide", quotas={T4: Quota(7 * 8)}),
        ]
    )
    builder = cluster().nodes_of("t", T4, 2, count=4)
    for n in range(2):
        for k in range(4):
            builder.run(f"b-{n}-{k}", f"t{n}", (k,), queue="borrower")
    return builder.queues(tree).build()


def pending(wide: int) -> list[Gang]:
    gangs = [
        gang(f"wide-{i}", types=T4, gpus=8, queue="wide", waited_s=7200.0) for i in range(wide)
    ]
    return [*gangs, gang("owed", types=T4, gpus=1, queue="lender", waited_s=600.0)]


def decide(wide: int) -> Decision:
    snap = snapshot()
    gangs = pending(wide)
    decision = place(snap, gangs, Policy(max_preempting_gangs=2))
    assert decision_problems(snap, gangs, decision) == []
    return decision


def test_the_owed_gang_reclaims_past_the_spent_bound() -> None:
    decision = decide(wide=3)
    placement = decision.placement("owed")
    assert placement is not None and placement.gpu_type == T4
    victims = [(p.gang_id, p.for_gang, p.reclaim) for p in decision.preemptions]
    assert len(victims) == 1
    gang_id, preemptor, reclaim = victims[0]
    assert gang_id.startswith("b-") and preemptor == "owed" and reclaim


def test_control_within_the_bound_the_owed_gang_reclaims() -> None:
    decision = decide(wide=1)
    assert decision.placement("owed") is not None
