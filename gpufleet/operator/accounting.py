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

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from gpufleet.model.contract.assignment import assigned_type, power_cap
from gpufleet.model.contract.service import held_share
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
    """(GPUs, watts) a running pod holds; (0, 0) for a pod that is not running on GPUs. The
    GPUs are its service share (`model.contract.service.held_share`), which the scheduler's
    service tier counts too."""
    share = held_share(pod, catalog)
    gpu_type = assigned_type(pod["metadata"].get("annotations") or {})
    if share == 0.0 or gpu_type is None or gpu_type not in catalog:
        return share, 0.0
    annotations = pod["metadata"].get("annotations") or {}
    return share, share * capped_power_w(catalog[gpu_type], power_cap(annotations))


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


@dataclass(slots=True)
class _Account:
    usage: Usage  # totals up to the last pass or check
    written: tuple[float, float]  # (GPU seconds, joules) as last written to the status
    written_at: datetime
    drawing: bool = False  # whether the pods of the last accrual held GPUs

    def due(self, now: datetime) -> bool:
        return self.grown() and now - self.written_at >= USAGE_FLUSH

    def grown(self) -> bool:
        return (self.usage.gpu_seconds, self.usage.joules) != self.written


class UsageLedger:
    """Each job's totals (by uid) between passes, and when they were last written. Totals are
    brought up to date by every pass and every check that makes no API call (`accrue`), so a
    job whose pods run steadily is charged exactly while its status is written only every
    USAGE_FLUSH."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._jobs: dict[str, _Account] = {}
        self._guard = threading.Lock()  # a timer's check and a spec change's pass may overlap

    def accrue(self, uid: str, pods: Iterable[Mapping[str, Any]], now: datetime) -> bool:
        """Bring a known job's totals up to `now` from `pods`; whether they are due in the
        status. A job not seen yet is due: its first pass resumes from its status."""
        with self._guard:
            account = self._jobs.get(uid)
            if account is None:
                return True
            pods = list(pods)
            account.usage = accrue(account.usage, pods, now, self.catalog)
            account.drawing = any(pod_draw(p, self.catalog)[0] > 0 for p in pods)
            return account.due(now)

    def flush_at(self, uid: str) -> datetime | None:
        """When the job's totals will be due in the status if its pods stay as they were at
        the last accrual; None when they will not grow (or the job is not known)."""
        with self._guard:
            account = self._jobs.get(uid)
            if account is None or not (account.drawing or account.grown()):
                return None
            return account.written_at + USAGE_FLUSH

    def total(
        self, uid: str, status: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], now: datetime
    ) -> float:
        """The job's GPU-seconds up to `now` (what `changes` would write), changing nothing;
        a job not seen yet resumes from `status`."""
        with self._guard:
            account = self._jobs.get(uid)
            start = account.usage if account is not None else Usage.from_status(status, now)
        return accrue(start, pods, now, self.catalog).gpu_seconds

    def changes(
        self,
        uid: str,
        status: Mapping[str, Any],
        pods: Iterable[Mapping[str, Any]],
        now: datetime,
        writing: bool,
    ) -> dict[str, Any]:
        """Accrue the job's GPU time and energy from `pods`; the status fields to write, if
        due: with any other status change (`writing`), on the job's first pass, or every
        USAGE_FLUSH while the totals grow. `status` is the job's status as read (where a
        restarted operator resumes)."""
        with self._guard:
            account = self._jobs.get(uid)
            first = account is None
            if account is None:
                start = Usage.from_status(status, now)
                account = _Account(start, (start.gpu_seconds, start.joules), now)
                self._jobs[uid] = account
            account.usage = usage = accrue(account.usage, pods, now, self.catalog)
            if not (writing or first or account.due(now)):
                return {}
            account.written, account.written_at = (usage.gpu_seconds, usage.joules), now
        return {
            "gpuSeconds": round(usage.gpu_seconds, 1),
            "estimatedEnergyJoules": round(usage.joules),
            "usageAccountedTime": format_time(usage.at),
        }

    def forget(self, uid: str) -> None:
        with self._guard:
            self._jobs.pop(uid, None)
