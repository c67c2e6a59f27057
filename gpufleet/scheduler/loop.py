"""The live scheduling loop: cluster cache -> snapshot -> core decision -> API writes.

`run_cycle()` is one pass in numbered phases, each timed and logged with the cycle id:
  0 settle    binding batches answered since the last cycle: gangs reported bound, or rolled
              back whole (assumptions forgotten, bound pods deleted)
  1 snapshot  build the core's input from the cache (assumed bindings included)
  2 heal      restart, as whole gangs, gangs with a pod on a failed or vanished node; find
              gangs left partly bound (a crash between two bindings or evictions)
  3 heads     offer pending gangs to the core, except those waiting for preemption victims to
              exit or for a MIG reconfiguration they need; the unbound rest of a partly bound
              gang is offered as `<gang>#rest`; of many identical gangs only as many as
              could fit, plus one whose reason the others share (`_cap_identical`)
  4 decide    `place()` from the core; every placement decision comes from there
  5 preempt   evict victim gangs whole through the Eviction API, or none of them when their
              PodDisruptionBudgets do not allow it; the preemptor waits until the pods are gone
  6 mig       ask nodes for the core's new MIG layouts; the gangs needing them wait
  7 complete  a partly bound gang whose rest the core placed is completed by phase 8; one
              whose rest cannot be placed restarts whole
  8 bind      assume every pod of a gang, then send all bindings of the cycle as one batch
              that is answered in the background (the next cycle does not wait for it; the
              assumptions keep its GPUs taken); if any binding of a gang fails, phase 0 of a
              later cycle rolls the gang back (never a partial gang)
  9 explain   write the core's pending reason into each waiting pod's PodScheduled condition
A failed snapshot or decision logs and waits for the next cycle instead of raising.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent import futures
from concurrent.futures import Future
from dataclasses import dataclass, field, replace

from gpufleet.core.decision import Decision, GangPlacement
from gpufleet.core.demand import Gang, Topology
from gpufleet.core.place import place
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import Snapshot
from gpufleet.model.gpus import Catalog
from gpufleet.model.mig import MigLayout
from gpufleet.scheduler import metrics, names, pods
from gpufleet.scheduler.binder import Binder, BindRequest, scheduled_message
from gpufleet.scheduler.cache import CachedState, SchedulerCache
from gpufleet.scheduler.disruption import gang_blocked
from gpufleet.scheduler.loop_settings import SchedulerSettings
from gpufleet.scheduler.mig import CONFIG_PREFIX, MigRequester
from gpufleet.scheduler.nodes import node_ready
from gpufleet.scheduler.pods import PodFacts
from gpufleet.scheduler.snapshot import ClusterView, PendingGang, ViewBuilder

log = logging.getLogger("gpufleet.scheduler")

Decide = Callable[[Snapshot, Sequence[Gang], Policy], Decision]

NODE_FAILURE_REASON = "NodeFailure"
GANG_INCOMPLETE_REASON = "GangIncomplete"


@dataclass
class CycleReport:
    """What one cycle did; returned for tests and logged."""

    cycle: int
    bound: list[str] = field(default_factory=list)  # gang ids, bindings answered
    sent: int = 0  # bindings sent this cycle (answered in the background)
    pending: dict[str, str] = field(default_factory=dict)  # gang id -> message
    preempted: list[str] = field(default_factory=list)  # victim gang ids
    mig_requests: dict[str, str] = field(default_factory=dict)  # node -> config name
    restarted: list[str] = field(default_factory=list)  # gangs restarted whole
    completed: list[str] = field(default_factory=list)  # partly bound gangs being completed
    bind_failures: dict[str, str] = field(default_factory=dict)  # gang id -> error
    timings: dict[str, float] = field(default_factory=dict)
    error: str | None = None


def bind_annotations(placement: GangPlacement, replica: int) -> dict[str, str]:
    """What the binding writes onto the pod of `replica`: its GPUs, MIG instance, power cap."""
    rp = placement.replicas[replica]
    out = {
        names.ASSIGNED_GPUS: ",".join(str(g) for g in rp.gpus),
        names.ASSIGNED_TYPE: placement.gpu_type,
    }
    if rp.mig is not None:
        out[names.ASSIGNED_MIG] = str(rp.mig)
    if placement.power_cap_w is not None:
        out[names.POWER_CAP] = f"{placement.power_cap_w:.0f}"
    return out


class Scheduler:
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
    ) -> None:
        self.cache = cache
        # Whether this process still leads (its Lease renewed within the duration).
        self.may_act = may_act
        self.binder = binder
        self.mig = mig
        self.catalog = catalog
        self.policy = policy
        self.decide = decide
        self.settings = settings
        self.node_failure_grace = settings.node_failure_grace_s
        self.clock = clock
        self.cycle = 0
        self._not_ready_since: dict[str, float] = {}
        # Preemptions a PodDisruptionBudget stopped: victim gang -> until when it is offered
        # as not preemptible; preemptor -> (its pending message, until when).
        self.budget_retry = settings.budget_retry_s
        self._budget_blocked: dict[str, float] = {}
        self._blocked_preemptors: dict[str, tuple[str, float]] = {}
        # Binding batches in flight: (gang id -> its requests, the batch's answer).
        self._inflight: list[
            tuple[dict[str, list[BindRequest]], Future[dict[str, str | None]]]
        ] = []
        # Partly bound gangs -> since when; pods this process deleted -> until when to wait
        # for the watch to show them gone.
        self.partial_grace = settings.partial_grace_s
        self._partial_since: dict[str, float] = {}
        self._being_deleted: dict[str, float] = {}
        # gang -> (its pending reason, since when): see `_explain`.
        self.explain_delay = settings.explain_delay_s
        self.busy_explain_delay = settings.busy_explain_delay_s
        # Offer at most what can fit of identical gangs once more than this many are offered
        # (`_cap_identical`).
        self.cap_identical_above = settings.cap_identical_above
        self._reasons: dict[str, tuple[str, float]] = {}
        # Reuses, cycle to cycle, what it read of objects that did not change (snapshot.py).
        self._views = ViewBuilder(catalog)

    # --- the cycle -----------------------------------------------------------------------------

    def run_cycle(self) -> CycleReport:
        self.cycle += 1
        report = CycleReport(self.cycle)
        started = self.clock()

        def phase(name: str, since: float) -> float:
            now = self.clock()
            report.timings[name] = now - since
            return now

        # 0 settle: binding batches answered since the last cycle (rolled-back gangs' GPUs
        # are free again in this cycle's snapshot)
        self._settle_bindings(report)

        # 1 snapshot
        try:
            state = self.cache.state()
            view = self._views.build(state.nodes, state.pods, state.mig_configs)
        except Exception as exc:  # a bad object must not stop scheduling: retry next cycle
            log.exception("cycle=%d snapshot failed; retrying next cycle", self.cycle)
            report.error = f"snapshot: {exc}"
            return report
        for key in view.problems:
            log.warning("cycle=%d pod %s holds GPUs its node does not have", self.cycle, key)
        view = self._without_blocked_victims(view)
        t = phase("snapshot", started)

        # 2 heal
        facts = view.facts
        report.restarted = self._heal(state, facts)
        settling = (
            set(report.restarted)
            | self._members_deleting(facts)
            | self._victims_remaining(state, facts)
        )
        partial = self._partial_gangs(facts, settling)
        t = phase("heal", t)

        # 3 heads (gangs restarted or rolled back are offered again once the pods this process
        # deleted are gone and recreated)
        offered, waiting = self._heads(view, state)
        offered = [pg for pg in offered if pg.gang.id.split("#")[0] not in settling]
        offered, capped = self._cap_identical(offered, view.snapshot)
        t = phase("heads", t)

        # 4 decide
        decision = Decision()
        if offered:
            try:
                decision = self.decide(view.snapshot, [pg.gang for pg in offered], self.policy)
            except Exception as exc:
                log.exception("cycle=%d decision failed; retrying next cycle", self.cycle)
                report.error = f"decide: {exc}"
                return report
        t = phase("decide", t)

        # 5 preempt
        held = self._preempt(decision, view, state, report)
        t = phase("preempt", t)

        # 6 mig
        held |= self._repartition(decision, view, state, report)
        t = phase("mig", t)

        # 7 complete
        held |= self._complete(partial, facts, decision, held, waiting, report)
        t = phase("complete", t)

        # 8 bind
        by_id = {pg.gang.id: pg for pg in offered}
        self._bind_all([p for p in decision.placements if p.gang_id not in held], by_id, report)
        t = phase("bind", t)

        # 9 explain
        messages = dict(waiting)
        for gid, peer in capped.items():
            messages[gid] = f"{PendingReasonText.QUEUED}: behind identical gang {peer}"
        for p in decision.pending:
            messages[p.gang_id] = f"{p.reason.value}: {p.message}"
            # A preemptor a budget stopped keeps that as its reason while the victims it
            # wanted are held back from the core (the core alone would only say "no room").
            if p.gang_id in self._blocked_preemptors:
                messages[p.gang_id] = self._blocked_preemptors[p.gang_id][0]
        for gid in held:
            messages.setdefault(gid, held[gid])
        for gid, peer in capped.items():
            # The core's reason for the last identical gang offered holds for those behind it.
            if peer in messages:
                messages[gid] = messages[peer]
        report.pending = messages
        # A gang still waiting for its own pods to be created says nothing: its count changes
        # with every pod and rewriting every member's condition each cycle costs more than it
        # tells.
        quiet = f"{PendingReasonText.GANG}: waiting for"
        loud = {g: m for g, m in messages.items() if not m.startswith(quiet)}
        self._explain(loud, view)
        phase("explain", t)

        total = self.clock() - started
        if (
            report.sent
            or report.bound
            or report.preempted
            or report.mig_requests
            or report.restarted
        ):
            log.info(
                "cycle=%d sent=%d bound=%s preempted=%s mig=%s restarted=%s completed=%s "
                "pending=%d in %.3fs (%s)",
                self.cycle, report.sent, report.bound, report.preempted,
                sorted(report.mig_requests), report.restarted, report.completed, len(messages),
                total,
                " ".join(f"{k}={v * 1000:.0f}ms" for k, v in report.timings.items()),
            )  # fmt: skip
        return report

    # --- phases --------------------------------------------------------------------------------

    def _heal(self, state: CachedState, facts: Mapping[str, PodFacts]) -> list[str]:
        """Delete every pod of gangs that have a pod on a failed or vanished node."""
        now = self.clock()
        nodes = {n["metadata"]["name"]: n for n in state.nodes}
        for name, node in nodes.items():
            if node_ready(node):
                self._not_ready_since.pop(name, None)
            else:
                self._not_ready_since.setdefault(name, now)
        grace = self.node_failure_grace
        failed_nodes = {n for n, t in self._not_ready_since.items() if now - t >= grace}
        for name in list(self._not_ready_since):
            if name not in nodes:
                self._not_ready_since.pop(name)
        broken: dict[str, str] = {}
        members: dict[str, list[str]] = defaultdict(list)
        for f in facts.values():
            if not f.ours or f.terminal:
                continue
            gid = f.gang
            members[gid].append(f.key)
            where = f.node
            if where is None or f.deleting:
                continue
            if where not in nodes:
                broken[gid] = f"node {where} disappeared"
            elif where in failed_nodes:
                broken[gid] = f"node {where} is not ready"
        for gid, why in sorted(broken.items()):
            log.warning("cycle=%d gang %s: %s; restarting the whole gang", self.cycle, gid, why)
            # Forced: no kubelet will confirm the deletion of pods on a dead node.
            self._deleting(members[gid])
            self.binder.delete_pods(members[gid], NODE_FAILURE_REASON, why, force=True)
        return sorted(broken)

    @staticmethod
    def _partial_gangs(facts: Mapping[str, PodFacts], skip: set[str]) -> dict[str, list[str]]:
        """Gangs with some, but fewer than their gang size, live pods bound -> those pods.

        Left by a crash between the bindings (or evictions) of one gang, or by a member deleted
        by hand: the bound part holds its GPUs without doing work until the gang is completed
        or restarted (`_complete`). Assumed bindings count as bound, so a gang this process is
        binding is whole; gangs in `skip` (restarting, being rolled back) are left alone.
        """
        bound: dict[str, list[str]] = defaultdict(list)
        size: dict[str, int] = {}
        for f in facts.values():
            if not f.ours or f.terminal or f.deleting or not f.node or not f.gang_label:
                continue
            bound[f.gang].append(f.key)
            size[f.gang] = f.size
        return {g: keys for g, keys in bound.items() if len(keys) < size[g] and g not in skip}

    def _complete(
        self,
        partial: Mapping[str, list[str]],
        facts: Mapping[str, PodFacts],
        decision: Decision,
        held: Mapping[str, str],
        waiting: Mapping[str, str],
        report: CycleReport,
    ) -> dict[str, str]:
        """Complete partly bound gangs where the core found room for their rest; restart the
        others whole. Returns rests that must not be bound (a same-node gang's rest placed on
        another node).

        The unbound pods of a partly bound gang are offered to the core as `<gang>#rest`, on
        the GPU type the bound pods hold (snapshot.py); the core counts the bound pods' GPUs as
        taken and places the rest in what is free. When that placement is bound (phase 8) the
        gang is whole again and nothing restarts. The gang restarts (its bound pods deleted,
        the operator recreates them) when the core says the rest does not fit, when the rest
        of a same-node gang would land on another node, or when the rest has not been offered
        for `partial_grace` seconds (pods missing, invalid). A rest waiting for preemption
        victims or a MIG reconfiguration keeps waiting.
        """
        now = self.clock()
        for gid in [g for g in self._partial_since if g not in partial]:
            del self._partial_since[gid]
        placed = {p.gang_id: p for p in decision.placements}
        refused = {p.gang_id: p.message for p in decision.pending}
        blocked: dict[str, str] = {}
        restart: dict[str, str] = {}
        for gid, keys in sorted(partial.items()):
            since = self._partial_since.setdefault(gid, now)
            rest = f"{gid}#rest"
            nodes = {facts[k].node for k in keys if k in facts}
            topology = pods.topology(facts[keys[0]].pod) if keys[0] in facts else None
            if rest in placed and rest not in held:
                where = {r.node for r in placed[rest].replicas}
                if topology is Topology.SAME_NODE and not where <= nodes:
                    blocked[rest] = (
                        f"{PendingReasonText.GANG}: restarting (rest fits only elsewhere)"
                    )
                    restart[gid] = "its rest fits only on another node than its bound pods"
                    continue
                log.info(
                    "cycle=%d gang %s: %d pod(s) bound, completing it with %d more",
                    self.cycle, gid, len(keys), len(placed[rest].replicas),
                )  # fmt: skip
                report.completed.append(gid)
            elif rest in held or rest in waiting:
                continue
            elif rest in refused:
                restart[gid] = f"the rest of the gang does not fit ({refused[rest]})"
            elif now - since >= self.partial_grace:
                restart[gid] = f"its other pods were not schedulable for {self.partial_grace:.0f}s"
        for gid, why in sorted(restart.items()):
            why = f"{len(partial[gid])} of its pods run without the rest of the gang; {why}"
            log.warning("cycle=%d gang %s: %s; restarting the whole gang", self.cycle, gid, why)
            self._deleting(partial[gid])
            self.binder.delete_pods(partial[gid], GANG_INCOMPLETE_REASON, why)
            report.restarted.append(gid)
            self._partial_since.pop(gid, None)
        return blocked

    def _deleting(self, keys: Sequence[str]) -> None:
        """Remember pods this process deletes, until the watch shows them gone."""
        until = self.clock() + self.node_failure_grace + 30.0
        self._being_deleted.update(dict.fromkeys(keys, until))

    @staticmethod
    def _victims_remaining(state: CachedState, facts: Mapping[str, PodFacts]) -> set[str]:
        """Gangs this process preempted whose evicted pods the watch still shows: the operator
        recreates an evicted worker under the same name at once, and that new pod beside the
        old members still shown bound is not the rest of a partly bound gang."""
        out: set[str] = set()
        for nomination in state.nominations.values():
            for key, uid in nomination.victims:
                f = facts.get(key)
                if f is not None and f.pod["metadata"].get("uid") == uid:
                    out.add(f.gang)
        return out

    def _members_deleting(self, facts: Mapping[str, PodFacts]) -> set[str]:
        """Gangs with a pod this process is deleting whose deletion the watch has not shown
        yet: neither partly bound (to complete) nor to restart again."""
        now = self.clock()
        out: set[str] = set()
        for key, until in list(self._being_deleted.items()):
            f = facts.get(key)
            if until < now or f is None or f.deleting:
                del self._being_deleted[key]
            else:
                out.add(f.gang)
        return out

    def _heads(
        self, view: ClusterView, state: CachedState
    ) -> tuple[list[PendingGang], dict[str, str]]:
        waiting = {gid: f"{PendingReasonText.GANG}: {why}" for gid, why in view.held.items()}
        mig_waits = {gid: node for node, req in state.mig_requests.items() for gid in req.gangs}
        offered: list[PendingGang] = []
        for pg in view.pending:
            gid = pg.gang.id
            if gid in state.nominations:
                waiting[gid] = PREEMPTING_MESSAGE
            elif gid in mig_waits:
                waiting[gid] = (
                    f"{PendingReasonText.MIG}: waiting for MIG reconfiguration of "
                    f"node {mig_waits[gid]}"
                )
            else:
                offered.append(pg)
        return offered, waiting

    def _cap_identical(
        self, offered: list[PendingGang], snapshot: Snapshot
    ) -> tuple[list[PendingGang], dict[str, str]]:
        """Offer the core only as many of a set of identical gangs as could fit, plus one.

        Gangs equal in everything but their id (1,000 single-GPU pods, say) are
        interchangeable, and the core places them in id order; a gang that needs `k` whole
        GPUs can be admitted at most `free // k` times, where `free` counts the GPUs of its
        acceptable types on schedulable nodes that no running or assumed pod holds (a bound
        that only overestimates: placement rules never add room). Offering the rest would
        only make the core explain again, each cycle, why each of them does not fit, which
        for 900 waiting gangs was most of a decision. The one extra gang offered stays
        pending and its reason is copied to those held back (phase 9), which are offered
        again next cycle. Not capped: MIG and elastic gangs, rests of partly bound gangs, and
        gangs that could preempt (a preempting gang frees GPUs that others may then use).
        Returns what to offer, in the original order, and gang -> the identical gang whose
        reason it takes.
        """
        if len(offered) <= self.cap_identical_above:
            return offered, {}
        whole, slices = snapshot.occupied()
        held = whole | {(n, g) for n, g, _ in slices}
        free: dict[str, int] = defaultdict(int)
        for node in snapshot.nodes:
            if node.schedulable:
                free[node.gpu_type] += sum((node.name, g.index) not in held for g in node.gpus)
        lowest = min((r.priority for r in snapshot.running if r.preemptible), default=None)
        classes: dict[Gang, list[PendingGang]] = defaultdict(list)
        for pg in offered:
            classes[replace(pg.gang, id="")].append(pg)
        keep: set[str] = set()
        capped: dict[str, str] = {}
        for shape, members in classes.items():
            limit = len(members)
            may_preempt = (
                self.policy.allow_preemption and lowest is not None and lowest < shape.priority
            )
            rest = members[0].gang.id.endswith("#rest")  # phase 7 needs the core's answer
            fixed = shape.mig_profile is None and shape.replicas_min == shape.replicas_max
            if fixed and not may_preempt and not rest:
                room = sum(free[t] for t in set(shape.type_names()))
                limit = room // (shape.gpus_per_replica * shape.replicas_min) + 1
            keep.update(pg.gang.id for pg in members[:limit])
            capped.update((pg.gang.id, members[limit - 1].gang.id) for pg in members[limit:])
        return [pg for pg in offered if pg.gang.id in keep], capped

    def _preempt(
        self, decision: Decision, view: ClusterView, state: CachedState, report: CycleReport
    ) -> dict[str, str]:
        """Evict each preemptor's victim gangs through the Eviction API, all of them or none.

        The victims' PodDisruptionBudgets are read once per cycle and the preemption goes ahead
        only if they allow every victim pod of the preemptor to go (`disruption.gang_blocked`);
        otherwise nothing is evicted, the preemptor waits with the budget as its reason and
        its victims are not offered to the core as preemptible for `budget_retry` seconds, so
        the next decision looks for other room. If the API still refuses an eviction midway
        (another client used the budget since the check), evictions stop there; see
        disruption.py for that residual race.
        """
        held: dict[str, str] = {}
        victims_of: dict[str, list[str]] = defaultdict(list)
        for p in decision.preemptions:
            victims_of[p.for_gang].append(p.gang_id)
        if not victims_of:
            return held
        current = {pods.pod_key(p): p for p in state.pods}
        keys_of = {
            gang: [k for v in victims for k in view.running_pods.get(v, ())]
            for gang, victims in victims_of.items()
        }
        try:
            budgets = self.binder.list_budgets(
                {k.partition("/")[0] for keys in keys_of.values() for k in keys}
            )
        except Exception as exc:  # no budgets known: no eviction this cycle
            log.warning("cycle=%d cannot read PodDisruptionBudgets: %s", self.cycle, exc)
            for gang in victims_of:
                held[gang] = f"{PendingReasonText.BUDGET}: cannot read PodDisruptionBudgets"
            return held
        spent: dict[str, int] = {}
        until = self.clock() + self.budget_retry
        for gang, victims in sorted(victims_of.items()):
            keys = keys_of[gang]
            why = gang_blocked([current[k] for k in keys if k in current], budgets, spent)
            if why is not None:
                message = (
                    f"{PendingReasonText.BUDGET}: cannot preempt "
                    f"{', '.join(sorted(victims))}: {why}"
                )
                log.info("cycle=%d gang %s: %s", self.cycle, gang, message)
                self._budget_blocked.update(dict.fromkeys(victims, until))
                self._blocked_preemptors[gang] = (message, until)
                held[gang] = message
                continue
            message = f"preempted by higher-priority gang {gang}"
            # The victims' uids before the evictions: the operator recreates an evicted worker
            # under the same name while the other evictions are still going on.
            uids = self.cache.uids(keys)
            results = self.binder.evict_pods(keys, names.PREEMPTED_REASON, message)
            refused = {k: e for k, e in results.items() if e is not None}
            evicted = frozenset(k for k, e in results.items() if e is None)
            self.cache.nominate(gang, evicted, uids)
            report.preempted.extend(victims)
            held[gang] = PREEMPTING_MESSAGE
            if refused:
                log.warning(
                    "cycle=%d gang %s: %d of %d evictions refused after the budget check (%s)",
                    self.cycle, gang, len(refused), len(keys), sorted(refused.values())[0],
                )  # fmt: skip
                self._budget_blocked.update(dict.fromkeys(victims, until))
                held[gang] = (
                    f"{PendingReasonText.BUDGET}: {len(refused)} of {len(keys)} evictions "
                    f"refused: {sorted(refused.values())[0]}"
                )
                self._blocked_preemptors[gang] = (held[gang], until)
        return held

    def _without_blocked_victims(self, view: ClusterView) -> ClusterView:
        """`view` with gangs a budget protected recently offered as not preemptible."""
        now = self.clock()
        for gid in [g for g, t in self._budget_blocked.items() if t < now]:
            del self._budget_blocked[gid]
        for gid in [g for g, (_, t) in self._blocked_preemptors.items() if t < now]:
            del self._blocked_preemptors[gid]
        if not self._budget_blocked:
            return view
        snap = view.snapshot
        running = tuple(
            replace(g, preemptible=False) if g.id in self._budget_blocked else g
            for g in snap.running
        )
        return replace(
            view,
            snapshot=Snapshot(snap.catalog, snap.nodes, running, snap.constrained_demand),
        )

    def _repartition(
        self, decision: Decision, view: ClusterView, state: CachedState, report: CycleReport
    ) -> dict[str, str]:
        if not decision.repartitions:
            return {}
        changes: dict[str, dict[int, MigLayout | None]] = defaultdict(dict)
        for r in decision.repartitions:
            changes[r.node][r.gpu] = r.new_layout
        held: dict[str, str] = {}
        in_use = {
            label
            for n in state.nodes
            if (label := (n["metadata"].get("labels") or {}).get(names.MIG_CONFIG_LABEL))
            and label.startswith(CONFIG_PREFIX)
        }
        for node_name, gpus in sorted(changes.items()):
            node = view.snapshot.node(node_name)
            layouts = [gpus.get(g.index, g.mig_layout) for g in node.gpus]
            users = frozenset(
                p.gang_id
                for p in decision.placements
                if any(r.node == node_name and r.gpus[0] in gpus for r in p.replicas)
            )
            try:
                config = self.mig.request(node_name, layouts, in_use)
            except Exception as exc:
                log.warning("cycle=%d MIG request for %s failed: %s", self.cycle, node_name, exc)
                config = ""
            for gid in users:
                held[gid] = (
                    f"{PendingReasonText.MIG}: waiting for MIG reconfiguration of node {node_name}"
                )
            if config:
                in_use.add(config)
                self.cache.request_mig(node_name, config, users)
                report.mig_requests[node_name] = config
        return held

    def _bind_all(
        self,
        placements: Sequence[GangPlacement],
        by_id: Mapping[str, PendingGang],
        report: CycleReport,
    ) -> None:
        """Assume every placed gang and start its bindings in one parallel batch.

        The batch runs in the background (pipelining): the next cycle can place more gangs
        while these bindings are in flight, because the assumptions already count their
        GPUs. `_settle_bindings` later reports each gang bound, or rolls it back whole.
        """
        per_gang: dict[str, list[BindRequest]] = {}
        for placement in placements:
            pg = by_id[placement.gang_id]
            if len(placement.replicas) > len(pg.pods):
                report.bind_failures[pg.gang.id] = "placement has more replicas than pods"
                continue
            # Replica i goes to the pod of rank i; an elastic gang may get fewer than its pods.
            per_gang[pg.gang.id] = [
                BindRequest(key, placement.replicas[i].node, bind_annotations(placement, i))
                for i, key in enumerate(pg.pods[: len(placement.replicas)])
            ]
        requests = [r for rs in per_gang.values() for r in rs]
        if requests:
            # Assume first: the next cycle counts these GPUs even before the watch shows the
            # pods, and even before the bindings have been answered.
            for r in requests:
                self.cache.assume(r.pod_key, r.node, r.annotations)
            future = self.binder.bind_async(requests)
            report.sent = len(requests)
            future.add_done_callback(lambda _: self.cache.changed.set())
            self._inflight.append((per_gang, future))
        self._settle_bindings(report)

    def _settle_bindings(self, report: CycleReport, wait: float | None = None) -> None:
        """Report the gangs of finished binding batches bound; roll back a gang with any
        failed binding: forget its assumptions and delete the pods that were bound."""
        if wait is not None and self._inflight:
            futures.wait([f for _, f in self._inflight], timeout=wait)
        still: list[tuple[dict[str, list[BindRequest]], Future[dict[str, str | None]]]] = []
        rollback: list[str] = []
        for per_gang, future in self._inflight:
            if not future.done():
                still.append((per_gang, future))
                continue
            try:
                results = future.result()
            except Exception as exc:  # the writer itself failed: nothing is known to be bound
                results = {
                    r.pod_key: f"binding batch failed: {exc}"
                    for rs in per_gang.values()
                    for r in rs
                }
            for gid, rs in per_gang.items():
                failed = [results[r.pod_key] for r in rs if results.get(r.pod_key) is not None]
                if not failed:
                    report.bound.append(gid)
                    continue
                for r in rs:
                    self.cache.forget(r.pod_key)
                bound = [r.pod_key for r in rs if results.get(r.pod_key) is None]
                log.warning(
                    "cycle=%d gang %s: %d binding(s) failed (%s); removing its %d bound pod(s)",
                    self.cycle, gid, len(failed), failed[0], len(bound),
                )  # fmt: skip
                rollback.extend(bound)
                report.bind_failures[gid] = failed[0] or "failed"
        self._inflight = still
        if rollback:
            self._deleting(rollback)
            self.binder.delete_pods(
                rollback, "GangBindingFailed", "another pod of the gang could not be bound"
            )

    def _explain(self, messages: Mapping[str, str], view: ClusterView) -> None:
        members: dict[str, tuple[str, ...]] = dict(view.held_pods)
        members.update({pg.gang.id: pg.pods for pg in view.pending})
        current = view.facts
        # A reason is written once it has held for `explain_delay`: while a pool frees up,
        # each cycle gives the gangs still waiting a new, short-lived reason, and a status
        # write per waiting pod would compete with the bindings for the API server.
        # While bindings are in flight a reason must hold `busy_explain_delay` longer: in a
        # burst (a pool uncordoned under 1,000 waiting pods) the reason of the pods still
        # waiting holds for seconds while they are being placed, and a status write for each
        # of them (through the generated client, ~3 ms of CPU each) delayed the bindings.
        # A gang still waiting when the burst is over gets its reason then.
        now = self.clock()
        delay = self.explain_delay + (self.busy_explain_delay if self._inflight else 0.0)
        seen = self._reasons
        self._reasons = {
            g: seen[g] if g in seen and seen[g][0] == m else (m, now) for g, m in messages.items()
        }
        writes: dict[str, str] = {}
        for gid, message in messages.items():
            if now - self._reasons[gid][1] < delay:
                continue
            for key in members.get(gid, ()):
                f = current.get(key)
                if f is not None and scheduled_message(f.pod) != message:
                    writes[key] = message
        if writes:
            self.binder.mark_pending(writes)

    # --- running -------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Cycle whenever the cache changes (batched by `debounce_s`), at least every
        `resync_s`."""
        log.info("scheduler %r started", names.SCHEDULER_NAME)
        while not stop.is_set():
            self.cache.changed.wait(self.settings.resync_s)
            if stop.is_set():
                break
            stop.wait(self.settings.debounce_s)
            self.cache.changed.clear()
            if not self.may_act():
                # Paused past the Lease (or cut off from it): a standby may lead by now, so no
                # decision until the keeper renews it or gives up and stops the process.
                log.warning("lease not renewed within its duration; not scheduling")
                self.cache.changed.set()
                stop.wait(0.1)
                continue
            try:
                metrics.record(self.run_cycle())
            except Exception:  # keep the scheduler alive; the next cycle starts from the cluster
                log.exception("cycle=%d failed", self.cycle)
                stop.wait(1.0)
        # Let the last batch be answered so a failed gang is rolled back before the process
        # goes (a crash instead leaves it to the partly-bound-gang handling of the next run).
        self._settle_bindings(CycleReport(self.cycle), wait=5.0)


class PendingReasonText:
    """Reason codes the adapter adds to the core's, in the same `Reason: message` form."""

    MIG = "WaitingForMIGReconfiguration"
    GANG = "GangNotReady"
    PREEMPTING = "WaitingForPreemption"
    QUEUED = "QueuedBehindIdenticalGang"
    BUDGET = "PreemptionBlockedByDisruptionBudget"


PREEMPTING_MESSAGE = (
    f"{PendingReasonText.PREEMPTING}: waiting for preempted lower-priority gangs to exit"
)
