"""Pure builders of a TrainingJob's children: indexed worker pods and the headless Service.

Worker i is the pod `<job>-worker-<i>` with hostname `<job>-worker-<i>` in the subdomain `<job>`
(the headless Service), so rank 0 is reachable as `<job>-worker-0.<job>.<namespace>.svc` and its
address is known before the pod exists. Names are deterministic: a restarted operator that
creates a pod again gets AlreadyExists instead of a duplicate. The scheduling wishes of the job
travel as pod annotations that gpufleet's scheduler reads (gpufleet.model.contract), with what
its status says the scheduler needs: its recent moves and its ended runs' service; and when the
job was created, so its recreated pods keep its place in line (`submitted` module).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from gpufleet.core.scaling import linear, refine
from gpufleet.model.contract import names
from gpufleet.model.contract.moves import checkpoint_annotations, move_times_annotations
from gpufleet.model.contract.scaling import DIGITS, scaling_annotations
from gpufleet.model.contract.service import (
    attained_annotations,
    read_tier_evictions,
    tier_evictions_annotations,
)
from gpufleet.model.contract.submitted import submitted_annotations
from gpufleet.model.contract.timestamps import parse_time
from gpufleet.model.contract.wishes import wish_annotations
from gpufleet.model.crd_common import API_GROUP, API_VERSION
from gpufleet.model.trainingjob import KIND, TrainingJobSpec
from gpufleet.operator import podtemplate
from gpufleet.operator.objects import TrainingJobObject

JOB_LABEL: Final = names.TRAININGJOB_LABEL
GROUP: Final = API_GROUP
VERSION: Final = API_VERSION
PLURAL: Final = "trainingjobs"
MASTER_PORT: Final = 29500

Obj = dict[str, Any]


def replica_count(spec: TrainingJobSpec) -> int:
    """Worker pods to create: `replicas`, or for an elastic job its maximum. An elastic job's
    pods beyond the minimum are its room to grow: the scheduler binds them when GPUs are free
    and takes them back (one by one) before preempting other work."""
    if spec.elastic is not None:
        return spec.elastic.max_replicas
    return _fixed(spec)


def start_replicas(spec: TrainingJobSpec) -> int:
    """Worker pods to offer the scheduler before the job first runs: an elastic job's
    `replicas` (its size to start with), else every pod. Its pods beyond that are created
    once the job is admitted, as room to grow toward `maxReplicas`."""
    if spec.elastic is not None and spec.replicas is not None:
        return spec.replicas
    return replica_count(spec)


def min_replicas(spec: TrainingJobSpec) -> int:
    """Workers the job needs to run at all: `replicas`, or the elastic minimum."""
    if spec.elastic is not None:
        return spec.elastic.min_replicas
    return _fixed(spec)


def _fixed(spec: TrainingJobSpec) -> int:
    if spec.replicas is None:  # the model refuses a spec with neither
        raise ValueError("a TrainingJob without elastic bounds needs replicas")
    return spec.replicas


def worker_name(job: str, index: int) -> str:
    return f"{job}-worker-{index}"


def owner_reference(job: TrainingJobObject) -> Obj:
    return podtemplate.owner_reference(job.id, KIND)


def scheduling_annotations(spec: TrainingJobSpec) -> dict[str, str]:
    """The job's wishes in the form gpufleet's scheduler reads from pods."""
    return wish_annotations(
        gang_size=min_replicas(spec),
        priority=spec.priority,
        preemptible=spec.preemptible,
        topology=spec.topology.wish,
        energy=spec.energy.preference.wish,
        gpu_types=podtemplate.type_options(spec.gpu_types),
        max_slowdown_percent=spec.energy.max_slowdown_percent,
        queue=spec.queue,
        spread_slowdown_percent=spec.spread_slowdown_percent,
    )


def move_annotations(job: TrainingJobObject) -> dict[str, str]:
    """How the job saves progress and when it was moved, for the scheduler's move rule."""
    checkpoint = job.spec.checkpoint
    if checkpoint is None:
        return {}
    times = [t for raw in job.status.get("moveTimes") or [] if (t := parse_time(raw))]
    return checkpoint_annotations(
        checkpoint.interval_seconds, checkpoint.grace_period_seconds
    ) | move_times_annotations(times)


def _attained(status: Mapping[str, Any]) -> float:
    """The service of the job's ended runs its status records (0 when none or unreadable)."""
    value = status.get("attainedGpuSeconds")
    return float(value) if isinstance(value, int | float) and value > 0 else 0.0


def recorded_tier_evictions(status: Mapping[str, Any], annotations: Mapping[str, str]) -> int:
    """How many of the job's runs the service tier ended, as recorded: the larger of its
    status (the operator's count) and its `gpufleet.io/tier-evictions` annotation (what the
    scheduler wrote as it evicted: `Binder.record_tier_eviction`, which outlives evicted
    pods that vanish before any pass sees them); 0 when neither says (or is unreadable)."""
    value = status.get("tierEvictions")
    counted = value if isinstance(value, int) and value > 0 else 0
    return max(counted, read_tier_evictions(annotations))


def throughput_reports(status: Mapping[str, Any]) -> dict[int, float]:
    """Replica count -> latest reported throughput, from the job's `status.throughput`."""
    out: dict[int, float] = {}
    for entry in status.get("throughput") or []:
        replicas, value = entry.get("replicas"), entry.get("value")
        if isinstance(replicas, int) and isinstance(value, int | float) and value > 0:
            out[replicas] = float(value)
    return out


def scaling_curve(spec: TrainingJobSpec, reports: Mapping[int, float]) -> tuple[float, ...]:
    """The curve the scheduler is to use for an elastic job: `spec.elastic.scaling` (linear
    when omitted) refined from the throughput it reported; () for a fixed-size job and for an
    elastic one that states no curve and has reported nothing (linear, said by no annotation)."""
    elastic = spec.elastic
    if elastic is None or (elastic.scaling is None and not reports):
        return ()
    prior = tuple(elastic.scaling) if elastic.scaling else linear(elastic.max_replicas)
    return tuple(round(v, DIGITS) for v in refine(prior, reports))


def worker_pod(
    job: TrainingJobObject,
    index: int,
    tolerations: tuple[Mapping[str, Any], ...] = podtemplate.GPU_TOLERATIONS,
    scheduler_name: str = names.SCHEDULER_NAME,
) -> Obj:
    """Pod of replica `index`: the template plus GPUs, tolerations, rank, rendezvous and gang
    metadata, for the scheduler named `scheduler_name`."""
    spec, name, namespace = job.spec, job.id.name, job.id.namespace
    replicas = replica_count(spec)
    template = copy.deepcopy(dict(job.template))
    tmeta = template.get("metadata") or {}
    pod_spec: Obj = template["spec"]
    labels = {
        **(tmeta.get("labels") or {}),
        JOB_LABEL: name,
        names.GANG_LABEL: name,
        names.RANK_LABEL: str(index),
    }
    annotations = {
        **(tmeta.get("annotations") or {}),
        **scheduling_annotations(spec),
        **move_annotations(job),
        **attained_annotations(_attained(job.status)),
        **tier_evictions_annotations(recorded_tier_evictions(job.status, job.annotations)),
        **submitted_annotations(parse_time(job.created)),
        **scaling_annotations(scaling_curve(spec, throughput_reports(job.status))),
    }
    pod_spec["schedulerName"] = scheduler_name
    # The gang restarts as a whole on failure: the kubelet must not restart one member.
    pod_spec["restartPolicy"] = "Never"
    pod_spec["hostname"] = worker_name(name, index)
    pod_spec["subdomain"] = name
    if spec.checkpoint is not None and spec.checkpoint.grace_period_seconds is not None:
        # Between SIGTERM and SIGKILL the job saves its checkpoint, on a move as on any stop.
        pod_spec["terminationGracePeriodSeconds"] = spec.checkpoint.grace_period_seconds
    podtemplate.add_gpu_resources(pod_spec, spec.gpus_per_replica, spec.mig_profile)
    podtemplate.add_tolerations(pod_spec, tolerations)
    master = f"{worker_name(name, 0)}.{name}.{namespace}.svc"
    rendezvous = {"MASTER_ADDR": master, "MASTER_PORT": str(MASTER_PORT)}
    if spec.elastic is not None:
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


def headless_service(job: TrainingJobObject) -> Obj:
    """The rendezvous Service: DNS names for every worker, ready or not."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": job.id.name,
            "namespace": job.id.namespace,
            "labels": {JOB_LABEL: job.id.name},
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {JOB_LABEL: job.id.name},
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": MASTER_PORT, "targetPort": MASTER_PORT}],
        },
    }
