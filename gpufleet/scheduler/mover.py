"""Moves carried out live: a running gang restarted whole on the new placement the core chose
(`Decision.moves`), with that placement reserved until its new pods are bound there.

PodDisruptionBudgets. A move deletes its pods rather than evicting them (a graceful restart
that the operator recreates at once), so the Eviction API never checks their budgets: the mover
does. Every cycle, after the snapshot, `protect` shows each gang the core could move (its
progress known) as not `disruptable` when a budget would not let all of its pods go now
(`disruption.gang_blocked`, the check preemptions make: a budget at disruptionsAllowed 0 over
any of its pods, say), so the core neither moves, evacuates nor preempts it; when the budgets
cannot be read, none of those gangs is disruptable that cycle.

A move goes in three steps, one per cycle that sees it:
1. `start` (after the bind phase): the budgets are read again (they change between the snapshot
   and the action) and a move one of them now forbids is skipped, with a log line and a
   `MoveBlockedByDisruptionBudget` Event on the job (the pods' controller, the TrainingJob:
   what `kubectl describe` shows its user) and on the scheduler's Lease; moves of one cycle
   draw on a shared budget in turn. A move whose recreated pods could not run on its new
   placement is skipped the same way (`MoveBlockedByNodeFilters`): they are made from the
   job's current pod template, with what the API server's RuntimeClass admission adds
   (runtime_class.py: the RuntimeClass read now, edited or not), which the old pods the
   core's placement was checked against may not have had (`_recreated`, `_unfit`); while the
   same pods run, for `unfit_recheck_s` (the setting `scheduler.move_unfit_recheck_s`), the
   gang's moves are kept to the nodes those pods could use (`protect`). Otherwise the gang's
   pods are marked (`gpufleet.io/disrupted-by: MoveByGpufleet`, the move's time) and deleted
   with their own grace period, SIGTERM first, so a job that checkpoints on a signal saves its
   progress; the operator counts the move in the job's status and, once every old pod is
   gone, recreates the gang (as after any gang restart). The new placement is reserved for
   the gang.
2. `hold` (every cycle, after the snapshot): the reserved GPUs are shown to the core as held by
   `<gang>#moving`, a running gang no one may preempt, so nothing else is placed there;
   GPUs the old pods still hold are not shown twice. What the gang's pods will ask of the
   reserved nodes' CPU, memory and ephemeral storage (read at `start` from the job's current
   pod template, which the operator makes the new pods from, else from the old pods:
   `_requests`) is kept from every pending gang the same way (`nominated.keep`), so that a
   gang placed beside the reservation meanwhile does not leave the moved gang short at its
   rebind. The GPUQueue status shows the reservation as `held`, not as a second use of the
   gang's queue (queue_objects.py).
3. `take` (before the decision): once the gang's recreated pods are all pending and no old pod
   is left, they are bound to the reserved placement (through the same assume-then-bind batch
   as the core's placements) instead of being offered to the core, if they pass the checks a
   placement of the core passes before it is bound (`hold` makes them that cycle):
   its nodes take pods (not cordoned, NotReady, switched off or being reconfigured), are among
   the nodes the pods may use (`Gang.allowed_nodes`: taints, node selector and affinity, one
   pod's CPU, memory and ephemeral storage) and have the CPU, memory and ephemeral storage the
   pods ask together to spare, less what waiting nominated gangs it may not take from and
   other moved gangs are promised there (`eligibility.misfit`, `eligibility.available`, as
   for nominated gangs: nominated.py).
   What they take is taken from the view's free resources, so the same cycle's placements on
   the node are checked against what is left (`eligibility.overcommitted`). A gang that fails
   the checks loses its reservation and is offered to the core, decided afresh: placed
   elsewhere, or pending with the core's reason (which names the taint or the resource),
   to which its pods add, while it stays pending for that reason, why the reservation was
   dropped (`explain`; once a later decision gives another reason, the text goes).
A move onto GPUs the same decision frees by evicting reclaim victims (core/evacuation.py: a
reclaim with moves) keeps its reservation while those victims exit (`Reservation.waits`): their
GPUs are not "taken", nor shown held twice, and the gang is bound once its old pods and those
victims' pods are all gone (the wait allows the longer of their grace periods). Meanwhile the
victims stand for the moved gang (`held`): shown at its priority if below, charged to its queue
(the GPUQueue status counts them in their own: `as_charged`), with no work left to lose, so
that only a gang that could preempt the moved gang were it running there (of higher priority;
with queues, of its queue, or a reclaim of quota its queue borrows) is given their GPUs. Such
a decision evicts them again (already going: nothing changes) and the mover drops the
reservation at once (`give_way`): the moved gang, which would not be bound there, is decided
afresh, and its pods say which gang preempted those victims. Its old pods, while they exit,
stand for the gang it was moved for (shown at its priority: nominated.py) and are charged to
that gang's queue (`held`; counted in their own by the GPUQueue status too): the moved gang's
queue is charged once, for its new placement, so it does not look borrowing for the length of
the move and have a gang reclaimed for that.
A reservation ends when its gang is bound, when something else holds one of its GPUs (a pod of
another scheduler, say) or a node of it is gone, when its recreated pods fail the checks,
`move_reserve_s` after its old pods are gone, or when they are still there `move_reserve_s`
plus twice their grace period after the move began: the gang is then placed like any other. It
is kept in memory only: after a scheduler restart the recreated gang is placed by the core (the
move is still counted by the operator, and the per-hour limit is read from the pods).

A gang the decision places on GPUs of gangs it moves for it (`Move.for_gang` of a placed gang:
core/evacuation.py's reclaim with moves) is not bound that cycle (`waits_for_moves`); once the
moves are started it is nominated on the moved gangs' deleted pods, beside its reclaim victims'
pods (victims.py), and is not offered again until all of them are gone, nor for longer than
the moved gangs' reservations wait for their old pods: no decision is made for it while they
linger; the GPUs of its placement are held for it meanwhile, and it is bound there once they
are gone, if they are still free (nominated.py). If one of those moves does not go ahead (a
budget refused it, the budgets could not be read), its GPUs will not be free: nothing is held,
it waits only for the pods that are going (its victims', those of its other moves), if any,
then for the next decision. The moves made for a gang whose own preemption did not go ahead
are not started: it is decided again.

Steps 2 and 3 are pure functions (`held`, `taken`) over the reservations, which the mover
replaces whole rather than changing in place: the admin API's what-if, beside the scheduler,
reads `reservations` from its own threads and takes both steps without keeping anything.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial

from gpufleet.core.decision import Decision, GangPlacement, Move
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, Snapshot
from gpufleet.model.contract import names
from gpufleet.model.contract.moves import Checkpoint, move_marker
from gpufleet.model.contract.reasons import PendingNote, SchedulerReason, WaitReason, pending_text
from gpufleet.model.mig import MigPlacement
from gpufleet.scheduler.binder import Binder, JobGone
from gpufleet.scheduler.cache import RESERVED_SUFFIX, SchedulerCache
from gpufleet.scheduler.cluster_view import ClusterView, PendingGang
from gpufleet.scheduler.cycle_report import CycleReport
from gpufleet.scheduler.decision_view import blocked_by_budget, budget_protected
from gpufleet.scheduler.deletions import Deletions
from gpufleet.scheduler.disruption import Obj
from gpufleet.scheduler.eligibility import (
    Constraints,
    NodeFacts,
    Resources,
    asks,
    available,
    constraints,
    deduct,
    misfit,
    pod_requests,
    static_rejection,
)
from gpufleet.scheduler.eligibility import Reservation as Kept
from gpufleet.scheduler.heal import Notify
from gpufleet.scheduler.nominated import NOTHING_RUNS, keep, refit
from gpufleet.scheduler.pods import pod_annotations
from gpufleet.scheduler.runtime_class import admitted, defaulted, operator_made

log = logging.getLogger("gpufleet.scheduler")

# A gang placed on the GPUs of gangs moved for it (a reclaim with moves: core/evacuation.py).
MOVED_FOR_MESSAGE = pending_text(
    SchedulerReason.PREEMPTING, "waiting for the gangs moved to make room for it to exit"
)
MOVE_BLOCKED = "MoveBlockedByDisruptionBudget"  # Event reason of a move a budget stopped
# Event reason of a move not started because its recreated pods could not run on its new
# placement (`_unfit`: their template or RuntimeClass changed since the old pods).
MOVE_UNFIT = "MoveBlockedByNodeFilters"

# Posts an Event about an object: (its reference as an Event's involvedObject, type, reason,
# message).
ObjectNotify = Callable[[Mapping[str, str], str, str, str], None]


def waits_for_moves(decision: Decision) -> dict[str, str]:
    """Gangs the decision places on GPUs of gangs it moves for them (`Move.for_gang` of a
    placed gang: core/evacuation.py's reclaim with moves) -> why they wait: they are not bound
    this cycle. Once the moves are started, `GangMover.start` nominates such a gang on the
    moved gangs' deleted pods beside its victims' (`VictimEvictor`): it is not offered again
    until all of them are gone."""
    return {gang: MOVED_FOR_MESSAGE for gang in _moves_for_placed(decision)}


def _moves_for_placed(decision: Decision) -> dict[str, list[Move]]:
    """Gang placed by the decision -> the moves it makes for it, for the gangs with any."""
    placed = decision.admitted_ids
    out: dict[str, list[Move]] = {}
    for m in decision.moves:
        if m.for_gang is not None and m.for_gang in placed:
            out.setdefault(m.for_gang, []).append(m)
    return out


def job_reference(pod: Obj) -> dict[str, str]:
    """What a gang's Event is about, as an involvedObject: the pod's controller (the
    TrainingJob that owns the worker), else the pod itself (a gang of bare pods)."""
    meta = pod["metadata"]
    namespace = meta.get("namespace", "default")
    for owner in meta.get("ownerReferences") or []:
        if owner.get("controller"):
            return {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["name"],
                "namespace": namespace,
                "uid": owner["uid"],
            }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": meta["name"],
        "namespace": namespace,
        "uid": meta.get("uid", ""),
    }


@dataclass(frozen=True, slots=True)
class Reservation:
    placement: GangPlacement  # gang_id: the moved gang
    old: frozenset[tuple[str, str]]  # (pod key, uid) of the pods deleted for the move
    running: RunningGang  # the gang as it ran (priority, queue)
    # Until when the old pods may take to go (their grace period, and as long again to be
    # seen gone): a pod stuck terminating must not keep the GPUs reserved for ever.
    exit_by: float
    expires: float | None = None  # set once the old pods are gone
    # What one of its pods asks of its node (CPU, memory, ephemeral storage), read from its
    # job's current pod template (else its old pods: `GangMover._requests`): kept on the
    # reserved nodes while the old pods exit (`held`).
    requests: Resources = field(default_factory=Resources)
    # (pod key, uid) of the pods of reclaim victims evicted in the move's decision on GPUs of
    # the new placement (core/evacuation.py): those GPUs are the move's once they exit, not
    # taken by another gang; the gang is bound once they are gone too.
    waits: frozenset[tuple[str, str]] = frozenset()
    # The gang the move makes room for (`Move.for_gang`: a reclaim with moves), which waits
    # for the old pods: while they exit they stand for it (`held`).
    for_gang: str | None = None

    def asks(self) -> dict[str, Resources]:
        """Node -> what the gang's pods will ask of it on the reserved placement."""
        out: dict[str, Resources] = {}
        for replica in self.placement.replicas:
            out[replica.node] = out.get(replica.node, Resources()) + self.requests
        return out


@dataclass(frozen=True, slots=True)
class UnfitAsk:
    """What a gang's recreated pods would ask of nodes, found unfit for a move's placement
    (`_unfit`), kept while the same pods run (`pods`), until `until`."""

    pods: frozenset[tuple[str, str]]  # (pod key, uid) of the gang's pods then
    ask: Constraints | None  # None: the API server would refuse the pods anywhere
    until: float


def _pods(keys: Sequence[str], uids: Mapping[str, str]) -> frozenset[tuple[str, str]]:
    return frozenset((k, uids[k]) for k in keys if k in uids)


def _static_misfit(ask: Constraints, node: NodeFacts | None) -> str | None:
    """Why pods asking `ask` may not use `node` by its taints, labels or name (filter:
    detail); None when they may or the node is not known (`held` drops a reservation on a
    node gone). Cordoning is not judged here: it is checked at the rebind. `node`: the facts
    the cycle's view read of it (`ClusterView.node_facts`), not read again."""
    if node is None:
        return None
    found = static_rejection(ask, node, cordon=False)
    return None if found is None else f"{found[0]}: {found[1]}"


def _unfit(move: Move, spec: dict[str, object] | str, view: ClusterView) -> str | None:
    """Why the recreated pods (`spec`, from `GangMover._recreated`) could not run on `move`'s
    new placement: the API server would refuse them, or a node of it has a taint they do not
    tolerate or does not match their node selector or required affinity (their job's template
    or RuntimeClass changed since the old pods were made, which the core's placement was
    checked against); None when they could."""
    if isinstance(spec, str):
        return spec
    ask = constraints({"spec": spec})
    for name in sorted({r.node for r in move.placement.replicas}):
        why = _static_misfit(ask, view.node_facts.get(name))
        if why is not None:
            return f"its recreated pods could not use {name} ({why})"
    return None


def _conflicts(
    replica: ReplicaPlacement,
    whole: set[tuple[str, int]],
    slices: set[tuple[str, int, MigPlacement]],
) -> bool:
    """Whether `replica` needs a GPU or MIG instance among those held."""
    for ix in replica.gpus:
        if (replica.node, ix) in whole:
            return True
        if replica.mig is None and any(n == replica.node and g == ix for n, g, _ in slices):
            return True
        if replica.mig is not None and (replica.node, ix, replica.mig) in slices:
            return True
    return False


class GangMover:
    """Starts the core's moves and keeps their new placements until the gangs are bound."""

    def __init__(
        self,
        cache: SchedulerCache,
        binder: Binder,
        deletions: Deletions,
        clock: Callable[[], float],
        reserve_s: float,
        unfit_recheck_s: float,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        notify: Notify | None = None,
        notify_on: ObjectNotify | None = None,
        pod_tolerations: Sequence[Obj] | None = None,
    ) -> None:
        self.cache = cache
        self.binder = binder
        self.deletions = deletions
        self.clock = clock
        self.reserve_s = reserve_s
        # How long the nodes a gang's recreated pods could not use are kept from its moves
        # (`protect`) before its template and RuntimeClass are read again at a move.
        self.unfit_recheck_s = unfit_recheck_s
        self.wall = wall
        self.notify = notify  # on the scheduler's Lease
        self.notify_on = notify_on  # on the moved gang's job
        # The tolerations the operator appends to every pod it makes (its setting
        # operator.pod_tolerations), for a move's recreated pods (`_recreated`); None when not
        # known (no operator in this process): the old pods' tolerations are kept instead.
        self.pod_tolerations = pod_tolerations
        # Never changed in place, only replaced whole: the admin API reads it from its own
        # threads (`reservations`).
        self._reserved: dict[str, Reservation] = {}
        # Gang -> why its reservation was dropped (or, for a nominated gang, why its hold was
        # given up beside the moves' reservations: `nominated.refit`), said on its pods while
        # it stays pending (`explain`): the core's reason alone would not say it had a
        # placement. Replaced whole, like `_reserved`: the admin API's what-if reads it
        # (`dropped`).
        self._dropped: dict[str, str] = {}
        # Gang whose reservation `give_way` dropped after the cycle's offer -> until when it
        # keeps its `_dropped` text while not pending (its recreated pods may be neither
        # offered nor waiting for a cycle or two: settling), until it is seen pending.
        self._given_away: dict[str, float] = {}
        # Gang -> the reason code of its pending message when its `_dropped` text was first
        # added (`explain`): once a later decision gives it another reason (it waits to preempt,
        # its queue is short, say), the text no longer explains its wait and is forgotten.
        # Replaced whole, like `_dropped` (`said`).
        self._said: dict[str, WaitReason | None] = {}
        # Exiting victim (or moved gang's old pods) -> its own queue, for those `hold` charged
        # to the queue of the gang they stand for (`held`): the GPUQueue status counts them in
        # their own (`as_charged`).
        self._own_queues: dict[str, str | None] = {}
        # Gang -> what its recreated pods would ask of nodes, when a move was not started
        # because they could not run on its new placement (`start`, `_unfit`): its moves are
        # kept to the nodes they could use (`protect`) while the same pods run, for
        # `unfit_recheck_s`. Replaced whole.
        self._unfit_asks: dict[str, UnfitAsk] = {}

    @property
    def reserved(self) -> dict[str, GangPlacement]:
        return {gid: r.placement for gid, r in self._reserved.items()}

    @property
    def reservations(self) -> Mapping[str, Reservation]:
        """The reservations now (a mapping no one changes: see `_reserved`)."""
        return self._reserved

    @property
    def dropped(self) -> Mapping[str, str]:
        """Gang -> why its move's reservation was dropped, for the gangs whose pending message
        says it (`explain`; a mapping no one changes: see `_dropped`)."""
        return self._dropped

    @property
    def said(self) -> Mapping[str, WaitReason | None]:
        """Gang -> the reason its pending message gave when its `dropped` text was first
        added (a mapping no one changes: see `_said`)."""
        return self._said

    def _budgets(
        self, gangs: Collection[str], view: ClusterView, cycle: int
    ) -> Sequence[Obj] | None:
        """The PodDisruptionBudgets of the namespaces of `gangs`' pods; None (logged) when they
        cannot be read."""
        namespaces = {k.partition("/")[0] for g in gangs for k in view.running_pods.get(g, ())}
        try:
            return self.binder.list_budgets(namespaces)
        except Exception as exc:
            log.warning("cycle=%d cannot read PodDisruptionBudgets, no move: %s", cycle, exc)
            return None

    def protect(self, view: ClusterView, cycle: int) -> ClusterView:
        """`view` with each gang the core could move (its progress known) not `disruptable`
        when a PodDisruptionBudget would not let all of its pods go now; all of them when
        the budgets cannot be read."""
        movable = [g.id for g in view.snapshot.running if g.progress is not None]
        if not movable:
            return view
        view = budget_protected(view, movable, self._budgets(movable, view, cycle))
        return self._kept_to_fit(view)

    def _kept_to_fit(self, view: ClusterView) -> ClusterView:
        """`view` with the demand of each gang a move was not started for because its
        recreated pods could not run there (`_unfit_asks`) allowed only the nodes those pods
        could use (none when the API server would refuse them), so that the core does not
        choose such a move again every cycle; forgotten once the gang's pods change or after
        `unfit_recheck_s`, when the next move reads its template and RuntimeClass again."""
        if not self._unfit_asks:
            return view
        now = self.clock()
        live: dict[str, UnfitAsk] = {}
        for gid, kept in self._unfit_asks.items():
            keys = view.running_pods.get(gid, ())
            if kept.until > now and keys and _pods(keys, self.cache.uids(keys)) == kept.pods:
                live[gid] = kept
        self._unfit_asks = live
        running: list[RunningGang] = []
        for gang in view.snapshot.running:
            unfit = live.get(gang.id)
            if unfit is None or gang.demand is None:
                running.append(gang)
                continue
            ask = unfit.ask
            fit = frozenset(
                n.name
                for n in view.snapshot.nodes
                if ask is not None and _static_misfit(ask, view.node_facts.get(n.name)) is None
            )
            if gang.demand.allowed_nodes is not None:
                fit &= gang.demand.allowed_nodes
            running.append(replace(gang, demand=replace(gang.demand, allowed_nodes=fit)))
        return replace(view, snapshot=replace(view.snapshot, running=tuple(running)))

    def start(
        self,
        decision: Decision,
        view: ClusterView,
        report: CycleReport,
        stopped: Collection[str] = (),
    ) -> dict[str, str]:
        """Delete each moved gang's pods (marked, with their grace period) unless a budget now
        forbids it; reserve its new placement. Moves made for a gang in `stopped` (placed, but
        its victims' evictions did not go ahead: it is decided again) are not started. Returns
        gang placed on GPUs of gangs moved for it -> why it waits (`_wait_for_moves`)."""
        self.give_way(decision, view, stopped, report.cycle)
        # A move onto GPUs the decision also repartitions waits: the new layout is applied
        # by the node, later (the next decisions see the gang where it runs and may move it).
        cut = {(r.node, r.gpu) for r in decision.repartitions}
        todo = [
            move
            for move in decision.moves
            if view.running_pods.get(move.gang_id)
            and move.gang_id not in self._reserved
            and not any((r.node, ix) in cut for r in move.placement.replicas for ix in r.gpus)
            and any(g.id == move.gang_id for g in view.snapshot.running)
        ]
        for move in [m for m in todo if m.for_gang is not None and m.for_gang in stopped]:
            log.info(
                "cycle=%d gang %s: move for %s not started: its preemption did not go ahead",
                report.cycle, move.gang_id, move.for_gang,
            )  # fmt: skip
        todo = [m for m in todo if m.for_gang is None or m.for_gang not in stopped]
        started: dict[str, Reservation] = {}
        # Read again: budgets change between the snapshot and now (another client's eviction,
        # a budget created since); moves of one cycle draw on a shared budget in turn.
        budgets = self._budgets([m.gang_id for m in todo], view, report.cycle) if todo else ()
        if budgets is None:  # unreadable (logged): no move this cycle
            todo, budgets = [], ()
        spent: dict[str, int] = {}
        for move in todo:
            gid = move.gang_id
            keys = view.running_pods[gid]
            running = next(g for g in view.snapshot.running if g.id == gid)
            why = blocked_by_budget(view, gid, budgets, spent)
            if why is not None:
                self._skipped(gid, view, move.placement.gpu_type, why, report.cycle)
                continue
            uids = self.cache.uids(keys)
            first = view.facts.get(keys[0])
            spec = None if first is None else self._recreated(first.pod, report)
            unfit = None if spec is None else _unfit(move, spec, view)
            if spec is not None and unfit is not None:
                self._skipped(gid, view, move.placement.gpu_type, unfit, report.cycle, MOVE_UNFIT)
                ask = None if isinstance(spec, str) else constraints({"spec": spec})
                unfit_ask = UnfitAsk(_pods(keys, uids), ask, self.clock() + self.unfit_recheck_s)
                self._unfit_asks = {**self._unfit_asks, gid: unfit_ask}
                continue
            checkpoint = None if first is None else Checkpoint.read(pod_annotations(first.pod))
            waits = self._victims_on(move, decision, view, stopped)
            # Its old pods' grace, or its victims' if longer: all must be gone before the bind.
            grace = max(
                [0.0 if checkpoint is None else checkpoint.grace_s]
                + [_grace(view, k) for k, _ in waits]
            )
            reservation = Reservation(
                move.placement,
                frozenset((k, uids[k]) for k in keys if k in uids),
                running,
                exit_by=self.clock() + 2 * grace + self.reserve_s,
                requests=Resources() if spec is None else pod_requests({"spec": spec}),
                waits=waits,
                for_gang=move.for_gang,
            )
            self._reserved = {**self._reserved, gid: reservation}
            started[gid] = reservation
            message = move_message(move)
            failed = self.binder.delete_marked(
                keys, move_marker(self.wall()), names.MOVED_REASON, message
            )
            self.deletions.remember(keys)
            report.moved.append(gid)
            log.info("cycle=%d gang %s: %s", report.cycle, gid, message)
            if failed:
                log.warning("cycle=%d gang %s: deleting %s failed", report.cycle, gid, failed)
        return self._wait_for_moves(decision, started, stopped, report.cycle)

    def give_way(
        self, decision: Decision, view: ClusterView, stopped: Collection[str], cycle: int
    ) -> None:
        """Drop the reservations whose exiting victims (`Reservation.waits`) the decision
        evicts again for another gang (its evictions gone ahead: not in `stopped`), one that
        could preempt the moved gang were it running there (`held`): that gang is given their
        GPUs, so the moved gang will not be bound there; it is decided afresh once its pods
        are recreated, and says why while it waits (`explain`)."""
        if not self._reserved:
            return
        takers = {p.gang_id: p.for_gang for p in decision.preemptions if p.for_gang not in stopped}
        dropped: dict[str, str] = {}
        for gid, reservation in self._reserved.items():
            given = sorted((v, takers[v]) for v in _exiting(reservation, view) if v in takers)
            if given:
                victim, taker = given[0]
                dropped[gid] = f"gang {taker} preempted {victim}, exiting from them, for itself"
        if not dropped:
            return
        for gid, why in dropped.items():
            log.info("cycle=%d moved gang %s: reservation dropped: %s", cycle, gid, why)
        self._dropped = {**self._dropped, **dropped_texts(self._reserved, dropped)}
        self._said = {g: c for g, c in self._said.items() if g not in dropped}
        until = self.clock() + self.reserve_s
        self._given_away = {**self._given_away, **dict.fromkeys(dropped, until)}
        self._reserved = {g: r for g, r in self._reserved.items() if g not in dropped}

    def _recreated(self, pod: Obj, report: CycleReport) -> dict[str, object] | str:
        """The pod spec of the moved gang's recreated pods (`pod` one of its old ones) as the
        API server will admit them, or why it would refuse them. Their job's current pod
        template (the operator builds the new pods from it, so a template changed since the
        old pods were made is seen) with the tolerations the operator appends and the API
        server's admission adds (`runtime_class.operator_made`, `defaulted`: a toleration the
        template has dropped since is not counted) and the overhead, node selector and
        tolerations of the RuntimeClass it names (`runtime_class.admitted`), read now, even
        when it is the old
        pods' own: one edited, or deleted and made again, under the same name since the old
        pods were made gives the new pods another (one read per move started; nothing is
        kept). When the RuntimeClass cannot be read: the old pod's overhead and none of its
        node selector or tolerations (logged); when the template cannot be read (a bare pod,
        the API unreachable: logged), the old pod's own spec; when the TrainingJob is gone or
        being deleted, why the move is pointless."""
        try:
            template = self.binder.job_template(job_reference(pod))
        except JobGone as exc:
            # Nothing would recreate the pods: a move would only hold its new GPUs idle.
            return f"nothing would recreate its pods ({exc})"
        except Exception as exc:
            log.warning(
                "cycle=%d cannot read the pod template of %s's job, its old pods' requests are "
                "kept: %s", report.cycle, pod["metadata"]["name"], exc,
            )  # fmt: skip
            template = None
        spec = None if template is None else template.get("spec")
        old = pod.get("spec") or {}
        if not isinstance(spec, dict):
            return dict(old)
        # The operator appends tolerations of its own (its settings') the template lacks;
        # the API server's admission adds more (runtime_class.py).
        spec = operator_made(spec, self.pod_tolerations, old)
        name = spec.get("runtimeClassName")
        if not name:
            made = admitted(spec, None)
            return made if isinstance(made, str) else defaulted(made)
        try:
            found = self.binder.runtime_class(str(name))
        except Exception as exc:
            log.warning(
                "cycle=%d cannot read RuntimeClass %s, %s's old overhead is kept: %s",
                report.cycle, name, pod["metadata"]["name"], exc,
            )  # fmt: skip
            return defaulted({**spec, "overhead": old.get("overhead")})
        made = admitted(spec, found)
        return made if isinstance(made, str) else defaulted(made)

    def _victims_on(
        self, move: Move, decision: Decision, view: ClusterView, stopped: Collection[str]
    ) -> frozenset[tuple[str, str]]:
        """(pod key, uid) of the pods of the decision's victims (their evictions gone ahead:
        not for a gang in `stopped`) that hold GPUs of `move`'s new placement."""
        target = {(r.node, ix) for r in move.placement.replicas for ix in r.gpus}
        victims = {p.gang_id for p in decision.preemptions if p.for_gang not in stopped}
        keys = [
            key
            for g in view.snapshot.running
            if g.id in victims and target & {(r.node, ix) for r in g.replicas for ix in r.gpus}
            for key in view.running_pods.get(g.id, ())
        ]
        uids = self.cache.uids(keys)
        return frozenset((k, uids[k]) for k in keys if k in uids)

    def _wait_for_moves(
        self,
        decision: Decision,
        started: Mapping[str, Reservation],
        stopped: Collection[str],
        cycle: int,
    ) -> dict[str, str]:
        """Nominate each gang placed on GPUs of gangs moved for it on the moved gangs' deleted
        pods, beside the victims' pods it waits for already (`VictimEvictor`): it is not offered
        again, so no decision is made for it, until all of them are gone; its placement's
        GPUs are held for it meanwhile, and it is then bound there if they are still free, else
        decided afresh (nominated.py). The wait lasts as long as the moved gangs' reservations
        wait for their old pods. Gang -> why it waits. When one of its moves did not go ahead
        (a budget, the budgets unreadable), its placement will not be free: nothing is held, it
        waits only for the pods that are going (its victims', those of its other moves that
        started), if any, then for the next decision. Gangs in `stopped` (their victims'
        evictions did not go ahead) keep the reason the evictions gave."""
        out: dict[str, str] = {}
        placements = {p.gang_id: p for p in decision.placements}
        for gang, moves in sorted(_moves_for_placed(decision).items()):
            if gang in stopped:
                continue
            moved = ", ".join(sorted(m.gang_id for m in moves))
            own = sorted(p.gang_id for p in decision.preemptions if p.for_gang == gang)
            others = placements[gang].waits_for
            going = [started[m.gang_id] for m in moves if m.gang_id in started]
            old = frozenset(pod for r in going for pod in r.old)
            wait_s = max((r.exit_by for r in going), default=0.0) - self.clock()
            left = [m.gang_id for m in moves if m.gang_id not in started]
            if left:
                when = " once the pods it waits for are gone" if old or own or others else ""
                message = pending_text(
                    SchedulerReason.PREEMPTING,
                    f"its GPUs are {', '.join(sorted(left))}'s, whose move to make room for it "
                    f"did not go ahead; it is decided again{when}",
                )
            else:
                parts = [f"{moved} (moved to make room for it)"]
                if own:
                    parts.append(f"{', '.join(own)} (preempted for it)")
                if others:
                    parts.append(f"{', '.join(others)} (preempted for another gang)")
                message = pending_text(
                    SchedulerReason.PREEMPTING,
                    f"waiting for {' and '.join(parts)} to exit from its GPUs",
                )
            # Its planned GPUs are held while it waits, unless a move did not go ahead.
            planned = None if left else placements[gang]
            self.cache.nominate_also(gang, old, message, wait_s, planned)
            log.info("cycle=%d gang %s: %s", cycle, gang, message)
            out[gang] = message
        return out

    def _skipped(
        self,
        gid: str,
        view: ClusterView,
        gpu_type: str,
        why: str,
        cycle: int,
        reason: str = MOVE_BLOCKED,
    ) -> None:
        """Log a move a budget (or, `reason` MOVE_UNFIT, its recreated pods' node filters)
        stopped; an Event on the job (its user sees it there) and on the Lease."""
        text = f"gang {gid}: move to {gpu_type} skipped: {why}"
        log.info("cycle=%d %s", cycle, text)
        posts: list[Callable[[], None]] = []
        first = next((f for k in view.running_pods.get(gid, ()) if (f := view.facts.get(k))), None)
        if self.notify_on is not None and first is not None:
            posts.append(partial(self.notify_on, job_reference(first.pod), "Normal", reason, text))
        if self.notify is not None:
            posts.append(partial(self.notify, "Normal", reason, text))
        for post in posts:
            try:
                post()
            except Exception:  # an Event is a report: never let it stop the cycle
                log.exception("cycle=%d posting the %s Event failed", cycle, reason)

    def hold(self, view: ClusterView) -> ClusterView:
        """`view` with every reservation's GPUs held by `<gang>#moving` (GPUs the gang's old
        pods still hold aside), and the CPU and memory of those bound this cycle taken; drops
        reservations that expired or were taken, and those whose recreated pods fail the
        checks a placement of the core passes (`held`)."""
        self._own_queues = {}
        if not self._reserved:
            return view
        queues = {g.id: g.queue for g in view.snapshot.running}
        view, kept, dropped, given_up = held(self._reserved, view, self.clock(), self.reserve_s)
        self._own_queues = {
            g.id: queues[g.id]
            for g in view.snapshot.running
            if g.id in queues and g.queue != queues[g.id]
        }
        for gid, why in dropped.items():
            log.info("moved gang %s: reservation dropped: %s; it is decided afresh", gid, why)
        for gid, why in given_up.items():
            log.info("nominated gang %s: %s", gid, why)
        self._dropped = {**self._dropped, **dropped_texts(self._reserved, dropped), **given_up}
        self._said = {g: c for g, c in self._said.items() if g not in dropped and g not in given_up}
        self._reserved = kept
        return view

    def as_charged(self, snapshot: Snapshot) -> Snapshot:
        """`snapshot` (this cycle's, after `hold`) with the exiting victims that `hold`
        charged to a moved gang's queue, and the moved gangs' old pods it charged to the queue
        of the gang they were moved for, back in their own: what the GPUQueue status counts
        (their GPUs are still theirs until they are gone)."""
        if not self._own_queues:
            return snapshot
        own = self._own_queues
        running = tuple(replace(g, queue=own[g.id]) if g.id in own else g for g in snapshot.running)
        return replace(snapshot, running=running)

    def explain(self, pending: Mapping[str, str]) -> dict[str, str]:
        """`pending` (gang -> why it waits this cycle: `waiting.pending_messages`) with why its
        move's reservation was dropped (`hold`) added to the message of each gang whose
        reservation was, and why its hold was given up to each nominated gang's whose hold
        `nominated.refit` dropped, for as long as it stays pending for the reason it gave when
        the text was first added (`said`); a gang bound, running again or gone, or given
        another reason since (nominated to preempt, say: the text no longer explains its
        wait), is forgotten."""
        if not self._dropped:
            return dict(pending)
        now = self.clock()
        self._given_away = {
            g: until for g, until in self._given_away.items() if g not in pending and until > now
        }
        kept = self._given_away
        said = dict(self._said)
        dropped: dict[str, str] = {}
        for g, text in self._dropped.items():
            if g in pending:
                reason = reason_of(pending[g])
                if said.setdefault(g, reason) != reason:
                    continue
            elif g not in kept:
                continue
            dropped[g] = text
        self._dropped = dropped
        self._said = {g: c for g, c in said.items() if g in dropped}
        return with_dropped(pending, dropped, self._said)

    def take(
        self, view: ClusterView, offered: Sequence[PendingGang]
    ) -> tuple[list[PendingGang], list[GangPlacement], dict[str, PendingGang]]:
        """The offered gangs without a reservation; the reserved placements to bind now (the
        gang's old pods gone, its new ones all pending, whether or not they were offered:
        the reservation, not the settling of the deletion, says when), by gang id."""
        if not self._reserved:
            return list(offered), [], {}
        offer = taken(self._reserved, view, offered)
        self._reserved = offer.reserved
        return offer.offered, offer.placements, offer.by_id


@dataclass(frozen=True, slots=True)
class Taken:
    """What `taken` leaves: the gangs to offer, the reserved placements to bind now (by gang
    id), and the reservations that remain."""

    offered: list[PendingGang]
    placements: list[GangPlacement]
    by_id: dict[str, PendingGang]
    reserved: dict[str, Reservation]


def taken(
    reserved: Mapping[str, Reservation], view: ClusterView, offered: Sequence[PendingGang]
) -> Taken:
    """`GangMover.take` on the reservations `reserved`, without changing them (pure: the mover
    keeps `Taken.reserved`, the admin API's what-if only looks)."""
    left = dict(reserved)
    placements: list[GangPlacement] = []
    by_id: dict[str, PendingGang] = {}
    for pg in view.pending:
        reservation = left.get(pg.gang.id)
        if reservation is None or _old_left(reservation, view):
            continue
        del left[pg.gang.id]
        if len(pg.pods) != len(reservation.placement.replicas):
            continue  # not the gang that was moved: place it anew
        placements.append(reservation.placement)
        by_id[pg.gang.id] = pg
    waiting = set(left) | set(by_id)
    return Taken([pg for pg in offered if pg.gang.id not in waiting], placements, by_id, left)


def _old_left(reservation: Reservation, view: ClusterView) -> bool:
    """Whether a pod deleted for the move, or of a victim on its new placement, is still
    there."""
    return bool(_left(reservation.old, view) or _left(reservation.waits, view))


def _left(pods: Collection[tuple[str, str]], view: ClusterView) -> list[str]:
    """The keys of `pods` ((pod key, uid)) still there."""
    out = []
    for key, uid in pods:
        f = view.facts.get(key)
        if f is not None and f.pod["metadata"].get("uid") == uid:
            out.append(key)
    return out


def _exiting(reservation: Reservation, view: ClusterView) -> set[str]:
    """The running gangs of the victims still on the reservation's GPUs (`Reservation.waits`):
    their GPUs are the move's, not taken."""
    keys = set(_left(reservation.waits, view))
    if not keys:
        return set()
    return {g for g, pods in view.running_pods.items() if keys.intersection(pods)}


def _grace(view: ClusterView, key: str) -> float:
    """The pod's termination grace period (Kubernetes' default, 30 s, when unset)."""
    f = view.facts.get(key)
    spec = {} if f is None else f.pod.get("spec") or {}
    value = spec.get("terminationGracePeriodSeconds")
    return 30.0 if value is None else float(value)


# No gang may take a move's reservation (its GPUs are shown held by a gang no one may
# preempt): what its pods will ask of their nodes is kept from gangs of every priority.
_NO_TAKER = 2**63


def held(
    reserved: Mapping[str, Reservation], view: ClusterView, now: float, reserve_s: float
) -> tuple[ClusterView, dict[str, Reservation], dict[str, str], dict[str, str]]:
    """`view` with every reservation's GPUs held by `<gang>#moving` (GPUs the gang's old pods
    still hold aside); the reservations kept (with when they expire, once their old pods are
    gone), and gang -> why its reservation ends (expired, its GPUs or nodes taken, not by the
    victims of its decision still exiting from them (`Reservation.waits`), or, when its
    recreated pods are to be bound now, a check a placement of the core passes failed: `_closed`,
    `eligibility.misfit`, on the nodes' free resources less what nominated gangs it may not
    take from and other moved gangs are promised: `eligibility.available`). While a gang's
    old pods exit, what its pods will ask of the reserved nodes' CPU, memory and ephemeral
    storage is kept from every pending gang (`nominated.keep`: their allowed nodes and the
    check of their placements), as its GPUs are held: a gang placed beside the reservation
    meanwhile does not leave it short at its rebind; nor does a nominated gang bound now at the
    end of its wait, whose hold is dropped (it is decided afresh) when its pods do not fit
    beside what the moved gangs are promised (`nominated.refit`: the last item returned is
    such gang -> what its pending message adds, `nominated.given_up_text`). What the pods
    bound now (`taken`) take is taken from the view's `free` resources, which the cycle's other
    placements are checked against (`eligibility.overcommitted`). Victims exiting from a
    reservation's GPUs stand for its moved gang, and a moved gang's old pods for the gang it
    was moved for (their queue and priority: see the comments below). Pure: `GangMover.hold`
    keeps the result, the admin API's what-if only looks."""
    snapshot = view.snapshot
    pending = {pg.gang.id: pg for pg in view.pending}
    kept: dict[str, Reservation] = {}
    dropped: dict[str, str] = {}
    now_bound: list[str] = []  # gangs whose recreated pods are bound this cycle (`taken`)
    shown_by: dict[str, set[str]] = {}  # gang -> the exiting victims on its new placement
    for gid, reservation in reserved.items():
        placement = reservation.placement
        old_left = _old_left(reservation, view)
        if not old_left and reservation.expires is None:
            reservation = replace(reservation, expires=now + reserve_s)
        exiting = _exiting(reservation, view)
        whole, slices = snapshot.occupied(excluding=(gid, *exiting))
        gone = any(not snapshot.has_node(r.node) for r in placement.replicas)
        taken = any(_conflicts(r, whole, slices) for r in placement.replicas)
        expired = (
            reservation.expires < now if reservation.expires is not None
            else reservation.exit_by < now
        )  # fmt: skip
        if gone or taken or expired:
            dropped[gid] = "node gone" if gone else "GPUs taken" if taken else "expired"
            continue
        kept[gid] = reservation
        shown_by[gid] = exiting
        pg = pending.get(gid)
        if not old_left and pg is not None and len(pg.pods) == len(placement.replicas):
            now_bound.append(gid)
    # The resources of the gangs still waiting for their old pods are kept from the others,
    # those being bound now among them. A nominated gang bound now at the end of its wait was
    # checked before any reservation was known: it may take none, nor those bound now.
    promised = [Kept(g, _NO_TAKER, r.asks()) for g, r in kept.items() if not r.requests.empty]
    view, given_up = refit(view, promised)
    view = keep(view, [k for k in promised if k.gang not in now_bound])
    snapshot = view.snapshot  # without the holds `refit` dropped
    free = dict(view.free)
    pending = {pg.gang.id: pg for pg in view.pending}
    for gid in now_bound:
        # Bound this cycle (`taken`): only if a placement of the core could be.
        placement = kept[gid].placement
        want = asks(placement, view.eligibility)
        room = available(free, view.eligibility.get(gid))
        why = _closed(placement, snapshot) or misfit(pending[gid].gang.allowed_nodes, want, room)
        if why is not None:
            dropped[gid] = why
            del kept[gid]
            continue
        deduct(free, want)
    extra: list[RunningGang] = []
    for gid, reservation in kept.items():
        placement = reservation.placement
        # GPUs its old pods, or victims exiting, still hold are not shown twice.
        mine = {gid, *shown_by[gid]}
        own, own_slices = snapshot.occupied(
            excluding=[g.id for g in snapshot.running if g.id not in mine]
        )
        shown = [r for r in placement.replicas if not _conflicts(r, own, own_slices)]
        if shown:
            extra.append(
                RunningGang(
                    f"{gid}{RESERVED_SUFFIX}",
                    placement.gpu_type,
                    tuple(shown),
                    priority=reservation.running.priority,
                    preemptible=False,
                    queue=reservation.running.queue,
                )
            )
    # Victims exiting from a reservation's GPUs are not shown held by it (their GPUs would be
    # counted twice). They stand for the moved gang there: shown at its priority if theirs is
    # below, charged to its queue (their own gave them up: the decision evicted them; the
    # GPUQueue status still counts them in their own: `GangMover.as_charged`), with no work
    # left to lose, so that only a gang that could preempt the moved gang, were it running
    # there, is given their GPUs (one of higher priority, of its queue when there are queues,
    # or a reclaim of quota its queue borrows: the core's rules); the mover then drops the
    # reservation (`GangMover.give_way`). Shown not preemptible, they kept their GPUs even
    # from a gang of higher priority; left in their own queue, a reclaim by the moved gang's
    # own queue (not charged for the GPUs it is to get) could take them from it.
    standing: dict[str, RunningGang] = {}  # victim -> the moved gang it stands for
    for gid, victims in shown_by.items():
        if gid in kept:
            moved = kept[gid].running
            for v in victims:
                if v not in standing or standing[v].priority < moved.priority:
                    standing[v] = moved
    # A moved gang's old pods, while they exit, stand for the gang it was moved for, which
    # waits for them (`nominated.hold` shows them at its priority): charged to that gang's
    # queue while it is pending. The moved gang's queue is then charged once, for its new
    # placement (`#moving` and the victims standing for it there), not for that and its old
    # pods too: charged twice, it could look borrowing and have a gang reclaimed wrongly
    # (those victims, the old pods, another of its gangs).
    # Not when that gang is outside every queue: counted outside, the old pods would be
    # anyone's to reclaim (the GPUs that gang waits for).
    old_for = {
        gid: queue
        for gid, r in kept.items()
        if r.for_gang is not None
        and r.for_gang in pending
        and (queue := pending[r.for_gang].gang.queue) is not None
        and gid not in standing
    }
    running = tuple(
        replace(
            g,
            priority=max(g.priority, standing[g.id].priority),
            queue=standing[g.id].queue,
            progress=NOTHING_RUNS,
        )
        if g.id in standing
        else replace(g, queue=old_for[g.id])
        if g.id in old_for
        else g
        for g in snapshot.running
    )
    if extra or standing or old_for:
        view = replace(view, snapshot=replace(snapshot, running=(*running, *extra)))
    if free != view.free:
        view = replace(view, free=free)
    return view, kept, dropped, given_up


def dropped_text(placement: GangPlacement, why: str) -> str:
    """What a gang's pending message adds once its move's reservation (`placement`) was dropped
    for `why` (`held`): the core's reason alone says only why it fits nowhere now."""
    nodes = ", ".join(sorted({r.node for r in placement.replicas}))
    return f"its move's reservation on {nodes} was dropped: {why}"


def dropped_texts(
    reserved: Mapping[str, Reservation], dropped: Mapping[str, str]
) -> dict[str, str]:
    """Gang -> what its pending message adds (`dropped_text`), for the reservations among
    `reserved` that `held` dropped (`dropped`: gang -> why)."""
    return {gid: dropped_text(reserved[gid].placement, why) for gid, why in dropped.items()}


def reason_of(message: str) -> WaitReason | None:
    """The reason code a pending message (`Code: detail`) starts with; None for none known."""
    return PendingNote.parse(message).reason


def with_dropped(
    pending: Mapping[str, str],
    dropped: Mapping[str, str],
    said: Mapping[str, WaitReason | None] | None = None,
) -> dict[str, str]:
    """`pending` (gang -> why it waits) with, for each gang in `dropped`, what it adds since
    its move's reservation was dropped (`dropped_texts`), unless `said` (gang -> the reason
    its message gave when that was first added: `GangMover.said`) shows another reason now.
    Shared by `GangMover.explain` and the admin API's what-if, so that both say the same."""
    said = said or {}
    return {
        g: f"{m}; {dropped[g]}" if g in dropped and said.get(g, reason_of(m)) == reason_of(m) else m
        for g, m in pending.items()
    }


def _closed(placement: GangPlacement, snapshot: Snapshot) -> str | None:
    """Why a node of `placement` takes no pods now (cordoned, NotReady, switched off or being
    reconfigured: the core's `schedulable`); None when all of them do."""
    closed = sorted({r.node for r in placement.replicas if not snapshot.node(r.node).schedulable})
    return f"{', '.join(closed)} takes no pods now (cordoned, NotReady or off)" if closed else None


def move_message(move: Move) -> str:
    """Why a gang moved, for its event (and the admin API's what-if, which reports the moves
    made for a gang in these words): faster, to empty a node, or to refill a reserve."""
    where = f"moved to {move.placement.gpu_type} (from {move.from_type})"
    if move.for_gang is not None:
        return (
            f"{where} to empty a node for waiting gang {move.for_gang}: expected to finish "
            f"{-move.gain_s:.0f}s later"
        )
    if move.for_reserve is not None:
        return (
            f"{where} to keep {move.for_reserve} GPUs free for gangs that need that type: "
            f"expected to finish {-move.gain_s:.0f}s later"
        )
    return f"{where}: expected to finish {move.gain_s:.0f}s sooner"
