"""Seasonal forecast of a pool's demand from its own history: Holt-Winters with a damped trend.

The window forecast (`linear_forecast`, a least-squares line over the last minutes) sees a ramp
that has already started. This one sees what the pool's own past says about the time ahead: the
additive Holt-Winters method (Holt 1957, Winters 1960; Hyndman & Athanasopoulos, "Forecasting:
Principles and Practice", 3rd ed., §8.3) over the **peak** demand of each `forecast_bucket_s`
bucket (bursts last seconds, so a bucket mean would average them away), with a season of
`forecast_season_s` (a day: the time-of-day pattern of serving traffic) and Gardner and
McKenzie's damped trend (1985; φ < 1 keeps a short ramp from being extrapolated without end).

It is causal: a bucket enters the state only once it has ended, and the forecast for the
buckets ahead uses only buckets already seen. Bucket numbers come from the sample timestamps
(Unix time live), so the season index is the bucket's time of day. Until a whole season has
been seen the seasonal terms are zero and the method is Holt's damped-trend smoothing of the
bucket peaks; buckets with no sample (metrics missing) leave the state as it was. The policy
uses the largest forecast bucket peak over the next `forecast_horizon_s` as a floor, only to
scale up, like the window forecast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gpufleet.core.autoscaling_settings import AutoscalerSettings

__all__ = ["SeasonalState", "observe_demand", "seasonal_forecast"]


@dataclass(frozen=True, slots=True)
class SeasonalState:
    """Holt-Winters state of one pool's demand (in the pool's demand unit).

    `bucket` is the number of the bucket being filled and `bucket_peak` its largest demand so
    far; `level`, `trend` and `season` (one offset per bucket of the season, by bucket number
    modulo the season length) are the smoothed components after the last closed bucket;
    `closed` counts the buckets folded in.
    """

    bucket: int | None = None
    bucket_peak: float = 0.0
    level: float | None = None
    trend: float = 0.0
    season: tuple[float, ...] = ()
    closed: int = 0


def _season_length(settings: AutoscalerSettings) -> int:
    return max(1, round(settings.forecast_season_s / settings.forecast_bucket_s))


def _fold(
    state: SeasonalState, y: float, bucket: int, settings: AutoscalerSettings
) -> SeasonalState:
    """One Holt-Winters update with the closed bucket's peak `y`."""
    m = _season_length(settings)
    a, b, g, phi = (
        settings.forecast_alpha,
        settings.forecast_beta,
        settings.forecast_gamma,
        settings.forecast_damping,
    )
    season = list(state.season) or [0.0] * m
    i = bucket % m
    seasonal = state.closed >= m  # offsets are used only after one full season
    s_old = season[i] if seasonal else 0.0
    if state.level is None:
        level, trend = y, 0.0
    else:
        level = a * (y - s_old) + (1 - a) * (state.level + phi * state.trend)
        trend = b * (level - state.level) + (1 - b) * phi * state.trend
    # During the first season each offset starts as the deviation from the level.
    season[i] = g * (y - level) + (1 - g) * s_old if seasonal else y - level
    return SeasonalState(None, 0.0, level, trend, tuple(season), state.closed + 1)


def observe_demand(
    state: SeasonalState, now: float, demand: float, settings: AutoscalerSettings
) -> SeasonalState:
    """Fold a demand sample taken at `now` into the state (closing the bucket it ends)."""
    if settings.forecast_season_s <= 0:
        return state
    bucket = math.floor(now / settings.forecast_bucket_s)
    if state.bucket is None:
        return replace(state, bucket=bucket, bucket_peak=max(0.0, demand))
    if bucket < state.bucket:
        return state  # a sample from the past: ignore it
    if bucket == state.bucket:
        return replace(state, bucket_peak=max(state.bucket_peak, demand))
    closed = _fold(state, state.bucket_peak, state.bucket, settings)
    return replace(closed, bucket=bucket, bucket_peak=max(0.0, demand))


def seasonal_forecast(
    state: SeasonalState, now: float, settings: AutoscalerSettings
) -> float | None:
    """Largest forecast bucket peak from `now` to `now + forecast_horizon_s`, or None before
    `forecast_min_buckets` buckets have been seen (or with the season off)."""
    if (
        settings.forecast_season_s <= 0
        or state.level is None
        or state.closed < settings.forecast_min_buckets
    ):
        return None
    m = _season_length(settings)
    last = (state.bucket if state.bucket is not None else 0) - 1  # the last closed bucket
    first = math.floor(now / settings.forecast_bucket_s)
    end = math.floor((now + settings.forecast_horizon_s) / settings.forecast_bucket_s)
    phi = settings.forecast_damping
    best = 0.0
    for k in range(max(first, last + 1), end + 1):
        h = k - last
        damped = sum(phi**j for j in range(1, h + 1))
        offset = state.season[k % m] if state.closed >= m and state.season else 0.0
        best = max(best, state.level + damped * state.trend + offset)
    return best
