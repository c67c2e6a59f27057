"""The CPU a preemptor will need is kept for it while it waits for its victims (nominated.py,
eligibility.reserve), on the sandbox, through `gpufleet operator` as a real process and the
sandbox's real API server.

The scene of gpufleet.testing.hold_scene on the three 8-GPU H100 nodes (128 CPUs each): f1 and
f2 (8 GPUs, priority 20) fill two; v1 and v2 (3 GPUs each, priority 1) run on the third, 2 GPUs
free. hi (6 GPUs and 100 CPUs, priority 10, pinned to that node) evicts v1 and v2; v1's pod goes
at once, a finalizer keeps v2's. late (2 GPUs and 100 CPUs, priority 0, pinned there too) fits
the 2 GPUs hi's plan leaves, but not beside hi's CPUs: it is not bound while hi waits (before,
it was, and hi, short of CPU once v2 was gone, was decided afresh and stayed pending), and hi
is bound on the node once v2's pod is gone. No GPU is double-booked.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from gpufleet.testing import invariants
from gpufleet.testing.hold_scene import H100, HoldScene
from gpufleet.testing.operator import Kube, training_job, wait_for

pytestmark = pytest.mark.integration


def _on(job: dict[str, Any], node: str, cpu: str) -> dict[str, Any]:
    """`job` asking `cpu` CPUs per pod, pinned to `node` (else gpufleet could re-cut the empty
    MIG node's GPUs for it)."""
    spec = job["spec"]["template"]["spec"]
    spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    (container,) = spec["containers"]
    container["resources"] = {"requests": {"cpu": cpu}}
    return job


def test_a_gang_is_not_bound_on_the_cpu_a_waiting_preemptor_will_need(kube: Kube, ns: str) -> None:
    scene = HoldScene.start(kube, ns, H100)
    node = scene.node
    hi = _on(training_job("hi", 1, gpus=6, gpu_type=H100.gpu_type, priority=10), node, "100")
    with scene.hi_waiting(kube, ns, hi):
        wait_for(
            lambda: "WaitingForPreemption" in kube.scheduled_message(ns, "hi"), "hi waiting", 30
        )
        late = _on(training_job("late", 1, gpus=2, gpu_type=H100.gpu_type), node, "100")
        kube.create_job(ns, late)
        wait_for(
            lambda: "NodeResourcesFit" in kube.scheduled_message(ns, "late"), "late's reason", 30
        )
        for _ in range(15):
            assert kube.bound(ns, "late") == []
            time.sleep(0.2)
        assert invariants.check(kube.core) == []
    (placed,) = wait_for(lambda: kube.bound(ns, "hi"), "hi bound", 60)
    assert placed["spec"]["nodeName"] == node
    assert kube.bound(ns, "late") == []  # 28 CPUs left beside hi's 100
    assert invariants.check(kube.core) == []
