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
from gpufleet.testing.hold_scene import HoldScene, on_node
from gpufleet.testing.operator import Kube, training_job, wait_for

pytestmark = pytest.mark.integration


def test_gpus_a_victim_freed_are_held_for_the_waiting_preemptor(kube: Kube, ns: str) -> None:
    scene = HoldScene.start(kube, ns)
    node = scene.node
    with scene.hi_waiting(kube, ns):
        kube.create_job(ns, training_job("small", 1, gpus=2, gpu_type="T4", priority=0))
        wait_for(lambda: kube.job_pods(ns, "small"), "small's pod", 30)
        # While v2's pod is in the API, the 2 GPUs v1 freed stay free for hi: neither small nor
        # v1's recreated worker is bound there, nor hi.
        for _ in range(25):
            assert on_node(kube, ns, node) == []
            assert kube.bound(ns, "hi") == [] and kube.bound(ns, "small") == []
            time.sleep(0.2)
        assert invariants.check(kube.core) == []
    wait_for(lambda: kube.bound(ns, "hi"), "hi bound", 60)
    (placed,) = kube.bound(ns, "hi")
    assert placed["spec"]["nodeName"] == node
    assert kube.bound(ns, "small") == []  # the fleet is full again
    wait_for(lambda: kube.phase(ns, "hi") == "Running", "hi Running", 30)
    assert invariants.check(kube.core) == []
