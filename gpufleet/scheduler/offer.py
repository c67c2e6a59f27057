"""Phase 3 of the cycle: which pending gangs are offered to the core (the heads).

Not offered: gangs waiting for the preemption victims they asked for (or, given GPUs of victims
evicted for other gangs, those victims: `GangPlacement.waits_for`) to exit or for a MIG
reconfiguration they need, gangs still settling (restarted, rolled back or preempted: their
pods this process deleted are not gone and recreated yet), and of many identical gangs all but
as many as could fit plus one (`cap_identical`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import replace

from gpufleet.core.demand import Gang
from gpufleet.core.snapshot import Snapshot
from gpufleet.model.contract.reasons import SchedulerReason, pending_text
from gpufleet.scheduler.cache import CachedState
from gpufleet.scheduler.cluster_view import ClusterView, PendingGang
from gpufleet.scheduler.waiting import PREEMPTING_MESSAGE


def heads(
    view: ClusterView, state: CachedState, settling: Collection[str]
) -> tuple[list[PendingGang], dict[str, str]]:
    """The gangs to offer, and gang -> why it is not offered (for those that say why).

    The unbound rest of a partly bound gang is offered as `<gang>#rest`; a settling gang is
    left out, rest included, without a new reason.
    """
    waiting = {gid: pending_text(SchedulerReason.GANG, why) for gid, why in view.held.items()}
    mig_waits = {gid: node for node, req in state.mig_requests.items() for gid in req.gangs}
    offered: list[PendingGang] = []
    for pg in view.pending:
        gid = pg.gang.id
        nomination = state.nominations.get(gid)
        if nomination is not None and not nomination.ready:
            waiting[gid] = nomination.message or PREEMPTING_MESSAGE
        elif gid in mig_waits:
            waiting[gid] = pending_text(
                SchedulerReason.MIG, f"waiting for MIG reconfiguration of node {mig_waits[gid]}"
            )
        elif gid.split("#")[0] not in settling:
            offered.append(pg)
    return offered, waiting


def cap_identical(
    offered: list[PendingGang], snapshot: Snapshot, may_preempt: bool, above: int
) -> tuple[list[PendingGang], dict[str, str]]:
    """Offer the core only as many of a set of identical gangs as could fit, plus one.

    Gangs equal in everything but their id and wait (1,000 single-GPU pods, say) are
    interchangeable, and the core places them longest waiting first, then in id order (so
    those are the ones kept); a gang that needs `k` whole GPUs can be admitted at most
    `free // k` times, where `free` counts the GPUs of its acceptable types on schedulable
    nodes that no running or assumed pod holds (a bound that only overestimates: placement
    rules never add room). Offering the rest would only make the core explain again, each
    cycle, why each of them does not fit, which for 900 waiting gangs was most of a decision.
    The one extra gang offered stays pending and its reason is copied to those held back
    (phase 9), which are offered again next cycle. Only past `above` offered gangs, and never
    capped: MIG and elastic gangs, rests of partly bound gangs, and gangs that could preempt
    (when the policy allows it: a preempting gang frees GPUs that others may then use).
    Returns what to offer, in the original order, and gang -> the identical gang whose reason
    it takes.
    """
    if len(offered) <= above:
        return offered, {}
    free = _free_gpus(snapshot)
    lowest = min((r.priority for r in snapshot.running if r.preemptible), default=None)
    classes: dict[Gang, list[PendingGang]] = defaultdict(list)
    for pg in offered:
        classes[replace(pg.gang, id="", waited_s=0.0, queued_s=None)].append(pg)
    keep: set[str] = set()
    capped: dict[str, str] = {}
    for shape, members in classes.items():
        members.sort(key=lambda pg: (-pg.gang.in_line_s, pg.gang.id))  # the core's order
        limit = len(members)
        preempts = may_preempt and lowest is not None and lowest < shape.priority
        rest = members[0].gang.id.endswith("#rest")  # phase 7 needs the core's answer
        fixed = shape.mig_profile is None and shape.replicas_min == shape.replicas_max
        if fixed and not preempts and not rest:
            room = sum(free[t] for t in set(shape.type_names()))
            limit = room // (shape.gpus_per_replica * shape.replicas_min) + 1
        keep.update(pg.gang.id for pg in members[:limit])
        capped.update((pg.gang.id, members[limit - 1].gang.id) for pg in members[limit:])
    return [pg for pg in offered if pg.gang.id in keep], capped


def _free_gpus(snapshot: Snapshot) -> dict[str, int]:
    """GPU type -> whole GPUs on schedulable nodes that no running or assumed pod holds."""
    whole, slices = snapshot.occupied()
    held = whole | {(n, g) for n, g, _ in slices}
    free: dict[str, int] = defaultdict(int)
    for node in snapshot.nodes:
        if node.schedulable:
            free[node.gpu_type] += sum((node.name, g.index) not in held for g in node.gpus)
    return free
