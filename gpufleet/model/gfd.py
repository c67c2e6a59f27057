"""What GPU Feature Discovery reports for each simulated GPU type.

These are the node labels a real NVIDIA stack (GFD + device plugin) puts on a node, so the sandbox's
fake nodes look like the real thing to the scheduler. Product strings follow GFD's naming (model
name with spaces turned into '-'); PCI device ids are the ones mig-parted's `device-filter` uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpufleet.model.contract import names


@dataclass(frozen=True)
class GpuHardware:
    """The labels and identifiers of one GPU product as GFD and mig-parted see it."""

    product: str  # nvidia.com/gpu.product
    memory_mib: int  # nvidia.com/gpu.memory, per GPU
    family: str  # nvidia.com/gpu.family
    compute: tuple[int, int]  # nvidia.com/gpu.compute.major / .minor
    pci_device_id: str  # mig-parted device-filter value
    mig_memory_class: str | None  # key into MIG_PROFILES_BY_MEMORY_CLASS; None if not MIG-capable


# Keyed by the catalogue's GPU type names.
GPU_HARDWARE: dict[str, GpuHardware] = {
    "H200-141GB": GpuHardware("NVIDIA-H200", 143771, "hopper", (9, 0), "0x233510DE", "141gb"),
    "H100-80GB": GpuHardware(
        "NVIDIA-H100-80GB-HBM3", 81559, "hopper", (9, 0), "0x233010DE", "80gb"
    ),
    "A100-80GB": GpuHardware(
        "NVIDIA-A100-SXM4-80GB", 81920, "ampere", (8, 0), "0x20B210DE", "80gb"
    ),
    "A100-40GB": GpuHardware(
        "NVIDIA-A100-SXM4-40GB", 40960, "ampere", (8, 0), "0x20B010DE", "40gb"
    ),
    "V100-32GB": GpuHardware("Tesla-V100-SXM2-32GB", 32768, "volta", (7, 0), "0x1DB510DE", None),
    "A10": GpuHardware("NVIDIA-A10", 23028, "ampere", (8, 6), "0x223610DE", None),
    "L4": GpuHardware("NVIDIA-L4", 23034, "ada-lovelace", (8, 9), "0x27B810DE", None),
    "T4": GpuHardware("Tesla-T4", 15360, "turing", (7, 5), "0x1EB810DE", None),
}


def hardware_for(gpu_type: str) -> GpuHardware:
    """The GFD facts for a GPU type, with a clear error naming the known types."""
    try:
        return GPU_HARDWARE[gpu_type]
    except KeyError:
        known = ", ".join(sorted(GPU_HARDWARE))
        raise ValueError(f"unknown GPU type {gpu_type!r}; known types: {known}") from None


def type_for_product(product: str) -> str | None:
    """The GPU type name for a GFD product label, or None when it is not a known product."""
    for name, hw in GPU_HARDWARE.items():
        if hw.product == product:
            return name
    return None


def mig_count_labels(resources: Mapping[str, int]) -> dict[str, str]:
    """GFD's per-profile count labels (`nvidia.com/mig-<profile>.count`) for the given resources."""
    return {
        f"{name}.count": str(count)
        for name, count in resources.items()
        if name.startswith("nvidia.com/mig-") and count > 0
    }


def gfd_labels(
    gpu_type: str, gpu_count: int, mig_strategy: str, resources: Mapping[str, int]
) -> dict[str, str]:
    """The labels GFD puts on a node with `gpu_count` GPUs of `gpu_type`.

    `mig_strategy` is the device plugin's (none, single or mixed) and `resources` the extended
    resources the node advertises, from which the per-profile MIG counts are written.
    """
    hw = hardware_for(gpu_type)
    return {
        "nvidia.com/gpu.present": "true",
        names.GPU_PRODUCT_LABEL: hw.product,
        names.GPU_COUNT_LABEL: str(gpu_count),
        "nvidia.com/gpu.memory": str(hw.memory_mib),
        "nvidia.com/gpu.family": hw.family,
        "nvidia.com/gpu.compute.major": str(hw.compute[0]),
        "nvidia.com/gpu.compute.minor": str(hw.compute[1]),
        "nvidia.com/mig.capable": str(hw.mig_memory_class is not None).lower(),
        "nvidia.com/mig.strategy": mig_strategy,
    } | mig_count_labels(resources)
