"""Events the scheduler reports about itself, posted on its Lease (as leader election's are):
`kubectl get events -n <lease namespace>` shows them. Node healing pausing and resuming
(`heal.py`) is the one kind today."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from gpufleet import kubepool
from gpufleet.model.contract.timestamps import format_time
from gpufleet.scheduler.heal import Notify

__all__ = ["lease_events"]

COMPONENT = "gpufleet-scheduler"


def lease_events(core: client.CoreV1Api, namespace: str, lease: str) -> Notify:
    """A `Notify` that posts each report as a core/v1 Event on Lease `namespace/lease`."""

    def post(kind: str, reason: str, message: str) -> None:
        now = format_time(datetime.now(UTC))
        body: Any = {
            "metadata": {"name": f"{lease}.{uuid.uuid4().hex[:12]}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "name": lease,
                "namespace": namespace,
            },
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
