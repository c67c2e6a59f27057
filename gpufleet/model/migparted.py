"""Resolve a mig-parted config name into per-GPU MIG layouts and the node resources they give.

Pure functions shared by the scheduler (reading a node's layout), the sandbox's node builder
(initial layouts) and its fake MIG manager (relabelled layouts). The config document is NVIDIA
mig-parted's format: `mig-configs` maps a name to entries, each with `devices` ("all" or GPU
indices), an optional `device-filter` (PCI device ids), `mig-enabled`, and `mig-devices`
(profile -> count).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from gpufleet.model.contract.names import WHOLE_GPU_RESOURCE as WHOLE_GPU_RESOURCE
from gpufleet.model.gfd import GpuHardware
from gpufleet.model.mig_profiles import MIG_PROFILES_BY_MEMORY_CLASS, mig_resource_name

# Annotation the sandbox's MIG manager writes with the config it last applied (or refused), so it
# acts on each change of `nvidia.com/mig.config` once and the scheduler can tell a finished
# reconfiguration from a stale `success`. A real MIG manager only flips the state label.
MIG_APPLIED_ANNOTATION = "gpufleet.io/mig-config-applied"


def load_default_configs() -> dict[str, Any]:
    """The MIG layouts gpufleet ships (`mig-layouts.yaml`, mig-parted format), parsed.

    The sandbox installs them for its fake MIG manager and the fake device plugin reads them when
    no other layouts file is given.
    """
    text = resources.files("gpufleet.model").joinpath("mig-layouts.yaml").read_text()
    doc: dict[str, Any] = yaml.safe_load(text)
    return doc


class MigConfigError(ValueError):
    """A config name that does not exist or cannot apply to this node's GPUs."""


@dataclass(frozen=True)
class GpuLayout:
    """One physical GPU's MIG state: disabled (a whole GPU) or a count per profile."""

    mig_enabled: bool
    devices: tuple[tuple[str, int], ...] = ()  # (profile, count), sorted by profile


def _entry_applies(entry: dict[str, Any], index: int, hw: GpuHardware) -> bool:
    devices = entry.get("devices", "all")
    if devices != "all" and index not in devices:
        return False
    device_filter = entry.get("device-filter")
    if device_filter is None:
        return True
    wanted = [device_filter] if isinstance(device_filter, str) else device_filter
    return hw.pci_device_id.lower() in (d.lower() for d in wanted)


def resolve_layouts(
    doc: dict[str, Any], name: str, hw: GpuHardware, gpu_count: int
) -> list[GpuLayout]:
    """Per-GPU layouts that config `name` gives a node with `gpu_count` GPUs of type `hw`.

    Raises MigConfigError when the name is unknown, no entry applies to these GPUs, or an entry
    uses a profile this GPU does not offer or more slices than one GPU holds.
    """
    configs = doc.get("mig-configs") or {}
    if name not in configs:
        raise MigConfigError(f"unknown MIG config {name!r}")
    layouts: list[GpuLayout | None] = [None] * gpu_count
    for entry in configs[name]:
        for index in range(gpu_count):
            if layouts[index] is None and _entry_applies(entry, index, hw):
                layouts[index] = _layout_for_entry(entry, hw, name)
    if all(layout is None for layout in layouts):
        raise MigConfigError(f"MIG config {name!r} has no entry for {hw.product}")
    # GPUs that no entry names keep MIG off, as mig-parted leaves unmatched devices alone.
    return [layout or GpuLayout(mig_enabled=False) for layout in layouts]


def _layout_for_entry(entry: dict[str, Any], hw: GpuHardware, name: str) -> GpuLayout:
    if not entry.get("mig-enabled", False):
        return GpuLayout(mig_enabled=False)
    if hw.mig_memory_class is None:
        raise MigConfigError(f"MIG config {name!r} enables MIG on {hw.product}, which has no MIG")
    offered = MIG_PROFILES_BY_MEMORY_CLASS[hw.mig_memory_class]
    devices: dict[str, int] = entry.get("mig-devices") or {}
    for profile, count in devices.items():
        if profile not in offered:
            raise MigConfigError(
                f"MIG config {name!r} uses profile {profile!r}, which {hw.product} does not offer"
            )
        if not isinstance(count, int) or count < 0:
            raise MigConfigError(f"MIG config {name!r}: count of {profile!r} must be >= 0")
    used = sum(_MEMORY_SLICES[offered.index(profile)] * n for profile, n in devices.items())
    if used > 8:
        raise MigConfigError(f"MIG config {name!r} needs {used} memory slices; a GPU has 8")
    return GpuLayout(mig_enabled=True, devices=tuple(sorted(devices.items())))


# Memory slices per profile, in the order MIG_PROFILES_BY_MEMORY_CLASS lists them (1g, 1g+me,
# 1g with double memory, 2g, 3g, 4g, 7g): MIG User Guide placement sizes. A GPU has 8. Exact
# start positions are the placement core's concern; here only the total is checked.
_MEMORY_SLICES = (1, 1, 2, 2, 4, 4, 8)


def node_resources(layouts: list[GpuLayout]) -> dict[str, int]:
    """Extended resources advertised under the mixed strategy: whole GPUs and slices by profile."""
    counts: Counter[str] = Counter()
    counts[WHOLE_GPU_RESOURCE] = 0
    for layout in layouts:
        if not layout.mig_enabled:
            counts[WHOLE_GPU_RESOURCE] += 1
            continue
        for profile, count in layout.devices:
            counts[mig_resource_name(profile)] += count
    return dict(counts)
