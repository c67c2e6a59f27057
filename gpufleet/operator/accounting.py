"""GPU time and energy a job (TrainingJob or ServingJob) has used, accrued from its running pods.

Each operator pass adds `(now - at) x what the job holds now`, so the error is at most one pass
interval per change of the job's pods; a pod is never charged before its own start time. A
running pod holds its whole GPUs, or the compute share of its MIG slice (SM slices out of 7).
Energy uses the power model of `gpufleet.model.power`: a busy GPU of the pod's assigned type,
under the power cap the scheduler wrote on the pod, times the same share (an ESTIMATE: a MIG
slice is charged its compute share of a whole GPU's draw).
A pod whose GPU type the catalogue does not know adds GPU time but no energy.

`accrue` is pure; `UsageLedger` keeps each job's totals between passes and says when they are
due in the status (with any other status change, or every `USAGE_FLUSH` while they grow).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from gpufleet.model.contract.assignment import assigned_type, power_cap
from gpufleet.model.contract.resources import gpu_request
from gpufleet.model.contract.timestamps import format_time, parse_time
from gpufleet.model.gpus import Catalog
from gpufleet.model.power import capped_power_w

__all__ = ["USAGE_FLUSH", "Usage", "UsageLedger", "accrue", "pod_draw"]

USAGE_FLUSH: Final = timedelta(seconds=30)  # totals reach the status at least this often


@dataclass(frozen=True, slots=True)
class Usage:
    """Totals up to `at`, as written to the status (`gpuSeconds`, `estimatedEnergyJoules`)."""

    gpu_seconds: float
    joules: float
    at: datetime

    @classmethod
    def from_status(cls, status: Mapping[str, Any], now: datetime) -> Usage:
        """Resume from a status written earlier; a job never accounted starts at `now`."""
        raw = status.get("usageAccountedTime")
        at = parse_time(raw) or now
        return cls(
            float(status.get("gpuSeconds") or 0.0),
            float(status.get("estimatedEnergyJoules") or 0.0),
            min(at, now),
        )


def pod_draw(pod: Mapping[str, Any], catalog: Catalog) -> tuple[float, float]:
    """(GPUs, watts) a running pod holds; (0, 0) for a pod that is not running on GPUs."""
    if (pod.get("status") or {}).get("phase") != "Running" or pod["metadata"].get(
        "deletionTimestamp"
    ):
        return 0.0, 0.0
    request = gpu_request(pod)
    gpus, mig_profile = request.gpus, request.mig_profile
    annotations = pod["metadata"].get("annotations") or {}
    gpu_type = assigned_type(annotations)
    known = gpu_type is not None and gpu_type in catalog
    if mig_profile is not None:
        if not known or not catalog[str(gpu_type)].has_mig_profile(mig_profile):
            return 0.0, 0.0  # a slice of unknown size: nothing honest to add
        share = catalog[str(gpu_type)].mig_profile(mig_profile).compute_fraction
    else:
        share = float(gpus)
    if not known:
        return share, 0.0
    return share, share * capped_power_w(catalog[str(gpu_type)], power_cap(annotations))


def accrue(
    previous: Usage, pods: Iterable[Mapping[str, Any]], now: datetime, catalog: Catalog
) -> Usage:
    """`previous` brought up to `now`, charging each pod running now from when it started or
    from `previous.at`, whichever is later (so a gap after an operator restart is not charged
    to pods that started within it)."""
    gpu_seconds, joules = previous.gpu_seconds, previous.joules
    for pod in pods:
        gpus, watts = pod_draw(pod, catalog)
        if gpus == 0.0:
            continue
        since = max(
            previous.at, parse_time((pod.get("status") or {}).get("startTime")) or previous.at
        )
        seconds = max(0.0, (now - since).total_seconds())
        gpu_seconds += seconds * gpus
        joules += seconds * watts
    return Usage(gpu_seconds, joules, max(now, previous.at))


class UsageLedger:
    """Each job's totals (by uid) between passes, and when they were last written."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._jobs: dict[str, tuple[Usage, datetime]] = {}

    def changes(
        self,
        uid: str,
        status: Mapping[str, Any],
        pods: Iterable[Mapping[str, Any]],
        now: datetime,
        writing: bool,
    ) -> dict[str, Any]:
        """Accrue the job's GPU time and energy from `pods`; the status fields to write, if
        due: with any other status change (`writing`), or every USAGE_FLUSH while the totals
        grow. `status` is the job's status as read (where a restarted operator resumes)."""
        previous, written = self._jobs.get(uid) or (Usage.from_status(status, now), now)
        usage = accrue(previous, pods, now, self.catalog)
        grown = (usage.gpu_seconds, usage.joules) != (previous.gpu_seconds, previous.joules)
        due = writing or (grown and now - written >= USAGE_FLUSH) or uid not in self._jobs
        self._jobs[uid] = (usage, now if due else written)
        if not due:
            return {}
        return {
            "gpuSeconds": round(usage.gpu_seconds, 1),
            "estimatedEnergyJoules": round(usage.joules),
            "usageAccountedTime": format_time(usage.at),
        }

    def forget(self, uid: str) -> None:
        self._jobs.pop(uid, None)
