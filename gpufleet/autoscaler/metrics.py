"""Prometheus metrics of the ServingJob autoscaler, per job and pool.

Set at each tick from what the tick saw and decided: desired and ready replicas, the age of the
newest metrics sample in the pool's window (the freshness the policy judges), and a counter of
decisions by the policy's reason (hold, scale up for TTFT, ...). A job that is deleted or stops
autoscaling has its series removed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping

from prometheus_client import Counter, Gauge

_LABELS = ("namespace", "servingjob", "pool")

DESIRED = Gauge(
    "gpufleet_autoscaler_desired_replicas", "Replicas the autoscaler asked a pool for", _LABELS
)
READY = Gauge("gpufleet_autoscaler_ready_replicas", "Ready replicas of a pool", _LABELS)
METRIC_AGE = Gauge(
    "gpufleet_autoscaler_metric_age_seconds",
    "Age of the newest metrics sample of a pool at its last tick",
    _LABELS,
)
# (namespace, servingjob, pool) -> the decision reasons counted, to remove them with the job.
_reasons: dict[tuple[str, str, str], set[str]] = {}

DECISIONS = Counter(
    "gpufleet_autoscaler_decisions_total",
    "Autoscaling decisions per pool, by the policy's reason",
    (*_LABELS, "reason"),
)


def record(
    job: str,
    desired: Mapping[str, int],
    ready: Mapping[str, int],
    reasons: Mapping[str, str],
    ages: Mapping[str, float],
) -> None:
    """One tick of job `namespace/name`: per pool its desired and ready replicas, the reason of
    its decision, and (when it has samples) their age."""
    namespace, _, name = job.partition("/")
    for pool, replicas in desired.items():
        labels = (namespace, name, pool)
        DESIRED.labels(*labels).set(replicas)
        READY.labels(*labels).set(ready.get(pool, 0))
        DECISIONS.labels(*labels, reasons[pool]).inc()
        _reasons.setdefault(labels, set()).add(reasons[pool])
        if pool in ages:
            METRIC_AGE.labels(*labels).set(ages[pool])


def forget(job: str, pools: Iterable[str]) -> None:
    """Remove the series of a job that no longer autoscales."""
    namespace, _, name = job.partition("/")
    for pool in pools:
        labels = (namespace, name, pool)
        for gauge in (DESIRED, READY, METRIC_AGE):
            with contextlib.suppress(KeyError):
                gauge.remove(*labels)
        for reason in _reasons.pop(labels, set()):
            DECISIONS.remove(*labels, reason)
