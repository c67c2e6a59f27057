"""A ServingJob's status as a pure function: (job, its Deployments, this pass's scaling) ->
status + Events.

Per pool: `replicas` and `readyReplicas` from the Deployment's status, `desiredReplicas` the
awake count gpufleet asked for, and `lastScaleTime` /
`lastScaleReason` of the last change (kept from the previous status when nothing changed).
For a job with standbys, `readyReplicas` counts the replicas that serve (running, awake and
past their wake: those the pools' Services route to, `serving_standby.Standbys.ready`) and
`asleepReplicas` the standbys asleep.

Phase:
- `Ready`: every pool has its desired replicas ready;
- `Progressing`: every pool serves (at least one ready replica) but some wait for more;
- `Pending`: some pool has no ready replica yet and the job never served;
- `Degraded`: some pool lost its last ready replica after the job had served;
- `Failed`: the API server refused a Deployment (the message says why).

Conditions: `Ready` (with the scheduler's reason when replicas wait for GPUs), one
`<Pool>Ready` per pool, `ScalingActive`, and `MetricsAvailable` while autoscaling is on. Events:
`PoolCreated` when a pool's Deployment is created, `Scaled` for every later change of a pool's
replicas, one per phase transition, and
`MetricsUnavailable` / `MetricsAvailable` when the autoscaler loses or regains its data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from gpufleet.model.contract.reasons import PendingNote
from gpufleet.model.contract.serving import MetricsHealth, ScaleChange
from gpufleet.model.contract.timestamps import format_time
from gpufleet.model.servingjob import ServingJobConditionType as Cond
from gpufleet.model.servingjob import ServingJobPhase as Phase
from gpufleet.model.servingjob import ServingJobReason as Reason

__all__ = [
    "DEPLOYMENT_REJECTED",
    "METRICS_AVAILABLE",
    "POOL_CREATED",
    "SCALED",
    "MetricsHealth",
    "Posted",
    "ScaleChange",
    "StatusPlan",
    "plan",
]

Obj = Mapping[str, Any]

# Condition type and reasons gpufleet adds beside the model's stable set.
METRICS_AVAILABLE: Final = "MetricsAvailable"
SCALED: Final = "Scaled"
POOL_CREATED: Final = "PoolCreated"
DEPLOYMENT_REJECTED: Final = "DeploymentRejected"
METRICS_UNAVAILABLE_EVENT: Final = "MetricsUnavailable"
_MAX_REASON_TEXT: Final = 1024  # PoolStatus.lastScaleReason maxLength
_POOL_CONDITIONS: Final = {
    "prefill": Cond.PREFILL_READY,
    "decode": Cond.DECODE_READY,
    "server": Cond.SERVER_READY,
}
_WARNING_PHASES: Final = (Phase.DEGRADED, Phase.FAILED)
_LAST_SCALE: Final = ("lastScaleTime", "lastScaleReason")


@dataclass(frozen=True, slots=True)
class Posted:
    """What the operator last posted Events for (phase, MetricsAvailable status), so a
    transition is posted once even when the status does not show it (a pass without an
    autoscaler tick writes no MetricsAvailable condition)."""

    phase: str | None = None
    metrics: str | None = None


@dataclass
class StatusPlan:
    status: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    posted: Posted = field(default_factory=Posted)


def _condition(
    previous: Sequence[Obj],
    kind: str,
    status: str,
    reason: str,
    message: str,
    now: datetime,
    generation: int | None,
) -> dict[str, Any]:
    """A condition; its transition time moves only when its status does."""
    old = next((c for c in previous if c.get("type") == kind), None)
    since = old["lastTransitionTime"] if old and old.get("status") == status else format_time(now)
    out: dict[str, Any] = {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }
    if generation is not None:
        out["observedGeneration"] = generation
    return out


def _counts(deployment: Obj | None) -> tuple[int, int]:
    """(replicas, readyReplicas) the Deployment reports; (0, 0) while it does not exist."""
    if deployment is None:
        return 0, 0
    status = deployment.get("status") or {}
    return int(status.get("replicas") or 0), int(status.get("readyReplicas") or 0)


def _phase(ready: Mapping[str, int], desired: Mapping[str, int], previous: str | None) -> Phase:
    if all(ready[p] >= desired[p] for p in desired):
        return Phase.READY
    serving = all(ready[p] >= 1 for p in desired)
    if serving:
        return Phase.PROGRESSING
    if previous in (Phase.READY, Phase.PROGRESSING, Phase.DEGRADED):
        return Phase.DEGRADED
    return Phase.PENDING


def _phase_message(phase: Phase, summary: str) -> str:
    return {
        Phase.READY: f"all pools ready ({summary})",
        Phase.PROGRESSING: f"every pool serves, some wait for replicas ({summary})",
        Phase.PENDING: f"waiting for replicas ({summary})",
        Phase.DEGRADED: f"a pool has no ready replica ({summary})",
        Phase.FAILED: "a pool's Deployment was rejected",
    }[phase]


def plan(
    job: Obj,
    deployments: Mapping[str, Obj | None],
    desired: Mapping[str, int],
    now: datetime,
    *,
    changes: Sequence[ScaleChange] = (),
    metrics: MetricsHealth | None = None,
    waiting: PendingNote | None = None,
    create_error: str | None = None,
    posted: Posted | None = None,
    asleep: Mapping[str, int] | None = None,
    ready: Mapping[str, int] | None = None,
) -> StatusPlan:
    """The status of `job` and the Events to post.

    `desired` has one entry per pool of the spec (in reconcile order); `metrics` is None when
    autoscaling is off; `waiting` is the scheduler's note on a replica it cannot place yet;
    `asleep` the standbys asleep and `ready` the replicas serving per pool (None: the job
    keeps no standbys; the Deployments' ready counts are used).
    """
    generation = job["metadata"].get("generation")
    current = job.get("status") or {}
    before = current.get("conditions") or []
    seen = posted or Posted(
        phase=current.get("phase"),
        metrics=next((c["status"] for c in before if c.get("type") == METRICS_AVAILABLE), None),
    )
    out = StatusPlan()
    conditions: list[dict[str, Any]] = []

    def add(kind: str, state: str, reason: str, message: str) -> None:
        conditions.append(_condition(before, kind, state, reason, message, now, generation))

    # 1. Pools.
    counts = _pools(out.status, current, deployments, desired, changes, now, asleep, ready)
    # 2. Phase and readiness.
    summary = ", ".join(f"{p} {counts[p]}/{desired[p]} ready" for p in desired)
    phase = Phase.FAILED if create_error else _phase(counts, desired, seen.phase)
    _readiness(add, phase, counts, desired, summary, waiting, create_error)
    # 3. Scaling and its data.
    metrics_state = _scaling(add, metrics)
    out.status["conditions"] = conditions
    out.status["phase"] = str(phase)
    if generation is not None:
        out.status["observedGeneration"] = generation
    # 4. Events: every change, and transitions not posted yet.
    _events(out, changes, phase, summary, create_error, metrics, metrics_state, seen)
    return out


def _pools(
    status: dict[str, Any],
    current: Obj,
    deployments: Mapping[str, Obj | None],
    desired: Mapping[str, int],
    changes: Sequence[ScaleChange],
    now: datetime,
    asleep: Mapping[str, int] | None,
    serving: Mapping[str, int] | None,
) -> dict[str, int]:
    """Each pool's status entry (into `status`); returns the ready replicas per pool. A pool
    that did not change keeps its last scale from `current` (the status the pass read afresh
    under the job's lock, so never older than what the previous pass wrote)."""
    changed = {c.pool: c for c in changes}
    ready: dict[str, int] = {}
    for pool, want in desired.items():
        replicas, ready[pool] = _counts(deployments.get(pool))
        old = current.get(pool) or {}
        entry: dict[str, Any] = {"replicas": replicas}
        if asleep is not None:
            entry["asleepReplicas"] = asleep.get(pool, 0)
        if serving is not None:
            ready[pool] = serving.get(pool, 0)
        entry |= {"readyReplicas": ready[pool], "desiredReplicas": want}
        change = changed.get(pool)
        if change is not None:
            entry["lastScaleTime"] = format_time(now)
            entry["lastScaleReason"] = change.message[:_MAX_REASON_TEXT]
        else:
            for key in _LAST_SCALE:
                if old.get(key):
                    entry[key] = old[key]
        status[pool] = entry
    return ready


_Add = Callable[[str, str, str, str], None]  # (type, status, reason, message) -> condition


def _readiness(
    add: _Add,
    phase: Phase,
    ready: Mapping[str, int],
    desired: Mapping[str, int],
    summary: str,
    waiting: PendingNote | None,
    create_error: str | None,
) -> None:
    """The Ready condition and one `<Pool>Ready` per pool."""
    if create_error:
        add(Cond.READY, "False", DEPLOYMENT_REJECTED, create_error)
    elif phase is Phase.READY:
        add(Cond.READY, "True", Reason.ALL_POOLS_READY, summary)
    elif waiting is not None:
        # The scheduler's code is the reason; a message without a known code says GPUs.
        reason = Reason.INSUFFICIENT_GPUS if waiting.reason is None else waiting.reason
        add(Cond.READY, "False", reason, f"{summary}; {waiting.text}")
    else:
        add(Cond.READY, "False", Reason.REPLICAS_NOT_READY, summary)
    for pool in desired:
        ok = ready[pool] >= desired[pool]
        add(
            _POOL_CONDITIONS[pool],
            "True" if ok else "False",
            Reason.ALL_POOLS_READY if ok else Reason.REPLICAS_NOT_READY,
            f"{ready[pool]}/{desired[pool]} replicas ready",
        )


def _scaling(add: _Add, metrics: MetricsHealth | None) -> str | None:
    """ScalingActive and MetricsAvailable; returns MetricsAvailable's status (None: none)."""
    if metrics is None:
        add(
            Cond.SCALING_ACTIVE,
            "False",
            Reason.AUTOSCALING_DISABLED,
            "autoscaling is off: every pool is pinned at minReplicas",
        )
        return None
    if metrics.available is None:
        add(Cond.SCALING_ACTIVE, "Unknown", Reason.METRICS_MISSING, "no autoscaler tick yet")
        return None
    reason = (
        Reason.METRICS_FRESH
        if metrics.available
        else (Reason.METRICS_STALE if metrics.stale else Reason.METRICS_MISSING)
    )
    state = "True" if metrics.available else "False"
    text = metrics.message or ("metrics are fresh" if metrics.available else "no metrics")
    add(Cond.SCALING_ACTIVE, state, reason, text)
    add(METRICS_AVAILABLE, state, reason, text)
    return state


def _events(
    out: StatusPlan,
    changes: Sequence[ScaleChange],
    phase: Phase,
    summary: str,
    create_error: str | None,
    metrics: MetricsHealth | None,
    metrics_state: str | None,
    seen: Posted,
) -> None:
    """Every change, and the transitions not posted yet (remembered in `out.posted`)."""
    for change in changes:
        event = POOL_CREATED if change.from_replicas is None else SCALED
        out.events.append(("Normal", event, change.message))
    if str(phase) != seen.phase:
        kind = "Warning" if phase in _WARNING_PHASES else "Normal"
        text = create_error if create_error else _phase_message(phase, summary)
        out.events.append((kind, str(phase), text))
    if metrics_state is not None and metrics_state != seen.metrics and metrics is not None:
        if metrics_state == "False":
            out.events.append(("Warning", METRICS_UNAVAILABLE_EVENT, metrics.message))
        elif seen.metrics == "False":
            out.events.append(("Normal", METRICS_AVAILABLE, "metrics are fresh again"))
    ticked = metrics is None or metrics.available is not None
    out.posted = Posted(phase=str(phase), metrics=metrics_state if ticked else seen.metrics)
