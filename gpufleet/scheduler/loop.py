"""The live scheduling loop: cluster cache -> snapshot -> core decision -> API writes.

`run_cycle()` is one pass in numbered phases, each timed and logged with the cycle id; each
phase is a small collaborator with its own state (the module named after each):
  0 settle    (inflight) binding batches answered since the last cycle: gangs reported bound,
              or rolled back whole (assumptions forgotten, bound pods deleted)
  1 snapshot  (snapshot) build the core's input from the cache (assumed bindings included),
              with the workload estimate from the pending gangs seen so far (arrivals), the
              progress of gangs that may be moved (progress), those of them a
              PodDisruptionBudget protects, the GPUs reserved for moved gangs (mover),
              and the service the gangs of queues have received (attained); these steps and
              those of phase 3 are taken in the order stateful_steps.py gives, which the
              admin API's what-if follows too
  2 heal      (heal, partial) restart, as whole gangs, gangs with a pod on a failed or
              vanished node (paused while every node is NotReady, slowed while most of a
              zone's are: the node-lifecycle controller's zone rule); find gangs left
              partly bound (a crash between two bindings or evictions); (lending) preempt
              whole the gangs borrowing GPUs from a standby the operator recalled
  3 heads     (offer) offer pending gangs to the core, except those waiting for preemption
              victims to exit or for a MIG reconfiguration they need; the unbound rest of a
              partly bound gang is offered as `<gang>#rest`; of many identical gangs only as
              many as could fit, plus one whose reason the others share
  4 decide    `place()` from the core; every placement decision comes from there (a moved
              gang's recreated pods are bound to its reserved placement instead: mover); with
              asleep standbys, the core's `place_with_lending` (lending) lends their GPUs to
              preemptible gangs of lower priority
  5 preempt   (victims) evict victim gangs whole through the Eviction API, or none of them
              when their PodDisruptionBudgets do not allow it; the preemptor waits until the
              pods are gone, and so does a gang placed on GPUs of gangs moved for it (mover)
              or given GPUs of another gang's victims (`GangPlacement.waits_for`); a
              waiting gang's held GPUs the decision gave to another gang evict nothing
              (nominated.py): once that gang goes ahead, the held gang is decided again
  6 mig       (repartition) ask nodes for the core's new MIG layouts; the gangs needing them
              wait
  7 complete  (partial) a partly bound gang whose rest the core placed is completed by phase
              8; one whose rest cannot be placed restarts whole
  8 bind      (lending) mark the standbys a borrowing gang uses lent; (inflight) assume
              every pod of a gang, then send all bindings of the cycle as one batch that
              is answered in the background (the next cycle does not wait for it;
              the assumptions keep its GPUs taken); if any binding of a gang fails, phase 0 of
              a later cycle rolls the gang back (never a partial gang); then (mover) each
              move of the decision that the budgets, read again, still allow deletes its
              gang's pods with their grace period and reserves its new placement (not the
              moves made for a gang whose preemption did not go ahead); a gang placed on GPUs
              of gangs moved for it waits for their deleted pods too
  9 power     (power_marks) opt-in idle-node power-down: the core's power plan after the
              decision, written as node marks (cordon and label); gangs that fit only on
              switched-off nodes wake them and wait for their boot
 10 explain   (waiting) write each waiting gang's reason into its pods' PodScheduled condition
              (a moved gang whose reservation was dropped adds why, while it waits: mover)
 11 queues    (queue_objects) write the GPUQueues' status (usage, borrowing, lending, pending, fair
              share) where it changed
A failed snapshot or decision logs and waits for the next cycle instead of raising.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from gpufleet.core.decision import Decision, GangPlacement
from gpufleet.core.demand import Gang
from gpufleet.core.lending import LendingDecision
from gpufleet.core.place import place
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import Snapshot
from gpufleet.model.gpus import Catalog
from gpufleet.scheduler import prometheus_metrics
from gpufleet.scheduler.arrivals import ArrivalTracker
from gpufleet.scheduler.attained import AttainedService
from gpufleet.scheduler.binder import Binder
from gpufleet.scheduler.cache import CachedState, SchedulerCache
from gpufleet.scheduler.cluster_view import ClusterView, PendingGang, ViewBuilder
from gpufleet.scheduler.cycle_report import CycleReport
from gpufleet.scheduler.decision_view import decision_view
from gpufleet.scheduler.deletions import Deletions
from gpufleet.scheduler.eligibility import overcommitted
from gpufleet.scheduler.full_collection import FullCollections
from gpufleet.scheduler.heal import DisruptionRule, NodeHealer, Notify
from gpufleet.scheduler.inflight import InflightBindings
from gpufleet.scheduler.lending import Lending
from gpufleet.scheduler.lending import decide as decide_lending
from gpufleet.scheduler.loop_settings import SchedulerSettings
from gpufleet.scheduler.mig_request import MigRequester
from gpufleet.scheduler.mover import GangMover, ObjectNotify, waits_for_moves
from gpufleet.scheduler.nominated import give_up, taken
from gpufleet.scheduler.partial import PartialGangs, partial_gangs
from gpufleet.scheduler.power_marks import PowerMarks, booting_messages
from gpufleet.scheduler.progress import ProgressTracker
from gpufleet.scheduler.queue_objects import QueueStatusWriter
from gpufleet.scheduler.repartition import request_layouts
from gpufleet.scheduler.stateful_steps import LoopSteps, offer, remembered
from gpufleet.scheduler.victims import VictimEvictor, victims_still_shown
from gpufleet.scheduler.waiting import WaitingReasons, pending_messages

log = logging.getLogger("gpufleet.scheduler")

Decide = Callable[[Snapshot, Sequence[Gang], Policy], Decision]

# Pods this process deleted are waited for this much longer than a node's failure grace.
_DELETION_LINGER_S = 30.0


class _PhaseTimer:
    """Records each phase's duration in the report."""

    def __init__(self, clock: Callable[[], float], report: CycleReport) -> None:
        self.clock = clock
        self.report = report
        self.started = self.last = clock()
        self.cpu_started = time.thread_time()

    def done(self, phase: str) -> None:
        now = self.clock()
        self.report.timings[phase] = now - self.last
        self.report.cpu_s = time.thread_time() - self.cpu_started
        self.last = now


class Scheduler:
    """The cycle's phases wired together, and the loop that runs cycles."""

    def __init__(
        self,
        cache: SchedulerCache,
        binder: Binder,
        mig: MigRequester,
        catalog: Catalog,
        policy: Policy,
        settings: SchedulerSettings,
        decide: Decide = place,
        clock: Callable[[], float] = time.monotonic,
        may_act: Callable[[], bool] = lambda: True,
        power: PowerMarks | None = None,
        queue_status: QueueStatusWriter | None = None,
        notify: Notify | None = None,
        notify_on: ObjectNotify | None = None,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        pod_tolerations: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        self.cache = cache
        self.mig = mig
        self.policy = policy
        self.settings = settings
        self.decide = decide
        self.clock = clock
        # Whether this process still leads (its Lease renewed within the duration).
        self.may_act = may_act
        self.cycle = 0
        # Reuses, cycle to cycle, what it read of objects that did not change (cluster_view.py).
        # The wall clock reads the objects' times (pending gangs' waits, runs' service, progress).
        self.views = ViewBuilder(catalog, settings.name, wall)
        deletions = Deletions(clock, settings.node_failure_grace_s + _DELETION_LINGER_S)
        self.deletions = deletions
        rule = DisruptionRule(
            settings.unhealthy_zone_threshold,
            settings.partial_disruption_heal_interval_s,
            settings.large_zone_nodes,
        )
        self.healer = NodeHealer(
            binder, deletions, settings.node_failure_grace_s, clock, rule, notify
        )
        self.partial = PartialGangs(binder, deletions, settings.partial_grace_s, clock)
        self.victims = VictimEvictor(cache, binder, clock, settings.budget_retry_s)
        self.bindings = InflightBindings(cache, binder, deletions)
        self.progress = ProgressTracker(settings.move_restart_s, wall)
        self.attained = AttainedService(catalog, wall)  # for the service tier inside queues
        self.mover = GangMover(
            cache,
            binder,
            deletions,
            clock,
            settings.move_reserve_s,
            settings.move_unfit_recheck_s,
            notify=notify,
            notify_on=notify_on,
            # The operator's own tolerations, which a move's recreated pods get (mover.py).
            pod_tolerations=pod_tolerations,
        )
        # The request shapes seen so far, for the core's fragmentation term (arrivals.py).
        self.arrivals = ArrivalTracker()
        self.waiting = WaitingReasons(
            binder, clock, settings.explain_delay_s, settings.busy_explain_delay_s
        )
        self.lending = Lending(binder, deletions)
        self.power = power
        self.queue_status = queue_status
        # Garbage held in reference cycles, freed once a minute (full_collection.py).
        self.collections = FullCollections(clock=clock)

    # --- the cycle -----------------------------------------------------------------------------

    def run_cycle(self) -> CycleReport:
        self.cycle += 1
        report = CycleReport(self.cycle)
        timer = _PhaseTimer(self.clock, report)
        self.bindings.settle(report)  # 0: rolled-back gangs' GPUs are free in this snapshot
        policy = self.policy  # one policy per cycle (a watch may replace it between cycles)
        read = self._snapshot(report, policy)  # 1
        if read is None:
            return report
        state, view = read
        # The steps that use what this scheduler remembers, in the order the admin API's
        # what-if takes them too (stateful_steps.py): moved gangs' reservations, progress,
        # attained service, moves a budget forbids, the workload estimate.
        steps = LoopSteps(
            self.progress, self.mover, self.arrivals, self.settings.cap_identical_above, self.cycle
        )
        view = remembered(view, policy, steps, self.attained)
        timer.done("snapshot")
        settling, partial = self._heal(state, view, report)  # 2
        timer.done("heal")
        chosen = offer(view, state, settling, policy, steps)  # 3
        offered, waiting, capped = chosen.gangs, chosen.waiting, chosen.capped
        reserved, reserved_by_id = chosen.reserved, chosen.reserved_by_id
        timer.done("heads")
        outcome = self._decide(view, offered, policy, report)  # 4
        if outcome is None:
            return report
        # Holds of nominated gangs the core gave to other gangs evict nothing (nominated.py).
        decision, took = taken(outcome.decision)
        outcome = replace(outcome, decision=decision)
        timer.done("decide")
        held = self.victims.evict(decision, view, state, report)  # 5
        held = waits_for_moves(decision) | held
        timer.done("preempt")
        held |= request_layouts(decision, view, state, self.mig, self.cache, report)  # 6
        timer.done("mig")
        held |= self.partial.complete(partial, view.facts, decision, held, waiting, report)  # 7
        timer.done("complete")
        # A gang whose pods together would over-commit a node's CPU or memory waits a cycle.
        held |= overcommitted(decision, view.eligibility, view.free, held)
        by_id = {pg.gang.id: pg for pg in offered}
        waits, borrows = self.lending.lend(outcome, view, by_id, held, report)  # 8
        held |= dict.fromkeys(waits, "waiting for a standby to be lent")
        placed = [p for p in decision.placements if p.gang_id not in held]
        self.bindings.send([*placed, *reserved], by_id | reserved_by_id, report, borrows)
        held |= self.mover.start(decision, view, report, self.victims.stopped)
        if state.nominations:  # waiting gangs whose planned GPUs went to another gang
            given = give_up(
                self.cache,
                state.nominations,
                took,
                self._going(decision, [*placed, *reserved]),
                {pg.gang.id: pg.gang.priority for pg in view.pending},
            )
            for gid, message in given.items():
                log.info("cycle=%d gang %s: %s", self.cycle, gid, message)
            waiting |= given
        timer.done("bind")
        report.pending = pending_messages(
            waiting, capped, decision, held, self.victims.blocked, view.eligibility
        )
        # A moved gang whose reservation was dropped (mover.hold) says why, while it waits.
        report.pending = self.mover.explain(report.pending)
        if self.power is not None:  # 9
            placed_ids = {p.gang_id for p in decision.placements}
            still = [pg.gang for pg in offered if pg.gang.id not in placed_ids]
            report.power = self.power.act(state.nodes, state.pods, view, decision, still, policy)
            report.pending.update(booting_messages(report.power.waiting_for))
            timer.done("power")
        self.waiting.write(report.pending, view, busy=self.bindings.busy)  # 10
        timer.done("explain")
        if self.queue_status is not None and view.snapshot.queues is not None:  # 11
            # Exiting victims a move's reservation waits for count in their own queue.
            snapshot = self.mover.as_charged(view.snapshot)
            self.queue_status.write(snapshot, [pg.gang for pg in view.pending])
            timer.done("queues")
        self._log(report, self.clock() - timer.started)
        return report

    # --- phases kept here: each a few lines around a collaborator -----------------------------

    def _snapshot(
        self, report: CycleReport, policy: Policy
    ) -> tuple[CachedState, ClusterView] | None:
        """The cache's state and the core's view of it; None (and the error reported) when
        an object cannot be read: a bad object must not stop scheduling."""
        try:
            state = self.cache.state()
            view = self.views.build_state(state, requeue=policy.requeue_timestamp)
        except Exception as exc:
            log.exception("cycle=%d snapshot failed; retrying next cycle", self.cycle)
            report.error = f"snapshot: {exc}"
            return None
        for key in view.problems:
            log.warning("cycle=%d pod %s holds GPUs its node does not have", self.cycle, key)
        # Over-committed, powered-off and reconfiguring nodes closed, gangs a budget protected
        # kept from preemption: the steps the admin API's what-if takes too.
        view = decision_view(view, state, policy, self.victims.without_protected, self.power)
        return state, view

    def _heal(
        self, state: CachedState, view: ClusterView, report: CycleReport
    ) -> tuple[set[str], dict[str, list[str]]]:
        """Restart the gangs of failed nodes; the gangs settling (restarted, being deleted,
        preempted and still shown) and the partly bound gangs among the others."""
        facts = view.facts
        report.restarted = self.healer.restart_broken(state, facts, self.cycle)
        settling = (
            set(report.restarted)
            | self.deletions.gangs_settling(facts)
            | victims_still_shown(state, facts)
        )
        settling |= self.lending.reclaim(view, report)
        return settling, partial_gangs(facts, settling)

    def _decide(
        self,
        view: ClusterView,
        offered: Sequence[PendingGang],
        policy: Policy,
        report: CycleReport,
    ) -> LendingDecision | None:
        """The core's decision on the offered gangs (with the asleep standbys' GPUs lent);
        None (and the error reported) when it fails: the next cycle tries again."""
        if not offered and not any(g.progress is not None for g in view.snapshot.running):
            return LendingDecision(Decision())  # nothing to place and no gang that could move
        try:
            return decide_lending(view, [pg.gang for pg in offered], policy, self.decide)
        except Exception as exc:
            log.exception("cycle=%d decision failed; retrying next cycle", self.cycle)
            report.error = f"decide: {exc}"
            return None

    def _going(
        self, decision: Decision, bound: Sequence[GangPlacement]
    ) -> dict[str, GangPlacement]:
        """The placements of the gangs that go ahead: `bound` now, or nominated with their
        placement in `decision` to wait for pods to exit (victims.py, mover.py)."""
        going = {p.gang_id: p for p in bound}
        for p in decision.placements:
            if p.gang_id not in going and self.cache.nominated_placement(p.gang_id) == p:
                going[p.gang_id] = p
        return going

    def _log(self, report: CycleReport, total: float) -> None:
        if not report.acted:
            return
        log.info(
            "cycle=%d sent=%d bound=%s preempted=%s moved=%s mig=%s restarted=%s completed=%s "
            "pending=%d in %.3fs (%s cpu=%.0fms)",
            self.cycle, report.sent, report.bound, report.preempted, report.moved,
            sorted(report.mig_requests), report.restarted, report.completed,
            len(report.pending), total,
            " ".join(f"{k}={v * 1000:.0f}ms" for k, v in report.timings.items()),
            report.cpu_s * 1000,
        )  # fmt: skip

    # --- running -------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Cycle whenever the cache changes (batched by `debounce_s`), at least every
        `resync_s`."""
        log.info("scheduler %r started", self.settings.name)
        fenced = False
        while not stop.is_set():
            self.cache.changed.wait(self.settings.resync_s)
            if stop.is_set():
                break
            stop.wait(self.settings.debounce_s)
            self.cache.changed.clear()
            if not self.may_act():
                # Paused past the Lease (or cut off from it): a standby may lead by now, so no
                # decision until the keeper renews it (or sees another holder and the process
                # stops).
                if not fenced:
                    log.warning("lease not renewed within its duration; not scheduling")
                fenced = True
                self.cache.changed.set()
                stop.wait(0.1)
                continue
            if fenced:
                log.warning("lease renewed; scheduling again")
                fenced = False
            try:
                prometheus_metrics.record(self.run_cycle())
            except Exception:  # keep the scheduler alive; the next cycle starts from the cluster
                log.exception("cycle=%d failed", self.cycle)
                stop.wait(1.0)
            self.collections.when_due()
        # Let the last batch be answered so a failed gang is rolled back before the process
        # goes (a crash instead leaves it to the partly-bound-gang handling of the next run).
        self.bindings.settle(CycleReport(self.cycle), wait=5.0)
