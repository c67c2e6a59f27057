"""Pure estimators behind the P/D autoscaling policy: demand, capacity at SLO, forecast, feedback.

Units are replica-independent where possible: prefill demand is prompt tokens per second, decode
demand is concurrent sequences (Little's law), and each is turned into replicas by dividing by
what one replica sustains within the SLO. Nothing here reads a clock or keeps state.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.core.autoscaling_settings import AutoscalerSettings
from gpufleet.core.autoscaling_types import CapacityProfile, MetricsSample, Slo

__all__ = [
    "DemandPoint",
    "check_slo",
    "decode_batch_at_slo",
    "decode_itl",
    "decode_point",
    "fresh_samples",
    "linear_forecast",
    "prefill_point",
    "prefill_utilization_ceiling",
    "update_correction",
]

# A replica-count below this is treated as zero demand (floating-point noise from rates).
_EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class DemandPoint:
    """Demand of one sample in the pool's unit, split into the steady and the backlog part."""

    time: float
    steady: float
    backlog: float

    @property
    def total(self) -> float:
        return self.steady + self.backlog


def fresh_samples(
    window: Sequence[MetricsSample], now: float, settings: AutoscalerSettings
) -> tuple[MetricsSample, ...]:
    """Samples inside `(now - window_s, now]`, oldest first; future-dated samples are dropped."""
    lo = now - settings.window_s
    kept = [s for s in window if lo < s.timestamp <= now]
    kept.sort(key=lambda s: s.timestamp)
    return tuple(kept)


def _mean_tokens(total_rate: float | None, request_rate: float | None) -> float:
    """Mean tokens per request from a token rate and a request rate (0 if unknown)."""
    if total_rate is None or request_rate is None or request_rate <= _EPSILON:
        return 0.0
    return total_rate / request_rate


def prefill_point(
    sample: MetricsSample, isl: float, settings: AutoscalerSettings
) -> DemandPoint | None:
    """Prefill demand in prompt tokens/s: the token rate plus the queue drained over time.

    Waiting requests are converted to tokens with `isl`, the window's mean prompt length,
    following serving.md §9 rule 1 (waiting queue as a leading term). `None` if the rate is
    missing.
    """
    if sample.prompt_token_rate is None:
        return None
    waiting = sample.num_waiting or 0.0
    backlog = waiting * isl / settings.backlog_drain_s
    return DemandPoint(sample.timestamp, max(0.0, sample.prompt_token_rate), backlog)


def decode_itl(capacity: CapacityProfile, batch: float, ctx_tokens: float) -> float:
    """Modelled inter-token latency of one decode replica running `batch` sequences."""
    slope = capacity.decode_itl_per_seq_s + capacity.decode_itl_per_ctx_token_s * ctx_tokens
    return capacity.decode_itl_base_s + batch * slope


def decode_batch_at_slo(
    capacity: CapacityProfile,
    itl_target_s: float,
    itl_slo_s: float,
    ctx_tokens: float,
    settings: AutoscalerSettings,
) -> int:
    """Largest batch a decode replica runs with ITL <= target and KV usage <= kv_target_usage.

    Inverts `itl(b) = base + b * slope` (llm-d queueing analyzer form) and bounds it by
    `max_num_seqs` and by the KV cache (Dynamo: kv_usage = concurrency x ctx / max_kv_tokens).
    A profiled `decode_batch_at_slo` replaces the inversion, scaled by target/SLO when the
    feedback tightened the target. Never less than one: a replica always makes progress.
    """
    if capacity.decode_batch_at_slo is not None:
        by_itl = math.floor(capacity.decode_batch_at_slo * itl_target_s / itl_slo_s + _EPSILON)
    else:
        slope = capacity.decode_itl_per_seq_s + capacity.decode_itl_per_ctx_token_s * ctx_tokens
        headroom = itl_target_s - capacity.decode_itl_base_s
        by_itl = math.floor(headroom / slope) if slope > 0 else capacity.max_num_seqs
    by_kv = capacity.max_num_seqs
    if capacity.kv_cache_tokens is not None and ctx_tokens > 0:
        by_kv = math.floor(settings.kv_target_usage * capacity.kv_cache_tokens / ctx_tokens)
    return max(1, min(by_itl, by_kv, capacity.max_num_seqs))


def decode_point(
    sample: MetricsSample,
    capacity: CapacityProfile,
    itl_target_s: float,
    itl_slo_s: float,
    window_isl: float,
    window_osl: float,
    settings: AutoscalerSettings,
) -> tuple[DemandPoint, int] | None:
    """Decode demand in concurrent sequences and the per-replica batch that meets the ITL target.

    Little's law: concurrency = generated-token rate x time per token, evaluated at the ITL the
    replicas would run at when sized to the SLO batch. The observed running count is a floor
    (it is the concurrency actually in flight, larger when decode is already slow); waiting
    sequences are backlog. `None` if the generation rate is missing.
    """
    if sample.generation_token_rate is None:
        return None
    # Per-sample lengths when the sample saw requests, else the window's means.
    isl = _mean_tokens(sample.prompt_token_rate, sample.request_rate) or window_isl
    osl = _mean_tokens(sample.generation_token_rate, sample.request_rate) or window_osl
    ctx = isl + osl / 2.0  # Dynamo's decode context length (serving.md §2.2)
    batch = decode_batch_at_slo(capacity, itl_target_s, itl_slo_s, ctx, settings)
    # Time per token at that batch; with only a profiled batch, the target itself (worst case).
    per_token = (
        itl_target_s
        if capacity.decode_batch_at_slo is not None
        else decode_itl(capacity, batch, ctx)
    )
    littles = max(0.0, sample.generation_token_rate) * per_token
    running = sample.num_running or 0.0
    steady = max(littles, running)
    waiting = sample.num_waiting or 0.0
    return DemandPoint(sample.timestamp, steady, waiting), batch


def prefill_utilization_ceiling(
    mean_service_s: float, ttft_slo_s: float, settings: AutoscalerSettings
) -> float:
    """Highest prefill utilization whose queueing keeps the TTFT quantile within the SLO.

    DistServe models a prefill instance as M/D/1 (serving.md §7): mean wait
    `W = rho * s / (2 (1 - rho))` for service time `s`. Requiring
    `s + tail_factor * W <= SLO` gives `rho <= 2B / (s + 2B)` with
    `B = (SLO - s) / tail_factor`. The result is capped by `target_utilization` and
    floored at `utilization_floor_ratio` of it. An SLO the mean service time alone misses gets
    `target_utilization`: no replica count meets it, so the pool is sized for throughput
    instead of growing without bound (the trap of Dynamo's latency-ratio floor, serving.md §2.3).
    """
    cap = settings.target_utilization
    if mean_service_s <= 0:
        return cap
    budget = (ttft_slo_s - mean_service_s) / settings.tail_factor
    if budget <= 0:
        return cap  # infeasible by service time alone: size for throughput, do not chase it
    rho = 2.0 * budget / (mean_service_s + 2.0 * budget)
    return max(cap * settings.utilization_floor_ratio, min(cap, rho))


def linear_forecast(
    points: Sequence[tuple[float, float]], at: float, settings: AutoscalerSettings
) -> float | None:
    """Least-squares line through `(time, value)` evaluated at `at`, clamped to [0, k x mean].

    The clamp (k = forecast_max_mean_ratio) follows AIBrix's predictive mode (serving.md §4).
    `None` with fewer than `forecast_min_samples` points or no spread in time.
    """
    if len(points) < settings.forecast_min_samples:
        return None
    n = float(len(points))
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var_t = sum((t - mean_t) ** 2 for t, _ in points)
    if var_t <= _EPSILON:
        return None
    cov = sum((t - mean_t) * (v - mean_v) for t, v in points)
    slope = cov / var_t
    value = mean_v + slope * (at - mean_t)
    return min(max(0.0, value), settings.forecast_max_mean_ratio * mean_v)


def update_correction(
    correction: float,
    observed_p90_s: float | None,
    slo_s: float,
    own_s: float,
    elapsed_s: float,
    settings: AutoscalerSettings,
) -> float:
    """Next value of a latency correction factor (>= 1) from one observed p90 latency.

    A violation (observed > SLO x (1 + tolerance)) multiplies the correction by
    `min(q, feedback_max_step) ** feedback_gain`, where `q` is the queueing part of the latency
    (`observed - own_s`) over the SLO budget left after the own time; a healthy latency
    (observed < SLO x latency_healthy_ratio) lets it decay toward 1 with
    `feedback_half_life_s`; in between it is kept. An SLO the own time alone misses leaves the
    correction alone (more replicas would not help). The correction scales per-replica capacity
    down (prefill) or the decode ITL headroom down, the way Dynamo's SLA planner applies its
    correction factors (serving.md §2.2).
    """
    if observed_p90_s is None or slo_s <= own_s:
        return correction
    ratio = observed_p90_s / slo_s
    if ratio > 1.0 + settings.latency_tolerance:
        queue_ratio = max(0.0, observed_p90_s - own_s) / (slo_s - own_s)
        step = math.pow(
            min(max(queue_ratio, 1.0), settings.feedback_max_step), settings.feedback_gain
        )
        return min(settings.feedback_max_correction, correction * step)
    if ratio < settings.latency_healthy_ratio and elapsed_s > 0:
        decay = math.pow(0.5, elapsed_s / settings.feedback_half_life_s)
        return max(1.0, 1.0 + (correction - 1.0) * decay)
    return correction


def check_slo(slo: Slo) -> None:
    """Reject SLOs the policy cannot divide by."""
    if slo.ttft_p90_s <= 0 or slo.itl_p90_s <= 0:
        raise ValueError(f"SLOs must be positive, got {slo}")
