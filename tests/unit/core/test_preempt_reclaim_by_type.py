"""A wide gang owed its nominal quota of one type reclaims it even when the cheapest borrowers
to evict are on another type it accepts (preempt.py's victim sets, one type at a time).

Hand-built after the owed gangs of tuning window 2017-10-23 (seed 0) replayed with 30-minute
checkpoints: the lender's 16-GPU gang (16 one-GPU replicas, any topology) accepts T4 and V100
and is within its nominal 16 T4s and 16 V100s; every T4 (five 4-GPU nodes) holds a one-GPU
gang of `lent`, which borrows all of them, and each of the two 8-GPU V100 nodes four one-GPU
gangs of `lent` and four of `keeper` (within its nominal quota: never reclaimed). The V100
borrowers checkpointed more recently (less unsaved work), so they come first among the
eviction candidates: the first victim set (16 candidates) holds all 8 V100 borrowers and 8 T4
ones, which cannot make room for 16 GPUs on either type, and no one-node set holds 16 GPUs.
Before the per-type sets the lender waited for borrowers to end.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import RunProgress, Snapshot
from gpufleet.core.validate import decision_problems
from tests.unit.core.placement_builders import cluster, gang

T4 = "T4"
V100 = "V100-32GB"
T4_NODES = 5


def snapshot(v100_unsaved_s: float) -> Snapshot:
    tree = QueueTree.build(
        [
            QueueSpec("lender", quotas={T4: Quota(16), V100: Quota(16)}),
            QueueSpec("lent", quotas={T4: Quota(0), V100: Quota(0)}),
            QueueSpec("keeper", quotas={T4: Quota(0), V100: Quota(8)}),
        ]
    )
    builder = cluster().nodes_of("t", T4, T4_NODES, count=4).nodes_of("v", V100, 2)
    for n in range(T4_NODES):
        for k in range(4):
            builder.run(f"t4-{n}-{k}", f"t{n}", (k,), queue="lent")
    for n in range(2):
        for k in range(4):
            builder.run(f"v100-{n}-{k}", f"v{n}", (k,), queue="lent")
            builder.run(f"keep-{n}-{k}", f"v{n}", (4 + k,), queue="keeper")
    snap = builder.queues(tree).build()
    running = tuple(
        replace(
            r,
            progress=RunProgress(3600.0, unsaved_s=v100_unsaved_s if r.gpu_type == V100 else 900.0),
        )
        for r in snap.running
    )
    return replace(snap, running=running)


def lender() -> Gang:
    return gang("wide", types=(T4, V100), replicas=16, gpus=1, queue="lender", waited_s=600.0)


def decide(snap: Snapshot, engine: Engine) -> Decision:
    pending = [lender()]
    decision = place(snap, pending, Policy(solver=SolverSettings(engine=engine)))
    assert decision_problems(snap, pending, decision) == []
    return decision


@pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT])
def test_the_owed_gang_reclaims_its_type_past_cheaper_borrowers_of_another(
    engine: Engine,
) -> None:
    decision = decide(snapshot(v100_unsaved_s=60.0), engine)
    placement = decision.placement("wide")
    assert placement is not None and placement.gpu_type == T4
    # Only T4 borrowers, all reclaims, as many as the gang needs (no GPU was free).
    victims = {(p.gang_id, p.reclaim) for p in decision.preemptions}
    assert len(victims) == 16
    assert all(reclaim and gang_id.startswith("t4-") for gang_id, reclaim in victims)


def test_control_with_the_t4_borrowers_first_the_first_set_serves() -> None:
    # The V100 borrowers lose more: the first set is 16 T4 gangs, as before this change.
    decision = decide(snapshot(v100_unsaved_s=1700.0), Engine.GREEDY)
    placement = decision.placement("wide")
    assert placement is not None and placement.gpu_type == T4
    assert all(p.gang_id.startswith("t4-") for p in decision.preemptions)
