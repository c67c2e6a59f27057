"""Placement with queues: quotas, borrowing, reclaim, fair share and the pending reasons.

Aspects, with both engines where the engine matters: a queue borrows idle capacity; a lender's
gang takes its nominal back by preempting whole gangs of borrowers only (never of queues within
their nominal, never by priority across queues); inside a queue the priority rule still holds;
limits of the queue and its ancestors bound what is admitted (an elastic gang is cut to fit);
non-preemptible gangs do not borrow what may be reclaimed; missing and unusable queues,
priorities outside the queue's range, quota and reclaim waits get their reasons and numbers;
the fair-share order is measured in throughput, not GPU counts; aging lets a long-waiting gang
go first.
"""

from __future__ import annotations

import pytest

from gpufleet.core.decision import Decision, PendingReason
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.validate import decision_problems
from tests.unit.core.placement_builders import cluster, gang

H100 = "H100-80GB"
ENGINES = pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT], ids=str)


def teams(*specs: QueueSpec) -> QueueTree:
    return QueueTree.build(specs)


def team(
    name: str,
    nominal: int = 8,
    parent: str | None = None,
    borrowing_limit: int | None = None,
    priority_min: int = 0,
    priority_max: int | None = None,
) -> QueueSpec:
    quota = Quota(nominal, borrowing_limit=borrowing_limit)
    return QueueSpec(name, parent, 1.0, {H100: quota}, priority_min, priority_max)


def decide(snapshot: Snapshot, pending: list[Gang], engine: Engine = Engine.GREEDY) -> Decision:
    decision = place(snapshot, pending, Policy(solver=SolverSettings(engine=engine)))
    assert decision_problems(snapshot, pending, decision) == []
    return decision


@ENGINES
def test_a_queue_borrows_what_an_idle_queue_does_not_use(engine: Engine) -> None:
    snapshot = cluster().nodes_of("h", H100, 2).queues(teams(team("a"), team("b"))).build()
    pending = [gang(f"b{i}", gpus=8, queue="b") for i in range(2)]
    assert decide(snapshot, pending, engine).admitted_ids == {"b0", "b1"}


@ENGINES
def test_the_lender_reclaims_by_preempting_whole_gangs_of_the_borrower(engine: Engine) -> None:
    snapshot = (
        cluster()
        .nodes_of("h", H100, 2)
        .run("b0", "h0", tuple(range(8)), priority=5, queue="b")
        .run("b1", "h1", (0, 1, 2, 3), priority=5, queue="b")
        .run("b1", "h1", (4, 5, 6, 7), priority=5, queue="b")
        .queues(teams(team("a"), team("b")))
        .build()
    )
    decision = decide(snapshot, [gang("a0", gpus=8, queue="a")], engine)
    assert decision.admitted_ids == {"a0"}
    assert len(decision.preemptions) == 1  # one whole gang: b is then back at its nominal 8
    assert decision.preemptions[0].reclaim and decision.preemptions[0].for_gang == "a0"


def test_reclaim_takes_only_from_queues_above_their_nominal() -> None:
    snapshot = (
        cluster()
        .nodes_of("h", H100, 2)
        .run("b0", "h0", tuple(range(8)), queue="b")  # b at its nominal 8
        .run("c0", "h1", tuple(range(8)), priority=9, queue="c")  # c borrows all 8
        .queues(teams(team("a", 8), team("b", 8), team("c", 0)))
        .build()
    )
    decision = decide(snapshot, [gang("a0", gpus=8, queue="a")])
    assert [p.gang_id for p in decision.preemptions] == ["c0"]


def test_priority_never_preempts_across_queues() -> None:
    snapshot = (
        cluster()
        .node("h0", H100)
        .run("b0", "h0", tuple(range(8)), priority=0, queue="b")
        .queues(teams(team("a", 0), team("b", 8)))
        .build()
    )
    decision = decide(snapshot, [gang("a0", gpus=8, priority=9, queue="a")])
    assert decision.preemptions == ()
    pending = decision.pending_for("a0")  # b is within its nominal: nothing to borrow or take
    assert pending is not None and pending.reason is PendingReason.QUOTA_EXCEEDED
    assert "the rest is other queues' nominal quota, in use" in pending.message


@ENGINES
def test_a_queue_within_its_nominal_reclaims_from_gangs_outside_every_queue(
    engine: Engine,
) -> None:
    """The scale bench's measured job on a fleet full of gangs outside every queue: in its own
    queue with a nominal quota of its GPUs it takes them, whatever their priority; in a queue
    with no nominal quota (as the default queue) no priority gets it anything."""
    snapshot = (
        cluster()
        .nodes_of("h", H100, 2)
        .run("x0", "h0", tuple(range(8)), priority=2)
        .run("x1", "h1", tuple(range(8)), priority=2)
        .queues(teams(team("own", 8), team("none", 0)))
        .build()
    )
    decision = decide(snapshot, [gang("m", gpus=1, replicas=8, queue="own")], engine)
    assert decision.admitted_ids == {"m"}
    assert [(p.gang_id, p.reclaim) for p in decision.preemptions] in (
        [("x0", True)],
        [("x1", True)],
    )
    waiting = decide(snapshot, [gang("d", gpus=1, replicas=8, priority=9, queue="none")], engine)
    assert waiting.admitted_ids == set() and waiting.preemptions == ()
    reason = waiting.pending_for("d")
    assert reason is not None and reason.reason is PendingReason.QUOTA_EXCEEDED


def test_inside_a_queue_higher_priority_preempts_lower() -> None:
    snapshot = (
        cluster()
        .node("h0", H100)
        .run("low", "h0", tuple(range(8)), priority=0, queue="a")
        .queues(teams(team("a", 8)))
        .build()
    )
    decision = decide(snapshot, [gang("high", gpus=8, priority=3, queue="a")])
    assert decision.admitted_ids == {"high"}
    assert [(p.gang_id, p.reclaim) for p in decision.preemptions] == [("low", False)]


def test_reclaim_waits_and_says_why_when_preemption_is_off() -> None:
    snapshot = (
        cluster()
        .node("h0", H100)
        .run("b0", "h0", tuple(range(8)), queue="b")
        .queues(teams(team("a", 8), team("b", 0)))
        .build()
    )
    pending = [gang("a0", gpus=4, queue="a")]
    decision = place(snapshot, pending, Policy(allow_preemption=False))
    reason = decision.pending_for("a0")
    assert reason is not None and reason.reason is PendingReason.WAITING_FOR_RECLAIM
    assert reason.message == (
        "within queue a's nominal quota (0 + 4 of 8 x H100-80GB); waiting for borrowed "
        "capacity to be reclaimed: b borrows 8 x H100-80GB"
    )


@ENGINES
def test_ancestors_limits_bound_their_children(engine: Engine) -> None:
    tree = teams(
        team("dept", 8, borrowing_limit=2),
        team("t1", 4, parent="dept"),
        team("t2", 4, parent="dept"),
        team("other", 8),
    )
    snapshot = cluster().nodes_of("h", H100, 2).queues(tree).build()
    pending = [gang(f"t1-{i}", gpus=4, queue="t1") for i in range(3)]
    decision = decide(snapshot, pending, engine)
    assert len(decision.admitted_ids) == 2  # 8 of the department's 10; a third 4 is 12
    left = [p for p in decision.pending if p.reason is PendingReason.QUOTA_EXCEEDED]
    assert len(left) == 1
    assert "ancestor dept would exceed its quota for 4 x H100-80GB" in left[0].message


@ENGINES
def test_an_elastic_gang_is_cut_to_what_its_quota_allows(engine: Engine) -> None:
    tree = teams(team("a", 2, borrowing_limit=1), team("b", 8))
    snapshot = cluster().node("h0", H100).queues(tree).build()
    decision = decide(snapshot, [gang("el", replicas=(1, 8), queue="a")], engine)
    placed = decision.placement("el")
    assert placed is not None and placed.replica_count == 3


def test_non_preemptible_gangs_do_not_borrow_promised_capacity() -> None:
    tree = teams(team("a", 0), team("b", 8))
    snapshot = cluster().node("h0", H100).queues(tree).build()
    decision = decide(snapshot, [gang("np", gpus=4, preemptible=False, queue="a")])
    reason = decision.pending_for("np")
    assert reason is not None and reason.reason is PendingReason.QUOTA_EXCEEDED
    assert "non-preemptible" in reason.message


def test_non_preemptible_gangs_use_capacity_no_queue_is_promised() -> None:
    # Only the default queue, with no quota: nothing is promised, as without queues.
    snapshot = cluster().node("h0", H100).queues(teams(team("default", 0))).build()
    decision = decide(snapshot, [gang("np", gpus=8, preemptible=False, queue="default")])
    assert decision.admitted_ids == {"np"}


def test_missing_and_unusable_queues_and_priority_ranges_are_explained() -> None:
    tree = teams(
        team("a", 8, priority_min=1, priority_max=3),
        QueueSpec("orphan", parent="gone"),
    )
    snapshot = cluster().node("h0", H100).queues(tree).build()
    pending = [
        gang("lost", queue="nope"),
        gang("orphaned", queue="orphan"),
        gang("too-high", priority=4, queue="a"),
        gang("fine", priority=2, queue="a"),
    ]
    decision = decide(snapshot, pending)
    assert decision.admitted_ids == {"fine"}
    reasons = {p.gang_id: (p.reason, p.message) for p in decision.pending}
    assert reasons == {
        "lost": (PendingReason.QUEUE_NOT_FOUND, "queue nope does not exist"),
        "orphaned": (
            PendingReason.QUEUE_NOT_FOUND,
            "queue orphan is unusable: parent gone does not exist",
        ),
        "too-high": (
            PendingReason.QUEUE_NOT_ALLOWED,
            "priority 4 is outside queue a's priority range 1..3",
        ),
    }


def test_quota_exceeded_names_the_queue_the_type_and_the_numbers() -> None:
    tree = teams(team("a", 4, borrowing_limit=0), team("b", 4))
    snapshot = cluster().node("h0", H100).run("a0", "h0", (0, 1, 2), queue="a").queues(tree).build()
    decision = decide(snapshot, [gang("a1", gpus=2, queue="a")])
    reason = decision.pending_for("a1")
    assert reason is not None and reason.reason is PendingReason.QUOTA_EXCEEDED
    assert reason.message == (
        "queue a would exceed its quota for 2 x H100-80GB: uses 3 of nominal 4 + borrowing limit 0"
    )


def test_fair_share_is_measured_in_throughput_not_gpu_counts() -> None:
    # Both queues hold 4 GPUs; fast's jobs got H100s, slow's got T4s, which run them ~5x
    # slower. Fair share by throughput gives the next free GPUs to slow first.
    tree = teams(team("fast", 0), team("slow", 0))
    snapshot = (
        cluster()
        .node("h0", H100, 4)
        .node("t0", "T4", 4)
        .node("l0", "L4", 4)
        .run("f0", "h0", (0, 1, 2, 3), queue="fast")
        .run("s0", "t0", (0, 1, 2, 3), queue="slow")
        .queues(tree)
        .build()
    )
    pending = [gang("f1", "L4", gpus=4, queue="fast"), gang("s1", "L4", gpus=4, queue="slow")]
    decision = decide(snapshot, pending)
    assert decision.admitted_ids == {"s1"}


def test_a_gang_waiting_past_the_aging_time_goes_first() -> None:
    tree = teams(team("rich", 0), team("poor", 0))
    snapshot = (
        cluster()
        .node("h0", H100, 4)
        .node("h1", H100, 4)
        .run("r0", "h0", (0, 1, 2, 3), queue="rich")
        .queues(tree)
        .build()
    )
    young = [gang("r1", gpus=4, queue="rich", waited_s=10), gang("p1", gpus=4, queue="poor")]
    assert decide(snapshot, young).admitted_ids == {"p1"}
    old = [gang("r1", gpus=4, queue="rich", waited_s=7200), gang("p1", gpus=4, queue="poor")]
    assert decide(snapshot, old).admitted_ids == {"r1"}


def test_decisions_with_queues_are_deterministic() -> None:
    tree = teams(team("a", 4), team("b", 4), team("c", 0))
    snapshot = cluster().nodes_of("h", H100, 1).queues(tree).build()
    pending = [gang(f"{q}{i}", gpus=2, queue=q) for q in "abc" for i in range(3)]
    first = place(snapshot, pending, Policy())
    assert all(place(snapshot, pending, Policy()) == first for _ in range(3))
