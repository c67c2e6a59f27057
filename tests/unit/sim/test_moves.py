"""Moves and checkpoints in the simulator: the engine prices a restart the way the core does.

Aspects: a long job that had to start on T4s is moved to H100s once they free up, restarts after
the restart cost and finishes when the hand computation says; with interval checkpoints a moved
or preempted job redoes the work since its last checkpoint; the progress a policy sees is
estimated from jobs already completed (and a history), never from the job's own length; an
elastic job admitted at its minimum grows when GPUs free up, and the policy sees its scaling
curve refined from the throughput it reported at each size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import pytest

from gpufleet.core.decision import Decision, GangPlacement, Move
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.snapshot import ReplicaPlacement, Snapshot
from gpufleet.model.fleet import FleetSpec, NodePoolSpec
from gpufleet.model.gpus import Catalog
from gpufleet.sim.baselines import TiresiasLikePolicy
from gpufleet.sim.engine import SimPolicy, SimSettings, Simulation, gang_for_job
from gpufleet.sim.gavel_profiles import GavelProfile
from gpufleet.sim.occupancy import SimCluster
from gpufleet.sim.results import SimResult
from gpufleet.sim.speed import SpeedModel
from gpufleet.sim.traces.common import TraceJob

MODEL = "ResNet-50 (batch size 64)"
H100, T4 = "H100-80GB", "T4"
FLEET = FleetSpec(
    node_pools=[
        NodePoolSpec(name="h", count=1, gpu_type="H100-80GB", gpus_per_node=4),
        NodePoolSpec(name="t", count=1, gpu_type="T4", gpus_per_node=4),
    ]
)


def job(jid: str, arrival: float, work: float, gpus: int = 4) -> TraceJob:
    return TraceJob(jid, arrival, work, replicas=gpus, gpus_per_replica=1, model=MODEL)


def run(
    catalog: Catalog,
    profile: GavelProfile,
    jobs: Sequence[TraceJob],
    settings: SimSettings,
    seen: list[Snapshot] | None = None,
) -> tuple[SimResult, SpeedModel]:
    policy = Policy(solver=SolverSettings(engine=Engine.GREEDY))

    def decide(snapshot: Snapshot, pending: Sequence[Gang], pol: Policy) -> Decision:
        if seen is not None:
            seen.append(snapshot)
        return place(snapshot, pending, pol)

    speed = SpeedModel(catalog, profile, {"H100-80GB": 4, "T4": 4})
    sim = Simulation(
        SimCluster(FLEET, catalog), jobs, SimPolicy("gpufleet", decide, policy), speed, settings
    )
    return sim.run(), speed


@pytest.mark.parametrize("interval", [None, 1000.0], ids=["on-signal", "every-1000s"])
def test_a_long_job_moves_to_the_freed_fast_gpus(
    catalog: Catalog, profile: GavelProfile, interval: float | None
) -> None:
    # "short" takes the H100s at t=0; "long" must start on the T4s at t=10.
    jobs = [job("short", 0.0, 20_000.0), job("long", 5.0, 500_000.0)]
    settings = SimSettings(
        restart_cost_s=60.0,
        checkpoint_interval_s=interval,
        completed_prior=(1_000_000.0,),  # history: jobs that long exist
    )
    result, speed = run(catalog, profile, jobs, settings)
    recs = {r.job_id: r for r in result.jobs}
    fast = speed.type_speed(jobs[1], "H100-80GB")
    slow = speed.type_speed(jobs[1], "T4")
    assert recs["long"].moves == 1 and recs["short"].moves == 0
    freed = recs["short"].completion_s
    assert freed == pytest.approx(20_000.0 / fast)
    # The move happens at the first cycle after the H100s free up (cycles every 10 s).
    moved_at = math.ceil(freed / 10.0) * 10.0
    done = (moved_at - 10.0) * slow
    lost = 0.0 if interval is None else ((moved_at - 10.0) % interval) * slow
    expected = moved_at + 60.0 + (500_000.0 - done + lost) / fast
    assert recs["long"].completion_s == pytest.approx(expected)


def test_moves_of_one_decision_are_simultaneous(catalog: Catalog, profile: GavelProfile) -> None:
    """Job a takes the H100s job b gives up in the same decision (applied in id order, a first)."""

    def placed(gid: str, gpu_type: str, node: str, gpus: tuple[int, ...]) -> GangPlacement:
        return GangPlacement(gid, gpu_type, tuple(ReplicaPlacement(node, (g,)) for g in gpus))

    def decide(snapshot: Snapshot, pending: Sequence[Gang], pol: Policy) -> Decision:
        if {g.id for g in pending} == {"a", "b"}:
            return Decision(
                placements=(placed("a", T4, "t-0", (0, 1)), placed("b", H100, "h-0", (0, 1)))
            )
        if [g.id for g in pending] == ["c"]:
            return Decision(
                placements=(placed("c", T4, "t-0", (3,)),),
                moves=(
                    Move("a", T4, placed("a", H100, "h-0", (0, 1)), 1.0),
                    Move("b", H100, placed("b", H100, "h-0", (2, 3)), 1.0),
                ),
            )
        return Decision()

    jobs = [job("a", 0.0, 1000.0, 2), job("b", 0.0, 1000.0, 2), job("c", 50.0, 1000.0, 1)]
    sim = Simulation(
        SimCluster(FLEET, catalog),
        jobs,
        SimPolicy("scripted", decide, Policy()),
        SpeedModel(catalog, profile, {H100: 4, T4: 4}),
        SimSettings(restart_cost_s=60.0),
    )
    recs = {r.job_id: r for r in sim.run().jobs}
    assert (recs["a"].moves, recs["b"].moves, recs["c"].moves) == (1, 1, 0)
    assert all(r.completion_s is not None for r in recs.values())


def test_a_gang_placed_where_a_gang_moves_for_it_starts_in_that_decision(
    catalog: Catalog, profile: GavelProfile
) -> None:
    """A reclaim with moves (core/evacuation.py): job c is placed on the H100s job a gives up
    by moving, in the same decision, to the other H100s; the moved gang stops first."""

    def placed(gid: str, gpu_type: str, node: str, gpus: tuple[int, ...]) -> GangPlacement:
        return GangPlacement(gid, gpu_type, tuple(ReplicaPlacement(node, (g,)) for g in gpus))

    def decide(snapshot: Snapshot, pending: Sequence[Gang], pol: Policy) -> Decision:
        if [g.id for g in pending] == ["a"]:
            return Decision(placements=(placed("a", H100, "h-0", (0, 1)),))
        if [g.id for g in pending] == ["c"]:
            return Decision(
                placements=(placed("c", H100, "h-0", (0, 1)),),
                moves=(Move("a", H100, placed("a", H100, "h-0", (2, 3)), -60.0, for_gang="c"),),
            )
        return Decision()

    jobs = [job("a", 0.0, 1000.0, 2), job("c", 50.0, 1000.0, 2)]
    sim = Simulation(
        SimCluster(FLEET, catalog),
        jobs,
        SimPolicy("scripted", decide, Policy()),
        SpeedModel(catalog, profile, {H100: 4, T4: 4}),
        SimSettings(restart_cost_s=60.0),
    )
    recs = {r.job_id: r for r in sim.run().jobs}
    assert (recs["a"].moves, recs["c"].moves) == (1, 0)
    assert recs["c"].first_start_s == pytest.approx(50.0)
    assert all(r.completion_s is not None for r in recs.values())


def test_interval_checkpoints_lose_progress_on_preemption(
    catalog: Catalog, profile: GavelProfile
) -> None:
    fleet = FleetSpec(
        node_pools=[NodePoolSpec(name="v", count=1, gpu_type="V100-32GB", gpus_per_node=1)]
    )
    holder: list[Simulation] = []
    tiresias = TiresiasLikePolicy(lambda: holder[0].now, thresholds=(3600.0,))
    sim = Simulation(
        SimCluster(fleet, catalog),
        [job("long", 0.0, 100_000.0, gpus=1), job("short", 4000.0, 100.0, gpus=1)],
        SimPolicy("tiresias", tiresias, round_s=360.0),
        SpeedModel(catalog, profile),
        SimSettings(restart_cost_s=60.0, checkpoint_interval_s=1000.0),
    )
    holder.append(sim)
    recs = {r.job_id: r for r in sim.run().jobs}
    # Preempted at 4360 s of running: checkpoints at 1000 .. 4000 s, so 360 s are redone.
    assert recs["long"].preemptions == 1
    assert recs["long"].completion_s == pytest.approx(4520.0 + 95_640.0 + 360.0)


@pytest.mark.parametrize("history", [(), (10_000.0, 40_000.0)], ids=["no-history", "history"])
def test_progress_never_reads_the_jobs_own_length(
    catalog: Catalog, profile: GavelProfile, history: tuple[float, ...]
) -> None:
    """Two runs that differ only in how long job "b" is see the same progress for it."""

    def progress_of_b(length: float) -> dict[float, float]:
        jobs = [job("a", 0.0, 2_000.0), job("b", 0.0, length), job("c", 100.0, 3_000.0)]
        seen: list[Snapshot] = []
        run(catalog, profile, jobs, SimSettings(completed_prior=history), seen)
        out: dict[float, float] = {}
        for i, snapshot in enumerate(seen):
            for gang in snapshot.running:
                if gang.id == "b":
                    assert gang.progress is not None and gang.demand is not None
                    out[float(i)] = gang.progress.expected_remaining_s
        return out

    short, long = progress_of_b(60_000.0), progress_of_b(600_000.0)
    common = sorted(set(short) & set(long))[:3]
    assert common
    for key in common:
        assert short[key] == pytest.approx(long[key])


def test_an_elastic_job_grows_when_gpus_free_and_its_curve_is_refined(
    catalog: Catalog, profile: GavelProfile
) -> None:
    fleet = FleetSpec(
        node_pools=[NodePoolSpec(name="v", count=1, gpu_type="V100-32GB", gpus_per_node=8)]
    )
    grower = replace(job("e", 5.0, 2_000_000.0, gpus=8), min_replicas=4)
    # "late" (higher priority) arrives after the growth: its decision shows the grown gang.
    late = replace(job("late", 50_000.0, 10.0, gpus=1), priority=1)
    jobs = [job("block", 0.0, 20_000.0, gpus=4), grower, late]
    seen: list[Snapshot] = []
    policy = Policy(solver=SolverSettings(engine=Engine.GREEDY))

    def decide(snapshot: Snapshot, pending: Sequence[Gang], pol: Policy) -> Decision:
        seen.append(snapshot)
        return place(snapshot, pending, pol)

    speed = SpeedModel(catalog, profile, {"V100-32GB": 8})
    sim = Simulation(
        SimCluster(fleet, catalog),
        jobs,
        SimPolicy("gpufleet", decide, policy),
        speed,
        SimSettings(completed_prior=(5_000_000.0,)),
    )
    recs = {r.job_id: r for r in sim.run().jobs}
    assert recs["e"].moves == 1  # it started on 4 GPUs and grew to 8 when "block" ended
    true = speed.scaling(grower)
    grown = [
        g.demand
        for s in seen
        for g in s.running
        if g.id == "e" and len(g.replicas) == 8 and g.demand is not None
    ]
    assert grown, "the policy saw the grown gang"
    # Reports at 4 and 8 replicas: the refined curve has the measured ratio between them.
    assert grown[-1].scaling[7] / grown[-1].scaling[3] == pytest.approx(true[7] / true[3])


def test_a_gang_is_told_the_spread_slowdown_its_runs_get(
    catalog: Catalog, profile: GavelProfile
) -> None:
    speed = SpeedModel(catalog, profile, {H100: 4, T4: 4})
    wide = TraceJob("wide", 0.0, 1000.0, replicas=8, gpus_per_replica=1, model="LM (batch size 20)")
    types = [catalog[H100], catalog[T4]]
    told = gang_for_job(wide, types, speed).spread_speed
    assert told == pytest.approx(profile.spread_factor("LM (batch size 20)", 8)) and told < 0.2
    # The simulator runs the gang at that factor on more nodes than the fewest (two 4-GPU nodes).
    spread = [ReplicaPlacement(f"h-{i % 4}", (i // 4,)) for i in range(8)]
    packed = [ReplicaPlacement(f"h-{i // 4}", (i % 4,)) for i in range(8)]
    types_of = {f"h-{i}": H100 for i in range(4)}
    ratio = speed.placement_speed(wide, spread, types_of) / speed.placement_speed(
        wide, packed, types_of
    )
    assert ratio == pytest.approx(told)
    one = TraceJob("one", 0.0, 1000.0, replicas=1, gpus_per_replica=1, model="LM (batch size 20)")
    assert gang_for_job(one, types, speed).spread_speed == 1.0
