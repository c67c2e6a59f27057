"""Power model: active watts between idle and TDP, caps that respect the slowdown bound and the
settable range, and energy per unit of work."""

from __future__ import annotations

import pytest

from gpufleet.model.gpus import load_catalog
from gpufleet.model.power import (
    active_power_w,
    choose_power_cap,
    energy_per_work,
    speed_factor,
)

CATALOG = load_catalog()


@pytest.mark.parametrize("name", CATALOG.names)
def test_active_power_lies_between_idle_and_tdp(name: str) -> None:
    gpu = CATALOG[name]
    assert active_power_w(gpu, 0.0) == gpu.power.idle_w
    assert active_power_w(gpu, 1.0) == gpu.power.tdp_w
    assert gpu.power.idle_w < active_power_w(gpu) < gpu.power.tdp_w


@pytest.mark.parametrize("slowdown", [0.05, 0.1, 0.2])
@pytest.mark.parametrize("name", ["A10", "A100-80GB", "H100-80GB", "H200-141GB"])
def test_cap_keeps_slowdown_within_bound_and_in_range(name: str, slowdown: float) -> None:
    gpu = CATALOG[name]
    choice = choose_power_cap(gpu, slowdown)
    assert choice is not None
    assert gpu.power.cap_min_w <= choice.cap_w <= gpu.power.cap_max_w
    assert choice.speed_factor >= 1 - slowdown - 1e-9
    assert choice.power_w < active_power_w(gpu)
    # Capping saves more power than it costs speed: energy per unit of work drops.
    assert energy_per_work(gpu, 1.0, choice.cap_w) < energy_per_work(gpu, 1.0)


@pytest.mark.parametrize("name", ["T4", "L4", "V100-32GB"])
def test_types_without_a_settable_range_get_no_cap(name: str) -> None:
    assert choose_power_cap(CATALOG[name], 0.1) is None


def test_no_cap_means_full_speed() -> None:
    assert speed_factor(CATALOG["H100-80GB"], None) == 1.0
    assert choose_power_cap(CATALOG["H100-80GB"], 0.0) is None
