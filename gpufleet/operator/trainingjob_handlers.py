"""kopf handlers for TrainingJob: thin glue between watch events and `reconcile.plan`.

Each pass (`reconcile_pass`) first asks `plan()` about the body kopf watched and the job's pods
(from the scheduler's cache), with no API call; most passes of the timer stop there, since
nothing changed. Only a pass that would act takes the job's lock, reads the job afresh
(`fresh_read`: never act on the body kopf hands the handler, which may predate the previous
pass's writes), asks the pure `plan()` again what to do, and carries it out: create
missing worker pods and the headless Service, delete pods, write the status in one patch before
releasing the lock, and hand back the Events (one per phase transition and new waiting reason)
for the kopf handler to post. It runs on
create, on spec changes, on resume after an operator restart (state is rebuilt from the
cluster), and every tick (`register_timer`, the setting `operator.tick_s`) to follow the pods.
Placement is never decided here: the scheduler (and through it the core) binds the pods and
reports why a gang waits on them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import kopf
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from gpufleet import kubepool
from gpufleet.model.contract import names
from gpufleet.model.contract.moves import moved_at
from gpufleet.model.contract.service import read_tier_evictions
from gpufleet.model.gpus import load_catalog
from gpufleet.operator import (
    children,
    fresh_read,
    leading,
    metrics,
    podtemplate,
    quiet,
    reconcile,
)
from gpufleet.operator.accounting import UsageLedger
from gpufleet.operator.objects import TrainingJobObject, parse_or_fail
from gpufleet.operator.ports import PodSource

RESOURCE = (children.GROUP, children.VERSION, children.PLURAL)
_KIND = fresh_read.Resource(*RESOURCE)
DEFAULT_TICK_S = 1.0  # seconds between passes over a job; pods' progress shows up within this
_STATUS_KEYS = (
    "phase", "conditions", "replicas", "placement", "restarts", "observedGeneration",
    "gpuType", "startTime", "completionTime", "moves", "moveTimes", "throughput", "scaling",
)  # fmt: skip

# Written by the pass that starts a new run only (`reconcile.starts_run`), so, like the usage
# fields, not among the keys a pass removes when its plan lacks them. (The tier's count,
# `tierEvictions`, is the plan's own: every plan of a job the tier evicted carries it.)
ATTAINED_KEY = "attainedGpuSeconds"

log = logging.getLogger("gpufleet.operator")


class State:
    """Per-process memory shared by the handlers (kept in kopf's memo). Pods are read from
    a `PodSource` (in `gpufleet operator`, the scheduler's cache, which watches every pod of
    the cluster anyway)."""

    def __init__(
        self,
        api: client.ApiClient,
        cache: PodSource,
        scheduler_name: str = names.SCHEDULER_NAME,
        tick_s: float = DEFAULT_TICK_S,
        may_act: Callable[[], bool] = leading.always,
        tolerations: tuple[Mapping[str, Any], ...] = podtemplate.GPU_TOLERATIONS,
    ) -> None:
        self.cache = cache
        self.may_act = may_act  # the Lease fence (leading.py)
        self.scheduler_name = scheduler_name  # of the pods it creates
        self.tolerations = tolerations  # added to the pods it creates
        self.tick_s = tick_s
        cache.on_pod_deleted(lambda pod: record_disruption(self, pod))
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.locks = fresh_read.JobLocks()
        self.disruptions: dict[str, str] = {}  # job uid -> reason a pod was disrupted
        self.moves: dict[str, datetime] = {}  # job uid -> when a move deleted its pods
        # job uid -> the tier's count a pod the tier evicted carried (reconcile.plan's tier_run)
        self.tier_runs: dict[str, int] = {}
        self.services: set[str] = set()  # job uids whose Service exists
        # GPU time and energy per job uid, accrued every pass.
        self.usage = UsageLedger(load_catalog())
        self.quiet = quiet.QuietPasses(self.usage)  # what each job's last check found unchanged
        self.guard = threading.Lock()
        # Pod creation of a 64-worker job is 64 round trips: run them side by side.
        self.pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="create-pods")


def record_disruption(state: State, pod: dict[str, Any]) -> None:
    """Pods of a preempted or restarted gang may vanish between two passes; remember why (not
    for an elastic job's replica beyond its minimum given to other work: `job_disruption`),
    and, for the service tier's eviction, the tier's count the pod carried (its run's)."""
    reason = reconcile.job_disruption(pod)
    moved = moved_at(pod)
    carried = read_tier_evictions(pod["metadata"].get("annotations") or {})
    if reason is not None:
        for owner in pod["metadata"].get("ownerReferences") or []:
            uid = owner["uid"]
            with state.guard:
                state.disruptions[uid] = reason
                if moved is not None:
                    state.moves[uid] = max(moved, state.moves.get(uid, moved))
                if reason == names.SERVICE_PREEMPTED_REASON:
                    state.tier_runs[uid] = max(carried, state.tier_runs.get(uid, carried))


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _create_pods(state: State, job: TrainingJobObject, ranks: Iterable[int]) -> str | None:
    """Create worker pods in parallel; returns the API server's message if it rejects the
    template. AlreadyExists is success: an earlier pass (or operator run) created the pod."""
    namespace = job.id.namespace

    def create(rank: int) -> str | None:
        pod: Any = children.worker_pod(job, rank, state.tolerations, state.scheduler_name)
        try:
            kubepool.release(
                state.core.create_namespaced_pod(namespace, pod, _preload_content=False)
            )
        except ApiException as exc:
            if exc.status == 409:
                return None
            if exc.status in (400, 403, 422):
                return _api_message(exc)
            return f"retry: creating {pod['metadata']['name']}: {exc.reason}"
        return None

    errors = [e for e in state.pool.map(create, list(ranks)) if e is not None]
    rejected = [e for e in errors if not e.startswith("retry: ")]
    if rejected:
        return rejected[0]
    if errors:
        raise kopf.TemporaryError(errors[0].removeprefix("retry: "), delay=2)
    return None


def _api_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "").get("message", exc.reason))
    except (TypeError, ValueError):
        return str(exc.reason)


def _ensure_service(state: State, job: TrainingJobObject) -> None:
    uid = job.id.uid
    if uid in state.services:
        return
    service: Any = children.headless_service(job)
    try:
        kubepool.release(
            state.core.create_namespaced_service(job.id.namespace, service, _preload_content=False)
        )
    except ApiException as exc:
        if exc.status != 409:
            raise kopf.TemporaryError(f"creating the Service: {exc.reason}", delay=2) from exc
    state.services.add(uid)


def _delete_pods(state: State, namespace: str, pod_names: Iterable[str]) -> None:
    for name in pod_names:
        try:
            kubepool.release(
                state.core.delete_namespaced_pod(name, namespace, _preload_content=False)
            )
        except ApiException as exc:
            if exc.status != 404:
                raise kopf.TemporaryError(f"deleting {name}: {exc.reason}", delay=2) from exc


def _annotate_pods(
    state: State, namespace: str, annotate: Mapping[str, Mapping[str, str | None]]
) -> None:
    """Merge annotations into live pods (an elastic job's scaling curve). A pod gone since is
    fine: its replacement is created with the curve."""
    for name, wanted in sorted(annotate.items()):
        body = {"metadata": {"annotations": dict(wanted)}}
        try:
            kubepool.release(
                state.core.patch_namespaced_pod(name, namespace, body, _preload_content=False)
            )
        except ApiException as exc:
            if exc.status != 404:
                raise kopf.TemporaryError(f"annotating {name}: {exc.reason}", delay=2) from exc


Event = tuple[str, str, str]  # (type, reason, message)


def would_act(state: State, body: Mapping[str, Any]) -> bool:
    """Whether a pass over the job in `body` (the watched body: no API call) could change
    anything: create, delete or annotate pods, write the status, post an Event, delete the job
    or write its GPU time. A job whose pods and status agree costs the timer no API call; the
    pass that acts plans again from the job read afresh under its lock. A body older than the
    previous pass's own writes only makes this say yes until the watch catches up. While neither
    the job nor its pods changed since a check that said no, and no time-based step is due, the
    answer is no without planning again (`quiet`)."""
    meta = body["metadata"]
    if meta.get("deletionTimestamp"):
        return False  # the finalizer's handler, not a pass, deals with it
    uid = meta["uid"]
    with state.guard:
        if uid in state.disruptions or uid in state.moves:
            return True
    now = _now()
    pods = state.cache.owned_pods(meta.get("namespace") or "default", meta["name"])
    seen = quiet.versions([body], pods)
    return state.quiet.would_act(uid, seen, pods, now, lambda: _check(state, body, pods, now))


def _check(
    state: State, body: Mapping[str, Any], pods: list[dict[str, Any]], now: datetime
) -> tuple[bool, datetime | None]:
    """`would_act` planned afresh from `body` and `pods`; with, when it would not act, the
    time after which it may (`reconcile.next_due`)."""
    try:
        job = TrainingJobObject.of(body)
    except ValidationError:  # the pass says why and marks the job Failed, once
        return (body.get("status") or {}).get("phase") != "Failed", None
    if state.usage.accrue(job.id.uid, pods, now):
        return True, None
    plan = reconcile.plan(job, pods, now)
    if plan.create or plan.delete or plan.annotate or plan.delete_job or plan.events:
        return True, None
    changes = fresh_read.status_changes(job.status, plan.status, _STATUS_KEYS)
    return bool(changes), reconcile.next_due(job)


def reconcile_pass(state: State, body: Mapping[str, Any], patch: kopf.Patch) -> list[Event]:
    """One pass over the TrainingJob `body` names (see the module docstring); the Events to
    post. It acts only if `would_act` says the watched body calls for it; then it reads the
    job again under the job's lock and plans from that."""
    leading.ensure_leading(state.may_act)
    if not would_act(state, body):
        return []
    with fresh_read.job_under_lock(state.locks, state.custom, _KIND, body) as raw:
        if raw is None:
            return []
        job = parse_or_fail(TrainingJobObject.of, raw, patch.status.update)
        if job is None:
            return []
        uid, namespace = job.id.uid, job.id.namespace
        pods = state.cache.owned_pods(namespace, job.id.name)
        with state.guard:
            disruption = state.disruptions.pop(uid, None)
            moved = state.moves.pop(uid, None)
            tier_run = state.tier_runs.pop(uid, None)
        now = _now()
        plan = reconcile.plan(job, pods, now, disruption, moved=moved, tier_run=tier_run)
        current = raw.get("status") or {}
        if reconcile.starts_run(pods, plan):
            # The service of its ended runs, for the scheduler's service tier: the GPU time
            # used so far (no worker holds a node now), written beside the pass's status.
            attained = round(state.usage.total(uid, current, pods, now), 1)
            if attained > 0:
                plan.status[ATTAINED_KEY] = attained
        if plan.create:
            _ensure_service(state, job)
            # The new pods carry the move just counted (the scheduler's per-hour limit), the
            # service just recorded (its service tier) and the tier's evictions (its limit).
            counted = dataclasses.replace(job, status={**job.status, **plan.status})
            error = _create_pods(state, counted, plan.create)
            if error is not None:
                plan = reconcile.plan(
                    job, pods, now, disruption, create_error=error, moved=moved, tier_run=tier_run
                )
        _delete_pods(state, namespace, plan.delete)
        _annotate_pods(state, namespace, plan.annotate)
        changes = fresh_read.status_changes(current, plan.status, _STATUS_KEYS)
        changes |= state.usage.changes(uid, current, pods, now, bool(changes))
        fresh_read.write_status(state.custom, _KIND, namespace, job.id.name, changes)
        if plan.delete_job:
            # Delete a tick later, from another thread: a deletion that lands while the timer
            # that asked for it is still running can leave kopf waiting on that timer, and the
            # finalizer is then never released.
            state.pool.submit(_delete_job, state, namespace, job.id.name)
        return plan.events


@metrics.timed("TrainingJob")
def _reconcile(body: kopf.Body, memo: Any, patch: kopf.Patch) -> None:
    for kind, reason, message in reconcile_pass(memo.state, body, patch):
        kopf.event(body, type=kind, reason=reason, message=message)


def _delete_job(state: State, namespace: str, name: str) -> None:
    time.sleep(state.tick_s)
    try:
        state.custom.delete_namespaced_custom_object(
            children.GROUP, children.VERSION, namespace, children.PLURAL, name
        )
    except ApiException as exc:
        if exc.status != 404:  # the next pass asks again
            log.warning("deleting finished job %s/%s: %s", namespace, name, exc.reason)


@kopf.on.create(*RESOURCE)
@kopf.on.resume(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
def reconcile_job(body: kopf.Body, memo: Any, patch: kopf.Patch, **_: Any) -> None:
    _reconcile(body, memo, patch)


def follow_pods(body: kopf.Body, memo: Any, patch: kopf.Patch, **_: Any) -> None:
    _reconcile(body, memo, patch)


def register_timer(tick_s: float, registry: kopf.OperatorRegistry | None = None) -> None:
    """Follow every TrainingJob every `tick_s` seconds (once per process, by its composition
    root, which owns the period)."""
    kopf.timer(*RESOURCE, interval=tick_s, registry=registry)(follow_pods)


@kopf.on.delete(*RESOURCE)
def delete_children(namespace: str | None, name: str, uid: str, memo: Any, **_: Any) -> None:
    """Finalizer: remove the pods and Service now instead of waiting for garbage collection."""
    state: State = memo.state
    leading.ensure_leading(state.may_act)
    selector = f"{children.JOB_LABEL}={name}"
    namespace = namespace or "default"
    try:
        state.core.delete_collection_namespaced_pod(namespace, label_selector=selector)
        state.core.delete_namespaced_service(name, namespace)
    except ApiException as exc:
        if exc.status != 404:
            raise kopf.TemporaryError(f"deleting children: {exc.reason}", delay=2) from exc
    forget(state, uid)


def forget(state: State, uid: str) -> None:
    """Drop everything the process keeps about job `uid` (it is being deleted). A disruption
    or move recorded since the job's last pass is dropped too: no pass will take it."""
    state.services.discard(uid)
    state.quiet.forget(uid)
    state.locks.forget(uid)
    state.usage.forget(uid)
    with state.guard:
        state.disruptions.pop(uid, None)
        state.moves.pop(uid, None)
        state.tier_runs.pop(uid, None)
