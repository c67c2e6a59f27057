"""GPUs held for nominated gangs: a gang waiting for pods to exit keeps its planned GPUs.

A gang the decision placed that waits for pods to go (its preemption victims, victims evicted
for another gang whose GPUs it takes, gangs moved for it: victims.py, mover.py) is nominated
(`cache.Nomination`) with the placement the decision planned for it. While it waits, the GPUs
of that placement no running pod holds (those some of its victims have freed already: one
victim's pods gone and another's in their grace period, a victim that exited early) are shown
to the core as held by `<gang>#nominated`, a running gang of its priority and queue that no
one may preempt (`hold`), so no other gang is placed or bound there meanwhile: the preemptor
does not find its GPUs taken after evicting for nothing. A higher-priority gang does not take
them either (unlike kube-scheduler's nominated pods, which yield to higher priority): the hold
lasts only as long as the nomination (its victims' grace period, bounded by its expiry), as
the mover's reservations of moved gangs, which are not preemptible either.

Only placements on whole GPUs are held: one on MIG instances may need a new layout, which is
asked for once the pods are gone (repartition.py), so such a gang is decided afresh then.

Once the pods are gone (`Nomination.ready`), the gang is bound to its planned placement if
every GPU of it is free, its nodes still take pods and it has a pod for each replica (`ready`),
through the same assume-then-bind batch as the core's placements, the way the mover binds a
moved gang to its reservation; otherwise nothing is held and it is offered to the core,
decided afresh. The hold ends with the nomination: when it expires (a TTL after the pods are
gone at most), when the gang is bound or no longer pending, or when a new nomination replaces
it. Nominations are
kept in memory only: after a restart nothing is held and every gang is decided afresh on what
the cluster shows.

Both steps are pure functions of the cache's state: the admin API's what-if takes them too
(through `decision_view` and `stateful_steps.offer`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from gpufleet.core.decision import GangPlacement
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, Snapshot
from gpufleet.scheduler.cache import Nomination
from gpufleet.scheduler.cluster_view import ClusterView, PendingGang

__all__ = ["HELD_SUFFIX", "hold", "ready"]

HELD_SUFFIX = "#nominated"


def _free_part(placement: GangPlacement, snapshot: Snapshot) -> list[ReplicaPlacement]:
    """The parts of `placement`'s replicas that no running gang holds, on nodes that take
    pods, GPU by GPU."""
    whole, slices = snapshot.occupied()
    taken = whole | {(n, g) for n, g, _ in slices}
    out: list[ReplicaPlacement] = []
    for r in placement.replicas:
        if not snapshot.has_node(r.node) or not snapshot.node(r.node).schedulable:
            continue
        gpus = tuple(ix for ix in r.gpus if (r.node, ix) not in taken)
        if gpus:
            out.append(ReplicaPlacement(r.node, gpus))
    return out


def _bindable(pg: PendingGang, placement: GangPlacement) -> bool:
    """Whether `pg`'s pods can be bound to `placement` as they are: a pod for each replica (an
    elastic gang placed with fewer replicas than it has pods is decided afresh)."""
    return len(pg.pods) == len(placement.replicas)


def hold(view: ClusterView, nominations: Mapping[str, Nomination]) -> ClusterView:
    """`view` with the free GPUs of each pending nominated gang's planned placement held by
    `<gang>#nominated`; once its pods are gone, the whole placement or nothing (when a GPU of
    it is taken, the gang is decided afresh)."""
    pending = {pg.gang.id: pg for pg in view.pending}
    extra: list[RunningGang] = []
    snapshot = view.snapshot
    for gid, nomination in sorted(nominations.items()):
        placement, pg = nomination.placement, pending.get(gid)
        if placement is None or pg is None or any(r.mig for r in placement.replicas):
            continue
        shown = _free_part(placement, snapshot)
        if nomination.ready and not (
            shown == list(placement.replicas) and _bindable(pg, placement)
        ):
            continue  # decided afresh: nothing held from it
        gang = pg.gang
        if shown:
            extra.append(
                RunningGang(
                    f"{gid}{HELD_SUFFIX}",
                    placement.gpu_type,
                    tuple(shown),
                    priority=gang.priority,
                    preemptible=False,
                    queue=gang.queue,
                )
            )
    if not extra:
        return view
    return replace(view, snapshot=replace(snapshot, running=(*snapshot.running, *extra)))


def ready(
    view: ClusterView, nominations: Mapping[str, Nomination], offered: Sequence[PendingGang]
) -> tuple[list[PendingGang], list[GangPlacement], dict[str, PendingGang]]:
    """The `offered` gangs but those whose wait ended with their whole planned placement held
    for them (`hold`: every GPU free, its nodes taking pods); those placements, to bind now;
    and those gangs by id."""
    held = {g.id: g for g in view.snapshot.running if g.id.endswith(HELD_SUFFIX)}
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
