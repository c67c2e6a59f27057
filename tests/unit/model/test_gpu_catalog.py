"""GPU catalogue: required types, MIG names matching the device plugin's, sane power and speed
figures, and user extension through a YAML file."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.model.gpus import MEMORY_SLICES, load_catalog
from gpufleet.model.mig_profiles import MIG_PROFILES_BY_MEMORY_CLASS

CATALOG = load_catalog()
REQUIRED = (
    "T4", "L4", "A10", "V100-32GB", "A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB",
)  # fmt: skip


@pytest.mark.parametrize("name", REQUIRED)
def test_required_types_are_present_with_sane_power(name: str) -> None:
    gpu = CATALOG[name]
    assert gpu.power.idle_w < gpu.power.tdp_w
    assert gpu.power.cap_min_w <= gpu.power.cap_max_w <= gpu.power.tdp_w
    assert gpu.memory_gb > 0 and gpu.relative_throughput > 0


@pytest.mark.parametrize(
    ("name", "mig_class"),
    [
        ("A100-40GB", "40gb"),
        ("A100-80GB", "80gb"),
        ("H100-80GB", "80gb"),
        ("H200-141GB", "141gb"),
    ],
)
def test_mig_profile_names_are_exactly_the_device_plugin_names(name: str, mig_class: str) -> None:
    gpu = CATALOG[name]
    assert gpu.mig_class == mig_class
    assert tuple(p.name for p in gpu.mig_profiles) == MIG_PROFILES_BY_MEMORY_CLASS[mig_class]


def test_every_catalogue_profile_name_is_known_to_mig_profiles() -> None:
    known = {n for names in MIG_PROFILES_BY_MEMORY_CLASS.values() for n in names}
    used = {p.name for gpu in CATALOG for p in gpu.mig_profiles}
    assert used <= known


@pytest.mark.parametrize("name", ["T4", "L4", "A10", "V100-32GB"])
def test_non_mig_types_have_no_profiles(name: str) -> None:
    assert not CATALOG[name].mig_capable


@pytest.mark.parametrize(
    ("profile", "slices", "starts", "max_instances"),
    [
        ("1g.10gb", 1, (0, 1, 2, 3, 4, 5, 6), 7),
        ("1g.10gb+me", 1, (0, 1, 2, 3, 4, 5, 6), 1),
        ("1g.20gb", 2, (0, 2, 4, 6), 4),
        ("2g.20gb", 2, (0, 2, 4), 3),
        ("3g.40gb", 4, (0, 4), 2),
        ("4g.40gb", 4, (0,), 1),
        ("7g.80gb", 8, (0,), 1),
    ],
)
def test_h100_placements_match_the_mig_user_guide(
    profile: str, slices: int, starts: tuple[int, ...], max_instances: int
) -> None:
    p = CATALOG["H100-80GB"].mig_profile(profile)
    assert (p.memory_slices, p.starts, p.max_instances) == (slices, starts, max_instances)
    assert all(s + p.memory_slices <= MEMORY_SLICES for s in p.starts)


def test_relative_speed_follows_the_reference_ordering() -> None:
    order = ["T4", "L4", "A10", "V100-32GB", "A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB"]
    speeds = [CATALOG[n].relative_throughput for n in order]
    assert speeds == sorted(speeds)
    assert CATALOG["V100-32GB"].relative_throughput == 1.0


def test_unknown_type_lookup_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="H100-80GB"):
        CATALOG["B200"]


def test_user_yaml_adds_and_overrides_types(tmp_path: Path) -> None:
    extra = tmp_path / "extra.yaml"
    extra.write_text(
        "gpu_types:\n"
        "  - {name: B200, memory_gb: 192, idle_w: 120, tdp_w: 1000, power_cap_w: [200, 1000],\n"
        "     relative_throughput: 9.0, nvlink_domain_size: 8}\n"
        "  - {name: T4, memory_gb: 16, idle_w: 10, tdp_w: 70, relative_throughput: 0.4}\n"
        "  - {name: H100-94GB, memory_gb: 94, idle_w: 70, tdp_w: 400,\n"
        "     relative_throughput: 3.5, mig_class: 94gb}\n",
        encoding="utf-8",
    )
    catalog = load_catalog(extra)
    assert catalog["B200"].relative_throughput == 9.0
    assert catalog["T4"].relative_throughput == 0.4  # replaced by name
    assert catalog["H100-94GB"].mig_profile("3g.47gb").starts == (0, 4)
    assert set(REQUIRED) <= set(catalog.names)


def test_mig_names_that_differ_from_the_device_plugin_are_rejected(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "mig_classes:\n"
        "  80gb: [1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.81gb]\n"
        "gpu_types:\n"
        "  - {name: X, memory_gb: 80, idle_w: 60, tdp_w: 400, relative_throughput: 1,\n"
        "     mig_class: 80gb}\n",
        encoding="utf-8",
    )
    with pytest.raises(ValueError, match=r"names must be 1g\.10gb"):
        load_catalog(bad)
