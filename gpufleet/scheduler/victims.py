"""Phase 5 of the cycle: the core's preemption victims evicted whole, or none of them.

The victims' PodDisruptionBudgets are read once per cycle and a preemption goes ahead only if
they allow every victim pod of the preemptor to go (`disruption.gang_blocked`); otherwise
nothing is evicted, the preemptor waits with the budget as its reason, and its victims are
offered to the core as not preemptible for `retry` seconds, so the next decision looks for
other room. If the API still refuses an eviction midway (another client used the budget since
the check), evictions stop there; see disruption.py for that residual race.

A placed gang given GPUs of victims evicted for other gangs (`GangPlacement.waits_for`: the core
let it wait for them instead of evicting one more) is held the same way until their pods are
gone, and is not bound in this cycle; when their eviction does not go ahead it waits for the
next decision. While a preemptor or such a gang waits, the GPUs of its planned placement are
held for it, and it is bound there once the pods are gone (nominated.py). The placed gangs
whose evictions (their own or those they wait for) did not go ahead are `stopped`: the mover
does not start the moves the decision made for them.

Each evicted pod is marked with its cause (`model.contract.reasons`): a gang the core evicted
for the service tier (`Preemption.service_tier`: a gang of its own queue and priority with less
service, core/service_tier.py) is marked so, and its job says so; any other victim was
preempted for higher-priority work or a queue's reclaim.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace

from gpufleet.core.borrowing import growth_job
from gpufleet.core.decision import Decision
from gpufleet.model.contract import names
from gpufleet.model.contract.reasons import PendingReason, SchedulerReason, pending_text
from gpufleet.model.contract.service import read_tier_evictions
from gpufleet.scheduler import pods
from gpufleet.scheduler.binder import Binder
from gpufleet.scheduler.cache import CachedState, SchedulerCache
from gpufleet.scheduler.cluster_view import ClusterView
from gpufleet.scheduler.cycle_report import CycleReport
from gpufleet.scheduler.disruption import Obj, gang_blocked
from gpufleet.scheduler.mover import job_reference
from gpufleet.scheduler.pods import PodFacts
from gpufleet.scheduler.waiting import PREEMPTING_MESSAGE

log = logging.getLogger("gpufleet.scheduler")


def victims_still_shown(state: CachedState, facts: Mapping[str, PodFacts]) -> set[str]:
    """Gangs this process preempted (or moved for a gang placed in their stead) whose evicted
    (deleted) pods the watch still shows: the operator recreates such a worker under the same
    name at once, and that new pod beside the old members still shown bound is not the rest of
    a partly bound gang."""
    out: set[str] = set()
    for nomination in state.nominations.values():
        for key, uid in nomination.victims:
            f = facts.get(key)
            if f is not None and f.pod["metadata"].get("uid") == uid:
                out.add(f.gang)
    return out


class VictimEvictor:
    """Evicts victims; remembers the preemptions a budget stopped, and for how long."""

    def __init__(
        self,
        cache: SchedulerCache,
        binder: Binder,
        clock: Callable[[], float],
        retry: float,
    ) -> None:
        self.cache = cache
        self.binder = binder
        self.clock = clock
        self.retry = retry
        # Victim gang -> until when it is offered as not preemptible.
        self._protected: dict[str, float] = {}
        # Preemptor -> (its pending message, until when).
        self._blocked: dict[str, tuple[str, float]] = {}
        # The placed gangs of the last decision whose evictions (their own victims', or those
        # of the victims they wait for) did not all go ahead: they are decided again, so the
        # moves made for them are not started (mover.py).
        self.stopped: frozenset[str] = frozenset()

    @property
    def blocked(self) -> dict[str, str]:
        """Preemptor -> the budget's message it keeps as its reason."""
        return {gang: message for gang, (message, _) in self._blocked.items()}

    def without_protected(self, view: ClusterView) -> ClusterView:
        """`view` with gangs a budget protected recently offered as not preemptible."""
        now = self.clock()
        for gid in [g for g, t in self._protected.items() if t < now]:
            del self._protected[gid]
        for gid in [g for g, (_, t) in self._blocked.items() if t < now]:
            del self._blocked[gid]
        if not self._protected:
            return view
        snap = view.snapshot
        running = tuple(
            replace(g, preemptible=False) if g.id in self._protected else g for g in snap.running
        )
        return replace(view, snapshot=replace(snap, running=running))

    def evict(
        self, decision: Decision, view: ClusterView, state: CachedState, report: CycleReport
    ) -> dict[str, str]:
        """Evict each preemptor's victim gangs, all of them or none; preemptor -> why it
        waits. Sets `stopped`."""
        self.stopped = frozenset()
        victims_of: dict[str, list[str]] = defaultdict(list)
        for p in decision.preemptions:
            victims_of[p.for_gang].append(p.gang_id)
        if not victims_of:
            return {}
        keys_of = {
            gang: [k for v in victims for k in view.running_pods.get(v, ())]
            for gang, victims in victims_of.items()
        }
        try:
            budgets = self.binder.list_budgets(
                {k.partition("/")[0] for keys in keys_of.values() for k in keys}
            )
        except Exception as exc:  # no budgets known: no eviction this cycle
            log.warning("cycle=%d cannot read PodDisruptionBudgets: %s", report.cycle, exc)
            unread = pending_text(PendingReason.BUDGET, "cannot read PodDisruptionBudgets")
            waiters = [p.gang_id for p in decision.placements if p.waits_for]
            self.stopped = frozenset([*victims_of, *waiters])
            return dict.fromkeys([*victims_of, *waiters], unread)
        current = {pods.pod_key(p): p for p in state.pods}
        growth = {g.id for g in view.snapshot.running if growth_job(g) is not None}
        # The core says which evictions are the service tier's (Preemption.service_tier).
        served = {(p.gang_id, p.for_gang) for p in decision.preemptions if p.service_tier}
        held: dict[str, str] = {}
        spent: dict[str, int] = {}
        until = self.clock() + self.retry
        # Victim gang -> its pods evicted now, and their uids before the evictions.
        gone: dict[str, frozenset[str]] = {}
        uids: dict[str, str] = {}
        for gang, victims in sorted(victims_of.items()):
            keys = keys_of[gang]
            why = gang_blocked([current[k] for k in keys if k in current], budgets, spent)
            if why is not None:
                message = pending_text(
                    PendingReason.BUDGET, f"cannot preempt {', '.join(sorted(victims))}: {why}"
                )
                log.info("cycle=%d gang %s: %s", report.cycle, gang, message)
                self._stop(gang, victims, message, until)
                held[gang] = message
                continue
            held[gang], evicted = self._evict_gang(
                decision, gang, victims, view.running_pods, until, report, growth, served, uids
            )
            gone.update(
                (v, frozenset(k for k in view.running_pods.get(v, ()) if k in evicted))
                for v in victims
            )
        # Preemptors whose evictions a budget stopped (before or midway), then placed gangs
        # whose awaited victims' evictions did not go ahead.
        stopped = {g for g, why in held.items() if why != PREEMPTING_MESSAGE}
        held.update(self._wait_for_victims(decision, held, gone, uids, report, stopped))
        self.stopped = frozenset(stopped)
        return held

    def _wait_for_victims(
        self,
        decision: Decision,
        held: Mapping[str, str],
        gone: Mapping[str, frozenset[str]],
        uids: Mapping[str, str],
        report: CycleReport,
        stopped: set[str],
    ) -> dict[str, str]:
        """Hold each placed gang that takes GPUs of victims evicted for other gangs
        (`GangPlacement.waits_for`) until their pods are gone, as a preemptor waits for its own
        (with them, when it preempted too); gang -> why it waits. Its pods are never bound onto
        GPUs a victim's pod still holds in its grace period. When a victim's eviction was
        stopped (a budget), the gang waits for the next decision (and is added to `stopped`)."""
        out: dict[str, str] = {}
        victims_of = [(p.gang_id, p.for_gang) for p in decision.preemptions]
        for placement in decision.placements:
            gang, waits = placement.gang_id, placement.waits_for
            if not waits:
                continue
            names = ", ".join(waits)
            if not all(v in gone for v in waits):
                stopped.add(gang)
                out[gang] = pending_text(
                    SchedulerReason.PREEMPTING,
                    f"it takes the GPUs or the queue quota of {names}, whose preemption for "
                    "another gang did not go ahead",
                )
                continue
            if gang in held and held[gang] != PREEMPTING_MESSAGE:
                continue  # its own preemption was stopped: it waits for the next decision
            own = (k for v, winner in victims_of if winner == gang for k in gone.get(v, ()))
            keys = frozenset(k for v in waits for k in gone[v]) | frozenset(own)
            message = pending_text(
                SchedulerReason.PREEMPTING,
                f"waiting for {names}, preempted for another gang, to exit: it takes their "
                "GPUs or the queue quota they give back",
            )
            self.cache.nominate(gang, keys, uids, message, placement)
            log.info("cycle=%d gang %s waits for %s to exit", report.cycle, gang, names)
            out[gang] = message
        return out

    def _evict_gang(
        self,
        decision: Decision,
        gang: str,
        victims: list[str],
        members: Mapping[str, tuple[str, ...]],
        until: float,
        report: CycleReport,
        growth: Collection[str],
        served: Collection[tuple[str, str]],
        uids: dict[str, str],
    ) -> tuple[str, frozenset[str]]:
        """Evict the victims' pods for `gang`; its pending message and the pods evicted (their
        uids before the evictions added to `uids`). Victims that are all
        elastic jobs' growth units (replicas beyond a job's minimum, worth their step of its
        scaling curve) are said to be given to `gang`: it may be of their priority
        (core/rebalance.py). Victims evicted for the service tier (`served`) are marked so.
        `gang` is nominated on the evicted pods; when none was refused, with its placement in
        `decision`, whose GPUs are held for it meanwhile (nominated.py)."""
        if all(v in growth for v in victims):
            message = f"elastic replica beyond the job's minimum, given to gang {gang}"
        else:
            message = f"preempted by higher-priority gang {gang}"
        tier_message = (
            f"preempted by gang {gang} of the same queue and priority, which has received "
            "less service (the service tier)"
        )
        keys = [k for v in victims for k in members.get(v, ())]
        by_tier = {k for v in victims if (v, gang) in served for k in members.get(v, ())}
        # The victims' uids before the evictions: the operator recreates an evicted worker
        # under the same name while the other evictions are still going on.
        before = self.cache.uids(keys)
        uids.update(before)
        results = self.binder.evict_pods(
            [k for k in keys if k not in by_tier], names.PREEMPTED_REASON, message
        )
        if by_tier:
            tier_pods = {k: p for k in by_tier if (p := self.cache.pod(k)) is not None}
            results |= self.binder.evict_pods(
                [k for k in keys if k in by_tier], names.SERVICE_PREEMPTED_REASON, tier_message
            )
            self._record_tier_evictions(tier_pods, results, report.cycle)
        refused = {k: e for k, e in results.items() if e is not None}
        evicted = frozenset(k for k, e in results.items() if e is None)
        planned = None if refused else decision.placement(gang)
        self.cache.nominate(gang, evicted, before, placement=planned)
        report.preempted.extend(victims)
        if not refused:
            return PREEMPTING_MESSAGE, evicted
        first = sorted(refused.values())[0]
        log.warning(
            "cycle=%d gang %s: %d of %d evictions refused after the budget check (%s)",
            report.cycle, gang, len(refused), len(keys), first,
        )  # fmt: skip
        why = pending_text(
            PendingReason.BUDGET, f"{len(refused)} of {len(keys)} evictions refused: {first}"
        )
        self._stop(gang, victims, why, until)
        return why, evicted

    def _record_tier_evictions(
        self, tier_pods: Mapping[str, Obj], results: Mapping[str, str | None], cycle: int
    ) -> None:
        """Record on each job whose pods the service tier just evicted (`tier_pods`, those
        evicted: None in `results`) the count of runs the tier has ended, one more than the
        pods carry (`model.contract.service`): the operator counts the run from the evicted
        pods when it sees them, and from this record when they vanish first (no operator
        running meanwhile, say). A failed write is logged: the pods still carry the mark."""
        # Per job (kind/namespace/name): its reference and the largest count its pods give.
        records: dict[str, tuple[dict[str, str], int]] = {}
        for key, pod in tier_pods.items():
            if results.get(key, "") is not None:
                continue
            job = job_reference(pod)
            at = f"{job['kind']}/{job['namespace']}/{job['name']}"
            count = read_tier_evictions(pod["metadata"].get("annotations") or {}) + 1
            records[at] = (job, max(count, records[at][1] if at in records else 0))
        for job, count in records.values():
            try:
                self.binder.record_tier_eviction(job, count)
            except Exception as exc:
                log.warning(
                    "cycle=%d cannot record the service tier's eviction %d on %s %s/%s: %s",
                    cycle, count, job["kind"], job["namespace"], job["name"], exc,
                )  # fmt: skip

    def _stop(self, gang: str, victims: list[str], message: str, until: float) -> None:
        self._protected.update(dict.fromkeys(victims, until))
        self._blocked[gang] = (message, until)
