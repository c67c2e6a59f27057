"""The kind cluster of deploy/kind: its workers are pools of its fleet, and each gets fake GPUs.

kind itself cannot run here (no Docker or Podman), so this checks what can be checked without it:
one control plane and three workers, each labelled with a different pool of deploy/kind/fleet.yaml,
and the device plugin turning each worker's label into the advertised resources and GFD labels.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from gpufleet.agent.deviceplugin.devices import POOL_LABEL, gpus_from_fleet
from gpufleet.model.fleet import load_fleet
from gpufleet.model.migparted import load_default_configs

KIND = Path(__file__).resolve().parents[3] / "deploy" / "kind"


def test_kind_workers_are_the_fleet_pools() -> None:
    cluster = yaml.safe_load((KIND / "cluster.yaml").read_text())
    assert (cluster["kind"], cluster["apiVersion"]) == ("Cluster", "kind.x-k8s.io/v1alpha4")
    roles = [node["role"] for node in cluster["nodes"]]
    assert roles == ["control-plane", "worker", "worker", "worker"]
    fleet = load_fleet(KIND / "fleet.yaml")
    pools = [node["labels"][POOL_LABEL] for node in cluster["nodes"][1:]]
    assert sorted(pools) == sorted(p.name for p in fleet.node_pools)

    configs = load_default_configs()
    resources = {}
    for index, pool in enumerate(pools):
        gpus = gpus_from_fleet(fleet, f"gpufleet-worker{index or ''}", configs, pool)
        resources[pool] = {name: len(ds) for name, ds in gpus.by_resource().items()}
        assert gpus.labels()["nvidia.com/gpu.count"] == str(len(gpus.layouts))
    assert resources["h100"] == {"nvidia.com/gpu": 8}
    assert resources["l4"] == {"nvidia.com/gpu": 4}
    assert set(resources["a100-mig"]) == {
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-2g.20gb",
        "nvidia.com/mig-3g.40gb",
    }
