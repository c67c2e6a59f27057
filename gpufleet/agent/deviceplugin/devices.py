"""Which fake GPUs a node has, and the devices the plugin advertises for them (pure).

A node's GPUs come from one of two places:
- a fleet file (the sandbox's format): the node belongs to the pool its `gpufleet.io/node-pool`
  label names, or else to the pool its name is `<pool>-<index>` of;
- its GPU Feature Discovery labels: `nvidia.com/gpu.product`, `nvidia.com/gpu.count`,
  `nvidia.com/mig.strategy` and `nvidia.com/mig.config` (a name in the MIG layouts file).

Device ids follow the NVIDIA device plugin's `index` id strategy: `"3"` is GPU 3 and `"3:1"` the
second MIG device on GPU 3. With lend devices on, each whole GPU is also advertised a second
time as `"3::lend"`, the device a pod borrowing that GPU from an asleep standby gets
(`model.contract.lending`): the standby's container keeps `"3"`, and the kubelet admits the
borrower on the second device of the same physical GPU. Under the mixed strategy each MIG
profile is its own resource (`nvidia.com/mig-<profile>`) and GPUs without MIG stay
`nvidia.com/gpu`; under the single strategy every MIG device is an `nvidia.com/gpu`; under `none`
MIG is ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gpufleet.model.contract import names
from gpufleet.model.fleet import FleetSpec, NodePoolSpec
from gpufleet.model.gfd import gfd_labels, hardware_for, type_for_product
from gpufleet.model.mig_profiles import mig_resource_name
from gpufleet.model.migparted import (
    WHOLE_GPU_RESOURCE,
    GpuLayout,
    MigConfigError,
    resolve_layouts,
)

POOL_LABEL = "gpufleet.io/node-pool"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"

LEND_SUFFIX = "::lend"

MigStrategy = Literal["none", "single", "mixed"]
_STRATEGIES: dict[str, MigStrategy] = {"none": "none", "single": "single", "mixed": "mixed"}


@dataclass(frozen=True, order=True)
class FakeDevice:
    """One device the plugin advertises: a whole GPU or one MIG device on a GPU."""

    gpu: int  # physical GPU index on the node
    id: str  # "3" or "3:1", "3::lend"
    resource: str  # nvidia.com/gpu or nvidia.com/mig-<profile>
    lend: bool = False  # the second device of a whole GPU, for a borrower

    @property
    def visible(self) -> str:
        """What NVIDIA_VISIBLE_DEVICES names for it: a lend device is its physical GPU."""
        return str(self.gpu) if self.lend else self.id


@dataclass(frozen=True)
class NodeGpus:
    """A node's fake GPUs: their type, each GPU's MIG layout and the device plugin's strategy."""

    gpu_type: str
    layouts: tuple[GpuLayout, ...]  # one per physical GPU
    strategy: MigStrategy = "none"
    mig_config: str | None = None  # the mig-parted config the layouts come from
    lend_devices: bool = False  # advertise each whole GPU twice (module docstring)

    def devices(self) -> list[FakeDevice]:
        """Every device, in GPU order (MIG devices by profile name within a GPU)."""
        out: list[FakeDevice] = []
        for gpu, layout in enumerate(self.layouts):
            if self.strategy == "none" or not layout.mig_enabled:
                out.append(FakeDevice(gpu, str(gpu), WHOLE_GPU_RESOURCE))
                if self.lend_devices:
                    out.append(FakeDevice(gpu, f"{gpu}{LEND_SUFFIX}", WHOLE_GPU_RESOURCE, True))
                continue
            index = 0
            for profile, count in layout.devices:
                resource = (
                    WHOLE_GPU_RESOURCE if self.strategy == "single" else mig_resource_name(profile)
                )
                for _ in range(count):
                    out.append(FakeDevice(gpu, f"{gpu}:{index}", resource))
                    index += 1
        return out

    def by_resource(self) -> dict[str, list[FakeDevice]]:
        """Devices grouped by the resource they are advertised as (one plugin per resource)."""
        groups: dict[str, list[FakeDevice]] = {}
        for device in self.devices():
            groups.setdefault(device.resource, []).append(device)
        return groups

    def labels(self) -> dict[str, str]:
        """The GFD labels (and MIG-manager state) a real NVIDIA stack would put on this node."""
        resources = {name: len(devices) for name, devices in self.by_resource().items()}
        labels = gfd_labels(self.gpu_type, len(self.layouts), self.strategy, resources)
        if self.mig_config is not None:
            labels |= {MIG_CONFIG_LABEL: self.mig_config, MIG_STATE_LABEL: "success"}
        return labels


def _pool_of(fleet: FleetSpec, node: str, pool_label: str | None) -> NodePoolSpec:
    pools = {p.name: p for p in fleet.node_pools}
    if pool_label is not None:
        if pool_label not in pools:
            raise ValueError(
                f"node {node!r} is labelled {POOL_LABEL}={pool_label}, but the fleet has no "
                f"such pool (pools: {', '.join(sorted(pools))})"
            )
        return pools[pool_label]
    for pool in fleet.node_pools:
        if node in pool.node_names():
            return pool
    raise ValueError(
        f"node {node!r} is in no pool of the fleet: name it <pool>-<index> or label it "
        f"{POOL_LABEL}=<pool> (pools: {', '.join(sorted(pools))})"
    )


def gpus_from_fleet(
    fleet: FleetSpec, node: str, mig_configs: Mapping[str, Any], pool_label: str | None = None
) -> NodeGpus:
    """The GPUs the fleet gives `node` (by its pool label, else by its name)."""
    pool = _pool_of(fleet, node, pool_label)
    hw = hardware_for(pool.gpu_type)
    if pool.mig is None:
        return NodeGpus(pool.gpu_type, (GpuLayout(mig_enabled=False),) * pool.gpus_per_node)
    if hw.mig_memory_class is None:
        raise ValueError(f"pool {pool.name!r}: {pool.gpu_type} does not support MIG")
    layouts = resolve_layouts(dict(mig_configs), pool.mig.config, hw, pool.gpus_per_node)
    return NodeGpus(pool.gpu_type, tuple(layouts), pool.mig.strategy, pool.mig.config)


def gpus_from_labels(labels: Mapping[str, str], mig_configs: Mapping[str, Any]) -> NodeGpus:
    """The GPUs a node's GFD labels describe; a clear error when they describe none."""
    product = labels.get(names.GPU_PRODUCT_LABEL)
    if not product:
        raise ValueError("the node has no nvidia.com/gpu.product label")
    gpu_type = type_for_product(product)
    if gpu_type is None:
        raise ValueError(f"unknown GPU product {product!r} in nvidia.com/gpu.product")
    raw_count = labels.get(names.GPU_COUNT_LABEL, "")
    if not raw_count.isdigit() or int(raw_count) < 1:
        raise ValueError(f"nvidia.com/gpu.count must be a positive integer, not {raw_count!r}")
    count = int(raw_count)
    raw_strategy = labels.get("nvidia.com/mig.strategy", "none")
    strategy = _STRATEGIES.get(raw_strategy)
    if strategy is None:
        raise ValueError(
            f"nvidia.com/mig.strategy must be none, single or mixed, not {raw_strategy!r}"
        )
    config = labels.get(MIG_CONFIG_LABEL)
    if strategy == "none" or config is None:
        return NodeGpus(gpu_type, (GpuLayout(mig_enabled=False),) * count)
    try:
        layouts = resolve_layouts(dict(mig_configs), config, hardware_for(gpu_type), count)
    except MigConfigError as exc:
        raise ValueError(f"{MIG_CONFIG_LABEL}={config}: {exc}") from exc
    # A config chosen by someone else: report it, but leave the label to its owner.
    return NodeGpus(gpu_type, tuple(layouts), strategy, None)
