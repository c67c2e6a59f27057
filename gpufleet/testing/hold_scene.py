"""A sandbox scene where a preemptor waits for its victims with GPUs held for it (the live
scheduler's nominated holds): the 16 T4 GPUs of the default fleet (4 nodes x 4) are full,
f1, f2, f3 (4 GPUs each, priority 20) and, on the fourth node, v1 and v2 (2 GPUs each,
priority 1); hi (4 GPUs, priority 10) can only take that node, evicting v1 and v2. v1's
evicted pod goes at once (the sandbox's kwok deletes evicted pods); a finalizer keeps v2's
shown, as a long grace period would, until the test lets it go. The live hold test and the
live take-over test both start from it. `HoldScene.start(..., H100)` is the same on the three
8-GPU H100 nodes: f1 and f2 fill two, v1 and v2 take 3 GPUs each of the third, and 2 stay free
(the live CPU-hold test).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from gpufleet.testing.operator import Kube, training_job, wait_for

__all__ = ["H100", "T4", "Fleet", "HoldScene", "in_queue", "on_node"]


@dataclass(frozen=True, slots=True)
class Fleet:
    """The GPU type of the scene's nodes, the full gangs filling all but one of them, and the
    GPUs of each of v1 and v2 on the node left."""

    gpu_type: str
    fulls: tuple[str, ...]
    full_gpus: int
    victim_gpus: int


T4 = Fleet("T4", ("f1", "f2", "f3"), 4, 2)
H100 = Fleet("H100-80GB", ("f1", "f2"), 8, 3)


def in_queue(job: dict[str, Any], queue: str | None) -> dict[str, Any]:
    """The TrainingJob manifest `job` in `queue` (as it is without one)."""
    if queue is not None:
        job["spec"]["queue"] = queue
    return job


def on_node(kube: Kube, ns: str, node: str) -> list[str]:
    """The namespace's pods bound on `node` and not being deleted."""
    return sorted(
        p["metadata"]["name"]
        for p in kube.pods(ns)
        if p["spec"].get("nodeName") == node and not p["metadata"].get("deletionTimestamp")
    )


def _running(kube: Kube, ns: str, jobs: tuple[str, ...]) -> None:
    for job in jobs:
        wait_for(partial(_is_running, kube, ns, job), f"{job} Running", 60)


def _is_running(kube: Kube, ns: str, job: str) -> bool:
    return kube.phase(ns, job) == "Running"


@dataclass(frozen=True, slots=True)
class HoldScene:
    node: str  # the node left to v1 and v2
    v1_uid: str
    v2_name: str
    v2_uid: str
    fulls: frozenset[str]  # the uids of the full gangs' pods

    @staticmethod
    def start(kube: Kube, ns: str, fleet: Fleet = T4, queue: str | None = None) -> HoldScene:
        """Fill the fleet: f1, f2 (, f3), then v1 and v2 on the node left (all in `queue`,
        when given)."""
        for job in fleet.fulls:
            full = training_job(job, 1, gpus=fleet.full_gpus, gpu_type=fleet.gpu_type, priority=20)
            kube.create_job(ns, in_queue(full, queue))
        _running(kube, ns, fleet.fulls)
        for job in ("v1", "v2"):
            victim = training_job(job, 1, fleet.victim_gpus, fleet.gpu_type, priority=1)
            kube.create_job(ns, in_queue(victim, queue))
        _running(kube, ns, ("v1", "v2"))
        (v1,) = kube.bound(ns, "v1")
        (v2,) = kube.bound(ns, "v2")
        node = v2["spec"]["nodeName"]
        assert v1["spec"]["nodeName"] == node
        fulls = frozenset(p["metadata"]["uid"] for j in fleet.fulls for p in kube.bound(ns, j))
        meta1, meta2 = v1["metadata"], v2["metadata"]
        return HoldScene(node, meta1["uid"], meta2["name"], meta2["uid"], fulls)

    @contextmanager
    def hi_waiting(self, kube: Kube, ns: str, hi: dict[str, Any] | None = None) -> Iterator[None]:
        """Within: hi (4 T4 GPUs, priority 10, unless given) is created and has evicted v1 and
        v2; v1's pod is gone and v2's kept. On leaving, v2's pod is let go."""
        self._linger(kube, ns, hold=True)
        try:
            kube.create_job(ns, hi or training_job("hi", 1, gpus=4, gpu_type="T4", priority=10))
            wait_for(lambda: self._v1_gone_v2_evicted(kube, ns), "v1 gone, v2 kept", 60)
            yield
        finally:
            self._linger(kube, ns, hold=False)

    def _linger(self, kube: Kube, ns: str, hold: bool) -> None:
        kube.linger(ns, self.v2_name, hold)

    def _v1_gone_v2_evicted(self, kube: Kube, ns: str) -> bool:
        uids = {p["metadata"]["uid"]: p for p in kube.pods(ns)}
        v2_pod = uids.get(self.v2_uid)
        return self.v1_uid not in uids and bool(
            v2_pod and v2_pod["metadata"].get("deletionTimestamp")
        )

    def v2_gone(self, kube: Kube, ns: str) -> bool:
        return self.v2_uid not in {p["metadata"]["uid"] for p in kube.pods(ns)}
