"""GET /queues against the sandbox with the operator running: two queues' jobs run (a 1 x 4 T4
job in each) and a second job of the queue that may not borrow waits for its quota. The
route's figures of both queues (per resource nominal, used, borrowed, lent, pending, held; fair
and attained share; running and waiting jobs; conditions) become those of the GPUQueue status
the scheduler wrote, and each queue's `used` is what its bound pods hold; GET /queues/{name}
shows the same, and an unknown queue is a 404 problem.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from admin_helpers import AdminApi

from gpufleet.model.contract import names
from gpufleet.model.crd_common import API_GROUP, API_VERSION
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.operator import Kube, OperatorProcess, training_job, wait_for

SUFFIX = uuid.uuid4().hex[:6]
OPEN, CLOSED = f"open-{SUFFIX}", f"closed-{SUFFIX}"


@pytest.fixture
def queues(kube: Kube, sandbox: Sandbox) -> Iterator[tuple[str, str]]:
    kube.create_queue(OPEN, "T4", 4)
    kube.create_queue(CLOSED, "T4", 4, borrowing_limit=0)
    yield OPEN, CLOSED
    for name in (OPEN, CLOSED):
        sandbox.kubectl("delete", "gq", name, "--ignore-not-found", check=False)


def _status(kube: Kube, queue: str) -> dict[str, Any]:
    obj: Any = kube.custom.get_cluster_custom_object(API_GROUP, API_VERSION, "gpuqueues", queue)
    return dict(obj.get("status") or {})


def _as_status(shown: dict[str, Any]) -> dict[str, Any]:
    """The route's queue in the status's shape (the status omits an absent MIG profile)."""
    rows = [{k: v for k, v in r.items() if v is not None} for r in shown["resources"]]
    return {k: v for k, v in shown.items() if k not in ("name", "parent")} | {"resources": rows}


def _comparable(status: dict[str, Any]) -> dict[str, Any]:
    conditions = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status["conditions"]
    ]
    return status | {"conditions": conditions}


def _held_by_pods(kube: Kube, ns: str, queue: str) -> int:
    """The GPUs the bound pods of `queue` hold (their assigned indices)."""
    total = 0
    for pod in kube.pods(ns):
        annotations = pod["metadata"].get("annotations") or {}
        if annotations.get(names.QUEUE) == queue and pod["spec"].get("nodeName"):
            total += len(str(annotations[names.ASSIGNED_GPUS]).split(","))
    return total


def test_the_queue_route_shows_what_the_status_shows(
    kube: Kube,
    ns: str,
    operator: OperatorProcess,
    admin: tuple[AdminApi, str],
    queues: tuple[str, str],
) -> None:
    api, token = admin
    for name, queue in (("first", OPEN), ("second", CLOSED), ("third", CLOSED)):
        job = training_job(name, 1, gpus=4, gpu_type="T4")
        job["spec"]["queue"] = queue
        kube.create_job(ns, job)
        if name != "third":  # so that the third is the one that waits
            wait_for(lambda n=name: kube.phase(ns, n) == "Running", f"{name} Running", 90)

    def settled() -> bool:
        closed = _status(kube, CLOSED)
        return bool(closed) and (closed.get("runningJobs"), closed.get("pendingJobs")) == (1, 1)

    wait_for(settled, "the closed queue's status: 1 running, 1 waiting", 60)

    def route_matches() -> dict[str, dict[str, Any]] | None:
        doc = api.get("/api/v1/queues", token, params={"limit": 1000}).json()
        shown = {q["name"]: q for q in doc["items"] if q["name"] in (OPEN, CLOSED)}
        if len(shown) != 2:
            return None
        for name, queue in shown.items():
            if _as_status(queue) != _comparable(_status(kube, name)):
                return None
        return shown

    shown = wait_for(route_matches, "GET /queues showing the GPUQueue status", 60)
    for name, used, pending in ((OPEN, 4, 0), (CLOSED, 4, 4)):
        [t4] = [r for r in shown[name]["resources"] if r["gpuType"] == "T4"]
        assert (t4["nominal"], t4["used"], t4["borrowed"], t4["pending"]) == (4, used, 0, pending)
        assert t4["used"] == _held_by_pods(kube, ns, name)
    one = api.get(f"/api/v1/queues/{CLOSED}", token)
    assert one.status_code == 200 and _as_status(one.json()) == _as_status(shown[CLOSED])
    missing = api.get(f"/api/v1/queues/missing-{SUFFIX}", token)
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/problem+json")
