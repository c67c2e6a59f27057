"""One fleet, training and serving together, every decision by the core (`place_with_lending`).

The replay advances in ticks of `tick_s`. Each tick:

1. the serving models (`gpufleet.sim.serving`, one per ServingJob) advance; replicas that
   finished draining free their GPU (or, falling asleep, keep it as a lendable standby);
2. training jobs whose restart is over start running, finished ones free their GPUs;
3. every `period_s` each ServingJob's controller (gpufleet's policy or HPA) sets desired replicas
   per pool; a scale-up first **wakes standbys** (a woken standby takes its GPU back: the gang
   borrowing it is preempted whole), then asks the core for new replicas; a scale-down puts
   replicas to sleep while the pool has fewer than `standby` asleep, and releases the rest;
4. the core decides on one snapshot: the new serving replicas (1 GPU, `SERVING_PRIORITY`, not
   preemptible) and the waiting training gangs (priority 0, preemptible, oldest first) over the
   running gangs (training with its `RunProgress`, awake serving replicas), with asleep standbys
   as lenders. With the policy's preemption on, serving preempts training (victims in
   borrowing.py's order); off, serving takes only free GPUs.

Request-driven wake (`queue_wake_s`, off by default; a simulator-only what-if, the live operator
does not do it): every `queue_wake_s` seconds, between ticks too, each prefill pool with
standbys wakes as many as `core.standby.queue_wake` asks for from its instantaneous queue
(enough to clear it within `queue_wake_horizon_s`, by default the wake time; what
a router in front of the servers sees at once, like Knative's activator), the same way as a
scale-up wakes them; a replica woken so is held awake for `queue_wake_hold_s` (the autoscaler's
scale-down stabilization window: its recommendations never counted it) before the controller
may put it back to sleep.

A preempted gang's GPUs are free only `exit_s` after the preemption (its pods' termination
grace period: the processes get SIGTERM and take up to that long to stop): whatever is placed
on them - a woken standby's wake, a new serving replica's cold start, a training gang's restart
- begins then.

Training: a job runs at full speed once placed and its restart (after a preemption) is over. It
checkpoints every `checkpoint_interval_s` of run time, or on the preemption's SIGTERM when its
spec says `on_signal` (within `exit_s`, so it loses no run time); a preemption loses the run
time since the last checkpoint (redone later) and the restart (`restart_s`, GPUs held but
idle) is paid when it starts again: both are **lost work**, in GPU-hours. The core is told
each running gang's progress: unsaved time, restart time, and an expected remaining time equal
to the time it has run so far (the median remaining life of a heavy-tailed run time, a causal
estimate: the job's own length is never read).

Serving GPU-hours count replicas from their request to their removal, except while asleep.
Energy: a GPU running training or an awake serving replica draws its active power
(`model/power.py`), any other GPU its idle power (asleep standbys and empty GPUs alike).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from gpufleet.core.autoscaling_types import MetricsSample, PoolRole
from gpufleet.core.borrowing import lost_work_gpu_s
from gpufleet.core.demand import Gang, Topology, TypeOption
from gpufleet.core.lending import place_with_lending
from gpufleet.core.moves import unsaved_s
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, RunProgress, Snapshot
from gpufleet.core.standby import plan_standby, queue_wake
from gpufleet.model.gpus import Catalog
from gpufleet.model.inventory import Node
from gpufleet.model.power import active_power_w
from gpufleet.sim.mixed.workload import TrainingSpec
from gpufleet.sim.serving.model import ReplicaPhase, ServingModel
from gpufleet.sim.serving.replay import Controller, PoolView

__all__ = ["SERVING_PRIORITY", "MixedResult", "MixedSettings", "MixedSimulation", "ServingSpec"]

SERVING_PRIORITY = 10
DRAIN_MARGIN_S = 60.0
GpuKey = tuple[str, int]


@dataclass(frozen=True)
class MixedSettings:
    """Timing and policy switches of one replay."""

    tick_s: float = 5.0
    period_s: float = 15.0  # serving control period (scrape + decision)
    window_s: float = 180.0
    horizon_s: float = 6 * 3600.0
    restart_s: float = 60.0
    checkpoint_interval_s: float = 1800.0
    # A preempted gang frees its GPUs this long after the preemption: Kubernetes' default
    # terminationGracePeriodSeconds (a training process that checkpoints on SIGTERM uses it).
    exit_s: float = 30.0
    # Request-driven wake: how often (s) the router checks its queue (None: off; module docstring)
    queue_wake_s: float | None = None
    queue_wake_horizon_s: float | None = None  # clear the queue within this (None: wake_s)
    queue_wake_hold_s: float = 300.0
    # Lend asleep standbys' GPUs only to jobs that checkpoint on SIGTERM (lose no run time).
    lend_on_signal_only: bool = False
    max_pending: int = 64
    check: bool = False  # verify after every tick that no GPU runs two things (tests)


@dataclass
class ServingSpec:
    """One ServingJob: its model, its controller and each pool's standby count."""

    name: str
    model: ServingModel
    controller: Controller
    standby: Mapping[str, int] = field(default_factory=dict)


@dataclass
class _Train:
    spec: TrainingSpec
    remaining_s: float
    state: str = "future"  # future, waiting, starting, running, done
    gpus: tuple[GpuKey, ...] = ()
    ready_at: float = 0.0
    run_start: float = 0.0  # start of the current running spell
    ran_s: float = 0.0  # run time over all spells (for the remaining-time estimate)
    has_run: bool = False
    completion_s: float | None = None
    lost_gpu_s: float = 0.0
    preemptions: int = 0


@dataclass(frozen=True)
class MixedResult:
    """What one replay measured."""

    attainment: float
    requests: int
    serving_gpu_hours: float
    training_jct_s: tuple[float, ...]  # per job (unfinished: censored at the horizon)
    unfinished: int
    lost_gpu_hours: float
    preemptions: int
    energy_kwh: float
    lent_gpu_hours: float  # asleep standbys' GPU time that training borrowed
    queue_wakes: int  # standbys woken by the request-driven trigger
    end_s: float  # when the replay stopped (horizon, or all work done)

    @property
    def avg_jct_s(self) -> float:
        return sum(self.training_jct_s) / max(1, len(self.training_jct_s))


class MixedSimulation:
    """One replay of one policy over one fleet, training jobs and ServingJobs."""

    def __init__(
        self,
        catalog: Catalog,
        nodes: Sequence[Node],
        training: Sequence[TrainingSpec],
        serving: Sequence[ServingSpec],
        policy: Policy,
        settings: MixedSettings,
        slo_check: Callable[[float, float], bool],
    ) -> None:
        self.catalog = catalog
        self.nodes = tuple(nodes)
        self.policy = policy
        self.s = settings
        self.slo_check = slo_check
        self.gpu_type = {n.name: n.gpu_type for n in nodes}
        self.jobs = {t.id: _Train(t, t.duration_s) for t in training}
        self.serving = list(serving)
        self.holder: dict[GpuKey, str] = {}  # GPU -> "train:<id>" / "serve:<sj>:<pool>:<rid>"
        self.replica_gpu: dict[tuple[str, str, int], GpuKey] = {}
        self.borrower: dict[GpuKey, str] = {}  # lent GPU -> training job borrowing it
        self.free_at: dict[GpuKey, float] = {}  # GPU of a preempted gang -> when it is free
        self.wanted: dict[tuple[str, str], int] = {}  # new serving replicas to place
        self.windows: dict[tuple[str, str], deque[MetricsSample]] = {}
        self.held: dict[tuple[str, str], tuple[float, int]] = {}  # pool -> (until, awake)
        self.queue_wakes = 0
        self.now = 0.0
        self.energy_j = 0.0
        self.lent_gpu_s = 0.0

    # --- serving ---------------------------------------------------------------------------

    def _pools(self, sj: ServingSpec) -> list[tuple[str, PoolRole]]:
        cfg = sj.model.config
        return [(cfg.prefill.name, PoolRole.PREFILL), (cfg.decode.name, PoolRole.DECODE)]

    def _sync_replicas(self, sj: ServingSpec) -> None:
        """Free the GPUs of replicas that are gone; keep those of awake and asleep ones."""
        for pool, _ in self._pools(sj):
            for rid, phase in sj.model.replica_phases(pool):
                key = (sj.name, pool, rid)
                if phase is ReplicaPhase.GONE and key in self.replica_gpu:
                    gpu = self.replica_gpu.pop(key)
                    self.holder.pop(gpu, None)

    def _control(self, sj: ServingSpec) -> None:
        views: dict[str, PoolView] = {}
        for pool, role in self._pools(sj):
            window = self.windows.setdefault((sj.name, pool), deque())
            if self.now > 0:
                window.append(sj.model.sample(pool))
            while window and window[0].timestamp <= self.now - self.s.window_s:
                window.popleft()
            views[pool] = PoolView(
                pool,
                role,
                sj.model.replicas(pool),
                sj.model.ready_replicas(pool),
                tuple(window),
            )
        for pool, desired in sj.controller(self.now, views).items():
            self._actuate(sj, pool, desired)

    def _actuate(self, sj: ServingSpec, pool: str, desired: int) -> None:
        """Reach `desired` awake replicas by the live rule (`core.standby.plan_standby`)."""
        model = sj.model
        current = model.replicas(pool)
        key = (sj.name, pool)
        until, held = self.held.get(key, (0.0, 0))
        if self.now < until:
            desired = max(desired, held)
        plan = plan_standby(current, model.asleep(pool), desired, sj.standby.get(pool, 0))
        if plan.wake:
            self._wake(sj, pool, plan.wake)
        # New replicas are the core's to place (`_decide`); awake ones are not new.
        self.wanted[key] = max(0, desired - model.replicas(pool)) if plan.create else 0
        slept = model.sleep(pool, plan.sleep) if plan.sleep else 0
        if plan.remove or slept < plan.sleep:
            model.set_replicas(pool, desired)

    def _wake(self, sj: ServingSpec, pool: str, count: int) -> None:
        """Wake `count` standbys, cheapest first; a lent one's borrower is preempted whole."""
        order = self._wake_order(sj, pool, count)  # exactly the standbys to wake
        for rid in order:
            self._reclaim(self.replica_gpu[(sj.name, pool, rid)])
        after = {rid: self._wait_s((self.replica_gpu[(sj.name, pool, rid)],)) for rid in order}
        sj.model.wake(pool, count, order, after)

    def _queue_wake(self, sj: ServingSpec) -> None:
        """The request-driven trigger (module docstring) on the prefill pool."""
        cfg = sj.model.config
        pool = cfg.prefill.name
        asleep = sj.model.asleep(pool)
        if not asleep:
            return
        awake = sj.model.replicas(pool)
        n = queue_wake(
            sj.model.backlog_tokens(pool),
            awake,
            asleep,
            cfg.prefill.profile.prefill_tokens_per_s,
            cfg.wake_s if self.s.queue_wake_horizon_s is None else self.s.queue_wake_horizon_s,
        )
        if n:
            self._wake(sj, pool, n)
            self.queue_wakes += n
            self.held[(sj.name, pool)] = (self.now + self.s.queue_wake_hold_s, awake + n)

    def _wake_order(self, sj: ServingSpec, pool: str, count: int) -> list[int]:
        """The standbys to wake, cheapest first: one nobody borrows, or whose borrower is
        already being preempted for another wake, costs nothing; otherwise the borrower that
        loses the least work (borrowing.py) goes."""
        left = sorted(self._asleep_rids(sj, pool))
        evicted: set[str] = set()
        order: list[int] = []
        while left and len(order) < count:

            def cost(rid: int) -> tuple[float, int]:
                job_id = self.borrower.get(self.replica_gpu[(sj.name, pool, rid)])
                if job_id is None or job_id in evicted:
                    return (0.0, rid)
                return (lost_work_gpu_s(self._running_gang(self.jobs[job_id])), rid)

            best = min(left, key=cost)
            left.remove(best)
            order.append(best)
            job_id = self.borrower.get(self.replica_gpu[(sj.name, pool, best)])
            if job_id is not None:
                evicted.add(job_id)
        return order

    def _asleep_rids(self, sj: ServingSpec, pool: str) -> set[int]:
        return {r for r, ph in sj.model.replica_phases(pool) if ph is ReplicaPhase.ASLEEP}

    def _wait_s(self, gpus: Sequence[GpuKey]) -> float:
        """Seconds until every GPU of `gpus` is free (a preempted gang is still stopping)."""
        return max([0.0, *(self.free_at.get(g, 0.0) - self.now for g in gpus)])

    def _reclaim(self, gpu: GpuKey) -> None:
        """A waking standby takes its GPU back: its borrower is preempted whole."""
        job_id = self.borrower.pop(gpu, None)
        if job_id is not None:
            self._preempt(self.jobs[job_id])

    # --- training --------------------------------------------------------------------------

    def _release(self, job: _Train) -> None:
        mine = f"train:{job.spec.id}"
        for gpu in job.gpus:
            if self.holder.get(gpu) == mine:
                del self.holder[gpu]
            if self.borrower.get(gpu) == job.spec.id:
                del self.borrower[gpu]
        job.gpus = ()

    def _preempt(self, job: _Train) -> None:
        gpus = len(job.gpus)
        if job.state == "running":
            spell = self.now - job.run_start
            unsaved = self._unsaved_s(job, spell)
            job.ran_s += spell
            job.remaining_s = min(job.spec.duration_s, job.remaining_s - spell + unsaved)
            job.lost_gpu_s += unsaved * gpus
        job.preemptions += 1
        for gpu in job.gpus:  # its processes stop within their grace period
            self.free_at[gpu] = self.now + self.s.exit_s
        self._release(job)
        job.state = "waiting"

    def _training_events(self) -> None:
        for job in self.jobs.values():
            if job.state == "future" and job.spec.arrival_s <= self.now:
                job.state = "waiting"
            if job.state == "starting" and job.ready_at <= self.now:
                job.state = "running"
                job.run_start = job.ready_at
            if job.state == "running" and job.run_start + job.remaining_s <= self.now:
                job.completion_s = job.run_start + job.remaining_s
                job.ran_s += job.remaining_s
                job.remaining_s = 0.0
                job.state = "done"
                self._release(job)

    # --- the core's decision ---------------------------------------------------------------

    def _snapshot(self) -> tuple[Snapshot, list[RunningGang]]:
        """Running training gangs (a borrower is not preemptible: only its lender's wake
        takes its GPUs back), awake serving replicas, and the lenders: asleep standbys whose
        GPU nobody borrows."""
        running: list[RunningGang] = []
        for job in sorted(self.jobs.values(), key=lambda j: j.spec.id):
            if job.state in ("running", "starting") and job.gpus:
                running.append(self._running_gang(job))
        lenders: list[RunningGang] = []
        asleep = self._asleep_keys()
        for gpu, who in sorted(self.holder.items()):
            if not who.startswith("serve:"):
                continue
            gang = RunningGang(
                who,
                self.gpu_type[gpu[0]],
                (ReplicaPlacement(gpu[0], (gpu[1],)),),
                SERVING_PRIORITY,
                False,
            )
            if who not in asleep:
                running.append(gang)
            elif gpu not in self.borrower:
                lenders.append(gang)
        return Snapshot(self.catalog, self.nodes, tuple(running)), lenders

    def _running_gang(self, job: _Train) -> RunningGang:
        """A placed training job as the core sees it, with its progress (module docstring)."""
        spell = self.now - job.run_start if job.state == "running" else 0.0
        progress = RunProgress(job.ran_s + spell, self._unsaved_s(job, spell), self.s.restart_s)
        reps = tuple(ReplicaPlacement(n, (g,)) for n, g in job.gpus)
        borrows = any(gpu in self.borrower for gpu in job.gpus)
        gpu_type = self.gpu_type[job.gpus[0][0]]
        return RunningGang(f"train:{job.spec.id}", gpu_type, reps, 0, not borrows, None, progress)

    def _unsaved_s(self, job: _Train, spell: float) -> float:
        """Run time a preemption now would lose (none for a job that checkpoints on SIGTERM)."""
        return 0.0 if job.spec.on_signal else unsaved_s(spell, self.s.checkpoint_interval_s)

    def _asleep_keys(self) -> set[str]:
        out: set[str] = set()
        for sj in self.serving:
            for pool, _ in self._pools(sj):
                for rid in self._asleep_rids(sj, pool):
                    out.add(f"serve:{sj.name}:{pool}:{rid}")
        return out

    def _pending(self) -> list[Gang]:
        out: list[Gang] = []
        for (sj, pool), n in sorted(self.wanted.items()):
            for k in range(n):
                out.append(
                    Gang(
                        f"new:{sj}:{pool}:{k}",
                        (TypeOption(self.nodes[0].gpu_type),),
                        priority=SERVING_PRIORITY,
                        preemptible=False,
                    )
                )
        waiting = sorted(
            (j for j in self.jobs.values() if j.state == "waiting"),
            key=lambda j: (j.spec.arrival_s, j.spec.id),
        )
        for job in waiting[: self.s.max_pending]:
            out.append(
                Gang(
                    f"train:{job.spec.id}",
                    tuple(TypeOption(t) for t in sorted(set(self.gpu_type.values()))),
                    replicas_min=job.spec.gpus,
                    replicas_max=job.spec.gpus,
                    topology=Topology.SAME_NODE if job.spec.gpus > 1 else Topology.ANY,
                )
            )
        return out

    def _decide(self) -> None:
        pending = self._pending()
        if not pending:
            return
        snapshot, lenders = self._snapshot()
        lend_to = None
        if self.s.lend_on_signal_only:

            def lend_to(gang: Gang) -> bool:
                return gang.id.startswith("train:") and self.jobs[gang.id[6:]].spec.on_signal

        result = place_with_lending(snapshot, pending, self.policy, lenders, may_lend_to=lend_to)
        decision = result.decision
        for p in decision.preemptions:
            self._preempt(self.jobs[p.gang_id[6:]])
        lender_gpu = {g.id: (g.replicas[0].node, g.replicas[0].gpus[0]) for g in lenders}
        for lender, borrower in result.borrowed:
            self.borrower[lender_gpu[lender]] = borrower[6:]
        sj_by_name = {sj.name: sj for sj in self.serving}
        for placement in decision.placements:
            gpus = tuple((r.node, g) for r in placement.replicas for g in r.gpus)
            if placement.gang_id.startswith("new:"):
                _, sj_name, pool, _k = placement.gang_id.split(":")
                (rid,) = sj_by_name[sj_name].model.add_replicas(pool, 1, self._wait_s(gpus))
                self.replica_gpu[(sj_name, pool, rid)] = gpus[0]
                self.holder[gpus[0]] = f"serve:{sj_name}:{pool}:{rid}"
                self.wanted[(sj_name, pool)] -= 1
                continue
            job = self.jobs[placement.gang_id[6:]]
            job.gpus = gpus
            for gpu in gpus:
                # A lent GPU keeps its lender's claim (the borrower map says who is on it).
                if gpu not in lender_gpu.values():
                    self.holder[gpu] = placement.gang_id
            job.state = "starting"
            restart = self.s.restart_s if job.has_run else 0.0
            job.lost_gpu_s += restart * len(gpus)
            job.ready_at = self.now + self._wait_s(gpus) + restart
            job.has_run = True

    # --- accounting ------------------------------------------------------------------------

    def _account(self, dt: float) -> None:
        busy: set[GpuKey] = set()
        for job in self.jobs.values():
            if job.state in ("running", "starting"):
                busy.update(job.gpus)
        asleep = self._asleep_keys()
        for gpu, who in self.holder.items():
            if who.startswith("serve:") and who not in asleep:
                busy.add(gpu)
        self.lent_gpu_s += dt * len(self.borrower)
        watts = 0.0
        for node in self.nodes:
            spec = self.catalog[node.gpu_type]
            n_busy = sum(1 for g in range(node.gpu_count) if (node.name, g) in busy)
            watts += n_busy * active_power_w(spec) + (node.gpu_count - n_busy) * spec.power.idle_w
        self.energy_j += watts * dt

    # --- the run ---------------------------------------------------------------------------

    def run(self) -> MixedResult:
        s = self.s
        steps = math.ceil(s.horizon_s / s.tick_s)
        every = max(1, round(s.period_s / s.tick_s))
        for sj in self.serving:  # replicas that exist at the start hold GPUs from the start
            self._initial_serving(sj)
        for step in range(steps + 1):
            if s.queue_wake_s is not None and step > 0:
                self._queue_wake_between(step * s.tick_s)
            self.now = step * s.tick_s
            for sj in self.serving:
                sj.model.advance_to(self.now)
                self._sync_replicas(sj)
            self._training_events()
            if step % every == 0:
                for sj in self.serving:
                    self._control(sj)
            self._decide()
            if s.check:
                self._check()
            if step < steps:
                self._account(s.tick_s)
            if all(j.state == "done" for j in self.jobs.values()) and self.now >= max(
                (sj.model.last_arrival_s for sj in self.serving), default=0.0
            ):
                break
        return self._result()

    def _queue_wake_between(self, tick: float) -> None:
        """The router's checks from the previous tick up to `tick` (inclusive)."""
        assert self.s.queue_wake_s is not None
        t = self.now
        while True:
            t = min(tick, t + self.s.queue_wake_s)
            self.now = t
            for sj in self.serving:
                sj.model.advance_to(t)
                self._queue_wake(sj)
            if t >= tick:
                return

    def _check(self) -> None:
        """Every GPU runs at most one awake thing; a borrowed GPU belongs to an asleep standby."""
        users: dict[GpuKey, list[str]] = {}
        for job in self.jobs.values():
            for gpu in job.gpus:
                users.setdefault(gpu, []).append(job.spec.id)
        asleep = self._asleep_keys()
        for gpu, who in self.holder.items():
            if who.startswith("serve:") and who not in asleep:
                users.setdefault(gpu, []).append(who)
        for gpu, job_id in self.borrower.items():
            if self.holder.get(gpu) not in asleep:
                raise AssertionError(f"{gpu} lent by {self.holder.get(gpu)}, which is awake")
            if job_id not in users.get(gpu, []):
                raise AssertionError(f"{gpu} lent to {job_id}, which does not run there")
        for gpu, names in users.items():
            if len(names) > 1:
                raise AssertionError(f"t={self.now}: {gpu} runs {names}")

    def _initial_serving(self, sj: ServingSpec) -> None:
        """Replicas the models start with get GPUs in node order (asleep ones too)."""
        free = [(n.name, g) for n in self.nodes for g in range(n.gpu_count)]
        free = [gpu for gpu in free if gpu not in self.holder]
        for pool, _ in self._pools(sj):
            for rid, phase in sj.model.replica_phases(pool):
                if phase is ReplicaPhase.GONE:
                    continue
                if not free:
                    raise ValueError("the fleet cannot hold the ServingJobs' initial replicas")
                gpu = free.pop(0)
                self.replica_gpu[(sj.name, pool, rid)] = gpu
                self.holder[gpu] = f"serve:{sj.name}:{pool}:{rid}"

    def _result(self) -> MixedResult:
        met = total = 0
        gpu_s = 0.0
        # Requests that arrived at least a drain margin before the end count (unfinished
        # ones as misses); later ones are cut by the horizon, not served or refused.
        cut = self.now - DRAIN_MARGIN_S
        for sj in self.serving:
            outcomes = [o for o in sj.model.outcomes() if o.arrival_s < cut]
            met += sum(1 for o in outcomes if self.slo_check(o.ttft_s, o.tpot_s))
            total += sj.model.arrived_before(cut)
            gpu_s += sj.model.gpu_seconds()
        jct: list[float] = []
        unfinished = 0
        for job in self.jobs.values():
            if job.completion_s is None:
                unfinished += 1
                jct.append(self.now - job.spec.arrival_s)
            else:
                jct.append(job.completion_s - job.spec.arrival_s)
        return MixedResult(
            attainment=met / total if total else 1.0,
            requests=total,
            serving_gpu_hours=gpu_s / 3600.0,
            training_jct_s=tuple(jct),
            unfinished=unfinished,
            lost_gpu_hours=sum(j.lost_gpu_s for j in self.jobs.values()) / 3600.0,
            preemptions=sum(j.preemptions for j in self.jobs.values()),
            energy_kwh=self.energy_j / 3.6e6,
            lent_gpu_hours=self.lent_gpu_s / 3600.0,
            queue_wakes=self.queue_wakes,
            end_s=self.now,
        )
