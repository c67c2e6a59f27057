"""From a ServingJob's spec to the pure policy's inputs: `AutoscalerSettings` and `ScalingInput`.

Pure mapping, no I/O. What the CRD says wins over the operator-wide defaults:

| CRD field | policy input |
|---|---|
| `slo.ttftP90Seconds`, `slo.itlP90Seconds` | `Slo` |
| pool `minReplicas` / `maxReplicas` (omitted max = min) | `PoolInput` bounds |
| `capacity.prefillTokensPerSecond` | `CapacityProfile.prefill_tokens_per_s` |
| `capacity.decodeBatchSize` | `decode_batch_at_slo` and `max_num_seqs` (the batch within ITL) |
| `capacity.decodeTokensPerSecond` | `decode_tokens_per_s` (a throughput floor for decode) |
| `capacity.gpuType` + pool `gpuTypes[].throughput` | the capacity scaled to the pool's GPU types |
| pool `gpusPerReplica` (a MIG slice counts as 1) | `gpus_per_replica` |
| `prometheus.staleAfterSeconds` | `staleness_s` |
| `scaleUp` / `scaleDown` `stabilizationWindowSeconds` | `scale_{up,down}_stabilization_s` |
| `scaleUp` / `scaleDown` `maxStep` | `scale_{up,down}_pods` per `intervalSeconds`, no percent |

`maxStep` is documented as "most replicas per decision", so the step period is one interval and
the policy's percentage rule (which could allow more) is switched off.

With `capacity.gpuType`, a replica on a type the pool lists with throughput `t` is worth
`t / t_ref` replicas of the measured type (`t_ref`, the pool's throughput for that type; a
factor of 1 where either is missing), and a pool's profile is scaled by the mean factor of its
running replicas' GPU types, or by its smallest factor while none runs: new replicas are then
assumed to land on the slowest listed type, so a pool is never sized for speed it may not get.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.core.autoscaling_settings import AutoscalerSettings
from gpufleet.core.autoscaling_types import (
    CapacityProfile,
    MetricsSample,
    PoolInput,
    PoolRole,
    ScalingInput,
    Slo,
)
from gpufleet.model.servingjob import AutoscalingPolicy, PoolSpec, ServingJobSpec
from gpufleet.model.servingjob import CapacityProfile as CapacitySpec

__all__ = [
    "PoolObservation",
    "capacity_factor",
    "capacity_profile",
    "enabled_policy",
    "policy_settings",
    "pool_role",
    "scaling_input",
    "slo",
]


@dataclass(frozen=True, slots=True)
class PoolObservation:
    """A pool as the cluster shows it: the Deployment's replicas, how many are ready, and the
    GPU type of each running replica (None where the scheduler recorded none)."""

    name: str
    current_replicas: int
    ready_replicas: int | None = None
    gpu_types: tuple[str | None, ...] = ()


def pool_role(pool: str) -> PoolRole:
    """`server` is a non-disaggregated pool (both phases)."""
    return PoolRole.of_pool(pool)


def enabled_policy(spec: ServingJobSpec) -> AutoscalingPolicy | None:
    """The autoscaling settings when autoscaling is on, else None (pools pinned at min)."""
    policy = spec.autoscaling
    if policy is None or not policy.enabled:
        return None
    return policy


def policy_settings(
    policy: AutoscalingPolicy, base: AutoscalerSettings | None = None
) -> AutoscalerSettings:
    """`base` (the operator-wide defaults) with the ServingJob's own damping and freshness."""
    base = base or AutoscalerSettings()
    overrides: dict[str, Any] = {
        "scale_up_stabilization_s": float(policy.scale_up.stabilization_window_seconds),
        "scale_down_stabilization_s": float(policy.scale_down.stabilization_window_seconds),
        "scale_up_pods": policy.scale_up.max_step,
        "scale_up_percent": 0.0,
        "scale_up_period_s": float(policy.interval_seconds),
        "scale_down_pods": policy.scale_down.max_step,
        "scale_down_percent": 0.0,
        "scale_down_period_s": float(policy.interval_seconds),
    }
    if policy.prometheus is not None:
        overrides["staleness_s"] = float(policy.prometheus.stale_after_seconds)
    # Validate the combination: the model is frozen and checks its bands on construction.
    return AutoscalerSettings.model_validate({**base.model_dump(), **overrides})


def slo(spec: ServingJobSpec) -> Slo:
    if spec.slo is None:
        raise ValueError("a ServingJob without slo cannot be autoscaled")
    return Slo(ttft_p90_s=spec.slo.ttft_p90_seconds, itl_p90_s=spec.slo.itl_p90_seconds)


def capacity_factor(
    capacity: CapacitySpec, pool: PoolSpec, running: Sequence[str | None] = ()
) -> float:
    """How much of the measured profile one replica of `pool` is worth (module docstring)."""
    if capacity.gpu_type is None:
        return 1.0
    throughput = {t.name: t.throughput for t in pool.gpu_types or ()}
    reference = throughput.get(capacity.gpu_type)

    def factor(gpu_type: str | None) -> float:
        t = throughput.get(gpu_type) if gpu_type is not None else None
        return t / reference if t is not None and reference is not None else 1.0

    if running:
        return sum(factor(t) for t in running) / len(running)
    return min((factor(t) for t in throughput), default=1.0)


def capacity_profile(
    capacity: CapacitySpec, pool: PoolSpec, factor: float = 1.0
) -> CapacityProfile:
    """What one replica of `pool` sustains, from the CRD's capacity fields times `factor`."""
    batch = max(1, math.floor(capacity.decode_batch_size * factor))
    tokens = capacity.decode_tokens_per_second
    return CapacityProfile(
        prefill_tokens_per_s=capacity.prefill_tokens_per_second * factor,
        max_num_seqs=batch,
        decode_batch_at_slo=batch,
        gpus_per_replica=pool.gpus_per_replica or 1,
        decode_tokens_per_s=None if tokens is None else tokens * factor,
    )


def scaling_input(
    spec: ServingJobSpec,
    now: float,
    observed: Mapping[str, PoolObservation],
    windows: Mapping[str, Sequence[MetricsSample]],
    policy: AutoscalingPolicy | None = None,
) -> ScalingInput:
    """One decision's input: every pool of `spec` (in POOL_NAMES order) with its window.

    A pool missing from `observed` has no Deployment yet and is left out (there is nothing to
    scale); a pool missing from `windows` gets an empty window, which the policy holds on.
    `policy` is `enabled_policy(spec)`, when the caller has it already.
    """
    policy = policy or enabled_policy(spec)
    if policy is None or policy.capacity is None:
        raise ValueError("autoscaling is disabled for this ServingJob")
    pools: list[PoolInput] = []
    for name, pool in spec.pools().items():
        seen = observed.get(name)
        if seen is None:
            continue
        high = pool.max_replicas if pool.max_replicas is not None else pool.min_replicas
        pools.append(
            PoolInput(
                name=name,
                role=pool_role(name),
                current_replicas=seen.current_replicas,
                min_replicas=pool.min_replicas,
                max_replicas=max(high, pool.min_replicas),
                capacity=capacity_profile(
                    policy.capacity,
                    pool,
                    capacity_factor(policy.capacity, pool, seen.gpu_types),
                ),
                window=tuple(windows.get(name, ())),
                ready_replicas=seen.ready_replicas,
            )
        )
    return ScalingInput(now=now, slo=slo(spec), pools=tuple(pools))
