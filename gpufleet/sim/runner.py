"""Glue between traces, fleets and the engine: one call runs one policy on one workload.

`load_workload` drops (and records, see `gpufleet.sim.holdable`) the jobs the fleet could never
hold; `sim_pool_check` is the simulator's check of a fleet file's pools (`load_fleet(check=)`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

from gpufleet.core.policy import Engine, TypeDelay
from gpufleet.core.workload import ArrivalCounts, WorkloadEstimate
from gpufleet.model.fleet import FleetSpec, NodePoolSpec, PoolCheck
from gpufleet.model.gpus import Catalog, load_catalog
from gpufleet.model.input_error import InputError
from gpufleet.sim.engine import SimSettings, Simulation, gang_for_job
from gpufleet.sim.gavel_profiles import GavelProfile
from gpufleet.sim.holdable import DroppedJob, why_unholdable
from gpufleet.sim.occupancy import SimCluster, initial_layout
from gpufleet.sim.policies import make_policy
from gpufleet.sim.results import SimResult
from gpufleet.sim.speed import SpeedModel
from gpufleet.sim.traces.alibaba import load_alibaba_pods, parse_seconds_window
from gpufleet.sim.traces.common import TraceJob, default_data_dir
from gpufleet.sim.traces.philly import load_philly

__all__ = [
    "ALIBABA_TYPE_MAP",
    "Workload",
    "days_before",
    "history_estimate",
    "load_workload",
    "run_policy",
    "sim_pool_check",
    "speed_model",
    "with_history_prior",
]

# Alibaba GPU models -> catalogue types. T4, A10 and V100 map to themselves (the catalogue has
# one V100, the 32 GB part); P100 has no catalogue entry and maps to V100-32GB (Gavel's P100 is
# within 6 % of V100 on its geomean, data.md §4). G2/G3 are undisclosed: we assume A100-80GB and
# H100-80GB class parts, MIG-capable, which is what lets fractional pods use MIG slices.
ALIBABA_TYPE_MAP: dict[str, str] = {
    "T4": "T4",
    "A10": "A10",
    "P100": "V100-32GB",
    "V100M16": "V100-32GB",
    "V100M32": "V100-32GB",
    "G2": "A100-80GB",
    "G3": "H100-80GB",
}


@dataclass(frozen=True)
class Workload:
    """A trace slice plus what is needed to simulate it, and the jobs left out of it."""

    trace: str
    jobs: list[TraceJob]
    profile: GavelProfile
    catalog: Catalog
    dropped: tuple[DroppedJob, ...] = ()


def sim_pool_check(catalog: Catalog) -> PoolCheck:
    """The simulator's check of a fleet pool: a catalogue type, and a MIG layout it can build."""

    def check(pool: NodePoolSpec) -> None:
        if pool.gpu_type not in catalog:
            raise InputError(
                f"unknown GPU type {pool.gpu_type!r}; known: {', '.join(catalog.names)}",
                field="gpuType",
            )
        if pool.mig is not None:
            try:
                initial_layout(catalog[pool.gpu_type], pool.mig.config)
            except ValueError as exc:
                raise InputError(str(exc), field="mig.config") from None

    return check


def _speed_model(fleet: FleetSpec, catalog: Catalog, profile: GavelProfile) -> SpeedModel:
    per_node: dict[str, int] = {}
    for pool in fleet.node_pools:
        per_node[pool.gpu_type] = max(per_node.get(pool.gpu_type, 0), pool.gpus_per_node)
    return SpeedModel(catalog, profile, per_node)


def load_workload(
    trace: str,
    fleet: FleetSpec,
    *,
    jobs: int | None,
    seed: int,
    window: str | None = None,
    arrival_speedup: float = 1.0,
    data_dir: Path | None = None,
    variant: str = "gpuspec10",
    elastic_fraction: float = 0.0,
) -> Workload:
    """Load `philly` or `alibaba` jobs; jobs the fleet could never hold are dropped.

    `jobs` counts the jobs kept; the dropped ones are listed in `Workload.dropped`. Bad trace
    or profile files raise `InputError`.
    """
    data = data_dir or default_data_dir()
    profile = GavelProfile.load(data / "profiles" / "gavel_simulation_throughputs.json")
    catalog = load_catalog()
    speed = _speed_model(fleet, catalog, profile)
    fleet_types = [catalog[n] for n in sorted({p.gpu_type for p in fleet.node_pools})]
    dropped: list[DroppedJob] = []

    def holdable(job: TraceJob) -> bool:
        reason = why_unholdable(gang_for_job(job, fleet_types, speed), fleet, catalog)
        if reason is not None:
            dropped.append(DroppedJob(job.job_id, job.gpu_share, reason))
        return reason is None

    if trace == "philly":
        loaded = load_philly(
            data / "traces" / "philly.csv",
            profile,
            jobs=jobs,
            seed=seed,
            window=window,
            arrival_speedup=arrival_speedup,
            elastic_fraction=elastic_fraction,
            keep=holdable,
        )
    elif trace == "alibaba":
        loaded = load_alibaba_pods(
            data / "traces" / "alibaba-gpu-2023",
            profile,
            variant=variant,
            jobs=jobs,
            seed=seed,
            window=parse_seconds_window(window),
            arrival_speedup=arrival_speedup,
            type_map=ALIBABA_TYPE_MAP,
            keep=holdable,
        )
    else:
        raise ValueError(f"unknown trace {trace!r}; choose philly or alibaba")
    return Workload(trace, loaded, profile, catalog, tuple(dropped))


def history_estimate(
    jobs: Sequence[TraceJob], fleet: FleetSpec, catalog: Catalog, speed: SpeedModel
) -> WorkloadEstimate:
    """The workload estimate a list of past jobs gives (every job counted, no decay), for a
    prior from history: the shapes of their gangs on this fleet's types."""
    types = [catalog[t] for t in sorted({p.gpu_type for p in fleet.node_pools})]
    counts = ArrivalCounts(window=math.inf)
    return counts.observed_gangs(gang_for_job(j, types, speed) for j in jobs).estimate()


def with_history_prior(
    settings: SimSettings,
    past: Sequence[TraceJob],
    fleet: FleetSpec,
    catalog: Catalog,
    speed: SpeedModel,
) -> SimSettings:
    """`settings` with the workload estimate's prior taken from the `past` jobs (those before
    the replayed ones), weighing as many tasks as they are, at most the estimate's window;
    `settings` as they are without past jobs."""
    if not past:
        return settings
    prior = history_estimate(past, fleet, catalog, speed)
    tasks = float(min(len(past), settings.workload_window))
    return replace(settings, workload_prior=prior, workload_prior_tasks=tasks)


def days_before(start: str, days: int = 14) -> str:
    """The trace window (`begin,end`) of the `days` days before `start` (ISO date or time), for
    the history of a replay that starts there."""
    begin = datetime.fromisoformat(start)
    return f"{(begin - timedelta(days=days)).isoformat()},{begin.isoformat()}"


def speed_model(fleet: FleetSpec, workload: Workload) -> SpeedModel:
    """The speed model of a workload on a fleet (largest node per type decides spreading)."""
    return _speed_model(fleet, workload.catalog, workload.profile)


def run_policy(
    name: str,
    fleet: FleetSpec,
    workload: Workload,
    *,
    seed: int = 0,
    engine: Engine = Engine.CPSAT,
    settings: SimSettings | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    jobs: Sequence[TraceJob] | None = None,
    type_delay: TypeDelay | None = None,
    weights: Mapping[str, float] | None = None,
) -> SimResult:
    """Simulate one named policy on a fresh cluster built from `fleet`."""
    cluster = SimCluster(fleet, workload.catalog)
    speed = speed_model(fleet, workload)
    holder: list[Simulation] = []

    def clock() -> float:
        return holder[0].now if holder else 0.0

    policy = make_policy(
        name, clock, engine=engine, seed=seed, type_delay=type_delay, weights=weights
    )
    sim = Simulation(
        cluster,
        list(jobs if jobs is not None else workload.jobs),
        policy,
        speed,
        settings,
        on_progress,
    )
    holder.append(sim)
    return sim.run()
