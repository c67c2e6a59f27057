"""CP-SAT's quota constraints when an account is over its limit before the decision
(quota_cpsat.py `_at_most`, and the bound of its variables).

A queue may keep more than the fleet holds (a lending limit, nodes gone) or use more than its
nominal quota plus borrowing limit (a quota lowered under running gangs), and a top-level
queue's nominal quota may exceed the fleet. The model had no solution at all then, whatever
the gangs asked for (a constant over its limit, or a variable whose domain stopped below the
nominal quota it had to reach), so CP-SAT, the default engine, fell back to greedy's decision
in every such cycle. Now nothing more is admitted into an account already over its limit, as
greedy's quota check refuses any amount there, and everything else is solved.
"""

from __future__ import annotations

import pytest

from gpufleet.core.policy import Engine
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from tests.unit.core.placement_builders import checked_decision, cluster, gang

H100, L4 = "H100-80GB", "L4"


@pytest.mark.parametrize(
    "over",
    [
        Quota(16),  # a nominal quota over the fleet's 8 H100s
        Quota(16, lending_limit=0),  # kept, not lent: the cluster's account is over at once
    ],
    ids=["nominal", "kept"],
)
def test_cpsat_solves_beside_a_queue_whose_quota_exceeds_the_fleet(over: Quota) -> None:
    a = QueueSpec("a", quotas={H100: Quota(2), L4: Quota(8)})
    tree = QueueTree.build([QueueSpec("big", quotas={H100: over}), a])
    snapshot = cluster().node("h0", H100).node("l0", L4).queues(tree).build()
    # a's H100 gang is not preemptible: it needs a within its nominal quota or capacity no
    # queue is promised, a check whose variables stopped below big's nominal 16.
    pending = [gang("a1", H100, preemptible=False, queue="a"), gang("a2", L4, gpus=2, queue="a")]
    decision = checked_decision(snapshot, pending, Engine.CPSAT)
    assert decision.stats.engine == "cpsat" and decision.stats.status == "OPTIMAL"
    admitted = checked_decision(snapshot, pending, Engine.GREEDY).admitted_ids
    assert decision.admitted_ids == admitted


def test_cpsat_solves_when_a_queue_uses_more_than_its_lowered_quota() -> None:
    # b runs 4 H100s under a quota since lowered to nominal 1 + borrowing 1: b may start no
    # more, a's gang still starts.
    tree = QueueTree.build(
        [
            QueueSpec("a", quotas={H100: Quota(4)}),
            QueueSpec("b", quotas={H100: Quota(1, borrowing_limit=1)}),
        ]
    )
    snapshot = (
        cluster().node("h0", H100).run("b0", "h0", (0, 1, 2, 3), queue="b").queues(tree).build()
    )
    pending = [gang("a1", gpus=2, queue="a"), gang("b1", queue="b")]
    decision = checked_decision(snapshot, pending, Engine.CPSAT)
    assert decision.stats.engine == "cpsat" and decision.stats.status == "OPTIMAL"
    assert decision.admitted_ids == {"a1"}
