"""The TrainingJob state machine as a pure function: (job, its pods, now) -> actions + status.

The operator's handlers only gather inputs and carry out the returned `Plan`, so every rule of
the run policy is unit-tested here without an API server:
- pods are created for missing ranks (never while a gang restart is still deleting pods);
- a failed worker restarts the whole gang, up to `backoffLimit`; failures caused by preemption
  or node loss (a DisruptionTarget condition) do not count;
- `activeDeadlineSeconds` counts from the first start, `ttlSecondsAfterFinished` from the end;
- `suspend` deletes the pods and keeps the job;
- while the gang waits, the Admitted condition carries the scheduler's (the core's) reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gpufleet.model.trainingjob import (
    TrainingJobConditionType as Cond,
)
from gpufleet.model.trainingjob import (
    TrainingJobPhase as Phase,
)
from gpufleet.model.trainingjob import (
    TrainingJobReason as Reason,
)
from gpufleet.operator.children import min_replicas, replica_count, start_replicas
from gpufleet.scheduler import names
from gpufleet.scheduler.binder import scheduled_message
from gpufleet.scheduler.pods import disruption_reason

Obj = Mapping[str, Any]

# Reasons gpufleet adds beside the model's stable set.
TEMPLATE_REJECTED = "PodTemplateRejected"
WAITING_FOR_SCHEDULER = "WaitingForScheduler"
GANG_RESTART = "GangRestart"
RESUMED = "Resumed"
READMITTED = "Readmitted"
NODE_FAILURE = "NodeFailure"

# The core's pending reasons (and the scheduler's own) -> the TrainingJob's stable reasons.
_PENDING_REASONS = {
    "UnknownGpuType": Reason.NO_ACCEPTABLE_GPU_TYPE,
    "NoNodesOfAcceptableType": Reason.NO_ACCEPTABLE_GPU_TYPE,
    "MigProfileUnsupported": Reason.NO_ACCEPTABLE_GPU_TYPE,
    "TopologyUnsatisfiable": Reason.TOPOLOGY_UNSATISFIABLE,
    "WaitingForMIGReconfiguration": Reason.WAITING_FOR_MIG_RECONFIGURATION,
}


@dataclass
class Plan:
    create: list[int] = field(default_factory=list)  # worker ranks to create
    delete: list[str] = field(default_factory=list)  # pod names to delete
    delete_job: bool = False
    status: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)


def timestamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _deleting(pod: Obj) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def _phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase", "Pending"))


def _rank(pod: Obj) -> int:
    try:
        return int((pod["metadata"].get("labels") or {}).get(names.RANK_LABEL, "-1"))
    except ValueError:
        return -1


def _disrupted(pod: Obj) -> str | None:
    return disruption_reason(pod)


def pending_reason(pods: Sequence[Obj]) -> tuple[str, str]:
    """(condition reason, message) from the scheduler's PodScheduled message on the pods."""
    for pod in sorted(pods, key=_rank):
        message = scheduled_message(pod)
        if message:
            code = message.split(":", 1)[0].strip()
            return str(_PENDING_REASONS.get(code, Reason.INSUFFICIENT_GPUS)), message
    return WAITING_FOR_SCHEDULER, "waiting for the gpufleet scheduler"


def placement(pods: Sequence[Obj]) -> list[dict[str, Any]]:
    out = []
    for pod in sorted(pods, key=_rank):
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or _rank(pod) < 0:
            continue
        ann = pod["metadata"].get("annotations") or {}
        entry: dict[str, Any] = {"replica": _rank(pod), "node": node}
        if ann.get(names.ASSIGNED_TYPE):
            entry["gpuType"] = ann[names.ASSIGNED_TYPE]
        gpus = [int(g) for g in ann.get(names.ASSIGNED_GPUS, "").split(",") if g.isdigit()]
        mig = ann.get(names.ASSIGNED_MIG)
        if mig and gpus:
            profile, _, start = mig.rpartition("@")
            entry["migSlice"] = {"profile": profile, "gpuIndex": gpus[0], "start": int(start)}
        elif gpus:
            entry["gpus"] = gpus
        out.append(entry)
    return out


class _Conditions:
    """Conditions keyed by type; lastTransitionTime changes only when the status flips."""

    def __init__(self, current: Sequence[Obj] | None, now: datetime, generation: int) -> None:
        self.items = {c["type"]: dict(c) for c in current or []}
        self.now = now
        self.generation = generation

    def set(self, kind: str, status: bool, reason: str, message: str) -> None:
        value = "True" if status else "False"
        old = self.items.get(kind)
        changed = old is None or old.get("status") != value
        self.items[kind] = {
            "type": kind,
            "status": value,
            "reason": reason,
            "message": message,
            "lastTransitionTime": timestamp(self.now) if changed else old["lastTransitionTime"],  # type: ignore[index]
            "observedGeneration": self.generation,
        }

    def is_true(self, kind: str) -> bool:
        return self.items.get(kind, {}).get("status") == "True"

    def reason(self, kind: str) -> str | None:
        item = self.items.get(kind)
        return None if item is None else str(item.get("reason"))

    def listed(self) -> list[dict[str, Any]]:
        return [self.items[k] for k in sorted(self.items)]


def plan(
    job: Obj,
    pods: Sequence[Obj],
    now: datetime,
    disruption: str | None = None,
    create_error: str | None = None,
) -> Plan:
    """What to do for `job` given its pods. `disruption` is the DisruptionTarget reason of a
    pod seen deleted since the last pass; `create_error` a rejected pod creation."""
    meta, spec = job["metadata"], job["spec"]
    status: Mapping[str, Any] = job.get("status") or {}
    run_policy = spec.get("runPolicy") or {}
    generation = int(meta.get("generation") or 0)
    replicas = replica_count(spec)
    conds = _Conditions(status.get("conditions"), now, generation)
    old_phase = status.get("phase")
    restarts = int(status.get("restarts") or 0)
    start = _parse(status.get("startTime"))
    completion = _parse(status.get("completionTime"))
    out = Plan()
    live = [p for p in pods if not _deleting(p)]
    active = [p for p in live if _phase(p) not in ("Succeeded", "Failed")]
    phase: str

    def finish(new_phase: Phase, kind: Cond, reason: str, message: str) -> None:
        nonlocal phase, completion
        phase = new_phase
        completion = completion or now
        conds.set(kind, True, reason, message)
        out.delete = [p["metadata"]["name"] for p in active]

    # A spec edit after a rejected template gives the job another try.
    retry = conds.reason(Cond.FAILED) == TEMPLATE_REJECTED and generation > int(
        status.get("observedGeneration") or 0
    )
    if old_phase in (Phase.SUCCEEDED, Phase.FAILED) and not retry:
        phase = old_phase
        out.delete = [p["metadata"]["name"] for p in active]
        ttl = run_policy.get("ttlSecondsAfterFinished")
        if ttl is not None and completion is not None:
            out.delete_job = now >= completion + timedelta(seconds=int(ttl))
    elif create_error is not None:
        finish(Phase.FAILED, Cond.FAILED, TEMPLATE_REJECTED, create_error)
        conds.set(Cond.ADMITTED, False, TEMPLATE_REJECTED, create_error)
    elif run_policy.get("suspend"):
        phase = Phase.SUSPENDED
        conds.set(Cond.SUSPENDED, True, Reason.SUSPENDED_BY_USER, "suspended by the user")
        conds.set(Cond.ADMITTED, False, Reason.SUSPENDED_BY_USER, "suspended by the user")
        out.delete = [p["metadata"]["name"] for p in live]
    else:
        if retry:
            conds.items.pop(Cond.FAILED, None)
            completion = None
        if conds.is_true(Cond.SUSPENDED):
            conds.set(Cond.SUSPENDED, False, RESUMED, "resumed by the user")
        phase, restarts = _run(job, pods, live, replicas, conds, disruption, out)
        if phase == Phase.RUNNING and start is None:
            start = now
        deadline = run_policy.get("activeDeadlineSeconds")
        if phase in (Phase.FAILED, Phase.SUCCEEDED):
            completion = completion or now
        elif (
            deadline is not None
            and start is not None
            and now >= start + timedelta(seconds=int(deadline))
        ):
            out.create = []
            finish(
                Phase.FAILED,
                Cond.FAILED,
                Reason.DEADLINE_EXCEEDED,
                f"ran longer than activeDeadlineSeconds={deadline}",
            )

    out.status = {
        "phase": str(phase),
        "conditions": conds.listed(),
        "replicas": len([p for p in active if (p.get("spec") or {}).get("nodeName")]),
        "placement": placement(active),
        "restarts": restarts,
        "observedGeneration": generation,
    }
    types = {e.get("gpuType") for e in out.status["placement"] if e.get("gpuType")}
    if len(types) == 1:
        out.status["gpuType"] = types.pop()
    if start is not None:
        out.status["startTime"] = timestamp(start)
    if completion is not None and phase in (Phase.SUCCEEDED, Phase.FAILED):
        out.status["completionTime"] = timestamp(completion)
    if phase != old_phase:
        kind = "Warning" if phase in (Phase.FAILED, Phase.PREEMPTED) else "Normal"
        out.events.append((kind, str(phase), _phase_message(phase, conds)))
    return out


def _phase_message(phase: str, conds: _Conditions) -> str:
    for kind in (Cond.FAILED, Cond.PREEMPTED, Cond.SUSPENDED, Cond.SUCCEEDED, Cond.ADMITTED):
        item = conds.items.get(kind)
        if item and (item["status"] == "True" or kind == Cond.ADMITTED):
            return f"{phase}: {item['message']}"
    return str(phase)


def _run(
    job: Obj,
    pods: Sequence[Obj],
    live: list[Obj],
    replicas: int,
    conds: _Conditions,
    disruption: str | None,
    out: Plan,
) -> tuple[str, int]:
    """Phase, restart count and actions of a job that is neither finished nor suspended."""
    spec, status = job["spec"], job.get("status") or {}
    backoff = int((spec.get("runPolicy") or {}).get("backoffLimit", 3))
    restarts = int(status.get("restarts") or 0)
    needed = min_replicas(spec)
    succeeded = {_rank(p) for p in pods if _phase(p) == "Succeeded"} & set(range(replicas))
    started = {_rank(p) for p in live if (p.get("spec") or {}).get("nodeName")}
    # Done when every worker that ran has succeeded (an elastic job's unplaced pods never ran).
    if len(succeeded) >= needed and started <= succeeded:
        conds.set(Cond.SUCCEEDED, True, Reason.COMPLETED, f"{len(succeeded)} workers succeeded")
        out.delete = [p["metadata"]["name"] for p in live if _rank(p) not in succeeded]
        return Phase.SUCCEEDED, restarts

    failed = [p for p in live if _phase(p) == "Failed"]
    terminating = [p for p in pods if _deleting(p)]
    # Why pods went away: a preemption or node loss marks them before deleting them.
    causes = {c for p in [*failed, *terminating] if (c := _disrupted(p))}
    if disruption:
        causes.add(disruption)
    if names.PREEMPTED_REASON in causes:
        conds.set(
            Cond.PREEMPTED,
            True,
            Reason.PREEMPTED_BY_HIGHER_PRIORITY,
            "evicted as a whole gang for higher-priority work; requeued",
        )
    if failed:
        counted = [p for p in failed if not _disrupted(p)]
        if counted:
            restarts += 1
        if restarts > backoff:
            names_ = sorted(p["metadata"]["name"] for p in counted)
            conds.set(
                Cond.FAILED,
                True,
                Reason.BACKOFF_LIMIT_EXCEEDED,
                f"worker(s) {', '.join(names_)} failed; {restarts - 1} gang restart(s) used "
                f"of backoffLimit={backoff}",
            )
            out.delete = [
                p["metadata"]["name"] for p in live if _phase(p) not in ("Succeeded", "Failed")
            ]
            return Phase.FAILED, restarts
        # Restart the whole gang: delete every pod, recreate once all are gone.
        out.delete = [p["metadata"]["name"] for p in live]
        why = "a worker failed" if counted else "a worker was disrupted"
        out.events.append(("Warning", GANG_RESTART, f"{why}; restart {restarts}/{backoff}"))
        conds.set(Cond.PODS_READY, False, GANG_RESTART, why)
        return _waiting(conds), restarts

    by_rank = {_rank(p): p for p in live}
    members = [by_rank[i] for i in range(replicas) if i in by_rank]
    bound = [p for p in members if (p.get("spec") or {}).get("nodeName")]
    if not terminating:
        wanted = replicas if len(bound) >= needed else start_replicas(spec)
        out.create = [i for i in range(wanted) if i not in by_rank]
    running = [p for p in bound if _phase(p) == "Running"]
    if len(bound) >= needed:
        nodes = sorted({(p.get("spec") or {}).get("nodeName", "") for p in bound})
        conds.set(Cond.ADMITTED, True, Reason.PLACED, f"placed on {', '.join(nodes)}")
        if conds.is_true(Cond.PREEMPTED):
            conds.set(Cond.PREEMPTED, False, READMITTED, "admitted again after preemption")
        if len(running) == len(bound):
            conds.set(Cond.PODS_READY, True, "Running", f"{len(running)} workers running")
            return Phase.RUNNING, restarts
        conds.set(Cond.PODS_READY, False, "Starting", f"{len(running)}/{len(bound)} running")
        return Phase.ADMITTED, restarts
    reason, message = pending_reason(members)
    if terminating:
        reason, message = GANG_RESTART, "waiting for the previous workers to exit"
    conds.set(Cond.ADMITTED, False, reason, message)
    if conds.is_true(Cond.PODS_READY):
        conds.set(Cond.PODS_READY, False, "NotRunning", f"{len(running)}/{replicas} running")
    return _waiting(conds), restarts


def _waiting(conds: _Conditions) -> str:
    return Phase.PREEMPTED if conds.is_true(Cond.PREEMPTED) else Phase.QUEUED
