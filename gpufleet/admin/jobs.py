"""Jobs as the admin API shows them, from one `Observed` reading (pure).

Placement is read from the job's pods in the scheduler's view (bound pods and the GPUs their
binding recorded), so TrainingJobs and ServingJobs are shown alike and as of now. Why a job waits
is the reason the scheduler wrote on its waiting pods (the core's pending reason code and
message), else the reason the gang was held back for, else its status condition. Queue position
counts waiting jobs of the same queue ahead of it by priority, then creation time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.admin.live import JobKey, Observed
from gpufleet.admin.models.jobs import JobKind, JobPublic, PoolPublic, ReasonPublic, ReplicaPublic
from gpufleet.admin.workloads import job_of_pod
from gpufleet.model.contract import assignment
from gpufleet.model.contract.reasons import PendingNote, SchedulerReason, read_pending
from gpufleet.model.contract.timestamps import parse_time
from gpufleet.scheduler import pods
from gpufleet.scheduler.pods import PodFacts
from gpufleet.scheduler.prometheus_metrics import UNKNOWN_REASON

Obj = Mapping[str, Any]

_FINISHED = frozenset({"Running", "Succeeded", "Failed", "Suspended"})
_POOLS = ("prefill", "decode", "server")


def reason_public(note: PendingNote) -> ReasonPublic:
    """A pending reason as the API shows it (`Unknown` when no known code leads it)."""
    code = UNKNOWN_REASON if note.reason is None else note.reason.value
    return ReasonPublic(reason=code, message=note.detail)


def pods_by_job(observed: Observed) -> dict[JobKey, list[PodFacts]]:
    out: dict[JobKey, list[PodFacts]] = defaultdict(list)
    for f in observed.view.facts.values():
        owner = job_of_pod(f.pod)
        if owner is not None:
            out[(str(f.pod["metadata"].get("namespace", "default")), *owner)].append(f)
    return out


def _replica(f: PodFacts) -> ReplicaPublic | None:
    if f.node is None or f.terminal:
        return None
    annotations = pods.pod_annotations(f.pod)
    mig = assignment.assigned_mig(annotations)
    return ReplicaPublic(
        pod=str(f.pod["metadata"]["name"]),
        node=f.node,
        gpu_type=assignment.assigned_type(annotations),
        gpus=list(assignment.assigned_gpus(annotations) or ()),
        mig_slice=None if mig is None else assignment.format_mig(mig[1]),
        power_cap_w=assignment.power_cap(annotations),
    )


def _waiting(obj: Obj, members: Sequence[PodFacts], observed: Observed) -> ReasonPublic | None:
    """Why the job waits, or None when it does not."""
    kind = obj["kind"]
    phase = (obj.get("status") or {}).get("phase")
    pending = sorted((f for f in members if f.pending), key=lambda f: f.rank)
    if kind == JobKind.TRAINING and phase in _FINISHED:
        return None
    if kind == JobKind.SERVING and not pending:
        return None
    for f in pending:
        note = read_pending(f.pod)
        if note is not None:
            return reason_public(note)
    for f in pending:
        held = observed.view.held.get(f.gang)
        if held:
            return ReasonPublic(reason=SchedulerReason.GANG.value, message=held)
    if pending:
        return ReasonPublic(reason="WaitingForScheduler", message="not decided on yet")
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Admitted" and condition.get("status") == "False":
            # The operator passes the scheduler's code on as the condition's reason.
            return _condition_reason(condition)
    return None


def _pools(obj: Obj) -> list[PoolPublic]:
    status = obj.get("status") or {}
    out = []
    for name in _POOLS:
        if not (obj.get("spec") or {}).get(name):
            continue
        pool = status.get(name) or {}
        out.append(
            PoolPublic(
                name=name,
                replicas=int(pool.get("replicas") or 0),
                ready_replicas=int(pool.get("readyReplicas") or 0),
                desired_replicas=pool.get("desiredReplicas"),
                last_scale_reason=pool.get("lastScaleReason"),
            )
        )
    return out


def job_public(obj: Obj, members: Sequence[PodFacts], observed: Observed) -> JobPublic:
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    placement = sorted(
        (r for r in (_replica(f) for f in members) if r is not None), key=lambda r: r.pod
    )
    kind = JobKind(obj["kind"])
    return JobPublic(
        namespace=str(meta.get("namespace", "default")),
        kind=kind,
        name=str(meta["name"]),
        queue=str(spec.get("queue") or "default"),
        priority=int(spec.get("priority") or 0),
        phase=status.get("phase"),
        created_at=parse_time((obj.get("metadata") or {}).get("creationTimestamp")),
        gpu_type=next((r.gpu_type for r in placement if r.gpu_type), None),
        placement=placement,
        waiting=_waiting(obj, members, observed),
        gpu_seconds=status.get("gpuSeconds"),
        estimated_energy_joules=status.get("estimatedEnergyJoules"),
        pools=_pools(obj) if kind is JobKind.SERVING else [],
    )


def all_jobs(observed: Observed) -> list[JobPublic]:
    """Every job, with queue positions among the waiting jobs of each queue."""
    members = pods_by_job(observed)
    jobs = [job_public(obj, members.get(key, []), observed) for key, obj in observed.jobs.items()]
    queues: dict[str, list[JobPublic]] = defaultdict(list)
    for job in jobs:
        if job.waiting is not None:
            queues[job.queue].append(job)
    for waiting in queues.values():
        waiting.sort(
            key=lambda j: (
                -j.priority,
                j.created_at.timestamp() if j.created_at else float("inf"),
                j.namespace,
                j.name,
            )
        )
        for position, job in enumerate(waiting, start=1):
            job.queue_position = position
    return jobs


def _condition_reason(condition: Obj) -> ReasonPublic:
    """The reason of an `Admitted=False` condition: its code and the detail of its message."""
    note = PendingNote.parse(str(condition.get("message") or ""))
    reason = str(condition.get("reason") or "") or UNKNOWN_REASON
    return ReasonPublic(reason=reason, message=note.detail)
