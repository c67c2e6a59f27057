"""A handler pass over a job starts from the job as the API server has it now, under the job's
lock, and writes the job's status itself before releasing it (TrainingJob and ServingJob).

Why not the body kopf hands the handler: kopf applies a handler's patch only after the handler
has returned, outside any lock of ours, and a timer's body may predate a spec change another
handler has just acted on. A pass that planned from such a body scaled a pool back to an old
`minReplicas`, recreated the pods of a job suspended since, or wrote back a reason the pass
before it had replaced. Reading under the lock and writing before releasing it makes each pass
start from what the previous one left, so no per-process memo of what was written is needed.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import kopf
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet import kubepool
from gpufleet.kubeerrors import api_error_text

__all__ = ["JobLocks", "Resource", "job_under_lock", "status_changes", "write_status"]

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Resource:
    """A namespaced custom resource's API path."""

    group: str
    version: str
    plural: str


class JobLocks:
    """One lock per job uid: passes over the same job never overlap."""

    def __init__(self) -> None:
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def lock(self, uid: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(uid, threading.Lock())

    def forget(self, uid: str) -> None:
        with self._guard:
            self._locks.pop(uid, None)


def _retry(what: str, exc: ApiException) -> kopf.TemporaryError:
    # The API's message says what was refused (a missing permission names itself).
    return kopf.TemporaryError(f"{what}: {api_error_text(exc)}", delay=2)


def read_job(
    custom: client.CustomObjectsApi, kind: Resource, namespace: str, name: str
) -> Obj | None:
    """The job as the API server has it now; None once it is gone."""
    try:
        raw: Any = custom.get_namespaced_custom_object(
            kind.group, kind.version, namespace, kind.plural, name, _preload_content=False
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise _retry(f"reading {kind.plural}/{name}", exc) from exc
    job: Obj = json.loads(raw.data)
    return job


@contextlib.contextmanager
def job_under_lock(
    locks: JobLocks, custom: client.CustomObjectsApi, kind: Resource, body: Mapping[str, Any]
) -> Iterator[Obj | None]:
    """Hold the lock of the job `body` names and give the job read afresh; None when it is
    being deleted, gone, or gone and created again under the same name (that one has passes of
    its own). `body` only identifies the job."""
    meta = body["metadata"]
    if meta.get("deletionTimestamp"):
        yield None
        return
    with locks.lock(meta["uid"]):
        raw = read_job(custom, kind, meta.get("namespace") or "default", meta["name"])
        if raw is None or raw["metadata"]["uid"] != meta["uid"]:
            yield None
        else:
            yield None if raw["metadata"].get("deletionTimestamp") else raw


def status_changes(
    current: Mapping[str, Any], status: Mapping[str, Any], keys: Iterable[str]
) -> dict[str, Any]:
    """The merge patch from `current` (the status read this pass) to `status`: the fields that
    differ, and None for each of `keys` the new status no longer has."""
    changes = {k: v for k, v in status.items() if current.get(k) != v}
    for key in keys:
        if key in current and key not in status:
            changes[key] = None
    return changes


def write_status(
    custom: client.CustomObjectsApi,
    kind: Resource,
    namespace: str,
    name: str,
    changes: Mapping[str, Any],
) -> None:
    """Merge-patch `changes` into the job's status (nothing when there are none)."""
    if not changes:
        return
    try:
        answer = custom.patch_namespaced_custom_object_status(
            kind.group, kind.version, namespace, kind.plural, name, {"status": dict(changes)},
            _content_type="application/merge-patch+json", _preload_content=False,
        )  # fmt: skip
        kubepool.release(answer)
    except ApiException as exc:
        if exc.status != 404:  # 404: deleted since it was read; nothing left to report on
            raise _retry(f"writing the status of {kind.plural}/{name}", exc) from exc
