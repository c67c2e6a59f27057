"""Why a gang waits when only gangs a PodDisruptionBudget protects stand in the way
(explain.py, `PreemptionBlockedByDisruptionBudget`).

Aspects: a gang that preemption would make room for but for protected gangs waits for the
budget, naming the fewest protected gangs it needs (both engines); it keeps the capacity reason
when preemption could not help anyway (a protected gang of its own priority or not preemptible,
a gang too large even with every victim gone, preemption switched off) or when gangs no budget
protects would make room (preemption declined them: here, no gang may preempt this decision);
a reclaim blocked by a protected borrower says so rather than WaitingForReclaim, and so does a
gang of a borrowing queue blocked from preempting within it (not QuotaExceeded); the what-if
leaves the state as it found it.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from gpufleet.core.admission import QueueGate
from gpufleet.core.decision import Decision, PendingReason
from gpufleet.core.demand import Gang
from gpufleet.core.explain import explain
from gpufleet.core.greedy import Memo
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.core.validate import decision_problems
from tests.unit.core.placement_builders import cluster, gang

ENGINES = [Engine.GREEDY, Engine.CPSAT]
BUDGET = PendingReason.BUDGET


def protect(snapshot: Snapshot, *ids: str) -> Snapshot:
    running = tuple(replace(r, disruptable=False) if r.id in ids else r for r in snapshot.running)
    return replace(snapshot, running=running)


def decide(
    snapshot: Snapshot, pending: list[Gang], engine: Engine = Engine.GREEDY, **policy: Any
) -> Decision:
    """`engine`'s decision under the default policy with `policy`'s fields, validated."""
    decision = place(snapshot, pending, Policy(solver=SolverSettings(engine=engine), **policy))
    assert decision_problems(snapshot, pending, decision) == []
    return decision


def reason(decision: Decision, gang_id: str = "g") -> tuple[PendingReason, str]:
    pending = decision.pending_for(gang_id)
    assert pending is not None
    return pending.reason, pending.message


def two_low_gangs() -> Snapshot:
    """One 4-GPU node held by two 2-GPU gangs of priority 0 (cheap) and 1 (other)."""
    return (
        cluster()
        .node("a", "A10", 4)
        .run("cheap", "a", (0, 1), priority=0)
        .run("other", "a", (2, 3), priority=1)
        .build()
    )


@pytest.mark.parametrize("engine", ENGINES)
def test_a_gang_blocked_only_by_protected_victims_waits_for_the_budget(engine: Engine) -> None:
    snapshot = two_low_gangs()
    wide = [gang("g", "A10", gpus=4, priority=5)]
    assert [p.gang_id for p in decide(snapshot, wide, engine).preemptions] == ["cheap", "other"]
    decision = decide(protect(snapshot, "cheap"), wide, engine)
    assert decision.preemptions == ()
    assert reason(decision) == (
        BUDGET,
        "cannot preempt cheap: a PodDisruptionBudget forbids stopping it now",
    )
    both = decide(protect(snapshot, "cheap", "other"), wide, engine)
    assert reason(both) == (
        BUDGET,
        "cannot preempt cheap, other: a PodDisruptionBudget forbids stopping them now",
    )


def test_only_the_protected_gangs_it_needs_are_named() -> None:
    # Two GPUs are enough: of the two protected gangs the lower-priority one is named.
    decision = decide(
        protect(two_low_gangs(), "cheap", "other"), [gang("g", "A10", gpus=2, priority=5)]
    )
    assert reason(decision) == (
        BUDGET,
        "cannot preempt cheap: a PodDisruptionBudget forbids stopping it now",
    )


def test_protected_gangs_it_may_not_preempt_anyway_are_not_blamed() -> None:
    snapshot = protect(two_low_gangs(), "cheap", "other")
    # Priority 1: only `cheap` is below it, and two GPUs are not four.
    equal = decide(snapshot, [gang("g", "A10", gpus=4, priority=1)])
    assert reason(equal)[0] is PendingReason.INSUFFICIENT_GPUS
    # Not preemptible: no budget is needed to keep it.
    fixed = replace(
        snapshot, running=tuple(replace(r, preemptible=False) for r in snapshot.running)
    )
    assert reason(decide(fixed, [gang("g", "A10", gpus=4, priority=5)]))[0] is (
        PendingReason.INSUFFICIENT_GPUS
    )
    # Larger than the node even with both gangs gone.
    huge = decide(snapshot, [gang("g", "A10", gpus=8, priority=5)])
    assert reason(huge)[0] is PendingReason.REPLICA_TOO_LARGE
    two = decide(snapshot, [gang("g", "A10", gpus=2, replicas=3, priority=5)])
    assert reason(two)[0] is PendingReason.GANG_TOO_LARGE
    # Preemption switched off.
    off = decide(snapshot, [gang("g", "A10", gpus=4, priority=5)], allow_preemption=False)
    assert reason(off)[0] is PendingReason.INSUFFICIENT_GPUS


def test_room_that_unprotected_gangs_would_make_is_not_the_budgets_fault() -> None:
    # `other` is protected but `cheap` alone would make room: when the decision preempts no
    # one (here: no gang may preempt), the budget is not what keeps the gang waiting.
    snapshot = protect(two_low_gangs(), "other")
    small = [gang("g", "A10", gpus=2, priority=5)]
    assert [p.gang_id for p in decide(snapshot, small).preemptions] == ["cheap"]
    none = decide(snapshot, small, max_preempting_gangs=0)
    assert reason(none)[0] is PendingReason.INSUFFICIENT_GPUS
    # With `cheap` gone too, only the protected gang is left to make the rest of the room.
    wide = decide(snapshot, [gang("g", "A10", gpus=4, priority=5)], max_preempting_gangs=0)
    assert reason(wide) == (
        BUDGET,
        "cannot preempt other: a PodDisruptionBudget forbids stopping it now",
    )


def borrowed_node() -> Snapshot:
    """Queue `lender` is owed 8 A100s; `ones` (nominal 0) borrows all 8 in one-GPU gangs."""
    tree = QueueTree.build(
        [
            QueueSpec(q, None, 1.0, {"A100-80GB": Quota(n)}, 0, None)
            for q, n in {"lender": 8, "ones": 0}.items()
        ]
    )
    builder = cluster().node("a0", "A100-80GB", 8)
    for k in range(8):
        builder.run(f"one-{k}", "a0", (k,), queue="ones")
    return builder.queues(tree).build()


def test_a_reclaim_a_budget_blocks_says_so() -> None:
    snapshot = borrowed_node()
    owed = [gang("g", "A100-80GB", gpus=8, queue="lender")]
    assert len(decide(snapshot, owed).preemptions) == 8  # a reclaim of every borrowed GPU
    decision = decide(protect(snapshot, "one-3"), owed)
    assert decision.preemptions == ()
    assert reason(decision) == (
        BUDGET,
        "cannot preempt one-3: a PodDisruptionBudget forbids stopping it now",
    )


def test_within_a_borrowing_queue_the_budget_comes_before_the_quota() -> None:
    # `team` (nominal 0) borrows the whole node for `low`; its own `g` may preempt `low`, which
    # frees the quota as well as the GPUs. Protected, `low` stays: the budget is why.
    tree = QueueTree.build(
        [
            QueueSpec("team", None, 1.0, {"A10": Quota(0)}),
            QueueSpec("other", None, 1.0, {"A10": Quota(4)}),
        ]
    )
    snapshot = (
        cluster().node("a", "A10", 4).run("low", "a", (0, 1, 2, 3), queue="team").queues(tree)
    ).build()
    mine = [gang("g", "A10", gpus=4, priority=5, queue="team")]
    assert [p.gang_id for p in decide(snapshot, mine).preemptions] == ["low"]
    assert reason(decide(protect(snapshot, "low"), mine)) == (
        BUDGET,
        "cannot preempt low: a PodDisruptionBudget forbids stopping it now",
    )
    # Of a priority that may not preempt `low`: the quota is the reason, as before.
    equal = decide(protect(snapshot, "low"), [gang("g", "A10", gpus=4, queue="team")])
    assert reason(equal)[0] is PendingReason.QUOTA_EXCEEDED


def test_the_what_if_leaves_the_state_as_it_was() -> None:
    snapshot = protect(borrowed_node(), "one-3", "one-5")
    state = ClusterState(snapshot)
    state.gate = QueueGate(snapshot, Policy().queue_aging_s)
    book = state.gate.book

    def seen() -> object:
        return copy.deepcopy((state.busy, state.empty, book.own, book.sub, book.held))

    before = seen()
    owed = gang("g", "A100-80GB", gpus=8, queue="lender")
    assert explain(state, owed, Policy(), Memo()).message == (
        "cannot preempt one-3, one-5: a PodDisruptionBudget forbids stopping them now"
    )
    assert seen() == before
