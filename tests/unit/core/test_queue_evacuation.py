"""Evacuating the node reserved for an aged wide gang (evacuation.py), through `place`.

Aspects: the few small gangs on the reserved node are moved to free capacity elsewhere (never
onto the node itself) when that costs them less than the wide gang's wait, and the wide gang
takes the emptied node in the next decision; a move that would cost more (a much slower type for
a long gang, or a restart longer than the gang's remaining time) is not made; gangs of a higher
priority, non-preemptible gangs, gangs moved twice within the hour (one move more than the
hourly limit is allowed to make room) and gangs without progress stay; a young wide gang
triggers nothing; the CP-SAT engine makes the same moves.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import RunningGang, RunProgress, Snapshot
from gpufleet.core.validate import decision_problems
from tests.unit.core.placement_builders import cluster, gang

H100 = "H100-80GB"
T4 = "T4"
AGED = 7200.0  # past Policy().queue_aging_s (3600 s)
HOURS = 4 * 3600.0  # expected remaining time of the running gangs


def tree() -> QueueTree:
    nominal = {"wide": 0, "small": 0, "idle": 32}
    return QueueTree.build(
        [
            QueueSpec(q, None, 1.0, {H100: Quota(n), T4: Quota(n)}, 0, None)
            for q, n in nominal.items()
        ]
    )


def with_progress(snapshot: Snapshot, remaining_s: float = HOURS, **changes: object) -> Snapshot:
    """Every running gang with its demand and progress (as the simulator passes them);
    `changes` are applied to the gangs named by `changes["only"]` (default all)."""
    only = changes.pop("only", None)
    running: list[RunningGang] = []
    for r in snapshot.running:
        gpus = sum(len(x.gpus) for x in r.replicas)
        demand = gang(r.id, types=(H100, T4), gpus=gpus, queue=r.queue)
        r = replace(r, demand=demand, progress=RunProgress(remaining_s, restart_s=60.0))
        if only is None or r.id in only:  # type: ignore[operator]
            r = replace(r, **changes)  # type: ignore[arg-type]
        running.append(r)
    return replace(snapshot, running=tuple(running))


def fleet(destination: str = H100) -> Snapshot:
    """h0: 5 free, two small gangs (x0: 2 GPUs, x1: 1 GPU); h1: 4 free, one 4-GPU gang (y0);
    d0 (of `destination`): 4 free, one 4-GPU gang (z0). No node holds the 8-GPU gang."""
    snapshot = (
        cluster()
        .node("h0", H100)
        .node("h1", H100)
        .node("d0", destination, count=8)
        .run("x0", "h0", (0, 1), queue="small")
        .run("x1", "h0", (2,), queue="small")
        .run("y0", "h1", (0, 1, 2, 3), queue="small")
        .run("z0", "d0", (0, 1, 2, 3), queue="small")
        .queues(tree())
        .build()
    )
    return snapshot


def decide(snapshot: Snapshot, pending: list[Gang], policy: Policy | None = None) -> Decision:
    decision = place(snapshot, pending, policy or Policy())
    assert decision_problems(snapshot, pending, decision) == []
    return decision


def wide(waited_s: float = AGED, priority: int = 0) -> Gang:
    return gang("w", gpus=8, queue="wide", waited_s=waited_s, priority=priority)


def evacuations(decision: Decision) -> list[str]:
    return sorted(m.gang_id for m in decision.moves if m.for_gang is not None)


def after(snapshot: Snapshot, decision: Decision) -> Snapshot:
    """The snapshot once the decision's moves are carried out."""
    moved = {m.gang_id: m for m in decision.moves}
    running = []
    for r in snapshot.running:
        if r.id in moved:
            p = moved[r.id].placement
            r = replace(r, gpu_type=p.gpu_type, replicas=p.replicas)
        running.append(r)
    return replace(snapshot, running=tuple(running))


def test_the_small_gangs_leave_the_reserved_node_and_the_wide_gang_takes_it_next() -> None:
    snapshot = with_progress(fleet())
    decision = decide(snapshot, [wide()])
    assert decision.admitted_ids == set()
    assert sorted((m.gang_id, m.for_gang) for m in decision.moves) == [("x0", "w"), ("x1", "w")]
    for move in decision.moves:
        assert "h0" not in {r.node for r in move.placement.replicas}  # kept for w
        assert move.gain_s == pytest.approx(-60.0)  # the restart; same type, no slowdown
    nxt = decide(after(snapshot, decision), [wide(AGED + 10)])
    placement = nxt.placement("w")
    assert placement is not None and {r.node for r in placement.replicas} == {"h0"}


def test_a_young_wide_gang_moves_nothing() -> None:
    assert evacuations(decide(with_progress(fleet()), [wide(waited_s=60.0)])) == []


def test_no_move_that_costs_more_than_the_wait_it_saves() -> None:
    # Only T4s are free elsewhere: a gang expected to run hours more would run them several
    # times slower, which costs it more than the wide gang's wait.
    assert evacuations(decide(with_progress(fleet(destination=T4)), [wide()])) == []
    # A gang about to end anyway (in 30 s) is not worth a restart of 60 s: the wait is short.
    short = with_progress(fleet(), remaining_s=30.0)
    assert evacuations(decide(short, [wide()])) == []


@pytest.mark.parametrize(
    "changes",
    [
        {"priority": 5},
        {"preemptible": False},
        {"progress": RunProgress(HOURS, restart_s=60.0, recent_moves=2)},
        {"progress": None},
    ],
    ids=["higher-priority", "not-preemptible", "moved-this-hour", "no-progress"],
)
def test_gangs_that_may_not_be_moved_stay(changes: dict[str, object]) -> None:
    snapshot = with_progress(fleet(), only={"x1"}, **changes)
    assert evacuations(decide(snapshot, [wide()])) == []


def test_a_gang_moved_once_this_hour_may_still_make_room() -> None:
    # One faster-type move in the hour (the default limit): one evacuation more is allowed.
    moved = RunProgress(HOURS, restart_s=60.0, recent_moves=1)
    snapshot = with_progress(fleet(), progress=moved)
    assert evacuations(decide(snapshot, [wide()])) == ["x0", "x1"]


def test_cpsat_makes_the_same_moves() -> None:
    snapshot = with_progress(fleet())
    policy = Policy(solver=SolverSettings(engine=Engine.CPSAT))
    greedy = decide(snapshot, [wide()])
    solved = decide(snapshot, [wide()], policy)
    assert solved.moves == greedy.moves and len(solved.moves) == 2
