"""Elastic jobs' growth in the live scheduler's snapshot, decided by the core's goodput rules.

The adapter shows a running elastic job as the simulator does (`core.borrowing.elastic_units`):
its minimum gang plus one growth unit per replica beyond it, each carrying the job's scaling
curve from its pods (`gpufleet.io/scaling`) as one replica growing the job from its position,
so the core values it at its step of the curve and may give it to a gang that adds more
(core/rebalance.py). A whole cycle then evicts the unit's pod for the job whose next replica
adds more, and leaves a split that no move improves alone."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from scheduler_builders import NodeBuilder, PodBuilder
from scheduler_fakes import FakeBinder, FakeMig, load, scheduler

from gpufleet.core.borrowing import growth_job
from gpufleet.core.objective import running_value
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.model.contract import names
from gpufleet.model.gpus import load_catalog
from gpufleet.model.migparted import load_default_configs
from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.scheduler.cluster_view import build_view
from gpufleet.scheduler.progress import ProgressTracker

CATALOG = load_catalog()
CONFIGS = load_default_configs()
# Steps from 2 replicas: climbs 0.8, 0.7, 0.1, 0.1; flat 0.25, 0.2, 0.15, 0.1. Eight T4 GPUs,
# two each at the minimum: the four beyond are worth most as climbs 0.8 + 0.7, flat 0.25 + 0.2.
CLIMBS = "1,1.9,2.7,3.4,3.5,3.6"
FLAT = "1,1.3,1.55,1.75,1.9,2"


def elastic(
    name: str, curve: str, bound: int, node: str = "t0", first_gpu: int = 0, low: int = 2
) -> list[dict[str, Any]]:
    """Six pods of an elastic job (minimum `low`), the first `bound` bound on `node`."""
    out = []
    for i in range(6):
        b = PodBuilder(f"{name}-{i}").gpus(1).gang(name, low, i).annotate(names.SCALING, curve)
        b.annotate(names.GPU_TYPES, "T4")
        if i < bound:
            b.bound(node, gpus=str(first_gpu + i))
        out.append(b.obj())
    return out


def running(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> dict[str, Any]:
    return {g.id: g for g in build_view(CATALOG, nodes, pods, CONFIGS).snapshot.running}


def test_growth_units_carry_the_jobs_curve_from_their_position() -> None:
    nodes = [NodeBuilder("t0", "T4", 8).obj()]
    pods = elastic("e", CLIMBS, 5)
    view = build_view(CATALOG, nodes, pods, CONFIGS)
    by_id = {g.id: g for g in view.snapshot.running}
    assert set(by_id) == {
        "default/e",
        "default/e#extra-2",
        "default/e#extra-3",
        "default/e#extra-4",
    }
    base = by_id["default/e"]
    assert len(base.replicas) == 2 and base.demand is None and growth_job(base) is None
    policy = Policy()
    speed = CATALOG["T4"].relative_throughput
    for i, step in ((2, 0.8), (3, 0.7), (4, 0.1)):
        unit = by_id[f"default/e#extra-{i}"]
        assert view.running_pods[unit.id] == (f"default/e-{i}",)
        assert (unit.priority, unit.preemptible, growth_job(unit)) == (0, True, "default/e")
        assert unit.demand is not None and unit.demand.grows_from == i
        assert unit.demand.scaling == (1.0, 1.9, 2.7, 3.4, 3.5, 3.6)
        assert unit.demand.type_names() == ("T4",)
        # What the job loses if the unit goes: its step of the curve on this type.
        assert running_value(view.snapshot, unit, policy) == pytest.approx(speed * step)


def test_a_curve_that_does_not_cover_the_running_count_counts_as_linear() -> None:
    pods = elastic("e", "1,1.5,1.8", 4)
    unit = running([NodeBuilder("t0", "T4", 8).obj()], pods)["default/e#extra-3"]
    assert unit.demand is not None and unit.demand.scaling == ()
    assert unit.demand.speedup(1) == 1.0  # one replica's work, as for its room to grow


def test_fixed_gangs_and_gangs_split_over_two_types_carry_no_growth() -> None:
    fixed = [
        PodBuilder(f"f{i}").gpus(1).gang("f", 2, i).bound("t0", gpus=str(i)).obj() for i in (0, 1)
    ]
    split = elastic("s", CLIMBS, 3, node="t1")  # three on T4 ...
    split[3] = PodBuilder("s-3").gpus(1).gang("s", 2, 3).bound("l0", gpus="0").obj()  # ... one L4
    nodes = [
        NodeBuilder("t0", "T4", 8).obj(),
        NodeBuilder("t1", "T4", 8).obj(),
        NodeBuilder("l0", "L4", 4).obj(),
    ]
    by_id = running(nodes, fixed + split)
    assert by_id["default/f"].demand is None
    assert "default/s#T4#extra-2" in by_id  # still shrinkable one replica at a time
    assert not any(growth_job(g) for g in by_id.values())


def test_progress_leaves_growth_units_their_job() -> None:
    nodes = [NodeBuilder("t0", "T4", 8).obj()]
    view = build_view(CATALOG, nodes, elastic("e", CLIMBS, 4), CONFIGS)
    tracker = ProgressTracker(restart_s=30.0, wall=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    after = {g.id: g for g in tracker.attach(view).snapshot.running}
    assert growth_job(after["default/e#extra-3"]) == "default/e"
    assert after["default/e#extra-3"].demand == view.snapshot.running[2].demand


def cycle(pods: list[dict[str, Any]]) -> tuple[Any, FakeBinder]:
    cache = SchedulerCache()
    load(cache, [NodeBuilder("t0", "T4", 8).obj()], pods)
    binder = FakeBinder()
    report = scheduler(cache, binder, FakeMig()).run_cycle()
    return report, binder


def test_a_replica_goes_to_the_job_whose_next_replica_adds_more() -> None:
    # flat grew into all free GPUs (6); climbs then started at its minimum (2): no GPU is free.
    report, binder = cycle(elastic("flat", FLAT, 6) + elastic("climbs", CLIMBS, 2, first_gpu=6))
    # flat's sixth replica adds 0.1, climbs' third 0.8: one cycle gives it over.
    assert report.preempted == ["default/flat#extra-5"]
    assert binder.evicted == [("default/flat-5", names.PREEMPTED_REASON)]
    message = binder.evict_messages["default/flat-5"]
    assert message == "elastic replica beyond the job's minimum, given to gang default/climbs#rest"
    assert report.pending["default/climbs#rest"].startswith("WaitingForPreemption")
    assert binder.bound == {}
    # Next: flat's fifth (0.15) for climbs' fourth (0.7).
    report, _ = cycle(elastic("flat", FLAT, 5) + elastic("climbs", CLIMBS, 3, first_gpu=5))
    assert report.preempted == ["default/flat#extra-4"]


@pytest.mark.parametrize("split", [(4, 4), (3, 5)])
def test_no_replica_moves_unless_it_adds_more_than_the_disruption(split: tuple[int, int]) -> None:
    # (flat, climbs): at 4 + 4 every move loses goodput; at 3 + 5 flat's fourth replica would
    # add 0.2 and climbs' fifth adds 0.1, a gain (x the T4's 0.35) below the disruption's 0.1.
    flat, climbs = split
    report, binder = cycle(
        elastic("flat", FLAT, flat) + elastic("climbs", CLIMBS, climbs, first_gpu=flat)
    )
    assert report.preempted == [] and binder.evicted == []


def test_a_waiting_job_of_the_same_priority_takes_the_growth_that_adds_least() -> None:
    new = PodBuilder("new-0").gpus(1).gang("new", 1, 0).annotate(names.GPU_TYPES, "T4").obj()
    report, binder = cycle(
        elastic("flat", FLAT, 4) + elastic("climbs", CLIMBS, 4, first_gpu=4) + [new]
    )
    assert report.preempted == ["default/flat#extra-3"]  # flat's fourth adds 0.2, climbs' 0.7
    assert binder.evicted == [("default/flat-3", names.PREEMPTED_REASON)]


@pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT])
def test_both_engines_take_the_same_unit_from_the_live_snapshot(engine: Engine) -> None:
    nodes = [NodeBuilder("t0", "T4", 8).obj()]
    view = build_view(
        CATALOG,
        nodes,
        elastic("flat", FLAT, 6) + elastic("climbs", CLIMBS, 2, first_gpu=6),
        CONFIGS,
    )
    policy = Policy(solver=SolverSettings(engine=engine))
    decision = place(view.snapshot, [pg.gang for pg in view.pending], policy)
    assert [(p.gang_id, p.for_gang) for p in decision.preemptions] == [
        ("default/flat#extra-5", "default/climbs#rest")
    ]
