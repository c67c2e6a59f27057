"""Kubernetes Node objects -> the core's `Node`: GPU type, GPUs, NVLink domains, MIG layouts.

The GPU type comes from GFD's product label, the GPU count from GFD's count label, NVLink domains
from gpufleet's domain-size label (else the catalogue's default). A GPU's MIG layout comes from
the mig-parted config the node's `nvidia.com/mig.config` label names; mig-parted configs hold
only profile counts, so exact start slices are taken from the layout gpufleet recorded on the
node when it asked for that config (`gpufleet.model.contract.assignment`), or otherwise from
the first valid layout with those counts.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping
from typing import Any

from gpufleet.model.contract import names
from gpufleet.model.contract.assignment import MigState, recorded_layouts
from gpufleet.model.gfd import hardware_for, type_for_product
from gpufleet.model.gpus import Catalog, GpuType
from gpufleet.model.inventory import Gpu, Node
from gpufleet.model.mig import MigLayout, enumerate_layouts, is_valid_layout, profile_counts
from gpufleet.model.migparted import MigConfigError, resolve_layouts


def node_ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def node_schedulable(node: Mapping[str, Any]) -> bool:
    """Ready, not cordoned, and no MIG reconfiguration in progress. Taints are judged per gang,
    against its pods' tolerations (`eligibility.py`)."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    labels = (node.get("metadata") or {}).get("labels") or {}
    if names.MIG_CONFIG_LABEL in labels and labels.get(names.MIG_STATE_LABEL) != MigState.SUCCESS:
        return False
    return node_ready(node)


def node_gpu_type(node: Mapping[str, Any]) -> str | None:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return type_for_product(labels.get(names.GPU_PRODUCT_LABEL, ""))


@functools.lru_cache(maxsize=256)
def layout_for_counts(gpu: GpuType, counts: tuple[tuple[str, int], ...]) -> MigLayout | None:
    """The first valid layout (stable order) holding exactly `counts` instances per profile."""
    wanted = Counter(dict(counts))
    for layout in enumerate_layouts(gpu, profiles=list(wanted)):
        if profile_counts(layout) == wanted:
            return layout
    return None


def mig_layouts(
    node: Mapping[str, Any], gpu: GpuType, count: int, mig_configs: Mapping[str, Any]
) -> list[MigLayout | None]:
    """Per-GPU MIG layouts of a node (None = whole GPU), from its applied mig-parted config."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    config = labels.get(names.MIG_CONFIG_LABEL)
    if config is None or not gpu.mig_capable:
        return [None] * count
    try:
        resolved = resolve_layouts(dict(mig_configs), config, hardware_for(gpu.name), count)
    except (MigConfigError, ValueError):
        return [None] * count
    recorded = recorded_layouts(meta.get("annotations") or {}, config)
    out: list[MigLayout | None] = []
    for index, entry in enumerate(resolved):
        if not entry.mig_enabled:
            out.append(None)
            continue
        exact = recorded.get(index)
        if (
            exact is not None
            and profile_counts(exact) == Counter(dict(entry.devices))
            and is_valid_layout(gpu, exact)
        ):
            out.append(exact)
        else:
            out.append(layout_for_counts(gpu, entry.devices) or ())
    return out


def to_core_node(
    node: Mapping[str, Any], catalog: Catalog, mig_configs: Mapping[str, Any]
) -> Node | None:
    """The core's view of a GPU node, or None when it is not a GPU node gpufleet knows."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    gpu_type = node_gpu_type(node)
    if gpu_type is None or gpu_type not in catalog:
        return None
    try:
        count = int(labels.get(names.GPU_COUNT_LABEL, "0"))
    except ValueError:
        return None
    if count <= 0:
        return None
    gpu = catalog[gpu_type]
    try:
        domain = max(1, int(labels.get(names.NVLINK_DOMAIN_LABEL, gpu.nvlink_domain_size)))
    except ValueError:
        domain = gpu.nvlink_domain_size
    layouts = mig_layouts(node, gpu, count, mig_configs)
    gpus = tuple(
        Gpu(index=i, nvlink_domain=i // domain, mig_layout=layouts[i]) for i in range(count)
    )
    return Node(meta["name"], gpu_type, gpus, schedulable=node_schedulable(node))
