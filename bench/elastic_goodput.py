"""Goodput-aware elastic sizing against fixed sizes and greedy growth (issue 14 item 3).

Philly windows where every job is elastic as in Pollux's and Sia's evaluations: a job that
asked for g GPUs runs on anything from max(1, g // 2) to `--grow` x g (default 2) one-GPU
replicas, its work set so that at g GPUs it runs exactly as long as recorded (same-node wish
when the largest size fits a node). Replayed on one fleet by the balanced preset under five
ways of sizing the jobs; everything else is identical (the same jobs, seeds, engine, moves and
workload estimate). A job's true speed at r replicas follows its Gavel model class's scaling curve,
Amdahl's law fitted to Gavel's measured 1/2/4/8-GPU V100 throughputs
(`SpeedModel(fitted_scaling=True)`; data: `gavel_simulation_throughputs.json`, from
stanford-futuredata/gavel `scheduler/simulation_throughputs.json`): diminishing returns for every
class, from linear (ResNet-18 at most batch sizes) to 2.3x at 8 GPUs (ResNet-50 at batch 16).

* `goodput`: the owner states the profile's curve (`SimSettings.elastic_prior="profile"`, what
  `spec.elastic.scaling` carries live), refined from reported throughput; the simulator shows
  running jobs to the core as the live scheduler does (`SimPolicy.resize`), so the core grows
  them where the marginal goodput is highest and shrinks growth that adds less
  (core/rebalance.py).
* `goodput-learned`: the same with no stated curve (linear), refined only from what jobs report.
* `greedy`: the same resizing, but the core sees linear curves and never refines them: every job
  grows to its request wherever there is room, first come first served, and nothing is shrunk
  (a replica adds as much everywhere).
* `fixed-request`: every job rigid at its requested size (Philly as recorded).
* `fixed-min`: every job rigid at its minimum (running exactly as the elastic job would at
  that size).

No policy reads a job's length or a later arrival: the remaining-time estimates come from jobs
completed so far, the workload estimate from arrivals so far plus the 14 days before the window.
Reported per sample: average JCT of each variant and `goodput` / the strongest (lowest) of
`greedy`, `fixed-max` and `fixed-min`; over samples, the median and the worst.

    python bench/elastic_goodput.py --out bench-out/elastic          # 3 windows x 2 seeds
    python bench/elastic_goodput.py --windows 2017-10-02 --seeds 0 --jobs 200   # a quick look
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpufleet.core.policy import Engine
from gpufleet.model.fleet import FleetSpec, load_fleet
from gpufleet.sim.engine import SimSettings, Simulation
from gpufleet.sim.occupancy import SimCluster
from gpufleet.sim.policies import make_policy
from gpufleet.sim.results import summarise
from gpufleet.sim.runner import Workload, days_before, load_workload, with_history_prior
from gpufleet.sim.simulate_command import default_fleet_path
from gpufleet.sim.speed import SpeedModel
from gpufleet.sim.traces.common import TraceJob

VARIANTS = ("goodput", "goodput-learned", "greedy", "fixed-request", "fixed-min")
BASELINES = ("greedy", "fixed-request", "fixed-min")
WINDOWS = ("2017-10-02", "2017-11-06", "2017-12-04")


def fitted_speed(fleet: FleetSpec, work: Workload) -> SpeedModel:
    per_node: dict[str, int] = {}
    for pool in fleet.node_pools:
        per_node[pool.gpu_type] = max(per_node.get(pool.gpu_type, 0), pool.gpus_per_node)
    return SpeedModel(work.catalog, work.profile, per_node, fitted_scaling=True)


def elastic(job: TraceJob, speed: SpeedModel, grow: int) -> TraceJob:
    """The job elastic from half its GPUs to `grow` times them, as long at its request."""
    asked = job.replicas
    top, low = asked * grow, max(1, asked // 2)
    if top == low:
        return job
    wide = replace(job, replicas=top, min_replicas=low, same_node=1 < top <= 8)
    curve = speed.scaling(wide)
    return replace(wide, work_s=job.work_s * curve[asked - 1] / curve[top - 1])


def at_minimum(job: TraceJob, speed: SpeedModel) -> TraceJob:
    """An elastic job made rigid at its minimum, running as the elastic job does at that size."""
    if job.min_replicas is None:
        return job
    curve = speed.scaling(job)
    low = job.min_replicas
    work = job.work_s * curve[-1] / curve[low - 1]
    return replace(job, replicas=low, min_replicas=None, work_s=work)


def run_variant(
    variant: str,
    fleet: FleetSpec,
    work: Workload,
    jobs: Sequence[TraceJob],
    settings: SimSettings,
    seed: int,
    engine: Engine,
    grow: int,
) -> dict[str, float]:
    speed = fitted_speed(fleet, work)
    if variant == "fixed-request":
        pass  # as recorded
    elif variant == "fixed-min":
        jobs = [at_minimum(elastic(j, speed, grow), speed) for j in jobs]
    else:
        jobs = [elastic(j, speed, grow) for j in jobs]
    if variant == "goodput":
        settings = replace(settings, elastic_prior="profile")
    elif variant == "greedy":
        settings = replace(settings, refine_curves=False)
    holder: list[Simulation] = []

    def clock() -> float:
        return holder[0].now if holder else 0.0

    policy = make_policy("balanced", clock, engine=engine, seed=seed)
    sim = Simulation(SimCluster(fleet, work.catalog), list(jobs), policy, speed, settings)
    holder.append(sim)
    summary = summarise(sim.run())
    keep = ("avg_jct_h", "median_jct_h", "avg_queueing_h", "makespan_h", "preemptions", "moves")
    out = {k: float(summary[k]) for k in keep}
    out["resizes"] = float(summary["resizes"])
    out["completed"] = float(summary["completed"])
    return out


def run_sample(
    window: str, seed: int, fleet_name: str, jobs: int, load: float, engine: Engine, grow: int
) -> dict[str, Any]:
    fleet = load_fleet(default_fleet_path(fleet_name))
    work = load_workload(
        "philly",
        fleet,
        jobs=jobs,
        seed=seed,
        window=window,
        arrival_speedup=load,
    )
    past = load_workload("philly", fleet, jobs=None, seed=seed, window=days_before(window)).jobs
    speed = fitted_speed(fleet, work)
    settings = with_history_prior(SimSettings(), past, fleet, work.catalog, speed)
    runs: dict[str, dict[str, float]] = {}
    for variant in VARIANTS:
        t0 = time.perf_counter()
        runs[variant] = run_variant(variant, fleet, work, work.jobs, settings, seed, engine, grow)
        runs[variant]["wall_s"] = time.perf_counter() - t0
    strongest = min(BASELINES, key=lambda v: runs[v]["avg_jct_h"])
    return {
        "window": window,
        "seed": seed,
        "fleet": fleet_name,
        "jobs": len(work.jobs),
        "grow": grow,
        "runs": runs,
        "strongest": strongest,
        "ratio": runs["goodput"]["avg_jct_h"] / runs[strongest]["avg_jct_h"],
        "learned_ratio": runs["goodput-learned"]["avg_jct_h"] / runs[strongest]["avg_jct_h"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", default=",".join(WINDOWS))
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--fleet", default="hetero-mix-b.yaml")
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--load", type=float, default=16.0)
    parser.add_argument("--engine", choices=[e.value for e in Engine], default="greedy")
    parser.add_argument("--grow", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    samples: list[dict[str, Any]] = []
    out_file = None
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        out_file = args.out / "samples.jsonl"
    for seed in (int(s) for s in args.seeds.split(",")):
        for window in args.windows.split(","):
            sample = run_sample(
                window, seed, args.fleet, args.jobs, args.load, Engine(args.engine), args.grow
            )
            samples.append(sample)
            line = json.dumps(sample)
            print(line, flush=True)
            if out_file is not None:
                with out_file.open("a") as fh:
                    fh.write(line + "\n")
    ratios = [s["ratio"] for s in samples]
    learned = [s["learned_ratio"] for s in samples]
    print(
        json.dumps(
            {
                "samples": len(samples),
                "goodput_vs_strongest": {
                    "median": statistics.median(ratios),
                    "worst": max(ratios),
                    "best": min(ratios),
                },
                "learned_vs_strongest": {
                    "median": statistics.median(learned),
                    "worst": max(learned),
                    "best": min(learned),
                },
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
