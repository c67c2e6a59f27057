"""A GPUQueue's lending limit on the sandbox: what a queue keeps back is not borrowed.

A keeper queue with a nominal quota of all 16 T4 GPUs of the default fleet and a lending limit
of 8, idle, and a taker queue with no quota:
- the taker's job of 2 x 4 T4 borrows 8 and runs; its next job of 4 waits with QuotaExceeded
  naming what the keeper keeps, though 8 T4s are free; the keeper's status says it lends 8;
- the keeper's own job of 2 x 4 T4 then runs on the 8 it kept, preempting nothing.
The queues are deleted at the end of the module.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.operator import Kube, training_job, wait_for

pytestmark = pytest.mark.integration

SUFFIX = uuid.uuid4().hex[:6]
KEEPER, TAKER = f"keeper-{SUFFIX}", f"taker-{SUFFIX}"
GROUP, VERSION = "gpufleet.io", "v1alpha1"


def _queue(name: str, quotas: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUQueue",
            "metadata": {"name": name}, "spec": {"quotas": quotas}}  # fmt: skip


def _job(name: str, queue: str, replicas: int) -> dict[str, Any]:
    manifest = training_job(name, replicas, gpus=4, gpu_type="T4")
    manifest["spec"]["queue"] = queue
    return manifest


def _reason(kube: Kube, ns: str, job: str) -> tuple[str, str] | None:
    """The job's pending reason once the scheduler has given one."""
    condition = kube.condition(ns, job, "Admitted")
    if condition is None or condition["reason"] in ("WaitingForScheduler", "Admitted"):
        return None
    return str(condition["reason"]), str(condition["message"])


def _t4(kube: Kube, name: str) -> dict[str, Any]:
    obj: Any = kube.custom.get_cluster_custom_object(GROUP, VERSION, "gpuqueues", name)
    rows = (obj.get("status") or {}).get("resources") or []
    return next((r for r in rows if r["gpuType"] == "T4" and "migProfile" not in r), {})


@pytest.fixture(scope="module")
def queues(kube: Kube, sandbox: Sandbox) -> Iterator[None]:
    keeper = _queue(KEEPER, [{"gpuType": "T4", "nominal": 16, "lendingLimit": 8}])
    for body in (keeper, _queue(TAKER, [])):
        kube.custom.create_cluster_custom_object(GROUP, VERSION, "gpuqueues", body)
    yield
    sandbox.kubectl("delete", "gq", KEEPER, TAKER, "--ignore-not-found", check=False)


def test_a_queue_lends_up_to_its_lending_limit_and_keeps_the_rest(
    kube: Kube, ns: str, queues: None
) -> None:
    kube.create_job(ns, _job("borrow", TAKER, 2))
    wait_for(lambda: kube.phase(ns, "borrow") == "Running", "borrow Running", 60)
    kube.create_job(ns, _job("more", TAKER, 1))
    reason = wait_for(lambda: _reason(kube, ns, "more"), "more says why it waits", 30)
    assert reason[0] == "QuotaExceeded", reason
    assert f"{KEEPER} keeps 8 it does not lend" in reason[1], reason
    wait_for(lambda: _t4(kube, KEEPER).get("lent") == 8, "the keeper's status lending 8", 30)

    def borrowers() -> set[str]:
        pods = kube.pods(ns, "gpufleet.io/trainingjob=borrow")
        return {p["metadata"]["uid"] for p in pods if not p["metadata"].get("deletionTimestamp")}

    before = borrowers()
    kube.create_job(ns, _job("own", KEEPER, 2))
    wait_for(lambda: kube.phase(ns, "own") == "Running", "own Running on what it kept", 60)
    assert len(before) == 2 and borrowers() == before  # nothing was reclaimed for it
