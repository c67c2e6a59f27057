"""The opt-in `SolverSettings.skip_when_greedy_admits_all`: off by default (place() solves as
before); when on, the solve is skipped only if greedy admits every pending gang at its largest
size with no preemption and no MIG repartition, and the decision is then still valid (the
independent validator), equal to the greedy engine's, and admits everything; in every other
case (capacity short, preemption, MIG change, an elastic gang below its maximum) CP-SAT runs."""

from __future__ import annotations

import random

import pytest
from placement_builders import cluster, gang, layout

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.validate import decision_problems

SHORTCUT = Policy(solver=SolverSettings(skip_when_greedy_admits_all=True))
GREEDY = Policy(solver=SolverSettings(engine=Engine.GREEDY))


def decide(snapshot: Snapshot, pending: list[Gang], pol: Policy) -> Decision:
    decision = place(snapshot, pending, pol)
    assert decision_problems(snapshot, pending, decision) == []
    return decision


def test_off_by_default_so_the_solver_still_runs() -> None:
    assert SolverSettings().skip_when_greedy_admits_all is False
    snapshot = cluster().node("a", "L4", 8).build()
    decision = decide(snapshot, [gang("g", "L4")], Policy())
    assert decision.stats.engine == "cpsat"


def test_everything_fits_keeps_the_greedy_decision_without_solving() -> None:
    snapshot = cluster().node("a", "L4", 8).node("b", "L4", 8).run("r", "a", (0, 1)).build()
    pending = [gang(f"g{i}", "L4", gpus=1 + i % 3) for i in range(6)]
    decision = decide(snapshot, pending, SHORTCUT)
    assert (decision.stats.engine, decision.stats.status) == ("greedy", "ALL_ADMITTED")
    assert decision.admitted_ids == {g.id for g in pending} and decision.pending == ()
    assert decision.placements == place(snapshot, pending, GREEDY).placements


no_shortcut = pytest.mark.parametrize(
    ("snapshot", "pending"),
    [
        pytest.param(
            cluster().node("a", "L4", 2).build(),
            [gang("g0", "L4", gpus=2), gang("g1", "L4")],
            id="capacity-short",
        ),
        pytest.param(
            cluster().node("a", "L4", 2).run("low", "a", (0, 1)).build(),
            [gang("hi", "L4", gpus=2, priority=3)],
            id="needs-preemption",
        ),
        pytest.param(
            cluster().node("a", "H100-80GB", 1).build(),
            [gang("m", mig="1g.10gb")],
            id="needs-mig-repartition",
        ),
        pytest.param(
            cluster().node("a", "L4", 2).build(),
            [gang("e", "L4", replicas=(1, 4))],
            id="elastic-below-its-maximum",
        ),
    ],
)


@no_shortcut
def test_the_solver_runs_when_greedy_leaves_anything_to_decide(
    snapshot: Snapshot, pending: list[Gang]
) -> None:
    decision = decide(snapshot, pending, SHORTCUT)
    assert decision.stats.status != "ALL_ADMITTED"
    assert decision.stats.engine in ("cpsat", "greedy-fallback")


@pytest.mark.parametrize("seed", range(20))
def test_random_clusters_shortcut_decisions_are_valid_and_admit_everything(seed: int) -> None:
    rng = random.Random(seed)
    b = cluster()
    for n in range(rng.randint(1, 4)):
        mig = {0: layout("3g.40gb@0", "3g.40gb@4")} if rng.random() < 0.3 else None
        b.node(f"n{n}", rng.choice(["H100-80GB", "L4"]), rng.choice([2, 4, 8]), mig=mig)
    if rng.random() < 0.5:
        b.run("r", "n0", (b.nodes[0].gpu_count - 1,))
    snapshot = b.build()
    pending = [
        gang(f"g{i}", ("H100-80GB", "L4"), gpus=rng.choice([1, 2]), replicas=rng.choice([1, 2]))
        for i in range(rng.randint(1, 5))
    ]
    decision = decide(snapshot, pending, SHORTCUT)
    if decision.stats.status == "ALL_ADMITTED":
        assert decision.admitted_ids == {g.id for g in pending}
        assert decision.preemptions == () and decision.repartitions == ()
        assert decision.placements == place(snapshot, pending, GREEDY).placements


def test_more_gangs_than_max_gangs_keep_the_greedy_decision_without_solving() -> None:
    # Capacity is short (two gangs of 2 on two GPUs), so the solver would otherwise run.
    snapshot = cluster().node("a", "L4", 2).build()
    pending = [gang("g0", "L4", gpus=2), gang("g1", "L4", gpus=2)]
    capped = Policy(solver=SolverSettings(max_gangs=1))
    decision = decide(snapshot, pending, capped)
    assert (decision.stats.engine, decision.stats.status) == ("greedy", "OVER_MAX_GANGS")
    assert decision.placements == place(snapshot, pending, GREEDY).placements
    at_cap = decide(snapshot, pending, Policy(solver=SolverSettings(max_gangs=2)))
    assert at_cap.stats.engine in ("cpsat", "greedy-fallback")
    assert at_cap.stats.status != "OVER_MAX_GANGS"


def test_max_gangs_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_gangs"):
        SolverSettings(max_gangs=0)
