"""Tenants for trace replays: the Philly virtual clusters as GPUQueues with history-based quotas.

Philly's `cluster` column names the virtual cluster (VC) each job was submitted to: 15 VCs, the
teams sharing the cluster. The simulator makes each VC a top-level queue (one cohort, as Kueue
would put the teams of one cluster) and gives it, on every GPU type of the simulated fleet, a
nominal quota proportional to its share of the GPU-hours in a *history* period:

    share_q    = GPU-hours of q's jobs arriving in [history start, history end) / all of them
    nominal_qt = share_q x GPUs of type t in the fleet, rounded by largest remainder so that the
                 nominal quotas of each type add up to exactly the type's GPUs
    weight_q   = 1 (`weights="equal"`, the default), or share_q (`weights="share"`, at least
                 `MIN_WEIGHT`, since a queue's weight must be positive)

The weights split what the queues borrow beyond their nominal quotas (the fair-share order,
core fairshare.py). Equal weights are the default: the nominal quota already gives a tenant its
history share as a guarantee, and weighting the spare capacity by the same share again would
hand a small tenant a small slice of both; equal weights are Kueue's default (weight 1 per
ClusterQueue), what the Kueue-like baseline's round-robin over queue heads amounts to, and the
reference of the finish-time fairness metric (each tenant's 1/N of the cluster). Chosen on the
tuning windows of `bench/queue_bench.py` (worst-tenant rho there: see bench/README.md).

No borrowing or lending limit is set: a queue may borrow whatever others leave unused, and gives
it back by reclaim (Kueue's cohort defaults with reclaimWithinCohort: Any). This is a *setup*
taken from the trace's history, the way an operator sizes quotas from last month's usage: for a
scored replay window the history must end where the window starts (`history_before`), so no
policy learns anything from the jobs it is scored on. The whole-trace aggregate
(`history=None`) is also accepted, stated as a configuration input: it uses the jobs of the
window too (their aggregate volume only, never one job's size or arrival) and is meant for
examples and tests, not for scoring. GPU-hours are counted with the loader's own filters
(jobs of at least 60 s and under 1,000 GPU-hours), so the quotas describe the jobs replayed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.model.fleet import FleetSpec
from gpufleet.sim.traces.philly import parse_window, read_philly_rows

__all__ = [
    "MIN_WEIGHT",
    "WEIGHTS",
    "TenantSetup",
    "apportion",
    "fleet_gpus_by_type",
    "history_before",
    "philly_gpu_hours",
    "tenant_setup",
]

MIN_WEIGHT = 1e-3  # weight of a queue with no GPU-hours in the history
WEIGHTS = ("equal", "share")  # how tenant_setup weighs the queues

# The loader's filters (philly.load_philly's defaults), so the history counts the same jobs.
_MIN_DURATION_S = 60.0
_MAX_GPU_HOURS = 1000.0


def apportion(total: int, shares: Mapping[str, float]) -> dict[str, int]:
    """Split `total` GPUs in proportion to `shares` by largest remainder (Hamilton's method):
    the parts add up to `total`, each within one of its exact value; ties go by name."""
    weight = sum(shares.values())
    if weight <= 0:
        return dict.fromkeys(shares, 0)
    exact = {k: total * v / weight for k, v in shares.items()}
    out = {k: math.floor(v) for k, v in exact.items()}
    left = total - sum(out.values())
    for k in sorted(exact, key=lambda k: (-(exact[k] - out[k]), k))[:left]:
        out[k] += 1
    return out


def history_before(window: str, days: float) -> str:
    """The `days` before a replay window's start, as a `START,END` window string."""
    start, _ = parse_window(window)
    if start is None:
        raise ValueError("a history needs a window with a start")
    if days <= 0:
        raise ValueError("history days must be positive")
    begin = start - timedelta(days=days)
    return f"{begin.isoformat()},{start.isoformat()}"


def philly_gpu_hours(path: str | Path, history: str | None) -> dict[str, float]:
    """GPU-hours per virtual cluster of the jobs arriving in `history` (None: the whole
    trace), counted with the loader's filters; every VC of the trace is a key (0 when idle)."""
    start, end = parse_window(history)
    hours: dict[str, float] = {}
    for _, ts, duration, gpus, vc in read_philly_rows(path):
        hours.setdefault(vc, 0.0)
        if (start is not None and ts < start) or (end is not None and ts >= end):
            continue
        gpu_hours = duration * gpus / 3600.0
        if duration < _MIN_DURATION_S or gpu_hours >= _MAX_GPU_HOURS:
            continue
        hours[vc] += gpu_hours
    return hours


def fleet_gpus_by_type(fleet: FleetSpec) -> dict[str, int]:
    """The fleet's GPUs per type."""
    out: dict[str, int] = {}
    for pool in fleet.node_pools:
        out[pool.gpu_type] = out.get(pool.gpu_type, 0) + pool.count * pool.gpus_per_node
    return out


@dataclass(frozen=True)
class TenantSetup:
    """The queues of a replay and where their quotas came from."""

    tree: QueueTree
    shares: Mapping[str, float]  # GPU-hour share of each tenant in the history
    history: str | None  # the history window (None: the whole trace)

    def nominal(self, tenant: str) -> dict[str, int]:
        """A tenant's nominal quota per GPU type."""
        return {r: q.nominal for r, q in self.tree.queues[tenant].quotas.items()}


def tenant_setup(
    gpu_hours: Mapping[str, float],
    fleet: FleetSpec,
    history: str | None = None,
    weights: str = "equal",
) -> TenantSetup:
    """The tenants' queues for `fleet` from their GPU-hours; `weights` "equal" or "share"
    (see the module docstring)."""
    if not gpu_hours:
        raise ValueError("no tenants")
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}, not {weights!r}")
    total = sum(gpu_hours.values())
    shares = {q: (h / total if total > 0 else 1.0 / len(gpu_hours)) for q, h in gpu_hours.items()}
    per_type = fleet_gpus_by_type(fleet)
    nominal: dict[str, dict[str, int]] = {q: {} for q in shares}
    for gpu_type, gpus in sorted(per_type.items()):
        for q, n in apportion(gpus, shares).items():
            nominal[q][gpu_type] = n
    specs: Iterable[QueueSpec] = (
        QueueSpec(
            name=q,
            weight=1.0 if weights == "equal" else max(shares[q], MIN_WEIGHT),
            quotas={t: Quota(nominal=n) for t, n in nominal[q].items()},
        )
        for q in sorted(shares)
    )
    return TenantSetup(QueueTree.build(specs), shares, history)
