"""Writes a decision to the API server: bindings, evictions and "why pending" pod conditions.

All writes of one gang go out in parallel (a 64-pod gang must bind in well under a second) and
each returns whether it worked so the loop can forget failed assumptions. Bindings, the hot path
(1,000 of them when a pool frees up), and "why pending" conditions (1,000 of them when a burst
waits) go through `ApiWriter`: one event loop, many kept-alive connections, a minimal JSON body,
no response model; at most `explainers` condition writes are in flight, so they never take the
connections the bindings need. Without a writer (unit tests with a fake client) both go through
the generated client on thread pools, like the rarer writes (evictions, deletions), which are
sent and received as JSON to keep the client's model layer out of the way.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet import kubepool
from gpufleet.kubeerrors import api_error_text
from gpufleet.model.contract import names
from gpufleet.model.contract.reasons import disruption_marker, pending_condition
from gpufleet.model.contract.timestamps import format_time
from gpufleet.model.crd_common import API_GROUP
from gpufleet.scheduler.apiwriter import ApiWriter

log = logging.getLogger("gpufleet.scheduler.binder")


@dataclass(frozen=True, slots=True)
class BindRequest:
    pod_key: str  # namespace/name
    node: str
    annotations: Mapping[str, str]


def _split(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name


def _now() -> str:
    return format_time(datetime.now(UTC))


class JobGone(Exception):
    """A TrainingJob gone or being deleted: no pod of it will be made again."""


class Binder:
    def __init__(
        self,
        api: client.CoreV1Api,
        workers: int = 32,
        explainers: int = 4,
        writer: ApiWriter | None = None,
    ) -> None:
        self.api = api
        self._writer = writer
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="binder")
        # "Why pending" writes go out in the background on a few threads of their own: they
        # must never hold up the next cycle's bindings (a reason change on 1,000 waiting pods
        # is 1,000 writes).
        self._explain_pool = ThreadPoolExecutor(max_workers=explainers, thread_name_prefix="why")
        self._explainers = explainers
        self._explain_slots: asyncio.Semaphore | None = None  # made on the writer's loop
        self._explaining: dict[str, str] = {}  # pod key -> message being written
        self._explain_lock = threading.Lock()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._explain_pool.shutdown(wait=False, cancel_futures=True)
        if self._writer is not None:
            self._writer.close()

    def _bind_one(self, request: BindRequest) -> tuple[str, str | None]:
        namespace, name = _split(request.pod_key)
        body: Any = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "annotations": dict(request.annotations)},
            "target": {"apiVersion": "v1", "kind": "Node", "name": request.node},
        }
        try:
            # The Binding's annotations are copied onto the pod in the same write.
            kubepool.release(
                self.api.create_namespaced_pod_binding(
                    name, namespace, body, _preload_content=False
                )
            )
            return request.pod_key, None
        except ApiException as exc:
            return request.pod_key, f"{exc.status} {exc.reason}"
        except Exception as exc:  # connection errors: the binding may or may not have happened
            return request.pod_key, str(exc)

    def bind(self, requests: Iterable[BindRequest]) -> dict[str, str | None]:
        """Pod key -> None when bound, else the error."""
        return self.bind_async(requests).result()

    def bind_async(self, requests: Iterable[BindRequest]) -> Future[dict[str, str | None]]:
        """Start the bindings; the future's result maps pod key -> None when bound, else the
        error. Only the writer path runs in the background; the thread-pool path (fakes in
        tests) has finished when this returns."""
        requests = list(requests)
        with self._explain_lock:  # a queued "why pending" write must not land after binding
            for r in requests:
                self._explaining.pop(r.pod_key, None)
        if self._writer is not None:
            return self._writer.submit(self._bind_async(self._writer, requests))
        done: Future[dict[str, str | None]] = Future()
        done.set_result(dict(self._pool.map(self._bind_one, requests)))
        return done

    @staticmethod
    async def _bind_async(writer: ApiWriter, requests: list[BindRequest]) -> dict[str, str | None]:
        async def one(r: BindRequest) -> tuple[str, str | None]:
            namespace, name = _split(r.pod_key)
            status, reason = await writer.bind(namespace, name, r.node, r.annotations)
            return r.pod_key, (None if 200 <= status < 300 else reason)

        return dict(await asyncio.gather(*(one(r) for r in requests)))

    def _delete_one(self, key: str, reason: str, message: str, force: bool) -> bool:
        if not self._disrupt(key, reason, message):
            return True  # already gone
        namespace, name = _split(key)
        try:
            kubepool.release(
                self.api.delete_namespaced_pod(
                    name,
                    namespace,
                    grace_period_seconds=0 if force else None,
                    _preload_content=False,
                )
            )
            return True
        except ApiException as exc:
            return bool(exc.status == 404)

    def _disrupt(self, key: str, reason: str, message: str, status: str = "True") -> bool:
        """Set (or, with status "False", withdraw) the DisruptionTarget condition; False when
        the pod is gone."""
        namespace, name = _split(key)
        condition = {
            "type": names.DISRUPTION_TARGET,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": _now(),
        }
        try:
            kubepool.release(
                self.api.patch_namespaced_pod_status(
                    name, namespace, {"status": {"conditions": [condition]}}, _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            log.warning("pod %s: cannot set DisruptionTarget=%s: %s", key, status, exc.reason)
        return True

    def _mark_cause(self, key: str, reason: str | None) -> bool:
        """Set (None: remove) the pod's `gpufleet.io/disrupted-by`; False when it is gone."""
        return self._annotate(key, disruption_marker(reason))

    def _annotate(self, key: str, annotations: Mapping[str, str | None]) -> bool:
        """Merge `annotations` into the pod's (None removes one); False when it is gone."""
        namespace, name = _split(key)
        body = {"metadata": {"annotations": dict(annotations)}}
        try:
            kubepool.release(
                self.api.patch_namespaced_pod(name, namespace, body, _preload_content=False)
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            log.warning("pod %s: cannot mark why it is disrupted: %s", key, exc.reason)
        return True

    def _evict_one(self, key: str, reason: str, message: str) -> str | None:
        if not self._mark_cause(key, reason) or not self._disrupt(key, reason, message):
            return None  # already gone
        namespace, name = _split(key)
        body: Any = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        try:
            kubepool.release(
                self.api.create_namespaced_pod_eviction(
                    name, namespace, body, _preload_content=False
                )
            )
            return None
        except ApiException as exc:
            if exc.status == 404:
                return None
            # The API's message says which budget, or which permission is missing.
            error = api_error_text(exc)
        except Exception as exc:  # connection errors: the eviction may or may not have happened
            return str(exc)
        # Refused (429: a PodDisruptionBudget; 500: two budgets): the pod keeps running, so
        # it must not keep saying it is about to be disrupted.
        self._disrupt(key, "EvictionRefused", f"eviction refused: {error}", status="False")
        self._mark_cause(key, None)
        return error

    def evict_pods(self, keys: Iterable[str], reason: str, message: str) -> dict[str, str | None]:
        """Mark each pod with a DisruptionTarget condition, then evict it through the Eviction
        API (policy/v1, so PodDisruptionBudgets apply); pod key -> None when evicted or gone,
        else the API's refusal. The API server replaces the condition's reason with
        `EvictionByEvictionAPI` as it evicts, so the reason is also written as the pod
        annotation `gpufleet.io/disrupted-by`, which it keeps."""
        keys = list(keys)
        results = self._pool.map(lambda k: self._evict_one(k, reason, message), keys)
        return dict(zip(keys, results, strict=True))

    def preempt_pods(self, keys: Iterable[str], reason: str, message: str) -> list[str]:
        """Record `reason` as the pods' disruption cause (as `evict_pods` does), then delete
        them with their grace period, whatever their budgets say: a borrower of a standby's
        GPUs gives them back when asked (scheduler/lending.py). Returns failures."""
        keys = list(keys)

        def one(key: str) -> bool:
            gone = not self._mark_cause(key, reason)
            return gone or self._delete_one(key, reason, message, False)

        results = self._pool.map(one, keys)
        return [k for k, ok in zip(keys, results, strict=True) if not ok]

    def patch_pod(self, key: str, body: Mapping[str, Any]) -> str | None:
        """Merge-patch the pod's metadata; None when it worked, else the API's refusal (a
        resourceVersion in the body makes it conditional: 409 when the pod changed)."""
        namespace, name = _split(key)
        try:
            answer = self.api.patch_namespaced_pod(
                name, namespace, dict(body), _preload_content=False
            )
            kubepool.release(answer)
            return None
        except ApiException as exc:
            return api_error_text(exc)
        except Exception as exc:  # connection errors: not known to be written
            return str(exc)

    def list_budgets(self, namespaces: Iterable[str]) -> list[dict[str, Any]]:
        """The PodDisruptionBudgets of `namespaces`, as JSON objects."""
        return list_budgets(self.api.api_client, namespaces)

    def job_template(self, job: Mapping[str, str]) -> dict[str, Any] | None:
        """The current pod template (`spec.template`) of `job` (a pod's controller, as
        `mover.job_reference` gives it) when it is a TrainingJob, read from the API server;
        None for another kind. A TrainingJob gone or being deleted raises `JobGone` (nothing
        will recreate its pods); other errors raise."""
        group, _, version = job.get("apiVersion", "").partition("/")
        if group != API_GROUP or job.get("kind") != "TrainingJob":
            return None
        api = client.CustomObjectsApi(self.api.api_client)
        try:
            raw: Any = api.get_namespaced_custom_object(
                group, version, job["namespace"], "trainingjobs", job["name"]
            )
        except ApiException as exc:
            if exc.status == 404:
                raise JobGone(f"TrainingJob {job['namespace']}/{job['name']} is gone") from exc
            raise
        if (raw.get("metadata") or {}).get("deletionTimestamp"):
            raise JobGone(f"TrainingJob {job['namespace']}/{job['name']} is being deleted")
        template = (raw.get("spec") or {}).get("template")
        return dict(template) if isinstance(template, dict) else None

    def record_tier_eviction(self, job: Mapping[str, str], count: int) -> None:
        """Write on TrainingJob `job` (an Event's involvedObject, as `mover.job_reference`
        gives it) that the service tier has now ended `count` of its runs: its
        `gpufleet.io/tier-evictions` annotation, which the operator reads beside
        `status.tierEvictions` (the larger counts), so the count outlives evicted pods that
        vanish before any operator pass sees them. Nothing for another kind; errors raise."""
        group, _, version = job.get("apiVersion", "").partition("/")
        if group != API_GROUP or job.get("kind") != "TrainingJob":
            return
        api = client.CustomObjectsApi(self.api.api_client)
        body = {"metadata": {"annotations": {names.TIER_EVICTIONS: str(count)}}}
        api.patch_namespaced_custom_object(
            group, version, job["namespace"], "trainingjobs", job["name"], body
        )

    def runtime_class(self, name: str) -> dict[str, Any] | None:
        """RuntimeClass `name` as the API server has it now (its `overhead` and `scheduling`
        are what admission sets on a pod naming it: runtime_class.py): None when it is gone.
        Other errors raise. Read at each call: a RuntimeClass may be edited, or deleted and
        made again, under the same name."""
        api = client.NodeV1Api(self.api.api_client)
        try:
            raw: Any = api.read_runtime_class(name, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        found = json.loads(raw.data)
        return dict(found) if isinstance(found, dict) else None

    def delete_pods(
        self, keys: Iterable[str], reason: str, message: str, force: bool = False
    ) -> list[str]:
        """Mark pods with a DisruptionTarget condition, then delete them; returns failures."""
        keys = list(keys)
        results = self._pool.map(lambda k: self._delete_one(k, reason, message, force), keys)
        return [k for k, ok in zip(keys, results, strict=True) if not ok]

    def delete_marked(
        self, keys: Iterable[str], marker: Mapping[str, str], reason: str, message: str
    ) -> list[str]:
        """Annotate pods with `marker`, mark them with a DisruptionTarget condition, then
        delete them with their own grace period (SIGTERM first: a job that checkpoints on a
        signal saves its progress); returns failures."""

        def one(key: str) -> bool:
            if not self._annotate(key, marker):
                return True  # already gone
            return self._delete_one(key, reason, message, force=False)

        keys = list(keys)
        results = self._pool.map(one, keys)
        return [k for k, ok in zip(keys, results, strict=True) if not ok]

    def _mark_one(self, key: str, message: str) -> None:
        namespace, name = _split(key)
        try:
            kubepool.release(
                self.api.patch_namespaced_pod_status(
                    name, namespace, _pending_patch(message), _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status != 404:
                log.warning("pod %s: cannot record pending reason: %s", key, exc.reason)

    def mark_pending(self, messages: Mapping[str, str]) -> None:
        """Set PodScheduled=False with `message` on each pod (pod key -> message), in the
        background; a write already on its way with the same message is not repeated."""
        with self._explain_lock:
            todo = {k: m for k, m in messages.items() if self._explaining.get(k) != m}
            self._explaining.update(todo)
        if not todo:
            return
        if self._writer is not None:
            self._writer.submit(self._mark_async(self._writer, todo))
            return
        for key, message in todo.items():
            self._explain_pool.submit(self._mark_and_forget, key, message)

    def _still_wanted(self, key: str, message: str) -> bool:
        with self._explain_lock:
            return self._explaining.get(key) == message  # else bound or re-explained since

    def _written(self, key: str, message: str) -> None:
        with self._explain_lock:
            if self._explaining.get(key) == message:
                del self._explaining[key]

    def _mark_and_forget(self, key: str, message: str) -> None:
        if not self._still_wanted(key, message):
            return
        try:
            self._mark_one(key, message)
        finally:
            self._written(key, message)

    async def _mark_async(self, writer: ApiWriter, todo: Mapping[str, str]) -> None:
        if self._explain_slots is None:
            self._explain_slots = asyncio.Semaphore(self._explainers)
        slots = self._explain_slots

        async def one(key: str, message: str) -> None:
            async with slots:
                if not self._still_wanted(key, message):
                    return
                try:
                    namespace, name = _split(key)
                    status, error = await writer.patch_pod_status(
                        namespace, name, _pending_patch(message)
                    )
                    if error and status != 404:
                        log.warning("pod %s: cannot record pending reason: %s", key, error)
                finally:
                    self._written(key, message)

        await asyncio.gather(*(one(k, m) for k, m in todo.items()))


def _pending_patch(message: str) -> dict[str, Any]:
    return {"status": {"conditions": [pending_condition(message, _now())]}}


def list_budgets(api: client.ApiClient, namespaces: Iterable[str]) -> list[dict[str, Any]]:
    """The PodDisruptionBudgets of `namespaces`, as JSON objects."""
    policy = client.PolicyV1Api(api)
    out: list[dict[str, Any]] = []
    for namespace in sorted(set(namespaces)):
        raw: Any = policy.list_namespaced_pod_disruption_budget(namespace, _preload_content=False)
        out.extend(json.loads(raw.data).get("items") or [])
    return out
