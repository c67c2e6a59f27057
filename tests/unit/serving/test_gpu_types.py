"""Unit tests of per-replica GPU types in the serving model.

Aspects under test: catalogue GPU types resolving to roofline profiles (and the fallback to the
pool's profile for a missing, MIG-slice, unknown or too-small type, logged once per type); a
pool mixing types, where each replica prefills, decodes and bills at its own profile; converging
a pool to a multiset of profiles (adding, draining and un-draining replicas of one type only);
`set_replicas` keeping the pool's profile; KV usage as used over capacity across mixed replicas.
"""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from gpufleet.core.autoscaling import PoolRole
from gpufleet.model.gpus import load_catalog
from gpufleet.sim.serving.model import PoolConfig, ServingConfig, ServingModel
from gpufleet.sim.serving.profiles import (
    CATALOG_GPU_SPECS,
    GPU_SPECS,
    GpuTypeProfiles,
    LlmSpec,
    ReplicaProfile,
    replica_profile,
)
from gpufleet.sim.serving.trace import Request

A100 = replica_profile("A100-SXM-80GB")
H100 = replica_profile("H100-SXM-80GB")
L4 = replica_profile("L4-24GB")


def config(prefill: int = 0, decode: int = 0, cold_start_s: float = 0.0) -> ServingConfig:
    return ServingConfig(
        prefill=PoolConfig("prefill", PoolRole.PREFILL, A100, prefill),
        decode=PoolConfig("decode", PoolRole.DECODE, A100, decode),
        cold_start_s=cold_start_s,
    )


# --- catalogue types -> profiles ---------------------------------------------------------------


def test_catalogue_types_map_to_roofline_specs() -> None:
    assert CATALOG_GPU_SPECS["H100-80GB"] == "H100-SXM-80GB"
    assert CATALOG_GPU_SPECS["A100-80GB"] == "A100-SXM-80GB"
    assert CATALOG_GPU_SPECS["H200-141GB"] == "H200-SXM-141GB"
    catalog = load_catalog()
    for gpu_type, spec in CATALOG_GPU_SPECS.items():
        assert gpu_type in catalog
        assert GPU_SPECS[spec].memory_gb == catalog[gpu_type].memory_gb
    # No BF16 tensor cores, so no BF16 roofline: these fall back.
    assert "V100-32GB" not in CATALOG_GPU_SPECS and "T4" not in CATALOG_GPU_SPECS


def test_resolve_gives_the_landed_type_and_keeps_the_pool_profile_for_its_own_type() -> None:
    profiles = GpuTypeProfiles()
    assert profiles.resolve("H100-80GB", A100) == H100
    assert profiles.resolve("A100-80GB", A100) is A100
    assert profiles.resolve("L4", A100) == L4
    two = replica_profile("A100-SXM-80GB", gpus=2)
    assert profiles.resolve("H100-80GB", two) == replica_profile("H100-SXM-80GB", gpus=2)


@pytest.mark.parametrize(
    ("gpu_type", "level"),
    [
        pytest.param(None, logging.INFO, id="no-type-or-mig"),
        pytest.param("V100-32GB", logging.INFO, id="no-bf16-spec"),
        pytest.param("B200-192GB", logging.INFO, id="not-in-catalogue"),
    ],
)
def test_types_without_a_profile_fall_back_and_log_once(
    gpu_type: str | None, level: int, caplog: pytest.LogCaptureFixture
) -> None:
    profiles = GpuTypeProfiles()
    with caplog.at_level(logging.INFO, logger="gpufleet.sim.serving.profiles"):
        for _ in range(3):
            assert profiles.resolve(gpu_type, A100) is A100
    assert [r.levelno for r in caplog.records] == [level]


def test_a_model_too_big_for_the_type_falls_back_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    big = LlmSpec("llama-70b", params_b=70.0, kv_bytes_per_token=80 * 8 * 128 * 2 * 2)
    pool = replica_profile("H200-SXM-141GB", big, gpus=2)

    def build(spec: str, gpus: int) -> ReplicaProfile:
        return replica_profile(spec, big, gpus=gpus)

    profiles = GpuTypeProfiles(build)
    with caplog.at_level(logging.INFO, logger="gpufleet.sim.serving.profiles"):
        assert profiles.resolve("L4", pool) is pool  # 140 GB of weights on 2 x 24 GB
        assert profiles.resolve("L4", pool) is pool
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "does not fit" in caplog.records[0].getMessage()


# --- mixed pools in the model ------------------------------------------------------------------


def ttft_on(profile: ReplicaProfile) -> float:
    model = ServingModel(config(decode=1), [Request(0, 1.0, 8000, 2)])
    model.set_replica_profiles("prefill", [profile])
    model.advance_to(100.0)
    (outcome,) = model.outcomes()
    return outcome.ttft_s


def test_an_h100_replica_prefills_faster_than_an_a100_one() -> None:
    h100, a100 = ttft_on(H100), ttft_on(A100)
    assert h100 == pytest.approx(H100.prefill_time(8000))
    assert a100 == pytest.approx(A100.prefill_time(8000))
    assert h100 < a100 / 3  # 989 vs 312 dense BF16 TFLOP/s


def test_each_replica_of_a_mixed_pool_runs_at_its_own_speed() -> None:
    # Two long prompts at once: the lower replica id (H100, added first) takes the first.
    requests = [Request(0, 1.0, 8000, 2), Request(1, 1.0, 8000, 2)]
    model = ServingModel(config(decode=1), requests)
    model.set_replica_profiles("prefill", [H100, A100])
    model.advance_to(100.0)
    ttft = {o.id: o.ttft_s for o in model.outcomes()}
    assert ttft[0] == pytest.approx(H100.prefill_time(8000))
    assert ttft[1] == pytest.approx(A100.prefill_time(8000))


def test_decode_itl_follows_the_replica_type() -> None:
    def tpot(profile: ReplicaProfile) -> float:
        model = ServingModel(config(prefill=1), [Request(0, 0.0, 1000, 50)])
        model.set_replica_profiles("decode", [profile])
        model.advance_to(100.0)
        return model.outcomes()[0].tpot_s

    assert tpot(H100) < tpot(A100) < tpot(L4)


def test_profiles_converge_per_type_and_draining_removes_that_type() -> None:
    model = ServingModel(config(decode=1), [Request(0, 1.0, 60_000, 2)])
    model.set_replica_profiles("prefill", [A100, H100, H100])
    assert Counter(model.replica_profiles("prefill")) == Counter({A100: 1, H100: 2})
    model.advance_to(1.0)  # the A100 (lowest id) takes the long prompt; both H100s stay idle
    model.set_replica_profiles("prefill", [H100, H100])  # the busy A100 is drained, not an H100
    assert model.replica_profiles("prefill") == (H100, H100)
    model.set_replica_profiles("prefill", [H100])
    assert model.replica_profiles("prefill") == (H100,)
    assert model.ready_replicas("prefill") == 1
    model.advance_to(100.0)
    assert len(model.outcomes()) == 1  # the drained A100 finished its request


def test_a_draining_replica_of_the_wanted_type_is_undrained_first() -> None:
    model = ServingModel(config(cold_start_s=60.0), [Request(0, 0.0, 60_000, 2)])
    model.set_replica_profiles("prefill", [H100, A100])
    model.advance_to(61.0)  # both ready; the H100 holds the long prompt
    model.set_replica_profiles("prefill", [A100])
    assert model.ready_replicas("prefill") == 1  # the H100 drains
    model.set_replica_profiles("prefill", [H100, A100])
    # Warm again at once: un-drained, not a new replica that would pull weights for 60 s.
    assert model.ready_replicas("prefill") == 2
    assert Counter(model.replica_profiles("prefill")) == Counter({A100: 1, H100: 1})


def test_replicas_bill_their_own_gpus() -> None:
    two = replica_profile("H100-SXM-80GB", gpus=2)
    model = ServingModel(config(), ())
    model.set_replica_profiles("decode", [A100, two])
    model.advance_to(10.0)
    assert model.gpu_seconds("decode") == pytest.approx(10.0 * (1 + 2))


def test_set_replicas_keeps_the_pool_profile() -> None:
    model = ServingModel(config(prefill=1), ())
    model.set_replica_profiles("prefill", [A100, H100])
    model.set_replicas("prefill", 3)  # adds one at the pool's profile
    assert Counter(model.replica_profiles("prefill")) == Counter({A100: 2, H100: 1})
    model.set_replicas("prefill", 0)
    assert model.replica_profiles("prefill") == ()


def test_kv_usage_is_used_over_capacity_across_mixed_replicas() -> None:
    model = ServingModel(config(prefill=1), [Request(0, 0.0, 1000, 10_000)])
    model.set_replica_profiles("decode", [A100, L4])
    model.advance_to(5.0)  # decoding on one replica; the other is idle
    used = 1000 + 10_000  # the whole sequence is reserved on admission
    want = used / (A100.kv_cache_tokens + L4.kv_cache_tokens)
    assert model.snapshot("decode").kv_cache_usage == pytest.approx(want)
    assert model.sample("decode").kv_cache_usage == pytest.approx(want)
