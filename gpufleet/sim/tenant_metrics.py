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
* **Usable idle GPU-seconds** (`usable_idle.UsableIdleMonitor`): the idle GPUs the waiting
  gangs could legally take at once (quota allowing, node by node, each GPU once), left by a
  decision (by cause) or awaiting the next cycle; that module defines them, and splits the
  idle GPUs no waiting gang fits even ignoring quotas by why (`usable_idle.NONE_FITS`).
* **Idle GPU-seconds with demand** (`IdleMonitor`, from the engine's `on_event` hook after every
  event), over the same span, as fractions of C x span. A GPU is *idle* when nothing is
  allocated on it (no replica, no MIG instance; a GPU held by a gang that is restarting is
  allocated, not idle) and its node is on. A *waiting gang* is one waiting whole (not part-
  held), of any queue, quotas ignored. Idle GPUs of a type T count *with demand* while some
  waiting whole-GPU gang accepting T needs at most T's idle GPUs (replicas_min x GPUs per
  replica; all of T's idle GPUs then count), and *placeable* while some such gang also fits
  on them node by node (each replica on one node, a same-node gang all on one; NVLink domains,
  node restrictions and MIG gangs are not checked), and *placeable if packed* while some such
  gang would fit them gathered on whole nodes of the type (its largest node's GPUs each, the
  rest on one more node): placeable if packed but not placeable is idle capacity split over
  partly used nodes (fragmentation, which a packing rule or a move could give back); with demand
  but not placeable if packed is mostly capacity whose waiting gangs' shape no node of the type
  holds (an 8-GPU one-node gang on 4-GPU nodes: no rule can use it for them). Also reported:
  all idle GPU-seconds, and those while any gang waits (whether or not it fits). Between them
  they split the fleet's time: 1 = busy + held while starting + idle with demand + idle while
  only gangs that do not fit wait + idle while nothing waits (without MIG). Idle with demand is
  capacity a policy left unused while work it could have started waited (a cycle's latency, a
  hold, a quota, a reservation, a type preference); the rest is idle because no waiting gang
  could use it.
  *Left by a decision*: the idle GPUs with demand (or placeable) right after a decision, counted
  until the next one. Between two decisions no GPU is taken and no waiting gang leaves, so those
  GPUs stay idle with demand; what is added meanwhile (GPUs freed, gangs arrived) awaits the
  next cycle (at most `cycle_s`, 10 s, after the change): the cycle's latency, not a choice.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpufleet.core.demand import Gang, Topology
from gpufleet.core.queues import QueueTree, resource_key
from gpufleet.core.quota import QuotaBook, running_charge
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.sim.baselines import best_fit, gang_gpus, place_gang, release_replicas
from gpufleet.sim.results import SimResult, summarise
from gpufleet.sim.speed import SpeedModel
from gpufleet.sim.traces.common import TraceJob
from gpufleet.sim.usable_idle import UsableIdleMonitor, usable_gpu_seconds

__all__ = [
    "IdleMonitor",
    "IdleSeconds",
    "IdleStep",
    "QuotaMonitor",
    "TenantReport",
    "TenantRow",
    "gang_fits_idle",
    "idle_gpu_seconds",
    "isolated_time_s",
    "jain_index",
    "packed",
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


def gang_fits_idle(gang: Gang, idle: Sequence[int], *, node_by_node: bool) -> bool:
    """Whether `gang` (its minimum) could start on idle GPUs whose per-node counts are `idle`
    (of one type it accepts): by their count, or with `node_by_node` replica by replica on the
    nodes (a same-node gang all on one). MIG gangs never fit: whole GPUs only (module
    docstring)."""
    if gang.uses_mig:
        return False
    per_replica = gang.gpus_per_replica
    need = gang.gpus_needed(gang.replicas_min)
    if not node_by_node:
        return sum(idle) >= need
    if gang.topology is Topology.SAME_NODE:
        return any(n >= need for n in idle)
    return sum(n // per_replica for n in idle) >= gang.replicas_min


def packed(idle: int, node_gpus: int) -> list[int]:
    """`idle` GPUs gathered on as few nodes of `node_gpus` GPUs as hold them, per node."""
    if node_gpus < 1:
        raise ValueError("a node holds at least one GPU")
    whole, rest = divmod(idle, node_gpus)
    return [node_gpus] * whole + ([rest] if rest else [])


@dataclass(frozen=True)
class IdleStep:
    """The fleet from `t` until the next step: idle GPUs per GPU type, whether some gang
    waited, the idle GPUs per type with demand (by count) and placeable (node by node), of
    those the ones the last decision left so, and those placeable if packed (module
    docstring)."""

    t: float
    idle: Mapping[str, int]
    waiting: bool
    with_demand: Mapping[str, int]
    placeable: Mapping[str, int]
    left_with_demand: Mapping[str, int] = field(default_factory=dict)
    left_placeable: Mapping[str, int] = field(default_factory=dict)
    packable: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class IdleSeconds:
    """Idle GPU-seconds over a span, split as the module docstring says; `left_*`: the part
    left by a decision (the rest awaited the next cycle)."""

    idle: float
    while_waiting: float
    with_demand: float
    placeable: float
    left_with_demand: float
    left_placeable: float
    with_demand_by_type: Mapping[str, float]
    packable: float = 0.0


def idle_gpu_seconds(steps: Sequence[IdleStep], start: float, end: float) -> IdleSeconds:
    """Integrate the steps (in time order; each holds until the next, the last until `end`)
    over [start, end]; before the first step nothing counts."""
    idle = waiting = demand = placeable = left_demand = left_placeable = packable = 0.0
    by_type: dict[str, float] = {}
    for i, step in enumerate(steps):
        until = steps[i + 1].t if i + 1 < len(steps) else end
        dt = min(until, end) - max(step.t, start)
        if dt <= 0:
            continue
        total = sum(step.idle.values())
        idle += total * dt
        waiting += total * dt if step.waiting else 0.0
        demand += sum(step.with_demand.values()) * dt
        placeable += sum(step.placeable.values()) * dt
        left_demand += sum(step.left_with_demand.values()) * dt
        left_placeable += sum(step.left_placeable.values()) * dt
        packable += sum(step.packable.values()) * dt
        for gpu_type, n in step.with_demand.items():
            by_type[gpu_type] = by_type.get(gpu_type, 0.0) + n * dt
    return IdleSeconds(
        idle, waiting, demand, placeable, left_demand, left_placeable, by_type, packable
    )


class IdleMonitor:
    """Records the idle GPUs and the demand for them after every event (an `EventObserver`
    of the engine; module docstring); `steps` keeps one step per change. `node_gpus`: the
    GPUs of each type's largest node, for the idle GPUs placeable if packed (a type it does not
    name counts none)."""

    def __init__(self, node_gpus: Mapping[str, int] | None = None) -> None:
        self.node_gpus = dict(node_gpus or {})
        self.steps: list[IdleStep] = []
        # Right after the last decision: idle GPUs per type with demand, and placeable.
        self._left: tuple[dict[str, int], dict[str, int]] = ({}, {})

    def __call__(
        self,
        now: float,
        idle: Mapping[str, Sequence[int]],
        waiting: Sequence[Gang],
        decided: bool,
    ) -> None:
        # One gang per shape decides as well as all of them (the check reads nothing else).
        shapes: dict[tuple[object, ...], Gang] = {}
        for gang in waiting:
            key = (gang.type_names(), gang.replicas_min, gang.gpus_per_replica)
            shapes.setdefault((*key, gang.topology, gang.mig_profile), gang)
        counts = {t: sum(nodes) for t, nodes in idle.items()}
        with_demand: dict[str, int] = {}
        placeable: dict[str, int] = {}
        packable: dict[str, int] = {}
        for gpu_type, nodes in idle.items():
            if not counts[gpu_type]:
                continue
            takers = [g for g in shapes.values() if gpu_type in g.type_names()]
            if any(gang_fits_idle(g, nodes, node_by_node=False) for g in takers):
                with_demand[gpu_type] = counts[gpu_type]
            if any(gang_fits_idle(g, nodes, node_by_node=True) for g in takers):
                placeable[gpu_type] = counts[gpu_type]
            size = self.node_gpus.get(gpu_type, 0)
            gathered = packed(counts[gpu_type], size) if size else []
            if any(gang_fits_idle(g, gathered, node_by_node=True) for g in takers):
                packable[gpu_type] = counts[gpu_type]
        if decided:
            self._left = (with_demand, placeable)
        # Until the next decision they stay idle with demand (module docstring); `min` only
        # guards that.
        left_demand = {t: min(n, with_demand.get(t, 0)) for t, n in self._left[0].items()}
        left_placeable = {t: min(n, placeable.get(t, 0)) for t, n in self._left[1].items()}
        step = IdleStep(
            now,
            counts,
            bool(waiting),
            with_demand,
            placeable,
            {t: n for t, n in left_demand.items() if n},
            {t: n for t, n in left_placeable.items() if n},
            packable,
        )
        if self.steps and self.steps[-1].t == now:
            self.steps[-1] = step  # several events at one instant: the last state holds
        elif not self.steps or self.steps[-1] != replace(step, t=self.steps[-1].t):
            self.steps.append(step)  # else no change: the last step goes on


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
    # Idle GPU-seconds over the arrival span / (C x span) (module docstring); NaN unmeasured.
    idle: float = math.nan
    idle_while_waiting: float = math.nan
    idle_with_demand: float = math.nan
    idle_placeable: float = math.nan
    idle_with_demand_left: float = math.nan
    idle_placeable_left: float = math.nan
    idle_packable: float = math.nan
    idle_with_demand_by_type: Mapping[str, float] = field(default_factory=dict)
    # Idle GPUs waiting gangs could legally take (usable_idle.py): all, left by a decision, and
    # those by cause; NaN unmeasured.
    usable_idle: float = math.nan
    usable_idle_left: float = math.nan
    usable_idle_left_by_cause: Mapping[str, float] = field(default_factory=dict)
    usable_idle_quota_blind: float = math.nan
    # Idle while gangs wait but none fits them, quotas ignored, by cause (usable_idle.py).
    idle_none_fits_by_cause: Mapping[str, float] = field(default_factory=dict)

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
            "idle": self.idle,
            "idle_while_waiting": self.idle_while_waiting,
            "idle_with_demand": self.idle_with_demand,
            "idle_placeable": self.idle_placeable,
            "idle_with_demand_left": self.idle_with_demand_left,
            "idle_placeable_left": self.idle_placeable_left,
            "idle_packable": self.idle_packable,
            "idle_with_demand_by_type": dict(self.idle_with_demand_by_type),
            "usable_idle": self.usable_idle,
            "usable_idle_left": self.usable_idle_left,
            "usable_idle_left_by_cause": dict(self.usable_idle_left_by_cause),
            "usable_idle_quota_blind": self.usable_idle_quota_blind,
            "idle_none_fits_by_cause": dict(self.idle_none_fits_by_cause),
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
    idle: IdleMonitor | None = None,
    usable: UsableIdleMonitor | None = None,
) -> TenantReport:
    """The per-tenant metrics of one replay (module docstring); the idle GPU figures when
    `idle` watched the replay, and the usable ones when `usable` did."""
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
    report = TenantReport(
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
    capacity = result.fleet_gpus * (result.last_arrival_s - result.start_s)
    if capacity <= 0:
        return report
    if usable is not None:
        got = usable_gpu_seconds(usable.steps, result.start_s, result.last_arrival_s)
        report = replace(
            report,
            usable_idle=got.usable / capacity,
            usable_idle_left=got.left / capacity,
            usable_idle_left_by_cause={c: v / capacity for c, v in got.left_by_cause.items()},
            usable_idle_quota_blind=got.blind / capacity,
            idle_none_fits_by_cause={c: v / capacity for c, v in got.none_fits.items()},
        )
    if idle is None:
        return report
    seconds = idle_gpu_seconds(idle.steps, result.start_s, result.last_arrival_s)
    return replace(
        report,
        idle=seconds.idle / capacity,
        idle_while_waiting=seconds.while_waiting / capacity,
        idle_with_demand=seconds.with_demand / capacity,
        idle_placeable=seconds.placeable / capacity,
        idle_with_demand_left=seconds.left_with_demand / capacity,
        idle_placeable_left=seconds.left_placeable / capacity,
        idle_packable=seconds.packable / capacity,
        idle_with_demand_by_type={
            t: v / capacity for t, v in sorted(seconds.with_demand_by_type.items())
        },
    )
