"""gpufleet and the baselines of the mixed benchmark, on the same fleet and traces.

- `static`: serving fixed at the static peak (the partition), training on the rest;
- `hpa` (baseline b): Kubernetes HPA on running requests (serving.md §5, §6), 15 s sync, 60 s
  cold start; training on whatever is free; serving never preempts training;
- `gpufleet-no-borrow` (baseline c): gpufleet's policy, 15 s period, 60 s cold start, no
  standbys, no preemption of training;
- `gpufleet-no-standby` (an ablation): as baseline c, but serving preempts training;
- `gpufleet`: gpufleet's policy at `Fleet.period_s`, standbys up to the static peak (asleep,
  their GPUs lent to training, woken in `wake_s`), serving preempts training;
- `gpufleet-queue-wake` (a simulator-only what-if): `gpufleet` plus the request-driven wake
  (`MixedSettings.queue_wake_s`: the router checks its queue every `Fleet.queue_wake_s`);
- `gpufleet-wake-signal` (a what-if): `gpufleet-queue-wake` lending standbys' GPUs only to jobs
  that checkpoint on SIGTERM (`TrainingSpec.on_signal`).

Every variant starts its ServingJobs at the static peak (as if taking over a peak-provisioned
deployment) and places training with the same core (`place_with_lending`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpufleet.core.autoscaling import AutoscalerSettings, Slo
from gpufleet.core.autoscaling_estimators import decode_batch_at_slo
from gpufleet.core.autoscaling_types import PoolRole
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.model.gpus import Catalog
from gpufleet.model.inventory import Node
from gpufleet.sim.mixed.engine import MixedResult, MixedSettings, MixedSimulation, ServingSpec
from gpufleet.sim.mixed.workload import TrainingSpec
from gpufleet.sim.serving.hpa import HpaController
from gpufleet.sim.serving.model import PoolConfig, ServingConfig, ServingModel
from gpufleet.sim.serving.profiles import ReplicaProfile
from gpufleet.sim.serving.replay import (
    Controller,
    PolicyController,
    PoolBounds,
    StaticController,
)
from gpufleet.sim.serving.trace import Request

__all__ = ["VARIANTS", "Fleet", "Variant", "run_variant"]


@dataclass(frozen=True)
class Variant:
    """What a variant changes: its serving controller, whether its pools keep standbys (and
    lend their GPUs), whether serving preempts training, and its control period (None: the
    fleet's)."""

    controller: str  # "static", "hpa" or "gpufleet"
    standby: bool = False
    borrow: bool = False
    period_s: float | None = 15.0
    queue_wake: bool = False
    lend_on_signal_only: bool = False


VARIANTS: dict[str, Variant] = {
    "static": Variant("static"),
    "hpa": Variant("hpa"),
    "gpufleet-no-borrow": Variant("gpufleet"),
    "gpufleet-no-standby": Variant("gpufleet", borrow=True),
    "gpufleet": Variant("gpufleet", standby=True, borrow=True, period_s=None),
    "gpufleet-queue-wake": Variant(
        "gpufleet", standby=True, borrow=True, period_s=None, queue_wake=True
    ),
    "gpufleet-wake-signal": Variant(
        "gpufleet",
        standby=True,
        borrow=True,
        period_s=None,
        queue_wake=True,
        lend_on_signal_only=True,
    ),
}


@dataclass(frozen=True)
class Fleet:
    """What every variant shares: nodes, replica profile, SLOs, the static peak per pool."""

    catalog: Catalog
    nodes: tuple[Node, ...]
    profile: ReplicaProfile
    slo: Slo
    peak_prefill: int
    peak_decode: int
    cold_start_s: float = 60.0
    wake_s: float = 5.0
    period_s: float = 5.0  # gpufleet's control period (standbys wake in seconds)
    queue_wake_s: float = 1.0  # the request-driven wake's check interval (reaction delay)
    queue_wake_horizon_s: float | None = None  # its horizon (None: wake_s)


def _controller(
    kind: str, model: ServingModel, fleet: Fleet, requests: Sequence[Request]
) -> Controller:
    bounds = {
        "prefill": PoolBounds(1, 4 * fleet.peak_prefill),
        "decode": PoolBounds(1, 4 * fleet.peak_decode),
    }
    if kind == "static":
        return StaticController({"prefill": fleet.peak_prefill, "decode": fleet.peak_decode})
    if kind == "hpa":
        # As the autoscaler bench's baseline (b): prefill target 2 running requests (KServe's
        # example), decode 85 % of the batch one replica sustains within the ITL SLO.
        mean_ctx = sum(r.prompt_tokens + r.output_tokens / 2 for r in requests) / max(
            1, len(requests)
        )
        batch = decode_batch_at_slo(
            fleet.profile.capacity(),
            fleet.slo.itl_p90_s,
            fleet.slo.itl_p90_s,
            mean_ctx,
            AutoscalerSettings(),
        )
        return HpaController({"prefill": 2.0, "decode": max(1.0, 0.85 * batch)}, bounds)
    return PolicyController(model, fleet.slo, bounds, AutoscalerSettings())


def run_variant(
    variant: str | Variant,
    fleet: Fleet,
    training: Sequence[TrainingSpec],
    serving: Sequence[Sequence[Request]],
    settings: MixedSettings,
) -> MixedResult:
    """One replay of `variant` (a name of VARIANTS, module docstring, or a `Variant`) on the
    shared fleet and workload."""
    if isinstance(variant, str):
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; one of {', '.join(VARIANTS)}")
        variant = VARIANTS[variant]
    specs: list[ServingSpec] = []
    for i, requests in enumerate(serving):
        # Every variant starts awake at the peak; standbys form as the pools shrink.
        config = ServingConfig(
            prefill=PoolConfig("prefill", PoolRole.PREFILL, fleet.profile, fleet.peak_prefill),
            decode=PoolConfig("decode", PoolRole.DECODE, fleet.profile, fleet.peak_decode),
            cold_start_s=fleet.cold_start_s,
            wake_s=fleet.wake_s,
        )
        model = ServingModel(config, requests)
        standby = (
            {"prefill": fleet.peak_prefill - 1, "decode": fleet.peak_decode - 1}
            if variant.standby
            else {}
        )
        specs.append(
            ServingSpec(
                f"sj{i}", model, _controller(variant.controller, model, fleet, requests), standby
            )
        )
    policy = Policy(solver=SolverSettings(engine=Engine.GREEDY), allow_preemption=variant.borrow)
    period = fleet.period_s if variant.period_s is None else variant.period_s
    sim = MixedSimulation(
        fleet.catalog,
        fleet.nodes,
        training,
        specs,
        policy,
        replace(
            settings,
            period_s=period,
            queue_wake_s=fleet.queue_wake_s if variant.queue_wake else None,
            queue_wake_horizon_s=fleet.queue_wake_horizon_s,
            lend_on_signal_only=variant.lend_on_signal_only,
        ),
        lambda ttft, tpot: ttft <= fleet.slo.ttft_p90_s and tpot <= fleet.slo.itl_p90_s,
    )
    return sim.run()
