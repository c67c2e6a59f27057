"""Which devices the plugin advertises, the labels it writes, health files and preferences.

Aspects: a node found by pool label or by name in a fleet file (and clear errors when not), MIG
strategies (mixed, single, none), GFD labels equal to the sandbox's nodes, devices read back from
GFD labels, health-file parsing with GPUs taking their slices down, and the order in which
waiting pods' assignments are tried; lend devices: a second device per whole GPU, given only
to a pod that borrows and only where the GPU's own device is taken, visible as the physical GPU.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpufleet.agent.deviceplugin.devices import gpus_from_fleet, gpus_from_labels
from gpufleet.agent.deviceplugin.devnodes import container_allocation
from gpufleet.agent.deviceplugin.health import read_health_file, unhealthy_devices
from gpufleet.agent.deviceplugin.preferred import preferred_allocation, waiting_assignments
from gpufleet.model.contract import names
from gpufleet.model.fleet import FleetSpec, load_fleet
from gpufleet.model.migparted import load_default_configs
from gpufleet.sandbox.control_plane import default_fleet_path
from gpufleet.sandbox.node_manifests import fleet_manifests

FLEET = load_fleet(default_fleet_path())
CONFIGS = load_default_configs()


def test_node_found_by_name_or_pool_label() -> None:
    by_name = gpus_from_fleet(FLEET, "l4-3", CONFIGS)
    assert (by_name.gpu_type, len(by_name.layouts)) == ("L4", 4)
    by_label = gpus_from_fleet(FLEET, "kind-worker2", CONFIGS, pool_label="h100")
    assert [d.id for d in by_label.devices()] == [str(i) for i in range(8)]


@pytest.mark.parametrize(
    ("node", "label", "message"),
    [
        pytest.param("l4-4", None, "in no pool of the fleet", id="index-beyond-count"),
        pytest.param("kind-worker", None, "label it gpufleet.io/node-pool", id="unknown-name"),
        pytest.param("kind-worker", "b200", "no such pool", id="unknown-pool-label"),
    ],
)
def test_node_not_in_fleet_is_a_clear_error(node: str, label: str | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        gpus_from_fleet(FLEET, node, CONFIGS, pool_label=label)


def test_mig_strategies() -> None:
    fleet = FleetSpec.model_validate(
        {
            "nodePools": [
                {"name": "mixed", "count": 1, "gpuType": "A100-80GB", "gpusPerNode": 2,
                 "mig": {"strategy": "mixed", "config": "all-3g.40gb"}},
                {"name": "single", "count": 1, "gpuType": "A100-80GB", "gpusPerNode": 2,
                 "mig": {"strategy": "single", "config": "all-3g.40gb"}},
                {"name": "t4", "count": 1, "gpuType": "T4", "gpusPerNode": 1,
                 "mig": {"strategy": "mixed", "config": "all-1g.10gb"}},
            ]
        }
    )  # fmt: skip
    mixed = gpus_from_fleet(fleet, "mixed-0", CONFIGS).by_resource()
    assert {r: [d.id for d in ds] for r, ds in mixed.items()} == {
        "nvidia.com/mig-3g.40gb": ["0:0", "0:1", "1:0", "1:1"]
    }
    single = gpus_from_fleet(fleet, "single-0", CONFIGS).by_resource()
    assert {r: len(ds) for r, ds in single.items()} == {"nvidia.com/gpu": 4}
    with pytest.raises(ValueError, match="does not support MIG"):
        gpus_from_fleet(fleet, "t4-0", CONFIGS)


def test_labels_are_the_sandbox_nodes_gfd_labels() -> None:
    for node in fleet_manifests(FLEET, CONFIGS):
        name = node["metadata"]["name"]
        labels = gpus_from_fleet(FLEET, name, CONFIGS).labels()
        expected = {
            k: v for k, v in node["metadata"]["labels"].items() if k.startswith("nvidia.com/")
        }
        assert labels == expected, name


def test_devices_from_gfd_labels_round_trip() -> None:
    for node in fleet_manifests(FLEET, CONFIGS):
        name = node["metadata"]["name"]
        from_fleet = gpus_from_fleet(FLEET, name, CONFIGS)
        from_labels = gpus_from_labels(node["metadata"]["labels"], CONFIGS)
        assert from_labels.devices() == from_fleet.devices(), name


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        pytest.param({}, "no nvidia.com/gpu.product", id="no-product"),
        pytest.param({"nvidia.com/gpu.product": "GeForce-256"}, "unknown GPU", id="product"),
        pytest.param(
            {"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.count": "x"}, "positive",
            id="count",
        ),
        pytest.param(
            {"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.count": "2",
             "nvidia.com/mig.strategy": "half"}, "none, single or mixed", id="strategy",
        ),
        pytest.param(
            {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "2",
             "nvidia.com/mig.strategy": "mixed", "nvidia.com/mig.config": "all-9g.90gb"},
            "unknown MIG config", id="mig-config",
        ),
    ],
)  # fmt: skip
def test_bad_gfd_labels_are_clear_errors(labels: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        gpus_from_labels(labels, CONFIGS)


def test_health_file(tmp_path: Any) -> None:
    path = tmp_path / "health"
    assert read_health_file(path) == frozenset()  # no file: all healthy
    path.write_text("1  # overheating\n\n# comment only\n0:2\n")
    listed = read_health_file(path)
    assert listed == {"1", "0:2"}
    devices = gpus_from_fleet(FLEET, "a100-mig-0", CONFIGS).devices()
    down = unhealthy_devices(listed, devices)
    assert down == {f"1:{i}" for i in range(7)} | {"0:2"}


def _pod(name: str, gpus: str, scheduled: str, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "annotations": {names.ASSIGNED_GPUS: gpus},
    }
    meta.update(extra.get("meta", {}))
    return {
        "metadata": meta,
        "status": {
            "phase": extra.get("phase", "Pending"),
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}
            ],
        },
    }


def test_waiting_pods_are_tried_oldest_binding_first() -> None:
    pods = [
        _pod("late", "2,3", "2026-01-01T00:00:09Z"),
        _pod("early", "0,1", "2026-01-01T00:00:01Z"),
        _pod("gone", "4,5", "2026-01-01T00:00:00Z", meta={"deletionTimestamp": "x"}),
        _pod("done", "6,7", "2026-01-01T00:00:00Z", phase="Succeeded"),
        {"metadata": {"name": "other-scheduler"}, "status": {"phase": "Pending"}},
    ]
    assert waiting_assignments(pods, "nvidia.com/gpu") == [((0, 1), False), ((2, 3), False)]
    assert waiting_assignments(pods, "nvidia.com/mig-1g.10gb") == []
    devices = gpus_from_fleet(FLEET, "h100-0", CONFIGS).devices()
    free = [d.id for d in devices if d.id not in ("0",)]
    # The oldest pod's GPU 0 is taken: the next waiting pod's assignment is offered.
    assert preferred_allocation(
        devices, free, [], 2, waiting_assignments(pods, "nvidia.com/gpu")
    ) == ["2", "3"]


def test_lend_devices_go_to_borrowers_only_where_the_gpu_is_taken() -> None:
    lendable = replace(gpus_from_fleet(FLEET, "h100-0", CONFIGS), lend_devices=True)
    devices = lendable.devices()
    assert [d.id for d in devices[:4]] == ["0", "0::lend", "1", "1::lend"]
    assert len(devices) == 2 * len(lendable.layouts)
    # The standby holds GPU 0 ("0"): a pod borrowing GPUs 0 and 1 gets GPU 0's lend device
    # and GPU 1's own device; a pod that does not borrow is never given a lend device.
    free = [d.id for d in devices if d.id != "0"]
    borrower = _pod("train", "0,1", "2026-01-01T00:00:01Z")
    borrower["metadata"]["annotations"][names.BORROWS] = "default/web-0"
    wanted = waiting_assignments([borrower], "nvidia.com/gpu")
    assert wanted == [((0, 1), True)]
    assert preferred_allocation(devices, free, [], 2, wanted) == ["0::lend", "1"]
    plain = waiting_assignments([_pod("other", "0,1", "2026-01-01T00:00:01Z")], "nvidia.com/gpu")
    packed = preferred_allocation(devices, free, [], 2, plain)
    assert packed == ["1", "2"]  # its GPU 0 is taken: packed, lend devices left out
    # The container sees the physical GPU either way.
    env, nodes = container_allocation([d for d in devices if d.id in ("0::lend", "1")], Path("/d"))
    assert env == {"NVIDIA_VISIBLE_DEVICES": "0,1"}
    assert ("/dev/nvidia0", "/d/nvidia0") in nodes
