"""Replays with tenants: the policies compared on queues, and one call that runs and scores one.

Policies, all with the engine's call shape `place(snapshot, pending, policy) -> Decision` and
the same snapshot (with the tenants' `QueueTree`):

* `gpufleet` - the core `place` with the `balanced` preset: the same quotas, borrowing,
  reclaim and heterogeneity-aware fair share (with aging) the live scheduler runs;
* `kueue` - `gpufleet.sim.kueue_like.KueueLikePolicy` (nominal quotas + borrowing, FIFO per
  queue, heterogeneity-blind flavors, reclaim);
* `gavel-tenants` - `gpufleet.sim.baselines.GavelTenantPolicy` (Gavel-style weighted max-min
  across tenants in effective throughput, re-decided every 360 s round, no quotas).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import (
    SERVICE_TIER_GPU_S,
    Engine,
    Policy,
    RequeueTimestamp,
    SolverSettings,
    TypeDelay,
)
from gpufleet.core.presets import preset_policy
from gpufleet.model.fleet import FleetSpec
from gpufleet.sim.baselines import GavelTenantPolicy
from gpufleet.sim.checked import CheckedPlace
from gpufleet.sim.engine import SimPolicy, SimSettings, Simulation
from gpufleet.sim.kueue_like import KueueLikePolicy
from gpufleet.sim.occupancy import SimCluster
from gpufleet.sim.policies import ROUND_S
from gpufleet.sim.results import SimResult
from gpufleet.sim.runner import Workload, speed_model
from gpufleet.sim.tenant_metrics import IdleMonitor, QuotaMonitor, TenantReport, tenant_report
from gpufleet.sim.tenants import TenantSetup, fleet_gpus_by_type
from gpufleet.sim.usable_idle import DecisionTap, UsableIdleMonitor

__all__ = ["TENANT_POLICIES", "TenantRun", "make_tenant_policy", "run_tenants"]

TENANT_POLICIES: tuple[str, ...] = ("gpufleet", "kueue", "gavel-tenants")


def make_tenant_policy(
    name: str,
    clock: SimClock,
    *,
    engine: Engine = Engine.GREEDY,
    seed: int = 0,
    type_delay: TypeDelay | None = None,
    aging_s: float | None = None,
    service_tier_gpu_s: float | None = SERVICE_TIER_GPU_S,
    requeue_timestamp: RequeueTimestamp | None = None,
    tier_rerun_s: float | None = None,
) -> SimPolicy:
    """A policy of `TENANT_POLICIES`. For gpufleet only: `engine` and `seed` are the core's
    solver settings, `type_delay` its delay scheduling across GPU types (off by default),
    `aging_s` its queue aging (`Policy.queue_aging_s`, 1 h by default) and
    `service_tier_gpu_s` its service tier's threshold (`Policy.service_tier_gpu_s`, the core's
    default; None: no tier) and `requeue_timestamp` where an evicted gang goes back in line
    (`Policy.requeue_timestamp`; None: the core's default), `tier_rerun_s` the tier's limit
    on re-evictions (`Policy.service_tier_rerun_s`; None: the core's default). The Kueue-like
    baseline always requeues by eviction, Kueue's default
    (`waitForPodsReady.requeuingStrategy.timestamp`)."""
    if name == "gpufleet":
        solver = SolverSettings(engine=engine, seed=seed)
        policy = preset_policy("balanced", solver, type_delay)
        policy = replace(policy, service_tier_gpu_s=service_tier_gpu_s)
        if aging_s is not None:
            policy = replace(policy, queue_aging_s=aging_s)
        if requeue_timestamp is not None:
            policy = replace(policy, requeue_timestamp=requeue_timestamp)
        if tier_rerun_s is not None:
            policy = replace(policy, service_tier_rerun_s=tier_rerun_s)
        return SimPolicy(name=name, place=place, policy=policy)
    if name == "kueue":
        kueue = Policy(requeue_timestamp=RequeueTimestamp.EVICTION)
        return SimPolicy(name=name, place=KueueLikePolicy(), policy=kueue)
    if name == "gavel-tenants":
        return SimPolicy(name=name, place=GavelTenantPolicy(clock), round_s=ROUND_S)
    raise ValueError(f"unknown tenant policy {name!r}; choose from {', '.join(TENANT_POLICIES)}")


class SimClock:
    """The simulation's clock, for the round-based baselines (set once the engine exists)."""

    def __init__(self) -> None:
        self.sim: Simulation | None = None

    def __call__(self) -> float:
        return self.sim.now if self.sim is not None else 0.0


@dataclass(frozen=True)
class TenantRun:
    """One policy's replay with tenants: the raw result and its per-tenant report."""

    result: SimResult
    report: TenantReport
    checked: CheckedPlace | None = None  # the validator's count (run_tenants' `validate`)


def run_tenants(
    name: str,
    fleet: FleetSpec,
    workload: Workload,
    setup: TenantSetup,
    *,
    engine: Engine = Engine.GREEDY,
    seed: int = 0,
    settings: SimSettings | None = None,
    type_delay: TypeDelay | None = None,
    aging_s: float | None = None,
    service_tier_gpu_s: float | None = SERVICE_TIER_GPU_S,
    requeue_timestamp: RequeueTimestamp | None = None,
    tier_rerun_s: float | None = None,
    validate: bool = False,
) -> TenantRun:
    """Replay `workload` with `setup`'s queues under the named policy and score it (the
    gpufleet-only settings as `make_tenant_policy` takes them). With `validate`, each of
    gpufleet's decisions is checked by the core's validator as it is made (`checked`)."""
    cluster = SimCluster(fleet, workload.catalog)
    speed = speed_model(fleet, workload)
    clock = SimClock()
    policy = make_tenant_policy(
        name,
        clock,
        engine=engine,
        seed=seed,
        type_delay=type_delay,
        aging_s=aging_s,
        service_tier_gpu_s=service_tier_gpu_s,
        requeue_timestamp=requeue_timestamp,
        tier_rerun_s=tier_rerun_s,
    )
    checked = CheckedPlace(policy.place) if validate and name == "gpufleet" else None
    if checked is not None:
        policy = replace(policy, place=checked)
    monitor = QuotaMonitor(setup.tree)
    sim_settings = replace(settings or SimSettings(), queues=setup.tree)
    node_gpus: dict[str, int] = {}
    for pool in fleet.node_pools:
        node_gpus[pool.gpu_type] = max(node_gpus.get(pool.gpu_type, 0), pool.gpus_per_node)
    demand = IdleMonitor(node_gpus)
    # The usable idle GPUs and, through the tap on its decisions, why the policy left them.
    tap = DecisionTap(policy.place)
    policy = replace(policy, place=tap)
    usable = UsableIdleMonitor(
        cluster,
        setup.tree,
        tap,
        aging_s=policy.policy.queue_aging_s if name == "gpufleet" else None,
        until=max((j.arrival_s for j in workload.jobs), default=0.0),
    )

    def watch(
        now: float, idle: Mapping[str, Sequence[int]], waiting: Sequence[Gang], decided: bool
    ) -> None:
        demand(now, idle, waiting, decided)
        usable(now, idle, waiting, decided)

    sim = Simulation(
        cluster, workload.jobs, policy, speed, sim_settings, on_cycle=monitor, on_event=watch
    )
    clock.sim = sim
    result = sim.run()
    fleet_gpus = fleet_gpus_by_type(fleet)
    report = tenant_report(
        result, workload.jobs, speed, fleet_gpus, monitor, setup.shares, demand, usable
    )
    return TenantRun(result, report, checked)
