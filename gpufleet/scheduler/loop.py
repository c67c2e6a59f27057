"""The live scheduling loop: cluster cache -> snapshot -> core decision -> API writes.

`run_cycle()` is one pass in numbered phases, each timed and logged with the cycle id:
  1 snapshot  build the core's input from the cache (assumed bindings included)
  2 heal      restart, as whole gangs, gangs with a pod on a failed or vanished node and
              gangs left partly bound (a crash between two bindings or evictions)
  3 heads     offer pending gangs to the core, except those waiting for preemption victims to
              exit or for a MIG reconfiguration they need
  4 decide    `place()` from the core; every placement decision comes from there
  5 preempt   evict victim gangs whole; the preemptor waits until their pods are gone
  6 mig       ask nodes for the core's new MIG layouts; the gangs needing them wait
  7 bind      assume every pod of a gang, bind them all; if any binding fails, forget the
              gang's assumptions and delete the pods that were bound (never a partial gang)
  8 explain   write the core's pending reason into each waiting pod's PodScheduled condition
A failed snapshot or decision logs and waits for the next cycle instead of raising.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from gpufleet.core.decision import Decision, GangPlacement
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import Snapshot
from gpufleet.model.gpus import Catalog
from gpufleet.model.mig import MigLayout
from gpufleet.scheduler import metrics, names, pods
from gpufleet.scheduler.binder import Binder, BindRequest, scheduled_message
from gpufleet.scheduler.cache import CachedState, SchedulerCache
from gpufleet.scheduler.mig import CONFIG_PREFIX, MigRequester
from gpufleet.scheduler.nodes import node_ready
from gpufleet.scheduler.snapshot import ClusterView, PendingGang, build_view

log = logging.getLogger("gpufleet.scheduler")

Decide = Callable[[Snapshot, Sequence[Gang], Policy], Decision]

NODE_FAILURE_REASON = "NodeFailure"
GANG_INCOMPLETE_REASON = "GangIncomplete"


@dataclass
class CycleReport:
    """What one cycle did; returned for tests and logged."""

    cycle: int
    bound: list[str] = field(default_factory=list)  # gang ids
    pending: dict[str, str] = field(default_factory=dict)  # gang id -> message
    preempted: list[str] = field(default_factory=list)  # victim gang ids
    mig_requests: dict[str, str] = field(default_factory=dict)  # node -> config name
    restarted: list[str] = field(default_factory=list)  # gangs moved off failed nodes
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
        decide: Decide = place,
        node_failure_grace: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cache = cache
        self.binder = binder
        self.mig = mig
        self.catalog = catalog
        self.policy = policy
        self.decide = decide
        self.node_failure_grace = node_failure_grace
        self.clock = clock
        self.cycle = 0
        self._not_ready_since: dict[str, float] = {}

    # --- the cycle -----------------------------------------------------------------------------

    def run_cycle(self) -> CycleReport:
        self.cycle += 1
        report = CycleReport(self.cycle)
        started = self.clock()

        def phase(name: str, since: float) -> float:
            now = self.clock()
            report.timings[name] = now - since
            return now

        # 1 snapshot
        try:
            state = self.cache.state()
            view = build_view(self.catalog, state.nodes, state.pods, state.mig_configs)
        except Exception as exc:  # a bad object must not stop scheduling: retry next cycle
            log.exception("cycle=%d snapshot failed; retrying next cycle", self.cycle)
            report.error = f"snapshot: {exc}"
            return report
        for key in view.problems:
            log.warning("cycle=%d pod %s holds GPUs its node does not have", self.cycle, key)
        t = phase("snapshot", started)

        # 2 heal
        report.restarted = self._heal(state)
        t = phase("heal", t)

        # 3 heads (gangs restarted just now are offered again once their pods are recreated)
        offered, waiting = self._heads(view, state)
        restarted = set(report.restarted)
        offered = [pg for pg in offered if pg.gang.id.split("#")[0] not in restarted]
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
        held = self._preempt(decision, view, report)
        t = phase("preempt", t)

        # 6 mig
        held |= self._repartition(decision, view, state, report)
        t = phase("mig", t)

        # 7 bind
        by_id = {pg.gang.id: pg for pg in offered}
        self._bind_all([p for p in decision.placements if p.gang_id not in held], by_id, report)
        t = phase("bind", t)

        # 8 explain
        messages = dict(waiting)
        for p in decision.pending:
            messages[p.gang_id] = f"{p.reason.value}: {p.message}"
        for gid in held:
            messages.setdefault(gid, held[gid])
        report.pending = messages
        # A gang still waiting for its own pods to be created says nothing: its count changes
        # with every pod and rewriting every member's condition each cycle costs more than it
        # tells.
        quiet = f"{PendingReasonText.GANG}: waiting for"
        loud = {g: m for g, m in messages.items() if not m.startswith(quiet)}
        self._explain(loud, view, offered, state)
        phase("explain", t)

        total = self.clock() - started
        if report.bound or report.preempted or report.mig_requests or report.restarted:
            log.info(
                "cycle=%d bound=%s preempted=%s mig=%s restarted=%s pending=%d in %.3fs (%s)",
                self.cycle, report.bound, report.preempted, sorted(report.mig_requests),
                report.restarted, len(messages), total,
                " ".join(f"{k}={v * 1000:.0f}ms" for k, v in report.timings.items()),
            )  # fmt: skip
        return report

    # --- phases --------------------------------------------------------------------------------

    def _heal(self, state: CachedState) -> list[str]:
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
        for pod in state.pods:
            if (pod.get("spec") or {}).get("schedulerName") != names.SCHEDULER_NAME:
                continue
            if pods.is_terminal(pod):
                continue
            gid = pods.gang_id(pod)
            members[gid].append(pods.pod_key(pod))
            where = pods.node_name(pod)
            if where is None or pod["metadata"].get("deletionTimestamp"):
                continue
            if where not in nodes:
                broken[gid] = f"node {where} disappeared"
            elif where in failed_nodes:
                broken[gid] = f"node {where} is not ready"
        for gid, why in sorted(broken.items()):
            log.warning("cycle=%d gang %s: %s; restarting the whole gang", self.cycle, gid, why)
            # Forced: no kubelet will confirm the deletion of pods on a dead node.
            self.binder.delete_pods(members[gid], NODE_FAILURE_REASON, why, force=True)
        partial = self._partial_gangs(state, set(broken))
        for gid, keys in sorted(partial.items()):
            why = f"{len(keys)} of its pods run without the rest of the gang"
            log.warning("cycle=%d gang %s: %s; restarting the whole gang", self.cycle, gid, why)
            self.binder.delete_pods(keys, GANG_INCOMPLETE_REASON, why)
        return sorted(set(broken) | set(partial))

    @staticmethod
    def _partial_gangs(state: CachedState, skip: set[str]) -> dict[str, list[str]]:
        """Gangs with some, but fewer than their gang size, live pods bound -> those pods.

        Left by a crash between the bindings (or evictions) of one gang, or by a member deleted
        by hand: the bound part would hold its GPUs without doing work, so the gang restarts
        whole. Assumed bindings count as bound, so a gang this process is binding is whole.
        """
        bound: dict[str, list[str]] = defaultdict(list)
        size: dict[str, int] = {}
        for pod in state.pods:
            spec = pod.get("spec") or {}
            if spec.get("schedulerName") != names.SCHEDULER_NAME or pods.is_terminal(pod):
                continue
            if pod["metadata"].get("deletionTimestamp") or not pods.node_name(pod):
                continue
            if not pods.pod_labels(pod).get(names.GANG_LABEL):
                continue
            gid = pods.gang_id(pod)
            bound[gid].append(pods.pod_key(pod))
            size[gid] = pods.gang_size(pod)
        return {g: keys for g, keys in bound.items() if len(keys) < size[g] and g not in skip}

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

    def _preempt(
        self, decision: Decision, view: ClusterView, report: CycleReport
    ) -> dict[str, str]:
        held: dict[str, str] = {}
        victims_of: dict[str, list[str]] = defaultdict(list)
        for p in decision.preemptions:
            victims_of[p.for_gang].append(p.gang_id)
        for gang, victims in sorted(victims_of.items()):
            keys: list[str] = []
            for victim in victims:
                keys.extend(view.running_pods.get(victim, ()))
            message = f"preempted by higher-priority gang {gang}"
            failed = self.binder.delete_pods(keys, names.PREEMPTED_REASON, message)
            if failed:
                log.warning("cycle=%d could not evict %s", self.cycle, failed)
            self.cache.nominate(gang, frozenset(keys))
            held[gang] = PREEMPTING_MESSAGE
            report.preempted.extend(victims)
        return held

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
        """Bind every placed gang in one parallel batch; roll back gangs with any failure."""
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
        if not requests:
            return
        # Assume first: the next cycle counts these GPUs even before the watch shows the pods.
        for r in requests:
            self.cache.assume(r.pod_key, r.node, r.annotations)
        results = self.binder.bind(requests)
        rollback: list[str] = []
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
        if rollback:
            self.binder.delete_pods(
                rollback, "GangBindingFailed", "another pod of the gang could not be bound"
            )

    def _explain(
        self,
        messages: Mapping[str, str],
        view: ClusterView,
        offered: Sequence[PendingGang],
        state: CachedState,
    ) -> None:
        members: dict[str, tuple[str, ...]] = dict(view.held_pods)
        members.update({pg.gang.id: pg.pods for pg in view.pending})
        current = {pods.pod_key(p): p for p in state.pods}
        writes: dict[str, str] = {}
        for gid, message in messages.items():
            for key in members.get(gid, ()):
                pod = current.get(key)
                if pod is not None and scheduled_message(pod) != message:
                    writes[key] = message
        if writes:
            self.binder.mark_pending(writes)

    # --- running -------------------------------------------------------------------------------

    def run(self, stop: threading.Event, resync: float = 2.0, debounce: float = 0.02) -> None:
        """Cycle whenever the cache changes (batched by `debounce`), at least every `resync`."""
        log.info("scheduler %r started", names.SCHEDULER_NAME)
        while not stop.is_set():
            self.cache.changed.wait(resync)
            if stop.is_set():
                break
            stop.wait(debounce)
            self.cache.changed.clear()
            try:
                metrics.record(self.run_cycle())
            except Exception:  # keep the scheduler alive; the next cycle starts from the cluster
                log.exception("cycle=%d failed", self.cycle)
                stop.wait(1.0)


class PendingReasonText:
    """Reason codes the adapter adds to the core's, in the same `Reason: message` form."""

    MIG = "WaitingForMIGReconfiguration"
    GANG = "GangNotReady"
    PREEMPTING = "WaitingForPreemption"


PREEMPTING_MESSAGE = (
    f"{PendingReasonText.PREEMPTING}: waiting for preempted lower-priority gangs to exit"
)
