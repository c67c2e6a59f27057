"""Prometheus metrics of the live scheduler, served by `gpufleet operator --metrics-port`."""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram

from gpufleet.model.contract.reasons import PendingNote

if TYPE_CHECKING:
    from gpufleet.scheduler.cycle_report import CycleReport

CYCLES = Counter("gpufleet_scheduler_cycles_total", "Scheduling cycles run", ["result"])
CYCLE_SECONDS = Histogram(
    "gpufleet_scheduler_cycle_seconds",
    "Wall time of one scheduling cycle",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
GANGS_BOUND = Counter("gpufleet_scheduler_gangs_bound_total", "Gangs bound whole")
BIND_FAILURES = Counter("gpufleet_scheduler_gang_bind_failures_total", "Gangs rolled back")
PREEMPTED = Counter("gpufleet_scheduler_gangs_preempted_total", "Gangs evicted by preemption")
MIG_REQUESTS = Counter("gpufleet_scheduler_mig_requests_total", "MIG reconfigurations asked for")
RESTARTED = Counter("gpufleet_scheduler_gangs_restarted_total", "Gangs moved off failed nodes")
PENDING = Gauge(
    "gpufleet_scheduler_pending_gangs",
    "Gangs waiting after the last cycle, by the reason code they wait for",
    ["reason"],
)
BINDINGS = Counter("gpufleet_scheduler_bindings_total", "Pod bindings sent (whole gangs at once)")
READY = Gauge("gpufleet_scheduler_ready", "1 once informers are synced and the loop runs")


def record(report: CycleReport) -> None:
    CYCLES.labels("error" if report.error else "ok").inc()
    CYCLE_SECONDS.observe(sum(report.timings.values()))
    GANGS_BOUND.inc(len(report.bound))
    BIND_FAILURES.inc(len(report.bind_failures))
    PREEMPTED.inc(len(report.preempted))
    MIG_REQUESTS.inc(len(report.mig_requests))
    RESTARTED.inc(len(report.restarted))
    BINDINGS.inc(report.sent)
    counts = collections.Counter(reason_code(message) for message in report.pending.values())
    # Reasons seen before stay at 0 rather than vanish, so a graph shows them ending.
    for reason in _seen_reasons | set(counts):
        PENDING.labels(reason).set(counts.get(reason, 0))
    _seen_reasons.update(counts)


_seen_reasons: set[str] = set()
UNKNOWN_REASON = "Unknown"


def reason_code(message: str) -> str:
    """The code of a pending reason (the core's or the scheduler's); `Unknown` for a message
    that carries none."""
    reason = PendingNote.parse(message).reason
    return UNKNOWN_REASON if reason is None else reason.value
