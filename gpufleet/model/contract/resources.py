"""The GPUs a pod asks for, as extended resources: `nvidia.com/gpu` whole GPUs, or one
`nvidia.com/mig-<profile>` slice (the device plugin's mixed strategy).

The operator writes them into the first container of every pod it builds (`gpu_resources`);
the scheduler and the operator's accounting read them back from every container
(`gpu_request`). Extended resources have requests equal to limits, so either counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.model.contract import names
from gpufleet.model.mig_profiles import mig_resource_name

__all__ = ["GpuRequest", "gpu_request", "gpu_resources"]


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """Whole GPUs, or one MIG slice of `mig_profile`, that one pod needs."""

    gpus: int = 0
    mig_profile: str | None = None

    @property
    def empty(self) -> bool:
        return self.gpus == 0 and self.mig_profile is None


def gpu_resources(gpus: int | None, mig_profile: str | None) -> dict[str, str]:
    """The resource limits asking for one `mig_profile` slice, or else `gpus` whole GPUs (one
    when not given)."""
    if mig_profile:
        return {mig_resource_name(mig_profile): "1"}
    return {names.WHOLE_GPU_RESOURCE: str(gpus or 1)}


def _quantity(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def gpu_request(pod: Mapping[str, Any]) -> GpuRequest:
    """Sum of the containers' GPU and MIG limits (extended resources: requests == limits)."""
    gpus = 0
    mig: str | None = None
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        wanted = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        for name, value in wanted.items():
            if name == names.WHOLE_GPU_RESOURCE:
                gpus += _quantity(value)
            elif name.startswith(names.MIG_RESOURCE_PREFIX) and _quantity(value) > 0:
                mig = name.removeprefix(names.MIG_RESOURCE_PREFIX)
    return GpuRequest(gpus, mig)
