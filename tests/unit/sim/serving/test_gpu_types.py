"""Unit tests of per-replica GPU types in the serving model and the live simulator.

Aspects under test: catalogue GPU types resolving to roofline profiles (and the fallback to the
pool's profile for a missing, MIG-slice, unknown or too-small type, logged once per type); a
pool mixing types, where each replica prefills, decodes and bills at its own profile; converging
a pool to a multiset of profiles (adding, draining and un-draining replicas of one type only);
`set_replicas` keeping the pool's profile; KV usage as used over capacity across mixed replicas;
the driver applying profiles; and the pod list -> GPU types function behind the live simulator.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pytest

from gpufleet.model.contract.names import ASSIGNED_MIG, ASSIGNED_TYPE, POOL_LABEL, SERVINGJOB_LABEL
from gpufleet.model.gpus import load_catalog
from gpufleet.sim.serving.exporter import RealtimeDriver, ServingExporter
from gpufleet.sim.serving.live import LiveServingSim, ready_gpu_types_by_pool, ready_pods_by_pool
from gpufleet.sim.serving.model import ServingConfig, ServingModel
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
    return ServingConfig.of(A100, prefill, decode, cold_start_s)


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


def test_driver_applies_replica_profiles() -> None:
    model = ServingModel(config(), ())
    exporter = ServingExporter(model)
    wanted = {"prefill": [H100, A100], "decode": [L4]}
    driver = RealtimeDriver(
        model, exporter.lock, replica_profiles=lambda: wanted, clock=lambda: 0.0
    )
    driver.anchor()
    driver.step()
    assert Counter(model.replica_profiles("prefill")) == Counter({H100: 1, A100: 1})
    assert model.replica_profiles("decode") == (L4,)
    with pytest.raises(ValueError, match="not both"):
        RealtimeDriver(model, exporter.lock, replicas=lambda: {}, replica_profiles=lambda: wanted)


# --- pods -> GPU types -------------------------------------------------------------------------


def api_pod(
    pool: str,
    gpu_type: str | None = None,
    *,
    mig: str | None = None,
    phase: str = "Running",
    ready: bool = True,
    deleting: bool = False,
) -> dict[str, Any]:
    annotations = {} if gpu_type is None else {ASSIGNED_TYPE: gpu_type}
    if mig is not None:
        annotations[ASSIGNED_MIG] = mig
    meta: dict[str, Any] = {
        "labels": {SERVINGJOB_LABEL: "job", POOL_LABEL: pool},
        "annotations": annotations,
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    condition = {"type": "Ready", "status": str(ready)}
    return {"metadata": meta, "status": {"phase": phase, "conditions": [condition]}}


PODS = [
    api_pod("prefill", "H100-80GB"),
    api_pod("prefill", "A100-80GB"),
    api_pod("prefill", "H100-80GB", deleting=True),  # draining
    api_pod("prefill", "H100-80GB", ready=False),  # not Ready yet
    api_pod("prefill", "A100-80GB", mig="3g.40gb@4"),  # a slice: its type is not its speed
    api_pod("decode", None),  # not placed by gpufleet
    api_pod("decode", "L4"),
    api_pod("decode", "T4", phase="Pending", ready=False),
    api_pod("other", "H100-80GB"),
]


def test_ready_pods_give_their_gpu_types_per_pool() -> None:
    assert ready_gpu_types_by_pool(PODS, ["prefill", "decode"]) == {
        "prefill": ["H100-80GB", "A100-80GB", None],
        "decode": [None, "L4"],
    }
    assert ready_pods_by_pool(PODS, ["prefill", "decode"]) == {"prefill": 3, "decode": 2}


def test_live_sim_replicas_run_at_the_type_their_pod_landed_on() -> None:
    selectors: list[str] = []

    def pods(selector: str) -> list[dict[str, Any]]:
        selectors.append(selector)
        return PODS

    sim = LiveServingSim(pods, "ns", "job", config(), [Request(0, 1000.0, 100, 2)], poll_s=60.0)
    with sim:
        assert sim.observed_replicas() == {"prefill": 3, "decode": 2}
        assert sim.observed_gpu_types()["decode"] == [None, "L4"]
        with sim.exporter.lock:  # start() applied the first poll before returning
            prefill = Counter(sim.model.replica_profiles("prefill"))
            decode = Counter(sim.model.replica_profiles("decode"))
    assert prefill == Counter({H100: 1, A100: 2})  # the MIG pod falls back to the pool's A100
    assert selectors[0] == f"{SERVINGJOB_LABEL}=job,{POOL_LABEL} in (decode,prefill)"
    assert decode == Counter({A100: 1, L4: 1})
