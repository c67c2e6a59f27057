"""The service a job has received, as pods carry it: the service tier's input (least attained
service inside a queue, `Policy.service_tier_gpu_s`).

Attained service is GPU-seconds: for each run of the job, the GPUs it held x the seconds it
held them, summed over its runs. A whole GPU counts 1, a MIG slice its compute fraction (as the
job's `status.gpuSeconds` counts them). It has two parts, so that nothing of it is lost to a
restart of the scheduler or of the operator, and no part is ever taken from the future:
- the job's ended runs (ended by a preemption, a move or a restart): the operator records them
  in the job's `status.attainedGpuSeconds` when the next run's pods are created, and writes the
  value on every pod it creates (`attained_annotations`; `read_attained` reads it back);
- its current run: from its running pods, each pod's share times the seconds since its
  `status.startTime`, up to the scheduler's now (`run_gpu_s`).
The job's eviction history, for the tier's limit on re-evictions
(`placement.service_tier_rerun_s`), has the same two parts: how many of its ended runs the
service tier ended (the operator's `status.tierEvictions`, written on the pods it creates:
`tier_evictions_annotations`, `read_tier_evictions`; the scheduler writes the same annotation
on the TrainingJob as it evicts, which the operator counts too), and how long its current run
has lasted (`run_s`: since the latest `status.startTime` of its running pods). The scheduler's
moves time a run with the same helper (`since_last_start`) over a different set of pods
(scheduler/progress.py).
Reading is lenient, as for the wishes: an unreadable value reads as no service received (no
tier eviction).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from gpufleet.model.contract import names
from gpufleet.model.contract.assignment import assigned_type
from gpufleet.model.contract.resources import gpu_request
from gpufleet.model.contract.timestamps import parse_time
from gpufleet.model.gpus import Catalog

__all__ = [
    "attained_annotations",
    "held_share",
    "read_attained",
    "read_tier_evictions",
    "run_gpu_s",
    "run_s",
    "since_last_start",
    "started_at",
    "tier_evictions_annotations",
]


def attained_annotations(gpu_s: float) -> dict[str, str]:
    """The annotation of the service a job's ended runs received (none when it received
    none)."""
    return {names.ATTAINED: f"{gpu_s:.1f}"} if gpu_s > 0 else {}


def read_attained(annotations: Mapping[str, str]) -> float:
    """The ended runs' service a pod's annotations state; 0 when absent or unreadable."""
    try:
        value = float(annotations.get(names.ATTAINED, "0"))
    except ValueError:
        return 0.0
    return value if math.isfinite(value) and value > 0 else 0.0


def held_share(pod: Mapping[str, Any], catalog: Catalog) -> float:
    """The GPUs a running pod holds, as service counts them: its whole GPUs, or the compute
    fraction of its MIG slice (SM slices out of 7); 0 for a pod that is not running or is being
    deleted, and for a slice whose size the catalogue does not know."""
    if (pod.get("status") or {}).get("phase") != "Running" or pod["metadata"].get(
        "deletionTimestamp"
    ):
        return 0.0
    request = gpu_request(pod)
    if request.mig_profile is None:
        return float(request.gpus)
    gpu_type = assigned_type(pod["metadata"].get("annotations") or {})
    if gpu_type is None or gpu_type not in catalog:
        return 0.0
    gpu = catalog[gpu_type]
    if not gpu.has_mig_profile(request.mig_profile):
        return 0.0
    return gpu.mig_profile(request.mig_profile).compute_fraction


def run_gpu_s(pods: Iterable[Mapping[str, Any]], catalog: Catalog, now: datetime) -> float:
    """The service the running `pods` received in their current run up to `now`: each one's
    `held_share` times the seconds since its `status.startTime`. A pod not started yet, or
    started after `now`, adds nothing."""
    total = 0.0
    for pod in pods:
        share = held_share(pod, catalog)
        start = started_at(pod)
        if share > 0 and start is not None:
            total += share * max(0.0, (now - start).total_seconds())
    return total


def tier_evictions_annotations(count: int) -> dict[str, str]:
    """The annotation of how many of the job's ended runs the service tier ended (none when
    it ended none)."""
    return {names.TIER_EVICTIONS: str(count)} if count > 0 else {}


def read_tier_evictions(annotations: Mapping[str, str]) -> int:
    """How many runs a pod's annotations say the tier ended; 0 when absent or unreadable."""
    raw = annotations.get(names.TIER_EVICTIONS, "0")
    return int(raw) if raw.isascii() and raw.isdigit() else 0


def started_at(pod: Mapping[str, Any]) -> datetime | None:
    """When the pod's containers were started (`status.startTime`; None before, or unreadable)."""
    return parse_time((pod.get("status") or {}).get("startTime"))


def since_last_start(
    pods: Iterable[Mapping[str, Any]], now: datetime, *, each_started: bool
) -> float | None:
    """Seconds from the latest start among `pods` to `now` (a gang runs once its last member
    does; 0 for a start after `now`). None when none of them has started, and with
    `each_started` also when one of them has not: a pod without a start is otherwise skipped.
    Which pods to pass is the caller's filter (`run_s`, scheduler/progress.py)."""
    starts = [started_at(pod) for pod in pods]
    known = [s for s in starts if s is not None]
    if not known or (each_started and len(known) < len(starts)):
        return None
    return max(0.0, (now - max(known)).total_seconds())


def run_s(pods: Iterable[Mapping[str, Any]], now: datetime) -> float:
    """How long the job's current run has lasted at `now`, for the tier's limit on
    re-evictions: since the latest start among its pods that run (phase Running, not being
    deleted; one that says no start is skipped); 0 when none has started, or one started after
    `now`. (A move's run time reads every bound pod and waits for each: progress.py.)"""
    running = [
        pod
        for pod in pods
        if (pod.get("status") or {}).get("phase") == "Running"
        and not pod["metadata"].get("deletionTimestamp")
    ]
    return since_last_start(running, now, each_started=False) or 0.0
