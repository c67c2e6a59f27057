"""Shared fixtures of the simulator tests: the real data directory and small fleets."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.model.fleet import FleetSpec, NodePoolSpec
from gpufleet.model.gpus import Catalog, load_catalog
from gpufleet.sim.gavel_profiles import GavelProfile
from gpufleet.sim.traces.common import default_data_dir


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return default_data_dir()


@pytest.fixture(scope="session")
def profile(data_dir: Path) -> GavelProfile:
    return GavelProfile.load(data_dir / "profiles" / "gavel_simulation_throughputs.json")


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog()


def make_v100_fleet(nodes: int = 1, gpus: int = 2) -> FleetSpec:
    """A tiny homogeneous V100 fleet (relative speed 1.0, so run time = work)."""
    return FleetSpec(
        node_pools=[NodePoolSpec(name="v", count=nodes, gpu_type="V100-32GB", gpus_per_node=gpus)]
    )


@pytest.fixture
def v100_fleet() -> Callable[..., FleetSpec]:
    return make_v100_fleet
