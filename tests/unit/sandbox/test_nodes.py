"""The default fleet and the node objects built from it (labels, capacity, MIG, taints)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from gpufleet.model.fleet import load_fleet, parse_taint
from gpufleet.model.migparted import load_default_configs
from gpufleet.sandbox.control_plane import default_fleet_path
from gpufleet.sandbox.migmanager import plan_update
from gpufleet.sandbox.node_manifests import MIG_APPLIED_ANNOTATION, fleet_manifests


def _nodes() -> list[dict]:
    return fleet_manifests(load_fleet(default_fleet_path()), load_default_configs())


def test_default_fleet_is_heterogeneous_and_large_enough() -> None:
    nodes = _nodes()
    products = Counter(n["metadata"]["labels"]["nvidia.com/gpu.product"] for n in nodes)
    assert len(nodes) >= 12
    physical = sum(int(n["metadata"]["labels"]["nvidia.com/gpu.count"]) for n in nodes)
    assert physical >= 64
    assert {"NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L4", "Tesla-T4"} <= set(
        products
    )
    mixed = [n for n in nodes if n["metadata"]["labels"].get("nvidia.com/mig.strategy") == "mixed"]
    with_slices = [
        n for n in mixed if any(k.startswith("nvidia.com/mig-") for k in n["status"]["capacity"])
    ]
    assert with_slices, "at least one node must be in MIG mixed mode with a layout"


def test_node_carries_gfd_labels_and_matching_capacity() -> None:
    node = next(n for n in _nodes() if n["metadata"]["name"] == "h100-mig-0")
    labels = node["metadata"]["labels"]
    capacity = node["status"]["capacity"]
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert labels["nvidia.com/mig.config"] == "all-balanced"
    assert labels["nvidia.com/mig.config.state"] == "success"
    # all-balanced on 8 GPUs: 2 x 1g + 1 x 2g + 1 x 3g each, and no whole GPUs left.
    assert capacity["nvidia.com/gpu"] == "0"
    assert capacity["nvidia.com/mig-1g.10gb"] == "16"
    assert labels["nvidia.com/mig-3g.40gb.count"] == "8"
    assert node["status"]["allocatable"] == capacity


def test_mig_manager_plans_only_real_changes() -> None:
    node = next(n for n in _nodes() if n["metadata"]["name"] == "a100-mig-0")
    configs = load_default_configs()
    assert node["metadata"]["annotations"][MIG_APPLIED_ANNOTATION] == "all-1g.10gb"
    assert plan_update(node, configs) is None  # the initial layout counts as applied

    node["metadata"]["labels"]["nvidia.com/mig.config"] = "all-3g.40gb"
    plan = plan_update(node, configs)
    assert plan is not None and plan["state"] == "success"
    # The old profile's resource and label are removed, the new ones set.
    assert plan["resources"]["nvidia.com/mig-1g.10gb"] is None
    assert plan["resources"]["nvidia.com/mig-3g.40gb"] == 16
    assert plan["labels"]["nvidia.com/mig-1g.10gb.count"] is None
    assert plan["labels"]["nvidia.com/mig-3g.40gb.count"] == "16"

    node["metadata"]["labels"]["nvidia.com/mig.config"] = "not-a-layout"
    refused = plan_update(node, configs)
    assert refused is not None and refused["state"] == "failed"
    assert refused["resources"] is None


def test_every_default_gpu_node_carries_the_gpu_operators_taint() -> None:
    for node in _nodes():
        assert node["spec"]["taints"] == [
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
        ], node["metadata"]["name"]


def test_a_bad_taint_in_a_fleet_file_names_the_pool(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "nodePools:\n  - {name: l4, count: 1, gpuType: L4, gpusPerNode: 4, taints: [gpu:Never]}\n"
    )
    with pytest.raises(ValueError, match="pool 'l4': taint 'gpu:Never' is not key"):
        load_fleet(fleet)
    assert parse_taint("dedicated:NoExecute") == {"key": "dedicated", "effect": "NoExecute"}
