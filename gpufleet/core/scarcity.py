"""Scarcity: keep free GPUs of a type for the demand that can run only on that type.

A gang that accepts several GPU types takes its most valuable one. When another gang can run only
on that type, it may then wait while GPUs of other types sit free: the fragmentation the FGD paper
(ATC'23) measures against the expected workload. The caller estimates, per type, the share of
demand that accepts only that type (`Snapshot.constrained_demand`); the core turns it into a
reserve and prices what flexible gangs take out of it.

Reserve of type t: `share_t x GPUs of the fleet`, the GPUs of t that single-type gangs occupy in a
steady state shaped like the estimate. A gang with a choice of types that leaves fewer than the
reserve empty pays, per GPU it takes inside the reserve, `scarcity weight x what a GPU of t is
worth` (the larger of its catalogue value and the best per-GPU value of a pending gang on it: the
displaced single-type gang is assumed to be worth as much as the work competing for the GPU). The
reserve is fractional: a share of 0.26 % on a 256-GPU fleet keeps 0.66 GPU, so at weight 2 the
last empty GPU of t costs 1.3 GPUs' worth, more than a flexible gang gains from t over any type
that runs it at over a third of the speed. When no other type fits, the gang still takes it.

GPUs are counted whole: a MIG slice on an empty GPU takes that GPU from the reserve. Aggregate form
(objective and CP-SAT), per type with a reserve R, empty GPUs F before the decision, and empty
GPUs occupied A (all gangs) of which X by flexible gangs:
    charge = price x min(X, max(0, A - (F - R)))
Greedy charges each flexible gang the increase of `max(0, R - free)` its GPUs cause.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.core.decision import GangPlacement
from gpufleet.core.demand import Gang
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.valuation import replica_value
from gpufleet.model.gpus import GpuType


@dataclass(frozen=True, slots=True)
class Reserve:
    """Free GPUs of one type kept for single-type demand in this decision."""

    gpu_type: str
    free: float  # empty GPUs of the type when the decision starts
    reserved: float  # GPUs kept for single-type gangs (fractional)
    price: float  # objective cost per flexible GPU taken inside the reserve

    def charge(self, free_now: float, take: float) -> float:
        """Cost of a flexible gang taking `take` GPUs when `free_now` are empty."""
        before = max(0.0, self.reserved - free_now)
        after = max(0.0, self.reserved - (free_now - take))
        return self.price * (after - before)

    def aggregate(self, taken: float, flexible: float) -> float:
        """Cost of a decision taking `taken` GPUs of the type, `flexible` by flexible gangs."""
        return self.price * min(flexible, max(0.0, taken - (self.free - self.reserved)))


def empty_per_type(snapshot: Snapshot) -> dict[str, int]:
    """Empty GPUs (no whole-GPU use, no MIG instance in use) of schedulable nodes, per type."""
    used = _used_gpus(snapshot)
    out: dict[str, int] = {}
    for node in snapshot.nodes:
        if not node.schedulable:
            continue
        free = sum(1 for g in range(node.gpu_count) if (node.name, g) not in used)
        out[node.gpu_type] = out.get(node.gpu_type, 0) + free
    return out


def reserves(
    snapshot: Snapshot, policy: Policy, empty: dict[str, int], pending: Sequence[Gang] = ()
) -> dict[str, Reserve]:
    """Reserves of the types with single-type demand, given empty GPUs per type.

    The price per reserved GPU is what a GPU of the type is worth: the larger of its catalogue
    value and the best per-GPU value of a pending gang on it (the displaced single-type gang is
    assumed to be worth as much as the work now competing for the GPU), times the weight.
    """
    weights = policy.weights
    if not snapshot.constrained_demand or weights.scarcity <= 0:
        return {}
    total = float(sum(n.gpu_count for n in snapshot.nodes if n.schedulable))
    out: dict[str, Reserve] = {}
    for demand in snapshot.constrained_demand:
        t = demand.gpu_type
        if demand.share <= 0 or t not in snapshot.catalog or t not in empty:
            continue
        gpu = snapshot.catalog[t]
        worth = weights.work * gpu.relative_throughput
        for gang in pending:
            if t in gang.type_names() and (
                gang.mig_profile is None or gpu.has_mig_profile(gang.mig_profile)
            ):
                per = replica_value(gang, gpu, policy).objective / gpu_use(gang, gpu, 1)
                worth = max(worth, per)
        out[t] = Reserve(t, float(empty[t]), demand.share * total, weights.scarcity * worth)
    return out


def gpu_use(gang: Gang, gpu: GpuType, replicas: int) -> float:
    """GPUs `replicas` replicas of the gang take on `gpu`: MIG slices count whole GPUs (at
    most one per slice), since a GPU with any slice in use is no longer free for whole-GPU work.
    """
    if gang.mig_profile is not None:
        return float(replicas)
    return float(gang.gpus_per_replica * replicas)


def flexible_in(snapshot: Snapshot, gang: Gang, present: set[str]) -> bool:
    """Whether the gang has more than one usable type among the `present` node types."""
    usable = [
        t
        for t in gang.type_names()
        if t in present
        and t in snapshot.catalog
        and (gang.mig_profile is None or snapshot.catalog[t].has_mig_profile(gang.mig_profile))
    ]
    return is_flexible(usable)


def scarcity_cost(
    snapshot: Snapshot,
    pending: Sequence[Gang],
    placements: Sequence[GangPlacement],
    policy: Policy,
) -> float:
    """Aggregate charge of a decision's placements (empty GPUs they occupy, per type)."""
    if not snapshot.constrained_demand or policy.weights.scarcity <= 0:
        return 0.0
    empty = empty_per_type(snapshot)
    kept = reserves(snapshot, policy, empty, pending)
    if not kept:
        return 0.0
    used = _used_gpus(snapshot)
    gangs = {g.id: g for g in pending}
    present = {n.gpu_type for n in snapshot.nodes if n.schedulable}
    taken: dict[str, float] = {}
    flexible: dict[str, float] = {}
    for placement in placements:
        t = placement.gpu_type
        if t not in kept:
            continue
        # GPUs that stop being empty: a MIG slice occupies its whole GPU for single-type gangs.
        occupied = {(r.node, g) for r in placement.replicas for g in r.gpus} - used
        used |= occupied
        taken[t] = taken.get(t, 0.0) + len(occupied)
        if flexible_in(snapshot, gangs[placement.gang_id], present):
            flexible[t] = flexible.get(t, 0.0) + len(occupied)
    return sum(kept[t].aggregate(taken[t], flexible.get(t, 0.0)) for t in taken)


def _used_gpus(snapshot: Snapshot) -> set[tuple[str, int]]:
    used: set[tuple[str, int]] = set()
    for gang in snapshot.running:
        for replica in gang.replicas:
            used.update((replica.node, g) for g in replica.gpus)
    return used


def is_flexible(usable: Sequence[str]) -> bool:
    """A gang with more than one usable type has a choice, so it pays for scarce types."""
    return len(usable) > 1
