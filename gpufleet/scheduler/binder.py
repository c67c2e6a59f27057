"""Writes a decision to the API server: bindings, evictions and "why pending" pod conditions.

All writes of one gang go out in parallel (a 64-pod gang must bind in well under a second) on a
shared thread pool, and each returns whether it worked so the loop can forget failed
assumptions. Objects are sent and received as JSON to keep the client's model layer out of the
hot path.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet.scheduler import names

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
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Binder:
    def __init__(self, api: client.CoreV1Api, workers: int = 32, explainers: int = 4) -> None:
        self.api = api
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="binder")
        # "Why pending" writes go out in the background on a few threads of their own: they
        # must never hold up the next cycle's bindings (a reason change on 1,000 waiting pods
        # is 1,000 writes).
        self._explain_pool = ThreadPoolExecutor(max_workers=explainers, thread_name_prefix="why")
        self._explaining: dict[str, str] = {}  # pod key -> message being written
        self._explain_lock = threading.Lock()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._explain_pool.shutdown(wait=False, cancel_futures=True)

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
            self.api.create_namespaced_pod_binding(name, namespace, body, _preload_content=False)
            return request.pod_key, None
        except ApiException as exc:
            return request.pod_key, f"{exc.status} {exc.reason}"
        except Exception as exc:  # connection errors: the binding may or may not have happened
            return request.pod_key, str(exc)

    def bind(self, requests: Iterable[BindRequest]) -> dict[str, str | None]:
        """Pod key -> None when bound, else the error."""
        requests = list(requests)
        with self._explain_lock:  # a queued "why pending" write must not land after binding
            for r in requests:
                self._explaining.pop(r.pod_key, None)
        return dict(self._pool.map(self._bind_one, requests))

    def _delete_one(self, key: str, reason: str, message: str, force: bool) -> bool:
        namespace, name = _split(key)
        condition = {
            "type": names.DISRUPTION_TARGET,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": _now(),
        }
        try:
            self.api.patch_namespaced_pod_status(
                name, namespace, {"status": {"conditions": [condition]}}, _preload_content=False
            )
        except ApiException as exc:
            if exc.status == 404:
                return True
            log.warning("pod %s: cannot mark as disrupted: %s", key, exc.reason)
        try:
            self.api.delete_namespaced_pod(
                name,
                namespace,
                grace_period_seconds=0 if force else None,
                _preload_content=False,
            )
            return True
        except ApiException as exc:
            return bool(exc.status == 404)

    def delete_pods(
        self, keys: Iterable[str], reason: str, message: str, force: bool = False
    ) -> list[str]:
        """Mark pods with a DisruptionTarget condition, then delete them; returns failures."""
        keys = list(keys)
        results = self._pool.map(lambda k: self._delete_one(k, reason, message, force), keys)
        return [k for k, ok in zip(keys, results, strict=True) if not ok]

    def _mark_one(self, key: str, message: str) -> None:
        namespace, name = _split(key)
        condition = {
            "type": names.POD_SCHEDULED,
            "status": "False",
            "reason": names.UNSCHEDULABLE,
            "message": message,
            "lastTransitionTime": _now(),
        }
        try:
            self.api.patch_namespaced_pod_status(
                name, namespace, {"status": {"conditions": [condition]}}, _preload_content=False
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
        for key, message in todo.items():
            self._explain_pool.submit(self._mark_and_forget, key, message)

    def _mark_and_forget(self, key: str, message: str) -> None:
        with self._explain_lock:
            if self._explaining.get(key) != message:
                return  # bound (or re-explained) since it was queued
        try:
            self._mark_one(key, message)
        finally:
            with self._explain_lock:
                if self._explaining.get(key) == message:
                    del self._explaining[key]


def scheduled_message(pod: Mapping[str, Any]) -> str | None:
    """The message of a pod's PodScheduled=False condition, if any."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == names.POD_SCHEDULED and condition.get("status") == "False":
            return str(condition.get("message", ""))
    return None
