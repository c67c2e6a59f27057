"""MIG profile names per GPU memory class, as the NVIDIA device plugin advertises them.

Source: NVIDIA MIG User Guide (v580) tables 6-8, via the project's GPU reference. The CRD schema
uses the union of these names as its enum, and the GPU catalogue must only use names listed here.
"""

from __future__ import annotations

from gpufleet.model.contract.names import MIG_RESOURCE_PREFIX as MIG_RESOURCE_PREFIX

# Memory class of a MIG-capable GPU -> its profile names, smallest first.
MIG_PROFILES_BY_MEMORY_CLASS: dict[str, tuple[str, ...]] = {
    "40gb": ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    "80gb": ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "94gb": ("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
    "141gb": ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
}

# Every profile name any supported GPU offers, sorted for a stable CRD enum.
MIG_PROFILE_NAMES: tuple[str, ...] = tuple(
    sorted({name for names in MIG_PROFILES_BY_MEMORY_CLASS.values() for name in names})
)


def mig_resource_name(profile: str) -> str:
    """The extended resource name a pod requests for one slice of `profile` (mixed strategy)."""
    return f"{MIG_RESOURCE_PREFIX}{profile}"
