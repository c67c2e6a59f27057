"""A gang given GPUs that another gang's victim frees waits for that victim on the sandbox
(`GangPlacement.waits_for`), through `gpufleet operator` as a real process and the sandbox's real
API server.

The 16 T4 GPUs of the default fleet (4 nodes x 4) are full. Queue b (nominal 10) holds 10: v
(4 GPUs, priority 1), b1 (4, priority 5) and b3 (2, priority 5); queue a
(nominal 4) holds 6: w1 (4) and w2 (2), so it borrows 2. Queue b's y (2 GPUs, priority 0) waits:
b has no room within its quota to reclaim, and no gang of b ranks below y. Then b's x (2 GPUs,
priority 3) arrives: one decision evicts v for x, which puts b back within its nominal quota,
so y may now reclaim a's borrowed GPUs. Aspects: y takes the 2 of v's 4 GPUs that x does not
need instead (before, it evicted w1 or w2 as well); while v's evicted pod is still in the API
(a finalizer keeps it there: the sandbox's kwok deletes evicted pods at once) neither x nor y is
bound, and both are once it is gone; a's gangs keep running; no GPU is double-booked.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing import invariants
from gpufleet.testing.operator import Kube, training_job, wait_for

pytestmark = pytest.mark.integration

SUFFIX = uuid.uuid4().hex[:6]
QUEUE_A, QUEUE_B = f"wait-a-{SUFFIX}", f"wait-b-{SUFFIX}"


@pytest.fixture(scope="module")
def queues(kube: Kube, sandbox: Sandbox) -> Iterator[None]:
    kube.create_queue(QUEUE_A, "T4", 4)
    kube.create_queue(QUEUE_B, "T4", 10)
    yield
    sandbox.kubectl("delete", "gq", QUEUE_A, QUEUE_B, "--ignore-not-found", check=False)


def _job(name: str, queue: str, gpus: int, priority: int) -> dict[str, Any]:
    manifest = training_job(name, 1, gpus=gpus, gpu_type="T4", priority=priority)
    manifest["spec"]["queue"] = queue
    return manifest


def _uids(pods: list[dict[str, Any]]) -> set[str]:
    return {str(p["metadata"]["uid"]) for p in pods}


def test_a_gang_on_another_gangs_victims_gpus_waits_for_its_pod_to_go(
    kube: Kube, ns: str, queues: None
) -> None:
    for job, queue, gpus, priority in (
        ("w1", QUEUE_A, 4, 0),
        ("v", QUEUE_B, 4, 1),
        ("b1", QUEUE_B, 4, 5),
    ):
        kube.create_job(ns, _job(job, queue, gpus, priority))
    for job in ("w1", "v", "b1"):
        wait_for(lambda j=job: kube.phase(ns, j) == "Running", f"{job} Running", 60)
    for job, queue in (("b3", QUEUE_B), ("w2", QUEUE_A)):
        kube.create_job(ns, _job(job, queue, 2, 5 if queue == QUEUE_B else 0))
    for job in ("b3", "w2"):
        wait_for(lambda j=job: kube.phase(ns, j) == "Running", f"{job} Running", 60)
    lenders = {job: _uids(kube.bound(ns, job)) for job in ("w1", "w2")}
    assert all(len(u) == 1 for u in lenders.values())
    (victim,) = kube.bound(ns, "v")
    victim_name, victim_node = victim["metadata"]["name"], victim["spec"]["nodeName"]
    victim_uid = victim["metadata"]["uid"]

    # y waits: queue b is at its nominal quota and the fleet is full.
    kube.create_job(ns, _job("y", QUEUE_B, 2, 0))
    wait_for(lambda: kube.job_pods(ns, "y"), "y's pod", 30)
    time.sleep(3.0)  # a few scheduler cycles
    assert kube.bound(ns, "y") == []
    assert {job: _uids(kube.bound(ns, job)) for job in lenders} == lenders

    kube.linger(ns, victim_name, hold=True)
    try:
        kube.create_job(ns, _job("x", QUEUE_B, 2, 3))

        def evicted() -> bool:
            pods = [p for p in kube.job_pods(ns, "v") if p["metadata"]["uid"] == victim_uid]
            return bool(pods and pods[0]["metadata"].get("deletionTimestamp"))

        wait_for(evicted, "v's pod evicted", 60)
        # While v's pod is in the API it holds its GPUs: neither x (its preemptor) nor y (given
        # the GPUs x does not need) is bound, and a's gangs are not reclaimed for y.
        for _ in range(25):
            assert {job: _uids(kube.bound(ns, job)) for job in lenders} == lenders
            assert kube.bound(ns, "x") == [] and kube.bound(ns, "y") == []
            time.sleep(0.2)
        assert invariants.check(kube.core) == []
    finally:
        kube.linger(ns, victim_name, hold=False)
    for job in ("x", "y"):
        wait_for(lambda j=job: kube.bound(ns, j), f"{job} bound", 60)
    (placed,) = kube.bound(ns, "y")
    assert placed["spec"]["nodeName"] == victim_node  # the GPUs v's eviction freed
    # Queue a's gangs were not reclaimed: y waited for v instead.
    assert {job: _uids(kube.bound(ns, job)) for job in lenders} == lenders
    wait_for(lambda: kube.phase(ns, "y") == "Running", "y Running", 30)
    assert invariants.check(kube.core) == []
