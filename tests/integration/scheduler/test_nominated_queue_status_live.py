"""GPUs held for a waiting preemptor are not usage in its GPUQueue's status (queue_objects.py),
on the sandbox, through `gpufleet operator` as a real process and the sandbox's real API server.

The scene of gpufleet.testing.hold_scene, every job in one queue with the 16 T4 GPUs as its
nominal quota: f1, f2, f3 (4 GPUs each, priority 20) and v1, v2 (2 GPUs each, priority 1) fill
the fleet; hi (4 GPUs, priority 10) evicts v1 and v2; v1's pod goes at once, a finalizer keeps
v2's. While hi waits, the 2 GPUs v1 freed are held for it: the queue's status shows them as
`held`, and `used` counts the 14 GPUs the running jobs hold (before, the hold was counted as
used, 16, and as a running job). Once v2's pod is gone and hi bound, nothing is held.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.hold_scene import HoldScene, in_queue
from gpufleet.testing.operator import Kube, training_job, wait_for

pytestmark = pytest.mark.integration

QUEUE = f"holds-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def queue(kube: Kube, sandbox: Sandbox) -> Iterator[str]:
    kube.create_queue(QUEUE, "T4", 16)
    yield QUEUE
    sandbox.kubectl("delete", "gq", QUEUE, "--ignore-not-found", check=False)


def _t4(kube: Kube) -> dict[str, Any]:
    obj: Any = kube.custom.get_cluster_custom_object("gpufleet.io", "v1alpha1", "gpuqueues", QUEUE)
    rows = (obj.get("status") or {}).get("resources") or []
    return next((r for r in rows if r["gpuType"] == "T4" and "migProfile" not in r), {})


def test_gpus_held_for_a_waiting_preemptor_are_not_counted_as_used(
    kube: Kube, ns: str, queue: str
) -> None:
    scene = HoldScene.start(kube, ns, queue=queue)
    wait_for(lambda: _t4(kube).get("used") == 16, "the queue using 16 GPUs", 30)
    hi = in_queue(training_job("hi", 1, gpus=4, gpu_type="T4", priority=10), queue)
    with scene.hi_waiting(kube, ns, hi):
        row = wait_for(lambda: (r := _t4(kube)).get("held") and r, "2 GPUs held for hi", 30)
        assert (row["used"], row["held"], row["borrowed"]) == (14, 2, 0)
    wait_for(lambda: kube.bound(ns, "hi"), "hi bound", 60)
    wait_for(lambda: (r := _t4(kube)).get("held") == 0 and r.get("used") == 16, "nothing held", 30)
