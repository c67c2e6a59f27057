"""Inputs the simulator passes to gpufleet's policies: the workload estimate and waiting time.

Aspects: a prior from past jobs counts the shapes of their gangs on the fleet's types
(constraints naming types outside the fleet narrow to the fleet) and weighs as many tasks as
there are past jobs, at most the estimate's window (none: no prior); the engine's online estimate
starts from the prior (worth `workload_prior_tasks` tasks) and adds every arrival, and the
snapshot a policy sees carries only arrivals up to the decision (nothing from the future); each
pending gang carries how long it has waited since it was queued, an evicted one since its
eviction (as the live scheduler counts from its recreated pods, and Kueue requeues it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import pytest

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.workload import TaskShape, WorkloadEstimate
from gpufleet.model.fleet import FleetSpec, NodePoolSpec
from gpufleet.model.gpus import Catalog
from gpufleet.sim.baselines import FifoBinPackPolicy
from gpufleet.sim.engine import SimPolicy, SimSettings, Simulation
from gpufleet.sim.gavel_profiles import GavelProfile
from gpufleet.sim.occupancy import SimCluster
from gpufleet.sim.runner import days_before, history_estimate, with_history_prior
from gpufleet.sim.speed import SpeedModel
from gpufleet.sim.traces.common import TraceJob

MODEL = "ResNet-50 (batch size 64)"
FLEET = FleetSpec(
    node_pools=[
        NodePoolSpec(name="v", count=1, gpu_type="V100-32GB", gpus_per_node=4),
        NodePoolSpec(name="t", count=1, gpu_type="T4", gpus_per_node=4),
    ]
)
BOTH = ("T4", "V100-32GB")


def job(jid: str, gpus: int, types: frozenset[str] | None, arrival: float = 0.0) -> TraceJob:
    return TraceJob(
        jid, arrival, 100.0, replicas=gpus, gpus_per_replica=1, model=MODEL, gpu_types=types
    )


def shares(estimate: WorkloadEstimate) -> dict[tuple[tuple[str, ...], int], float]:
    return {(s.shape.types, s.shape.gpus): s.share for s in estimate.shapes}


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        pytest.param([job("a", 2, None)], {(BOTH, 1): 1.0}, id="unconstrained-only"),
        pytest.param(
            [job("a", 2, None), job("b", 1, frozenset({"T4"})), job("c", 1, None)],
            {(BOTH, 1): 0.75, (("T4",), 1): 0.25},
            id="one-single-type-job",
        ),
        pytest.param(
            [job("a", 1, frozenset({"T4", "A10"})), job("b", 3, frozenset({"T4", "V100-32GB"}))],
            {(("T4",), 1): 0.25, (BOTH, 1): 0.75},
            id="types-outside-the-fleet-narrow-to-it",
        ),
        pytest.param([], {}, id="no-jobs"),
    ],
)
def test_prior_from_past_jobs(
    catalog: Catalog,
    profile: GavelProfile,
    jobs: list[TraceJob],
    expected: dict[tuple[tuple[str, ...], int], float],
) -> None:
    estimate = history_estimate(jobs, FLEET, catalog, SpeedModel(catalog, profile))
    assert shares(estimate) == pytest.approx(expected)


def test_settings_with_a_prior_from_the_two_weeks_before(
    catalog: Catalog, profile: GavelProfile
) -> None:
    assert days_before("2017-11-06") == "2017-10-23T00:00:00,2017-11-06T00:00:00"
    speed = SpeedModel(catalog, profile)
    settings = SimSettings(workload_window=3.0)
    assert with_history_prior(settings, [], FLEET, catalog, speed) is settings
    past = [job(str(i), 1, frozenset({"T4"})) for i in range(5)]
    seeded = with_history_prior(settings, past, FLEET, catalog, speed)
    assert seeded.workload_prior == history_estimate(past, FLEET, catalog, speed)
    assert seeded.workload_prior_tasks == 3.0  # 5 past jobs, counted up to the window
    assert with_history_prior(settings, past[:2], FLEET, catalog, speed).workload_prior_tasks == 2


@pytest.mark.parametrize(
    ("prior_tasks", "expected_first", "expected_last"),
    [
        pytest.param(0.0, {(("V100-32GB",), 1): 1.0}, None, id="online-only"),
        pytest.param(
            2.0,
            {(("T4",), 1): 0.5, (("V100-32GB",), 1): 0.5},
            {(("T4",), 1): 1 / 3, (("V100-32GB",), 1): 1 / 3, (BOTH, 1): 1 / 3},
            id="with-prior",
        ),
    ],
)
def test_online_estimate_starts_from_the_prior_and_sees_no_future(
    catalog: Catalog,
    profile: GavelProfile,
    prior_tasks: float,
    expected_first: dict[tuple[tuple[str, ...], int], float],
    expected_last: dict[tuple[tuple[str, ...], int], float] | None,
) -> None:
    seen: list[dict[tuple[tuple[str, ...], int], float]] = []

    def record(snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
        assert snapshot.workload is not None
        seen.append(shares(snapshot.workload))
        return FifoBinPackPolicy()(snapshot, pending, policy)

    # "a" fills the V100 node; "b" arrives later and asks for the T4s too.
    jobs = [job("a", 2, frozenset({"V100-32GB"})), job("b", 2, None, arrival=500.0)]
    prior = WorkloadEstimate.of({TaskShape(("T4",), 1): 1.0})
    sim = Simulation(
        SimCluster(FLEET, catalog),
        jobs,
        SimPolicy("rec", record),
        SpeedModel(catalog, profile),
        SimSettings(
            workload_window=math.inf, workload_prior=prior, workload_prior_tasks=prior_tasks
        ),
    )
    assert sim.run().unfinished == 0
    # The first decision sees the prior and job a's two tasks only.
    assert seen[0] == pytest.approx(expected_first)
    if expected_last is not None:
        assert seen[-1] == pytest.approx(expected_last)


def test_pending_gangs_carry_their_waiting_time(catalog: Catalog, profile: GavelProfile) -> None:
    seen: list[tuple[float, str, float]] = []

    def record(snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
        for g in pending:
            seen.append((sim.now, g.id, g.waited_s))
        return FifoBinPackPolicy()(snapshot, pending, policy)

    fleet = FleetSpec(
        node_pools=[NodePoolSpec(name="v", count=1, gpu_type="V100-32GB", gpus_per_node=1)]
    )
    # "b" arrives while "a" holds the only GPU and waits until "a" completes at t=100.
    jobs = [job("a", 1, None), job("b", 1, None, arrival=5.0)]
    sim = Simulation(
        SimCluster(fleet, catalog), jobs, SimPolicy("rec", record), SpeedModel(catalog, profile)
    )
    assert sim.run().unfinished == 0
    for now, gang_id, waited in seen:
        arrival = 0.0 if gang_id == "a" else 5.0
        assert waited == pytest.approx(now - arrival)
    assert max(w for _, g, w in seen if g == "b") >= 90.0


def test_an_evicted_gang_waits_from_its_eviction(catalog: Catalog, profile: GavelProfile) -> None:
    seen: list[tuple[float, str, float]] = []

    def record(snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
        for g in pending:
            seen.append((sim.now, g.id, g.waited_s))
        return place(snapshot, pending, policy)

    fleet = FleetSpec(
        node_pools=[NodePoolSpec(name="v", count=1, gpu_type="V100-32GB", gpus_per_node=1)]
    )
    # "a" runs from t=0; "b", of a higher priority, evicts it at t=50 and runs to t=150.
    jobs = [job("a", 1, None), replace(job("b", 1, None, arrival=50.0), priority=1)]
    sim = Simulation(
        SimCluster(fleet, catalog), jobs, SimPolicy("rec", record), SpeedModel(catalog, profile)
    )
    assert sim.run().unfinished == 0
    evicted = min(now for now, g, _ in seen if g == "b")
    again = [(now, w) for now, g, w in seen if g == "a" and now > evicted]
    assert again, seen
    for now, waited in again:
        assert waited == pytest.approx(now - evicted)  # not now - 0 (its arrival)
