"""A preemptor's planned GPUs are held for it while it waits for its victims (nominated.py), on
the sandbox, through `gpufleet operator` as a real process and the sandbox's real API server.

The 16 T4 GPUs of the default fleet (4 nodes x 4) are full: f1, f2, f3 (4 GPUs each, priority
20) and, on the fourth node, v1 and v2 (2 GPUs each, priority 1). hi (4 GPUs, priority 10) can
only take that node: one decision evicts v1 and v2 for it. v1's evicted pod goes at once (the
sandbox's kwok deletes evicted pods); v2's stays in the API (a finalizer keeps it, as a long
grace period would). Then small (2 GPUs, priority 0) arrives: it would fit on the 2 GPUs v1
freed (and so would v1's recreated worker), but they are held for hi: nothing is bound on the
node while v2's pod is there (before, small or v1's new worker was, and hi found its GPUs
taken), and hi is bound there once it is gone. No GPU is double-booked.
"""

from __future__ import annotations

import time

import pytest

from gpufleet.testing import invariants
from gpufleet.testing.operator import Kube, training_job, wait_for

pytestmark = pytest.mark.integration

LINGER = "gpufleet.io/test-linger"  # a finalizer that keeps v2's evicted pod shown


def _on(kube: Kube, ns: str, node: str) -> list[str]:
    """The namespace's pods bound on `node` and not being deleted."""
    return sorted(
        p["metadata"]["name"]
        for p in kube.pods(ns)
        if p["spec"].get("nodeName") == node and not p["metadata"].get("deletionTimestamp")
    )


def _linger(kube: Kube, ns: str, pod: str, hold: bool) -> None:
    body = {"metadata": {"finalizers": [LINGER] if hold else None}}
    kube.core.patch_namespaced_pod(pod, ns, body)


def test_gpus_a_victim_freed_are_held_for_the_waiting_preemptor(kube: Kube, ns: str) -> None:
    for job in ("f1", "f2", "f3"):
        kube.create_job(ns, training_job(job, 1, gpus=4, gpu_type="T4", priority=20))
    for job in ("f1", "f2", "f3"):
        wait_for(lambda j=job: kube.phase(ns, j) == "Running", f"{job} Running", 60)
    for job in ("v1", "v2"):
        kube.create_job(ns, training_job(job, 1, gpus=2, gpu_type="T4", priority=1))
    for job in ("v1", "v2"):
        wait_for(lambda j=job: kube.phase(ns, j) == "Running", f"{job} Running", 60)
    (v1,) = kube.bound(ns, "v1")
    (v2,) = kube.bound(ns, "v2")
    node = v2["spec"]["nodeName"]
    assert v1["spec"]["nodeName"] == node
    v1_uid, v2_name, v2_uid = v1["metadata"]["uid"], v2["metadata"]["name"], v2["metadata"]["uid"]

    _linger(kube, ns, v2_name, hold=True)
    try:
        kube.create_job(ns, training_job("hi", 1, gpus=4, gpu_type="T4", priority=10))

        def v1_gone_v2_evicted() -> bool:
            uids = {p["metadata"]["uid"]: p for p in kube.pods(ns)}
            v2_pod = uids.get(v2_uid)
            return v1_uid not in uids and bool(
                v2_pod and v2_pod["metadata"].get("deletionTimestamp")
            )

        wait_for(v1_gone_v2_evicted, "v1's pod gone, v2's evicted and kept", 60)
        kube.create_job(ns, training_job("small", 1, gpus=2, gpu_type="T4", priority=0))
        wait_for(lambda: kube.job_pods(ns, "small"), "small's pod", 30)
        # While v2's pod is in the API, the 2 GPUs v1 freed stay free for hi: neither small nor
        # v1's recreated worker is bound there, nor hi.
        for _ in range(25):
            assert _on(kube, ns, node) == []
            assert kube.bound(ns, "hi") == [] and kube.bound(ns, "small") == []
            time.sleep(0.2)
        assert invariants.check(kube.core) == []
    finally:
        _linger(kube, ns, v2_name, hold=False)
    wait_for(lambda: kube.bound(ns, "hi"), "hi bound", 60)
    (placed,) = kube.bound(ns, "hi")
    assert placed["spec"]["nodeName"] == node
    assert kube.bound(ns, "small") == []  # the fleet is full again
    wait_for(lambda: kube.phase(ns, "hi") == "Running", "hi Running", 30)
    assert invariants.check(kube.core) == []
