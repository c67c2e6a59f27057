"""A gang of higher priority takes the GPUs held for a waiting preemptor (nominated.py), on the
sandbox, through `gpufleet operator` as a real process and the sandbox's real API server.

The scene of gpufleet.testing.hold_scene: the 16 T4 GPUs of the default fleet are full, f1, f2,
f3 (4 GPUs each, priority 20) and, on the fourth node, v1 and v2 (2 GPUs each, priority 1); hi
(4 GPUs, priority 10) evicts v1 and v2; v1's pod goes at once, a finalizer keeps v2's. The 2
GPUs v1 freed are held for hi. Then urgent (2 GPUs, priority 30) arrives: as kube-scheduler
lets a pod take resources nominated for a lower-priority pod, it is bound there at once, and
nothing is evicted for it (before, the hold was not preemptible: urgent evicted v2 again, whose
pod was going anyway, and waited for it). hi's pods say urgent took its GPUs; once v2's pod is
gone hi is decided afresh and, the node's 2 free GPUs being too few, stays pending. No GPU is
ever double-booked.
"""

from __future__ import annotations

import time

import pytest

from gpufleet.testing import invariants
from gpufleet.testing.hold_scene import HoldScene, on_node
from gpufleet.testing.operator import Kube, training_job, wait_for

pytestmark = pytest.mark.integration


def _evicted(kube: Kube, ns: str) -> list[str]:
    """The namespace's pods being deleted (evicted, kept by a finalizer)."""
    return sorted(
        p["metadata"]["name"] for p in kube.pods(ns) if p["metadata"].get("deletionTimestamp")
    )


def test_a_higher_priority_gang_takes_the_gpus_held_for_a_waiting_one(kube: Kube, ns: str) -> None:
    scene = HoldScene.start(kube, ns)
    node, v2_name = scene.node, scene.v2_name
    with scene.hi_waiting(kube, ns):
        wait_for(
            lambda: "WaitingForPreemption" in kube.scheduled_message(ns, "hi"), "hi waiting", 30
        )
        kube.create_job(ns, training_job("urgent", 1, gpus=2, gpu_type="T4", priority=30))
        (placed,) = wait_for(lambda: kube.bound(ns, "urgent"), "urgent bound", 30)
        # On the 2 GPUs v1 freed, held for hi, while v2's pod is still there.
        assert placed["spec"]["nodeName"] == node
        assert _evicted(kube, ns) == [v2_name]
        assert {p["metadata"]["uid"] for j in ("f1", "f2", "f3") for p in kube.bound(ns, j)} == (
            scene.fulls
        )
        wait_for(
            lambda: "took the GPUs planned for it" in kube.scheduled_message(ns, "hi"),
            "hi's new reason",
            30,
        )
        assert "urgent" in kube.scheduled_message(ns, "hi")
        assert invariants.check(kube.core) == []
    wait_for(lambda: scene.v2_gone(kube, ns), "v2 gone", 30)
    # hi is decided afresh: 2 GPUs free on the node, it needs 4, and urgent and the f's are
    # above it (v1's or v2's recreated worker may take those 2).
    for _ in range(25):
        assert kube.bound(ns, "hi") == []
        assert any(n.startswith("urgent") for n in on_node(kube, ns, node))
        time.sleep(0.2)
    assert invariants.check(kube.core) == []
