"""Event loop: conservation, energy against hand-computed power, and every timing assumption.

Aspects: every job completes exactly once; busy GPU-seconds add up per job and in total; energy
is non-negative and equals the power model on hand-computed cases (with and without power-down);
node boot delay; a gang waiting for a switched-off faster node as the core decides (boot_wait.py);
MIG repartition delay; preemption keeps progress and pays the restart cost;
partial gangs (kube-like) hold GPUs, time out and still finish; bad decisions raise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import pytest

from gpufleet.core.decision import Decision, GangPlacement
from gpufleet.core.demand import Gang
from gpufleet.core.place import place as core_place
from gpufleet.core.policy import Engine, Policy, PowerDownRule, SolverSettings
from gpufleet.core.snapshot import ReplicaPlacement, Snapshot
from gpufleet.model.fleet import FleetSpec, NodePoolSpec
from gpufleet.model.gpus import Catalog
from gpufleet.model.power import capped_power_w
from gpufleet.sim.baselines import FifoBinPackPolicy, TiresiasLikePolicy
from gpufleet.sim.energy import PARKING_W
from gpufleet.sim.engine import SimPolicy, SimSettings, Simulation
from gpufleet.sim.gavel_profiles import GavelProfile
from gpufleet.sim.kube_like import KubeLikePolicy
from gpufleet.sim.occupancy import ClusterError, SimCluster
from gpufleet.sim.results import SimResult, summarise
from gpufleet.sim.speed import SpeedModel
from gpufleet.sim.traces.common import TraceJob

MODEL = "ResNet-50 (batch size 64)"


def job(jid: str, arrival: float, work: float, gpus: int = 1, mig_g: int | None = None) -> TraceJob:
    return TraceJob(jid, arrival, work, replicas=gpus, gpus_per_replica=1, model=MODEL, mig_g=mig_g)


def simulate(
    fleet: FleetSpec,
    jobs: Sequence[TraceJob],
    policy: SimPolicy,
    catalog: Catalog,
    profile: GavelProfile,
    settings: SimSettings | None = None,
    progress: list[int] | None = None,
) -> tuple[Simulation, SimResult]:
    cluster = SimCluster(fleet, catalog)
    sim = Simulation(
        cluster,
        jobs,
        policy,
        SpeedModel(catalog, profile),
        settings,
        on_progress=(lambda done, total: progress.append(done)) if progress is not None else None,
    )
    return sim, sim.run()


def test_every_job_completes_exactly_once_and_gpu_seconds_add_up(
    catalog: Catalog, profile: GavelProfile, v100_fleet: Callable[..., FleetSpec]
) -> None:
    jobs = [job(f"j{i}", arrival=i * 50.0, work=300.0 + 37 * i, gpus=1 + i % 3) for i in range(40)]
    progress: list[int] = []
    _, result = simulate(
        v100_fleet(nodes=2, gpus=4),
        jobs,
        SimPolicy("fifo", FifoBinPackPolicy()),
        catalog,
        profile,
        progress=progress,
    )
    assert progress == list(range(1, 41))  # one completion event per job, never twice
    assert result.unfinished == 0
    by_id = {r.job_id: r for r in result.jobs}
    for tj in jobs:
        rec = by_id[tj.job_id]
        assert rec.completion_s is not None and rec.first_start_s is not None
        run = rec.completion_s - rec.first_start_s
        # Nothing is preempted: busy GPU-seconds = GPUs x run time. V100 speed is 1.0, so the
        # run time is the work, or longer when a gang was spread over more nodes than needed.
        assert rec.busy_gpu_s == pytest.approx(run * tj.num_gpus)
        assert run >= tj.work_s - 1e-6
        if tj.num_gpus == 1:
            assert run == pytest.approx(tj.work_s)
        assert rec.first_start_s >= tj.arrival_s
    assert result.busy_gpu_s == pytest.approx(sum(r.busy_gpu_s for r in result.jobs))
    assert result.allocated_gpu_s == pytest.approx(result.busy_gpu_s)
    assert result.energy_j > 0
    s = summarise(result)
    assert 0 < s["utilisation"] <= 1


def test_energy_matches_the_power_model_by_hand(
    catalog: Catalog, profile: GavelProfile, v100_fleet: Callable[..., FleetSpec]
) -> None:
    v100 = catalog["V100-32GB"]
    busy_w = capped_power_w(v100, None)  # idle + 0.85 x (TDP - idle)
    assert busy_w == pytest.approx(40 + 0.85 * 260)
    _, result = simulate(
        v100_fleet(nodes=1, gpus=2),
        [job("a", 0.0, 3600.0)],
        SimPolicy("fifo", FifoBinPackPolicy()),
        catalog,
        profile,
    )
    # One GPU busy for an hour, the other idle: (261 + 40) W x 3600 s.
    assert result.end_s - result.start_s == pytest.approx(3600.0)
    assert result.energy_j == pytest.approx((busy_w + v100.power.idle_w) * 3600.0)
    assert summarise(result)["energy_kwh"] == pytest.approx(0.301)


def _power_down(idle_s: float, warm: int, boot_s: float = 300.0) -> SimPolicy:
    rule = PowerDownRule(enabled=True, idle_s=idle_s, warm_nodes_per_type=warm, boot_s=boot_s)
    return SimPolicy("fifo-off", FifoBinPackPolicy(), Policy(power_down=rule))


def test_power_down_and_boot_delay(
    catalog: Catalog, profile: GavelProfile, v100_fleet: Callable[..., FleetSpec]
) -> None:
    v100 = catalog["V100-32GB"]
    busy_w = capped_power_w(v100, None)
    policy = _power_down(idle_s=600.0, warm=0)
    # Two single-GPU nodes; the job takes node v-0, v-1 idles for 600 s and switches off.
    _, result = simulate(
        v100_fleet(nodes=2, gpus=1), [job("a", 0.0, 3600.0)], policy, catalog, profile
    )
    assert result.energy_j == pytest.approx(busy_w * 3600.0 + v100.power.idle_w * 600.0)
    # With one warm node per type kept as headroom, v-1 stays on (and idle) all along.
    warm = _power_down(idle_s=600.0, warm=1)
    _, result = simulate(
        v100_fleet(nodes=2, gpus=1), [job("a", 0.0, 3600.0)], warm, catalog, profile
    )
    assert result.energy_j == pytest.approx((busy_w + v100.power.idle_w) * 3600.0)
    # A later job finds every node off: the node is woken for it and it starts after the boot.
    _, result = simulate(
        v100_fleet(nodes=1, gpus=1),
        [job("a", 0.0, 100.0), job("b", 5000.0, 100.0)],
        policy,
        catalog,
        profile,
    )
    b = next(r for r in result.jobs if r.job_id == "b")
    assert b.first_start_s == pytest.approx(5300.0)
    # Energy: a runs 100 s, the node idles 600 s, is off until b arrives at 5000, boots for
    # 300 s at idle power, then b runs 100 s.
    expected = busy_w * 100 + v100.power.idle_w * 600 + v100.power.idle_w * 300 + busy_w * 100
    assert result.energy_j == pytest.approx(expected)


def test_switched_off_node_is_not_used_while_another_fits(
    catalog: Catalog, profile: GavelProfile, v100_fleet: Callable[..., FleetSpec]
) -> None:
    # Three single-GPU nodes, one warm: after a's run two are off and one stays on. b fits on
    # the warm node and starts at once; c, arriving while b runs, needs one node woken.
    policy = _power_down(idle_s=600.0, warm=1)
    jobs = [job("a", 0.0, 100.0), job("b", 5000.0, 1000.0), job("c", 5100.0, 100.0)]
    _, result = simulate(v100_fleet(nodes=3, gpus=1), jobs, policy, catalog, profile)
    starts = {r.job_id: r.first_start_s for r in result.jobs}
    assert starts["b"] == pytest.approx(5000.0)
    assert starts["c"] == pytest.approx(5100.0 + 300.0)


def test_a_gang_waits_for_a_switched_off_faster_node_as_the_core_decides(
    catalog: Catalog, profile: GavelProfile
) -> None:
    # The core's boot wait in the replay: t keeps the T4 node on (it may run only there), the
    # H100 node goes off after a's run; b fits on the free T4 GPU but runs far faster on an
    # H100, so it waits for the H100 node's boot and starts there 300 s after arriving.
    fleet = FleetSpec(
        node_pools=[
            NodePoolSpec(name="h", count=1, gpu_type="H100-80GB", gpus_per_node=1),
            NodePoolSpec(name="t", count=1, gpu_type="T4", gpus_per_node=2),
        ]
    )
    rule = PowerDownRule(enabled=True, idle_s=600.0, warm_nodes_per_type=0, boot_s=300.0)
    greedy = SolverSettings(engine=Engine.GREEDY)
    policy = SimPolicy("boot-wait", core_place, Policy(power_down=rule, solver=greedy))
    t4_only = replace(job("t", 0.0, 20_000.0), gpu_types=frozenset({"T4"}))
    jobs = [t4_only, job("a", 0.0, 100.0), job("b", 5000.0, 1000.0)]
    sim, result = simulate(fleet, jobs, policy, catalog, profile)
    b = next(r for r in result.jobs if r.job_id == "b")
    assert b.first_start_s == pytest.approx(5300.0)
    assert sim.jobs["b"].gpu_type == "H100-80GB"
    # Without the prior, it starts at once on the T4.
    never = replace(rule, expected_run_s=0.0)
    policy = SimPolicy("no-wait", core_place, Policy(power_down=never, solver=greedy))
    _, result = simulate(fleet, jobs, policy, catalog, profile)
    assert next(r for r in result.jobs if r.job_id == "b").first_start_s == pytest.approx(5000.0)


def test_mig_repartition_delay(
    catalog: Catalog, profile: GavelProfile, v100_fleet: Callable[..., FleetSpec]
) -> None:
    from gpufleet.model.fleet import MigSpec

    fleet = FleetSpec(
        node_pools=[
            NodePoolSpec(
                name="a",
                count=1,
                gpu_type="A100-80GB",
                gpus_per_node=1,
                mig=MigSpec(config="all-enabled"),
            )
        ]
    )
    settings = SimSettings(mig_repartition_s=30.0)
    _, result = simulate(
        fleet,
        [job("small", 0.0, 100.0, mig_g=1)],
        SimPolicy("fifo", FifoBinPackPolicy()),
        catalog,
        profile,
        settings,
    )
    rec = result.jobs[0]
    assert rec.first_start_s == pytest.approx(30.0)
    speed = SpeedModel(catalog, profile).type_speed(job("small", 0.0, 100.0), "A100-80GB")
    # A 1g slice is 1/7 of the GPU for 100 work units at the job's A100 speed.
    assert rec.busy_gpu_s == pytest.approx(100.0 / speed / 7)
    assert rec.completion_s == pytest.approx(30.0 + 100.0 / speed)


def test_preemption_keeps_progress_and_pays_restart_cost(
    catalog: Catalog, profile: GavelProfile, v100_fleet: Callable[..., FleetSpec]
) -> None:
    holder: list[Simulation] = []
    tiresias = TiresiasLikePolicy(lambda: holder[0].now, thresholds=(3600.0,))
    cluster = SimCluster(v100_fleet(nodes=1, gpus=1), catalog)
    sim = Simulation(
        cluster,
        [job("long", 0.0, 100_000.0), job("short", 4000.0, 100.0)],
        SimPolicy("tiresias", tiresias, round_s=360.0),
        SpeedModel(catalog, profile),
        SimSettings(restart_cost_s=60.0),
    )
    holder.append(sim)
    result = sim.run()
    recs = {r.job_id: r for r in result.jobs}
    # The fleet is full, so the arrival waits for the next 360 s round (t = 4320 + ... = 4360).
    assert recs["short"].first_start_s == pytest.approx(4360.0)
    assert recs["short"].completion_s == pytest.approx(4460.0)
    assert recs["long"].preemptions == 1
    # 4360 s done before the preemption, restart at 4460 + 60 s, 95,640 s left.
    assert recs["long"].completion_s == pytest.approx(4520.0 + 95_640.0)
    assert recs["long"].busy_gpu_s == pytest.approx(100_000.0)


def test_partial_gangs_hold_gpus_then_time_out(
    catalog: Catalog, profile: GavelProfile, v100_fleet: Callable[..., FleetSpec]
) -> None:
    jobs = [job("x", 0.0, 3000.0), job("y", 5.0, 500.0, gpus=2)]
    settings = SimSettings(gang_timeout_s=600.0)
    _, kube = simulate(
        v100_fleet(nodes=1, gpus=2),
        jobs,
        SimPolicy("kube", KubeLikePolicy()),
        catalog,
        profile,
        settings,
    )
    _, fifo = simulate(
        v100_fleet(nodes=1, gpus=2),
        jobs,
        SimPolicy("fifo", FifoBinPackPolicy()),
        catalog,
        profile,
        settings,
    )
    for result in (kube, fifo):
        assert result.unfinished == 0
        y = next(r for r in result.jobs if r.job_id == "y")
        assert y.first_start_s is not None and y.first_start_s >= 3000.0
    # kube-like: y's first pod held the free GPU without running (allocated, not busy).
    assert kube.allocated_gpu_s > kube.busy_gpu_s + 500.0
    assert fifo.allocated_gpu_s == pytest.approx(fifo.busy_gpu_s)
    # Both start y when x ends; the only energy difference is the parked GPU's overhead.
    assert kube.end_s == pytest.approx(fifo.end_s)
    parked_gpu_s = kube.allocated_gpu_s - kube.busy_gpu_s
    assert kube.energy_j - fifo.energy_j == pytest.approx(PARKING_W * parked_gpu_s)


class _DoubleBooker:
    """A broken policy that places every pending gang on GPU 0 of the first node."""

    def __call__(self, snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
        node = snapshot.nodes[0].name
        return Decision(
            placements=tuple(
                GangPlacement(g.id, "V100-32GB", (ReplicaPlacement(node, (0,)),)) for g in pending
            )
        )


def test_a_double_booking_decision_raises(
    catalog: Catalog, profile: GavelProfile, v100_fleet: Callable[..., FleetSpec]
) -> None:
    with pytest.raises(ClusterError, match="is taken"):
        simulate(
            v100_fleet(nodes=1, gpus=2),
            [job("a", 0.0, 100.0), job("b", 0.0, 100.0)],
            SimPolicy("bad", _DoubleBooker()),
            catalog,
            profile,
        )


def test_elastic_job_runs_with_fewer_replicas_at_its_scaling_curves_speed(
    catalog: Catalog, profile: GavelProfile, v100_fleet: Callable[..., FleetSpec]
) -> None:
    import dataclasses

    elastic = dataclasses.replace(job("e", 0.0, 1000.0, gpus=4), min_replicas=2)
    curve = SpeedModel(catalog, profile).scaling(elastic)
    # Gavel measured this class at 1, 2 and 4 GPUs: 2 of 4 replicas do more than half the work.
    assert curve[1] / curve[3] > 0.5
    for name, place in (("fifo", FifoBinPackPolicy()), ("kube", KubeLikePolicy())):
        _, result = simulate(
            v100_fleet(nodes=1, gpus=2), [elastic], SimPolicy(name, place), catalog, profile
        )
        rec = result.jobs[0]
        # Two of four replicas on two GPUs, at the curve's speed for two.
        run = 1000.0 * curve[3] / curve[1]
        assert rec.completion_s == pytest.approx(run)
        assert rec.busy_gpu_s == pytest.approx(2 * run)


def test_work_utilisation_weighs_busy_time_by_the_speed_the_job_gets(
    catalog: Catalog, profile: GavelProfile
) -> None:
    fleet = FleetSpec(
        node_pools=[
            NodePoolSpec(name="a", count=1, gpu_type="A100-80GB", gpus_per_node=1),
            NodePoolSpec(name="v", count=1, gpu_type="V100-32GB", gpus_per_node=1),
        ]
    )
    a100_only = frozenset({"A100-80GB"})
    jobs = [
        TraceJob("x", 0.0, 50_000.0, 1, 1, MODEL, gpu_types=a100_only),  # holds the A100
        TraceJob("y", 1.0, 50_000.0, 1, 1, MODEL),  # left the V100, its slower type
        TraceJob("z", 1001.0, 10.0, 1, 1, MODEL, gpu_types=a100_only),  # the last arrival
    ]
    speed = SpeedModel(catalog, profile)
    _, result = simulate(fleet, jobs, SimPolicy("fifo", FifoBinPackPolicy()), catalog, profile)
    start = {r.job_id: r.first_start_s for r in result.jobs}
    x, y = 1001.0 - start["x"], 1001.0 - start["y"]  # busy seconds in the span 0..1001 s
    assert x > 990 and y > 990  # both started at once: x on the A100, so y on the V100
    ratio = speed.type_speed(jobs[1], "V100-32GB") / speed.type_speed(jobs[1], "A100-80GB")
    assert 0 < ratio < 1
    s = summarise(result)
    # x runs on its only (so fastest) type: weight 1; y at its V100 speed over its A100 speed.
    assert s["arrival_utilisation"] == pytest.approx((x + y) / (2 * 1001))
    assert s["arrival_work_utilisation"] == pytest.approx((x + y * ratio) / (2 * 1001))


def test_an_arrival_a_hair_past_a_cycle_boundary_is_decided_then_not_before(
    catalog: Catalog, profile: GavelProfile, v100_fleet: Callable[..., FleetSpec]
) -> None:
    # Float arithmetic put an event 1e-11 s past a 10 s cycle boundary (a Philly replay's
    # fifo-binpack run at t = 61830): the cycle must not be scheduled at the boundary, before
    # the clock, where the integrators refused to go back in time.
    late = 61830.0 + 1e-11
    jobs = [job("early", 0.0, 300.0), job("late", late, 300.0)]
    _, result = simulate(
        v100_fleet(nodes=1, gpus=1), jobs, SimPolicy("fifo", FifoBinPackPolicy()), catalog, profile
    )
    starts = {r.job_id: r.first_start_s for r in result.jobs}
    assert result.unfinished == 0 and starts["late"] == pytest.approx(late)
