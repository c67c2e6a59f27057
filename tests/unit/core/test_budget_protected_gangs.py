"""Gangs a PodDisruptionBudget protects now (`RunningGang.disruptable=False`) are never
disrupted by the core.

Aspects: a long job that a free faster type would otherwise move stays (both engines), while
`preemptible` alone is not what stops it; an aged wide gang's evacuation leaves a reserved node
as it is when one of its gangs is protected; a reclaim's relocation moves no protected gang;
preemption and the shrinking of an elastic job's growth units pass over protected gangs and take
others; the validator reports a protected gang that is moved or preempted; a property on random
clusters with random protections: no decision moves or preempts a protected gang.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.core.decision import Decision, Move, Preemption
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.snapshot import RunningGang, RunProgress, Snapshot
from gpufleet.core.validate import decision_problems
from tests.unit.core import test_placement_moves as moves_case
from tests.unit.core import test_queue_evacuation as evacuation_case
from tests.unit.core import test_queue_reclaim_relocation as reclaim_case
from tests.unit.core.placement_builders import cluster, gang

ENGINES = [Engine.GREEDY, Engine.CPSAT]
HOUR = 3600.0
TYPES = ("H100-80GB", "A100-80GB", "T4", "L4")


def protect(snapshot: Snapshot, *ids: str) -> Snapshot:
    """`snapshot` with the named running gangs protected by a budget."""
    running = tuple(replace(r, disruptable=False) if r.id in ids else r for r in snapshot.running)
    return replace(snapshot, running=running)


def decide(snapshot: Snapshot, pending: list[Gang], engine: Engine = Engine.GREEDY) -> Decision:
    decision = place(snapshot, pending, Policy(solver=SolverSettings(engine=engine)))
    assert decision_problems(snapshot, pending, decision) == []
    return decision


@pytest.mark.parametrize("engine", ENGINES)
def test_a_protected_long_job_is_not_moved_to_a_faster_type(engine: Engine) -> None:
    free = moves_case.on_t4()
    assert [m.gang_id for m in decide(free, [], engine).moves] == ["job"]
    assert decide(protect(free, "job"), [], engine).moves == ()


def test_protection_is_its_own_flag_not_preemptible() -> None:
    # A gang that may not be preempted (a standby's borrower, say) is still moved when no
    # budget protects it; a protected one stays whatever `preemptible` says.
    snapshot = moves_case.on_t4()
    (job,) = snapshot.running
    assert RunningGang("x", "T4", job.replicas).disruptable  # permissive by default
    unpreemptible = replace(snapshot, running=(replace(job, preemptible=False),))
    assert [m.gang_id for m in decide(unpreemptible, []).moves] == ["job"]
    both = replace(snapshot, running=(replace(job, preemptible=True, disruptable=False),))
    assert decide(both, []).moves == ()


def test_a_reserved_node_with_a_protected_gang_is_not_evacuated() -> None:
    snapshot = evacuation_case.with_progress(evacuation_case.fleet())
    wide = evacuation_case.wide()
    assert evacuation_case.evacuations(decide(snapshot, [wide])) == ["x0", "x1"]
    decision = decide(protect(snapshot, "x1"), [wide])
    assert evacuation_case.evacuations(decision) == []
    assert "x1" not in {m.gang_id for m in decision.moves}


@pytest.mark.parametrize("a2_free", [False, True], ids=["relocation", "reclaim-with-moves"])
def test_a_reclaim_relocation_moves_no_protected_gang(a2_free: bool) -> None:
    snap = reclaim_case.snapshot(a2_free=a2_free)
    lender = reclaim_case.lender()
    moves = decide(snap, [lender]).moves
    assert moves and all(m.gang_id.startswith("keep-") for m in moves)
    decision = decide(protect(snap, "keep-0", "keep-1"), [lender])
    assert decision.moves == () and decision.preemptions == ()
    assert decision.admitted_ids == set()


@pytest.mark.parametrize("engine", ENGINES)
def test_preemption_passes_over_a_protected_gang(engine: Engine) -> None:
    snapshot = (
        cluster()
        .node("a", "A10", 4)
        .run("cheap", "a", (0, 1), priority=0)
        .run("other", "a", (2, 3), priority=1)
        .build()
    )
    pending = [gang("g", "A10", gpus=2, priority=5)]
    assert [p.gang_id for p in decide(snapshot, pending, engine).preemptions] == ["cheap"]
    decision = decide(protect(snapshot, "cheap"), pending, engine)
    assert [p.gang_id for p in decision.preemptions] == ["other"]
    assert decision.admitted_ids == {"g"}
    nothing = decide(protect(snapshot, "cheap", "other"), pending, engine)
    assert nothing.preemptions == () and nothing.admitted_ids == set()


@pytest.mark.parametrize("engine", ENGINES)
def test_protected_growth_units_are_not_shrunk(engine: Engine) -> None:
    # As test_placement_preemption's elastic case: the urgent gang would take the elastic
    # job's three growth units; protected, they stay and the whole gang of priority 1 goes.
    from tests.unit.core.test_placement_preemption import _whole_and_growing_elastic

    snapshot = _whole_and_growing_elastic().build()
    units = [f"elastic#extra-{i}" for i in (2, 3, 4)]
    urgent = gang("urgent", "T4", replicas=6, priority=10)
    assert {p.gang_id for p in decide(snapshot, [urgent], engine).preemptions} == set(units)
    decision = decide(protect(snapshot, *units), [urgent], engine)
    assert [p.gang_id for p in decision.preemptions] == ["whole"]
    assert decision.admitted_ids == {"urgent"}


def test_the_validator_reports_a_protected_gang_disrupted() -> None:
    snapshot = protect(moves_case.on_t4(), "job")
    moved = decide(moves_case.on_t4(), [])
    assert decision_problems(snapshot, [], moved) == [
        "job is moved though a disruption budget protects it"
    ]
    free = cluster().node("a", "A10", 2).run("r", "a", (0, 1)).build()
    urgent = gang("g", "A10", gpus=2, priority=3)
    preempting = decide(free, [urgent])
    low = protect(free, "r")
    assert preempting.preemptions == (Preemption("r", "g"),)
    assert decision_problems(low, [urgent], preempting) == [
        "r is preempted though a disruption budget protects it"
    ]


@st.composite
def protected_clusters(draw: st.DrawFn) -> Snapshot:
    """Random nodes of four types, each maybe running a gang with its demand and progress,
    of priority 0-2, some protected by a budget."""
    builder = cluster()
    for i in range(draw(st.integers(2, 4))):
        builder.node(f"n{i}", draw(st.sampled_from(TYPES)), count=4)
        if draw(st.booleans()):
            size = draw(st.sampled_from((1, 2, 4)))
            builder.run(f"r{i}", f"n{i}", tuple(range(size)), priority=draw(st.integers(0, 2)))
    built = builder.build()
    running: list[RunningGang] = []
    for r in built.running:
        types = tuple(sorted({r.gpu_type, *draw(st.lists(st.sampled_from(TYPES), max_size=2))}))
        demand = gang(r.id, types, gpus=len(r.replicas[0].gpus), priority=r.priority)
        progress = RunProgress(draw(st.floats(0.0, 100 * HOUR)), draw(st.floats(0.0, HOUR)))
        protected = draw(st.booleans())
        running.append(replace(r, demand=demand, progress=progress, disruptable=not protected))
    return replace(built, running=tuple(running))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(
    snapshot=protected_clusters(),
    engine=st.sampled_from(ENGINES),
    wanted=st.lists(st.tuples(st.sampled_from(TYPES), st.sampled_from((1, 2, 4))), max_size=3),
)
def test_no_decision_disrupts_a_protected_gang(
    snapshot: Snapshot, engine: Engine, wanted: list[tuple[str, int]]
) -> None:
    pending = [gang(f"p{i}", t, gpus=n, priority=5) for i, (t, n) in enumerate(wanted)]
    decision = decide(snapshot, pending, engine)
    protected = {r.id for r in snapshot.running if not r.disruptable}
    disrupted: list[Move | Preemption] = [*decision.moves, *decision.preemptions]
    assert not protected & {d.gang_id for d in disrupted}
