"""Per-tenant metrics of a replay with queues: JCT, finish-time fairness, Jain's index, quotas.

Definitions (N = tenants with at least one job in the replay, C = the fleet's GPUs):

* **Isolated time** of job j, T_iso(j): its run time on 1/N of the cluster, used alone. The 1/N
  slice holds C/N GPUs cut evenly from every type, so a job spread over it runs at the GPU-
  weighted mean of its speeds on the fleet's types, s(j) = sum_t C_t x speed_j(t) / C (speeds
  from the simulator's speed model); a job asking for more than C/N GPUs gets only C/N of
  them and is stretched in proportion: T_iso(j) = work(j) / s(j) x max(1, G(j) / (C/N)),
  where G(j) is its GPU count. No queueing: the slice is the tenant's alone and the job its
  only one, which makes T_iso a lower bound that every policy is measured against alike.
* **Finish-time fairness** (Themis, Mahajan et al., NSDI'20): rho(j) = JCT(j) / T_iso(j);
  a tenant's rho is the mean of its completed jobs' rho; the worst tenant's rho is the max.
  rho < 1: the tenant did better than on its own 1/N of the cluster.
* **Normalised share** of a tenant: x = 1 / rho (the fraction of its isolated speed it got);
  **Jain's index** over the tenants' x: (sum x)^2 / (n x sum x^2), 1 = all equal, 1/n = one
  tenant gets everything.
* **Quota violations**, checked after every decision (`QuotaMonitor`) against the queues'
  quotas: (a) *limit*: a queue uses more of a GPU type than its nominal quota plus borrowing
  limit; (b) *guarantee*: a waiting gang would stay within its queue's nominal quota of a type
  it accepts, other queues borrow that type, and the gang would fit on the free GPUs plus those
  the borrowers hold. The issue's guarantee is a start within one scheduler cycle (plus the
  victims' grace period, which the simulator does not have), so a gang is counted once it is
  still owed `grace_s` (one cycle, 10 s) after the decision that first found it owed. Counted:
  decisions with a limit exceeded, and distinct gangs owed for longer than `grace_s` (plus the
  decisions after which any was).
* **Utilisation**: busy GPU-seconds / (C x span), over the span from the first to the last
  arrival (`results.arrival_utilisation`), the load-bearing part of a replay; the simulator's
  makespan figure (`makespan_utilisation`) is reported too, but one long job left running at
  the end of a window decides it (it is the inverse of the makespan for a fixed workload).
* **Work utilisation**: the same span, each busy GPU-second weighted by the job's speed there
  over its speed on its fastest type (`results.arrival_work_utilisation`). On a heterogeneous
  fleet the plain figure rises when jobs run on slow types (the same work keeps GPUs busy for
  longer), so it favours a heterogeneity-blind policy for being slow; the work figure counts
  the work done, which is what keeping the fleet busy is for.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpufleet.core.demand import Gang
from gpufleet.core.queues import QueueTree, resource_key
from gpufleet.core.quota import QuotaBook, running_charge
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.sim.baselines import best_fit, gang_gpus, place_gang, release_replicas
from gpufleet.sim.results import SimResult, summarise
from gpufleet.sim.speed import SpeedModel
from gpufleet.sim.traces.common import TraceJob

__all__ = [
    "QuotaMonitor",
    "TenantReport",
    "TenantRow",
    "isolated_time_s",
    "jain_index",
    "tenant_report",
]


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index of non-negative values; NaN when all are 0."""
    if not values:
        raise ValueError("Jain's index of no values")
    if min(values) < 0:
        raise ValueError("Jain's index needs non-negative values")
    square = sum(v * v for v in values)
    return sum(values) ** 2 / (len(values) * square) if square > 0 else math.nan


def isolated_time_s(
    job: TraceJob, speed: SpeedModel, fleet_gpus: Mapping[str, int], tenants: int
) -> float:
    """T_iso(j): the job alone on 1/`tenants` of the fleet (module docstring)."""
    if tenants < 1:
        raise ValueError("tenants must be >= 1")
    total = sum(fleet_gpus.values())
    mean_speed = sum(n * speed.type_speed(job, t) for t, n in fleet_gpus.items()) / total
    stretch = max(1.0, job.gpu_share * tenants / total)
    return job.work_s / mean_speed * stretch


class QuotaMonitor:
    """Checks the queues' quotas after each decision (a `CycleObserver`; module docstring)."""

    def __init__(self, tree: QueueTree, grace_s: float = 10.0) -> None:
        self.tree = tree
        self.grace_s = grace_s
        self._owed_since: dict[str, float] = {}  # gang -> when it was first found owed
        self.decisions = 0
        self.limit_decisions = 0  # decisions after which some queue exceeded a limit
        self.owed_decisions = 0  # decisions after which some gang waited while owed
        self.owed_gangs: set[str] = set()
        self.examples: list[str] = []  # the first few violations, in words

    @property
    def violations(self) -> int:
        """Limit violations (decisions) plus guarantee violations (distinct gangs)."""
        return self.limit_decisions + len(self.owed_gangs)

    def __call__(self, now: float, snapshot: Snapshot, waiting: Sequence[Gang]) -> None:
        self.decisions += 1
        book = QuotaBook(self.tree, snapshot)
        over = [
            f"t={now:.0f}s queue {q} uses {book.used(q, r)} x {r} (limit {quota.ceiling:g})"
            for q in sorted(self.tree.queues)
            if self.tree.usable(q)
            for r, quota in sorted(self.tree.queues[q].quotas.items())
            if book.used(q, r) > quota.ceiling
        ]
        if over:
            self.limit_decisions += 1
            self._note(over[0])
        owed = self._owed(snapshot, book, waiting)
        self._owed_since = {g: self._owed_since.get(g, now) for g in owed}
        late = [g for g in owed if now - self._owed_since[g] >= self.grace_s]
        if late:
            self.owed_decisions += 1
            self.owed_gangs.update(late)
            self._note(f"t={now:.0f}s {late[0]}: {owed[late[0]]}")

    def _note(self, text: str) -> None:
        if len(self.examples) < 5:
            self.examples.append(text)

    def _owed(self, snapshot: Snapshot, book: QuotaBook, waiting: Sequence[Gang]) -> dict[str, str]:
        """Waiting gangs whose nominal quota other queues hold (module docstring, (b)), with
        what they are owed."""
        released: dict[str, ClusterState] = {}  # GPU type -> ledger without its borrowers
        out: dict[str, str] = {}
        for gang in waiting:
            home = book.home(gang.queue)
            if gang.queue is None or home != gang.queue:
                continue
            need = gang_gpus(gang)
            for gpu_type in gang.type_names():
                resource = resource_key(gpu_type, gang.mig_profile)
                if not book.entitled(home, resource, need):
                    continue
                if not self._borrowed_by_others(book, home, gpu_type):
                    continue
                if gpu_type not in released:
                    released[gpu_type] = self._without_borrowers(snapshot, book, gpu_type)
                if place_gang(released[gpu_type].copy(), gang, gpu_type, best_fit):
                    out[gang.id] = f"gang of {home} owed {need} x {resource}"
                    break
        return out

    def _borrowed_by_others(self, book: QuotaBook, home: str, gpu_type: str) -> bool:
        return any(
            book.borrowing(q, r)
            for q in self.tree.queues
            if q != home and self.tree.usable(q) and self.tree.queues[q].parent is None
            for r in book.sub.get(q, {})
            if r.partition("/")[0] == gpu_type
        )

    @staticmethod
    def _without_borrowers(snapshot: Snapshot, book: QuotaBook, gpu_type: str) -> ClusterState:
        """The ledger with every gang of a queue that borrows its resource on `gpu_type`
        released (the GPUs a reclaim could free)."""
        state = ClusterState(snapshot)
        for gang in snapshot.running:
            if gang.gpu_type != gpu_type or not gang.preemptible:
                continue
            charge = running_charge(gang)
            home = book.home(gang.queue)
            if home in book.tree.queues and book.borrowing(home, charge.resource):
                release_replicas(state, gang)
        return state


@dataclass(frozen=True)
class TenantRow:
    """One tenant's figures in one replay."""

    tenant: str
    jobs: int
    completed: int
    avg_jct_h: float
    rho: float  # mean finish-time fairness of its completed jobs
    busy_share: float  # its share of the busy GPU-seconds
    nominal_share: float  # its GPU-hour share in the quotas' history


@dataclass(frozen=True)
class TenantReport:
    """Per-tenant rows and the replay's headline figures."""

    policy: str
    rows: tuple[TenantRow, ...]
    avg_jct_h: float
    utilisation: float
    work_utilisation: float
    makespan_utilisation: float
    preemptions: int
    worst_rho: float
    worst_tenant: str
    jain: float
    violations: int
    limit_decisions: int
    owed_gangs: int
    owed_decisions: int
    examples: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, object]:
        return {
            "policy": self.policy,
            "avg_jct_h": self.avg_jct_h,
            "utilisation": self.utilisation,
            "work_utilisation": self.work_utilisation,
            "makespan_utilisation": self.makespan_utilisation,
            "preemptions": self.preemptions,
            "worst_rho": self.worst_rho,
            "worst_tenant": self.worst_tenant,
            "jain": self.jain,
            "violations": self.violations,
            "limit_decisions": self.limit_decisions,
            "owed_gangs": self.owed_gangs,
            "owed_decisions": self.owed_decisions,
            "tenants": {
                r.tenant: {"jobs": r.jobs, "avg_jct_h": r.avg_jct_h, "rho": r.rho}
                for r in self.rows
            },
        }


def tenant_report(
    result: SimResult,
    jobs: Sequence[TraceJob],
    speed: SpeedModel,
    fleet_gpus: Mapping[str, int],
    monitor: QuotaMonitor,
    shares: Mapping[str, float],
) -> TenantReport:
    """The per-tenant metrics of one replay (module docstring)."""
    by_id = {j.job_id: j for j in jobs}
    tenants = sorted({j.queue for j in jobs})
    n = len(tenants)
    busy_total = sum(r.busy_gpu_s for r in result.jobs) or 1.0
    rows: list[TenantRow] = []
    for tenant in tenants:
        records = [r for r in result.jobs if r.queue == tenant]
        done = [r for r in records if r.completion_s is not None]
        jct = [r.jct_s for r in done]
        rhos = [r.jct_s / isolated_time_s(by_id[r.job_id], speed, fleet_gpus, n) for r in done]
        rows.append(
            TenantRow(
                tenant=tenant,
                jobs=len(records),
                completed=len(done),
                avg_jct_h=sum(jct) / len(jct) / 3600.0 if jct else math.nan,
                rho=sum(rhos) / len(rhos) if rhos else math.nan,
                busy_share=sum(r.busy_gpu_s for r in records) / busy_total,
                nominal_share=shares.get(tenant, 0.0),
            )
        )
    scored = [r for r in rows if not math.isnan(r.rho)]
    # No tenant finished a job (e.g. every job is beyond its queue's limit): no rho to rank.
    worst = max(scored, key=lambda r: (r.rho, r.tenant)) if scored else None
    summary = summarise(result)
    return TenantReport(
        policy=result.policy,
        rows=tuple(rows),
        avg_jct_h=float(summary["avg_jct_h"]),
        utilisation=float(summary["arrival_utilisation"]),
        work_utilisation=float(summary["arrival_work_utilisation"]),
        makespan_utilisation=float(summary["utilisation"]),
        preemptions=int(summary["preemptions"]),
        worst_rho=worst.rho if worst else math.nan,
        worst_tenant=worst.tenant if worst else "",
        jain=jain_index([1.0 / r.rho for r in scored]) if scored else math.nan,
        violations=monitor.violations,
        limit_decisions=monitor.limit_decisions,
        owed_gangs=len(monitor.owed_gangs),
        owed_decisions=monitor.owed_decisions,
        examples=tuple(monitor.examples),
    )
