"""Unit tests of the mixed simulator (training and serving on one fleet, gpufleet/sim/mixed).

Aspects under test: a serving burst wakes standbys before cold-starting replicas, a woken standby
takes its GPU back from the training gang borrowing it, which resumes (and finishes) after the burst
with its lost work counted; a burst that needs fewer standbys than are asleep wakes the ones nobody
borrows; a preempted gang frees its GPUs only its exit time (grace period) later, so a woken
standby or a new replica on its GPUs is ready that much later (hand-computed times); without
borrowing a serving scale-up waits for free GPUs and never preempts; no GPU ever runs two things
(checked every tick); the workload loaders are seeded and causal in shape (hour rotations, arrival
window, offered load); every variant of the bench runs on the same workload, and the static
partition bills exactly its peak. The request-driven wake wakes standbys within its check
interval of a queue the awake replicas cannot clear within the wake time (hand-computed counts)
and holds them awake; lending restricted to jobs that checkpoint on SIGTERM lends to no other
job, and such a job loses no run time when preempted.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import replace

import pytest

from gpufleet.core.autoscaling import Slo
from gpufleet.core.autoscaling_types import PoolRole
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.model.gpus import load_catalog
from gpufleet.model.inventory import make_node
from gpufleet.sim.mixed.engine import MixedSettings, MixedSimulation, ServingSpec
from gpufleet.sim.mixed.variants import VARIANTS, Fleet, run_variant
from gpufleet.sim.mixed.workload import (
    TrainingSpec,
    at_load,
    on_signal_share,
    philly_jobs,
    serving_requests,
)
from gpufleet.sim.serving import (
    PoolConfig,
    ServingConfig,
    ServingModel,
    poisson_requests,
    replica_profile,
)
from gpufleet.sim.serving.replay import PoolView
from gpufleet.sim.serving.trace import Request
from gpufleet.sim.traces.common import default_data_dir

CATALOG = load_catalog()
PROFILE = replica_profile("H100-SXM-80GB")


class Script:
    """Desired prefill replicas by time: `burst` replicas in [start, end), else 1. Records
    the ready prefill replicas it saw at each call."""

    def __init__(self, start: float, end: float, burst: int) -> None:
        self.start, self.end, self.burst = start, end, burst
        self.ready: dict[float, int] = {}

    def __call__(self, now: float, pools: Mapping[str, PoolView]) -> Mapping[str, int]:
        self.ready[now] = pools["prefill"].ready_replicas
        return {"prefill": self.burst if self.start <= now < self.end else 1, "decode": 1}


def simulation(
    *, borrow: bool, standby: int, gpus: int = 4, train_gpus: int = 2
) -> tuple[MixedSimulation, ServingModel]:
    config = ServingConfig(
        prefill=PoolConfig("prefill", PoolRole.PREFILL, PROFILE, 1, standby),
        decode=PoolConfig("decode", PoolRole.DECODE, PROFILE, 1),
        cold_start_s=60.0,
        wake_s=5.0,
    )
    model = ServingModel(config, ())
    spec = ServingSpec("sj", model, Script(600.0, 900.0, 1 + standby), {"prefill": standby})
    sim = MixedSimulation(
        CATALOG,
        (make_node("n0", CATALOG["H100-80GB"], gpus),),
        [TrainingSpec("job", 0.0, train_gpus, 1800.0)],
        [spec],
        Policy(solver=SolverSettings(engine=Engine.GREEDY), allow_preemption=borrow),
        MixedSettings(
            tick_s=5.0,
            period_s=15.0,
            horizon_s=4 * 3600.0,
            restart_s=60.0,
            checkpoint_interval_s=300.0,
            check=True,
        ),
        lambda ttft, tpot: True,
    )
    return sim, model


def test_a_burst_wakes_standbys_and_takes_back_the_borrowed_gpus() -> None:
    # 4 GPUs: prefill 1 awake + 2 asleep, decode 1. The 2-GPU job can only run on the lent GPUs.
    sim, model = simulation(borrow=True, standby=2)
    result = sim.run()
    job = sim.jobs["job"]
    # Borrowed from t=0, preempted by the wake at t=600 (2 lent GPUs for 600 s), resumed after
    # the pool went back to sleep at t=900, finished.
    assert result.lent_gpu_hours >= 2 * 600 / 3600
    assert job.preemptions == 1 and job.completion_s is not None
    # 600 s run, 300 s checkpoints: nothing unsaved at t=600; the restart is lost (2 GPUs x 60 s).
    assert result.lost_gpu_hours == pytest.approx(2 * 60 / 3600)
    assert job.completion_s == pytest.approx(900.0 + 60.0 + 1200.0, abs=15.0)
    # Woken, not cold-started: the pool never had more than three replicas ever.
    assert len(model.replica_phases("prefill")) == 3


def test_a_burst_wakes_the_standby_nobody_borrows_first() -> None:
    # 4 GPUs: prefill 1 awake + 2 asleep, decode 1; a 1-GPU job borrows one lent GPU. The
    # burst needs one more prefill replica: the other standby wakes, the job is not touched.
    sim, model = simulation(borrow=True, standby=2, train_gpus=1)
    sim.serving[0].controller = Script(600.0, 900.0, 2)
    result = sim.run()
    job = sim.jobs["job"]
    assert result.lent_gpu_hours == pytest.approx(1800.0 / 3600, abs=0.01)
    assert job.preemptions == 0 and result.lost_gpu_hours == 0.0
    assert job.completion_s == pytest.approx(1800.0, abs=5.0)
    assert len(model.replica_phases("prefill")) == 3  # woken, never cold-started


def test_every_variant_runs_on_the_same_workload() -> None:
    fleet = Fleet(
        CATALOG,
        tuple(make_node(f"n{i}", CATALOG["H100-80GB"], 8) for i in range(2)),
        PROFILE,
        Slo(ttft_p90_s=0.5, itl_p90_s=0.05),
        peak_prefill=2,
        peak_decode=1,
    )
    training = [TrainingSpec("a", 0.0, 4, 900.0), TrainingSpec("b", 60.0, 8, 600.0)]
    serving = [poisson_requests(0.5, 1200.0, prompt_tokens=512, output_tokens=64, seed=3)]
    settings = MixedSettings(horizon_s=1800.0, check=True)
    results = {v: run_variant(v, fleet, training, serving, settings) for v in VARIANTS}
    for name, result in results.items():
        assert result.requests == results["static"].requests > 0, name
        assert result.unfinished == 0 and 0.0 <= result.attainment <= 1.0, name
    # The partition keeps its peak (3 GPUs) awake for the whole replay and preempts nothing.
    static = results["static"]
    assert static.serving_gpu_hours == pytest.approx(3 * static.end_s / 3600)
    assert 1200.0 <= static.end_s < 1800.0  # stopped once the work was done
    assert results["static"].preemptions == 0
    with pytest.raises(ValueError, match="unknown variant"):
        run_variant("clairvoyant", fleet, training, serving, settings)


def test_without_borrowing_a_scale_up_waits_for_free_gpus() -> None:
    # 3 GPUs: prefill 1 + decode 1 awake, the job holds the third one until t=1800.
    for horizon, replicas in ((1700.0, 1), (3600.0, 2)):
        sim, model = simulation(borrow=False, standby=0, gpus=3, train_gpus=1)
        sim.s = MixedSettings(
            horizon_s=horizon,
            restart_s=60.0,
            checkpoint_interval_s=300.0,
            check=True,
        )
        sim.serving[0].controller = Script(600.0, 3000.0, 2)
        result = sim.run()
        assert result.preemptions == 0
        # Before the job ends the second prefill replica is still waiting for a GPU.
        assert len(model.replica_phases("prefill")) == replicas
    assert sim.jobs["job"].completion_s == pytest.approx(1800.0, abs=5.0)


def test_workload_is_seeded_and_rotated_per_hour() -> None:
    data = default_data_dir()
    code = data / "traces" / "azure-llm-2023-code.csv"
    a = serving_requests(code, seed=1, job=0, hours=2)
    assert a == serving_requests(code, seed=1, job=0, hours=2)
    assert a != serving_requests(code, seed=1, job=1, hours=2)
    assert all(x.arrival_s <= y.arrival_s for x, y in itertools.pairwise(a))
    first = [r for r in a if r.arrival_s < 3600.0]
    second = [r for r in a if r.arrival_s >= 3600.0]
    assert len(first) == len(second) == 8819
    jobs = philly_jobs(data / "traces" / "philly.csv", seed=2, count=20, arrival_window_s=7200.0)
    assert len(jobs) == 20 and jobs[0].arrival_s == 0.0
    assert jobs[-1].arrival_s == pytest.approx(7200.0)
    assert all(1 <= j.gpus <= 8 and 60.0 <= j.duration_s <= 3600.0 for j in jobs)
    # At load 0.5 on 16 GPUs the work arriving over the span is half of what 16 GPUs do.
    loaded = at_load(jobs, 16, 0.5)
    work = sum(j.gpus * j.duration_s for j in jobs)
    assert work / (loaded[-1].arrival_s * 16) == pytest.approx(0.5)
    assert [j.id for j in loaded] == [j.id for j in jobs] and loaded[0].arrival_s == 0.0
    with pytest.raises(ValueError, match="must be > 0"):
        at_load(jobs, 0, 0.5)


def _queue_wake_sim(prompts: int, queue_wake_s: float | None) -> tuple[MixedSimulation, Script]:
    """4 GPUs: prefill 1 awake + 2 asleep standbys nobody borrows, decode 1; `prompts` requests
    of 7,000 prompt tokens arrive at t=600.5 (a small one at 1,199 keeps the replay going);
    the controller always wants 1 prefill replica."""
    requests = (
        *(Request(i, 600.5, 7000, 2) for i in range(prompts)),
        Request(prompts, 1199.0, 10, 2),
    )
    sim, _ = simulation(borrow=True, standby=2, train_gpus=1)
    model = ServingModel(sim.serving[0].model.config, requests)
    script = Script(0.0, 0.0, 1)
    sim.serving[0] = ServingSpec("sj", model, script, {"prefill": 2})
    sim.jobs.clear()
    sim.s = replace(sim.s, period_s=5.0, horizon_s=1200.0, queue_wake_s=queue_wake_s)
    return sim, script


@pytest.mark.parametrize(("prompts", "woken"), [(20, 1), (40, 2)])
def test_the_request_driven_wake_wakes_what_the_queue_needs(prompts: int, woken: int) -> None:
    # One replica prefills 24,725 tokens/s: 123,625 tokens within the 5 s wake. At the check at
    # t=601 it has prefilled about 12,300 of the burst: 20 x 7,000 leaves ~127,700 (2 replicas
    # needed, wake 1), 40 x 7,000 ~267,700 (3 needed, wake both standbys).
    sim, script = _queue_wake_sim(prompts, queue_wake_s=1.0)
    result = sim.run()
    assert result.queue_wakes == woken
    # Woken at 601, ready at 606, seen by the controller (every 5 s) at 610, and held awake
    # for 300 s although the controller wants one replica all along.
    assert _first_ready(script, 1 + woken) == 610.0
    assert script.ready[900.0] == 1 + woken
    assert script.ready[1200.0] == 1


def test_without_the_request_driven_wake_the_standbys_sleep_on() -> None:
    sim, script = _queue_wake_sim(40, queue_wake_s=None)
    result = sim.run()
    assert result.queue_wakes == 0 and max(script.ready.values()) == 1


@pytest.mark.parametrize(("on_signal", "borrows"), [(False, False), (True, True)])
def test_lending_only_to_jobs_that_checkpoint_on_signal(on_signal: bool, borrows: bool) -> None:
    # 4 GPUs: prefill 1 awake + 2 asleep, decode 1: the 2-GPU job fits only on the lent GPUs.
    sim, _ = simulation(borrow=True, standby=2)
    sim.s = replace(sim.s, lend_on_signal_only=True)
    job = sim.jobs["job"]
    job.spec = replace(job.spec, on_signal=on_signal)
    result = sim.run()
    assert (result.lent_gpu_hours > 0) is borrows
    assert (job.completion_s is not None) is borrows


def test_a_job_that_checkpoints_on_signal_loses_no_run_time() -> None:
    # The burst from t=700, seen at the 15 s period's t=705, preempts the borrowing 2-GPU job
    # 105 s after its checkpoint at 600: 2 x 105 s unsaved plus the 2 x 60 s restart, or the
    # restart alone on signal.
    for on_signal, lost_gpu_s in ((False, 2 * 105 + 2 * 60), (True, 2 * 60)):
        sim, _ = simulation(borrow=True, standby=2)
        sim.serving[0].controller = Script(700.0, 900.0, 3)
        job = sim.jobs["job"]
        job.spec = replace(job.spec, on_signal=on_signal)
        sim.run()
        assert job.preemptions == 1
        assert job.lost_gpu_s == pytest.approx(lost_gpu_s)


def _first_ready(script: Script, replicas: int) -> float:
    return min(t for t, n in script.ready.items() if n >= replicas)


@pytest.mark.parametrize("exit_s", [0.0, 30.0, 45.0])
def test_a_woken_standby_waits_for_its_borrower_to_exit(exit_s: float) -> None:
    # The 2-GPU job borrows both asleep standbys' GPUs; the burst at t=600 wakes both, which
    # preempts it. The standbys are ready exit_s (the job's grace period) + wake_s (5 s) later;
    # the controller looks every 5 s, so it sees them at 600 + exit_s + 5 exactly.
    sim, model = simulation(borrow=True, standby=2)
    sim.s = replace(sim.s, period_s=5.0, exit_s=exit_s)
    script = Script(600.0, 900.0, 3)
    sim.serving[0].controller = script
    sim.run()
    assert _first_ready(script, 3) == 600.0 + exit_s + 5.0
    assert sim.jobs["job"].preemptions == 1
    assert len(model.replica_phases("prefill")) == 3  # woken, never cold-started


def test_a_standby_nobody_borrows_wakes_without_waiting() -> None:
    sim, _ = simulation(borrow=True, standby=2, train_gpus=1)
    sim.s = replace(sim.s, period_s=5.0, exit_s=30.0)
    script = Script(600.0, 900.0, 2)
    sim.serving[0].controller = script
    sim.run()
    assert _first_ready(script, 2) == 605.0  # the unborrowed standby: wake_s only
    assert sim.jobs["job"].preemptions == 0


@pytest.mark.parametrize("exit_s", [0.0, 30.0])
def test_a_new_replica_on_a_preempted_gpu_starts_after_the_exit(exit_s: float) -> None:
    # 3 GPUs: prefill 1 + decode 1, the 1-GPU job on the third. At t=600 the burst's second
    # prefill replica preempts it (no standbys): ready exit_s + cold start (60 s) later. The
    # job then waits; the burst ends at t=900 (the idle replica goes at once), the engine sees
    # its GPU free at the next tick (905), and the job restarts (60 s) there, nobody leaving it.
    sim, model = simulation(borrow=True, standby=0, gpus=3, train_gpus=1)
    sim.s = replace(sim.s, period_s=5.0, exit_s=exit_s)
    script = Script(600.0, 900.0, 2)
    sim.serving[0].controller = script
    sim.run()
    assert _first_ready(script, 2) == 600.0 + exit_s + 60.0
    job = sim.jobs["job"]
    assert job.preemptions == 1 and len(model.replica_phases("prefill")) == 2
    # 600 s run, 300 s checkpoints: nothing unsaved; the restart is lost. Placed at 905, 60 s
    # restart, 1200 s of work left.
    assert job.lost_gpu_s == pytest.approx(60.0)
    assert job.completion_s == pytest.approx(905.0 + 60.0 + 1200.0)


def test_training_placed_on_a_gpu_being_freed_starts_after_the_exit() -> None:
    sim, _ = simulation(borrow=True, standby=0, gpus=3, train_gpus=1)
    sim.s = replace(sim.s, exit_s=30.0)
    gpu = ("n0", 2)
    sim.now = 100.0
    sim.free_at[gpu] = 120.0
    assert sim._wait_s((gpu, ("n0", 1))) == 20.0
    sim.now = 130.0
    assert sim._wait_s((gpu,)) == 0.0 and sim._wait_s(()) == 0.0


def test_the_on_signal_share_is_seeded_and_exact() -> None:
    jobs = tuple(TrainingSpec(f"j{i}", float(i), 1, 60.0) for i in range(10))
    half = on_signal_share(jobs, 0.5, seed=3)
    assert sum(j.on_signal for j in half) == 5
    assert half == on_signal_share(jobs, 0.5, seed=3)
    assert [j.id for j in half] == [j.id for j in jobs]
    assert not any(j.on_signal for j in on_signal_share(jobs, 0.0, seed=3))
    with pytest.raises(ValueError, match="within"):
        on_signal_share(jobs, 1.5, seed=3)
