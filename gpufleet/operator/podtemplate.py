"""Pieces every gpufleet-built pod template shares, whichever custom resource owns it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.model.crd_common import API_GROUP, API_VERSION
from gpufleet.model.mig_profiles import mig_resource_name
from gpufleet.scheduler import names
from gpufleet.scheduler.pods import format_gpu_types

__all__ = [
    "GPU_TOLERATIONS",
    "add_gpu_resources",
    "add_tolerations",
    "gpu_types_annotation",
    "owner_reference",
    "set_env",
]

Obj = dict[str, Any]

# What gpufleet adds to every pod it creates by default: GPU nodes set up by the NVIDIA GPU
# Operator or a cloud's GPU node pools carry the taint nvidia.com/gpu=present:NoSchedule, and
# Kubernetes' ExtendedResourceToleration admission plugin gives pods that request
# nvidia.com/gpu this same toleration.
GPU_TOLERATIONS: tuple[Obj, ...] = (
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
)


def owner_reference(owner: Mapping[str, Any], kind: str) -> Obj:
    """The controller reference that makes `owner` (a gpufleet custom resource) own a child."""
    meta = owner["metadata"]
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def add_gpu_resources(pod_spec: Obj, wanted: Mapping[str, Any]) -> None:
    """Ask, in the first container, for `wanted`'s `gpusPerReplica` whole GPUs or one
    `migProfile` slice (extended resources: requests, when given, must equal limits)."""
    if wanted.get("migProfile"):
        gpus = {mig_resource_name(wanted["migProfile"]): "1"}
    else:
        gpus = {names.WHOLE_GPU_RESOURCE: str(int(wanted.get("gpusPerReplica") or 1))}
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


def gpu_types_annotation(wanted: Mapping[str, Any]) -> dict[str, str]:
    """The acceptable GPU types (with relative throughput) as the scheduler reads them."""
    types = wanted.get("gpuTypes") or []
    if not types:
        return {}
    return {names.GPU_TYPES: format_gpu_types([(t["name"], t.get("throughput")) for t in types])}


def set_env(container: Obj, values: Mapping[str, str]) -> None:
    """Set gpufleet's variables in `container`, replacing same-named user entries."""
    kept = [e for e in container.get("env") or [] if e.get("name") not in values]
    container["env"] = kept + [{"name": k, "value": v} for k, v in values.items()]
