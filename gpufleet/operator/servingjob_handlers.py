"""kopf handlers for ServingJob: thin glue between watch events, the builders, the autoscaler
loop and the status planner.

A pass over a job (`reconcile_pass`) first asks `would_act`, with no API call, whether acting
could change anything: it plans from the body kopf watched, the job's Deployments (a watch the
composition root runs) and its pods (the scheduler's cache), and remembers a check that found
nothing to do (`quiet`, as the TrainingJob pass does). Most timer passes of a steady job stop
there. A pass that would act then runs, under a per-job lock:
1. read the job itself and its Deployments (a get and one list call: consistent reads, so a
   pass never acts on a spec, a status or a replica count older than what the previous pass
   wrote);
2. create missing Deployments, replace the template of those built from an older spec, and
   bring replicas inside the spec's bounds (`serving_children.pool_replicas`: create at
   `minReplicas`, pin at `minReplicas` while autoscaling is off);
3. when autoscaling is on and its interval has passed, run one autoscaler tick through the
   `ServingAutoscaler` the process was built with (`ports`; in `gpufleet operator`, the
   Prometheus-driven `gpufleet.autoscaler`): sample, decide, write the Deployments' scale; a
   pool with standby replicas is seen and scaled through `serving_standby` (asleep pods are
   not counted; a scale-up wakes them first, a scale-down puts pods to sleep);
4. write the status in one patch, still under the lock, with the GPU time and energy of the
   job's awake pods (`accounting`), and hand back the Events the pure `serving_status.plan`
   asks for (the kopf handler posts them).

Why the pass reads the job again instead of using the body kopf hands its handler: see
`fresh_read` (a pass that planned from a timer's stale body scaled a pool back to an old
minReplicas, or wrote back the scale reason the pass before it had replaced).

It runs on create, on spec changes, on resume after an operator restart, and every tick
(`register_timer`, the setting `operator.tick_s`, also the resolution of the autoscaling
interval). Nothing is carried over a restart: replicas are read back from the Deployments and
the autoscaler starts with an empty window, so it holds until it has fresh data. Like the
TrainingJob handlers, these only run in the process that holds the operator's Lease (kopf is
started after the Lease is taken, and the process exits when it is lost). Deployments are
deleted with their ServingJob by the garbage collector (owner references).
"""

from __future__ import annotations

import enum
import functools
import json
import logging
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import kopf
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from gpufleet import kubepool
from gpufleet.kubeerrors import api_error_text
from gpufleet.model.contract import names
from gpufleet.model.contract.reasons import PendingNote, read_pending
from gpufleet.model.contract.serving import MetricsHealth, ScaleChange
from gpufleet.model.contract.standby import gated as is_gated
from gpufleet.model.contract.standby import is_asleep
from gpufleet.model.gpus import load_catalog
from gpufleet.operator import (
    fresh_read,
    leading,
    metrics,
    podtemplate,
    quiet,
    serving_standby,
    serving_status,
)
from gpufleet.operator import serving_children as children
from gpufleet.operator.accounting import UsageLedger
from gpufleet.operator.objects import ServingJobObject, parse_or_fail
from gpufleet.operator.ports import Labelled, ServingAutoscaler
from gpufleet.operator.vllm_sleep import SleepApiError, VllmSleepApi

RESOURCE = (children.GROUP, children.VERSION, children.PLURAL)
_KIND = fresh_read.Resource(*RESOURCE)
_STATUS_KEYS = ("phase", "conditions", "observedGeneration", "prefill", "decode", "server")

log = logging.getLogger("gpufleet.operator")

Obj = dict[str, Any]


class State:
    """Per-process memory of the ServingJob handlers (kept in kopf's memo)."""

    def __init__(
        self,
        api: client.ApiClient,
        autoscalers: ServingAutoscaler,
        scheduler_name: str = names.SCHEDULER_NAME,
        may_act: Callable[[], bool] = leading.always,
        tolerations: tuple[Mapping[str, Any], ...] = podtemplate.GPU_TOLERATIONS,
        sleep_api: serving_standby.ServerSleep | None = None,
        pods: Labelled | None = None,
        deployments: Labelled | None = None,
    ) -> None:
        # A job's pods and Deployments as the process's watches show them, for the check that
        # plans first (`would_act`); without them every pass reads afresh.
        self.watched_pods, self.watched_deployments = pods, deployments
        self.scheduler_name = scheduler_name  # of the pods its Deployments create
        self.sleep_api = sleep_api  # vLLM's sleep endpoints (operator.vllm_sleep_api), if called
        self.may_act = may_act  # the Lease fence (leading.py)
        self.tolerations = tolerations  # added to those pods
        self.apps = client.AppsV1Api(api)
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.autoscalers = autoscalers
        self.locks = fresh_read.JobLocks()
        self.posted: dict[str, serving_status.Posted] = {}
        self.services: set[tuple[str, str]] = set()  # (job uid, pool) whose Service exists
        self.usage = UsageLedger(load_catalog())  # GPU time and energy per job uid
        self.quiet = quiet.QuietPasses(self.usage)  # what each job's last check found unchanged
        self.guard = threading.Lock()

    def forget(self, uid: str) -> None:
        self.autoscalers.forget(uid)
        self.locks.forget(uid)
        self.quiet.forget(uid)
        with self.guard:
            self.posted.pop(uid, None)
            self.usage.forget(uid)
            self.services = {key for key in self.services if key[0] != uid}

    def close(self) -> None:
        self.autoscalers.close()
        if isinstance(self.sleep_api, VllmSleepApi):
            self.sleep_api.close()


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _api_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "").get("message", exc.reason))
    except (TypeError, ValueError):
        return str(exc.reason)


def _retry(what: str, exc: ApiException) -> kopf.TemporaryError:
    # The API's message says what was refused (a missing permission names itself).
    return kopf.TemporaryError(f"{what}: {api_error_text(exc)}", delay=2)


class _DeploymentScaler:
    """The autoscaler's `ReplicaWriter`: the scale subresource of a pool's Deployment."""

    def __init__(self, state: State, namespace: str, job: str) -> None:
        self.state, self.namespace, self.job = state, namespace, job

    def scale(self, pool: str, replicas: int) -> None:
        name = children.deployment_name(self.job, pool)
        try:
            kubepool.release(
                self.state.apps.patch_namespaced_deployment_scale(
                    name, self.namespace, {"spec": {"replicas": replicas}}, _preload_content=False
                )
            )
        except ApiException as exc:
            raise _retry(f"scaling {name} to {replicas}", exc) from exc


class _PodWrites:
    """`serving_standby.PodWrites` on the API server: standby marks, the awake condition,
    removed replicas and the pools' scales. A pod gone meanwhile (404) is left to the next
    tick."""

    def __init__(self, state: State, namespace: str, job: str) -> None:
        self.state, self.namespace = state, namespace
        self.scaler = _DeploymentScaler(state, namespace, job)

    def _call(self, what: str, name: str, call: Callable[..., Any], *args: Any) -> None:
        try:
            kubepool.release(call(name, self.namespace, *args, _preload_content=False))
        except ApiException as exc:
            if exc.status != 404:
                raise _retry(f"{what} pod {name}", exc) from exc

    def patch(self, pod: str, body: dict[str, Any]) -> None:
        self._call("marking", pod, self.state.core.patch_namespaced_pod, body)

    def patch_status(self, pod: str, body: dict[str, Any]) -> None:
        # A dict body goes as a strategic merge patch: conditions merge by type.
        write = self.state.core.patch_namespaced_pod_status
        self._call("writing the condition of", pod, write, body)

    def delete(self, pod: str) -> None:
        self._call("deleting", pod, self.state.core.delete_namespaced_pod)

    def scale(self, pool: str, replicas: int) -> None:
        self.scaler.scale(pool, replicas)


def _deployments(state: State, namespace: str, job: str) -> dict[str, Obj]:
    """The job's Deployments by pool (only those it controls)."""
    try:
        raw: Any = state.apps.list_namespaced_deployment(
            namespace,
            label_selector=f"{children.SERVINGJOB_LABEL}={job}",
            _preload_content=False,
        )
    except ApiException as exc:
        raise _retry("listing Deployments", exc) from exc
    return _by_pool(json.loads(raw.data)["items"], job)


def _by_pool(items: list[Obj], job: str) -> dict[str, Obj]:
    """Of the Deployments labelled as `job`'s, those it controls, by pool."""
    out: dict[str, Obj] = {}
    for item in items:
        owners = item["metadata"].get("ownerReferences") or []
        pool = (item["metadata"].get("labels") or {}).get(children.POOL_LABEL)
        if pool and any(o.get("kind") == children.KIND and o.get("name") == job for o in owners):
            out[pool] = item
    return out


def _pods(state: State, namespace: str, job: str) -> list[Obj] | None:
    """The job's pods, or None when the API cannot list them now."""
    try:
        raw: Any = state.core.list_namespaced_pod(
            namespace,
            label_selector=f"{children.SERVINGJOB_LABEL}={job}",
            _preload_content=False,
        )
    except ApiException:
        return None
    return list(json.loads(raw.data)["items"])


def _waiting(pods: list[Obj] | None) -> PendingNote | None:
    """The scheduler's note on one of the job's unbound pods, if any."""
    if pods is None:
        return None  # only an explanation: the next pass asks again
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        if not (pod.get("spec") or {}).get("nodeName"):
            note = read_pending(pod)
            if note is not None:
                return note
    return None


def _ensure_service(state: State, job: ServingJobObject, pool_name: str) -> None:
    key = (job.id.uid, pool_name)
    if key in state.services:
        return
    wanted: Any = children.service(job, pool_name)
    try:
        kubepool.release(
            state.core.create_namespaced_service(job.id.namespace, wanted, _preload_content=False)
        )
    except ApiException as exc:
        if exc.status != 409:  # 409: an earlier pass (or operator run) created it
            raise _retry(f"creating Service {wanted['metadata']['name']}", exc) from exc
    state.services.add(key)


def _ensure_pools(
    state: State, job: ServingJobObject, deployments: dict[str, Obj]
) -> tuple[dict[str, int], list[ScaleChange], str | None]:
    """Step 2: every pool's Deployment exists, is built from the current spec and has replicas
    within the bounds. Returns the replicas per pool, the changes made and a rejection."""
    enabled = children.autoscaling_enabled(job.spec)
    desired: dict[str, int] = {}
    changes: list[ScaleChange] = []
    rejected: str | None = None
    pools = job.pools()
    for pool_name, pool in pools.items():
        current = deployments.get(pool_name)
        have = None if current is None else int((current.get("spec") or {}).get("replicas") or 0)
        replicas, why = children.pool_replicas(pool_name, pool, enabled, have)
        problem = _write_pool(state, job, pool_name, replicas, have, deployments)
        if problem is not None:
            rejected = problem
            continue
        desired[pool_name] = replicas
        if why:
            changes.append(ScaleChange(pool_name, have, replicas, why))
    # A pool removed from the spec (server <-> prefill/decode) leaves its Deployment behind.
    for pool_name, item in deployments.items():
        if pool_name not in desired and pool_name not in pools:
            try:
                kubepool.release(
                    state.apps.delete_namespaced_deployment(
                        item["metadata"]["name"], job.id.namespace, _preload_content=False
                    )
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise _retry("deleting a Deployment", exc) from exc
    return desired, changes, rejected


class _PoolAction(enum.Enum):
    CREATE = "create"
    UPDATE = "update"  # the template (and replicas)
    SCALE = "scale"


def _pool_action(
    state: State,
    job: ServingJobObject,
    pool_name: str,
    replicas: int,
    have: int | None,
    deployments: Mapping[str, Obj],
) -> tuple[_PoolAction | None, Any]:
    """What one pool's Deployment needs (None: nothing), and the Deployment wanted."""
    current = deployments.get(pool_name)
    wanted: Any = children.deployment(
        job, pool_name, replicas, state.tolerations, state.scheduler_name
    )
    if current is None:
        return _PoolAction.CREATE, wanted
    if children.needs_update(current, wanted):
        return _PoolAction.UPDATE, wanted
    return (_PoolAction.SCALE if replicas != have else None), wanted


def _pools_settled(
    state: State, job: ServingJobObject, deployments: Mapping[str, Obj]
) -> dict[str, int] | None:
    """Step 2 as a check: the replicas per pool when every pool's Deployment and Service are
    as step 2 would leave them (and no pool removed from the spec keeps one); None when step 2
    would write."""
    enabled = children.autoscaling_enabled(job.spec)
    pools = job.pools()
    if set(deployments) - set(pools):
        return None
    desired: dict[str, int] = {}
    for pool_name, pool in pools.items():
        current = deployments.get(pool_name)
        have = None if current is None else int((current.get("spec") or {}).get("replicas") or 0)
        replicas, _ = children.pool_replicas(pool_name, pool, enabled, have)
        action, _ = _pool_action(state, job, pool_name, replicas, have, deployments)
        if action is not None or (job.id.uid, pool_name) not in state.services:
            return None
        desired[pool_name] = replicas
    return desired


def _write_pool(
    state: State,
    job: ServingJobObject,
    pool_name: str,
    replicas: int,
    have: int | None,
    deployments: dict[str, Obj],
) -> str | None:
    """Create, update or rescale one pool's Deployment (and its Service); the API server's
    refusal, if it refused."""
    namespace = job.id.namespace
    action, wanted = _pool_action(state, job, pool_name, replicas, have, deployments)
    name = wanted["metadata"]["name"]
    try:
        if action is _PoolAction.CREATE:
            kubepool.release(
                state.apps.create_namespaced_deployment(namespace, wanted, _preload_content=False)
            )
            deployments[pool_name] = wanted
        elif action is _PoolAction.UPDATE:
            # A JSON patch replaces the template whole (a strategic merge would keep
            # fields the user removed); replicas are left to step 3.
            hash_path = "/metadata/annotations/" + children.SPEC_HASH_ANNOTATION.replace("/", "~1")
            template = wanted["spec"]["template"]
            ops = [
                {"op": "replace", "path": "/spec/template", "value": template},
                {"op": "add", "path": hash_path, "value": children.spec_hash(wanted["spec"])},
            ]
            if replicas != have:
                ops.append({"op": "replace", "path": "/spec/replicas", "value": replicas})
            kubepool.release(
                state.apps.patch_namespaced_deployment(name, namespace, ops, _preload_content=False)
            )
        elif action is _PoolAction.SCALE:
            _DeploymentScaler(state, namespace, job.id.name).scale(pool_name, replicas)
        _ensure_service(state, job, pool_name)
    except ApiException as exc:
        if exc.status == 409:
            # The list above is a consistent read taken under the job's lock, so the name
            # is held by a Deployment this job does not own: never adopt or replace it.
            return f"Deployment {name} already exists and is not owned by this ServingJob"
        if exc.status in (400, 403, 422):
            return f"Deployment {name}: {_api_message(exc)}"
        raise _retry(f"writing Deployment {name}", exc) from exc
    return None


def _ready(deployment: Obj | None) -> int:
    return int(((deployment or {}).get("status") or {}).get("readyReplicas") or 0)


Event = tuple[str, str, str]  # (type, reason, message)


def would_act(state: State, body: Mapping[str, Any]) -> bool:
    """Whether a pass over the ServingJob in `body` (the watched body, and its pods and
    Deployments as the process's watches show them: no API call) could change anything: write
    a Deployment or a Service, run an autoscaler tick, write the status or the GPU time, post
    an Event. Like the TrainingJob's (`quiet`): a check that said no is remembered while neither
    the job nor its pods or Deployments change and no autoscaler tick or usage write is due.
    Always yes without the watches, and for a job with standby replicas or readiness gates
    (their marks and wake-ups are planned by `serving_standby` with the writes it makes)."""
    meta = body["metadata"]
    if meta.get("deletionTimestamp"):
        return False  # the garbage collector removes its Deployments
    if state.watched_pods is None or state.watched_deployments is None:
        return True
    namespace, name = meta.get("namespace") or "default", meta["name"]
    pods = state.watched_pods(namespace, name)
    listed = state.watched_deployments(namespace, name)
    awake = [p for p in pods if not is_asleep(p)]
    now = _now()

    def check() -> tuple[bool, datetime | None]:
        return _check(state, body, _by_pool(listed, name), pods, now)

    seen = quiet.versions([body], listed, pods)
    return state.quiet.would_act(meta["uid"], seen, awake, now, check)


def _check(
    state: State,
    body: Mapping[str, Any],
    deployments: dict[str, Obj],
    pods: list[Obj],
    now: datetime,
) -> tuple[bool, datetime | None]:
    """`would_act` planned afresh; with, when it would not act, the time after which it may
    (now, while autoscaling: its ticks are due by the autoscaler's clock)."""
    try:
        job = ServingJobObject.of(body)
    except ValidationError:  # the pass says why and marks the job Failed, once
        return (body.get("status") or {}).get("phase") != "Failed", None
    uid = job.id.uid
    if state.usage.accrue(uid, [p for p in pods if not is_asleep(p)], now):
        return True, None
    desired = _pools_settled(state, job, deployments)
    if desired is None:
        return True, None
    keeps = any(job.spec.standby_of(p) is not None for p in desired)
    if keeps or any(is_asleep(p) or is_gated(p) for p in pods):
        return True, None
    due, health = state.autoscalers.peek(job.id, job.spec)
    if due:
        return True, None
    waiting = None
    if any(_ready(deployments.get(p)) < n for p, n in desired.items()):
        waiting = _waiting(pods)
    with state.guard:
        posted = state.posted.get(uid)
    plan = serving_status.plan(
        dict(body), deployments, desired, now, metrics=health, waiting=waiting, posted=posted
    )
    current = body.get("status") or {}
    if plan.events or fresh_read.status_changes(current, plan.status, _STATUS_KEYS):
        return True, None
    return False, (now if health is not None else None)


def reconcile_pass(state: State, body: Mapping[str, Any], patch: kopf.Patch) -> list[Event]:
    """One pass over the ServingJob `body` names (see the module docstring); the Events to
    post. It acts only if `would_act` says the watched objects call for it; then it reads the
    job again under the job's lock and plans from that."""
    leading.ensure_leading(state.may_act)
    if not would_act(state, body):
        return []
    with fresh_read.job_under_lock(state.locks, state.custom, _KIND, body) as raw:
        if raw is None:
            return []
        job = parse_or_fail(ServingJobObject.of, raw, patch.status.update)
        if job is None:
            return []
        deployments = _deployments(state, job.id.namespace, job.id.name)
        desired, changes, rejected = _ensure_pools(state, job, deployments)
        # One pod listing per pass at most, for whichever step needs it first.
        pods = functools.cache(functools.partial(_pods, state, job.id.namespace, job.id.name))
        health, asleep, ready = _autoscale(state, job, pods, deployments, desired, changes)
        for pool in job.pools():
            desired.setdefault(pool, 0)  # a rejected Deployment: nothing asked for yet
        waiting = None
        if any(_ready(deployments.get(p)) < n for p, n in desired.items()):
            waiting = _waiting(pods())
        plan = serving_status.plan(
            raw,
            deployments,
            desired,
            _now(),
            changes=changes,
            metrics=health,
            waiting=waiting,
            create_error=rejected,
            posted=state.posted.get(job.id.uid),
            asleep=asleep,
            ready=ready,
        )
        current = raw.get("status") or {}
        patched = fresh_read.status_changes(current, plan.status, _STATUS_KEYS)
        listed = pods()
        if listed is not None:  # asleep replicas' GPUs are not the job's to pay for
            awake = [p for p in listed if not is_asleep(p)]
            patched |= state.usage.changes(job.id.uid, current, awake, _now(), bool(patched))
        fresh_read.write_status(state.custom, _KIND, job.id.namespace, job.id.name, patched)
        with state.guard:
            state.posted[job.id.uid] = plan.posted
        return plan.events


@metrics.timed("ServingJob")
def _reconcile(body: kopf.Body, memo: Any, patch: kopf.Patch) -> None:
    for kind, reason, message in reconcile_pass(memo.serving, body, patch):
        kopf.event(body, type=kind, reason=reason, message=message)


def _autoscale(
    state: State,
    job: ServingJobObject,
    pods: Callable[[], list[Obj] | None],
    deployments: dict[str, Obj],
    desired: dict[str, int],
    changes: list[ScaleChange],
) -> tuple[MetricsHealth | None, dict[str, int] | None, dict[str, int] | None]:
    """Step 3: one autoscaler tick when due, then the awake conditions of the pods with the
    readiness gate. Updates `desired` and `changes` in place; the metrics health for the status
    (None when autoscaling is off), and the standbys asleep and the replicas serving per pool
    (None when the job keeps none)."""
    scales = {p: n for p, n in desired.items() if p in deployments}
    pools = {p: (n, _ready(deployments[p])) for p, n in scales.items()}
    scaler = _DeploymentScaler(state, job.id.namespace, job.id.name)
    writer: serving_standby.Writer = scaler
    standbys: serving_standby.Standbys | None = None
    keeps = any(job.spec.standby_of(p) is not None for p in scales)
    listed = pods()
    if listed is None and keeps:
        raise kopf.TemporaryError("listing the pods to find the standbys failed", delay=2)
    counts = serving_standby.asleep_counts(listed or [], list(scales))
    if keeps or any(counts.values()) or any(is_gated(p) for p in listed or []):
        standbys = serving_standby.Standbys(
            job.spec, scales, listed or [], _PodWrites(state, job.id.namespace, job.id.name),
            _now(), server=state.sleep_api, port=job.spec.port,
        )  # fmt: skip
        try:
            standbys.settle()
        except SleepApiError as exc:
            raise kopf.TemporaryError(f"waking a standby: {exc}", delay=2) from exc
        pools = standbys.observe()
        writer = standbys
        # The status's desired count is the awake one: asleep replicas serve nothing.
        desired.update({p: awake for p, (awake, _) in pools.items()})
    try:
        scaled, health = state.autoscalers.tick(
            job.id,
            job.spec,
            pools,
            lambda: children.running_gpu_types([p for p in listed or [] if not is_asleep(p)]),
            writer,
        )
    except SleepApiError as exc:  # the pods woken so far keep their marks; the next tick goes on
        raise kopf.TemporaryError(f"waking a standby: {exc}", delay=2) from exc
    for change in scaled:
        desired[change.pool] = change.to_replicas
        changes.append(change)
    if standbys is None:
        return health, None, None
    standbys.sync_gates()
    return health, standbys.asleep(), standbys.ready()


@kopf.on.create(*RESOURCE)
@kopf.on.resume(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
def reconcile_servingjob(body: kopf.Body, memo: Any, patch: kopf.Patch, **_: Any) -> None:
    _reconcile(body, memo, patch)


def follow_servingjob(body: kopf.Body, memo: Any, patch: kopf.Patch, **_: Any) -> None:
    _reconcile(body, memo, patch)


def register_timer(tick_s: float, registry: kopf.OperatorRegistry | None = None) -> None:
    """Pass over every ServingJob every `tick_s` seconds (once per process, by its
    composition root, which owns the period)."""
    kopf.timer(*RESOURCE, interval=tick_s, registry=registry)(follow_servingjob)


@kopf.on.delete(*RESOURCE, optional=True)
def forget_servingjob(uid: str, memo: Any, **_: Any) -> None:
    """The Deployments go with the job (owner references); drop what memory holds."""
    state: State = memo.serving
    state.forget(uid)
