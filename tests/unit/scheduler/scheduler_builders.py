"""Fluent builders of Node and Pod dicts as the API server returns them."""

from __future__ import annotations

import copy
from typing import Any

from gpufleet.model.contract import names
from gpufleet.model.gfd import hardware_for
from gpufleet.model.trainingjob import TrainingJob


class NodeBuilder:
    def __init__(self, name: str, gpu_type: str = "H100-80GB", gpus: int = 8) -> None:
        hw = hardware_for(gpu_type)
        self._obj: dict[str, Any] = {
            "metadata": {
                "name": name,
                "labels": {
                    names.GPU_PRODUCT_LABEL: hw.product,
                    names.GPU_COUNT_LABEL: str(gpus),
                },
                "annotations": {},
            },
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }

    def domain(self, size: int) -> NodeBuilder:
        self._obj["metadata"]["labels"][names.NVLINK_DOMAIN_LABEL] = str(size)
        return self

    def mig(self, config: str, state: str = "success") -> NodeBuilder:
        self._obj["metadata"]["labels"][names.MIG_CONFIG_LABEL] = config
        self._obj["metadata"]["labels"][names.MIG_STATE_LABEL] = state
        return self

    def annotate(self, key: str, value: str) -> NodeBuilder:
        self._obj["metadata"]["annotations"][key] = value
        return self

    def not_ready(self) -> NodeBuilder:
        self._obj["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
        return self

    def cordoned(self) -> NodeBuilder:
        self._obj["spec"]["unschedulable"] = True
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)


class PodBuilder:
    def __init__(self, name: str, namespace: str = "default") -> None:
        self._obj: dict[str, Any] = {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"uid-{namespace}-{name}",
                "labels": {},
                "annotations": {},
            },
            "spec": {
                "schedulerName": names.SCHEDULER_NAME,
                "containers": [{"name": "main", "image": "x", "resources": {"limits": {}}}],
            },
            "status": {"phase": "Pending"},
        }

    def _limits(self) -> dict[str, str]:
        limits: dict[str, str] = self._obj["spec"]["containers"][0]["resources"]["limits"]
        return limits

    def gpus(self, n: int) -> PodBuilder:
        self._limits()[names.WHOLE_GPU_RESOURCE] = str(n)
        return self

    def mig(self, profile: str) -> PodBuilder:
        self._limits()[f"{names.MIG_RESOURCE_PREFIX}{profile}"] = "1"
        return self

    def gang(self, gang: str, size: int, rank: int) -> PodBuilder:
        self._obj["metadata"]["labels"][names.GANG_LABEL] = gang
        self._obj["metadata"]["labels"][names.RANK_LABEL] = str(rank)
        self._obj["metadata"]["annotations"][names.GANG_SIZE] = str(size)
        return self

    def annotate(self, key: str, value: str) -> PodBuilder:
        self._obj["metadata"]["annotations"][key] = value
        return self

    def scheduler(self, name: str) -> PodBuilder:
        self._obj["spec"]["schedulerName"] = name
        return self

    def bound(self, node: str, gpus: str | None = None, mig: str | None = None) -> PodBuilder:
        self._obj["spec"]["nodeName"] = node
        self._obj["status"]["phase"] = "Running"
        if gpus is not None:
            self._obj["metadata"]["annotations"][names.ASSIGNED_GPUS] = gpus
        if mig is not None:
            self._obj["metadata"]["annotations"][names.ASSIGNED_MIG] = mig
        return self

    def phase(self, phase: str) -> PodBuilder:
        self._obj["status"]["phase"] = phase
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)


def job_manifest(name: str, gpus: int, gpu_type: str, **spec: Any) -> TrainingJob:
    """A one-replica TrainingJob in namespace ns asking `gpus` GPUs of `gpu_type` (`spec`: more
    spec fields), as the admin API's what-if takes it."""
    return TrainingJob.model_validate(
        {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {
                "replicas": 1,
                "gpusPerReplica": gpus,
                "gpuTypes": [{"name": gpu_type}],
                "template": {"spec": {"containers": [{"name": "m", "image": "x"}]}},
                **spec,
            },
        }
    )
