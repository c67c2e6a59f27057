"""Discrete-event simulation of a GPU fleet driven by a placement policy.

The engine owns a simulated clock, the in-memory cluster (`SimCluster`, whose free capacity is
the core's ledger) and the jobs; every decision is taken by a policy with the core's shape,
`place(snapshot, pending, policy) -> Decision` (`gpufleet.core.place.place` itself for gpufleet's
policies, `gpufleet.sim.baselines` and `gpufleet.sim.kube_like` for the others), so the engine
treats every policy alike and contains no policy logic.

Event loop. Events are kept in a heap ordered by (time, kind, sequence): completions first (so
freed GPUs are visible), then readiness, timeouts, power-offs, arrivals and finally the scheduling
cycle. A cycle runs at the next multiple of `cycle_s` after anything that can change a decision
(an arrival, freed capacity, a periodic round of a preemptive policy); all arrivals up to then are
decided together. A cycle is skipped when the fleet has no free capacity and no pending gang
outranks a running one, since no policy could then admit anything without preempting, and when
nothing waits, unless the policy may move running gangs and some capacity is free.

Restarts and checkpoints: a gang stopped while running (preempted, or moved by the policy)
resumes from its last checkpoint. With `checkpoint_interval_s` set it checkpoints every that many
seconds of running and loses the progress since; without it (the default) it checkpoints when it
is signalled, within `checkpoint_grace_s`, and loses nothing. Either way it pays
`restart_cost_s` (plus the grace period) before it runs again. The same model prices every
restart for every policy, and gpufleet's policies get it as each running gang's progress (the
core's `RunProgress`): the run time not yet checkpointed, the restart time, the moves in the last
hour and an expected remaining time estimated from the lengths of jobs already completed (plus
those of a history given in the settings), never from the job's own length. With queues, every
gang also carries the service its job has received so far (GPUs x run time over its runs,
`attained_gpu_s`: a pending gang its earlier runs, a running one its current run too), which the
core's service tier ranks gangs of one queue by; a running gang the tier evicted before also
carries how many times it did (`tier_evictions`, from the decisions' `Preemption.service_tier`)
and how long its current run has lasted (`run_s`), for the tier's limit on re-evictions.

Waiting: a gang waits (`Gang.waited_s`) from its arrival, or from its last eviction (a
preempted gang, or a partial one that gave up its GPUs), as the live scheduler counts from its
recreated pods' creation. Its place in line follows the policy's requeue timestamp
(`Policy.requeue_timestamp`), as live: with `eviction` (the default, Kueue's default) it is its
wait, so an evicted gang goes to the back; with `creation` an evicted gang keeps its arrival's
place (`Gang.queued_s`: the time since its arrival), both in the order its queue's gangs go in
and in which of the waiting gangs a decision sees (`max_pending`, oldest first).

Applying a decision: preemptions first, then the moved gangs stop, then MIG repartitions (the
GPU is usable after `mig_repartition_s`), then placements, then the moved gangs restart on their
new placements (a gang placed by a reclaim with moves takes the moved gangs' old GPUs). Evicted
gangs leave at once (no grace period), so a placement that waits for another gang's victim
(`GangPlacement.waits_for`) starts as that victim's preemptor does, once it has gone. A
placement with fewer replicas than the gang's minimum (only the kube-like baseline makes those)
holds its GPUs without running; the rest of the gang stays pending, and after `gang_timeout_s`
the partial gang gives up its GPUs and is re-queued at the back (a stand-in for a rendezvous
timeout, so that partial gangs cannot deadlock the fleet forever). A gang starts when its
restart cost, MIG repartitions and node boots are over.

Power-down: with a policy whose `power_down` rule is on, the core's `plan_power` (the live
scheduler's own) runs after every decision and whenever its plan can change by time alone (a
node reaching its idle time, a boot ending): it switches empty nodes off (0 W), keeping the
rule's warm nodes per GPU type, and wakes switched-off nodes the pending gangs need, or running
gangs would move to (it sees the running gangs' progress as the decision does). A node off
or booting is unschedulable in the snapshot, as the live scheduler cordons it, and listed with
the time it would take to boot (`Snapshot.boot_wait_s`, so the decision can hold a gang for a
faster switched-off node); a woken node draws its GPUs' idle power while it boots and is usable
`boot_s` after it was woken.

Demand: a trace job becomes a core `Gang` whose acceptable types are the fleet's types allowed by
the job, each with the job's relative throughput from the speed model. A fractional job asks for
the MIG profile of its compute size on the fleet's MIG-capable types of one memory class; when no
acceptable type supports MIG it takes a whole GPU instead. A job with `same_node` asks for the
core's same-node topology. A whole-GPU gang is told how much slower it runs spread over more
nodes than it needs (`Gang.spread_speed`: the speed model's spread factor, the one its runs
get), as a TrainingJob's `spreadSlowdownPercent` tells the live scheduler. An elastic job
(`min_replicas` set) becomes a gang of `min_replicas..replicas` replicas with the scaling curve
its owner states (`SimSettings.elastic_prior`: linear, what an owner states without measuring,
or its model class's curve from the speed model's profile, as an owner who profiled it states it in
`spec.elastic.scaling`); while it runs it reports its throughput at its size, and the curve the
policy sees is refined from those reports (`gpufleet.core.scaling.refine`; off with
`refine_curves=False`), while its true speed follows the speed model's measured curve. The core
picks the count at admission. With a policy's `resize` on (gpufleet's policies), a running
elastic job is shown to the decision as the live scheduler shows it: its minimum gang plus one
growth unit per replica beyond it (`gpufleet.core.borrowing.elastic_units`, each worth its step
of the job's curve), and its room to grow as a pending gang `<job>#rest` (`Gang.grows_from`, its
type only, its node(s) when it wishes one node, priority 0); a placement of the rest grows the
job, a preemption of a unit shrinks it (the core's growth and rebalancing by marginal goodput,
core/rebalance.py), and either restarts the job's workers at the new size (progress since the
last checkpoint lost, `restart_cost_s` paid), as a membership change does live. A move of a
grown job takes it whole, growth units included. Without `resize` (the baselines) a running
elastic job is one gang, grown only by a move.

Queues: with `SimSettings.queues` (a core `QueueTree`, e.g. the Philly tenants of
`gpufleet.sim.tenants`), every gang waits in its trace job's queue and every snapshot carries
the tree, so a policy sees the queues exactly as the live scheduler's `place` does. Since a
queue below its nominal quota may reclaim borrowed GPUs, a cycle then runs on every event even
when the fleet is full; the gangs passed to one decision are the oldest of each queue taken in
turn (each queue's head is always seen, as Kueue's heads are), not the oldest overall. An
`on_cycle` observer sees the snapshot and the waiting gangs after each decision (quota
monitors; it cannot change anything).

Observing: an `on_event` observer sees, after every event (each time the integrators are
re-levelled), the idle GPUs (nothing allocated) of each type per node that is on, the gangs
waiting whole (not part-held), and whether a cycle is pending (the state awaits it) or the
state is the last decision's outcome, for metrics of the timeline between decisions
(`tenant_metrics.IdleMonitor`); like `on_cycle` it cannot change anything.
"""

from __future__ import annotations

import bisect
import heapq
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import Protocol

from gpufleet.core.borrowing import elastic_units
from gpufleet.core.decision import Decision, Move
from gpufleet.core.demand import Gang, Topology, TypeOption
from gpufleet.core.moves import expected_remaining, unsaved_s
from gpufleet.core.policy import Policy, RequeueTimestamp
from gpufleet.core.power_down import NodePower, PowerState, boot_waits, plan_power
from gpufleet.core.queues import QueueTree
from gpufleet.core.scaling import linear, refine
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, RunProgress, Snapshot
from gpufleet.core.workload import ArrivalCounts, WorkloadEstimate
from gpufleet.model.gpus import GpuType
from gpufleet.sim.energy import node_power_w
from gpufleet.sim.occupancy import SimCluster, slice_share
from gpufleet.sim.results import Integrator, JobRecord, SimResult
from gpufleet.sim.speed import SpeedModel
from gpufleet.sim.traces.common import TraceJob

__all__ = [
    "CycleObserver",
    "EventObserver",
    "PlaceFn",
    "SimPolicy",
    "SimSettings",
    "Simulation",
    "gang_for_job",
]


class PlaceFn(Protocol):
    """The shape every policy has: the core's `place`."""

    def __call__(self, snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
        """Decide placements for `pending` on `snapshot`."""
        ...


class CycleObserver(Protocol):
    """Called after each decision with the time, the snapshot and the gangs still waiting."""

    def __call__(self, now: float, snapshot: Snapshot, waiting: Sequence[Gang]) -> None:
        """Observe the state after one decision."""
        ...


class EventObserver(Protocol):
    """Called after every event with the time, the idle GPUs per node of each type (nodes that
    are on), the gangs waiting whole, and whether the state is a decision's outcome (no cycle
    pending; False: a change awaits the next cycle)."""

    def __call__(
        self,
        now: float,
        idle: Mapping[str, Sequence[int]],
        waiting: Sequence[Gang],
        decided: bool,
    ) -> None:
        """Observe the state after one event."""
        ...


@dataclass(frozen=True)
class SimPolicy:
    """A named policy: a place function, its core settings and simulator-side switches."""

    name: str
    place: PlaceFn
    policy: Policy = field(default_factory=Policy)  # its power_down rule switches nodes
    round_s: float | None = None  # re-decide every round even without events (preemptive)
    # Grow and shrink running elastic jobs replica by replica, as the live scheduler shows them
    # to the core (module docstring); off: a running elastic job is one gang.
    resize: bool = False


@dataclass(frozen=True)
class SimSettings:
    """Timing assumptions of the simulated cluster (seconds)."""

    cycle_s: float = 10.0
    restart_cost_s: float = 60.0
    checkpoint_interval_s: float | None = None  # None: checkpoint on a signal, lose nothing
    checkpoint_grace_s: float = 0.0  # time a signalled job takes to checkpoint and stop
    mig_repartition_s: float = 30.0
    gang_timeout_s: float = 600.0
    max_pending: int = 256  # gangs passed to one decision, oldest first
    max_cycles: int = 5_000_000
    horizon_s: float | None = None  # stop at this simulated time (unfinished jobs stay so)
    # The workload estimate passed to the policy (core/workload.py) is updated online from every
    # arrival, over a decaying window of `workload_window` tasks, starting from an optional prior
    # from history worth `workload_prior_tasks` tasks. Never from jobs yet to arrive.
    workload_window: float = 2000.0
    workload_prior: WorkloadEstimate | None = None
    workload_prior_tasks: float = 0.0
    # Lengths (work units) of jobs completed before the replay, for the remaining-time estimate.
    completed_prior: tuple[float, ...] = ()
    # The queues (tenants) gangs wait in, named by each trace job's `queue`; None: no queues.
    queues: QueueTree | None = None
    # The scaling curve an elastic job's owner states: "linear" (none measured) or "profile"
    # (its model class's curve from the speed model, `SpeedModel.scaling`); and whether the
    # policy's view of it is refined from the throughput the job reports while it runs.
    elastic_prior: str = "linear"
    refine_curves: bool = True

    def __post_init__(self) -> None:
        if self.elastic_prior not in ("linear", "profile"):
            raise ValueError("elastic_prior is 'linear' or 'profile'")


class _Kind(IntEnum):
    COMPLETE = 0
    READY = 1
    TIMEOUT = 2
    POWER = 3
    ARRIVAL = 5
    TICK = 6
    CYCLE = 7


class _State(IntEnum):
    FUTURE = 0
    WAITING = 1
    HELD = 2  # part of the gang holds GPUs, not running
    STARTING = 3  # whole gang placed, waiting for restart/repartition
    RUNNING = 4
    DONE = 5


@dataclass(slots=True)
class _Job:
    trace: TraceJob
    gang: Gang
    record: JobRecord
    seq: int
    remaining: float
    queue_key: float
    state: _State = _State.FUTURE
    replicas: tuple[ReplicaPlacement, ...] = ()
    gpu_type: str = ""
    cap_w: float | None = None
    speed: float = 0.0
    share: float = 0.0
    useful: float = 0.0  # share x speed / the job's speed on its fastest type (utilisation)
    last_t: float = 0.0
    version: int = 0
    has_run: bool = False
    run_start: float = 0.0  # when the current run began (for interval checkpoints)
    observed: dict[int, float] = field(default_factory=dict)  # replicas -> reported throughput
    moves: list[float] = field(default_factory=list)  # times the policy moved the gang
    tier_evictions: int = 0  # times the service tier evicted it (Preemption.service_tier)


def _mig_profile_for(gpu: GpuType, g: int) -> str | None:
    """Smallest-memory profile of `g` SM slices on `gpu` (never a `+me` variant)."""
    options = [p for p in gpu.mig_profiles if p.sm_slices == g and "+me" not in p.name]
    return min(options, key=lambda p: p.memory_slices).name if options else None


def gang_for_job(job: TraceJob, fleet_types: Sequence[GpuType], speed: SpeedModel) -> Gang:
    """The core demand of a trace job on a fleet with `fleet_types` (see module docstring)."""
    allowed = [t for t in fleet_types if job.gpu_types is None or t.name in job.gpu_types]
    if not allowed:
        allowed = list(fleet_types)  # unsatisfiable constraint: the job stays pending anyway
    if job.mig_g is not None:
        mig_types = [t for t in allowed if _mig_profile_for(t, job.mig_g) is not None]
        if mig_types:
            profile = _mig_profile_for(mig_types[0], job.mig_g)
            same = [t for t in mig_types if _mig_profile_for(t, job.mig_g) == profile]
            return Gang(
                id=job.job_id,
                acceptable=tuple(TypeOption(t.name, speed.type_speed(job, t.name)) for t in same),
                replicas_min=job.min_replicas or job.replicas,
                replicas_max=job.replicas,
                mig_profile=profile,
                priority=job.priority,
            )
    return Gang(
        id=job.job_id,
        acceptable=tuple(TypeOption(t.name, speed.type_speed(job, t.name)) for t in allowed),
        replicas_min=job.min_replicas or job.replicas,
        replicas_max=job.replicas,
        gpus_per_replica=max(1, job.gpus_per_replica),
        priority=job.priority,
        topology=Topology.SAME_NODE if job.same_node and job.replicas > 1 else Topology.ANY,
        spread_speed=speed.spread_factor(job),
    )


class Simulation:
    """One run of one policy over one list of trace jobs."""

    def __init__(
        self,
        cluster: SimCluster,
        jobs: Sequence[TraceJob],
        policy: SimPolicy,
        speed: SpeedModel,
        settings: SimSettings | None = None,
        on_progress: Callable[[int, int], None] | None = None,
        on_cycle: CycleObserver | None = None,
        on_event: EventObserver | None = None,
    ) -> None:
        self.cluster = cluster
        self.policy = policy
        self.speed = speed
        self.settings = settings or SimSettings()
        self.on_progress = on_progress
        self.on_cycle = on_cycle
        self.on_event = on_event
        self._queues = self.settings.queues
        fleet_types = [
            cluster.catalog[n] for n in sorted({p.gpu_type for p in cluster.pool_of.values()})
        ]
        self._type_of_node = {n: node.gpu_type for n, node in cluster.nodes.items()}
        ordered = sorted(jobs, key=lambda j: (j.arrival_s, j.job_id))
        self.jobs: dict[str, _Job] = {}
        for i, tj in enumerate(ordered):
            if tj.job_id in self.jobs:
                raise ValueError(f"duplicate job id {tj.job_id}")
            gang = gang_for_job(tj, fleet_types, speed)
            if gang.elastic and self.settings.elastic_prior == "profile":
                gang = replace(gang, scaling=speed.scaling(tj))
            self.jobs[tj.job_id] = _Job(
                trace=tj,
                gang=gang if self._queues is None else replace(gang, queue=tj.queue),
                record=JobRecord(tj.job_id, tj.arrival_s, tj.gpu_share, tj.queue),
                seq=i,
                remaining=tj.work_s,
                queue_key=tj.arrival_s,
            )
        self.now = ordered[0].arrival_s if ordered else 0.0
        self._last_arrival = ordered[-1].arrival_s if ordered else 0.0
        self._arrival_busy = 0.0
        self._arrival_useful = 0.0
        self._heap: list[tuple[float, int, int, str, int]] = []
        self._seq = 0
        self._cycle_at: float | None = None
        self._tick_at: float | None = None
        self._forced = False
        self._blocked = False  # the last cycle left at least one gang pending
        self._waiting: dict[str, _Job] = {}
        # An evicted gang keeps its arrival's place in line (module docstring, Waiting).
        self._by_creation = policy.policy.requeue_timestamp is RequeueTimestamp.CREATION
        self._elastic = [j for j in self.jobs.values() if j.gang.elastic]
        self._rests: dict[str, _Job] = {}  # pending `<job>#rest` gangs of the last decision
        self._units: dict[str, tuple[_Job, int]] = {}  # growth units: job, replica index
        self._active = 0  # jobs holding GPUs (held, starting or running)
        self._done = 0
        self._gpu_ready: dict[tuple[str, int], float] = {}
        # Power state per node (the core's view, with since-when times on the sim clock).
        self._power: dict[str, NodePower] = {
            n: NodePower(PowerState.ON, self.now, self.now) for n in cluster.nodes
        }
        self._power_at: float | None = None
        self._unschedulable: frozenset[str] = frozenset()
        self._node_power: dict[str, float] = {}
        self._power_total = 0.0
        self._busy_share = 0.0
        self._useful_share = 0.0
        t0 = self.now
        self._energy = Integrator(t0)
        self._busy = Integrator(t0)
        self._useful = Integrator(t0)
        self._alloc = Integrator(t0)
        self._wait = Integrator(t0)
        self._unalloc_wait = Integrator(t0)
        self._samples: list[float] = []
        self._timeline: list[tuple[float, float, float, float]] = []
        self._place_calls = 0
        self._place_s = 0.0
        self._cycles = 0
        # Lengths of completed jobs so far (sorted), for the remaining-time estimate.
        self._completed: list[float] = sorted(self.settings.completed_prior)
        self._progress = policy.policy.moves.enabled
        # The workload seen so far, on top of the settings' prior.
        self.workload = ArrivalCounts.seeded(
            self.settings.workload_prior or WorkloadEstimate(()),
            self.settings.workload_prior_tasks,
            self.settings.workload_window,
        )
        for tj in ordered:
            self._push(tj.arrival_s, _Kind.ARRIVAL, tj.job_id)
        for n in cluster.nodes:
            self._refresh_node_power(n)
        if self.policy.policy.power_down.enabled:
            self._schedule_power(t0 + self.policy.policy.power_down.idle_s)
        self._account()

    # ----- small helpers -----------------------------------------------------------------------

    def _push(self, t: float, kind: _Kind, key: str, version: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, int(kind), self._seq, key, version))

    def _schedule_cycle(self) -> None:
        step = self.settings.cycle_s
        at = math.ceil(self.now / step - 1e-9) * step if step > 0 else self.now
        # The tolerance may round a time a hair past a cycle boundary down to it: never earlier
        # than now (the integrators refuse to go back in time).
        at = max(at, self.now)
        if self._cycle_at is None or at < self._cycle_at:
            self._cycle_at = at
            self._push(at, _Kind.CYCLE, "")

    def _state_of(self, gang_id: str) -> tuple[bool, float | None]:
        job = self.jobs[gang_id]
        return job.state is _State.RUNNING, job.cap_w

    def _schedule_power(self, at: float) -> None:
        """A power check at `at` (the earliest one pending is kept)."""
        if self._power_at is None or at < self._power_at:
            self._power_at = at
            self._push(at, _Kind.POWER, "")

    def _snapshot(self) -> Snapshot:
        """The cluster's snapshot with switched-off and booting nodes unschedulable, and the
        time each would take to be usable (the decision weighs waiting for them); with queues,
        the queue tree."""
        snapshot = self.cluster.snapshot()
        if self._queues is not None:
            snapshot = replace(snapshot, queues=self._queues)
        if not self._unschedulable:
            return snapshot
        nodes = tuple(
            replace(n, schedulable=False) if n.name in self._unschedulable else n
            for n in snapshot.nodes
        )
        waits = boot_waits(self._power, self.now, self.policy.policy.power_down)
        return replace(snapshot, nodes=nodes, boot_wait_s=waits)

    def _refresh_node_power(self, node: str) -> None:
        powered = self._power[node].state is not PowerState.OFF
        watts = node_power_w(self.cluster, node, self._state_of, powered)
        self._power_total += watts - self._node_power.get(node, 0.0)
        self._node_power[node] = watts

    def _account(self) -> None:
        """Re-level every integrator at the current time (call after each state change)."""
        t = self.now
        self._energy.set(t, self._power_total)
        self._busy.set(t, self._busy_share)
        self._useful.set(t, self._useful_share)
        self._alloc.set(t, self.cluster.allocated_share)
        # "A job is waiting" = the last decision left a gang pending (not: it arrived since).
        waiting = 1.0 if self._blocked and self._waiting else 0.0
        self._wait.set(t, waiting)
        self._unalloc_wait.set(t, waiting * self.cluster.free_share())
        if self.on_event is not None:
            self._observe(self.on_event)

    def _observe(self, observer: EventObserver) -> None:
        """Show an `on_event` observer the idle GPUs and the gangs waiting whole."""
        idle: dict[str, list[int]] = {}
        for node, count in self.cluster.idle_gpus().items():
            if node not in self._unschedulable:
                idle.setdefault(self._type_of_node[node], []).append(count)
        waiting = [j.gang for j in self._waiting.values() if not j.replicas]
        observer(self.now, idle, waiting, self._cycle_at is None)

    def _advance(self, job: _Job) -> None:
        """Bring a running job's remaining work and GPU-seconds up to now."""
        if job.state is _State.RUNNING:
            dt = self.now - job.last_t
            job.remaining = max(0.0, job.remaining - job.speed * dt)
            job.record.busy_gpu_s += job.share * dt
        job.last_t = self.now

    def _replica_share(self, rep: ReplicaPlacement) -> float:
        if rep.mig is not None:
            return slice_share(self.cluster.gpu_type_of(rep.node), rep.mig)
        return float(len(rep.gpus))

    # ----- state transitions -------------------------------------------------------------------

    def _release(self, job: _Job) -> None:
        self._advance(job)
        if job.state is _State.RUNNING:
            self._busy_share -= job.share
            self._useful_share -= job.useful
        touched = self.cluster.release(job.trace.job_id)
        job.replicas = ()
        job.version += 1
        self._active -= 1
        rule = self.policy.policy.power_down
        for node in touched:
            self._refresh_node_power(node)
            if self.cluster.is_empty(node):
                self._power[node] = replace(self._power[node], empty_since=self.now)
                if rule.enabled:
                    self._schedule_power(self.now + rule.idle_s)

    def _to_waiting(self, job: _Job) -> None:
        job.state = _State.WAITING
        self._waiting[job.trace.job_id] = job

    def _start_running(self, job: _Job) -> None:
        job.state = _State.RUNNING
        job.has_run = True
        job.last_t = self.now
        job.run_start = self.now
        if job.record.first_start_s is None:
            job.record.first_start_s = self.now
        job.speed = self.speed.placement_speed(
            job.trace, job.replicas, self._type_of_node, job.cap_w
        )
        if job.gang.elastic and job.gpu_type:
            # What the job reports, in its own unit: throughput over its full gang's on the type.
            full = self.speed.type_speed(job.trace, job.gpu_type)
            job.observed[len(job.replicas)] = job.speed / full
        job.share = sum(self._replica_share(r) for r in job.replicas)
        self._busy_share += job.share
        fastest = max((o.relative_throughput or 0.0 for o in job.gang.acceptable), default=0.0)
        job.useful = job.share * min(1.0, job.speed / fastest) if fastest > 0 else job.share
        self._useful_share += job.useful
        if job.speed <= 0:
            raise RuntimeError(f"job {job.trace.job_id} placed with zero speed")
        self._push(
            self.now + job.remaining / job.speed, _Kind.COMPLETE, job.trace.job_id, job.version
        )
        for node in {r.node for r in job.replicas}:
            self._refresh_node_power(node)

    # ----- event handlers ----------------------------------------------------------------------

    def _on_arrival(self, job: _Job) -> None:
        self.workload = self.workload.observed_gangs([job.gang])
        self._to_waiting(job)
        self._schedule_cycle()

    def _on_complete(self, job: _Job, version: int) -> None:
        if version != job.version or job.state is not _State.RUNNING:
            return
        self._advance(job)
        bisect.insort(self._completed, job.trace.work_s)
        self._release(job)
        job.state = _State.DONE
        job.remaining = 0.0
        job.record.completion_s = self.now
        self._done += 1
        self._timeline.append(
            (self.now, self._busy_share, self.cluster.allocated_share, self._power_total)
        )
        if self.on_progress is not None:
            self.on_progress(self._done, len(self.jobs))
        self._schedule_cycle()

    def _on_ready(self, job: _Job, version: int) -> None:
        if version == job.version and job.state is _State.STARTING:
            self._start_running(job)
            if (
                self.policy.resize
                and len(job.replicas) < job.gang.replicas_max
                and self.cluster.free_share() > 1e-9
            ):
                self._schedule_cycle()  # a running elastic job may grow (only once running)

    def _on_timeout(self, job: _Job, version: int) -> None:
        if version != job.version or job.state is not _State.HELD:
            return
        self._release(job)
        job.queue_key = self.now  # re-queued at the back
        self._to_waiting(job)
        self._schedule_cycle()

    def _on_power(self) -> None:
        self._power_at = None
        self._plan_power()

    def _plan_power(self) -> None:
        """Apply the core's power plan for the cluster as it is now (see the module doc)."""
        policy = self.policy.policy
        if not policy.power_down.enabled and not self._unschedulable:
            return
        # The decision's own view: the power plan's what-if moves running gangs as it would.
        snapshot = self._decision_snapshot() if policy.power_down.enabled else self._snapshot()
        plan = plan_power(snapshot, self._pending_gangs(), self._power, self.now, policy)
        for node in plan.booted:
            empty = self.now if self.cluster.is_empty(node) else None
            self._power[node] = NodePower(PowerState.ON, self.now, empty)
        for node in plan.wake:
            self._power[node] = NodePower(PowerState.WAKING, self.now, None)
            self._refresh_node_power(node)
        for node in plan.power_off:
            self._power[node] = NodePower(PowerState.OFF, self.now, None)
            self._refresh_node_power(node)
        if plan.changes:
            self._unschedulable = frozenset(
                n for n, p in self._power.items() if p.state is not PowerState.ON
            )
        if plan.booted:
            self._forced = True  # capacity appeared: decide again
            self._schedule_cycle()
        if plan.next_change_s is not None:
            self._schedule_power(max(plan.next_change_s, self.now))

    def _on_tick(self) -> None:
        self._tick_at = None
        if self._waiting:
            self._forced = True
            self._schedule_cycle()

    # ----- the scheduling cycle ----------------------------------------------------------------

    def _in_line_since(self, job: _Job) -> float:
        """Since when `job` has held its place in line (module docstring, Waiting)."""
        return job.trace.arrival_s if self._by_creation else job.queue_key

    def _oldest_waiting(self) -> list[_Job]:
        """The waiting jobs one decision sees: the oldest `max_pending`, or with queues the
        oldest of each queue in turn (see the module docstring), oldest first."""
        limit = self.settings.max_pending

        def age(j: _Job) -> tuple[float, int]:
            return (self._in_line_since(j), j.seq)

        if self._queues is None or len(self._waiting) <= limit:
            return heapq.nsmallest(limit, self._waiting.values(), key=age)
        lines: dict[str, list[_Job]] = {}
        for job in self._waiting.values():
            lines.setdefault(job.trace.queue, []).append(job)
        heads = [heapq.nsmallest(limit, line, key=age) for _, line in sorted(lines.items())]
        chosen: list[_Job] = []
        depth = 0
        while len(chosen) < limit:
            layer = [line[depth] for line in heads if depth < len(line)]
            if not layer:
                break
            chosen.extend(layer[: limit - len(chosen)])
            depth += 1
        return sorted(chosen, key=age)

    def _pending_gangs(self) -> list[Gang]:
        out: list[Gang] = []
        for job in self._oldest_waiting():
            gang = job.gang
            if job.replicas:  # a partial gang asks for the rest of its replicas
                rest = gang.replicas_min - len(job.replicas)
                gang = replace(gang, replicas_min=rest, replicas_max=rest)
            waited = max(0.0, self.now - job.queue_key)
            in_line = max(waited, self.now - self._in_line_since(job))
            if not job.replicas:
                gang = self._refined(job)
            served = self._attained_gpu_s(job)
            if self._queues is not None and served > 0:
                # The service of its earlier runs, for the core's service tier.
                gang = replace(gang, attained_gpu_s=served)
            if in_line > waited:  # an evicted gang with the requeue timestamp `creation`
                gang = replace(gang, queued_s=in_line)
            out.append(replace(gang, waited_s=waited) if waited > 0 else gang)
        return out

    def _with_attained(self, running: Sequence[RunningGang]) -> tuple[RunningGang, ...]:
        """Running jobs with the service they have received (GPU-seconds over their runs, the
        current one included), for the core's service tier, and, once the tier has evicted
        them, their eviction history (its limit on re-evictions); growth units keep none."""
        out: list[RunningGang] = []
        for gang in running:
            job = self.jobs.get(gang.id)
            served = 0.0 if job is None else self._attained_gpu_s(job)
            if served > 0:
                gang = replace(gang, attained_gpu_s=served)
            if job is not None and job.tier_evictions:
                ran = self.now - job.run_start if job.state is _State.RUNNING else 0.0
                gang = replace(gang, tier_evictions=job.tier_evictions, run_s=ran)
            out.append(gang)
        return tuple(out)

    def _attained_gpu_s(self, job: _Job) -> float:
        """The job's GPU-seconds of service up to now (what `_advance` would count, without
        advancing it: the other policies' replays stay exactly as they were)."""
        served = job.record.busy_gpu_s
        if job.state is _State.RUNNING:
            served += job.share * (self.now - job.last_t)
        return served

    def _refined(self, job: _Job) -> Gang:
        """The job's gang with its scaling curve refined from the throughput it reported."""
        gang = job.gang
        if not gang.elastic or not job.observed or not self.settings.refine_curves:
            return gang
        prior = gang.scaling or linear(gang.replicas_max)
        return replace(gang, scaling=refine(prior, job.observed))

    def _unsaved_s(self, job: _Job) -> float:
        """Run time since the job's last checkpoint (lost on a restart)."""
        if job.state is not _State.RUNNING:
            return 0.0
        return unsaved_s(self.now - job.run_start, self.settings.checkpoint_interval_s)

    def _restart_s(self) -> float:
        grace = (
            self.settings.checkpoint_grace_s if self.settings.checkpoint_interval_s is None else 0
        )
        return self.settings.restart_cost_s + grace

    def _with_progress(self, running: Sequence[RunningGang]) -> tuple[RunningGang, ...]:
        """Running gangs with their demand and progress, as the core's move rule reads them."""
        out: list[RunningGang] = []
        for gang in running:
            # A gang on several types is shown as parts `<id>#<type>` (only a pod-by-pod policy
            # places one so); the move rule restarts whole gangs, so the parts get no progress.
            job = self.jobs.get(gang.id)
            if job is None or job.state not in (_State.RUNNING, _State.STARTING) or job.speed <= 0:
                out.append(gang)
                continue
            self._advance(job)
            done = max(0.0, job.trace.work_s - job.remaining)
            left = expected_remaining(self._completed, done) / job.speed
            recent = sum(1 for t in job.moves if t > self.now - 3600.0)
            progress = RunProgress(left, self._unsaved_s(job), self._restart_s(), recent)
            demand = replace(self._refined(job), waited_s=0.0)
            out.append(replace(gang, demand=demand, progress=progress))
        return tuple(out)

    def _can_change(self, forced: bool) -> bool:
        free = self.cluster.free_share() > 1e-9
        if not self._waiting:
            # Nothing waits: only a move or a job's growth into capacity that just freed up
            # could change anything.
            return free and ((self._progress and self._active > 0) or self._growable())
        if forced or free or self._queues is not None:
            return True  # with queues, a full fleet may still be reclaimed from
        if self.policy.resize and any(len(j.replicas) > j.gang.replicas_min for j in self._elastic):
            return True  # a waiting gang may take an elastic job's growth (core/rebalance.py)
        lowest_running = min(
            (j.gang.priority for j in self.jobs.values() if j.replicas), default=math.inf
        )
        return any(j.gang.priority > lowest_running for j in self._waiting.values())

    def _growable(self) -> bool:
        return self.policy.resize and any(
            j.state is _State.RUNNING and len(j.replicas) < j.gang.replicas_max
            for j in self._elastic
        )

    def _growth_gangs(self) -> list[Gang]:
        """With `resize`: each running elastic job's room to grow, as the live scheduler
        offers it (`<job>#rest`, module docstring)."""
        self._rests = {}
        if not self.policy.resize:
            return []
        out: list[Gang] = []
        for job in self._elastic:
            room = job.gang.replicas_max - len(job.replicas)
            if job.state is not _State.RUNNING or room <= 0:
                continue
            demand = self._refined(job)
            option = next(o for o in demand.acceptable if o.gpu_type == job.gpu_type)
            same = demand.topology is Topology.SAME_NODE
            rest = replace(
                demand,
                id=f"{job.trace.job_id}#rest",
                acceptable=(option,),
                replicas_min=1,
                replicas_max=room,
                priority=0,
                grows_from=len(job.replicas),
                allowed_nodes=frozenset(r.node for r in job.replicas) if same else None,
                waited_s=0.0,
                # Growth of a job that has run: the job's service (for the service tier).
                attained_gpu_s=self._attained_gpu_s(job) if self._queues is not None else 0.0,
            )
            self._rests[rest.id] = job
            out.append(rest)
        return out

    def _as_units(self, running: Sequence[RunningGang]) -> tuple[RunningGang, ...]:
        """With `resize`: running elastic jobs as the live scheduler shows them (module
        docstring): a grown job as its minimum (with the job's demand and progress: a move
        takes the whole job, growth units included) plus growth units carrying its curve."""
        self._units = {}
        if not self.policy.resize:
            return tuple(running)
        out: list[RunningGang] = []
        for gang in running:
            job = self.jobs.get(gang.id)
            if job is None or not job.gang.elastic:
                out.append(gang)
                continue
            low = job.gang.replicas_min
            if len(gang.replicas) <= low:
                out.append(gang)
                continue
            units = elastic_units(
                gang.id,
                gang.gpu_type,
                gang.replicas,
                low,
                priority=gang.priority,
                preemptible=gang.preemptible,
                relative_throughput=gang.relative_throughput,
                progress=gang.progress,
                demand=self._refined(job),
                queue=gang.queue,
            )
            out.append(replace(units[0], demand=gang.demand))
            for i, unit in enumerate(units[1:], start=low):
                self._units[unit.id] = (job, i)
                out.append(unit)
        return tuple(out)

    def _decision_snapshot(self) -> Snapshot:
        """The snapshot as a decision sees it: with the workload estimate, the running gangs'
        progress (the move rule's input) and elastic jobs as units."""
        snapshot = self._snapshot()
        estimate = self.workload.estimate()
        if estimate.shapes:
            snapshot = replace(snapshot, workload=estimate)
        if self._progress:
            snapshot = replace(snapshot, running=self._with_progress(snapshot.running))
        if self.policy.resize:
            snapshot = replace(snapshot, running=self._as_units(snapshot.running))
        if self._queues is not None:
            snapshot = replace(snapshot, running=self._with_attained(snapshot.running))
        return snapshot

    def _cycle(self, forced: bool) -> None:
        self._cycle_at = None
        self._cycles += 1
        if self._cycles > self.settings.max_cycles:
            raise RuntimeError("simulation exceeded max_cycles; a policy is not making progress")
        if self._can_change(forced):
            pending = self._pending_gangs() + self._growth_gangs()
            snapshot = self._decision_snapshot()
            t0 = time.perf_counter()
            decision = self.policy.place(snapshot, pending, self.policy.policy)
            self._place_s += time.perf_counter() - t0
            self._place_calls += 1
            self._apply(decision)
            if self.on_cycle is not None:
                waiting = [j.gang for j in self._waiting.values()]
                self.on_cycle(self.now, self._snapshot(), waiting)
        self._plan_power()
        self._blocked = bool(self._waiting)
        if self._waiting:
            self._samples.append(self.cluster.free_share())
            if self.policy.round_s and self._tick_at is None and self._active:
                self._tick_at = self.now + self.policy.round_s
                self._push(self._tick_at, _Kind.TICK, "")
        self._timeline.append(
            (self.now, self._busy_share, self.cluster.allocated_share, self._power_total)
        )

    def _apply(self, decision: Decision) -> None:
        s = self.settings
        shrink: dict[str, set[int]] = {}  # job -> replica indices its lost growth units held
        for pre in decision.preemptions:
            if pre.gang_id in self._units:
                unit_job, index = self._units[pre.gang_id]
                shrink.setdefault(unit_job.trace.job_id, set()).add(index)
                continue
            job = self.jobs[pre.gang_id]
            if job.state in (_State.RUNNING, _State.STARTING, _State.HELD):
                self._lose_unsaved(job)
                self._release(job)
                job.record.preemptions += 1
                if pre.service_tier:
                    job.tier_evictions += 1
                # Waits again from its eviction, as live (its pods are recreated then); its
                # place in line is there too unless the policy requeues by creation.
                job.queue_key = self.now
                self._to_waiting(job)
        for jid, indices in sorted(shrink.items()):
            job = self.jobs[jid]
            if job.state in (_State.RUNNING, _State.STARTING):  # not preempted whole as well
                kept = tuple(r for i, r in enumerate(job.replicas) if i not in indices)
                self._resize(job, kept)
        # Moves are simultaneous: one may take GPUs another gives up (the core plans them in
        # turn), and a gang placed by a reclaim with moves (core/evacuation.py) takes the GPUs
        # of the gangs moved for it, so every moved gang stops before anything is placed and
        # restarts after.
        for move in decision.moves:
            self._stop_moved(move)
        for rep in decision.repartitions:
            self.cluster.repartition(rep.node, rep.gpu, rep.new_layout)
            self._gpu_ready[(rep.node, rep.gpu)] = self.now + s.mig_repartition_s
            self._refresh_node_power(rep.node)
        for placement in decision.placements:
            grown = self._rests.get(placement.gang_id)
            if grown is not None:
                if grown.state in (_State.RUNNING, _State.STARTING):
                    self._resize(grown, grown.replicas + placement.replicas)
                continue
            job = self.jobs[placement.gang_id]
            if job.state not in (_State.WAITING, _State.HELD):
                raise RuntimeError(f"policy placed {placement.gang_id} in state {job.state.name}")
            replicas = job.replicas + placement.replicas
            was_holding = bool(job.replicas)
            job.replicas = replicas
            job.gpu_type = placement.gpu_type
            job.cap_w = placement.power_cap_w
            running = RunningGang(
                id=job.trace.job_id,
                gpu_type=placement.gpu_type,
                replicas=replicas,
                priority=job.gang.priority,
                preemptible=job.gang.preemptible,
                relative_throughput=self.speed.type_speed(job.trace, placement.gpu_type),
                queue=job.gang.queue,
            )
            touched = self.cluster.hold(running)
            if not was_holding:
                self._active += 1
            ready = self.now
            for node in touched:
                if self._power[node].state is not PowerState.ON:
                    raise RuntimeError(f"policy placed {placement.gang_id} on {node}, not on")
                self._power[node] = replace(self._power[node], empty_since=None)
            for r in replicas:
                for ix in r.gpus:
                    ready = max(ready, self._gpu_ready.get((r.node, ix), 0.0))
            del self._waiting[job.trace.job_id]
            if len(replicas) < job.gang.replicas_min:
                job.state = _State.HELD
                self._waiting[job.trace.job_id] = job  # the rest is still pending
                if not was_holding:
                    self._push(
                        self.now + s.gang_timeout_s, _Kind.TIMEOUT, job.trace.job_id, job.version
                    )
            else:
                if job.has_run:
                    ready = max(ready, self.now + self._restart_s())
                job.last_t = self.now
                if ready > self.now:
                    job.state = _State.STARTING
                    self._push(ready, _Kind.READY, job.trace.job_id, job.version)
                else:
                    self._start_running(job)
            for node in touched:
                self._refresh_node_power(node)
        for move in decision.moves:
            self._restart_moved(move)

    def _resize(self, job: _Job, replicas: tuple[ReplicaPlacement, ...]) -> None:
        """Grow or shrink a running elastic job to `replicas` (on its type): its workers restart
        at the new size from their last checkpoint (module docstring)."""
        self._lose_unsaved(job)
        self._release(job)
        job.replicas = replicas
        job.record.resizes += 1
        self._restart_held(job, "grew", "onto")

    def _lose_unsaved(self, job: _Job) -> None:
        """A running job stopped now redoes the work since its last checkpoint."""
        if job.state is _State.RUNNING:
            self._advance(job)
            lost = job.speed * self._unsaved_s(job)
            job.remaining = min(job.trace.work_s, job.remaining + lost)

    def _stop_moved(self, move: Move) -> None:
        """Stop a gang the policy moves; it loses its unsaved progress (module docstring)."""
        job = self.jobs[move.gang_id]
        if job.state not in (_State.RUNNING, _State.STARTING):
            raise RuntimeError(f"policy moved {move.gang_id} in state {job.state.name}")
        self._lose_unsaved(job)
        self._release(job)
        job.moves.append(self.now)
        job.record.moves += 1

    def _restart_moved(self, move: Move) -> None:
        """Restart a stopped moved gang on its new placement."""
        job = self.jobs[move.gang_id]
        placement = move.placement
        job.replicas = placement.replicas
        job.gpu_type = placement.gpu_type
        job.cap_w = placement.power_cap_w
        self._restart_held(job, "moved", "to")

    def _restart_held(self, job: _Job, verb: str, onto: str) -> None:
        """Hold a stopped running job's replicas (`job.replicas` on `job.gpu_type`) on the
        cluster and restart it on them (after a resize or a move, `verb`): its nodes, which must
        be on, stay on; it is ready after a restart and once every one of its GPUs is."""
        touched = self.cluster.hold(
            RunningGang(
                id=job.trace.job_id,
                gpu_type=job.gpu_type,
                replicas=job.replicas,
                priority=job.gang.priority,
                preemptible=job.gang.preemptible,
                relative_throughput=self.speed.type_speed(job.trace, job.gpu_type),
                queue=job.gang.queue,
            )
        )
        self._active += 1
        ready = self.now + self._restart_s()
        for node in touched:
            if self._power[node].state is not PowerState.ON:
                raise RuntimeError(f"policy {verb} {job.trace.job_id} {onto} {node}, not on")
            self._power[node] = replace(self._power[node], empty_since=None)
            self._refresh_node_power(node)
        for r in job.replicas:
            for ix in r.gpus:
                ready = max(ready, self._gpu_ready.get((r.node, ix), 0.0))
        job.state = _State.STARTING
        job.last_t = self.now
        self._push(ready, _Kind.READY, job.trace.job_id, job.version)

    # ----- main loop ---------------------------------------------------------------------------

    def run(self) -> SimResult:
        """Run to the last event and return the raw result."""
        wall0 = time.perf_counter()
        horizon = self.settings.horizon_s
        while self._heap:
            if horizon is not None and self._heap[0][0] > horizon:
                self.now = max(self.now, horizon)
                self._account()
                break
            t, kind, _, key, version = heapq.heappop(self._heap)
            self.now = t
            k = _Kind(kind)
            if k is _Kind.CYCLE:
                if self._cycle_at is not None and abs(self._cycle_at - t) < 1e-9:
                    forced, self._forced = self._forced, False
                    self._cycle(forced)
            elif k is _Kind.ARRIVAL:
                self._on_arrival(self.jobs[key])
            elif k is _Kind.COMPLETE:
                self._on_complete(self.jobs[key], version)
            elif k is _Kind.READY:
                self._on_ready(self.jobs[key], version)
            elif k is _Kind.TIMEOUT:
                self._on_timeout(self.jobs[key], version)
            elif k is _Kind.POWER:
                if self._power_at is not None and abs(self._power_at - t) < 1e-9:
                    self._on_power()
            elif k is _Kind.TICK:
                self._on_tick()
            self._account()
            if k is _Kind.ARRIVAL and t >= self._last_arrival:
                self._arrival_busy = self._busy.total  # the load-bearing span ends here
                self._arrival_useful = self._useful.total
            if self._done == len(self.jobs):
                break  # later events (power checks) fall after the last completion
        end = max(
            (
                j.record.completion_s
                for j in self.jobs.values()
                if j.record.completion_s is not None
            ),
            default=self.now,
        )
        if self.settings.horizon_s is not None:
            end = max(end, self.now)
        start = min((j.trace.arrival_s for j in self.jobs.values()), default=0.0)
        for integ in (
            self._energy,
            self._busy,
            self._useful,
            self._alloc,
            self._wait,
            self._unalloc_wait,
        ):
            integ.advance(max(end, self.now))
        return SimResult(
            policy=self.policy.name,
            fleet_gpus=int(self.cluster.total_gpus),
            jobs=[j.record for j in self.jobs.values()],
            start_s=start,
            end_s=end,
            energy_j=self._energy.total,
            busy_gpu_s=self._busy.total,
            allocated_gpu_s=self._alloc.total,
            waiting_s=self._wait.total,
            unallocated_waiting_gpu_s=self._unalloc_wait.total,
            unallocated_samples=self._samples,
            timeline=self._timeline,
            place_calls=self._place_calls,
            place_seconds=self._place_s,
            wall_seconds=time.perf_counter() - wall0,
            unfinished=sum(1 for j in self.jobs.values() if j.state is not _State.DONE),
            last_arrival_s=self._last_arrival,
            arrival_busy_gpu_s=self._arrival_busy,
            arrival_useful_gpu_s=self._arrival_useful,
        )
