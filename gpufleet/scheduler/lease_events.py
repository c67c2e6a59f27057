"""Events the scheduler posts: about itself on its Lease (as leader election's are; `kubectl
get events -n <lease namespace>` shows them): node healing pausing and resuming (`heal.py`);
about a job on the job (`kubectl describe` shows them with the object): a move a
PodDisruptionBudget stopped (`mover.py`, also reported on the Lease)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from gpufleet import kubepool
from gpufleet.model.contract.timestamps import format_time
from gpufleet.scheduler.heal import Notify
from gpufleet.scheduler.mover import ObjectNotify

__all__ = ["lease_events", "object_events"]

COMPONENT = "gpufleet-scheduler"


def object_events(core: client.CoreV1Api) -> ObjectNotify:
    """An `ObjectNotify` that posts each report as a core/v1 Event on the object it names, in
    the object's namespace."""

    def post(involved: Mapping[str, str], kind: str, reason: str, message: str) -> None:
        now = format_time(datetime.now(UTC))
        namespace = involved["namespace"]
        body: Any = {
            "metadata": {
                "name": f"{involved['name']}.{uuid.uuid4().hex[:12]}",
                "namespace": namespace,
            },
            "involvedObject": dict(involved),
            "type": kind,
            "reason": reason,
            "message": message,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        answer = core.create_namespaced_event(
            namespace, body, _preload_content=False, _request_timeout=5
        )
        kubepool.release(answer)

    return post


def lease_events(core: client.CoreV1Api, namespace: str, lease: str) -> Notify:
    """A `Notify` that posts each report as a core/v1 Event on Lease `namespace/lease`."""
    on = object_events(core)
    lease_ref = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "name": lease,
        "namespace": namespace,
    }

    def post(kind: str, reason: str, message: str) -> None:
        on(lease_ref, kind, reason, message)

    return post
