"""Growth of running elastic jobs by marginal goodput (`Gang.grows_from`).

The live scheduler offers a running elastic job's room to grow as its own gang (`<job>#rest`);
with `grows_from` the core values it on the whole job's scaling curve, so its replicas compete
with any other gang's in absolute terms. Aspects: the gain of n more replicas is the curve's
step from the running count on, and the curve must cover the running count plus the growth;
both engines give scarce free GPUs replica by replica to the job whose next replica adds the
most (interleaving two jobs), a job whose curve has flattened gets none even when GPUs are free,
and without curves growth stays linear; the first replica of a job's growth is placed unpriced, as
its rest gang always was, even where its price against the expected workload exceeds its value
(later ones must be worth their price); property: for concave
curves the greedy split of k free GPUs equals the best split found by enumeration.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from placement_builders import cluster, gang

from gpufleet.core.demand import Gang
from gpufleet.core.greedy import Memo, plan_gang
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.pricing import Pricing
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.core.validate import decision_problems
from gpufleet.core.valuation import gang_value
from gpufleet.core.workload import TaskShape, WorkloadEstimate

ENGINES = [Engine.GREEDY, Engine.CPSAT]
A100 = "A100-80GB"


def growth(job: str, curve: tuple[float, ...], running: int, room: int) -> Gang:
    """The room a running job of `running` replicas has to grow by `room` more."""
    base = gang(f"{job}#rest", A100, gpus=1, replicas=(1, room))
    return replace(base, scaling=curve, grows_from=running)


def fleet(free: int, running: dict[str, int]) -> Snapshot:
    """One A100 node per running job (holding its replicas) and one node of `free` GPUs."""
    builder = cluster()
    for job, count in running.items():
        builder.node(f"n-{job}", A100, count=count)
    builder.node("free", A100, count=free)
    for job, count in running.items():
        for i in range(count):
            builder.run(job, f"n-{job}", (i,))
    return builder.build()


def sizes(snapshot: Snapshot, pending: list[Gang], engine: Engine) -> dict[str, int]:
    policy = Policy(solver=SolverSettings(engine=engine))
    decision = place(snapshot, pending, policy)
    assert decision_problems(snapshot, pending, decision) == []
    return {p.gang_id: p.replica_count for p in decision.placements}


def test_gain_is_the_curves_step_from_the_running_count() -> None:
    g = growth("a", (1.0, 1.9, 2.7, 3.4), running=2, room=2)
    assert g.speedup(1) == pytest.approx(0.8)
    assert g.speedup(2) == pytest.approx(1.5)
    assert replace(g, scaling=()).speedup(2) == 2.0  # no curve: linear


def test_curve_must_cover_the_running_replicas_and_the_room() -> None:
    with pytest.raises(ValueError, match="grows_from \\+ replicas_max"):
        growth("a", (1.0, 1.9, 2.7), running=2, room=2)
    with pytest.raises(ValueError, match="grows_from must be >= 0"):
        replace(gang("a", A100), grows_from=-1)


@pytest.mark.parametrize("engine", ENGINES)
def test_free_gpus_go_replica_by_replica_to_the_highest_marginal(engine: Engine) -> None:
    # a runs 2 and would add 0.6 then 0.3; b runs 1 and would add 0.5, 0.4, 0.3.
    a = growth("a", (1.0, 1.9, 2.5, 2.8), running=2, room=2)
    b = growth("b", (1.0, 1.5, 1.9, 2.2), running=1, room=3)
    snapshot = fleet(3, {"a": 2, "b": 1})
    # The three best steps: a's 0.6, b's 0.5 and 0.4.
    assert sizes(snapshot, [a, b], engine) == {"a#rest": 1, "b#rest": 2}


@pytest.mark.parametrize("engine", ENGINES)
def test_one_free_gpu_goes_to_the_job_that_still_scales(engine: Engine) -> None:
    # Without the curve the id order (a before b) would decide; b's next step is worth more.
    a = growth("a", (1.0, 1.3, 1.4, 1.45), running=2, room=2)
    b = growth("b", (1.0, 1.95, 2.85, 3.7), running=2, room=2)
    assert sizes(fleet(1, {"a": 2, "b": 2}), [a, b], engine) == {"b#rest": 1}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_flat_curve_does_not_grow_onto_free_gpus(engine: Engine) -> None:
    flat = growth("a", (1.0, 1.8, 1.8, 1.8), running=2, room=2)
    assert sizes(fleet(2, {"a": 2}), [flat], engine) == {}


def test_growth_without_curves_still_fills_free_gpus() -> None:
    a = replace(gang("a#rest", A100, gpus=1, replicas=(1, 2)), grows_from=2)
    b = replace(gang("b#rest", A100, gpus=1, replicas=(1, 2)), grows_from=2)
    got = sizes(fleet(3, {"a": 2, "b": 2}), [a, b], Engine.GREEDY)
    assert sum(got.values()) == 3


def test_the_first_growth_replica_is_placed_unpriced() -> None:
    # Whole 4-GPU T4 tasks expected: one replica on the empty node costs more than it is worth.
    t4 = "T4"
    built = cluster().node("busy", t4, count=2).node("free", t4, count=4)
    snapshot = built.run("a", "busy", (0,)).run("a", "busy", (1,)).build()
    snapshot = replace(snapshot, workload=WorkloadEstimate.of({TaskShape((t4,), 4): 1.0}))
    grow = replace(gang("a#rest", t4, gpus=1, replicas=(1, 2)), grows_from=2)
    policy = Policy(solver=SolverSettings(engine=Engine.GREEDY))
    state = ClusterState(snapshot)
    single = replace(grow, replicas_max=1, grows_from=0)
    plan = plan_gang(state, single, t4, policy, Memo())
    assert plan is not None
    price = Pricing(state, policy, [grow]).cost(state, grow, t4, plan.replicas)
    assert price > gang_value(grow, state.catalog[t4], policy, 1)
    assert sizes(snapshot, [grow], Engine.GREEDY).get("a#rest", 0) >= 1


def _concave(steps: list[float]) -> tuple[float, ...]:
    curve = [1.0]
    for step in sorted(steps, reverse=True):
        curve.append(curve[-1] + step)
    return tuple(curve)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    steps=st.lists(st.lists(st.floats(0.05, 1.0), min_size=4, max_size=4), min_size=2, max_size=3),
    running=st.lists(st.integers(1, 2), min_size=3, max_size=3),
    free=st.integers(1, 5),
)
def test_greedy_split_is_best_for_concave_curves(
    steps: list[list[float]], running: list[int], free: int
) -> None:
    jobs = {f"j{i}": (_concave(s), running[i]) for i, s in enumerate(steps)}
    pending = [growth(j, curve, r, len(curve) - r) for j, (curve, r) in jobs.items()]
    got = sizes(fleet(free, {j: r for j, (_, r) in jobs.items()}), pending, Engine.GREEDY)

    def gain(split: tuple[int, ...]) -> float:
        return sum(g.speedup(n) for g, n in zip(pending, split, strict=True))

    rooms = [range(g.replicas_max + 1) for g in pending]
    best = max(gain(s) for s in itertools.product(*rooms) if sum(s) <= free)
    assert gain(tuple(got.get(g.id, 0) for g in pending)) == pytest.approx(best)
