"""Pure builders of a ServingJob's children: one Deployment per pool.

Pool `<pool>` of ServingJob `<job>` is the Deployment `<job>-<pool>` (deterministic, so a
restarted operator finds what it created). Its pods carry the labels `gpufleet.io/servingjob`
and `gpufleet.io/pool` (the Deployment's selector, and the labels the metrics of the pool are
selected by), name gpufleet's scheduler, request whole GPUs or one MIG slice, and carry the
job's wishes (acceptable GPU types, priority, preemptible) as the annotations the scheduler reads
(gpufleet.model.contract). A pod without a gang label is a gang of one: every replica is placed
on its own. The pods of a pool whose spec lists standbys also carry the readiness gate
`gpufleet.io/awake` (`model.contract.standby`), which the operator sets. The pods do not carry
the job's submission time (`gpufleet.io/submitted-at`, which TrainingJob workers carry): one
template serves every replica, and a replica added by the autoscaler is new demand, in line from
its own creation (`model.contract.submitted`).

Replicas are not part of the template: they belong to the autoscaler, which writes the scale of
the Deployment. `pool_replicas` only enforces what the spec itself says (create at
`minReplicas`, stay within the bounds, pin at `minReplicas` while autoscaling is disabled), and
the drift check (`spec_hash`) ignores replicas, so a spec update never undoes a scaling decision.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from gpufleet.core.autoscaling_types import PoolRole
from gpufleet.model.contract import names, standby
from gpufleet.model.contract.assignment import assigned_type
from gpufleet.model.contract.names import POOL_LABEL, SERVINGJOB_LABEL
from gpufleet.model.contract.wishes import wish_annotations
from gpufleet.model.crd_common import API_GROUP, API_VERSION
from gpufleet.model.servingjob import KIND, PoolSpec, ServingJobSpec
from gpufleet.operator import podtemplate
from gpufleet.operator.objects import ServingJobObject

__all__ = [
    "GROUP",
    "KIND",
    "PLURAL",
    "POOL_LABEL",
    "ROLE_ENV",
    "SERVINGJOB_ENV",
    "SERVINGJOB_LABEL",
    "SPEC_HASH_ANNOTATION",
    "VERSION",
    "autoscaling_enabled",
    "deployment",
    "deployment_name",
    "needs_update",
    "owner_reference",
    "pool_bounds",
    "pool_replicas",
    "running_gpu_types",
    "selector",
    "service",
    "spec_hash",
]

GROUP: Final = API_GROUP
VERSION: Final = API_VERSION
PLURAL: Final = "servingjobs"
SPEC_HASH_ANNOTATION: Final = "gpufleet.io/spec-hash"
# What the server process in a replica is told about its place in the job.
ROLE_ENV: Final = "GPUFLEET_SERVING_ROLE"  # prefill, decode or unified
SERVINGJOB_ENV: Final = "GPUFLEET_SERVINGJOB"

Obj = dict[str, Any]


def deployment_name(job: str, pool: str) -> str:
    return f"{job}-{pool}"


def selector(job: str, pool: str) -> dict[str, str]:
    """The labels that select a pool's pods (the Deployment's immutable selector)."""
    return {SERVINGJOB_LABEL: job, POOL_LABEL: pool}


def autoscaling_enabled(spec: ServingJobSpec) -> bool:
    """Omitted autoscaling, or `enabled: false`, pins every pool at minReplicas."""
    return spec.autoscaling is not None and spec.autoscaling.enabled


def pool_bounds(pool: PoolSpec) -> tuple[int, int]:
    """(minReplicas, maxReplicas); an omitted maximum means a fixed pool at the minimum."""
    low, high = pool.min_replicas, pool.max_replicas
    return low, max(low, high) if high is not None else low


def pool_replicas(
    pool_name: str, pool: PoolSpec, enabled: bool, current: int | None
) -> tuple[int, str | None]:
    """Replicas the spec alone demands given the Deployment's `current` count (None: absent),
    and why it differs from `current` (None when it does not)."""
    low, high = pool_bounds(pool)
    if current is None:
        return low, f"{pool_name}: created with {low} replicas (minReplicas)"
    if not enabled:
        if current == low:
            return current, None
        return low, f"{pool_name}: {current}->{low} (autoscaling disabled: pinned at minReplicas)"
    if current < low:
        return low, f"{pool_name}: {current}->{low} (below minReplicas {low})"
    if current > high:
        return high, f"{pool_name}: {current}->{high} (above maxReplicas {high})"
    return current, None


def owner_reference(job: ServingJobObject) -> Obj:
    return podtemplate.owner_reference(job.id, KIND)


def _scheduling_annotations(spec: ServingJobSpec, pool: PoolSpec) -> dict[str, str]:
    """The job's wishes in the form gpufleet's scheduler reads from pods. Serving replicas
    are gangs of one, and default to not preemptible, as the ServingJob CRD does."""
    return wish_annotations(
        priority=spec.priority,
        preemptible=spec.preemptible,
        gpu_types=podtemplate.type_options(pool.gpu_types),
        queue=spec.queue,
    )


def _keeps_standbys(spec: ServingJobSpec, pool_name: str) -> bool:
    """Whether the spec lists standbys for the pool, autoscaling on or off: its pods carry the
    awake readiness gate (`model.contract.standby`), so switching autoscaling does not roll
    them; only adding or removing the pool's standby entry does."""
    standbys = spec.autoscaling.standby if spec.autoscaling is not None else None
    return standbys is not None and standbys.of(pool_name) is not None


def _pod_template(
    job: ServingJobObject,
    pool_name: str,
    tolerations: tuple[Mapping[str, Any], ...],
    scheduler_name: str,
) -> Obj:
    pool = job.pools()[pool_name]
    template = copy.deepcopy(dict(job.templates[pool_name]))
    tmeta = template.get("metadata") or {}
    pod_spec: Obj = template["spec"]
    labels = {**(tmeta.get("labels") or {}), **selector(job.id.name, pool_name)}
    annotations = {
        **(tmeta.get("annotations") or {}),
        **_scheduling_annotations(job.spec, pool),
    }
    if _keeps_standbys(job.spec, pool_name):
        gates = [g for g in pod_spec.get("readinessGates") or () if g != standby.readiness_gate()]
        pod_spec["readinessGates"] = [*gates, standby.readiness_gate()]
    pod_spec["schedulerName"] = scheduler_name
    pod_spec["restartPolicy"] = "Always"  # the only policy a Deployment accepts
    podtemplate.add_gpu_resources(pod_spec, pool.gpus_per_replica, pool.mig_profile)
    podtemplate.add_tolerations(pod_spec, tolerations)
    env = {ROLE_ENV: PoolRole.of_pool(pool_name).value, SERVINGJOB_ENV: job.id.name}
    for container in pod_spec["containers"]:
        podtemplate.set_env(container, env)
    return {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod_spec}


def spec_hash(deployment_spec: Mapping[str, Any]) -> str:
    """Digest of a Deployment spec without its replicas: what the operator owns."""
    owned = {k: v for k, v in deployment_spec.items() if k != "replicas"}
    text = json.dumps(owned, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def deployment(
    job: ServingJobObject,
    pool_name: str,
    replicas: int,
    tolerations: tuple[Mapping[str, Any], ...] = podtemplate.GPU_TOLERATIONS,
    scheduler_name: str = names.SCHEDULER_NAME,
) -> Obj:
    """The Deployment of one pool with `replicas` replicas, whose pods name `scheduler_name`
    their scheduler."""
    name = job.id.name
    spec: Obj = {
        "selector": {"matchLabels": selector(name, pool_name)},
        "template": _pod_template(job, pool_name, tolerations, scheduler_name),
        # Old ReplicaSets hold no GPUs; two are enough to roll back by hand.
        "revisionHistoryLimit": 2,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": deployment_name(name, pool_name),
            "namespace": job.id.namespace,
            "labels": selector(name, pool_name),
            "annotations": {SPEC_HASH_ANNOTATION: spec_hash(spec)},
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {"replicas": replicas, **spec},
    }


def service(job: ServingJobObject, pool_name: str) -> Obj:
    """The ClusterIP Service in front of one pool's replicas on `spec.port`, named like the
    pool's Deployment (a router or the prefill side reaches the pool through it)."""
    name, port = job.id.name, job.spec.port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": deployment_name(name, pool_name),
            "namespace": job.id.namespace,
            "labels": selector(name, pool_name),
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "selector": selector(name, pool_name),
            "ports": [{"name": "http", "port": port, "targetPort": port}],
        },
    }


def needs_update(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether the existing Deployment was built from another spec than `wanted` (replicas
    aside: the autoscaler owns them)."""
    have = (current.get("metadata") or {}).get("annotations") or {}
    want = wanted["metadata"]["annotations"]
    return bool(have.get(SPEC_HASH_ANNOTATION) != want[SPEC_HASH_ANNOTATION])


def running_gpu_types(pods: Sequence[Mapping[str, Any]]) -> dict[str, tuple[str | None, ...]]:
    """Per pool, the GPU type the scheduler recorded on each of the job's Running pods (None
    where it recorded none), in pod-name order: what the autoscaler's capacity factor needs."""
    out: dict[str, list[str | None]] = {}
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        meta = pod["metadata"]
        pool = (meta.get("labels") or {}).get(POOL_LABEL)
        running = (pod.get("status") or {}).get("phase") == "Running"
        if pool is None or not running or meta.get("deletionTimestamp"):
            continue
        out.setdefault(pool, []).append(assigned_type(meta.get("annotations") or {}))
    return {pool: tuple(types) for pool, types in out.items()}
