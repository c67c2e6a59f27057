"""Pure prefill/decode autoscaling policy: a metrics window in, desired replicas per pool out.

`decide(inputs, state, settings)` is the whole policy. Per pool it:

1. **Checks the data.** No samples, a newest sample older than `staleness_s`, or a missing
   demand metric -> hold at the current count (clamped to the bounds, never below one): the
   policy never scales down, and never to zero, on data it cannot trust.
2. **Sizes by capacity.** Prefill: prompt-token arrival rate plus queued tokens over
   per-replica prefill throughput, at a utilization whose M/D/1 queueing keeps TTFT p90 within
   the SLO. Decode: concurrency by Little's law (generated-token rate x time per token) over the
   batch a replica sustains within the ITL SLO and the KV-cache budget.
3. **Corrects by feedback.** Observed TTFT/ITL p90 against the SLO updates a correction factor
   carried in the state (learned headroom for what the capacity model misses, e.g. sub-scrape
   bursts), and a violation raises an immediate latency guard (at most `latency_max_step`
   times the ready replicas per scrape, and `latency_max_demand_ratio` times the window's
   largest capacity need, so latency that replicas do not fix cannot run the pool to its max).
4. **Remembers bursts.** Each scrape's latency need is held for `burst_hold_s` and then
   released with a half-life, as a floor (the burst reserve).
5. **Forecasts.** A least-squares line over the window, `forecast_horizon_s` ahead, and the
   pool's own history (Holt-Winters over per-bucket demand peaks with a daily season,
   autoscaling_forecast.py) are floors so capacity is requested before the queue builds; they
   never cause a scale-down.
6. **Damps.** Hysteresis between the scale-up and scale-down utilizations, HPA-style
   stabilization windows over recommendation history (fast up, slow down), step limits per
   period, then `min`/`max` bounds.

The state (`AutoscalerState`) is an explicit immutable value: pass in what the previous call
returned (or `AutoscalerState()` at start) and keep what this call returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gpufleet.core.autoscaling_estimators import (
    DemandPoint,
    check_slo,
    decode_point,
    fresh_samples,
    linear_forecast,
    prefill_point,
    prefill_utilization_ceiling,
    update_correction,
)
from gpufleet.core.autoscaling_forecast import SeasonalState, observe_demand, seasonal_forecast
from gpufleet.core.autoscaling_settings import AutoscalerSettings
from gpufleet.core.autoscaling_types import (
    AutoscalerState,
    CapacityProfile,
    LatencyQuantiles,
    MetricsSample,
    PoolDecision,
    PoolInput,
    PoolRole,
    PoolState,
    ScaleEvent,
    ScalingDecision,
    ScalingInput,
    ScalingReason,
    Sizing,
    Slo,
)

__all__ = [
    "AutoscalerSettings",
    "AutoscalerState",
    "CapacityProfile",
    "LatencyQuantiles",
    "MetricsSample",
    "PoolDecision",
    "PoolInput",
    "PoolRole",
    "PoolState",
    "ScaleEvent",
    "ScalingDecision",
    "ScalingInput",
    "ScalingReason",
    "Sizing",
    "Slo",
    "decide",
]

_EPS = 1e-9
# A decayed peak need below this many replicas is forgotten (it can no longer hold one).
_PEAK_FLOOR = 0.05


def decide(
    inputs: ScalingInput,
    state: AutoscalerState,
    settings: AutoscalerSettings | None = None,
) -> tuple[ScalingDecision, AutoscalerState]:
    """Desired replicas for every pool of one ServingJob, and the state for the next call."""
    settings = settings or AutoscalerSettings()
    check_slo(inputs.slo)
    decisions: list[PoolDecision] = []
    states: dict[str, PoolState] = {s.name: s for s in state.pools}
    for pool in inputs.pools:
        decision, pool_state = _decide_pool(
            pool, inputs.slo, inputs.now, state.pool(pool.name), settings
        )
        decisions.append(decision)
        states[pool.name] = pool_state
    next_state = AutoscalerState(pools=tuple(states[name] for name in sorted(states)))
    return ScalingDecision(now=inputs.now, pools=tuple(decisions)), next_state


# ---------------------------------------------------------------------------------------------
# Per-pool decision
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Need:
    """Replica needs of one phase (prefill or decode) as unrounded replica counts."""

    up: float  # at the scale-up utilization, including backlog
    up_steady: float  # same without backlog (to tell capacity from queue as the driver)
    down: float  # at the scale-down utilization, including backlog
    forecast_up: float
    forecast_down: float
    latency_need: float  # replicas from observed latency (unrounded)
    kv_guard: int
    demand: float
    forecast_demand: float
    correction: float
    season_up: float = 0.0  # own-history forecast at the scale-up utilization
    season_down: float = 0.0
    history: SeasonalState | None = None  # the phase's history with this sample folded in


_NO_NEED = _Need(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0.0, 0.0, 1.0)


def _ceil(x: float) -> int:
    return max(0, math.ceil(x - _EPS))


def _bounds(pool: PoolInput, settings: AutoscalerSettings) -> tuple[int, int]:
    floor = 0 if settings.allow_scale_to_zero else 1
    lo = max(pool.min_replicas, floor)
    if pool.max_replicas < lo:
        raise ValueError(f"pool {pool.name}: max_replicas {pool.max_replicas} < effective min {lo}")
    return lo, pool.max_replicas


def _clamp(n: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, n))


def _decide_pool(
    pool: PoolInput,
    slo: Slo,
    now: float,
    state: PoolState,
    settings: AutoscalerSettings,
) -> tuple[PoolDecision, PoolState]:
    lo, hi = _bounds(pool, settings)

    # 1. Data checks: hold on missing or stale metrics.
    data = _check_data(pool, now, settings)
    if isinstance(data, _Problem):
        return _hold(pool, now, state, lo, hi, data.reason, data.why)
    newest, samples = data

    # 2-3. Size each phase by capacity, corrected by latency feedback.
    prefill, decode = _phase_needs(pool, samples, slo, now, state, settings)

    # 2-5. Combine the phases with the burst reserve and the forecast.
    rec = _recommend(pool, prefill, decode, newest, state, now, lo, hi, settings)

    # 6. Stabilization windows and step limits.
    current = pool.current_replicas
    recs = _prune_recs((*state.recommendations, (now, rec.recommendation)), now, settings)
    desired = _stabilize(recs, current, now, settings)
    limited = _step_limit(desired, current, state.events, now, settings)
    step_limited = limited != desired
    desired = _clamp(limited, lo, hi)

    reason = _reason(rec, current, desired, lo, hi)
    sizing = Sizing(
        demand=prefill.demand + decode.demand,
        forecast_demand=prefill.forecast_demand + decode.forecast_demand,
        capacity_replicas=rec.cap_up,
        forecast_replicas=rec.fc_up,
        latency_replicas=rec.latency,
        kv_replicas=rec.kv,
        ttft_correction=prefill.correction,
        itl_correction=decode.correction,
        recommendation=rec.recommendation,
        step_limited=step_limited,
    )
    message = _message(pool, current, desired, reason, sizing, newest, slo)
    events = state.events
    if desired != current:
        events = (*events, ScaleEvent(now, current, desired))
    next_state = PoolState(
        name=pool.name,
        recommendations=recs,
        events=_prune_events(events, now, settings),
        latency_need=rec.reserve,
        latency_need_time=now,
        burst_peaks=rec.peaks,
        prefill_history=prefill.history or state.prefill_history,
        decode_history=decode.history or state.decode_history,
        ttft_correction=prefill.correction if prefill is not _NO_NEED else state.ttft_correction,
        itl_correction=decode.correction if decode is not _NO_NEED else state.itl_correction,
        last_update=now,
    )
    return PoolDecision(pool.name, current, desired, reason, message, sizing), next_state


@dataclass(frozen=True, slots=True)
class _Problem:
    """Why the pool's data cannot be trusted: the policy holds."""

    reason: ScalingReason
    why: str


def _check_data(
    pool: PoolInput, now: float, settings: AutoscalerSettings
) -> _Problem | tuple[MetricsSample, tuple[MetricsSample, ...]]:
    """The newest sample and the fresh window, or why there are none to act on."""
    past = [s for s in pool.window if s.timestamp <= now]
    if not past:
        return _Problem(ScalingReason.METRICS_MISSING, "no samples")
    newest = max(past, key=lambda s: s.timestamp)
    age = now - newest.timestamp
    samples = fresh_samples(pool.window, now, settings)
    if age > settings.staleness_s or not samples:
        return _Problem(
            ScalingReason.METRICS_STALE,
            f"newest sample is {age:.0f}s old (limit {settings.staleness_s:.0f}s)",
        )
    missing = _missing_fields(pool.role, newest)
    if missing:
        return _Problem(ScalingReason.METRICS_MISSING, "missing " + ", ".join(missing))
    return newest, samples


def _phase_needs(
    pool: PoolInput,
    samples: tuple[MetricsSample, ...],
    slo: Slo,
    now: float,
    state: PoolState,
    settings: AutoscalerSettings,
) -> tuple[_Need, _Need]:
    """The prefill and decode needs of the pool's role (`_NO_NEED` for a phase it lacks)."""
    # While added replicas are still starting, latency still reflects the old count:
    # do not learn from it or react to it again (Dynamo: no new action while a scale is pending).
    pending = pool.ready_replicas is not None and pool.ready_replicas < pool.current_replicas
    elapsed = 0.0 if state.last_update is None else max(0.0, now - state.last_update)
    prefill = _NO_NEED
    decode = _NO_NEED
    if pool.role in (PoolRole.PREFILL, PoolRole.UNIFIED):
        prefill = _prefill_need(pool, samples, slo, now, state, elapsed, pending, settings)
    if pool.role in (PoolRole.DECODE, PoolRole.UNIFIED):
        decode = _decode_need(pool, samples, slo, now, state, elapsed, pending, settings)
    return prefill, decode


@dataclass(frozen=True, slots=True)
class _Recommendation:
    """The pool's undamped recommendation and the needs it came from (whole replicas)."""

    cap_up: int  # capacity at the scale-up utilization, backlog included
    cap_up_steady: int  # the same without backlog
    fc_up: int  # forecast (window line or own-history season)
    latency: int  # burst reserve
    kv: int  # KV-cache guard
    raw: int  # before the bounds
    recommendation: int  # within the bounds
    peaks: tuple[tuple[float, float], ...]  # burst peaks to carry
    reserve: float  # burst reserve, unrounded


def _recommend(
    pool: PoolInput,
    prefill: _Need,
    decode: _Need,
    newest: MetricsSample,
    state: PoolState,
    now: float,
    lo: int,
    hi: int,
    settings: AutoscalerSettings,
) -> _Recommendation:
    """Combine the phases (a unified replica does both, so needs add up) with the burst
    reserve, the forecast and the KV-cache guard, with hysteresis on the way down."""
    current = pool.current_replicas
    cap_up = _ceil(prefill.up + decode.up)
    cap_up_steady = _ceil(prefill.up_steady + decode.up_steady)
    fc_up = _ceil(
        max(prefill.forecast_up + decode.forecast_up, prefill.season_up + decode.season_up)
    )
    # Burst reserve: the latency need of every scrape is held for burst_hold_s, then released
    # with a half-life. A 15 s scrape averages one-second clumps away, so the latency a clump
    # caused is the only trace of the capacity it needed; the bursts of a session return
    # faster than a released replica can come back (cold start + one scrape).
    peak = max(prefill.latency_need, decode.latency_need)
    peaks = _prune_peaks(_record_peak(_legacy_peaks(state), now, peak), now, settings)
    reserve = _burst_reserve(peaks, now, settings)
    latency = _ceil(reserve)
    kv = decode.kv_guard
    rec_up = max(cap_up, fc_up, latency, kv)
    if rec_up > current:
        raw = rec_up
    else:
        # Hysteresis: only release replicas the scale-down utilization says are idle.
        cap_down = _ceil(prefill.down + decode.down)
        fc_down = _ceil(
            max(
                prefill.forecast_down + decode.forecast_down,
                prefill.season_down + decode.season_down,
            )
        )
        raw = min(current, max(cap_down, fc_down, latency, kv))
    if raw == 0 and (newest.num_running or 0.0) + (newest.num_waiting or 0.0) > 0:
        raw = 1  # work in flight: never zero while a request is running or waiting
    return _Recommendation(
        cap_up, cap_up_steady, fc_up, latency, kv, raw, _clamp(raw, lo, hi), peaks, reserve
    )


def _reason(rec: _Recommendation, current: int, desired: int, lo: int, hi: int) -> ScalingReason:
    """What drove the decision: the first need equal to the raw recommendation on the way
    up, the bounds, or the damping."""
    raw = rec.raw
    if desired > current:
        if desired == hi and rec.recommendation == hi and raw > hi:
            return ScalingReason.BOUNDED_MAX
        if desired == lo and raw < lo:
            return ScalingReason.BOUNDED_MIN
        if raw == rec.cap_up_steady:
            return ScalingReason.SCALE_UP_CAPACITY
        if raw == rec.cap_up:
            return ScalingReason.SCALE_UP_QUEUE
        if raw == rec.fc_up:
            return ScalingReason.SCALE_UP_FORECAST
        if raw == rec.latency:
            return ScalingReason.SCALE_UP_LATENCY
        return ScalingReason.SCALE_UP_KV_CACHE
    if desired < current and current > hi and desired == hi:
        return ScalingReason.BOUNDED_MAX
    if desired < current:
        return ScalingReason.SCALE_DOWN
    if rec.recommendation < current:
        return ScalingReason.SCALE_DOWN_STABILIZING
    if raw < lo and desired == lo:
        return ScalingReason.BOUNDED_MIN
    return ScalingReason.STEADY


def _missing_fields(role: PoolRole, sample: MetricsSample) -> list[str]:
    missing: list[str] = []
    if role in (PoolRole.PREFILL, PoolRole.UNIFIED) and sample.prompt_token_rate is None:
        missing.append("prompt_token_rate")
    if role in (PoolRole.DECODE, PoolRole.UNIFIED) and sample.generation_token_rate is None:
        missing.append("generation_token_rate")
    return missing


def _hold(
    pool: PoolInput,
    now: float,
    state: PoolState,
    lo: int,
    hi: int,
    reason: ScalingReason,
    why: str,
) -> tuple[PoolDecision, PoolState]:
    """Keep the current count (bounds still apply, and never zero) and remember the hold.

    The held count enters the recommendation history, so a scale-down after the data returns
    still waits out the stabilization window.
    """
    current = pool.current_replicas
    desired = _clamp(max(current, 1), max(lo, 1), max(hi, 1))
    recs = (*state.recommendations, (now, desired))
    message = f"{pool.name}: hold at {desired} replicas ({reason.value}): {why}"
    events = state.events
    if desired != current:
        events = (*events, ScaleEvent(now, current, desired))
    next_state = replace(
        state,
        recommendations=recs,
        events=events,
        last_update=now,
    )
    sizing = Sizing(
        ttft_correction=state.ttft_correction,
        itl_correction=state.itl_correction,
        recommendation=desired,
    )
    return PoolDecision(pool.name, current, desired, reason, message, sizing), next_state


# ---------------------------------------------------------------------------------------------
# Phase sizing
# ---------------------------------------------------------------------------------------------


def _ready(pool: PoolInput, latest: MetricsSample) -> int:
    """Replicas serving now: the pool's ready count, else the sample's, else the current."""
    if pool.ready_replicas is not None:
        return pool.ready_replicas
    if latest.ready_replicas is not None:
        return latest.ready_replicas
    return pool.current_replicas


def _window_mean_tokens(samples: tuple[MetricsSample, ...], prompt: bool) -> float:
    """Mean prompt (or generated) tokens per request over the window, 0 if unknown."""
    tokens = 0.0
    requests = 0.0
    for s in samples:
        rate = s.prompt_token_rate if prompt else s.generation_token_rate
        if rate is None or s.request_rate is None:
            continue
        tokens += rate
        requests += s.request_rate
    return tokens / requests if requests > _EPS else 0.0


def _latency_need(
    observed: LatencyQuantiles | None,
    slo_s: float,
    own_s: float,
    ready: int,
    settings: AutoscalerSettings,
) -> float:
    """Replicas the observed p90 latency says the pool needs (unrounded; 0 if unknown).

    Only the part of the latency that more replicas can remove is scaled: the queueing part
    `observed - own_s` (prefill: the request's own prefill time; decode: the batch-independent
    ITL) against the same part of the SLO budget at `latency_queue_target`. With more replicas
    that part shrinks roughly in proportion (a burst drains N times faster; a decode batch is N
    times smaller), so `ready x queue / budget` replicas bring it back under the target. An SLO
    the own time alone misses gives 0: replicas cannot fix it (the trap Dynamo's latency-ratio
    floor fell into, serving.md §2.3). One observation asks for at most `feedback_max_step`
    times the ready replicas.
    """
    if observed is None or ready <= 0:
        return 0.0
    budget = (slo_s - own_s) * settings.latency_queue_target
    if budget <= 0:
        return 0.0
    queue = max(0.0, observed.at(settings.slo_quantile) - own_s)
    return ready * min(queue / budget, settings.latency_max_step)


def _bounded_by_demand(
    latency_need: float, window_peak: float, settings: AutoscalerSettings
) -> float:
    """Cap a latency need at `latency_max_demand_ratio` x the window's largest capacity need.

    The cap is taken over at least one replica, so a nearly idle pool can still react to a
    clump. Without it, latency that more replicas do not fix (a slow dependency, a noisy
    neighbour) would grow the pool by `latency_max_step` per scrape up to `max_replicas`, the
    way Dynamo's latency-ratio floor pinned replicas (serving.md §2.3).
    """
    return min(latency_need, settings.latency_max_demand_ratio * max(window_peak, 1.0))


def _decode_window_peak(
    pool: PoolInput,
    samples: tuple[MetricsSample, ...],
    slo: Slo,
    isl: float,
    osl: float,
    settings: AutoscalerSettings,
) -> float:
    """The window's largest decode capacity need at the ITL SLO itself (no learned correction)."""
    needs = [
        r[0].total / (r[1] * settings.target_utilization)
        for r in (
            decode_point(s, pool.capacity, slo.itl_p90_s, slo.itl_p90_s, isl, osl, settings)
            for s in samples
        )
        if r is not None
    ]
    return max(needs, default=0.0)


def _legacy_peaks(state: PoolState) -> tuple[tuple[float, float], ...]:
    """The state's peak needs; a state written before `burst_peaks` existed carries one."""
    if state.burst_peaks or state.latency_need_time is None or state.latency_need <= 0:
        return state.burst_peaks
    return ((state.latency_need_time, state.latency_need),)


def _record_peak(
    peaks: tuple[tuple[float, float], ...], now: float, need: float
) -> tuple[tuple[float, float], ...]:
    """Append `(now, need)`, dropping older peaks it dominates (older and not larger).

    Decay only depends on age, so an older, smaller peak can never exceed a newer, larger one:
    the kept peaks are strictly decreasing in need, which bounds the state's size.
    """
    if need <= 0:
        return peaks
    kept = tuple(p for p in peaks if p[1] > need and p[0] <= now)
    return (*kept, (now, need))


def _peak_weight(age: float, settings: AutoscalerSettings) -> float:
    """1 while a peak is younger than `burst_hold_s`, then halved every half-life."""
    over = max(0.0, age - settings.burst_hold_s)
    return math.pow(0.5, over / settings.burst_memory_half_life_s)


def _burst_reserve(
    peaks: tuple[tuple[float, float], ...], now: float, settings: AutoscalerSettings
) -> float:
    """The largest held-then-decayed peak need (replicas, unrounded), 0 without peaks."""
    return max((need * _peak_weight(max(0.0, now - t), settings) for t, need in peaks), default=0.0)


def _prune_peaks(
    peaks: tuple[tuple[float, float], ...], now: float, settings: AutoscalerSettings
) -> tuple[tuple[float, float], ...]:
    """Forget peaks whose decayed need no longer rounds up to a replica."""
    return tuple(p for p in peaks if p[1] * _peak_weight(now - p[0], settings) > _PEAK_FLOOR)


def _prefill_need(
    pool: PoolInput,
    samples: tuple[MetricsSample, ...],
    slo: Slo,
    now: float,
    state: PoolState,
    elapsed: float,
    pending: bool,
    settings: AutoscalerSettings,
) -> _Need:
    cap = pool.capacity.prefill_tokens_per_s
    if cap <= 0:
        raise ValueError(f"pool {pool.name}: prefill_tokens_per_s must be positive")
    latest = samples[-1]
    observed = latest.ttft.at(settings.slo_quantile) if latest.ttft is not None else None
    correction = state.ttft_correction
    if not pending:
        own = settings.tail_factor * _window_mean_tokens(samples, prompt=True) / cap
        correction = update_correction(correction, observed, slo.ttft_p90_s, own, elapsed, settings)

    isl = _window_mean_tokens(samples, prompt=True)
    rho_up = prefill_utilization_ceiling(isl / cap, slo.ttft_p90_s, settings)
    rho_down = rho_up * settings.scale_down_utilization / settings.target_utilization

    points = [p for p in (prefill_point(s, isl, settings) for s in samples) if p is not None]
    now_point = points[-1] if points else DemandPoint(now, 0.0, 0.0)
    forecast = linear_forecast(
        [(p.time, p.total) for p in points], now + settings.forecast_horizon_s, settings
    )
    fc = max(forecast or 0.0, 0.0)
    per_replica = cap / correction
    history = observe_demand(state.prefill_history, now, now_point.total, settings)
    season = seasonal_forecast(history, now, settings) or 0.0
    return _Need(
        up=now_point.total / (per_replica * rho_up),
        up_steady=now_point.steady / (per_replica * rho_up),
        down=now_point.total / (per_replica * rho_down),
        forecast_up=fc / (per_replica * rho_up),
        forecast_down=fc / (per_replica * rho_down),
        latency_need=_bounded_by_demand(
            _latency_need(
                latest.ttft,
                slo.ttft_p90_s,
                settings.tail_factor * isl / cap,
                _ready(pool, latest),
                settings,
            ),
            # uncorrected capacity: the correction is itself learned from latency
            max((p.total for p in points), default=0.0) / (cap * rho_up),
            settings,
        ),
        kv_guard=0,
        demand=now_point.total,
        forecast_demand=max(fc, season),
        correction=correction,
        season_up=season / (per_replica * rho_up),
        season_down=season / (per_replica * rho_down),
        history=history,
    )


def _decode_need(
    pool: PoolInput,
    samples: tuple[MetricsSample, ...],
    slo: Slo,
    now: float,
    state: PoolState,
    elapsed: float,
    pending: bool,
    settings: AutoscalerSettings,
) -> _Need:
    latest = samples[-1]
    observed = latest.itl.at(settings.slo_quantile) if latest.itl is not None else None
    correction = state.itl_correction
    if not pending:
        correction = update_correction(
            correction, observed, slo.itl_p90_s, pool.capacity.decode_itl_base_s, elapsed, settings
        )
    # Dynamo's SLA planner sizes decode at corrected_itl = itl_sla / d_correction (§2.2); only
    # the batch-dependent part of the ITL is scaled, so the target never drops below the base.
    base = pool.capacity.decode_itl_base_s
    itl_target = base + max(0.0, slo.itl_p90_s - base) / correction

    isl = _window_mean_tokens(samples, prompt=True)
    osl = _window_mean_tokens(samples, prompt=False)
    sized = [
        r
        for r in (
            decode_point(s, pool.capacity, itl_target, slo.itl_p90_s, isl, osl, settings)
            for s in samples
        )
        if r is not None
    ]
    if sized:
        now_point, batch = sized[-1]
    else:
        now_point, batch = DemandPoint(now, 0.0, 0.0), 1
    forecast = linear_forecast(
        [(p.time, p.total) for p, _ in sized], now + settings.forecast_horizon_s, settings
    )
    fc = max(forecast or 0.0, 0.0)
    rho_up = settings.target_utilization
    rho_down = settings.scale_down_utilization
    history = observe_demand(state.decode_history, now, now_point.total, settings)
    season = seasonal_forecast(history, now, settings) or 0.0

    kv_guard = 0
    usage = latest.kv_cache_usage
    if usage is not None and usage > settings.kv_scale_up_threshold:
        ready = latest.ready_replicas or pool.ready_replicas or pool.current_replicas
        kv_guard = _ceil(max(ready, 1) * usage / settings.kv_target_usage)
    # A profiled token rate per replica bounds decode by throughput as well as by concurrency
    # (long outputs at a small batch can outrun what the batch bound alone would provision).
    tokens = 0.0
    if pool.capacity.decode_tokens_per_s and latest.generation_token_rate:
        tokens = max(0.0, latest.generation_token_rate) / pool.capacity.decode_tokens_per_s
    return _Need(
        up=max(now_point.total / batch, tokens) / rho_up,
        up_steady=max(now_point.steady / batch, tokens) / rho_up,
        down=max(now_point.total / batch, tokens) / rho_down,
        forecast_up=fc / (batch * rho_up),
        forecast_down=fc / (batch * rho_down),
        latency_need=_bounded_by_demand(
            _latency_need(
                latest.itl,
                slo.itl_p90_s,
                pool.capacity.decode_itl_base_s,
                _ready(pool, latest),
                settings,
            ),
            _decode_window_peak(pool, samples, slo, isl, osl, settings),
            settings,
        ),
        kv_guard=kv_guard,
        demand=now_point.total,
        forecast_demand=max(fc, season),
        correction=correction,
        season_up=season / (batch * rho_up),
        season_down=season / (batch * rho_down),
        history=history,
    )


# ---------------------------------------------------------------------------------------------
# Damping: stabilization windows and step limits (Kubernetes HPA semantics, serving.md §5)
# ---------------------------------------------------------------------------------------------


def _prune_recs(
    recs: tuple[tuple[float, int], ...], now: float, settings: AutoscalerSettings
) -> tuple[tuple[float, int], ...]:
    keep = max(settings.scale_up_stabilization_s, settings.scale_down_stabilization_s)
    return tuple(r for r in recs if r[0] >= now - keep)


def _prune_events(
    events: tuple[ScaleEvent, ...], now: float, settings: AutoscalerSettings
) -> tuple[ScaleEvent, ...]:
    keep = max(settings.scale_up_period_s, settings.scale_down_period_s)
    return tuple(e for e in events if e.time > now - keep)


def _stabilize(
    recs: tuple[tuple[float, int], ...], current: int, now: float, settings: AutoscalerSettings
) -> int:
    """HPA rule: up to the lowest recommendation of the up window, down to the highest of the
    down window; otherwise keep the current count."""
    up_window = [n for t, n in recs if t >= now - settings.scale_up_stabilization_s]
    down_window = [n for t, n in recs if t >= now - settings.scale_down_stabilization_s]
    up = min(up_window)
    down = max(down_window)
    if up > current:
        return up
    if down < current:
        return down
    return current


def _step_limit(
    desired: int,
    current: int,
    events: tuple[ScaleEvent, ...],
    now: float,
    settings: AutoscalerSettings,
) -> int:
    """Limit the change relative to the count at the start of the current period."""
    if desired > current:
        added = sum(
            e.to_replicas - e.from_replicas
            for e in events
            if e.time > now - settings.scale_up_period_s and e.to_replicas > e.from_replicas
        )
        base = max(current - added, 0)
        limit = max(
            math.ceil(base * (1.0 + settings.scale_up_percent / 100.0)),
            base + settings.scale_up_pods,
        )
        return max(current, min(desired, limit))
    if desired < current:
        removed = sum(
            e.from_replicas - e.to_replicas
            for e in events
            if e.time > now - settings.scale_down_period_s and e.to_replicas < e.from_replicas
        )
        base = current + removed
        step = max(math.floor(base * settings.scale_down_percent / 100.0), settings.scale_down_pods)
        return min(current, max(desired, base - step))
    return desired


def _message(
    pool: PoolInput,
    current: int,
    desired: int,
    reason: ScalingReason,
    sizing: Sizing,
    newest: MetricsSample,
    slo: Slo,
) -> str:
    """One deterministic human line: what changed, why, and the numbers behind it."""
    verb = "scale" if desired != current else "keep"
    unit = (
        "tok/s"
        if pool.role is PoolRole.PREFILL
        else ("seqs" if pool.role is PoolRole.DECODE else "load")
    )
    parts = [
        f"{pool.name}: {verb} {current}->{desired} ({reason.value})",
        f"demand {sizing.demand:.1f} {unit}",
        f"forecast {sizing.forecast_demand:.1f} {unit}",
        f"recommend {sizing.recommendation} (capacity {sizing.capacity_replicas}, "
        f"forecast {sizing.forecast_replicas}, latency {sizing.latency_replicas}, "
        f"kv {sizing.kv_replicas})",
    ]
    if newest.ttft is not None and pool.role is not PoolRole.DECODE:
        parts.append(f"ttft p90 {newest.ttft.p90:.3f}s/slo {slo.ttft_p90_s:.3f}s")
    if newest.itl is not None and pool.role is not PoolRole.PREFILL:
        parts.append(f"itl p90 {newest.itl.p90 * 1e3:.1f}ms/slo {slo.itl_p90_s * 1e3:.1f}ms")
    if sizing.step_limited:
        parts.append("step-limited")
    return "; ".join(parts)
