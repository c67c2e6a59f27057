"""Inputs the simulator passes to gpufleet's policies: single-type demand and waiting time.

Aspects: the prior from a job list counts the GPUs of jobs that accept exactly one fleet type
(constraints naming types outside the fleet narrow to the fleet); the engine's online estimate
blends the prior (worth `demand_prior_gpus`) with every arrival; jobs without a constraint add
to the total only; each pending gang carries how long it has waited since it was queued.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import ConstrainedDemand, Snapshot
from gpufleet.model.fleet import FleetSpec, NodePoolSpec
from gpufleet.model.gpus import Catalog
from gpufleet.sim.baselines import FifoBinPackPolicy
from gpufleet.sim.engine import SimPolicy, SimSettings, Simulation
from gpufleet.sim.gavel_profiles import GavelProfile
from gpufleet.sim.occupancy import SimCluster
from gpufleet.sim.runner import single_type_demand
from gpufleet.sim.speed import SpeedModel
from gpufleet.sim.traces.common import TraceJob

MODEL = "ResNet-50 (batch size 64)"
FLEET = FleetSpec(
    node_pools=[
        NodePoolSpec(name="v", count=1, gpu_type="V100-32GB", gpus_per_node=4),
        NodePoolSpec(name="t", count=1, gpu_type="T4", gpus_per_node=4),
    ]
)


def job(jid: str, gpus: int, types: frozenset[str] | None, arrival: float = 0.0) -> TraceJob:
    return TraceJob(
        jid, arrival, 100.0, replicas=gpus, gpus_per_replica=1, model=MODEL, gpu_types=types
    )


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        pytest.param([job("a", 2, None)], {}, id="unconstrained-only"),
        pytest.param(
            [job("a", 2, None), job("b", 1, frozenset({"T4"})), job("c", 1, None)],
            {"T4": 0.25},
            id="one-single-type-job",
        ),
        pytest.param(
            [job("a", 1, frozenset({"T4", "A10"})), job("b", 3, frozenset({"T4", "V100-32GB"}))],
            {"T4": 0.25},
            id="types-outside-the-fleet-narrow-to-it",
        ),
        pytest.param([], {}, id="no-jobs"),
    ],
)
def test_prior_from_a_job_list(jobs: list[TraceJob], expected: dict[str, float]) -> None:
    got = {d.gpu_type: d.share for d in single_type_demand(jobs, FLEET)}
    assert got == pytest.approx(expected)


@pytest.mark.parametrize(
    ("prior", "prior_gpus", "expected"),
    [
        pytest.param((), 0.0, {"V100-32GB": 0.5}, id="online-only"),
        pytest.param(
            (ConstrainedDemand("T4", 0.5),), 4.0, {"T4": 0.25, "V100-32GB": 0.25}, id="with-prior"
        ),
    ],
)
def test_online_estimate_blends_prior_and_arrivals(
    catalog: Catalog,
    profile: GavelProfile,
    prior: tuple[ConstrainedDemand, ...],
    prior_gpus: float,
    expected: dict[str, float],
) -> None:
    jobs = [job("a", 2, frozenset({"V100-32GB"})), job("b", 2, None, arrival=5.0)]
    sim = Simulation(
        SimCluster(FLEET, catalog),
        jobs,
        SimPolicy("fifo", FifoBinPackPolicy()),
        SpeedModel(catalog, profile),
        SimSettings(demand_prior=prior, demand_prior_gpus=prior_gpus),
    )
    result = sim.run()
    assert result.unfinished == 0
    got = {d.gpu_type: d.share for d in sim.constrained_demand()}
    assert got == pytest.approx(expected)


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
