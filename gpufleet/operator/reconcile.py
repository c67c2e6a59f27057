"""The TrainingJob state machine as a pure function: (job, its pods, now) -> actions + status.

The operator's handlers only gather inputs and carry out the returned `Plan`, so every rule of
the run policy is unit-tested here without an API server:
- pods are created for missing ranks (never while a gang restart is still deleting pods);
- a failed worker restarts the whole gang, up to `backoffLimit`; failures caused by preemption
  or node loss (a DisruptionTarget condition) do not count; an elastic job whose replicas beyond
  its minimum were preempted (given to other work) is not preempted: it runs on, smaller;
- `activeDeadlineSeconds` counts from the first start, `ttlSecondsAfterFinished` from the end;
- `suspend` deletes the pods and keeps the job;
- a move (the scheduler deleted the gang's pods to restart it on faster GPUs) is counted once
  in `status.moves` and `status.moveTimes`, with an Event, and the gang is recreated like any
  restarted gang (it does not count against `backoffLimit`);
- a preemption for a job of the same queue and priority that has received less service (the
  service tier) says so in the Preempted condition (`PreemptedForLessServedJob`);
- pods created while no worker holds a node start a new run (`starts_run`): the handlers first
  record the service of the job's ended runs in `status.attainedGpuSeconds`, which the new pods
  carry for the scheduler's service tier (`model.contract.service`);
- a run the tier ends is counted in `status.tierEvictions` as soon as its evicted pods are seen
  (or one was seen vanish), whether or not any of them had started: once per run, since each
  run's pods carry the count from when they were created, and the eviction of a run that
  carried n makes the count at least n + 1 (`_count_tier_eviction`); the new pods carry it (the
  tier's limit on re-evictions); the count the scheduler wrote on the job as it evicted (its
  `gpufleet.io/tier-evictions` annotation: `children.recorded_tier_evictions`) counts too, so a
  run whose pods vanished before any pass saw them (no operator running) is not lost;
- while the gang waits, the Admitted condition carries the scheduler's (the core's) reason;
- an elastic job's reported throughput (its `gpufleet.io/throughput` annotation) is kept per
  replica count in `status.throughput`, its scaling curve refined from it in `status.scaling`
  and written on every live worker pod for the scheduler (`model.contract.scaling`); an
  unreadable report sets ThroughputReported False with a Warning and changes nothing;
- Events: one per phase transition and one Warning per new reason to wait (both against the
  status the pass read, so a pass that changes nothing posts nothing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gpufleet.model.contract import names
from gpufleet.model.contract.assignment import assigned_gpus, assigned_mig, assigned_type
from gpufleet.model.contract.moves import moved_at
from gpufleet.model.contract.reasons import disruption_reason, is_preemption, read_pending
from gpufleet.model.contract.scaling import parse_throughput, scaling_annotations
from gpufleet.model.contract.service import read_tier_evictions
from gpufleet.model.contract.timestamps import format_time, parse_time
from gpufleet.model.contract.wishes import read_gang_size, read_rank
from gpufleet.model.trainingjob import (
    MAX_MOVE_TIMES,
)
from gpufleet.model.trainingjob import (
    TrainingJobConditionType as Cond,
)
from gpufleet.model.trainingjob import (
    TrainingJobPhase as Phase,
)
from gpufleet.model.trainingjob import (
    TrainingJobReason as Reason,
)
from gpufleet.operator.children import (
    min_replicas,
    recorded_tier_evictions,
    replica_count,
    scaling_curve,
    start_replicas,
    throughput_reports,
)
from gpufleet.operator.objects import TrainingJobObject

Obj = Mapping[str, Any]

# Reasons gpufleet adds beside the model's stable set.
TEMPLATE_REJECTED = "PodTemplateRejected"
WAITING_FOR_SCHEDULER = "WaitingForScheduler"
GANG_RESTART = "GangRestart"
RESUMED = "Resumed"
READMITTED = "Readmitted"
NODE_FAILURE = "NodeFailure"
MOVED = "Moved"
SERVICE_PREEMPTED = (
    "evicted as a whole gang for a job of its queue and priority that has received less "
    "service (its attained GPU-seconds are past placement.service_tier_gpu_s); requeued"
)
MAX_SHOWN = 200  # characters of a throughput report quoted in the condition's message


@dataclass
class Plan:
    create: list[int] = field(default_factory=list)  # worker ranks to create
    delete: list[str] = field(default_factory=list)  # pod names to delete
    delete_job: bool = False
    # pod name -> annotations to merge into it (None removes one): the scaling curve.
    annotate: dict[str, dict[str, str | None]] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)


def _deleting(pod: Obj) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def _phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase", "Pending"))


def _rank(pod: Obj) -> int:
    index = read_rank(pod["metadata"].get("labels") or {})
    return -1 if index is None else index


def _disrupted(pod: Obj) -> str | None:
    return job_disruption(pod)


def _given_away(pod: Obj) -> bool:
    return is_preemption(disruption_reason(pod)) and job_disruption(pod) is None


def job_disruption(pod: Obj) -> str | None:
    """Why the pod's disruption disrupted its job, or None: a gpufleet preemption of a worker
    beyond the gang's size (an elastic job's replica beyond its minimum, given to other work)
    shrinks the job, which runs on; it was not preempted."""
    reason = disruption_reason(pod)
    annotations = pod["metadata"].get("annotations") or {}
    sized = names.GANG_SIZE in annotations  # without it nothing says the pod is growth
    if is_preemption(reason) and sized and _rank(pod) >= read_gang_size(annotations):
        return None
    return reason


def starts_run(pods: Sequence[Obj], out: Plan) -> bool:
    """Whether carrying out `out` starts a new run of the job: it creates workers while none
    holds a node (none ever did, or the last run ended by a preemption, a move or a restart).
    The GPU time the job has used by then is all its ended runs'. Workers created beside
    running ones (an elastic job's room to grow, a replaced member) join the current run."""
    held = any(
        (p.get("spec") or {}).get("nodeName") and _phase(p) not in ("Succeeded", "Failed")
        for p in pods
        if not _deleting(p)
    )
    return bool(out.create) and not held


def pending_reason(pods: Sequence[Obj]) -> tuple[str, str]:
    """(condition reason, message) from the scheduler's pending note on the pods: the reason is
    the scheduler's code itself (the core's `PendingReason` or the scheduler's own)."""
    for pod in sorted(pods, key=_rank):
        note = read_pending(pod)
        if note is not None:
            reason = Reason.INSUFFICIENT_GPUS if note.reason is None else note.reason
            return str(reason), note.text
    return WAITING_FOR_SCHEDULER, "waiting for the gpufleet scheduler"


def placement(pods: Sequence[Obj]) -> list[dict[str, Any]]:
    out = []
    for pod in sorted(pods, key=_rank):
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or _rank(pod) < 0:
            continue
        ann = pod["metadata"].get("annotations") or {}
        entry: dict[str, Any] = {"replica": _rank(pod), "node": node}
        gpu_type = assigned_type(ann)
        if gpu_type is not None:
            entry["gpuType"] = gpu_type
        mig = assigned_mig(ann)
        gpus = assigned_gpus(ann)
        if mig is not None:
            index, instance = mig
            entry["migSlice"] = {
                "profile": instance.profile,
                "gpuIndex": index,
                "start": instance.start,
            }
        elif gpus:
            entry["gpus"] = list(gpus)
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
            "lastTransitionTime": format_time(self.now) if changed else old["lastTransitionTime"],  # type: ignore[index]
            "observedGeneration": self.generation,
        }

    def is_true(self, kind: str) -> bool:
        return self.items.get(kind, {}).get("status") == "True"

    def reason(self, kind: str) -> str | None:
        item = self.items.get(kind)
        return None if item is None else str(item.get("reason"))

    def listed(self) -> list[dict[str, Any]]:
        return [self.items[k] for k in sorted(self.items)]


@dataclass
class _Pass:
    """What one pass over a job knows and decides; the steps of `plan` fill it in."""

    job: TrainingJobObject
    pods: Sequence[Obj]
    now: datetime
    conds: _Conditions
    phase: str | None  # the phase the status shows, until a step decides the new one
    restarts: int
    start: datetime | None
    completion: datetime | None
    move_times: list[datetime] = field(default_factory=list)
    moves: int = 0
    tier_evictions: int = 0
    throughput: dict[int, float] = field(default_factory=dict)
    scaling: tuple[float, ...] = ()
    out: Plan = field(default_factory=Plan)

    @property
    def live(self) -> list[Obj]:
        return [p for p in self.pods if not _deleting(p)]

    @property
    def active(self) -> list[Obj]:
        return [p for p in self.live if _phase(p) not in ("Succeeded", "Failed")]

    def finish(self, phase: Phase, kind: Cond, reason: str, message: str) -> None:
        """End the job now: the condition `kind` says why, its running workers go."""
        self.phase = phase
        self.completion = self.completion or self.now
        self.conds.set(kind, True, reason, message)
        self.out.delete = [p["metadata"]["name"] for p in self.active]


def plan(
    job: TrainingJobObject,
    pods: Sequence[Obj],
    now: datetime,
    disruption: str | None = None,
    create_error: str | None = None,
    moved: datetime | None = None,
    tier_run: int | None = None,
) -> Plan:
    """What to do for `job` given its pods. `disruption` is the DisruptionTarget reason of a
    pod seen deleted since the last pass, `moved` when its move began, if it was deleted
    for one, and `tier_run` the tier's count it carried, if the tier evicted it;
    `create_error` a rejected pod creation."""
    status = job.status
    step = _Pass(
        job,
        pods,
        now,
        _Conditions(status.get("conditions"), now, job.id.generation),
        status.get("phase"),
        int(status.get("restarts") or 0),
        parse_time(status.get("startTime")),
        parse_time(status.get("completionTime")),
        [t for raw in status.get("moveTimes") or [] if (t := parse_time(raw))],
        int(status.get("moves") or 0),
        recorded_tier_evictions(status, job.annotations),
    )
    _count_moves(step, moved)
    _count_tier_eviction(step, tier_run)
    # A spec edit after a rejected template gives the job another try.
    retry = step.conds.reason(Cond.FAILED) == TEMPLATE_REJECTED and job.id.generation > int(
        status.get("observedGeneration") or 0
    )
    if step.phase in (Phase.SUCCEEDED, Phase.FAILED) and not retry:
        _finished(step)
    elif create_error is not None:
        step.finish(Phase.FAILED, Cond.FAILED, TEMPLATE_REJECTED, create_error)
        step.conds.set(Cond.ADMITTED, False, TEMPLATE_REJECTED, create_error)
    elif job.spec.run_policy.suspend:
        _suspend(step)
    else:
        _progress(step, retry, disruption)
    _scaling(step)
    _write_status(step, status.get("phase"))
    waiting = _admission_wait(step.out.status["conditions"])
    if waiting is not None and waiting != _admission_wait(status.get("conditions") or []):
        step.out.events.append(("Warning", *waiting))
    unreadable = _unreadable_report(step.out.status["conditions"])
    if unreadable is not None and unreadable != _unreadable_report(status.get("conditions") or []):
        step.out.events.append(("Warning", Reason.THROUGHPUT_UNREADABLE, unreadable))
    return step.out


def _scaling(step: _Pass) -> None:
    """An elastic job's throughput reports and scaling curve (module docstring); the curve
    goes onto every live worker pod that does not carry it yet."""
    elastic = step.job.spec.elastic
    if elastic is None:
        return
    step.throughput = throughput_reports(step.job.status)
    raw = step.job.annotations.get(names.THROUGHPUT)
    if raw is not None:
        try:
            step.throughput |= parse_throughput(raw, elastic.max_replicas)
        except ValueError as exc:
            step.conds.set(Cond.THROUGHPUT_REPORTED, False, Reason.THROUGHPUT_UNREADABLE, str(exc))
        else:
            shown = raw if len(raw) <= MAX_SHOWN else f"{raw[:MAX_SHOWN]}..."
            step.conds.set(
                Cond.THROUGHPUT_REPORTED, True, Reason.THROUGHPUT_RECORDED, f"recorded {shown}"
            )
    step.scaling = scaling_curve(step.job.spec, step.throughput)
    wanted = scaling_annotations(step.scaling).get(names.SCALING)
    if step.phase in (Phase.SUCCEEDED, Phase.FAILED):
        return  # its pods are going: nothing to tell the scheduler
    for pod in step.active:
        annotations = pod["metadata"].get("annotations") or {}
        if annotations.get(names.SCALING) != wanted:
            step.out.annotate[pod["metadata"]["name"]] = {names.SCALING: wanted}


def _unreadable_report(conditions: Sequence[Obj]) -> str | None:
    """The message of a False ThroughputReported condition (None when there is none)."""
    for c in conditions:
        if c.get("type") == Cond.THROUGHPUT_REPORTED and c.get("status") == "False":
            return str(c.get("message"))
    return None


def _count_moves(step: _Pass, moved: datetime | None) -> None:
    """Count each move the scheduler began since the last one counted: its time is on the
    pods it deletes (or was recorded when such a pod vanished between two passes)."""
    seen = {t for p in step.pods if _deleting(p) and (t := moved_at(p)) is not None}
    if moved is not None:
        seen.add(moved)
    last = step.move_times[-1] if step.move_times else None
    for t in sorted(x for x in seen if last is None or x > last):
        step.moves += 1
        step.move_times = [*step.move_times, t][-MAX_MOVE_TIMES:]
        message = f"restarted whole to move to faster GPUs (move {step.moves})"
        step.out.events.append(("Normal", MOVED, message))


def _count_tier_eviction(step: _Pass, tier_run: int | None) -> None:
    """Count the run the service tier ended, once: each pod of a run carries the count the job
    had when the pod was created (`model.contract.service.read_tier_evictions`), so the evicted
    pods of a run that carried n make the count at least n + 1, and every later pass that sees
    them (or a pod of that run seen vanish, `tier_run`) finds it so. A run whose pods never
    started counts too: the eviction is the tier's all the same."""
    carried = [
        read_tier_evictions(p["metadata"].get("annotations") or {})
        for p in step.pods
        if (_deleting(p) or _phase(p) == "Failed")
        and _disrupted(p) == names.SERVICE_PREEMPTED_REASON
    ]
    if tier_run is not None:
        carried.append(tier_run)
    if carried:
        step.tier_evictions = max(step.tier_evictions, max(carried) + 1)


def _admission_wait(conditions: Sequence[Obj]) -> tuple[str, str] | None:
    """(reason, message) of a False Admitted condition; None when admitted or not yet said."""
    admitted = next((c for c in conditions if c.get("type") == Cond.ADMITTED), None)
    if admitted is None or admitted.get("status") == "True" or not admitted.get("message"):
        return None
    return str(admitted.get("reason")), str(admitted["message"])


def next_due(job: TrainingJobObject) -> datetime | None:
    """When `plan` may decide differently for the same job and pods only because time passed:
    its TTL after it finished, or its activeDeadlineSeconds while it runs (None: never)."""
    status, policy = job.status, job.spec.run_policy
    if status.get("phase") in (Phase.SUCCEEDED, Phase.FAILED):
        done = parse_time(status.get("completionTime"))
        ttl = policy.ttl_seconds_after_finished
        return None if done is None or ttl is None else done + timedelta(seconds=ttl)
    start, deadline = parse_time(status.get("startTime")), policy.active_deadline_seconds
    return None if start is None or deadline is None else start + timedelta(seconds=deadline)


def _finished(step: _Pass) -> None:
    """A finished job keeps its phase, stops what still runs and goes after its TTL."""
    step.out.delete = [p["metadata"]["name"] for p in step.active]
    ttl = step.job.spec.run_policy.ttl_seconds_after_finished
    if ttl is not None and step.completion is not None:
        step.out.delete_job = step.now >= step.completion + timedelta(seconds=ttl)


def _suspend(step: _Pass) -> None:
    step.phase = Phase.SUSPENDED
    step.conds.set(Cond.SUSPENDED, True, Reason.SUSPENDED_BY_USER, "suspended by the user")
    step.conds.set(Cond.ADMITTED, False, Reason.SUSPENDED_BY_USER, "suspended by the user")
    step.out.delete = [p["metadata"]["name"] for p in step.live]


def _progress(step: _Pass, retry: bool, disruption: str | None) -> None:
    """A job that is neither finished nor suspended: run it, then hold it to its deadline."""
    if retry:
        step.conds.items.pop(Cond.FAILED, None)
        step.completion = None
    if step.conds.is_true(Cond.SUSPENDED):
        step.conds.set(Cond.SUSPENDED, False, RESUMED, "resumed by the user")
    step.phase, step.restarts = _run(
        step.job, step.pods, step.live, step.conds, disruption, step.out
    )
    if step.phase == Phase.RUNNING and step.start is None:
        step.start = step.now
    deadline = step.job.spec.run_policy.active_deadline_seconds
    if step.phase in (Phase.FAILED, Phase.SUCCEEDED):
        step.completion = step.completion or step.now
    elif (
        deadline is not None
        and step.start is not None
        and step.now >= step.start + timedelta(seconds=deadline)
    ):
        step.out.create = []
        step.finish(
            Phase.FAILED,
            Cond.FAILED,
            Reason.DEADLINE_EXCEEDED,
            f"ran longer than activeDeadlineSeconds={deadline}",
        )


def _write_status(step: _Pass, old_phase: str | None) -> None:
    """The status of the pass, and an Event when the phase changed."""
    phase, out, active = str(step.phase), step.out, step.active
    out.status = {
        "phase": phase,
        "conditions": step.conds.listed(),
        "replicas": len([p for p in active if (p.get("spec") or {}).get("nodeName")]),
        "placement": placement(active),
        "restarts": step.restarts,
        "observedGeneration": step.job.id.generation,
    }
    types = {e.get("gpuType") for e in out.status["placement"] if e.get("gpuType")}
    if len(types) == 1:
        out.status["gpuType"] = types.pop()
    if step.start is not None:
        out.status["startTime"] = format_time(step.start)
    if step.throughput:
        out.status["throughput"] = [
            {"replicas": r, "value": v} for r, v in sorted(step.throughput.items())
        ]
    if step.scaling:
        out.status["scaling"] = list(step.scaling)
    if step.moves:
        out.status["moves"] = step.moves
        out.status["moveTimes"] = [format_time(t) for t in step.move_times]
    if step.tier_evictions:
        out.status["tierEvictions"] = step.tier_evictions
    if step.completion is not None and phase in (Phase.SUCCEEDED, Phase.FAILED):
        out.status["completionTime"] = format_time(step.completion)
    if phase != old_phase:
        kind = "Warning" if phase in (Phase.FAILED, Phase.PREEMPTED) else "Normal"
        out.events.append((kind, phase, _phase_message(phase, step.conds)))


def _phase_message(phase: str, conds: _Conditions) -> str:
    for kind in (Cond.FAILED, Cond.PREEMPTED, Cond.SUSPENDED, Cond.SUCCEEDED, Cond.ADMITTED):
        item = conds.items.get(kind)
        if item and (item["status"] == "True" or kind == Cond.ADMITTED):
            return f"{phase}: {item['message']}"
    return str(phase)


def _run(
    job: TrainingJobObject,
    pods: Sequence[Obj],
    live: list[Obj],
    conds: _Conditions,
    disruption: str | None,
    out: Plan,
) -> tuple[str, int]:
    """Phase, restart count and actions of a job that is neither finished nor suspended."""
    spec = job.spec
    backoff = spec.run_policy.backoff_limit
    restarts = int(job.status.get("restarts") or 0)
    replicas = replica_count(spec)
    needed = min_replicas(spec)
    succeeded = {_rank(p) for p in pods if _phase(p) == "Succeeded"} & set(range(replicas))
    started = {_rank(p) for p in live if (p.get("spec") or {}).get("nodeName")}
    # Done when every worker that ran has succeeded (an elastic job's unplaced pods never ran).
    if len(succeeded) >= needed and started <= succeeded:
        conds.set(Cond.SUCCEEDED, True, Reason.COMPLETED, f"{len(succeeded)} workers succeeded")
        out.delete = [p["metadata"]["name"] for p in live if _rank(p) not in succeeded]
        return Phase.SUCCEEDED, restarts

    # An elastic job's replicas beyond its minimum given to other work are no failure: they go,
    # and are created again as room to grow once gone.
    given = [p for p in live if _phase(p) == "Failed" and _given_away(p)]
    if given:
        out.delete = [p["metadata"]["name"] for p in given]
        live = [p for p in live if p not in given]
    failed = [p for p in live if _phase(p) == "Failed"]
    terminating = [p for p in pods if _deleting(p)] + given
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
    elif names.SERVICE_PREEMPTED_REASON in causes:
        conds.set(Cond.PREEMPTED, True, Reason.PREEMPTED_FOR_LESS_SERVED, SERVICE_PREEMPTED)
    if failed:
        return _restart_or_fail(failed, live, restarts, backoff, conds, out)
    placed = [p for p in live if (p.get("spec") or {}).get("nodeName") and _phase(p) != "Succeeded"]
    if succeeded and not placed:
        # Some workers finished and the rest were preempted or lost: the scheduler places
        # only whole gangs, so the others alone would wait for ever. They all run again.
        out.delete = [p["metadata"]["name"] for p in live if _phase(p) == "Succeeded"]
        why = "workers that finished run again with the rest of their gang"
        conds.set(Cond.PODS_READY, False, GANG_RESTART, why)
        return _waiting(conds), restarts
    return _admit_or_wait(job, live, bool(terminating), restarts, conds, out)


def _restart_or_fail(
    failed: list[Obj], live: list[Obj], restarts: int, backoff: int, conds: _Conditions, out: Plan
) -> tuple[str, int]:
    """A worker failed: restart the whole gang, or fail the job past its backoff limit.
    Failures a disruption caused (preemption, node loss) do not count against the limit."""
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


def _admit_or_wait(
    job: TrainingJobObject,
    live: list[Obj],
    terminating: bool,
    restarts: int,
    conds: _Conditions,
    out: Plan,
) -> tuple[str, int]:
    """No failure: create missing workers; Admitted once enough are bound, else say why not."""
    replicas, needed = replica_count(job.spec), min_replicas(job.spec)
    by_rank = {_rank(p): p for p in live}
    members = [by_rank[i] for i in range(replicas) if i in by_rank]
    bound = [p for p in members if (p.get("spec") or {}).get("nodeName")]
    if not terminating:
        wanted = replicas if len(bound) >= needed else start_replicas(job.spec)
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
