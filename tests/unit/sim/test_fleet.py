"""Fleet YAML: the shipped fleets load, names and totals, and bad input is rejected clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.model.fleet import load_fleet
from gpufleet.model.gpus import Catalog
from gpufleet.sim.occupancy import SimCluster
from gpufleet.sim.simulate_command import default_fleet_path


@pytest.mark.parametrize(
    ("name", "gpus"),
    [("hetero-256.yaml", 256), ("hetero-512.yaml", 512), ("alibaba-mig-256.yaml", 256)],
)
def test_shipped_fleets_load_and_build(name: str, gpus: int, catalog: Catalog) -> None:
    fleet = load_fleet(default_fleet_path(name))
    assert fleet.total_gpus == gpus
    cluster = SimCluster(fleet, catalog)
    assert cluster.total_gpus == gpus
    assert len({p.gpu_type for p in fleet.node_pools}) >= 3  # heterogeneous


def test_yaml_shape_and_node_names(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(
        "nodePools:\n"
        "  - name: h100\n    count: 2\n    gpuType: H100-80GB\n    gpusPerNode: 8\n"
        "    nvlinkDomainSize: 4\n    mig:\n      strategy: mixed\n      config: all-balanced\n"
    )
    fleet = load_fleet(path)
    pool = fleet.node_pools[0]
    assert pool.node_names() == ["h100-0", "h100-1"]
    assert pool.domain_size == 4
    assert pool.mig is not None and pool.mig.config == "all-balanced"
    assert fleet.total_nodes == 2


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("nodePools: []\n", "nodePools"),
        (
            "nodePools:\n  - {name: a, count: 1, gpuType: T4, gpusPerNode: 4}\n"
            "  - {name: a, count: 1, gpuType: T4, gpusPerNode: 4}\n",
            "duplicate",
        ),
        (
            "nodePools:\n  - {name: a, count: 1, gpuType: T4, gpusPerNode: 8,"
            " nvlinkDomainSize: 3}\n",
            "nvlinkDomainSize",
        ),
        (
            "nodePools:\n  - {name: a, count: 1, gpuType: T4, gpusPerNode: 4, colour: red}\n",
            "colour",
        ),
        ("- just a list\n", "mapping"),
    ],
    ids=["empty", "duplicate-pool", "domain-not-divisor", "unknown-key", "not-a-mapping"],
)
def test_bad_fleet_is_rejected_with_the_file_name(tmp_path: Path, body: str, needle: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    with pytest.raises(ValueError) as err:
        load_fleet(path)
    assert "bad.yaml" in str(err.value)
    assert needle in str(err.value)


def test_mig_layout_names_build_valid_layouts(catalog: Catalog) -> None:
    from gpufleet.model.mig import is_valid_layout
    from gpufleet.sim.occupancy import initial_layout

    a100 = catalog["A100-80GB"]
    balanced = initial_layout(a100, "all-balanced")
    assert balanced is not None and is_valid_layout(a100, balanced)
    assert sorted(p.profile for p in balanced) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    seven = initial_layout(a100, "all-1g.10gb")
    assert seven is not None and len(seven) == 7
    assert initial_layout(a100, "all-enabled") == ()
    assert initial_layout(a100, "all-disabled") is None
    with pytest.raises(ValueError):
        initial_layout(catalog["T4"], "all-balanced")
