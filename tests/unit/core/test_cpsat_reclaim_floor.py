"""A reclaim greedy made stays a reclaim in CP-SAT's decision (quota_cpsat.py
`add_reclaim_floors`).

CP-SAT keeps greedy's evictions but chooses the placements anew. Greedy put one of b's gangs on
L4, so b borrowed L4, and reclaimed b's L4 gang r2 for a's gang; the model then moved b's gang
to H100 and left r2 evicted from a queue within its nominal L4 quota (the validator: "r2
reclaimed though queue b did not borrow L4"; the scale bench with 8 queues had 3 such reclaims
on each of two samples). Now the model must keep b borrowing L4.
"""

from __future__ import annotations

from gpufleet.core.policy import Engine
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from tests.unit.core.placement_builders import checked_decision, cluster, gang

H100, L4 = "H100-80GB", "L4"


def test_cpsat_keeps_the_reclaimed_queue_a_borrower() -> None:
    tree = QueueTree.build(
        [
            QueueSpec("a", quotas={H100: Quota(3), L4: Quota(3)}),
            QueueSpec("b", quotas={H100: Quota(1), L4: Quota(2)}),
            QueueSpec("c", quotas={H100: Quota(1), L4: Quota(4)}),
        ]
    )
    snapshot = (
        cluster()
        .node("h0", H100, 4)
        .node("l0", L4, 4)
        .run("r0", "h0", (0, 1), queue="b")
        .run("r1", "l0", (0,), queue="a")
        .run("r2", "l0", (1, 2), queue="b")
        .queues(tree)
        .build()
    )
    both = (H100, L4)
    pending = [
        gang("p2", both, gpus=2, priority=1, queue="c", waited_s=1268.0),
        gang("p3", H100, queue="a", waited_s=3031.0),
        gang("p4", both, gpus=2, priority=1, queue="a", waited_s=3128.0),
        gang("p5", both, queue="b", waited_s=2765.0),
    ]
    # checked_decision asserts the validator finds nothing, the reclaim of r2 included.
    decision = checked_decision(snapshot, pending, Engine.CPSAT)
    assert decision.stats.engine == "cpsat"
    reclaims = {(p.gang_id, p.for_gang) for p in decision.preemptions}
    assert ("r2", "p4") in reclaims
    on = {p.gang_id: p.gpu_type for p in decision.placements}
    assert on["p4"] == L4 and on["p5"] == L4  # b borrows L4 (2 + 1 > 2): r2 is a reclaim
