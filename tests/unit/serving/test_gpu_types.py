"""Unit tests of roofline replica profiles for the catalogue's GPU types.

Aspects under test: catalogue GPU types resolving to roofline profiles, and the fallback to the
pool's profile for a missing, MIG-slice, unknown or too-small type, logged once per type.
"""

from __future__ import annotations

import logging

import pytest

from gpufleet.model.gpus import load_catalog
from gpufleet.sim.serving.profiles import (
    CATALOG_GPU_SPECS,
    GPU_SPECS,
    GpuTypeProfiles,
    LlmSpec,
    ReplicaProfile,
    replica_profile,
)

A100 = replica_profile("A100-SXM-80GB")
H100 = replica_profile("H100-SXM-80GB")
L4 = replica_profile("L4-24GB")


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
