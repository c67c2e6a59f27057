"""The scheduler's cycle metrics: pending gangs counted by the reason code of their note (the
contract's decoder), `Unknown` for a message without one, a reason that ended kept at 0, and
bindings counted as sent."""

from __future__ import annotations

from prometheus_client import REGISTRY

from gpufleet.model.contract.reasons import PendingReason, SchedulerReason, pending_text
from gpufleet.scheduler import prometheus_metrics as metrics
from gpufleet.scheduler.cycle_report import CycleReport


def _pending(reason: str) -> float | None:
    return REGISTRY.get_sample_value("gpufleet_scheduler_pending_gangs", {"reason": reason})


def test_pending_gangs_by_reason_code() -> None:
    short = pending_text(PendingReason.INSUFFICIENT_GPUS, "needs 8 x H100-80GB, 4 free")
    mig = pending_text(SchedulerReason.MIG, "node-3 is being repartitioned")
    before = REGISTRY.get_sample_value("gpufleet_scheduler_bindings_total") or 0.0
    metrics.record(
        CycleReport(
            cycle=1,
            sent=3,
            pending={"a/x": short, "a/y": short, "b/z": mig, "c/w": "written by someone else"},
        )
    )
    assert _pending(PendingReason.INSUFFICIENT_GPUS.value) == 2
    assert _pending(SchedulerReason.MIG.value) == 1
    assert _pending(metrics.UNKNOWN_REASON) == 1
    assert REGISTRY.get_sample_value("gpufleet_scheduler_bindings_total") == before + 3

    metrics.record(CycleReport(cycle=2, pending={"b/z": mig}))
    assert _pending(PendingReason.INSUFFICIENT_GPUS.value) == 0  # ended, still shown
    assert _pending(SchedulerReason.MIG.value) == 1
    assert _pending(metrics.UNKNOWN_REASON) == 0
