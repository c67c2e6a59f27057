"""Delay scheduling across GPU types with queues: a queue's guarantee is not delayed.

Aspects, with both engines: a gang that just arrived and would stay within its queue's nominal
quota of a slow type starts there at once (on free GPUs, or by reclaiming them from a borrower)
although the type delay keeps other new gangs off that type; a gang that would borrow the slow
type still waits for a faster one.
"""

from __future__ import annotations

import pytest

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings, TypeDelay
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.validate import decision_problems
from tests.unit.core.placement_builders import cluster, gang

H100, T4 = "H100-80GB", "T4"
ENGINES = pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT], ids=str)
DELAY = TypeDelay(min_speed_share=0.5, patience_s=1800.0)


def fleet(t4_borrowed: bool) -> Snapshot:
    """Two H100s held by queue `fast` within its nominal quota (never reclaimable); four T4s,
    free or (`t4_borrowed`) all held by queue `borrower`, which has no nominal quota."""
    tree = QueueTree.build(
        [
            QueueSpec("fast", quotas={H100: Quota(2)}),
            QueueSpec("owner", quotas={T4: Quota(4)}),
            QueueSpec("borrower", quotas={}),
        ]
    )
    builder = cluster().node("h", H100, count=2).node("t", T4, count=4).queues(tree)
    builder.run("f0", "h", (0,), queue="fast").run("f1", "h", (1,), queue="fast")
    if t4_borrowed:
        builder.run("b0", "t", (0, 1, 2, 3), queue="borrower")
    return builder.build()


def decide(snapshot: Snapshot, pending: list[Gang], engine: Engine) -> Decision:
    policy = Policy(solver=SolverSettings(engine=engine), type_delay=DELAY)
    decision = place(snapshot, pending, policy)
    assert decision_problems(snapshot, pending, decision) == []
    return decision


@ENGINES
def test_a_gang_within_its_nominal_quota_of_a_slow_type_starts_there_at_once(
    engine: Engine,
) -> None:
    decision = decide(fleet(False), [gang("o", (H100, T4), gpus=2, queue="owner")], engine)
    assert [(p.gang_id, p.gpu_type) for p in decision.placements] == [("o", T4)]


@ENGINES
def test_it_reclaims_the_slow_type_from_a_borrower_at_once(engine: Engine) -> None:
    decision = decide(fleet(True), [gang("o", (H100, T4), gpus=2, queue="owner")], engine)
    assert [(p.gang_id, p.gpu_type) for p in decision.placements] == [("o", T4)]
    assert [(p.gang_id, p.reclaim) for p in decision.preemptions] == [("b0", True)]


@ENGINES
def test_a_gang_that_would_borrow_the_slow_type_waits_for_a_faster_one(engine: Engine) -> None:
    decision = decide(fleet(False), [gang("x", (H100, T4), gpus=2, queue="borrower")], engine)
    assert decision.placements == ()  # the four free T4s stay free
    assert [p.gang_id for p in decision.pending] == ["x"]
