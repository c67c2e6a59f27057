"""Pure builders of a TrainingJob's children: indexed worker pods and the headless Service.

Worker i is the pod `<job>-worker-<i>` with hostname `<job>-worker-<i>` in the subdomain `<job>`
(the headless Service), so rank 0 is reachable as `<job>-worker-0.<job>.<namespace>.svc` and its
address is known before the pod exists. Names are deterministic: a restarted operator that
creates a pod again gets AlreadyExists instead of a duplicate. The scheduling wishes of the job
travel as pod annotations that gpufleet's scheduler reads (gpufleet.scheduler.names).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from gpufleet.model.crd_common import API_GROUP, API_VERSION
from gpufleet.operator import podtemplate
from gpufleet.scheduler import names

JOB_LABEL: Final = "gpufleet.io/trainingjob"
GROUP: Final = API_GROUP
VERSION: Final = API_VERSION
PLURAL: Final = "trainingjobs"
MASTER_PORT: Final = 29500

_TOPOLOGY = {"none": "any", "sameNode": "same-node", "nvlinkDomain": "nvlink-domain"}
_ENERGY = {"performance": "performance", "balanced": "balanced", "energy": "efficient"}

Obj = dict[str, Any]


def replica_count(spec: Mapping[str, Any]) -> int:
    """Worker pods to create: `replicas`, or for an elastic job its maximum. An elastic job's
    pods beyond the minimum are its room to grow: the scheduler binds them when GPUs are free
    and takes them back (one by one) before preempting other work."""
    elastic = spec.get("elastic")
    if elastic:
        return int(elastic["maxReplicas"])
    return int(spec.get("replicas") or 1)


def start_replicas(spec: Mapping[str, Any]) -> int:
    """Worker pods to offer the scheduler before the job first runs: an elastic job's
    `replicas` (its size to start with), else every pod. Its pods beyond that are created
    once the job is admitted, as room to grow toward `maxReplicas`."""
    if spec.get("elastic") and spec.get("replicas"):
        return int(spec["replicas"])
    return replica_count(spec)


def min_replicas(spec: Mapping[str, Any]) -> int:
    """Workers the job needs to run at all: `replicas`, or the elastic minimum."""
    elastic = spec.get("elastic")
    if elastic:
        return int(elastic["minReplicas"])
    return int(spec.get("replicas") or 1)


def worker_name(job: str, index: int) -> str:
    return f"{job}-worker-{index}"


def owner_reference(job: Mapping[str, Any]) -> Obj:
    return podtemplate.owner_reference(job, "TrainingJob")


def scheduling_annotations(spec: Mapping[str, Any], replicas: int) -> dict[str, str]:
    """The job's wishes in the form gpufleet's scheduler reads from pods."""
    out = {
        names.GANG_SIZE: str(min_replicas(spec)),
        names.PRIORITY: str(int(spec.get("priority", 0))),
        names.PREEMPTIBLE: str(bool(spec.get("preemptible", True))).lower(),
        names.TOPOLOGY: _TOPOLOGY.get(spec.get("topology", "none"), "any"),
        names.ENERGY: _ENERGY.get((spec.get("energy") or {}).get("preference", "balanced"), ""),
    }
    return out | podtemplate.gpu_types_annotation(spec)


def worker_pod(
    job: Mapping[str, Any],
    index: int,
    tolerations: tuple[Mapping[str, Any], ...] = podtemplate.GPU_TOLERATIONS,
) -> Obj:
    """Pod of replica `index`: the template plus GPUs, tolerations, rank, rendezvous and gang
    metadata."""
    meta, spec = job["metadata"], job["spec"]
    name, namespace = meta["name"], meta.get("namespace", "default")
    replicas = replica_count(spec)
    template = copy.deepcopy(spec["template"])
    tmeta = template.get("metadata") or {}
    pod_spec: Obj = template["spec"]
    labels = {
        **(tmeta.get("labels") or {}),
        JOB_LABEL: name,
        names.GANG_LABEL: name,
        names.RANK_LABEL: str(index),
    }
    annotations = {**(tmeta.get("annotations") or {}), **scheduling_annotations(spec, replicas)}
    pod_spec["schedulerName"] = names.SCHEDULER_NAME
    # The gang restarts as a whole on failure: the kubelet must not restart one member.
    pod_spec["restartPolicy"] = "Never"
    pod_spec["hostname"] = worker_name(name, index)
    pod_spec["subdomain"] = name
    podtemplate.add_gpu_resources(pod_spec, spec)
    podtemplate.add_tolerations(pod_spec, tolerations)
    master = f"{worker_name(name, 0)}.{name}.{namespace}.svc"
    rendezvous = {"MASTER_ADDR": master, "MASTER_PORT": str(MASTER_PORT)}
    if spec.get("elastic"):
        # torchrun reads PET_* as its flags: an elastic rendezvous among min..max nodes, so
        # workers may join and leave as the scheduler grows and shrinks the job.
        rendezvous |= {
            "PET_NNODES": f"{min_replicas(spec)}:{replicas}",
            "PET_RDZV_BACKEND": "c10d",
            "PET_RDZV_ENDPOINT": f"{master}:{MASTER_PORT}",
            "RANK": str(index),
        }
    else:
        rendezvous |= {"WORLD_SIZE": str(replicas), "RANK": str(index)}
    for container in pod_spec["containers"]:
        podtemplate.set_env(container, rendezvous)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": worker_name(name, index),
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(job)],
        },
        "spec": pod_spec,
    }


def headless_service(job: Mapping[str, Any]) -> Obj:
    """The rendezvous Service: DNS names for every worker, ready or not."""
    meta = job["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": meta["name"],
            "namespace": meta.get("namespace", "default"),
            "labels": {JOB_LABEL: meta["name"]},
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {JOB_LABEL: meta["name"]},
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": MASTER_PORT, "targetPort": MASTER_PORT}],
        },
    }
