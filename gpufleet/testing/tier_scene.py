"""The service tier's sandbox scene: one GPUQueue holding the 16 T4 GPUs of the default fleet
(4 nodes x 4) and jobs of four 4-T4 workers in it, each taking the whole fleet, so a fresh job
starts only by the tier's preemption. The live service-tier test and the live test of the
tier's limit on re-evictions both start from it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpufleet.model.contract import names
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.operator import Kube, OperatorProcess, configured_operator, training_job

__all__ = ["GPUS", "job_status", "live_pods", "tier_operator", "whole_fleet_job"]

GPUS = 16  # every T4 of the default fleet: 4 nodes x 4


@contextmanager
def tier_operator(
    sandbox: Sandbox, kube: Kube, folder: Path, queue: str, settings: str
) -> Iterator[OperatorProcess]:
    """`gpufleet operator` with `settings`, and `queue` with every T4 as its quota (deleted
    after)."""
    kube.create_queue(queue, "T4", GPUS)
    try:
        with configured_operator(sandbox.kubeconfig, kube, folder, settings) as proc:
            yield proc
    finally:
        sandbox.kubectl("delete", "gq", queue, "--ignore-not-found", check=False)


def whole_fleet_job(name: str, queue: str) -> dict[str, Any]:
    """Four workers of 4 T4 each (every T4 of the fleet) in `queue`, priority 0, stopping
    within a second when evicted."""
    manifest = training_job(name, replicas=4, gpus=4, gpu_type="T4")
    manifest["spec"]["queue"] = queue
    manifest["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 1
    return manifest


def job_status(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    """The TrainingJob's status ({} while it has none or is gone)."""
    return dict((kube.job(ns, name) or {}).get("status") or {})


def live_pods(kube: Kube, ns: str, name: str) -> list[dict[str, Any]]:
    """The job's pods not being deleted."""
    pods = kube.pods(ns, f"{names.TRAININGJOB_LABEL}={name}")
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]
