"""Unit tests of the own-history forecast (Holt-Winters with a damped trend over bucket peaks).

Aspects under test: a bucket enters the state only once it has ended (causal: a sample in the
current bucket or from the past changes no forecast); constant demand gives a level equal to it;
no seasonal offset is used before one whole season; a daily-style spike seen for a few seasons
is forecast before it comes back; the damped trend does not run away; turned off with a season
of 0; and in the policy a pool scales up ahead of a spike its history knows, with the
forecast reason, while reactive signals are quiet.
"""

from __future__ import annotations

import pytest

from gpufleet.core.autoscaling import (
    AutoscalerSettings,
    AutoscalerState,
    CapacityProfile,
    LatencyQuantiles,
    MetricsSample,
    PoolInput,
    PoolRole,
    ScalingInput,
    ScalingReason,
    Slo,
    decide,
)
from gpufleet.core.autoscaling_forecast import SeasonalState, observe_demand, seasonal_forecast

# A season of ten one-minute buckets keeps the tests short; the default season is a day.
SHORT = AutoscalerSettings(forecast_season_s=600.0, forecast_bucket_s=60.0, forecast_horizon_s=60.0)


def feed(state: SeasonalState, points: list[tuple[float, float]]) -> SeasonalState:
    for t, demand in points:
        state = observe_demand(state, t, demand, SHORT)
    return state


def spiky(seasons: int, spike_bucket: int = 7, base: float = 100.0, peak: float = 1000.0):  # type: ignore[no-untyped-def]
    """Samples every 15 s: `base` demand, `peak` during one bucket of every season."""
    out = []
    for k in range(seasons * 10):
        for i in range(4):
            out.append((k * 60.0 + i * 15.0, peak if k % 10 == spike_bucket else base))
    return out


def test_constant_demand_gives_its_level_and_no_trend() -> None:
    state = feed(SeasonalState(), [(t * 15.0, 400.0) for t in range(200)])
    assert state.level == pytest.approx(400.0)
    assert state.trend == pytest.approx(0.0)
    assert seasonal_forecast(state, 200 * 15.0, SHORT) == pytest.approx(400.0)


def test_a_bucket_counts_only_once_it_has_ended() -> None:
    state = feed(SeasonalState(), [(t * 15.0, 100.0) for t in range(40)])
    before = seasonal_forecast(state, 600.0, SHORT)
    # A huge sample in the bucket being filled, and one from the past, change nothing yet.
    later = observe_demand(state, 599.0, 1e6, SHORT)
    later = observe_demand(later, 10.0, 1e6, SHORT)
    assert seasonal_forecast(later, 600.0, SHORT) == before
    assert later.closed == state.closed


def test_no_forecast_before_enough_history_or_with_the_season_off() -> None:
    state = feed(SeasonalState(), [(t * 15.0, 100.0) for t in range(8)])  # 1 closed bucket
    assert seasonal_forecast(state, 120.0, SHORT) is None
    off = AutoscalerSettings(forecast_season_s=0.0)
    assert observe_demand(SeasonalState(), 0.0, 5.0, off) == SeasonalState()


def test_seasonal_offsets_wait_for_a_whole_season() -> None:
    state = feed(SeasonalState(), spiky(1)[:-4])  # not yet a whole season closed
    assert state.closed < 10
    # Before bucket 7 of the second season: without a season's history no spike is forecast.
    assert seasonal_forecast(state, 60.0 * 16 + 30.0, SHORT) < 500.0


def test_a_recurring_spike_is_forecast_before_it_returns() -> None:
    history = spiky(4)
    # Stop in bucket 6 of the fifth season, one bucket before the spike.
    now = 4 * 600.0 + 6 * 60.0 + 30.0
    state = feed(SeasonalState(), [p for p in history if p[0] < now])
    state = feed(
        state, [(4 * 600.0 + k * 60.0 + i * 15.0, 100.0) for k in range(7) for i in range(4)]
    )
    ahead = seasonal_forecast(state, now, SHORT)
    assert ahead is not None and ahead > 600.0
    # Far from the spike the forecast stays near the base.
    quiet = seasonal_forecast(state, 4 * 600.0 + 2 * 60.0 + 30.0, SHORT)
    assert quiet is not None and quiet < 400.0


def test_a_short_ramp_is_not_extrapolated_without_end() -> None:
    ramp = [(k * 60.0 + i * 15.0, 100.0 + 50.0 * k) for k in range(20) for i in range(4)]
    state = feed(SeasonalState(), ramp)
    long = AutoscalerSettings(
        forecast_season_s=1e6, forecast_bucket_s=60.0, forecast_horizon_s=3600.0
    )
    far = seasonal_forecast(state, 20 * 60.0, long)
    assert far is not None
    # Damped: the trend adds at most trend * phi / (1 - phi) however far ahead.
    assert far <= state.level + state.trend * 0.9 / 0.1 + 1e-6  # type: ignore[operator]


CAP = CapacityProfile(prefill_tokens_per_s=10_000.0, max_num_seqs=256)
SLO = Slo(ttft_p90_s=1.0, itl_p90_s=0.05)


def quiet_sample(t: float, tokens: float) -> MetricsSample:
    return MetricsSample(
        timestamp=t,
        request_rate=tokens / 1000.0,
        prompt_token_rate=tokens,
        generation_token_rate=tokens / 10.0,
        num_waiting=0.0,
        num_running=1.0,
        ttft=LatencyQuantiles(0.1, 0.2, 0.3),
    )


def run_seasons(settings: AutoscalerSettings) -> tuple[int, int, list[ScalingReason]]:
    """Four seasons of 5k tok/s with 60k tok/s in bucket 7 of every season, then the fifth
    season up to bucket 6; (replicas, forecast replicas, reasons of fifth-season scale-ups)."""
    state = AutoscalerState()
    window: list[MetricsSample] = []
    current, forecast = 1, 0
    reasons: list[ScalingReason] = []
    for step in range(4 * 40 + 6 * 4 + 2):
        t = step * 15.0
        k = int(t // 60.0)
        window = [s for s in window if s.timestamp > t - settings.window_s]
        window.append(quiet_sample(t, 60_000.0 if k % 10 == 7 and k < 40 else 5_000.0))
        pool = PoolInput("prefill", PoolRole.PREFILL, current, 1, 32, CAP, tuple(window), current)
        result, state = decide(ScalingInput(t, SLO, (pool,)), state, settings)
        decision = result.pool("prefill")
        if t >= 4 * 600.0 and decision.desired_replicas > current:
            reasons.append(decision.reason)
        current, forecast = decision.desired_replicas, decision.sizing.forecast_replicas
    return current, forecast, reasons


def test_policy_scales_up_ahead_of_a_spike_its_history_knows() -> None:
    settings = SHORT.model_copy(update={"scale_down_stabilization_s": 0.0})
    current, forecast, reasons = run_seasons(settings)
    # In bucket 6 of the fifth season demand is 5k tok/s (one replica's worth): the policy
    # already holds replicas for the 60k tok/s it has seen in bucket 7 of every season.
    assert forecast >= 6 and current >= 6
    assert reasons and set(reasons) == {ScalingReason.SCALE_UP_FORECAST}
    # Without the own-history forecast the same run is back at one replica before the spike.
    off, _, _ = run_seasons(settings.model_copy(update={"forecast_season_s": 0.0}))
    assert off == 1
