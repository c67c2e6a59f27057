"""A sandbox scene where a reclaim must move a gang: the lender's 4-GPU job can only have T4
node t4-0, which holds its queue's borrowers (two one-GPU `ones` jobs) and two one-GPU `keeper`
jobs that checkpoint. The keeper queue's nominal quota is 1 GPU, so one keeper may be
reclaimed and the other, within its quota, is moved to a free T4 (t4-2 or t4-3). The live
move-wait test and the what-if's moves test both start from it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpufleet.model.contract.timestamps import parse_time
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.operator import Kube, training_job, wait_for

__all__ = ["GRACE", "QUEUES", "RESTART", "SETTINGS", "T4", "MoveScene"]

T4 = "T4"
GRACE = 1  # seconds the keeper jobs take to save on SIGTERM
RESTART = 1.0  # scheduler.move_restart_s of the scene's operator
SETTINGS = f"scheduler:\n  move_restart_s: {RESTART}\n"  # the operator's settings file
QUEUES = {"lender": 4, "ones": 0, "keeper": 1, "full": 11}  # nominal T4 GPUs
# Jobs on fixed nodes (queue, GPUs, node), and fillers of the lender's queue on the GPUs that
# must end up free, so that the ones and keeper jobs can only start on t4-0.
FIXED = {"full-1": ("full", 4, "t4-1"), "full-2": ("full", 3, "t4-2"),
         "full-3": ("full", 3, "t4-3"), "fill-2": ("lender", 1, "t4-2"),
         "fill-3": ("lender", 1, "t4-3")}  # fmt: skip
SMALL = {"ones-0": "ones", "ones-1": "ones", "keep-0": "keeper", "keep-1": "keeper"}


@dataclass(frozen=True, slots=True)
class MoveScene:
    prefix: str  # of the scene's queue names, unique per test module

    def queue(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def job(self, name: str, of: str, gpus: int, node: str | None = None) -> dict[str, Any]:
        """One worker of `gpus` T4 in queue `of`, on `node` when given; keeper jobs
        checkpoint."""
        job = training_job(name, replicas=1, gpus=gpus, gpu_type=T4)
        spec = job["spec"]
        spec["queue"] = self.queue(of)
        spec["template"]["spec"]["terminationGracePeriodSeconds"] = GRACE
        if node is not None:
            spec["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        if of == "keeper":
            spec["checkpoint"] = {"onSignal": True, "gracePeriodSeconds": GRACE}
        return job

    @contextmanager
    def queues(self, sandbox: Sandbox, kube: Kube) -> Iterator[None]:
        """The scene's GPUQueues, deleted after."""
        for name, nominal in QUEUES.items():
            kube.create_queue(self.queue(name), T4, nominal)
        try:
            yield
        finally:
            for name in QUEUES:
                sandbox.kubectl("delete", "gq", self.queue(name), "--ignore-not-found", check=False)

    def set_up(self, kube: Kube, ns: str) -> dict[str, dict[str, Any]]:
        """Start the fixed and small jobs, free the fillers' GPUs and wait until the keepers
        have run longer than a move costs them (restart and grace), so moving one is worth
        it; the small jobs' started pods, all on t4-0."""
        for name, (of, gpus, node) in FIXED.items():
            kube.create_job(ns, self.job(name, of, gpus, node))
        wait_for(lambda: kube.one_started_each(ns, list(FIXED)), "the fixed jobs running", 60)
        for name, of in SMALL.items():
            kube.create_job(ns, self.job(name, of, 1))
        started = wait_for(
            lambda: kube.one_started_each(ns, list(SMALL)), "the small jobs running", 60
        )
        assert {p["spec"]["nodeName"] for p in started.values()} == {"t4-0"}, started
        fillers = ("fill-2", "fill-3")
        for name in fillers:
            kube.delete_job(ns, name)
        wait_for(lambda: not any(kube.job_pods(ns, n) for n in fillers), "the fillers gone", 30)
        stamps = [parse_time(p["status"]["startTime"]) for p in started.values()]
        latest = max(t for t in stamps if t is not None)
        wait_for(
            lambda: (datetime.now(UTC) - latest).total_seconds() > 3 * (RESTART + GRACE),
            "the keepers past a move's price",
            30,
        )
        return started
