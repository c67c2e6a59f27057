"""Resolving mig-parted configs into per-GPU layouts and advertised resources."""

from __future__ import annotations

import pytest

from gpufleet.model.gfd import hardware_for
from gpufleet.model.migparted import (
    GpuLayout,
    MigConfigError,
    load_default_configs,
    node_resources,
    resolve_layouts,
)

CONFIGS = load_default_configs()


@pytest.mark.parametrize(
    ("config", "gpu_type", "expected"),
    [
        ("all-disabled", "H100-80GB", {"nvidia.com/gpu": 8}),
        ("all-1g.10gb", "A100-80GB", {"nvidia.com/gpu": 0, "nvidia.com/mig-1g.10gb": 56}),
        # The same name on a 40 GB A100 means the double-memory 1g profile: 4 per GPU.
        ("all-1g.10gb", "A100-40GB", {"nvidia.com/gpu": 0, "nvidia.com/mig-1g.10gb": 32}),
        (
            "all-balanced",
            "H200-141GB",
            {
                "nvidia.com/gpu": 0,
                "nvidia.com/mig-1g.18gb": 16,
                "nvidia.com/mig-2g.35gb": 8,
                "nvidia.com/mig-3g.71gb": 8,
            },
        ),
        ("all-7g.80gb", "H100-80GB", {"nvidia.com/gpu": 0, "nvidia.com/mig-7g.80gb": 8}),
    ],
)
def test_shipped_configs_resolve(config: str, gpu_type: str, expected: dict[str, int]) -> None:
    layouts = resolve_layouts(CONFIGS, config, hardware_for(gpu_type), 8)
    assert node_resources(layouts) == expected


@pytest.mark.parametrize(
    ("doc", "name", "gpu_type", "message"),
    [
        (CONFIGS, "no-such-config", "A100-80GB", "unknown MIG config"),
        (CONFIGS, "all-balanced", "T4", "has no entry"),
        (CONFIGS, "all-1g.5gb", "A100-80GB", "has no entry"),
        (
            {"mig-configs": {"x": [{"devices": "all", "mig-enabled": True,
                                    "mig-devices": {"1g.5gb": 1}}]}},
            "x", "H100-80GB", "does not offer",
        ),
        (
            {"mig-configs": {"x": [{"devices": "all", "mig-enabled": True,
                                    "mig-devices": {"3g.40gb": 3}}]}},
            "x", "A100-80GB", "needs 12 memory slices",
        ),
        (
            {"mig-configs": {"x": [{"devices": "all", "mig-enabled": True,
                                    "mig-devices": {"1g.10gb": 1}}]}},
            "x", "L4", "has no MIG",
        ),
    ],
)  # fmt: skip
def test_bad_configs_are_refused(doc: dict, name: str, gpu_type: str, message: str) -> None:
    with pytest.raises(MigConfigError, match=message):
        resolve_layouts(doc, name, hardware_for(gpu_type), 4)


def test_per_device_entries_leave_other_gpus_whole() -> None:
    doc = {
        "mig-configs": {
            "mixed-node": [
                {"devices": [0, 1], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
                {"devices": [2], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
            ]
        }
    }
    layouts = resolve_layouts(doc, "mixed-node", hardware_for("H100-80GB"), 4)
    assert layouts[3] == GpuLayout(mig_enabled=False)
    assert node_resources(layouts) == {
        "nvidia.com/gpu": 1,
        "nvidia.com/mig-3g.40gb": 4,
        "nvidia.com/mig-1g.10gb": 7,
    }
