"""Scarcity: keep free capacity of a type for the demand that can run only on that type.

A gang that accepts several GPU types takes its most valuable one. When another gang can run only
on that type, it may then wait while GPUs of other types sit free: the fragmentation the FGD paper
(ATC'23) measures against the expected workload. From the caller's workload estimate
(`Snapshot.workload`) the core takes, per type, the share of requested GPU capacity that accepts
only that type among the types present, and turns it into two reserves priced in the objective:

* a **GPU reserve** of `share_t x GPUs of the fleet`: the GPUs of t that single-type tasks occupy
  in a steady state shaped like the estimate. A gang with a choice of types that leaves fewer
  than that empty pays, per GPU it takes inside the reserve, `scarcity weight x what a GPU of t
  is worth` (the larger of its catalogue value and the best per-GPU value of a pending gang on
  it: the displaced single-type gang is assumed to be worth as much as the work competing for
  the GPU). The reserve is fractional: a share of 0.26 % on a 256-GPU fleet keeps 0.66 GPU, so at
  weight 2 the last empty GPU of t costs 1.3 GPUs' worth.
* a **node reserve** per single-type shape of s >= 2 GPUs on one node: `share x fleet GPUs / s`
  *slots* (places for s GPUs on one node, in one NVLink domain when the shape needs it), since a
  large request needs a whole node's worth of empty GPUs, which a count of GPUs scattered over
  partly used nodes cannot protect. Slots a flexible gang breaks inside the reserve cost
  `scarcity weight x s x worth` each.

When no other type fits, the gang still takes it. GPUs are counted whole: a MIG slice on an empty
GPU takes that GPU from the reserve. Aggregate form (objective and CP-SAT), per reserve R with
free units F before the decision and units A used (all gangs) of which X by flexible gangs:
    charge = price x min(X, max(0, A - (F - R)))
Greedy charges each flexible gang the increase of `max(0, R - free)` its plan causes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpufleet.core.demand import Gang
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.valuation import replica_value
from gpufleet.core.workload import TaskShape
from gpufleet.model.gpus import GpuType


@dataclass(frozen=True, slots=True)
class Reserve:
    """Free units (GPUs, or node slots) of one type kept for single-type demand."""

    gpu_type: str
    free: float  # free units of the type when the decision starts
    reserved: float  # units kept for single-type gangs (fractional)
    price: float  # objective cost per unit a flexible gang takes inside the reserve

    def charge(self, free_now: float, take: float) -> float:
        """Cost of a flexible gang taking `take` units when `free_now` are free."""
        before = max(0.0, self.reserved - free_now)
        after = max(0.0, self.reserved - (free_now - take))
        return self.price * (after - before)

    def aggregate(self, taken: float, flexible: float) -> float:
        """Cost of a decision taking `taken` units of the type, `flexible` by flexible gangs."""
        return self.price * min(flexible, max(0.0, taken - (self.free - self.reserved)))


@dataclass(frozen=True, slots=True, order=True)
class SlotKind:
    """Room for one task of `gpus` GPUs on one node of one of `types` (in one NVLink domain if
    `nvlink`): what a large request needs, which GPUs scattered over nodes do not give."""

    types: tuple[str, ...]
    gpus: int
    nvlink: bool

    def count(self, empty_per_domain: Iterable[int]) -> int:
        """Slots a node with these empty GPUs per NVLink domain offers."""
        counts = list(empty_per_domain)
        if self.nvlink:
            return sum(c // self.gpus for c in counts)
        return sum(counts) // self.gpus


def usable_shape_types(snapshot: Snapshot, shape: TaskShape, present: set[str]) -> list[str]:
    """A shape's acceptable types that are present and, for a MIG shape, offer its profile."""
    return [
        t
        for t in shape.types
        if t in present
        and t in snapshot.catalog
        and (shape.mig_profile is None or snapshot.catalog[t].has_mig_profile(shape.mig_profile))
    ]


def present_types(snapshot: Snapshot) -> set[str]:
    return {n.gpu_type for n in snapshot.nodes if n.schedulable}


def constrained_shares(snapshot: Snapshot) -> tuple[dict[str, float], dict[SlotKind, float]]:
    """Shares of requested GPU capacity that need scarce room: per type, the one-GPU and MIG
    shapes only that present type can serve; per slot kind, the shapes of 2 or more GPUs on one
    node, over the present types with nodes large enough for them (their room is node-shaped,
    so a count of GPUs would protect the wrong thing)."""
    if snapshot.workload is None:
        return {}, {}
    present = present_types(snapshot)
    largest: dict[str, int] = {}
    widest: dict[str, int] = {}
    for node in snapshot.nodes:
        if node.schedulable:
            largest[node.gpu_type] = max(largest.get(node.gpu_type, 0), node.gpu_count)
            domain = max((len(g) for g in node.domains().values()), default=0)
            widest[node.gpu_type] = max(widest.get(node.gpu_type, 0), domain)
    per_type: dict[str, float] = {}
    per_slot: dict[SlotKind, float] = {}
    for shape, share in snapshot.workload.gpu_shares(snapshot.catalog).items():
        usable = usable_shape_types(snapshot, shape, present)
        if shape.mig_profile is not None or shape.gpus < 2:
            if len(usable) == 1:
                per_type[usable[0]] = per_type.get(usable[0], 0.0) + share
            continue
        room = widest if shape.nvlink else largest
        fitting = tuple(t for t in usable if room[t] >= shape.gpus)
        if fitting:
            kind = SlotKind(fitting, shape.gpus, shape.nvlink)
            per_slot[kind] = per_slot.get(kind, 0.0) + share
    return per_type, per_slot


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


def slots_per_kind(snapshot: Snapshot, kinds: Iterable[SlotKind]) -> dict[SlotKind, int]:
    """Free slots of each kind in the snapshot."""
    used = _used_gpus(snapshot)
    wanted = list(kinds)
    out = dict.fromkeys(wanted, 0)
    for node in snapshot.nodes:
        if not node.schedulable:
            continue
        domains: dict[int, int] = {}
        for gpu in node.gpus:
            if (node.name, gpu.index) not in used:
                domains[gpu.nvlink_domain] = domains.get(gpu.nvlink_domain, 0) + 1
        for kind in wanted:
            if node.gpu_type in kind.types:
                out[kind] += kind.count(domains.values())
    return out


def gpu_worth(snapshot: Snapshot, policy: Policy, t: str, pending: Sequence[Gang]) -> float:
    """What a GPU of type t is worth: its catalogue value, or more to a pending gang."""
    gpu = snapshot.catalog[t]
    worth = policy.weights.work * gpu.relative_throughput
    for gang in pending:
        if t in gang.type_names() and (
            gang.mig_profile is None or gpu.has_mig_profile(gang.mig_profile)
        ):
            per = replica_value(gang, gpu, policy).objective / gpu_use(gang, gpu, 1)
            worth = max(worth, per)
    return worth


def reserves(
    snapshot: Snapshot, policy: Policy, empty: dict[str, int], pending: Sequence[Gang] = ()
) -> dict[str, Reserve]:
    """GPU reserves of the types with single-type demand, given empty GPUs per type."""
    weights = policy.weights
    if weights.scarcity <= 0:
        return {}
    shares, _ = constrained_shares(snapshot)
    total = float(sum(empty.values()))
    out: dict[str, Reserve] = {}
    for t, share in sorted(shares.items()):
        if share <= 0 or t not in empty:
            continue
        price = weights.scarcity * gpu_worth(snapshot, policy, t, pending)
        out[t] = Reserve(t, float(empty[t]), share * total, price)
    return out


def slot_reserves(
    snapshot: Snapshot,
    policy: Policy,
    empty: dict[str, int],
    slots: dict[SlotKind, int],
    pending: Sequence[Gang] = (),
) -> dict[SlotKind, Reserve]:
    """Node reserves of the shapes of 2+ GPUs on one node, given empty GPUs per type and free
    slots per kind."""
    weights = policy.weights
    if weights.scarcity <= 0:
        return {}
    _, shares = constrained_shares(snapshot)
    total = float(sum(empty.values()))
    out: dict[SlotKind, Reserve] = {}
    for kind, share in sorted(shares.items()):
        if share <= 0 or kind not in slots:
            continue
        worth = max(gpu_worth(snapshot, policy, t, pending) for t in kind.types)
        reserved = share * total / kind.gpus
        price = weights.scarcity * kind.gpus * worth
        out[kind] = Reserve(",".join(kind.types), float(slots[kind]), reserved, price)
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


def _used_gpus(snapshot: Snapshot) -> set[tuple[str, int]]:
    used: set[tuple[str, int]] = set()
    for gang in snapshot.running:
        for replica in gang.replicas:
            used.update((replica.node, g) for g in replica.gpus)
    return used


def is_flexible(usable: Sequence[str]) -> bool:
    """A gang with more than one usable type has a choice, so it pays for scarce types."""
    return len(usable) > 1
