"""Pieces every gpufleet-built pod template shares, whichever custom resource owns it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.model.contract.resources import gpu_resources
from gpufleet.model.contract.wishes import TypeOption
from gpufleet.model.crd_common import API_GROUP, API_VERSION, GPUType
from gpufleet.operator.objects import Identity

__all__ = [
    "GPU_TOLERATIONS",
    "add_gpu_resources",
    "add_tolerations",
    "owner_reference",
    "set_env",
    "type_options",
]

Obj = dict[str, Any]

# What gpufleet adds to every pod it creates unless the setting operator.pod_tolerations
# says otherwise (its default is this): GPU nodes set up by the NVIDIA GPU
# Operator or a cloud's GPU node pools carry the taint nvidia.com/gpu=present:NoSchedule, and
# Kubernetes' ExtendedResourceToleration admission plugin gives pods that request
# nvidia.com/gpu this same toleration.
GPU_TOLERATIONS: tuple[Obj, ...] = (
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
)


def owner_reference(owner: Identity, kind: str) -> Obj:
    """The controller reference that makes `owner` (a gpufleet custom resource) own a child."""
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": kind,
        "name": owner.name,
        "uid": owner.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def add_gpu_resources(pod_spec: Obj, gpus_per_replica: int | None, mig_profile: str | None) -> None:
    """Ask, in the first container, for `gpus_per_replica` whole GPUs (one when not given) or
    one `mig_profile` slice (extended resources: requests, when given, must equal limits)."""
    gpus = gpu_resources(gpus_per_replica, mig_profile)
    resources = pod_spec["containers"][0].setdefault("resources", {})
    resources["limits"] = {**(resources.get("limits") or {}), **gpus}
    if "requests" in resources:
        resources["requests"] = {**resources["requests"], **gpus}


def add_tolerations(pod_spec: Obj, tolerations: tuple[Mapping[str, Any], ...]) -> None:
    """Append `tolerations` the template does not already carry."""
    present = list(pod_spec.get("tolerations") or [])
    for toleration in tolerations:
        if dict(toleration) not in present:
            present.append(dict(toleration))
    if present:
        pod_spec["tolerations"] = present


def type_options(gpu_types: Sequence[GPUType] | None) -> tuple[TypeOption, ...]:
    """The acceptable GPU types (with relative throughput) as the scheduler reads them."""
    return tuple(TypeOption(t.name, t.throughput) for t in gpu_types or ())


def set_env(container: Obj, values: Mapping[str, str]) -> None:
    """Set gpufleet's variables in `container`, replacing same-named user entries."""
    kept = [e for e in container.get("env") or [] if e.get("name") not in values]
    container["env"] = kept + [{"name": k, "value": v} for k, v in values.items()]
