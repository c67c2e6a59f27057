"""Elastic jobs in the simulator, sized by the core's goodput rules (`SimPolicy.resize`).

Aspects: a running elastic job is shown to the core as the live scheduler shows it (its minimum
plus growth units carrying its curve, its room to grow as `<job>#rest`); it grows into freed GPUs
replica by replica without a move, and shrinks, at the core's word, for a new job of its
priority (rebalance.py), each resize restarting its workers; without `resize` (the baselines)
neither happens; the owner's stated curve is the profile's when
`elastic_prior` says so; Amdahl fits of the profile have diminishing returns.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace

import pytest

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.snapshot import Snapshot
from gpufleet.model.fleet import FleetSpec, NodePoolSpec
from gpufleet.model.gpus import Catalog
from gpufleet.sim.engine import SimPolicy, SimSettings, Simulation
from gpufleet.sim.gavel_profiles import GavelProfile
from gpufleet.sim.occupancy import SimCluster
from gpufleet.sim.results import JobRecord
from gpufleet.sim.speed import SpeedModel, amdahl_fit
from gpufleet.sim.traces.common import TraceJob

FLAT = "ResNet-50 (batch size 16)"  # fitted serial share 0.35: 2.3x at 8 GPUs
LINEAR = "ResNet-18 (batch size 32)"  # fitted serial share 0: linear
FLEET = FleetSpec(
    node_pools=[NodePoolSpec(name="v", count=1, gpu_type="V100-32GB", gpus_per_node=8)]
)
SETTINGS = SimSettings(elastic_prior="profile", completed_prior=(5_000_000.0,))


def job(jid: str, arrival: float, work: float, gpus: int, model: str = LINEAR) -> TraceJob:
    return TraceJob(jid, arrival, work, replicas=gpus, gpus_per_replica=1, model=model)


def run(
    catalog: Catalog,
    profile: GavelProfile,
    jobs: Sequence[TraceJob],
    *,
    resize: bool = True,
    settings: SimSettings = SETTINGS,
    seen: list[tuple[Snapshot, list[Gang]]] | None = None,
) -> dict[str, JobRecord]:
    def decide(snapshot: Snapshot, pending: Sequence[Gang], pol: Policy) -> Decision:
        if seen is not None:
            seen.append((snapshot, list(pending)))
        return place(snapshot, pending, pol)

    policy = Policy(solver=SolverSettings(engine=Engine.GREEDY))
    speed = SpeedModel(catalog, profile, {"V100-32GB": 8}, fitted_scaling=True)
    sim = Simulation(
        SimCluster(FLEET, catalog),
        jobs,
        SimPolicy("gpufleet", decide, policy, resize=resize),
        speed,
        settings,
    )
    return {r.job_id: r for r in sim.run().jobs}


def test_a_running_elastic_job_grows_into_freed_gpus_replica_by_replica(
    catalog: Catalog, profile: GavelProfile
) -> None:
    grower = replace(job("e", 5.0, 2_000_000.0, gpus=8), min_replicas=4)
    # "late" (higher priority) arrives after the growth: its decision shows the grown job, and
    # it takes one growth unit rather than the whole job.
    late = replace(job("late", 50_000.0, 10.0, gpus=1), priority=1)
    seen: list[tuple[Snapshot, list[Gang]]] = []
    jobs = [job("block", 0.0, 20_000.0, gpus=4), grower, late]
    recs = run(catalog, profile, jobs, seen=seen)
    # Grew when "block" ended (a resize, not a move), shrank for "late" (a resize, not a
    # preemption), grew back after it (still restarting from the shrink: by a move of the
    # whole job, growth units included, onto 8 replicas).
    assert (recs["e"].resizes, recs["e"].moves, recs["e"].preemptions) == (2, 1, 0)
    assert (recs["late"].first_start_s or 0.0) - 50_000.0 < 100.0
    rests = [g for _, pending in seen for g in pending if g.id == "e#rest"]
    assert rests and rests[0].grows_from == 4 and rests[0].replicas_max == 4
    assert rests[0].allowed_nodes is None  # it does not wish one node: any V100 will do
    # Once grown, the core sees its minimum and one growth unit per replica beyond it.
    grown = next(s for s, _ in reversed(seen) if any(g.id == "e#extra-7" for g in s.running))
    units = {g.id: g for g in grown.running if g.id.startswith("e")}
    assert sorted(units) == ["e", *(f"e#extra-{i}" for i in range(4, 8))]
    # Its minimum carries the job's demand (a move takes the whole job), the units their steps.
    assert units["e"].demand is not None and units["e"].demand.elastic
    assert len(units["e"].replicas) == 4
    step = units["e#extra-7"].demand
    assert (
        step is not None
        and step.grows_from == 7
        and step.speedup(1)
        == pytest.approx(
            SpeedModel(catalog, profile, fitted_scaling=True).scaling(grower)[7]
            - SpeedModel(catalog, profile, fitted_scaling=True).scaling(grower)[6]
        )
    )


def test_an_elastic_job_shrinks_for_a_new_job(catalog: Catalog, profile: GavelProfile) -> None:
    elastic = replace(job("e", 0.0, 200_000.0, gpus=8, model=FLAT), min_replicas=4)
    newcomer = job("b", 1_000.0, 3_600.0, gpus=1)
    recs = run(catalog, profile, [elastic, newcomer])
    start = recs["b"].first_start_s
    assert start is not None and start - 1_000.0 < 100.0  # at the next cycles, not at e's end
    assert recs["e"].resizes == 2  # shrunk for "b", grown back when it ended
    assert recs["e"].preemptions == 0
    # The baselines' view (no resize): "b" waits for the whole of "e".
    rigid = run(catalog, profile, [elastic, newcomer], resize=False)
    late = rigid["b"].first_start_s
    assert late is not None and late >= (rigid["e"].completion_s or 0.0)


def test_the_owner_states_the_profiles_curve_only_when_asked(
    catalog: Catalog, profile: GavelProfile
) -> None:
    elastic = replace(job("e", 0.0, 1_000.0, gpus=8, model=FLAT), min_replicas=4)
    for prior, expected in (("profile", True), ("linear", False)):
        seen: list[tuple[Snapshot, list[Gang]]] = []
        run(catalog, profile, [elastic], settings=replace(SETTINGS, elastic_prior=prior), seen=seen)
        first = next(g for _, pending in seen for g in pending if g.id == "e")
        assert bool(first.scaling) is expected
    with pytest.raises(ValueError, match="elastic_prior"):
        SimSettings(elastic_prior="oracle")


def test_amdahl_fits_have_diminishing_returns(catalog: Catalog, profile: GavelProfile) -> None:
    speed = SpeedModel(catalog, profile, fitted_scaling=True)
    for model in profile.job_types(8):
        curve = speed.scaling(job("x", 0.0, 1.0, gpus=8, model=model))
        steps = [b - a for a, b in itertools.pairwise((0.0, *curve))]
        assert all(later <= earlier + 1e-12 for earlier, later in itertools.pairwise(steps))
    assert amdahl_fit([(1, 1.0), (2, 2.0), (4, 4.0), (8, 8.0)]) == 0.0
    assert amdahl_fit([(1, 1.0), (8, 8 / (1 + 0.25 * 7))]) == pytest.approx(0.25)
    assert amdahl_fit([(1, 1.0)]) == 0.0
