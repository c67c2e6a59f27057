"""Gangs outside every queue (pods naming none) on a cluster with queues.

They are held to the rules of a top-level queue with nominal 0 on every type (quota.py ROOT),
with both engines: a non-preemptible one takes no queue's idle nominal quota (it could never be
reclaimed) and waits QuotaExceeded saying so, but takes capacity no queue is promised; a
preemptible one borrows that idle nominal and is reclaimed whole when the queue's job comes;
none of them goes past a lending limit. A deleted queue's running gang is one of them. The
validator flags a decision that lets a non-preemptible one take promised capacity.
"""

from __future__ import annotations

import pytest

from gpufleet.core.decision import Decision, GangPlacement, PendingReason, ReplicaPlacement
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.validate import decision_problems
from gpufleet.core.validate_quota import quota_problems
from tests.unit.core.placement_builders import cluster, gang

H100 = "H100-80GB"
ENGINES = pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT], ids=str)


def queues(nominal: int, lending_limit: int | None = None) -> QueueTree:
    quota = Quota(nominal, lending_limit=lending_limit)
    return QueueTree.build([QueueSpec("own", None, 1.0, {H100: quota})])


def decide(snapshot: Snapshot, pending: list[Gang], engine: Engine) -> Decision:
    decision = place(snapshot, pending, Policy(solver=SolverSettings(engine=engine)))
    assert decision_problems(snapshot, pending, decision) == []
    return decision


@ENGINES
def test_a_non_preemptible_gang_in_no_queue_takes_no_idle_nominal(engine: Engine) -> None:
    """The audit's scene: 2 x 8 H100, queue `own` has nominal 8 and is idle. A 16-GPU
    non-preemptible gang of no queue would keep `own`'s 8 for good; it waits, and says why."""
    snapshot = cluster().nodes_of("h", H100, 2).queues(queues(8)).build()
    decision = decide(snapshot, [gang("bare", gpus=8, replicas=2, preemptible=False)], engine)
    assert decision.admitted_ids == set()
    reason = decision.pending_for("bare")
    assert reason is not None and reason.reason is PendingReason.QUOTA_EXCEEDED
    assert reason.message == (
        "a job in no queue needs 16 x H100-80GB; a non-preemptible job in no queue may use "
        "only capacity no queue is promised (8 free)"
    )
    # What no queue is promised it does take, and then the queue's own job still fits.
    half = decide(snapshot, [gang("bare", gpus=8, preemptible=False)], engine)
    assert half.admitted_ids == {"bare"}
    both = decide(
        snapshot,
        [gang("bare", gpus=8, preemptible=False), gang("mine", gpus=8, queue="own")],
        engine,
    )
    assert both.admitted_ids == {"bare", "mine"}


@ENGINES
def test_a_preemptible_gang_in_no_queue_borrows_and_is_reclaimed(engine: Engine) -> None:
    snapshot = cluster().nodes_of("h", H100, 2).queues(queues(8)).build()
    assert decide(snapshot, [gang("bare", gpus=8, replicas=2)], engine).admitted_ids == {"bare"}
    running = (
        cluster()
        .nodes_of("h", H100, 2)
        .run("bare", "h0", tuple(range(8)), priority=9)
        .run("bare", "h1", tuple(range(8)), priority=9)
        .queues(queues(8))
        .build()
    )
    decision = decide(running, [gang("mine", gpus=8, queue="own")], engine)
    assert decision.admitted_ids == {"mine"}
    assert [(p.gang_id, p.reclaim) for p in decision.preemptions] == [("bare", True)]


@ENGINES
def test_a_gang_in_no_queue_does_not_take_what_a_queue_keeps(engine: Engine) -> None:
    """`own` lends only 4 of its 8: a preemptible gang of no queue borrows those 4 at most."""
    snapshot = cluster().nodes_of("h", H100, 2).queues(queues(8, lending_limit=4)).build()
    decision = decide(snapshot, [gang("bare", gpus=4, replicas=(1, 4))], engine)
    placed = decision.placement("bare")
    assert placed is not None and placed.replica_count == 3  # 8 unpromised + 4 lent
    waiting = decide(snapshot, [gang("wide", gpus=8, replicas=2)], engine)
    reason = waiting.pending_for("wide")
    assert reason is not None and reason.reason is PendingReason.QUOTA_EXCEEDED
    assert reason.message == (
        "a job in no queue needs 16 x H100-80GB; of the cluster's 16, 0 are in use, "
        "own keeps 4 it does not lend"
    )


def test_a_gang_in_no_queue_on_a_fleet_its_like_fill_waits_for_gpus() -> None:
    """Gangs outside every queue hold all 16 GPUs; `own`'s nominal 8 is idle: the next gang of
    no queue waits for GPUs (InsufficientFreeGpus, as without queues: they come back as those
    gangs end), not for quota. With `own` using its nominal 8, what is left is short of the
    16 even once every gang of no queue ends: quota."""
    for first, expected in ((None, PendingReason.INSUFFICIENT_GPUS), ("own", None)):
        snapshot = (
            cluster()
            .nodes_of("h", H100, 2)
            .run("x0", "h0", tuple(range(8)), queue=first)
            .run("x1", "h1", tuple(range(8)))
            .queues(queues(8))
            .build()
        )
        decision = decide(snapshot, [gang("bare", gpus=8, replicas=2)], Engine.GREEDY)
        reason = decision.pending_for("bare")
        assert reason is not None
        assert reason.reason is (expected or PendingReason.QUOTA_EXCEEDED), reason


@ENGINES
def test_a_deleted_queues_running_gang_keeps_running_counted_outside_every_queue(
    engine: Engine,
) -> None:
    """Queue `gone` deleted under its running gang: no decision stops the gang for that; it is
    held to the rules of gangs in no queue (it only borrows), so `own`, within its nominal 8,
    reclaims it whole; a new job naming `gone` waits with QueueNotFound."""
    snapshot = (
        cluster()
        .nodes_of("h", H100, 2)
        .run("old", "h0", tuple(range(8)), queue="gone")
        .run("old", "h1", tuple(range(8)), queue="gone")
        .queues(queues(8))
        .build()
    )
    idle = decide(snapshot, [], engine)
    assert (idle.preemptions, idle.moves) == ((), ())
    again = decide(snapshot, [gang("next", gpus=8, queue="gone")], engine)
    assert again.preemptions == ()
    reason = again.pending_for("next")
    assert reason is not None and reason.reason is PendingReason.QUEUE_NOT_FOUND
    assert reason.message == "queue gone does not exist"
    decision = decide(snapshot, [gang("mine", gpus=8, queue="own")], engine)
    assert decision.admitted_ids == {"mine"}
    assert [(p.gang_id, p.reclaim) for p in decision.preemptions] == [("old", True)]


@ENGINES
def test_without_queues_a_gang_in_no_queue_has_no_quota_at_all(engine: Engine) -> None:
    """No queue objects (no gate) or none listed (an empty tree): nothing is promised."""
    bare = gang("bare", gpus=8, replicas=2, preemptible=False)
    for snapshot in (
        cluster().nodes_of("h", H100, 2).build(),
        cluster().nodes_of("h", H100, 2).queues(QueueTree.build([])).build(),
    ):
        assert decide(snapshot, [bare], engine).admitted_ids == {"bare"}


def test_the_validator_flags_a_non_preemptible_gang_in_no_queue_on_promised_capacity() -> None:
    snapshot = cluster().nodes_of("h", H100, 2).queues(queues(8)).build()
    bare = gang("bare", gpus=8, replicas=2, preemptible=False)
    replicas = tuple(ReplicaPlacement(f"h{i}", tuple(range(8))) for i in range(2))
    decision = Decision(placements=(GangPlacement("bare", H100, replicas),))
    assert quota_problems(snapshot, [bare], decision) == [
        f"non-preemptible bare borrows {H100} that may be reclaimed"
    ]
