"""Goodput-aware elastic sizing: a gang's throughput follows its scaling curve, and free GPUs go
where the next replica adds the most.

Aspects: the curve's validation and the gang's value by hand; both engines give scarce GPUs to
the elastic gang whose curve still climbs rather than to one that has saturated; elastic gangs
start at their minimum so that a rigid gang behind them still fits; with an energy price a gang
stops growing where its curve flattens; a running elastic gang grows by a move (restart with
more replicas) when the gain is worth it; CP-SAT's concave envelope never scores below greedy.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_builders import CATALOG, cluster, gang

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.objective import evaluate
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings, Weights
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import RunProgress, Snapshot
from gpufleet.core.validate import decision_problems
from gpufleet.core.valuation import gang_value

ENGINES = [Engine.GREEDY, Engine.CPSAT]
A100 = "A100-80GB"
LINEARISH = (1.0, 1.95, 2.85, 3.7)
SATURATING = (1.0, 1.3, 1.4, 1.45)


def elastic(gang_id: str, curve: tuple[float, ...], low: int = 1) -> Gang:
    return replace(gang(gang_id, A100, gpus=1, replicas=(low, len(curve))), scaling=curve)


def decide(snapshot: Snapshot, pending: list[Gang], engine: Engine, **weights: float) -> Decision:
    policy = Policy(weights=Weights(**weights), solver=SolverSettings(engine=engine))
    decision = place(snapshot, pending, policy)
    assert decision_problems(snapshot, pending, decision) == []
    return decision


@pytest.mark.parametrize(
    "curve",
    [
        pytest.param((2.0, 3.0), id="first-not-one"),
        pytest.param((1.0, 0.0), id="not-positive"),
        pytest.param((1.0,), id="shorter-than-replicas-max"),
    ],
)
def test_bad_curves_are_refused(curve: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="scaling"):
        replace(gang("g", A100, replicas=(1, 2)), scaling=curve)


def test_value_follows_the_curve() -> None:
    g = elastic("g", SATURATING)
    one = gang_value(g, CATALOG[A100], Policy(), 1)
    assert one == pytest.approx(2.8)  # A100's relative throughput, priority 0
    assert gang_value(g, CATALOG[A100], Policy(), 4) == pytest.approx(2.8 * 1.45)
    assert g.speedup(3) == 1.4 and replace(g, scaling=()).speedup(3) == 3.0


@pytest.mark.parametrize("engine", ENGINES)
def test_scarce_gpus_go_where_the_next_replica_adds_most(engine: Engine) -> None:
    snapshot = cluster().node("a", A100, count=5).build()
    pending = [elastic("climbs", LINEARISH), elastic("flat", SATURATING)]
    decision = decide(snapshot, pending, engine)
    sizes = {p.gang_id: p.replica_count for p in decision.placements}
    assert sizes == {"climbs": 4, "flat": 1}


@pytest.mark.parametrize("engine", ENGINES)
def test_elastic_gangs_start_small_so_rigid_ones_fit(engine: Engine) -> None:
    snapshot = cluster().node("a", A100, count=4).build()
    pending = [elastic("e", LINEARISH), gang("rigid", A100, gpus=3)]
    decision = decide(snapshot, pending, engine)
    sizes = {p.gang_id: p.replica_count for p in decision.placements}
    assert sizes == {"e": 1, "rigid": 1}


@pytest.mark.parametrize("engine", ENGINES)
def test_growth_stops_where_the_curve_flattens_under_an_energy_price(engine: Engine) -> None:
    snapshot = cluster().node("a", A100, count=4).build()
    flat_after_two = (1.0, 1.9, 1.9, 1.9)
    decision = decide(snapshot, [elastic("e", flat_after_two)], engine, energy=1.0)
    assert [p.replica_count for p in decision.placements] == [2]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_running_elastic_gang_grows_by_a_move(engine: Engine) -> None:
    built = cluster().node("a", A100, count=4).run("e", "a", (0,)).run("e", "a", (1,)).build()
    (running,) = built.running
    demand = elastic("e", LINEARISH)
    progress = RunProgress(expected_remaining_s=36_000.0, restart_s=60.0)
    snapshot = replace(built, running=(replace(running, demand=demand, progress=progress),))
    decision = decide(snapshot, [], engine)
    (move,) = decision.moves
    assert move.placement.gpu_type == A100 and move.placement.replica_count == 4
    speedup = 3.7 / 1.95
    assert move.gain_s == pytest.approx(36_000.0 - (60.0 + 36_000.0 / speedup))
    assert evaluate(snapshot, [], decision, Policy()).objective > 0


def a100_queue(nominal: int) -> QueueTree:
    return QueueTree.build([QueueSpec("a", None, 1.0, {A100: Quota(nominal, borrowing_limit=0)})])


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("nominal", [1, 3, 4])
def test_growth_stays_within_the_queue_quota(engine: Engine, nominal: int) -> None:
    snapshot = replace(cluster().node("a", A100, count=4).build(), queues=a100_queue(nominal))
    decision = decide(snapshot, [replace(elastic("e", LINEARISH), queue="a")], engine)
    assert [p.replica_count for p in decision.placements] == [nominal]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("nominal", "grows_to"), [(2, None), (3, 3), (4, 4)])
def test_a_resize_move_is_charged_in_place_of_what_the_gang_held(
    engine: Engine, nominal: int, grows_to: int | None
) -> None:
    built = cluster().node("a", A100, count=4).run("e", "a", (0,), queue="a")
    built = built.run("e", "a", (1,), queue="a").queues(a100_queue(nominal)).build()
    (running,) = built.running
    demand = replace(elastic("e", LINEARISH), queue="a")
    progress = RunProgress(expected_remaining_s=36_000.0, restart_s=60.0)
    snapshot = replace(built, running=(replace(running, demand=demand, progress=progress),))
    moves = decide(snapshot, [], engine).moves
    assert [m.placement.replica_count for m in moves] == ([] if grows_to is None else [grows_to])


@st.composite
def curves(draw: st.DrawFn) -> tuple[float, ...]:
    steps = draw(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=4))
    steps.sort(reverse=True)  # concave: each replica adds no more than the one before
    out = [1.0]
    for s in steps:
        out.append(out[-1] + s)
    return tuple(out)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(a=curves(), b=curves(), free=st.integers(2, 8))
def test_cpsat_never_scores_below_greedy_with_curves(
    a: tuple[float, ...], b: tuple[float, ...], free: int
) -> None:
    snapshot = cluster().node("n", A100, count=free).build()
    pending = [elastic("a", a), elastic("b", b)]
    greedy = decide(snapshot, pending, Engine.GREEDY)
    cpsat = decide(snapshot, pending, Engine.CPSAT)
    policy = Policy()
    assert (
        evaluate(snapshot, pending, cpsat, policy).objective
        >= evaluate(snapshot, pending, greedy, policy).objective - 1e-6
    )
