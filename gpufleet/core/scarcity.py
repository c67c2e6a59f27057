"""Scarcity: keep free capacity of some types for the demand that can run only on those types.

A gang that accepts several GPU types takes its most valuable one. When another gang can run only
on that type, it may then wait while GPUs of other types sit free: the fragmentation the FGD paper
(ATC'23) measures against the expected workload. The same holds for a set of types: MIG slices
run only on MIG-capable types, so flexible whole-GPU pods that fill the A100s and H100s leave
slice requests waiting while V100s and T4s sit free. From the caller's workload estimate
(`Snapshot.workload`) the core takes, per set S of types (smaller than the types present), the
share of requested GPU capacity whose usable types are exactly S, and turns it into two reserves
priced in the objective:

* a **GPU reserve** over the empty GPUs of the types in S of `share_S x spare GPUs`, where the
  spare GPUs are the empty GPUs of the fleet beyond what the pending gangs ask for: of the
  capacity left for tasks yet to arrive, the part tasks confined to S are expected to ask for,
  kept as whole GPUs enough for that many arrivals at a 90 % Poisson quantile (`whole_tasks`).
  A gang with a usable type outside S (a *flexible* gang, for this reserve) that leaves fewer
  than that empty in S pays, per GPU it takes inside the reserve, `scarcity weight x what a GPU
  of S is worth` (of its types, the largest of the catalogue value and the best per-GPU value of
  a pending gang: the displaced gang is assumed to be worth as much as the work competing for
  the GPU). A single type is the set of one (a gang with any other usable type pays). A share
  of 0.26 % with 256 GPUs spare expects 0.66 GPU and keeps 2 (the expectation itself, kept as a
  fraction, charged the last empty GPU only in part, and a gang took it for the type's speed
  while one confined arrival in two found none); a class expected less than 0.105 times keeps
  none. It shrinks as the fleet fills and vanishes while the queue asks for more than is free
  (the queue is the workload then).
* a **node reserve** per large shape of s GPUs on one node: `share x spare GPUs / s` *slots*
  (places for s GPUs on one node, in one NVLink domain when the shape needs it), since a large
  request needs a whole node's worth of empty GPUs, which a count of GPUs scattered over partly
  used nodes cannot protect. Slots a smaller task breaks inside the reserve cost
  `scarcity weight x s x worth` each (in greedy, only a gang with a choice of types pays).
  A node reserve also keeps the slots that GPU reserves over its types need (`claimed_slots`):
  the GPUs such a reserve keeps beyond the empty GPUs outside the free slots can only be
  inside them, so those slots are not room for large tasks. Counted apart, the last empty A100
  node was both the room an A100/H100-only class of MIG pods needed and one of the free 8-GPU
  slots, so the node reserve let small flexible pods break the other 8-GPU nodes, a MIG pod
  then took that one, and the next 8-GPU pod waited with 30 GPUs free (Alibaba `multigpu20`,
  held-out orders 9 and 23).

When no other type fits, the gang still takes it. GPUs are counted whole: a MIG slice on an empty
GPU takes that GPU from the reserve. Aggregate form (objective and CP-SAT), per reserve R with
free units F before the decision and units A used (all gangs) of which X by flexible gangs (for a
GPU reserve: gangs with a usable type outside its set):
    charge = price x min(X, max(0, A - (F - R)))
Greedy charges each flexible gang the increase of `max(0, R - free)` its plan causes.
Without single-type or narrower demand (every small task accepts every type present, as in the
Philly replays) there is no GPU reserve. With some single-type demand, a type no such task has
named yet still gets the share of one task in the estimate's window (`unseen_share`): the first
task confined to a type the history never asked for would otherwise find it all taken.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpufleet.core.demand import Gang
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.valuation import replica_value
from gpufleet.core.workload import WINDOW, TaskShape
from gpufleet.model.gpus import GpuType

# The share of confined arrivals a reserve is sized to serve (whole_tasks).
SERVICE_LEVEL = 0.9

# The same when the reserve prices a move (moves.plan_moves). A move is optional: refused, its
# gang runs on at its current speed; taken into room a confined class then needs, that class
# waits. With 0.9 for moves, flexible pods moved V100 -> A100 into the slack of the A100/H100
# MIG reserve in the minutes before a burst of A100/H100-only MIG pods; the MIG pods then took
# the last empty A100 node and an A100-only 8-GPU pod waited to the end with 13 A100 GPUs free
# (Alibaba gpuspec10 / alibaba-shapes-273 order 4: 0.81 of best fit's unallocated GPUs while
# pods wait; 0.44 with 0.99, the same as without any move).
MOVE_SERVICE_LEVEL = 0.99

# A node reserve smaller than this (in slots) is not kept: its price would be negligible.
MIN_SLOTS = 0.02


@dataclass(frozen=True, slots=True)
class Reserve:
    """Free units (GPUs, or node slots) of one type kept for single-type demand."""

    gpu_type: str
    free: float  # free units of the type when the decision starts
    reserved: float  # units kept for single-type gangs (fractional)
    price: float  # objective cost per unit a flexible gang takes inside the reserve
    claimed: float = 0.0  # of `reserved`, the slots GPU reserves keep (node reserves only)

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


def constrained_shares(
    snapshot: Snapshot,
) -> tuple[dict[tuple[str, ...], float], dict[SlotKind, float]]:
    """Shares of requested GPU capacity that need scarce room: per set of present types
    smaller than all of them, the one-GPU and MIG shapes only those types can serve (sorted type
    names as the key); per slot kind, the shapes of 2 or more GPUs and at least half a node
    (their room is node-shaped, so a count of GPUs would protect the wrong thing): a kind per
    size for the shapes that only one type with large enough nodes can serve, and one per size
    for the others over every type that can serve any of them (one reserve per size keeps the
    number of reserves small whatever the mix of acceptable types)."""
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
    per_set: dict[tuple[str, ...], float] = {}
    per_slot: dict[SlotKind, float] = {}
    flexible: dict[tuple[int, bool], tuple[set[str], float]] = {}
    for shape, share in snapshot.workload.gpu_shares(snapshot.catalog).items():
        usable = usable_shape_types(snapshot, shape, present)
        if shape.mig_profile is not None or shape.gpus < 2:
            if 0 < len(usable) < len(present):
                key = tuple(sorted(usable))
                per_set[key] = per_set.get(key, 0.0) + share
            continue
        room = widest if shape.nvlink else largest
        # Large tasks only (half a node or more): smaller ones find room on partly used nodes,
        # and FGD's term already prices what they fragment.
        fitting = [t for t in usable if room[t] >= shape.gpus >= largest[t] / 2]
        if len(fitting) == 1:
            kind = SlotKind((fitting[0],), shape.gpus, shape.nvlink)
            per_slot[kind] = per_slot.get(kind, 0.0) + share
        elif fitting:
            types, total = flexible.get((shape.gpus, shape.nvlink), (set(), 0.0))
            flexible[(shape.gpus, shape.nvlink)] = (types | set(fitting), total + share)
    for (gpus, nvlink), (types, share) in flexible.items():
        per_slot[SlotKind(tuple(sorted(types)), gpus, nvlink)] = share
    if any(len(key) == 1 for key in per_set):
        unseen = unseen_share(snapshot)
        for t in sorted(present):
            per_set.setdefault((t,), unseen)
    return per_set, per_slot


def unseen_share(snapshot: Snapshot) -> float:
    """The share of requested GPU capacity given to a type that no single-type task has named
    yet, in a workload where single-type tasks exist: one whole-GPU task in the estimate's
    window (`workload.WINDOW` tasks; the rule of succession). Without it the first task confined
    to a type not in the history (an H100-only pod, Alibaba gpuspec10 held-out order 37) found
    every GPU of that type taken by flexible pods and waited 148k s with 180 A100 GPUs free."""
    if snapshot.workload is None:
        return 0.0
    mean = sum(s.share * s.shape.compute(snapshot.catalog) for s in snapshot.workload.shapes)
    return 1.0 / (WINDOW * mean + 1.0) if mean > 0 else 0.0


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


def slots_per_type(snapshot: Snapshot, kinds: Iterable[SlotKind]) -> dict[SlotKind, dict[str, int]]:
    """Free slots of each kind in the snapshot, per GPU type."""
    used = _used_gpus(snapshot)
    wanted = list(kinds)
    out: dict[SlotKind, dict[str, int]] = {k: {} for k in wanted}
    for node in snapshot.nodes:
        if not node.schedulable:
            continue
        domains: dict[int, int] = {}
        for gpu in node.gpus:
            if (node.name, gpu.index) not in used:
                domains[gpu.nvlink_domain] = domains.get(gpu.nvlink_domain, 0) + 1
        for kind in wanted:
            if node.gpu_type in kind.types:
                per = out[kind]
                per[node.gpu_type] = per.get(node.gpu_type, 0) + kind.count(domains.values())
    return out


def claimed_slots(
    kind: SlotKind,
    slots: Mapping[str, int],
    empty: Mapping[str, int],
    gpu_reserves: Mapping[tuple[str, ...], Reserve],
) -> int:
    """Free slots of `kind` that the GPU reserves of its types keep: a reserve over types all
    of which the kind has needs its GPUs empty, and the GPUs it cannot find outside the kind's
    free slots (`slots` per type; `empty` GPUs per type) are inside them, a slot per `kind.gpus`
    GPUs begun."""
    out = 0
    for types, reserve in gpu_reserves.items():
        if not set(types) <= set(kind.types):
            continue
        loose = sum(empty.get(t, 0) - kind.gpus * slots.get(t, 0) for t in types)
        short = reserve.reserved - loose
        if short > 0:
            out += math.ceil(short / kind.gpus)
    return out


def gpu_worths(snapshot: Snapshot, policy: Policy, pending: Sequence[Gang]) -> dict[str, float]:
    """What a GPU of each type is worth: its catalogue value, or more to a pending gang."""
    present = present_types(snapshot)
    worth = {
        t.name: policy.weights.work * t.relative_throughput
        for t in snapshot.catalog
        if t.name in present
    }
    for gang in pending:
        for t in set(gang.type_names()):
            if t not in worth:
                continue
            gpu = snapshot.catalog[t]
            if gang.mig_profile is None or gpu.has_mig_profile(gang.mig_profile):
                per = replica_value(gang, gpu, policy).objective / gpu_use(gang, gpu, 1)
                worth[t] = max(worth[t], per)
    return worth


def spare_gpus(empty: Mapping[str, int], pending: Sequence[Gang]) -> float:
    """Empty GPUs left for tasks yet to arrive once the pending gangs have theirs: what the
    reserves share out. With a queue longer than the free capacity it is zero, and the pending
    gangs compete on their value alone (they are the workload then)."""
    asked = sum(g.gpus_needed(g.replicas_min) for g in pending)
    return max(0.0, float(sum(empty.values())) - asked)


def reserves(
    snapshot: Snapshot,
    policy: Policy,
    spare: float,
    empty: Mapping[str, int],
    worths: Mapping[str, float],
    shares: Mapping[tuple[str, ...], float],
    level: float = SERVICE_LEVEL,
) -> dict[tuple[str, ...], Reserve]:
    """GPU reserves of the type sets with confined demand (`shares`, from `constrained_shares`):
    their share of the `spare` GPUs over the sets' empty GPUs, given empty GPUs per type, kept
    for the arrivals at the `level` quantile (`whole_tasks`)."""
    weights = policy.weights
    if weights.scarcity <= 0:
        return {}
    out: dict[tuple[str, ...], Reserve] = {}
    for types, share in sorted(shares.items()):
        kept = [t for t in types if t in empty]
        if share * spare <= 0 or not kept:
            continue  # nothing to keep (no spare GPUs): it would never charge
        free = float(sum(empty[t] for t in kept))
        worth = max(worths[t] for t in kept)
        kept_units = whole_tasks(share * spare, level)
        out[types] = Reserve(",".join(types), free, kept_units, weights.scarcity * worth)
    return out


def slot_reserves(
    policy: Policy,
    spare: float,
    slots: Mapping[SlotKind, int],
    worths: Mapping[str, float],
    shares: Mapping[SlotKind, float],
    claimed: Mapping[SlotKind, int] | None = None,
) -> dict[SlotKind, Reserve]:
    """Node reserves of the large shapes (`shares` per slot kind, from `constrained_shares`):
    their share of the `spare` GPUs in slots, given free slots per kind, plus the slots GPU
    reserves keep (`claimed`, from `claimed_slots`)."""
    weights = policy.weights
    if weights.scarcity <= 0:
        return {}
    total = spare
    out: dict[SlotKind, Reserve] = {}
    for kind, share in sorted(shares.items()):
        reserved = share * total / kind.gpus
        if reserved < MIN_SLOTS or kind not in slots:
            continue  # too rare a task to keep a node for, at this much free capacity
        kept = float((claimed or {}).get(kind, 0))
        worth = max(worths[t] for t in kind.types)
        price = weights.scarcity * kind.gpus * worth
        out[kind] = Reserve(",".join(kind.types), float(slots[kind]), reserved + kept, price, kept)
    return out


def whole_tasks(expected: float, level: float = SERVICE_LEVEL) -> float:
    """The units a reserve keeps for `expected` confined units: whole units enough for the
    arrivals at the `level` quantile of a Poisson count with that mean (`SERVICE_LEVEL` for a
    placement, `MOVE_SERVICE_LEVEL` for a move).

    A fractional reserve (the expectation itself) charged the last free unit only in part, so a
    flexible gang of a fast type's value took it, and with a mean below one the first confined
    task then waited while the rest of the fleet sat free (Alibaba `gpuspec10`, held-out orders
    15 and 22: one or two H100-only pods in 200 arrivals, expected 0.6 GPU). A class rarer than
    1 - SERVICE_LEVEL keeps nothing.
    """
    if expected <= 0:
        return 0.0
    term = math.exp(-expected)
    cdf = term
    k = 0
    while cdf < level:
        k += 1
        term *= expected / k
        cdf += term
    return float(k)


def gpu_use(gang: Gang, gpu: GpuType, replicas: int) -> float:
    """GPUs `replicas` replicas of the gang take on `gpu`: MIG slices count whole GPUs (at
    most one per slice), since a GPU with any slice in use is no longer free for whole-GPU work.
    """
    if gang.mig_profile is not None:
        return float(replicas)
    return float(gang.gpus_per_replica * replicas)


def usable_gang_types(snapshot: Snapshot, gang: Gang, present: set[str]) -> set[str]:
    """The gang's acceptable types that are present and, for MIG, offer its profile."""
    return {
        t
        for t in gang.type_names()
        if t in present
        and t in snapshot.catalog
        and (gang.mig_profile is None or snapshot.catalog[t].has_mig_profile(gang.mig_profile))
    }


def flexible_in(snapshot: Snapshot, gang: Gang, present: set[str]) -> bool:
    """Whether the gang has more than one usable type among the `present` node types."""
    return is_flexible(sorted(usable_gang_types(snapshot, gang, present)))


def pays_for(usable: set[str] | frozenset[str], types: Sequence[str]) -> bool:
    """Whether a gang with these usable types pays for the reserve of `types`: it could run
    elsewhere (with one type, any other usable type)."""
    return not usable <= set(types)


def _used_gpus(snapshot: Snapshot) -> set[tuple[str, int]]:
    used: set[tuple[str, int]] = set()
    for gang in snapshot.running:
        for replica in gang.replicas:
            used.update((replica.node, g) for g in replica.gpus)
    return used


def is_flexible(usable: Sequence[str]) -> bool:
    """A gang with more than one usable type has a choice, so it pays for scarce types."""
    return len(usable) > 1
