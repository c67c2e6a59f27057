"""Node manifests for a simulated GPU fleet: kwok-managed nodes that look like NVIDIA GPU nodes.

Each node carries the labels GPU Feature Discovery and the MIG manager would set and advertises
whole GPUs and MIG slices as the device plugin's mixed strategy does, so the scheduler cannot tell
it from a real node. Its status is written at creation (the API server keeps it) and kwok then
keeps it Ready.
"""

from __future__ import annotations

from typing import Any

from gpufleet.model.contract.assignment import MigState
from gpufleet.model.contract.names import (
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    NVLINK_DOMAIN_LABEL,
    WHOLE_GPU_RESOURCE,
)
from gpufleet.model.fleet import FleetSpec, NodePoolSpec, PoolCheck, parse_taint
from gpufleet.model.gfd import gfd_labels, hardware_for
from gpufleet.model.input_error import InputError
from gpufleet.model.migparted import MIG_APPLIED_ANNOTATION, node_resources, resolve_layouts

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
POOL_LABEL = "gpufleet.io/node-pool"

# CPU, memory and pod slots of every fake node: large enough that GPUs are the only limit.
_BASE_CAPACITY = {"cpu": "128", "memory": "1Ti", "pods": "110"}


def node_manifest(pool: NodePoolSpec, name: str, mig_configs: dict[str, Any]) -> dict[str, Any]:
    """The Node object for one node of `pool`, with labels and status capacity."""
    hw = hardware_for(pool.gpu_type)
    labels = {
        "type": "kwok",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        POOL_LABEL: pool.name,
        NVLINK_DOMAIN_LABEL: str(pool.domain_size),
    }
    annotations = {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"}
    if pool.mig is not None:
        if hw.mig_memory_class is None:
            raise ValueError(f"pool {pool.name!r}: {pool.gpu_type} does not support MIG")
        layouts = resolve_layouts(mig_configs, pool.mig.config, hw, pool.gpus_per_node)
        gpu_resources = node_resources(layouts)
        labels |= {MIG_CONFIG_LABEL: pool.mig.config, MIG_STATE_LABEL: MigState.SUCCESS.value}
        # The layout is in place from the start: tell the MIG manager it has nothing to do.
        annotations[MIG_APPLIED_ANNOTATION] = pool.mig.config
    else:
        gpu_resources = {WHOLE_GPU_RESOURCE: pool.gpus_per_node}
    strategy = pool.mig.strategy if pool.mig is not None else "none"
    labels |= gfd_labels(pool.gpu_type, pool.gpus_per_node, strategy, gpu_resources)
    capacity = _BASE_CAPACITY | {k: str(v) for k, v in gpu_resources.items()}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {"taints": [parse_taint(t) for t in pool.taints]} if pool.taints else {},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "fake",
                "kubeProxyVersion": "fake",
                "bootID": "",
                "containerRuntimeVersion": "",
                "kernelVersion": "",
                "machineID": "",
                "osImage": "",
                "systemUUID": "",
            },
            "phase": "Running",
        },
    }


def sandbox_pool_check(mig_configs: dict[str, Any]) -> PoolCheck:
    """The sandbox's check of a fleet pool (`load_fleet(check=)`): a GPU type GPU Feature
    Discovery knows, and a MIG layout of `mig_configs` these GPUs can hold, so that a bad fleet
    file fails before the control plane starts."""

    def check(pool: NodePoolSpec) -> None:
        try:
            hardware_for(pool.gpu_type)
        except ValueError as exc:
            raise InputError(str(exc), field="gpuType") from None
        try:
            node_manifest(pool, f"{pool.name}-0", mig_configs)
        except ValueError as exc:
            raise InputError(str(exc), field="mig.config" if pool.mig else None) from None

    return check


def fleet_manifests(fleet: FleetSpec, mig_configs: dict[str, Any]) -> list[dict[str, Any]]:
    """Node objects for every node of the fleet, in pool order."""
    return [
        node_manifest(pool, name, mig_configs)
        for pool in fleet.node_pools
        for name in pool.node_names()
    ]
