"""Where an evicted gang goes back in line in the simulator (`Policy.requeue_timestamp`).

Aspects: an evicted gang waits (`waited_s`) from its eviction either way; with `eviction` (the
default) its place in line is that wait (`queued_s` None), so a gang that arrived after it but
before its eviction goes first; with `creation` it carries the time since its arrival as
`queued_s` and goes before that gang; the tenant runs' Kueue-like baseline requeues by eviction
whatever the core's default is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Policy, RequeueTimestamp
from gpufleet.core.snapshot import Snapshot
from gpufleet.model.fleet import FleetSpec, NodePoolSpec
from gpufleet.model.gpus import Catalog
from gpufleet.sim.engine import SimPolicy, Simulation
from gpufleet.sim.gavel_profiles import GavelProfile
from gpufleet.sim.occupancy import SimCluster
from gpufleet.sim.speed import SpeedModel
from gpufleet.sim.tenant_run import SimClock, make_tenant_policy
from gpufleet.sim.traces.common import TraceJob

MODEL = "ResNet-50 (batch size 64)"
FLEET = FleetSpec(
    node_pools=[NodePoolSpec(name="v", count=1, gpu_type="V100-32GB", gpus_per_node=1)]
)


def job(jid: str, arrival: float, priority: int = 0) -> TraceJob:
    tj = TraceJob(jid, arrival, 100.0, replicas=1, gpus_per_replica=1, model=MODEL)
    return replace(tj, priority=priority)


def replay(
    catalog: Catalog, profile: GavelProfile, requeue: RequeueTimestamp
) -> tuple[list[tuple[float, Gang]], list[str]]:
    """One GPU. "a" runs from t=0; "c" (like "a") arrives at t=20 and waits; "b", of a higher
    priority, evicts "a" at t=50 and runs to t=150; then the GPU goes to "a" or "c". Returns
    every pending gang each decision saw (with the time) and the order the jobs started in."""
    seen: list[tuple[float, Gang]] = []
    started: list[str] = []

    def record(snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
        seen.extend((sim.now, g) for g in pending)
        decision = place(snapshot, pending, policy)
        started.extend(p.gang_id for p in decision.placements)
        return decision

    jobs = [job("a", 0.0), job("c", 20.0), job("b", 50.0, priority=1)]
    policy = SimPolicy("rec", record, Policy(requeue_timestamp=requeue))
    sim = Simulation(SimCluster(FLEET, catalog), jobs, policy, SpeedModel(catalog, profile))
    assert sim.run().unfinished == 0
    return seen, started


def evicted_at(seen: list[tuple[float, Gang]]) -> float:
    return min(now for now, g in seen if g.id == "b")


def test_by_eviction_an_evicted_gang_goes_back_in_line_from_its_eviction(
    catalog: Catalog, profile: GavelProfile
) -> None:
    seen, started = replay(catalog, profile, RequeueTimestamp.EVICTION)
    evicted = evicted_at(seen)
    again = [(now, g) for now, g in seen if g.id == "a" and now > evicted]
    assert again
    for now, gang in again:
        assert gang.waited_s == pytest.approx(now - evicted)
        assert gang.queued_s is None
    assert started == ["a", "b", "c", "a"]  # "c", in line since t=20, before "a" (t=50)


def test_by_creation_an_evicted_gang_keeps_its_place_in_line_and_waits_from_its_eviction(
    catalog: Catalog, profile: GavelProfile
) -> None:
    seen, started = replay(catalog, profile, RequeueTimestamp.CREATION)
    evicted = evicted_at(seen)
    again = [(now, g) for now, g in seen if g.id == "a" and now > evicted]
    assert again
    for now, gang in again:
        assert gang.waited_s == pytest.approx(now - evicted)  # aging still from its eviction
        assert gang.queued_s == pytest.approx(now)  # in line since its arrival, t=0
        assert gang.in_line_s > next(g.in_line_s for t, g in seen if t == now and g.id == "c")
    # A gang never evicted is in line since its arrival either way: no queued_s.
    assert all(g.queued_s is None for _, g in seen if g.id in ("b", "c"))
    assert started == ["a", "b", "a", "c"]  # "a", in line since t=0, before "c" (t=20)


def test_the_kueue_baseline_requeues_by_eviction_and_gpufleet_takes_the_setting() -> None:
    clock = SimClock()
    kueue = make_tenant_policy("kueue", clock)
    assert kueue.policy.requeue_timestamp is RequeueTimestamp.EVICTION
    ours = make_tenant_policy("gpufleet", clock, requeue_timestamp=RequeueTimestamp.CREATION)
    assert ours.policy.requeue_timestamp is RequeueTimestamp.CREATION
    assert make_tenant_policy("gpufleet", clock).policy.requeue_timestamp is (
        Policy().requeue_timestamp
    )
