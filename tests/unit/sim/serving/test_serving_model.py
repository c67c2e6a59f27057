"""Unit tests of the disaggregated serving model, its trace loader, replay loop and exporter.

Aspects under test: conservation (every request finishes exactly once; token counters add up),
TTFT rising when prefill is under-provisioned, ITL rising with decode batch, cold start and
draining (scale-down never aborts a request), determinism, metric samples the policy consumes,
the Azure code trace loader, the policy driving both pools up under a burst and back down, and
the vLLM-compatible exporter on loopback.
"""

from __future__ import annotations

import itertools
import math
import urllib.request
from pathlib import Path

import pytest

from gpufleet.core.autoscaling import ScalingReason, Slo
from gpufleet.sim.serving import (
    PolicyController,
    PoolBounds,
    ServingConfig,
    ServingModel,
    StaticController,
    TraceError,
    load_azure_code_trace,
    poisson_requests,
    replay,
    replica_profile,
)
from gpufleet.sim.serving.exporter import LOOPBACK, RealtimeDriver, ServingExporter
from gpufleet.sim.traces.common import default_data_dir

AZURE_CODE = "azure-llm-2023-code.csv"
PROFILE = replica_profile("H100-SXM-80GB")


def config(prefill: int = 1, decode: int = 1, cold_start_s: float = 60.0) -> ServingConfig:
    return ServingConfig.of(PROFILE, prefill, decode, cold_start_s)


def run_static(requests, prefill: int, decode: int = 1) -> ServingModel:  # type: ignore[no-untyped-def]
    model = ServingModel(config(prefill, decode), requests)
    replay(model, StaticController({"prefill": prefill, "decode": decode}))
    return model


def p90(values: list[float]) -> float:
    values = sorted(values)
    return values[math.ceil(0.9 * len(values)) - 1]


def test_every_request_finishes_exactly_once_and_tokens_add_up() -> None:
    requests = poisson_requests(20.0, 120.0, prompt_tokens=1500, output_tokens=40, seed=3)
    model = run_static(requests, prefill=2)
    outcomes = model.outcomes()
    assert len(requests) > 2000
    assert sorted(o.id for o in outcomes) == [r.id for r in requests]
    assert model.done()
    pre, dec = model.snapshot("prefill"), model.snapshot("decode")
    assert pre.request_success_total == len(requests)
    assert dec.request_success_total == len(requests)
    assert pre.prompt_tokens_total == sum(r.prompt_tokens for r in requests)
    total_generated = pre.generation_tokens_total + dec.generation_tokens_total
    assert total_generated == sum(r.output_tokens for r in requests)
    assert pre.num_running == pre.num_waiting == dec.num_running == dec.num_waiting == 0
    for o in outcomes:
        assert o.ttft_s > 0 and o.finish_s >= o.arrival_s + o.ttft_s


def test_single_output_token_requests_finish_at_prefill() -> None:
    requests = poisson_requests(5.0, 20.0, prompt_tokens=100, output_tokens=1, seed=1)
    model = run_static(requests, prefill=1)
    assert len(model.outcomes()) == len(requests)
    assert all(o.tpot_s == 0.0 for o in model.outcomes())


def test_ttft_rises_when_prefill_is_under_provisioned() -> None:
    # 20 req/s x 2,000 tokens = 40k tok/s against ~24.7k tok/s per H100 replica.
    requests = poisson_requests(20.0, 120.0, prompt_tokens=2000, output_tokens=20, seed=7)
    short = run_static(requests, prefill=1).outcomes()
    ample = run_static(requests, prefill=4).outcomes()
    assert p90([o.ttft_s for o in short]) > 10 * p90([o.ttft_s for o in ample])
    assert p90([o.ttft_s for o in ample]) < 0.5
    slo = (0.5, 0.05)
    assert sum(o.meets(*slo) for o in short) < sum(o.meets(*slo) for o in ample)


def test_itl_rises_with_decode_batch() -> None:
    requests = poisson_requests(40.0, 60.0, prompt_tokens=500, output_tokens=400, seed=5)
    one = run_static(requests, prefill=4, decode=1).outcomes()
    four = run_static(requests, prefill=4, decode=4).outcomes()
    assert p90([o.tpot_s for o in one]) > p90([o.tpot_s for o in four])
    assert p90([o.tpot_s for o in four]) >= PROFILE.decode_itl_base_s


def test_cold_start_and_draining() -> None:
    requests = poisson_requests(30.0, 200.0, prompt_tokens=2000, output_tokens=20, seed=11)
    model = ServingModel(config(prefill=1, cold_start_s=60.0), requests)
    model.advance_to(10.0)
    model.set_replicas("prefill", 3)
    assert model.replicas("prefill") == 3
    model.advance_to(69.0)
    assert model.ready_replicas("prefill") == 1  # still pulling weights
    model.advance_to(71.0)
    assert model.ready_replicas("prefill") == 3
    model.set_replicas("prefill", 1)  # scale down mid-burst: drained, not aborted
    assert model.replicas("prefill") == 1
    model.advance_to(10_000.0)
    assert model.done()
    assert len(model.outcomes()) == len(requests)
    # Billed: 1 replica all along + 2 from t=10 until drained shortly after t=71.
    extra = model.gpu_seconds("prefill") - model.now
    assert 2 * 61.0 <= extra < 2 * 75.0


def test_cancelled_starting_replica_is_not_billed_further() -> None:
    model = ServingModel(config(prefill=1), ())
    model.set_replicas("prefill", 2)
    model.advance_to(30.0)
    model.set_replicas("prefill", 1)
    model.advance_to(100.0)
    assert model.ready_replicas("prefill") == 1
    assert model.gpu_seconds("prefill") == pytest.approx(100.0 + 30.0)


def test_model_is_deterministic() -> None:
    requests = poisson_requests(25.0, 60.0, prompt_tokens=1200, output_tokens=30, seed=2)
    assert run_static(requests, 2).outcomes() == run_static(requests, 2).outcomes()
    assert poisson_requests(3.0, 10.0, seed=9) == poisson_requests(3.0, 10.0, seed=9)


def test_sample_reports_rates_queue_and_latency() -> None:
    requests = poisson_requests(20.0, 60.0, prompt_tokens=2000, output_tokens=50, seed=4)
    model = ServingModel(config(prefill=1), requests)
    model.advance_to(30.0)
    s = model.sample("prefill")
    assert s.timestamp == 30.0
    assert s.request_rate == pytest.approx(20.0, rel=0.25)
    assert s.prompt_token_rate is not None and s.prompt_token_rate <= PROFILE.prefill_tokens_per_s
    assert s.num_waiting is not None and s.num_waiting > 50  # 40k tok/s demand on one replica
    assert s.ttft is not None and s.ttft.p90 > 1.0
    d = model.sample("decode")
    assert d.itl is not None and d.itl.p50 >= PROFILE.decode_itl_base_s
    assert d.generation_token_rate is not None and d.generation_token_rate > 0
    again = model.sample("prefill")  # interval restarts: nothing new happened
    assert again.request_rate == 0.0 and again.ttft is None


def test_policy_scales_both_pools_up_under_burst_and_back_down() -> None:
    # 2 req/s, a 3-minute burst at 40 req/s of long generations, then quiet again.
    schedule = [(0.0, 2.0), (300.0, 40.0), (480.0, 2.0)]
    requests = poisson_requests(schedule, 1500.0, prompt_tokens=2000, output_tokens=300, seed=8)
    model = ServingModel(config(prefill=1, decode=1, cold_start_s=30.0), requests)
    bounds = {"prefill": PoolBounds(1, 16), "decode": PoolBounds(1, 16)}
    controller = PolicyController(model, Slo(0.5, 0.05), bounds)
    result = replay(model, controller)
    assert result.unfinished == 0
    peak = {pool: max(n for _, p, n in result.timeline if p == pool) for pool in bounds}
    assert peak["prefill"] >= 3 and peak["decode"] >= 2
    final = {pool: [n for _, p, n in result.timeline if p == pool][-1] for pool in bounds}
    assert final["prefill"] < peak["prefill"] and final["decode"] < peak["decode"]
    reasons = {d.reason for d in controller.decisions}
    assert ScalingReason.SCALE_DOWN in reasons
    assert any(r.value.startswith("scale_up") for r in reasons)
    assert all(d.message for d in controller.decisions)


def test_azure_code_trace_loader() -> None:
    # Found as every other trace is ($GPUFLEET_DATA_DIR first): from a checkout that is not
    # next to the shared data (a git worktree) only this test failed.
    trace = default_data_dir() / "traces" / AZURE_CODE
    requests = load_azure_code_trace(trace)
    assert len(requests) == 8819
    assert requests[0].arrival_s == 0.0
    assert all(a.arrival_s <= b.arrival_s for a, b in itertools.pairwise(requests))
    assert requests[-1].arrival_s == pytest.approx(3435.948, abs=0.01)
    mean_isl = sum(r.prompt_tokens for r in requests) / len(requests)
    assert 2000 < mean_isl < 2100  # data.md: ISL mean 2,048
    compressed = load_azure_code_trace(trace, time_scale=10.0, start_s=600.0, duration_s=60.0)
    assert 0 < len(compressed) < len(requests)
    assert compressed[-1].arrival_s < 6.0


def test_trace_loader_rejects_bad_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("time,prompt\n1,2\n")
    with pytest.raises(TraceError, match=r"bad\.csv:1: TIMESTAMP: missing column"):
        load_azure_code_trace(bad)
    worse = tmp_path / "worse.csv"
    worse.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.1,abc,3\n")
    with pytest.raises(TraceError, match=r"worse\.csv:2: ContextTokens: .abc. is not an integer"):
        load_azure_code_trace(worse)


def test_exporter_serves_current_vllm_names_on_loopback() -> None:
    requests = poisson_requests(10.0, 30.0, prompt_tokens=1000, output_tokens=20, seed=6)
    model = ServingModel(config(), requests)
    with ServingExporter(model) as exporter:
        with exporter.lock:
            model.advance_to(20.0)
        texts = {}
        for pool, endpoint in exporter.endpoints.items():
            assert endpoint.host == LOOPBACK
            with urllib.request.urlopen(endpoint.url, timeout=5) as response:
                texts[pool] = response.read().decode()
    pre = texts["prefill"]
    for name in (
        "vllm:num_requests_running{",
        "vllm:num_requests_waiting{",
        "vllm:kv_cache_usage_perc{",
        "vllm:prompt_tokens_total{",
        "vllm:generation_tokens_total{",
        "vllm:request_success_total{",
        "vllm:time_to_first_token_seconds_bucket{",
        "vllm:inter_token_latency_seconds_bucket{",
        "vllm:request_queue_time_seconds_bucket{",
        "vllm:request_prefill_time_seconds_bucket{",
    ):
        assert name in pre and name in texts["decode"], name
    assert 'role="prefill"' in pre and 'role="decode"' in texts["decode"]
    assert "gpu_cache_usage_perc" not in pre and "time_per_output_token" not in pre
    snap = model.snapshot("prefill")
    line = next(x for x in pre.splitlines() if x.startswith("vllm:prompt_tokens_total{"))
    assert float(line.rsplit(" ", 1)[1]) == snap.prompt_tokens_total


def test_realtime_driver_follows_injected_clock_and_replicas() -> None:
    requests = poisson_requests(10.0, 60.0, prompt_tokens=500, output_tokens=10, seed=12)
    model = ServingModel(config(), requests)
    exporter = ServingExporter(model)
    clock = [100.0]
    wanted = {"prefill": 3, "decode": 1}
    driver = RealtimeDriver(
        model, exporter.lock, speed=10.0, replicas=lambda: wanted, clock=lambda: clock[0]
    )
    driver.anchor()  # what start() does before its thread runs step() every tick
    clock[0] = 102.0  # 2 s of wall time at 10x -> 20 s simulated
    assert driver.step() == pytest.approx(20.0)
    assert model.replicas("prefill") == 3
    assert model.sample("prefill").request_rate == pytest.approx(10.0, rel=0.4)
