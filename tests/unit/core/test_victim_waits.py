"""A gang that waits for a victim evicted in the same decision for another gang
(`GangPlacement.waits_for`) instead of evicting one more victim of its own."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpufleet.core.decision import Decision, GangPlacement, Preemption, victim_waits
from gpufleet.core.demand import Gang
from gpufleet.core.policy import Engine
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import ReplicaPlacement, Snapshot
from gpufleet.core.validate import decision_problems
from tests.unit.core.placement_builders import checked_decision, cluster, gang


def reclaim_in_turn_case() -> tuple[Snapshot, list[Gang]]:
    """Queue b holds 4 GPUs (nominal 2) in one low-priority gang r0-1; a borrows GPU 0 (r0-0).
    b's priority-3 gang p1 evicts r0-1, whose 4 GPUs p1 needs 1 of; b's p0 then fits on the
    3 others without reclaiming a's GPU (the decision of
    test_the_validator_judges_a_reclaim_on_the_account_of_its_turn)."""
    tree = QueueTree.build(
        [QueueSpec("a", quotas={"L4": Quota(0)}), QueueSpec("b", quotas={"L4": Quota(2)})]
    )
    snapshot = (
        cluster()
        .node("n0", "L4", 8)
        .run("r0-0", "n0", (0,), queue="a")
        .run("r0-1", "n0", (1, 2, 3, 4), queue="b")
        .run("r0-5", "n0", (5,), preemptible=False, queue="a")
        .run("r0-6", "n0", (6, 7), preemptible=False, queue="a")
        .queues(tree)
        .build()
    )
    pending = [gang("p0", "L4", gpus=1, queue="b"), gang("p1", "L4", gpus=1, queue="b", priority=3)]
    return snapshot, pending


@pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT])
def test_a_gang_waits_for_another_gangs_victim_instead_of_evicting_one_more(
    engine: Engine,
) -> None:
    snapshot, pending = reclaim_in_turn_case()
    decision = checked_decision(snapshot, pending, engine)
    assert decision.admitted_ids == {"p0", "p1"}
    # One eviction (b's own gang for p1), not a's borrowed GPU for p0 as well.
    assert decision.preemptions == (Preemption("r0-1", "p1"),)
    p0 = decision.placement("p0")
    assert p0 is not None and p0.waits_for == ("r0-1",)
    assert {g for r in p0.replicas for g in r.gpus} <= {1, 2, 3, 4}
    p1 = decision.placement("p1")
    assert p1 is not None and p1.waits_for == ()  # its own victim is its preemption


def test_the_validator_wants_a_gang_on_another_gangs_victim_to_wait_for_it() -> None:
    snapshot, pending = reclaim_in_turn_case()
    p1 = GangPlacement("p1", "L4", (ReplicaPlacement("n0", (1,)),))
    evict = (Preemption("r0-1", "p1"),)
    on_victim = GangPlacement("p0", "L4", (ReplicaPlacement("n0", (2,)),))
    waiting = Decision(placements=(replace(on_victim, waits_for=("r0-1",)), p1), preemptions=evict)
    assert decision_problems(snapshot, pending, waiting) == []
    # Bound at once, p0 would share GPU 2 with r0-1's pod in its grace period (the cluster's
    # 8 GPUs holding 9 meanwhile).
    rushed = Decision(placements=(on_victim, p1), preemptions=evict)
    assert decision_problems(snapshot, pending, rushed) == [
        "p0 takes GPUs of r0-1, evicted for p1, without waiting for it",
        "p0 bound at once, while the victims still run: cluster over its L4 capacity: 9 > 8 "
        "(a gang waits for the victims whose GPUs or queue quota it takes: waits_for)",
    ]
    # Waiting for a gang that frees none of its GPUs (or for its own victim) is wrong too.
    own = GangPlacement("p1", "L4", (ReplicaPlacement("n0", (1,)),), waits_for=("r0-1",))
    mistaken = Decision(
        placements=(replace(on_victim, waits_for=("r0-1",)), own), preemptions=evict
    )
    assert decision_problems(snapshot, pending, mistaken) == [
        "p1 waits for r0-1, which frees none of its GPUs and none of its type's quota for it"
    ]


def test_victim_waits_names_other_gangs_victims_under_a_placement() -> None:
    snapshot, _ = reclaim_in_turn_case()
    decision = Decision(
        placements=(
            GangPlacement("p0", "L4", (ReplicaPlacement("n0", (0, 2)),)),
            GangPlacement("p1", "L4", (ReplicaPlacement("n0", (1,)),)),
        ),
        preemptions=(Preemption("r0-0", "p0", reclaim=True), Preemption("r0-1", "p1")),
    )
    waits = {p.gang_id: p.waits_for for p in victim_waits(decision, snapshot.running).placements}
    assert waits == {"p0": ("r0-1",), "p1": ()}
