"""Rebalancing elastic jobs by marginal goodput (core `rebalance.py`).

A running elastic job grown past its minimum is its minimum gang plus one growth unit per extra
replica (`borrowing.elastic_units` with the job's demand). Aspects, on both engines: a new job
of the same priority takes a job's top units (never below its minimum), whatever they add;
another job's room to grow takes a replica only where it adds more than there: refused for a
linear curve (the replica adds as much where it is), for a job's own growth (also where a
refined curve dips), and when the shrunk job's restart is not paid back before it is expected
to end; without demands on the units nothing is shrunk (the behaviour before the rule); the
decisions are valid (inside a queue too, where a unit may go for a gang of its own priority); a
move of a grown job takes it whole, its growth units included, and a unit is never moved alone.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from placement_builders import CATALOG, checked_decision, gang

from gpufleet.core.borrowing import elastic_units, growth_job
from gpufleet.core.demand import Gang
from gpufleet.core.policy import Engine
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, RunProgress, Snapshot
from gpufleet.model.inventory import make_node

ENGINES = [Engine.GREEDY, Engine.CPSAT]
A100 = "A100-80GB"
FLAT = (1.0, 1.5, 1.7, 1.75)  # each replica adds less: the 4th adds 0.05 of one
LINEAR = (1.0, 2.0, 3.0, 4.0)


def job(curve: tuple[float, ...], node: str = "n0", count: int = 4) -> Gang:
    return replace(gang("a", A100, gpus=1, replicas=(1, count)), scaling=curve[:count])


def running(
    demand: Gang | None, node: str = "n0", count: int = 4, progress: RunProgress | None = None
) -> tuple[RunningGang, ...]:
    """Job `a` holding GPUs 0..count-1 of `node`: its minimum (1) plus count-1 growth units."""
    replicas = [ReplicaPlacement(node, (i,)) for i in range(count)]
    return elastic_units(
        "a", A100, replicas, 1, priority=0, preemptible=True, progress=progress, demand=demand
    )


def full(units: tuple[RunningGang, ...], gpus: int = 4) -> Snapshot:
    return Snapshot(CATALOG, (make_node("n0", CATALOG[A100], gpus),), units)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_new_job_takes_the_last_replica_of_a_job_whose_curve_has_flattened(
    engine: Engine,
) -> None:
    snapshot = full(running(job(FLAT)))
    decision = checked_decision(snapshot, [gang("b", A100)], engine)
    assert [p.gang_id for p in decision.placements] == ["b"]
    assert [(p.gang_id, p.for_gang) for p in decision.preemptions] == [("a#extra-3", "b")]
    assert decision.placements[0].replicas == (ReplicaPlacement("n0", (3,)),)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_two_gpu_job_takes_the_two_top_replicas_and_the_minimum_stays(engine: Engine) -> None:
    snapshot = full(running(job(FLAT)))
    decision = checked_decision(snapshot, [gang("b", A100, gpus=2)], engine)
    assert sorted(p.gang_id for p in decision.preemptions) == ["a#extra-2", "a#extra-3"]
    # A 4-GPU job would need the job's minimum replica too: never taken.
    decision = checked_decision(snapshot, [gang("c", A100, gpus=4)], engine)
    assert decision.placements == () and decision.preemptions == ()


def grow_b_from_one(
    curve: tuple[float, ...] = (1.0, 1.95, 2.9),
    a_curve: tuple[float, ...] = FLAT,
    progress: RunProgress | None = None,
) -> tuple[Snapshot, Gang]:
    """Job "a" on GPUs 0-2 (minimum 1 + 2 growth units), job "b" on GPU 3 with room for one."""
    units = running(job(a_curve), count=3, progress=progress)
    node = make_node("n0", CATALOG[A100], 4)
    b = RunningGang("b", A100, (ReplicaPlacement("n0", (3,)),))
    grow_b = replace(gang("b#rest", A100, replicas=(1, 2)), scaling=curve, grows_from=1)
    return Snapshot(CATALOG, (node,), (*units, b)), grow_b


@pytest.mark.parametrize("engine", ENGINES)
def test_another_jobs_growth_takes_a_replica_that_adds_less(engine: Engine) -> None:
    snapshot, grow_b = grow_b_from_one()
    decision = checked_decision(snapshot, [grow_b], engine)
    assert [(p.gang_id, p.for_gang) for p in decision.preemptions] == [("a#extra-2", "b#rest")]
    assert [len(p.replicas) for p in decision.placements] == [1]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_new_job_takes_growth_whatever_it_adds(engine: Engine) -> None:
    snapshot = full(running(job(LINEAR)))
    decision = checked_decision(snapshot, [gang("b", A100)], engine)
    assert [(p.gang_id, p.for_gang) for p in decision.preemptions] == [("a#extra-3", "b")]


@pytest.mark.parametrize("engine", ENGINES)
def test_inside_a_queue_a_new_job_takes_growth_of_its_own_priority(engine: Engine) -> None:
    # The validator (`decide` checks it) accepts it: inside a queue only whole gangs need a
    # preemptor of higher priority.
    queue = QueueTree.build([QueueSpec("q", None, 1.0, {A100: Quota(4)})])
    units = tuple(replace(u, queue="q") for u in running(job(FLAT)))
    snapshot = replace(full(units), queues=queue)
    decision = checked_decision(snapshot, [replace(gang("b", A100), queue="q")], engine)
    assert [(p.gang_id, p.for_gang) for p in decision.preemptions] == [("a#extra-3", "b")]


@pytest.mark.parametrize("engine", ENGINES)
def test_growth_takes_nothing_where_the_replica_adds_as_much(engine: Engine) -> None:
    snapshot, grow_b = grow_b_from_one(curve=(1.0, 2.0, 3.0), a_curve=LINEAR)
    decision = checked_decision(snapshot, [grow_b], engine)
    assert decision.placements == () and decision.preemptions == ()


def own_growth(curve: tuple[float, ...]) -> tuple[Snapshot, Gang]:
    """Job "a" running 4 replicas (of at most 5, on `curve`) on n0 and its room to grow."""
    demand = replace(gang("a", A100, replicas=(1, 5)), scaling=curve)
    own = replace(gang("a#rest", A100), scaling=curve, grows_from=4)
    return full(running(demand, count=4)), own


@pytest.mark.parametrize("engine", ENGINES)
def test_a_jobs_own_growth_never_takes_its_own_replicas(engine: Engine) -> None:
    snapshot, own = own_growth((1.0, 1.5, 1.7, 1.75, 1.77))
    decision = checked_decision(snapshot, [own], engine)
    assert decision.placements == () and decision.preemptions == ()


@pytest.mark.parametrize("engine", ENGINES)
def test_nor_its_own_replicas_when_a_refined_curve_dips(engine: Engine) -> None:
    # Reported slower at 4 replicas than at 3, faster again at 5 (a refined curve need not be
    # concave): its 4th replica is worth -0.4, a 5th +0.3; taking its 4th for a "5th" would
    # only restart it at the same size.
    snapshot, own = own_growth((1.0, 1.9, 2.0, 1.6, 1.9))
    decision = checked_decision(snapshot, [own], engine)
    assert decision.placements == () and decision.preemptions == ()
    # Another job's growth that adds more does take that replica.
    other = replace(gang("b#rest", A100), scaling=(1.0, 1.5, 1.9), grows_from=1)
    decision = checked_decision(snapshot, [own, other], engine)
    assert [(p.gang_id, p.for_gang) for p in decision.preemptions] == [("a#extra-3", "b#rest")]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_shrink_is_refused_when_the_restart_outweighs_the_gain_before_the_job_ends(
    engine: Engine,
) -> None:
    # Net gain 0.95 - 0.2 replicas' work per second, the job's value 1.7 replicas: a 60 s
    # restart costs 102, paid back after 136 s of the job's remaining time.
    soon = RunProgress(expected_remaining_s=120.0, unsaved_s=0.0, restart_s=60.0)
    later = replace(soon, expected_remaining_s=3600.0)
    for progress, shrinks in ((soon, False), (later, True)):
        snapshot, grow_b = grow_b_from_one(progress=progress)
        decision = checked_decision(snapshot, [grow_b], engine)
        assert bool(decision.preemptions) is shrinks


@pytest.mark.parametrize("engine", ENGINES)
def test_units_without_the_jobs_curve_are_not_shrunk(engine: Engine) -> None:
    # As the live scheduler's extras were before the rule: no demand, no rebalancing.
    snapshot = full(running(None))
    assert all(growth_job(u) is None for u in snapshot.running)
    decision = checked_decision(snapshot, [gang("b", A100)], engine)
    assert decision.placements == () and decision.preemptions == ()


def test_growth_units_carry_the_jobs_curve_step_and_the_minimum_does_not() -> None:
    units = running(job(FLAT))
    assert [u.id for u in units] == ["a", "a#extra-1", "a#extra-2", "a#extra-3"]
    assert [growth_job(u) for u in units] == [None, "a", "a", "a"]
    steps = [u.demand.speedup(1) for u in units[1:] if u.demand is not None]
    assert steps == pytest.approx([0.5, 0.2, 0.05])


def grown_on_v100(free: str, count: int) -> Snapshot:
    """Job "a" running 4 replicas on V100s (its minimum 1 plus 3 growth units, with its demand
    and progress as the simulator gives them) and a free node of `count` `free` GPUs."""
    demand = replace(gang("a", ("V100-32GB", free), replicas=(1, 4)), scaling=LINEAR)
    replicas = [ReplicaPlacement("v0", (i,)) for i in range(4)]
    progress = RunProgress(expected_remaining_s=36_000.0, restart_s=60.0)
    units = elastic_units(
        "a", "V100-32GB", replicas, 1, priority=0, preemptible=True, demand=demand
    )
    units = (replace(units[0], demand=demand, progress=progress), *units[1:])
    nodes = (make_node("v0", CATALOG["V100-32GB"], 4), make_node("f0", CATALOG[free], count))
    return Snapshot(CATALOG, nodes, units)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_grown_job_moves_whole_with_its_growth_units(engine: Engine) -> None:
    decision = checked_decision(grown_on_v100("H100-80GB", 4), [], engine)
    moved = [(m.gang_id, m.placement.gpu_type, m.placement.replica_count) for m in decision.moves]
    assert moved == [("a", "H100-80GB", 4)]  # 4.8x the work of its 4 V100s, all 4 replicas


@pytest.mark.parametrize("engine", ENGINES)
def test_a_grown_job_is_not_moved_onto_fewer_gpus_that_do_less(engine: Engine) -> None:
    # One A100 does 2.8 V100s of work: less than the 4 V100s the job runs on with its units
    # (counted as one V100 replica, the move looked 2.8x faster).
    decision = checked_decision(grown_on_v100("A100-80GB", 1), [], engine)
    assert decision.moves == ()
