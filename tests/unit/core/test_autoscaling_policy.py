"""Unit tests of the pure P/D autoscaling policy on scripted metric windows.

Aspects under test: capacity sizing (prefill tokens, decode Little's law), steady load, bursts,
ramps scaled by the forecast before a queue builds, latency feedback (and its refusal to chase
an SLO that replicas cannot meet), KV-cache guard, hold on stale and missing data (never down,
never to zero), stabilization against flapping, step limits, min/max bounds, unified pools,
explicit immutable state and determinism.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.core.autoscaling import (
    AutoscalerSettings,
    AutoscalerState,
    CapacityProfile,
    LatencyQuantiles,
    MetricsSample,
    PoolDecision,
    PoolInput,
    PoolRole,
    PoolState,
    ScalingInput,
    ScalingReason,
    Slo,
    decide,
)

# Prefill: 10k tok/s per replica. With 1,000-token prompts (0.1 s own time) and a 1 s TTFT SLO the
# M/D/1 ceiling is above 0.85, so sizing uses target_utilization 0.85 -> 8,500 tok/s per replica.
CAP = CapacityProfile(
    prefill_tokens_per_s=10_000.0,
    max_num_seqs=256,
    decode_itl_base_s=0.01,
    decode_itl_per_seq_s=0.0001,
    kv_cache_tokens=None,
)
SLO = Slo(ttft_p90_s=1.0, itl_p90_s=0.05)
PERIOD = 15.0
SETTINGS = AutoscalerSettings()


def sample(t: float, *, req: float = 30.0, isl: float = 1000.0, osl: float = 100.0, **kw: object):
    """A healthy pool sample at time t: `req` req/s of `isl`-token prompts, `osl` outputs."""
    fields: dict[str, object] = {
        "timestamp": t,
        "request_rate": req,
        "prompt_token_rate": req * isl,
        "generation_token_rate": req * osl,
        "num_waiting": 0.0,
        "num_running": 2.0,
        "ttft": LatencyQuantiles(0.1, 0.2, 0.3),
        "itl": LatencyQuantiles(0.012, 0.015, 0.02),
        "kv_cache_usage": 0.2,
    }
    fields.update(kw)
    return MetricsSample(**fields)  # type: ignore[arg-type]


def window(now: float, n: int = 12, **kw: object) -> tuple[MetricsSample, ...]:
    """n samples every 15 s ending at `now`, all alike."""
    return tuple(sample(now - PERIOD * (n - 1 - i), **kw) for i in range(n))


def pool(
    samples: tuple[MetricsSample, ...],
    current: int,
    *,
    role: PoolRole = PoolRole.PREFILL,
    lo: int = 1,
    hi: int = 64,
    ready: int | None = None,
    cap: CapacityProfile = CAP,
) -> PoolInput:
    return PoolInput(
        name=role.value,
        role=role,
        current_replicas=current,
        min_replicas=lo,
        max_replicas=hi,
        capacity=cap,
        window=samples,
        ready_replicas=ready,
    )


def run(
    p: PoolInput,
    now: float,
    state: AutoscalerState | None = None,
    slo: Slo = SLO,
    settings: AutoscalerSettings = SETTINGS,
) -> tuple[PoolDecision, AutoscalerState]:
    decision, next_state = decide(
        ScalingInput(now, slo, (p,)), state or AutoscalerState(), settings
    )
    return decision.pools[0], next_state


# --- capacity sizing -----------------------------------------------------------------------


def test_steady_load_keeps_replicas() -> None:
    # 30 req/s x 1,000 tokens = 30k tok/s -> 30k / 8.5k = 3.5 -> 4 replicas.
    d, _ = run(pool(window(1000.0), 4), 1000.0)
    assert d.desired_replicas == 4
    assert d.reason is ScalingReason.STEADY
    assert d.sizing.capacity_replicas == 4
    assert "keep 4->4" in d.message


def test_prefill_sized_from_prompt_tokens_over_capacity() -> None:
    d, _ = run(pool(window(1000.0, req=60.0), 8, hi=64), 1000.0)
    assert d.sizing.capacity_replicas == 8  # 60k / 8.5k = 7.06 -> 8
    assert d.sizing.demand == pytest.approx(60_000.0)


def test_waiting_queue_adds_backlog_demand() -> None:
    calm = run(pool(window(1000.0), 4), 1000.0)[0]
    queued = run(pool(window(1000.0, num_waiting=300.0), 4), 1000.0)[0]
    # 300 waiting x 1,000 tokens drained over 60 s = +5k tok/s -> 35k / 8.5k = 4.1 -> 5.
    assert queued.desired_replicas == 5
    assert queued.reason is ScalingReason.SCALE_UP_QUEUE
    assert calm.desired_replicas == 4


def test_queue_without_new_arrivals_still_counts() -> None:
    # The newest interval saw no arrivals and processed nothing, but 300 requests wait: their
    # size comes from the window's mean prompt length (1,000 tokens) -> +5k tok/s -> 1 replica.
    stuck = sample(1000.0, req=0.0, num_waiting=300.0)
    d, _ = run(pool((*window(985.0, 11), stuck), 4), 1000.0)
    assert d.sizing.demand == pytest.approx(5_000.0)


def test_decode_sized_by_littles_law_over_batch_at_itl_slo() -> None:
    # itl(b) = 0.01 + 0.0001 b -> b = 400 at 50 ms, capped by max_num_seqs 256.
    # 200 req/s x 100 tokens = 20k tok/s; concurrency = 20k x itl(256) = 712 -> 712/(256x0.85)=3.3
    samples = window(1000.0, req=200.0, num_running=50.0)
    d, _ = run(pool(samples, 1, role=PoolRole.DECODE), 1000.0)
    assert d.sizing.demand == pytest.approx(20_000 * (0.01 + 0.0001 * 256))
    assert d.desired_replicas == 4
    assert d.reason is ScalingReason.SCALE_UP_CAPACITY


def test_decode_batch_bounded_by_kv_cache() -> None:
    # ctx = 1,000 + 100/2 = 1,050 tokens; 0.8 x 105,000 / 1,050 = 80 sequences per replica.
    cap = dataclasses.replace(CAP, kv_cache_tokens=105_000)
    samples = window(1000.0, req=20.0)  # 2k tok/s x itl(80)=0.018 -> 36 seqs -> 36/(80x0.85)
    d, _ = run(pool(samples, 1, role=PoolRole.DECODE, cap=cap), 1000.0)
    assert d.desired_replicas == 1
    heavy = window(1000.0, req=200.0)  # 20k tok/s x 0.018 = 360 seqs -> 360/68 = 5.3 -> 6
    d, _ = run(pool(heavy, 1, role=PoolRole.DECODE, cap=cap), 1000.0)
    assert d.sizing.capacity_replicas == 6


def test_profiled_decode_batch_replaces_itl_model() -> None:
    cap = CapacityProfile(prefill_tokens_per_s=10_000.0, max_num_seqs=256, decode_batch_at_slo=50)
    samples = window(1000.0, req=200.0)  # 20k tok/s x 0.05 s = 1,000 seqs -> 1000/(50x0.85) = 24
    d, _ = run(pool(samples, 1, role=PoolRole.DECODE, cap=cap), 1000.0)
    assert d.sizing.capacity_replicas == 24


def test_profiled_decode_token_rate_is_a_throughput_floor() -> None:
    # Concurrency alone: 20k tok/s x itl(256) = 712 seqs -> 712/(256x0.85) = 3.3 -> 4 replicas.
    # At 2,000 tok/s per replica the 20k tok/s need 20k/(2k x 0.85) = 11.8 -> 12.
    samples = window(1000.0, req=200.0, num_running=50.0)
    slow = dataclasses.replace(CAP, decode_tokens_per_s=2_000.0)
    d, _ = run(pool(samples, 1, role=PoolRole.DECODE, cap=slow), 1000.0)
    assert d.sizing.capacity_replicas == 12
    # A fast profile leaves the concurrency bound in charge.
    fast = dataclasses.replace(CAP, decode_tokens_per_s=100_000.0)
    d, _ = run(pool(samples, 1, role=PoolRole.DECODE, cap=fast), 1000.0)
    assert d.sizing.capacity_replicas == 4


def test_kv_cache_pressure_scales_decode_up() -> None:
    samples = window(1000.0, req=1.0, kv_cache_usage=0.97)
    d, _ = run(pool(samples, 2, role=PoolRole.DECODE, ready=2), 1000.0)
    assert d.desired_replicas == 3  # 2 x 0.97 / 0.8 = 2.4 -> 3
    assert d.reason is ScalingReason.SCALE_UP_KV_CACHE


def test_unified_pool_adds_prefill_and_decode_needs() -> None:
    samples = window(1000.0, req=30.0)
    prefill_only = run(pool(samples, 1), 1000.0)[0].sizing.capacity_replicas
    unified = run(pool(samples, 1, role=PoolRole.UNIFIED), 1000.0)[0]
    assert unified.sizing.capacity_replicas >= prefill_only
    assert unified.desired_replicas >= prefill_only


# --- bursts, ramps, forecast ---------------------------------------------------------------


def test_burst_scales_up_fast_within_step_limit() -> None:
    now = 1000.0
    samples = (*window(now - PERIOD, 11), sample(now, req=80.0))
    d, state = run(pool(samples, 4), now)
    # need 80k / 8.5k = 9.4 -> 10, but one period allows max(2 x 4, 4 + 4) = 8
    assert d.desired_replicas == 8
    assert d.reason is ScalingReason.SCALE_UP_CAPACITY
    assert d.sizing.recommendation == 10
    assert d.sizing.step_limited
    later = (*samples[1:], sample(now + PERIOD, req=80.0))
    d2, _ = run(pool(later, 8), now + PERIOD, state)
    assert d2.desired_replicas == 10
    assert not d2.sizing.step_limited


def test_ramp_scales_on_forecast_before_queue_builds() -> None:
    now = 1000.0
    # Demand rises linearly 10 -> 32 req/s over the window; nothing waits, TTFT is healthy.
    samples = tuple(sample(now - PERIOD * (11 - i), req=10.0 + 2.0 * i) for i in range(12))
    d, _ = run(pool(samples, 4), now)
    assert d.sizing.capacity_replicas == 4  # 32k / 8.5k = 3.8 -> 4: no reactive need yet
    assert d.sizing.forecast_demand > d.sizing.demand  # 60 s ahead on the trend: ~40k tok/s
    assert d.desired_replicas == 5
    assert d.reason is ScalingReason.SCALE_UP_FORECAST


def test_forecast_never_scales_down() -> None:
    now = 1000.0
    falling = tuple(sample(now - PERIOD * (11 - i), req=40.0 - 2.0 * i) for i in range(12))
    d, _ = run(pool(falling, 3), now)
    assert d.sizing.forecast_demand < d.sizing.demand
    assert d.desired_replicas == 3  # 18k now -> 3 at the scale-down utilization; no lower


def test_latency_violation_scales_up_even_when_capacity_looks_enough() -> None:
    slow = LatencyQuantiles(1.0, 3.0, 5.0)  # p90 3 s against a 1 s SLO
    d, state = run(pool(window(1000.0, ttft=slow), 4, ready=4), 1000.0)
    assert d.sizing.capacity_replicas < d.sizing.latency_replicas
    # queueing part (3 - 0.23) against (1 - 0.23) x 0.8 is > 1.5x: capped at 1.5 x 4 ready
    assert d.desired_replicas == 6
    assert d.reason is ScalingReason.SCALE_UP_LATENCY
    assert state.pool("prefill").ttft_correction > 1.0


def test_latency_feedback_ignores_slo_that_replicas_cannot_meet() -> None:
    # 20k-token prompts take 2 s on one replica: a 1 s TTFT SLO is infeasible whatever the count.
    slow = LatencyQuantiles(2.0, 2.5, 3.0)
    samples = window(1000.0, req=1.0, isl=20_000.0, ttft=slow)
    d, _ = run(pool(samples, 4, ready=4), 1000.0)
    assert d.sizing.latency_replicas == 0
    # Sized for throughput only: 20k tok/s at the 0.70 scale-down utilization -> 3; no runaway.
    assert d.desired_replicas == 3
    assert d.sizing.ttft_correction == 1.0


def test_itl_violation_tightens_decode_target() -> None:
    healthy = window(1000.0, req=200.0)
    slow_itl = window(1000.0, req=200.0, itl=LatencyQuantiles(0.08, 0.12, 0.2))
    d_ok, _ = run(pool(healthy, 4, role=PoolRole.DECODE, ready=4), 1000.0)
    d_slow, state = run(pool(slow_itl, 4, role=PoolRole.DECODE, ready=4), 1000.0)
    assert d_slow.desired_replicas > d_ok.desired_replicas
    assert state.pool("decode").itl_correction > 1.0


def test_burst_reserve_decays_with_half_life() -> None:
    slow = LatencyQuantiles(1.0, 3.0, 5.0)
    _, state = run(pool(window(1000.0, ttft=slow), 4, ready=4), 1000.0)
    need = state.pool("prefill").latency_need
    assert need == pytest.approx(6.0)
    assert state.pool("prefill").burst_peaks == ((1000.0, 6.0),)
    # 600 s later (one half-life), with healthy latency, the reserve still asks for 3.
    d, _ = run(pool(window(1600.0, req=1.0), 6), 1600.0, state)
    assert d.sizing.latency_replicas == 3


def test_burst_reserve_held_before_release_when_configured() -> None:
    held = AutoscalerSettings(burst_hold_s=900.0)
    slow = LatencyQuantiles(1.0, 3.0, 5.0)
    _, state = run(pool(window(1000.0, ttft=slow), 4, ready=4), 1000.0, settings=held)
    # Quiet for 900 s: the whole reserve is still there; one half-life later it is halved.
    d, state = run(pool(window(1900.0, req=1.0), 6), 1900.0, state, settings=held)
    assert d.sizing.latency_replicas == 6
    d, _ = run(pool(window(2500.0, req=1.0), 6), 2500.0, state, settings=held)
    assert d.sizing.latency_replicas == 3


def test_burst_reserve_keeps_only_peaks_that_can_matter() -> None:
    held = AutoscalerSettings(burst_hold_s=900.0)
    state = AutoscalerState()
    # Three bursts of falling size, then a larger one: the larger, newer peak replaces them all.
    for t, p90 in ((1000.0, 1.0), (1015.0, 0.8), (1030.0, 0.6)):
        _, state = run(
            pool(window(t, ttft=LatencyQuantiles(0.5, p90, p90)), 4, ready=4),
            t,
            state,
            settings=held,
        )
    peaks = state.pool("prefill").burst_peaks
    assert [t for t, _ in peaks] == [1000.0, 1015.0, 1030.0]
    assert [n for _, n in peaks] == sorted((n for _, n in peaks), reverse=True)
    _, state = run(
        pool(window(1045.0, ttft=LatencyQuantiles(1.0, 5.0, 5.0)), 4, ready=4),
        1045.0,
        state,
        settings=held,
    )
    assert state.pool("prefill").burst_peaks == ((1045.0, 6.0),)


def test_burst_reserve_is_forgotten_once_it_cannot_hold_a_replica() -> None:
    slow = LatencyQuantiles(1.0, 3.0, 5.0)
    _, state = run(pool(window(1000.0, ttft=slow), 4, ready=4), 1000.0)
    # Seven half-lives later 6 / 128 < 0.05 replicas remain: the peak is dropped from the state.
    d, state = run(pool(window(5200.0, req=1.0), 2), 5200.0, state)
    assert d.sizing.latency_replicas == 0
    assert state.pool("prefill").burst_peaks == ()


def test_state_without_burst_peaks_keeps_its_reserve() -> None:
    # A state written by a caller that only knows latency_need/latency_need_time (e.g. seeded by
    # the live loop) still gives that reserve, decayed from its time.
    legacy = AutoscalerState(
        pools=(PoolState(name="prefill", latency_need=8.0, latency_need_time=1000.0),)
    )
    d, state = run(pool(window(1600.0, req=1.0), 8), 1600.0, legacy)
    assert d.sizing.latency_replicas == 4
    assert state.pool("prefill").burst_peaks == ((1000.0, 8.0),)


def test_stale_data_after_a_burst_holds_and_keeps_the_reserve() -> None:
    held = AutoscalerSettings(burst_hold_s=900.0)
    slow = LatencyQuantiles(1.0, 3.0, 5.0)
    _, state = run(pool(window(1000.0, ttft=slow), 4, ready=4), 1000.0, settings=held)
    # Scrapes stop (newest sample 120 s old): hold at the current count, never down, and the
    # reserve survives the hold, so the first fresh scrape still asks for it.
    d, state = run(pool(window(1000.0, req=0.0), 6), 1120.0, state, settings=held)
    assert d.reason is ScalingReason.METRICS_STALE
    assert d.desired_replicas == 6
    assert state.pool("prefill").burst_peaks == ((1000.0, 6.0),)
    d, _ = run(pool(window(1135.0, req=1.0), 6), 1135.0, state, settings=held)
    assert d.sizing.latency_replicas == 6
    assert d.desired_replicas == 6


def test_flapping_latency_with_a_hold_never_scales_down_in_between() -> None:
    # Latency alternates between a violation and healthy every scrape for 10 minutes: the held
    # reserve keeps the burst's count instead of releasing and re-adding replicas.
    held = AutoscalerSettings(burst_hold_s=900.0)
    state = AutoscalerState()
    current = 4
    seen = []
    for k in range(40):
        now = 1000.0 + PERIOD * k
        ttft = LatencyQuantiles(1.0, 3.0, 5.0) if k % 2 == 0 else LatencyQuantiles(0.1, 0.2, 0.3)
        p = pool(window(now, ttft=ttft), current, ready=current)
        d, state = run(p, now, state, settings=held)
        seen.append(d.desired_replicas)
        current = d.desired_replicas
    assert all(b >= a for a, b in itertools.pairwise(seen))  # never down while it flaps
    assert len(state.pool("prefill").burst_peaks) <= 2
    # Latency that more replicas do not fix stops at 4x the 30k tok/s capacity need
    # (4 x 30k / 8.5k = 14.1 -> 15; the learned correction does not raise the cap) instead of
    # running to max_replicas.
    assert seen[:3] == [6, 6, 9]
    assert max(seen) == 15


def test_latency_guard_can_still_react_on_a_nearly_idle_pool() -> None:
    # 1 req/s (0.12 replicas of throughput) but a clump made p90 TTFT 3 s: the cap is taken
    # over at least one replica, so the pool may still grow to 1.5 x 2 ready = 3.
    slow = LatencyQuantiles(1.0, 3.0, 5.0)
    d, _ = run(pool(window(1000.0, req=1.0, ttft=slow), 2, ready=2), 1000.0)
    assert d.desired_replicas == 3
    assert d.reason is ScalingReason.SCALE_UP_LATENCY


def test_latency_need_does_not_compound_while_scale_up_pending() -> None:
    # The guard asks for 1.5x the *ready* replicas; replicas still starting do not count, so a
    # slow scrape while a scale-up is pending does not stack another 1.5x on top of it.
    slow = LatencyQuantiles(1.0, 3.0, 5.0)
    d, state = run(pool(window(1000.0, ttft=slow), 4, ready=4), 1000.0)
    assert d.desired_replicas == 6
    d, _ = run(pool(window(1015.0, ttft=slow), 6, ready=4), 1015.0, state)
    assert d.desired_replicas == 6


# --- hold on stale or missing data ---------------------------------------------------------


def test_stale_metrics_hold_and_never_scale_down() -> None:
    samples = window(1000.0, req=0.0)  # zero demand, but the newest sample is 120 s old
    d, _ = run(pool(samples, 6), 1120.0)
    assert d.reason is ScalingReason.METRICS_STALE
    assert d.desired_replicas == 6
    assert "hold at 6" in d.message


def test_missing_window_holds() -> None:
    d, _ = run(pool((), 6), 1000.0)
    assert d.reason is ScalingReason.METRICS_MISSING
    assert d.desired_replicas == 6


def test_missing_demand_metric_holds() -> None:
    samples = window(1000.0, req=0.0, prompt_token_rate=None)
    d, _ = run(pool(samples, 6), 1000.0)
    assert d.reason is ScalingReason.METRICS_MISSING
    assert d.desired_replicas == 6
    assert "prompt_token_rate" in d.message


def test_missing_data_never_goes_to_zero() -> None:
    d, _ = run(pool((), 0), 1000.0)
    assert d.desired_replicas == 1
    lenient = AutoscalerSettings(allow_scale_to_zero=True)
    d, _ = run(pool((), 0, lo=0), 1000.0, settings=lenient)
    assert d.desired_replicas == 1


def test_future_samples_are_ignored() -> None:
    samples = (sample(2000.0, req=500.0),)  # from "the future": clock skew must not drive scaling
    d, _ = run(pool(samples, 3), 1000.0)
    assert d.reason is ScalingReason.METRICS_MISSING
    assert d.desired_replicas == 3


def test_hold_delays_a_later_scale_down() -> None:
    _, state = run(pool((), 6), 1000.0)  # hold recorded at 6
    d, _ = run(pool(window(1015.0, req=1.0), 6), 1015.0, state)
    assert d.desired_replicas == 6
    assert d.reason is ScalingReason.SCALE_DOWN_STABILIZING


# --- damping: stabilization, flapping, step limits, bounds ---------------------------------


def test_scale_down_waits_for_stabilization_window_then_steps() -> None:
    state = AutoscalerState()
    current = 10
    d, state = run(pool(window(1000.0, req=85.0), current), 1000.0, state)
    assert d.desired_replicas == 10
    history: list[tuple[float, int]] = []
    for k in range(1, 60):
        now = 1000.0 + PERIOD * k
        d, state = run(pool(window(now, req=1.0), current), now, state)
        history.append((now - 1000.0, d.desired_replicas))
        current = d.desired_replicas
    first_drop = next(t for t, n in history if n < 10)
    assert first_drop >= 300.0  # HPA scaleDown.stabilizationWindowSeconds
    assert (first_drop, 5) in history  # at most halve per step
    drops = [b for a, b in itertools.pairwise(history) if b[1] < a[1]]
    assert all(b[0] - a[0] >= 60.0 for a, b in itertools.pairwise(drops))  # one step per 60 s
    assert history[-1][1] == 1  # min bound, never zero


def test_flapping_load_is_damped() -> None:
    state = AutoscalerState()
    current = 4
    changes = 0
    decreases = 0
    for k in range(80):  # 20 minutes of demand alternating 20 <-> 60 req/s every 15 s
        now = 1000.0 + PERIOD * k
        req = 60.0 if k % 2 else 20.0
        samples = tuple(
            sample(now - PERIOD * (11 - i), req=60.0 if (k - 11 + i) % 2 else 20.0)
            for i in range(12)
        )
        assert samples[-1].request_rate == req
        d, state = run(pool(samples, current), now, state)
        if d.desired_replicas != current:
            changes += 1
            decreases += d.desired_replicas < current
        current = d.desired_replicas
    assert decreases == 0  # the 300 s window holds the peak recommendation
    assert changes <= 2
    assert current == 8  # sized for the peaks: 60k / 8.5k = 7.1 -> 8


def test_step_limit_grows_by_double_or_four_per_period() -> None:
    state = AutoscalerState()
    current = 1
    seen = [current]
    for k in range(4):
        now = 1000.0 + PERIOD * k
        d, state = run(pool(window(now, req=170.0), current, hi=64), now, state)
        current = d.desired_replicas
        seen.append(current)
    assert seen == [1, 5, 10, 20, 20]  # need 170k / 8.5k = 20


def test_scale_up_limit_counts_changes_inside_the_period() -> None:
    settings = AutoscalerSettings(scale_up_period_s=60.0)
    state = AutoscalerState()
    d, state = run(pool(window(1000.0, req=170.0), 1), 1000.0, state, settings=settings)
    assert d.desired_replicas == 5
    d, state = run(pool(window(1015.0, req=170.0), 5), 1015.0, state, settings=settings)
    assert d.desired_replicas == 5  # still inside the 60 s period that started at 1 replica
    d, _ = run(pool(window(1060.0, req=170.0), 5), 1060.0, state, settings=settings)
    assert d.desired_replicas == 10


def test_max_bound_caps_scale_up() -> None:
    d, _ = run(pool(window(1000.0, req=170.0), 4, hi=6), 1000.0)
    assert d.desired_replicas == 6
    assert d.reason is ScalingReason.BOUNDED_MAX


def test_current_above_max_is_brought_down_to_max() -> None:
    d, _ = run(pool(window(1000.0), 9, hi=5), 1000.0)
    assert d.desired_replicas == 5
    assert d.reason is ScalingReason.BOUNDED_MAX


def test_min_bound_holds_idle_pool() -> None:
    d, _ = run(pool(window(1000.0, req=0.0), 3, lo=3), 1000.0)
    assert d.desired_replicas == 3
    assert d.reason is ScalingReason.BOUNDED_MIN


def test_min_bound_raises_pool_below_it() -> None:
    d, _ = run(pool(window(1000.0, req=0.0), 1, lo=2), 1000.0)
    assert d.desired_replicas == 2
    assert d.reason is ScalingReason.BOUNDED_MIN


def test_invalid_bounds_rejected() -> None:
    with pytest.raises(ValueError, match="max_replicas"):
        run(pool(window(1000.0), 1, lo=4, hi=2), 1000.0)


def test_settings_validate_bands() -> None:
    with pytest.raises(ValueError, match="scale_down_utilization"):
        AutoscalerSettings(target_utilization=0.6)
    assert AutoscalerSettings.model_fields["scale_down_stabilization_s"].default == 300.0


def test_every_setting_documents_its_source() -> None:
    for name, info in AutoscalerSettings.model_fields.items():
        assert info.description and "Source:" in info.description, name


# --- purity ----------------------------------------------------------------------------------


def test_decide_is_deterministic_and_state_is_explicit() -> None:
    inputs = ScalingInput(1000.0, SLO, (pool(window(1000.0, req=80.0), 4),))
    state = AutoscalerState()
    a = decide(inputs, state, SETTINGS)
    b = decide(inputs, state, SETTINGS)
    assert a == b
    assert state == AutoscalerState()  # the input state is a value, not mutated
    with pytest.raises(dataclasses.FrozenInstanceError):
        a[1].pools[0].ttft_correction = 2.0  # type: ignore[misc]


def test_pools_decided_independently_in_input_order() -> None:
    prefill = pool(window(1000.0, req=80.0), 4)
    decode = pool(window(1000.0, req=1.0), 1, role=PoolRole.DECODE)
    decision, state = decide(ScalingInput(1000.0, SLO, (prefill, decode)), AutoscalerState())
    assert [d.name for d in decision.pools] == ["prefill", "decode"]
    assert decision.pool("prefill").desired_replicas == 8
    assert decision.pool("decode").desired_replicas == 1
    assert {s.name for s in state.pools} == {"prefill", "decode"}


# --- properties ------------------------------------------------------------------------------

optional_rate = st.one_of(st.none(), st.floats(0.0, 1e6, allow_nan=False))
latency = st.one_of(
    st.none(),
    st.tuples(st.floats(0.0, 100.0), st.floats(0.0, 100.0), st.floats(0.0, 100.0)).map(
        lambda q: LatencyQuantiles(*sorted(q))
    ),
)


@st.composite
def random_sample(draw: st.DrawFn, now: float) -> MetricsSample:
    return MetricsSample(
        timestamp=now - draw(st.floats(-30.0, 400.0)),
        request_rate=draw(optional_rate),
        prompt_token_rate=draw(optional_rate),
        generation_token_rate=draw(optional_rate),
        num_waiting=draw(optional_rate),
        num_running=draw(optional_rate),
        ttft=draw(latency),
        itl=draw(latency),
        kv_cache_usage=draw(st.one_of(st.none(), st.floats(0.0, 1.0))),
        ready_replicas=draw(st.one_of(st.none(), st.integers(0, 50))),
    )


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    role=st.sampled_from(list(PoolRole)),
    current=st.integers(0, 40),
    lo=st.integers(0, 5),
    span=st.integers(0, 30),
    ready=st.one_of(st.none(), st.integers(0, 40)),
)
def test_decision_always_within_bounds_and_holds_without_fresh_data(
    data: st.DataObject, role: PoolRole, current: int, lo: int, span: int, ready: int | None
) -> None:
    now = 10_000.0
    samples = tuple(data.draw(st.lists(random_sample(now), max_size=15)))
    p = pool(samples, current, role=role, lo=lo, hi=max(lo, 1) + span, ready=ready)
    d, state = run(p, now)
    assert max(lo, 1) <= d.desired_replicas <= max(lo, 1) + span  # never zero, never past max
    assert d.message.startswith(p.name)
    assert state.pool(p.name).last_update == now
    if d.reason in (ScalingReason.METRICS_MISSING, ScalingReason.METRICS_STALE):
        assert d.desired_replicas >= min(current, max(lo, 1) + span)  # holds never scale down


@settings(max_examples=200, deadline=None)
@given(
    ticks=st.lists(st.tuples(st.floats(0.0, 120.0), st.floats(0.0, 20.0)), min_size=1, max_size=40),
    hold=st.sampled_from([0.0, 300.0, 900.0]),
)
def test_burst_peaks_stay_small_ordered_and_the_reserve_only_falls_when_quiet(
    ticks: list[tuple[float, float]], hold: float
) -> None:
    cfg = AutoscalerSettings(burst_hold_s=hold)
    state = AutoscalerState()
    now = 1000.0
    for gap, p90 in ticks:
        now += gap + 1.0
        ttft = LatencyQuantiles(min(p90, 0.1), p90, p90)
        _, state = run(pool(window(now, ttft=ttft), 4, ready=4), now, state, settings=cfg)
        peaks = state.pool("prefill").burst_peaks
        times = [t for t, _ in peaks]
        needs = [n for _, n in peaks]
        assert times == sorted(times) and len(set(times)) == len(times)
        assert needs == sorted(needs, reverse=True) and len(set(needs)) == len(needs)
        assert all(0.0 < n <= 4 * cfg.latency_max_step for n in needs)
    # From here on, with healthy latency, the reserve never rises.
    reserve = state.pool("prefill").latency_need
    for k in range(1, 10):
        t = now + 300.0 * k
        _, state = run(pool(window(t, req=1.0), 4, ready=4), t, state, settings=cfg)
        assert state.pool("prefill").latency_need <= reserve + 1e-9
        reserve = state.pool("prefill").latency_need
