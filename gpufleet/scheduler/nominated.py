"""GPUs held for nominated gangs: a gang waiting for pods to exit keeps its planned GPUs.

A gang the decision placed that waits for pods to go (its preemption victims, victims evicted
for another gang whose GPUs it takes, gangs moved for it: victims.py, mover.py) is nominated
(`cache.Nomination`) with the placement the decision planned for it. While it waits, the GPUs
of that placement no running pod holds (those some of its victims have freed already: one
victim's pods gone and another's in their grace period, a victim that exited early) are shown
to the core as held by `<gang>#nominated`, a running gang of its priority and queue (`hold`),
so no gang that could not evict it is placed or bound there meanwhile: the preemptor does not
find its GPUs taken after evicting for nothing. What its pods will ask of the planned nodes'
CPU, memory and ephemeral storage is kept for it the same way (`_reserve`): a pending gang of
its priority or below sees it taken from those nodes' free resources (its allowed nodes and the
check of its placement: `eligibility.reserve`), as kube-scheduler counts a nominated pod's
requests on its node for pods of lower or equal priority; the victims' pods still there count
too until they are gone (kube-scheduler's way, on the safe side).

A gang that could evict it may take them, as kube-scheduler lets a pod of higher priority be
scheduled onto the resources nominated for a lower-priority pod: the hold is preemptible while
the gang waits, under the core's rules for any running gang: a gang of higher priority, or
with queues another queue's reclaim of quota the held gang's queue borrows (never a gang of
its queue and priority: the hold has received no service, so the service tier does not take
it). Taking a hold evicts nothing: `taken` removes it from the decision's preemptions (and
from the victims a placement waits for, its GPUs being free already), and once a gang that
took it goes ahead (bound, or nominated itself), `give_up` drops the held gang's placement: it
keeps waiting for the pods it waits for, which are going anyway, says which gang took its
GPUs, and is then decided afresh. A hold whose wait has ended is bound in the same cycle
(`ready`) and is not preemptible then: the one decision never gives its GPUs twice. Its bind
is checked again against the moved gangs' reservations once the mover shows them (`refit`):
no gang may take a move's reservation. Both checks are needed: which reservations survive
depends on the holds (a hold bound on a reservation's GPUs ends it: mover.held), so they are
known only after `hold`; and `refit` is `hold`'s CPU, memory and storage check redone, in the
same order on the same free resources, with those reservations deducted too, so it drops
only what they leave no room for (without it, such a gang is bound beside a move's pods; the
post-decision check, `eligibility.overcommitted`, covers the decision's placements, not
these binds). The core may still place a gang whose hold `refit` gave up on the same node in
that cycle, when the move is bound then (the nodes a gang may use count a moved gang's pods
bound now only from the next cycle): the post-decision check holds it a cycle. A gang whose
hold `refit` drops is decided afresh, and its pending message says, while it waits for the
reason the next decision gives, that its hold was given up and for which move
(`given_up_text`, added by the mover's `explain`).

The gangs a nominated gang waits for are exiting (their pods evicted, in their grace period)
and still shown to the core as running gangs, preemptible: at the waiting gang's priority if
below, and with no work left to lose (`hold`), so a gang that may take the hold may take their
GPUs too (it waits for them; evicting pods already going changes nothing) and prefers them to
a running gang of that priority, whose work it would cut short. They are not made
non-preemptible: a taker would then evict running work rather than wait for GPUs freed soon.
The core knows no "freed soon" of its own (an exiting gang still counts as holding its GPUs);
within the scheduler, this is how an exiting gang is modelled.

A placement on MIG instances is held instance by instance: those the GPU's layout has now and
no one holds. An instance of a layout still to be made (the decision repartitions the GPU once
the victims are gone: repartition.py), like a whole GPU still in MIG mode, cannot be shown held
(the core's ledger only holds what the layout has), so it is not; such a gang is decided afresh
once its pods are gone, and the layout is asked for then.

Once the pods are gone (`Nomination.ready`), the gang is bound to its planned placement if it
passes the checks a placement of the core passes before it is bound: every GPU of it free, its
nodes taking pods (cordoned, NotReady, switched off or being reconfigured nodes do not), each
node among those its pods may use (`Gang.allowed_nodes`: taints, node selector and affinity,
one replica's CPU, memory and ephemeral storage: eligibility.py), its replicas together within
each node's free CPU, memory and ephemeral storage, and a pod for each replica (`ready`). It
is bound through the same assume-then-bind batch as the core's placements, the way the mover
binds a moved gang to its reservation, and what it takes of each node's CPU and memory is
taken from what the same cycle's placements see (`ClusterView.free`, which the loop's
`eligibility.overcommitted` reads). Otherwise nothing is held and it is offered to the core,
decided afresh. The hold ends with the nomination: when it expires (a TTL after the pods are
gone at most), when the gang is bound or no longer pending, when a new nomination replaces it,
or when another gang takes it. Nominations are kept in memory only: after a restart nothing is
held and every gang is decided afresh on what the cluster shows.

`hold`, `ready` and `taken` are pure functions of the cache's state and the decision: the admin
API's what-if takes them too (through `decision_view`, `stateful_steps.offer` and `taken`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from gpufleet.core.decision import Decision, GangPlacement
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, RunProgress, Snapshot
from gpufleet.model.contract.reasons import SchedulerReason, pending_text
from gpufleet.model.mig import MigPlacement
from gpufleet.scheduler.cache import HELD_SUFFIX, Nomination, SchedulerCache, is_hold
from gpufleet.scheduler.cluster_view import ClusterView, PendingGang
from gpufleet.scheduler.eligibility import (
    RESOURCES_FIT,
    Reservation,
    Resources,
    asks,
    available,
    deduct,
    misfit,
    reserve,
)

__all__ = [
    "HELD_SUFFIX",
    "NOTHING_RUNS",
    "TakenHold",
    "give_up",
    "given_up_text",
    "hold",
    "keep",
    "ready",
    "refit",
    "taken",
]

# A hold runs nothing: taking it loses no work and restarts nothing (borrowing.lost_work_gpu_s).
NOTHING_RUNS = RunProgress(expected_remaining_s=0.0, unsaved_s=0.0, restart_s=0.0)


Slice = tuple[str, int, MigPlacement]


def _free_part(
    placement: GangPlacement,
    snapshot: Snapshot,
    whole: Collection[tuple[str, int]],
    slices: Collection[Slice],
) -> list[ReplicaPlacement]:
    """The parts of `placement`'s replicas that are free, on nodes that take pods: its whole
    GPUs in whole mode that no one holds (`whole`: GPUs held whole or partly), GPU by GPU,
    and its MIG instances that the GPU's layout has now and no one holds (`slices`); an
    instance of a layout still to be made, or a whole GPU still in MIG mode, is not free."""
    out: list[ReplicaPlacement] = []
    for r in placement.replicas:
        if not snapshot.has_node(r.node) or not snapshot.node(r.node).schedulable:
            continue
        gpus = snapshot.node(r.node).gpus
        if r.mig is not None:
            (ix,) = r.gpus
            layout = gpus[ix].mig_layout if ix < len(gpus) else None
            if layout is not None and r.mig in layout and (r.node, ix, r.mig) not in slices:
                out.append(r)
            continue
        free = tuple(
            ix
            for ix in r.gpus
            if ix < len(gpus) and gpus[ix].mig_layout is None and (r.node, ix) not in whole
        )
        if free:
            out.append(ReplicaPlacement(r.node, free))
    return out


def _bindable(pg: PendingGang, placement: GangPlacement) -> bool:
    """Whether `pg`'s pods can be bound to `placement` as they are: a pod for each replica (an
    elastic gang placed with fewer replicas than it has pods is decided afresh)."""
    return len(pg.pods) == len(placement.replicas)


def _claimed(view: ClusterView, nomination: Nomination, owner: Mapping[str, str]) -> set[str]:
    """The running gangs with a pod `nomination` waits for (its victims, or gangs moved for
    it, in their grace period); `owner`: pod key -> its running gang."""
    out: set[str] = set()
    for key, uid in nomination.victims:
        f = view.facts.get(key)
        if key in owner and f is not None and f.pod["metadata"].get("uid", "") == uid:
            out.add(owner[key])
    return out


def hold(view: ClusterView, nominations: Mapping[str, Nomination]) -> ClusterView:
    """`view` with the free GPUs of each pending nominated gang's planned placement held by
    `<gang>#nominated` (module docstring), higher priority first: a GPU two placements plan is
    held for the first (a gang of higher priority that evicted a victim again, whose GPUs
    another gang waits for too). While the gang waits, its hold is preemptible and loses no
    work (a taker prefers it to a running gang of its priority), and the gangs it waits for
    (exiting already) are shown at its priority if below (their GPUs are planned for it: only
    a gang that may take its hold may take those) and with no work left to lose (evicting
    them again stops nothing sooner: a taker prefers them to a running gang of that priority,
    whose work it would cut short); once its pods are gone, the whole
    placement or nothing (when a GPU of it is taken, or the placement no longer passes the
    node filters or fits the nodes' CPU and memory, the gang is decided afresh), and what it
    takes of its nodes' CPU and memory no longer free for the cycle's other placements."""
    view = _reserve(view, nominations)
    pending = {pg.gang.id: pg for pg in view.pending}
    extra: list[RunningGang] = []
    snapshot = view.snapshot
    whole, slices = snapshot.occupied()
    taken = whole | {(n, g) for n, g, _ in slices}  # GPUs held whole or partly
    free = dict(view.free)
    raised: dict[str, int] = {}
    owner: dict[str, str] | None = None  # pod key -> its running gang, once needed
    held = [
        (pg, nomination)
        for gid, nomination in nominations.items()
        if (pg := pending.get(gid)) is not None and nomination.placement is not None
    ]
    held.sort(key=lambda item: (-item[0].gang.priority, item[0].gang.id))
    for pg, nomination in held:
        gid, gang, placement = pg.gang.id, pg.gang, nomination.placement
        assert placement is not None
        shown = _free_part(placement, snapshot, taken, slices)
        if nomination.ready:
            want = asks(placement, view.eligibility)
            room = available(free, view.eligibility.get(gid))  # less others' reservations
            if not (
                shown == list(placement.replicas)
                and _bindable(pg, placement)
                and misfit(gang.allowed_nodes, want, room) is None
            ):
                continue  # decided afresh: nothing held from it
            deduct(free, want)  # bound this cycle (`ready`)
        else:
            if owner is None:
                owner = {k: g for g, keys in view.running_pods.items() for k in keys}
            for claimed in _claimed(view, nomination, owner):
                raised[claimed] = max(raised.get(claimed, gang.priority), gang.priority)
        if shown:
            taken |= {(r.node, ix) for r in shown for ix in r.gpus}
            slices |= {(r.node, r.gpus[0], r.mig) for r in shown if r.mig is not None}
            extra.append(
                RunningGang(
                    f"{gid}{HELD_SUFFIX}",
                    placement.gpu_type,
                    tuple(shown),
                    priority=gang.priority,
                    # Bound this cycle once its wait has ended: no other gang may take it then.
                    preemptible=not nomination.ready,
                    progress=None if nomination.ready else NOTHING_RUNS,
                    queue=gang.queue,
                )
            )
    if not extra and not raised:
        return view
    running = tuple(
        replace(g, priority=max(g.priority, raised[g.id]), progress=NOTHING_RUNS)
        if g.id in raised
        else g
        for g in snapshot.running
    )
    running = (*running, *extra)
    return replace(view, snapshot=replace(snapshot, running=running), free=free)


def _reserve(view: ClusterView, nominations: Mapping[str, Nomination]) -> ClusterView:
    """`view` with what each waiting nominated gang's pods will ask of its planned nodes
    (CPU, memory, ephemeral storage) kept from the pending gangs of its priority or below
    (`eligibility.reserve`: their allowed nodes and the free resources their placements are
    checked against), as its GPUs are held: a gang placed beside the hold meanwhile does not
    leave it short at the end of its wait."""
    reservations = [
        Reservation(gid, pg.gang.priority, asks(nomination.placement, view.eligibility))
        for pg in view.pending
        if (nomination := nominations.get(gid := pg.gang.id)) is not None
        and nomination.placement is not None
        and not nomination.ready
    ]
    return keep(view, reservations)


def keep(view: ClusterView, reservations: Sequence[Reservation]) -> ClusterView:
    """`view` with what `reservations` promise of their nodes' CPU, memory and ephemeral
    storage kept from the pending gangs that may not take it (`eligibility.reserve`: their
    allowed nodes and the free resources their placements are checked against). Shared with
    the mover, whose moved gangs' reservations keep their nodes' resources the same way."""
    if not reservations:
        return view
    outcomes = dict(view.eligibility)
    pending: list[PendingGang] = []
    for pg in view.pending:
        was = outcomes.get(pg.gang.id)
        if was is None:
            pending.append(pg)
            continue
        now = reserve(was, pg.gang.id, pg.gang.priority, view.free, reservations)
        if now is was:
            pending.append(pg)
            continue
        outcomes[pg.gang.id] = now
        if now.allowed == pg.gang.allowed_nodes:
            pending.append(pg)
        else:
            pending.append(PendingGang(replace(pg.gang, allowed_nodes=now.allowed), pg.pods))
    return replace(view, pending=tuple(pending), eligibility=outcomes)


def refit(
    view: ClusterView, reservations: Sequence[Reservation]
) -> tuple[ClusterView, dict[str, str]]:
    """`view` without the holds of the nominated gangs bound this cycle (their wait ended:
    `hold`, which checked them on the nodes' free resources less the nominated gangs'
    reservations only) whose pods no longer fit beside `reservations` too (the moved gangs',
    known after `hold`: mover.py), checked again in `hold`'s order: those gangs are decided
    afresh, and what they took of `free` is given back, so no gang bound at the end of its
    wait takes what a move's reservation keeps. Also gang -> what its pending message adds
    for each hold dropped (`given_up_text`): the core's reason alone (NodeResourcesFit) would
    not say that it had a placement and why it lost it."""
    if not reservations:
        return view, {}
    bound = sorted(
        (g for g in view.snapshot.running if is_hold(g.id) and not g.preemptible),
        key=lambda g: (-g.priority, g.id),
    )
    if not bound:
        return view, {}
    wants = {
        g.id: asks(
            GangPlacement(g.id.removesuffix(HELD_SUFFIX), g.gpu_type, g.replicas), view.eligibility
        )
        for g in bound
    }
    free = dict(view.free)
    for want in wants.values():  # as before `hold` took them
        for node, part in want.items():
            free[node] = free.get(node, Resources()) + part
    dropped: dict[str, str] = {}
    for g in bound:
        gid, want = g.id.removesuffix(HELD_SUFFIX), wants[g.id]
        room = dict(available(free, view.eligibility.get(gid)))
        others = [p for p in reservations if p.gang != gid]
        for promise in others:
            deduct(room, promise.nodes)
        why = misfit(None, want, room)
        if why is not None:
            movers = sorted({p.gang for p in others if set(p.nodes) & set(want)})
            dropped[g.id] = given_up_text(sorted(want), why, movers)
            continue
        deduct(free, want)
    if not dropped:
        return view, {}
    running = tuple(g for g in view.snapshot.running if g.id not in dropped)
    view = replace(view, snapshot=replace(view.snapshot, running=running), free=free)
    return view, {g.removesuffix(HELD_SUFFIX): text for g, text in dropped.items()}


def given_up_text(nodes: Sequence[str], why: str, movers: Sequence[str]) -> str:
    """What a nominated gang's pending message adds once `refit` gave up its hold on `nodes`
    at the end of its wait (`why`: `eligibility.misfit`'s words) beside what moved gangs
    `movers` are promised there."""
    short = why.removeprefix(f"{RESOURCES_FIT}: ")
    whose = f"moved gang {', '.join(movers)} is" if movers else "moved gangs are"
    return (
        f"its hold on {', '.join(nodes)} was given up at the end of its wait: {short} beside "
        f"what {whose} promised there; it is decided afresh"
    )


def ready(
    view: ClusterView, nominations: Mapping[str, Nomination], offered: Sequence[PendingGang]
) -> tuple[list[PendingGang], list[GangPlacement], dict[str, PendingGang]]:
    """The `offered` gangs but those whose wait ended with their whole planned placement held
    for them (`hold`: every GPU free, its nodes taking pods and passing the node filters, its
    pods fitting their CPU and memory); those placements, to bind now; and those gangs by
    id."""
    held = {g.id: g for g in view.snapshot.running if is_hold(g.id)}
    left: list[PendingGang] = []
    placements: list[GangPlacement] = []
    by_id: dict[str, PendingGang] = {}
    for pg in offered:
        gid = pg.gang.id
        nomination = nominations.get(gid)
        placement = None if nomination is None else nomination.placement
        shown = held.get(f"{gid}{HELD_SUFFIX}")
        if (
            nomination is None
            or not nomination.ready
            or placement is None
            or shown is None
            or shown.replicas != placement.replicas
            or not _bindable(pg, placement)
        ):
            left.append(pg)
            continue
        placements.append(placement)
        by_id[gid] = pg
    return left, placements, by_id


@dataclass(frozen=True, slots=True)
class TakenHold:
    """A nominated gang's hold the core took: for gang `by` (a `reclaim` of quota the held
    gang's queue borrows, else a gang of higher rank), and `also` the gangs placed on its GPUs
    or the quota it gave back that would have waited for it (`GangPlacement.waits_for`)."""

    gang: str
    by: str
    reclaim: bool = False
    also: tuple[str, ...] = ()

    @property
    def takers(self) -> tuple[str, ...]:
        return (self.by, *self.also)


def taken(decision: Decision) -> tuple[Decision, list[TakenHold]]:
    """`decision` without the holds it takes: they are not evicted (nothing runs there) and
    no gang waits for them (their GPUs are free already); and those holds."""
    holds = {p.gang_id: p for p in decision.preemptions if is_hold(p.gang_id)}
    if not holds:
        return decision, []
    also: dict[str, list[str]] = {h: [] for h in holds}
    placements = []
    for placement in decision.placements:
        waits = tuple(w for w in placement.waits_for if w not in holds)
        for w in placement.waits_for:
            if w in holds:
                also[w].append(placement.gang_id)
        placements.append(
            placement if waits == placement.waits_for else replace(placement, waits_for=waits)
        )
    out = replace(
        decision,
        placements=tuple(placements),
        preemptions=tuple(p for p in decision.preemptions if p.gang_id not in holds),
    )
    return out, [
        TakenHold(h.removesuffix(HELD_SUFFIX), p.for_gang, p.reclaim, tuple(also[h]))
        for h, p in sorted(holds.items())
    ]


def _gpus(placement: GangPlacement) -> set[tuple[str, int]]:
    return {(r.node, ix) for r in placement.replicas for ix in r.gpus}


def give_up(
    cache: SchedulerCache,
    nominations: Mapping[str, Nomination],
    holds: Sequence[TakenHold],
    going: Mapping[str, GangPlacement],
    priorities: Mapping[str, int],
) -> dict[str, str]:
    """Drop the planned placement of each waiting nominated gang (of `nominations`, the
    cycle's) that a gang going ahead took: one bound now or nominated with its placement to
    wait for its own victims (`going`: gang -> that placement), on GPUs of its plan (its hold,
    or the victims it waits for, evicted again) or on what its hold gave back (`holds`: the
    quota of a hold taken for another gang). The held gang keeps waiting for its pods, which
    are going anyway, then is decided afresh, as kube-scheduler clears the nominations of
    lower-priority pods on a node a preemptor is nominated to. Gang -> its pending message.
    A hold whose takers all stay pending (their evictions stopped by a budget, say) stays."""
    used = {g: _gpus(p) for g, p in going.items()}
    out: dict[str, str] = {}
    for gid, nomination in sorted(nominations.items()):
        plan = nomination.placement
        if plan is None or nomination.ready or gid in going:
            continue
        mine = _gpus(plan)
        takers = {g for g, gpus in used.items() if gpus & mine}
        takers |= {t for h in holds if h.gang == gid for t in h.takers if t in going}
        if not takers:
            continue
        names = ", ".join(sorted(takers))
        own = priorities.get(gid, 0)
        if any(priorities.get(t, 0) > own for t in takers):
            took = f"higher-priority gang {names} took the GPUs planned for it"
        else:
            took = f"gang {names} took the GPUs planned for it, reclaiming quota its queue borrows"
        message = pending_text(
            SchedulerReason.PREEMPTING,
            f"{took}; it is decided again once the pods it waits for have exited",
        )
        if cache.release_hold(gid, message):
            out[gid] = message
    return out
