"""Moves priced against the expected workload (core/moves.py with pricing.py).

Aspects: `Pricing.move_charge` by hand (a reserve charge for taking the last GPU of a type that
single-type demand needs; none where only fragmentation changes); both engines keep a running
flexible gang off the last free GPU of a type that the estimate expects single-type tasks for,
and move it when there is room beyond the reserve, the estimate expects none or there is none;
fragmentation does not stop a move.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from placement_builders import cluster, gang

from gpufleet.core.decision import Decision
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings, Weights
from gpufleet.core.preempt import release_gang
from gpufleet.core.pricing import Pricing
from gpufleet.core.snapshot import ReplicaPlacement, RunProgress, Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.core.validate import decision_problems
from gpufleet.core.workload import TaskShape, WorkloadEstimate

ENGINES = [Engine.GREEDY, Engine.CPSAT]
H100, A100 = "H100-80GB", "A100-80GB"
HOUR = 3600.0
FLEXIBLE = gang("job", (A100, H100))


def job_on_a100(
    a100_held: tuple[int, ...], h100_held: tuple[int, ...], workload: WorkloadEstimate | None
) -> Snapshot:
    """A long one-GPU job that accepts A100 or H100 runs on A100 GPU 6 (other gangs hold
    `a100_held` there and `h100_held` on the 8-GPU H100 node)."""
    builder = cluster().node("a", A100).node("h", H100).run("job", "a", (6,))
    for g in a100_held:
        builder.run(f"a{g}", "a", (g,))
    for g in h100_held:
        builder.run(f"h{g}", "h", (g,))
    built = builder.build()
    progress = RunProgress(10 * HOUR, 0.0, 60.0, 0)
    running = tuple(
        replace(r, demand=FLEXIBLE, progress=progress) if r.id == "job" else r
        for r in built.running
    )
    return replace(built, running=running, workload=workload)


def h100_only(share: float) -> WorkloadEstimate:
    """One-GPU tasks, `share` of them accepting only H100 (the rest A100 or H100)."""
    return WorkloadEstimate.of(
        {TaskShape((H100,), 1): share, TaskShape((A100, H100), 1): 1 - share}
    )


TWO_GPU = WorkloadEstimate.of({TaskShape((A100, H100), 2): 1.0})


def decide(snapshot: Snapshot, engine: Engine, weights: Weights | None = None) -> Decision:
    policy = Policy(weights=weights or Weights(), solver=SolverSettings(engine=engine))
    decision = place(snapshot, [], policy)
    assert decision_problems(snapshot, [], decision) == []
    return decision


def move_charge(snapshot: Snapshot, to: tuple[int, ...]) -> float:
    """`move_charge` of moving the job to H100 GPUs `to`, the way plan_moves asks for it."""
    state = ClusterState(snapshot)
    pricing = Pricing(state, Policy(), [])
    (job,) = [r for r in snapshot.running if r.id == "job"]
    release_gang(state, job)
    return pricing.move_charge(state, FLEXIBLE, H100, [ReplicaPlacement("h", to)])


def test_move_charge_of_the_last_reserved_gpu_by_hand() -> None:
    # Empty GPUs: 7 A100 (GPU 6 is the job's) + 1 H100 = 8 spare; an H100-only share of 0.1
    # keeps 0.8 H100 GPU. Taking the last one costs scarcity 2 x worth 4.8 x 0.8 = 7.68.
    snapshot = job_on_a100((), tuple(range(7)), h100_only(0.1))
    assert move_charge(snapshot, (7,)) == pytest.approx(2 * 4.8 * 0.8)
    # With two free, 0.9 is kept and one GPU taken leaves one: no charge.
    assert move_charge(job_on_a100((), tuple(range(6)), h100_only(0.1)), (6,)) == 0.0


def test_fragmentation_alone_charges_a_move_nothing() -> None:
    # Two-GPU tasks only: the move leaves one H100 GPU free (a fragment), but no reserve.
    snapshot = job_on_a100((0, 1, 2, 3, 4, 5), (0, 1, 2, 3, 4, 5), TWO_GPU)
    assert move_charge(snapshot, (6,)) == 0.0


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    ("workload", "free_h100", "moves"),
    [
        # 7 A100 + 1 H100 spare: 0.1 x 8 = 0.8 H100 GPU reserved, the move would take it.
        pytest.param(h100_only(0.1), 1, False, id="keeps-the-last-h100"),
        # 7 + 2 spare: 0.9 reserved, one free H100 GPU stays after the move.
        pytest.param(h100_only(0.1), 2, True, id="room-beyond-the-reserve"),
        pytest.param(WorkloadEstimate.of({TaskShape((A100, H100), 1): 1.0}), 1, True, id="none"),
        pytest.param(None, 1, True, id="no-estimate"),
    ],
)
def test_a_move_stays_out_of_a_reserve(
    engine: Engine, workload: WorkloadEstimate | None, free_h100: int, moves: bool
) -> None:
    snapshot = job_on_a100((), tuple(range(8 - free_h100)), workload)
    decision = decide(snapshot, engine)
    assert [(m.gang_id, m.placement.gpu_type) for m in decision.moves] == (
        [("job", H100)] if moves else []
    )


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("weight", [1.0, 3.0])
def test_fragmentation_does_not_stop_a_move(engine: Engine, weight: float) -> None:
    # Two H100 GPUs free: the move leaves one, a fragment for 2-GPU tasks; it is made at any
    # fragmentation weight (moves keep out of reserves only).
    snapshot = job_on_a100((), (0, 1, 2, 3, 4, 5), TWO_GPU)
    decision = decide(snapshot, engine, Weights(fragmentation=weight))
    assert [m.gang_id for m in decision.moves] == ["job"]
