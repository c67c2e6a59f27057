"""What the expected workload makes a placement cost: FGD fragmentation growth and reserves.

Two views of the same prices (fragmentation.py for the measure, scarcity.py for the reserves):
- `Pricing` prices one gang's tentative placement against the working `ClusterState` of a
  decision (greedy, CP-SAT's repair pass, preemption) and follows the state as gangs commit;
- `decision_costs` prices a finished decision against its snapshot, for the objective that
  compares engines.
Both are zero when the snapshot carries no workload estimate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang, Topology
from gpufleet.core.fragmentation import NodeFree, TypeMass, fragmentation, node_free, type_masses
from gpufleet.core.policy import Policy
from gpufleet.core.scarcity import (
    SERVICE_LEVEL,
    Reserve,
    SlotKind,
    claimed_slots,
    constrained_shares,
    empty_per_type,
    flexible_in,
    gpu_worths,
    is_flexible,
    pays_for,
    present_types,
    reserves,
    slot_reserves,
    slots_per_type,
    spare_gpus,
    usable_gang_types,
)
from gpufleet.core.snapshot import ReplicaPlacement, Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.model.inventory import Node
from gpufleet.model.mig import MigLayout, MigPlacement

__all__ = ["DecisionCosts", "MovePrice", "Pricing", "decision_costs", "empty_gpus", "masses_of"]


def masses_of(snapshot: Snapshot) -> dict[str, TypeMass]:
    """The workload estimate per present GPU type (empty without an estimate)."""
    if snapshot.workload is None or not snapshot.workload.shapes:
        return {}
    types = {n.gpu_type for n in snapshot.nodes}
    return type_masses(snapshot.workload, snapshot.catalog, types)


def state_node_free(
    state: ClusterState,
    n: int,
    whole: Iterable[int] = (),
    instances: Mapping[int, Iterable[MigPlacement]] | None = None,
    layouts: Mapping[int, MigLayout] | None = None,
) -> NodeFree:
    """Node n's free capacity in `state`, after also taking `whole` GPUs and `instances`
    (per GPU) with the GPUs in `layouts` cut to those layouts."""
    node = state.nodes[n]
    held = [g for g in range(node.gpu_count) if state.busy[n][g]]
    held.extend(whole)
    extra = instances or {}
    used = {g: state.used_inst[n][g] | set(extra.get(g, ())) for g in range(node.gpu_count)}
    current: dict[int, MigLayout | None] = {g: state.layout[n][g] for g in range(node.gpu_count)}
    current.update(layouts or {})
    return node_free(node, state.catalog, held, used, current)


@dataclass
class _Overlay:
    """A tentative placement's changes on one node."""

    whole: list[int]
    instances: dict[int, list[MigPlacement]]
    layouts: dict[int, MigLayout]


def _overlays(
    state: ClusterState,
    replicas: Sequence[ReplicaPlacement],
    repartitions: Sequence[tuple[int, int, MigLayout]],
) -> dict[int, _Overlay]:
    out: dict[int, _Overlay] = {}
    for n, g, layout in repartitions:
        out.setdefault(n, _Overlay([], {}, {})).layouts[g] = layout
    for rep in replicas:
        n = state.node_index[rep.node]
        overlay = out.setdefault(n, _Overlay([], {}, {}))
        if rep.mig is None:
            overlay.whole.extend(rep.gpus)
        else:
            overlay.instances.setdefault(rep.gpus[0], []).append(rep.mig)
    return out


@dataclass(frozen=True, slots=True)
class MovePrice:
    """What a move of a running gang takes from the expected workload (objective units).

    `reserved`: what its new placement takes from the reserves, priced as for a placement, with
    three differences. Its GPU reserves are sized at `scarcity.MOVE_SERVICE_LEVEL` (the caller's
    `Pricing` level). A move is charged for the node room it breaks net of the room its old
    placement frees. And of a node reserve it is charged only for the last free slot and the
    slots GPU reserves claim (`Reserve.claimed`): a reserve of r slots is what large tasks are
    expected to need of the spare capacity while it lasts, but a moved gang holds its room only
    until it ends or is preempted, and the next decision prices the room again, so a move keeps
    the room the next large arrival needs (one slot) rather than r. Without the cap an estimate
    of whole-node single-type jobs reserved every free node of their type and refused each move
    onto one; without the charge a flexible pod moved onto the last empty 8-GPU node, and the
    next 8-GPU pod waited. Claimed slots are kept whole: they are the room demand confined to
    fewer types needs, which a moved gang would take as surely as a placed one.
    `fragmentation`: the weighted FGD growth where the gang lands, as a placement pays it. What
    freeing its old GPUs does to the measure is not credited nor charged: free GPUs of a slow
    type count as fragmentation for the tasks that do not accept it, so the net change would
    refuse exactly the moves off slow types that moves are for.
    """

    reserved: float
    fragmentation: float


class Pricing:
    """Prices of tentative placements in one decision's working state (see module docstring)."""

    def __init__(
        self,
        state: ClusterState,
        policy: Policy,
        pending: Sequence[Gang],
        level: float = SERVICE_LEVEL,
    ) -> None:
        """`level`: the service level the GPU reserves are sized to (`scarcity.whole_tasks`)."""
        snapshot = state.snapshot
        self.policy = policy
        self.weight = policy.weights.fragmentation
        self.masses = masses_of(snapshot) if self.weight > 0 else {}
        self.present = present_types(snapshot)
        self.gpu_reserves: dict[tuple[str, ...], Reserve] = {}
        self.slot_reserves: dict[SlotKind, Reserve] = {}
        self.slots: dict[SlotKind, int] = {}
        per_set, per_slot = constrained_shares(snapshot)
        if policy.weights.scarcity > 0 and (per_set or per_slot):
            worths = gpu_worths(snapshot, policy, pending)
            empty = {t: empty_gpus(state, t) for t in state.nodes_by_type}
            spare = spare_gpus(empty, pending)
            self.gpu_reserves = reserves(snapshot, policy, spare, empty, worths, per_set, level)
            by_type = {k: _state_slots_by_type(state, k) for k in per_slot}
            counts = {k: sum(v.values()) for k, v in by_type.items()}
            claimed = {k: claimed_slots(k, by_type[k], empty, self.gpu_reserves) for k in per_slot}
            self.slot_reserves = slot_reserves(policy, spare, counts, worths, per_slot, claimed)
            self.slots = {k: counts[k] for k in self.slot_reserves}
        # Reserves by the GPU types they count (a placement only touches its type's).
        self.sets_of: dict[str, list[tuple[tuple[str, ...], frozenset[str]]]] = {}
        for types in self.gpu_reserves:
            for t in types:
                self.sets_of.setdefault(t, []).append((types, frozenset(types)))
        self.kinds_of: dict[str, list[SlotKind]] = {}
        for kind in self.slot_reserves:
            for t in kind.types:
                self.kinds_of.setdefault(t, []).append(kind)
        self._f: dict[tuple[str, NodeFree], float] = {}

    @property
    def active(self) -> bool:
        return bool(self.masses or self.gpu_reserves or self.slot_reserves)

    def _frag(self, gpu_type: str, free: NodeFree) -> float:
        key = (gpu_type, free)
        if key not in self._f:
            mass = self.masses.get(gpu_type)
            self._f[key] = 0.0 if mass is None else fragmentation(free, mass)
        return self._f[key]

    def cost(
        self,
        state: ClusterState,
        gang: Gang,
        gpu_type: str,
        replicas: Sequence[ReplicaPlacement],
        repartitions: Sequence[tuple[int, int, MigLayout]] = (),
    ) -> float:
        """Objective cost of placing `replicas` (after `repartitions`) for `gang` now: the
        weighted growth of expected fragmentation plus, for a gang with a choice of types, what
        it takes from the type's reserves."""
        overlays = _overlays(state, replicas, repartitions)
        return self._frag_cost(state, overlays) + self._reserve_cost(
            state, gang, gpu_type, len(replicas), overlays
        )

    def move_price(
        self,
        state: ClusterState,
        gang: Gang,
        gpu_type: str,
        replicas: Sequence[ReplicaPlacement],
        repartitions: Sequence[tuple[int, int, MigLayout]],
        released: Sequence[ReplicaPlacement],
    ) -> MovePrice:
        """What moving a running gang to `replicas` costs against the expected workload, in a
        state where its old `released` replicas are already free (see `MovePrice`)."""
        overlays = _overlays(state, replicas, repartitions)
        reserved = self._gpu_reserve_cost(state, gang, gpu_type, overlays)
        if self.kinds_of.get(gpu_type) and flexible_in(state.snapshot, gang, self.present):
            freed = _overlays(state, released, ())
            for kind in self.kinds_of[gpu_type]:
                if item_gpus(gang, len(replicas)) >= kind.gpus:
                    continue  # a task of the size the slots are for
                lost = _slots_taken(state, overlays, kind)
                gained = _slots_taken(state, freed, kind)  # what its old replicas held
                # At most the one slot the next large arrival needs, and the slots GPU reserves
                # keep (see MovePrice).
                full = self.slot_reserves[kind]
                room = replace(full, reserved=min(full.reserved, 1.0 + full.claimed))
                reserved += max(0.0, room.charge(self.slots[kind], lost - gained))
        return MovePrice(reserved, self._frag_cost(state, overlays))

    def _frag_cost(self, state: ClusterState, overlays: Mapping[int, _Overlay]) -> float:
        out = 0.0
        if self.masses:
            for n, o in overlays.items():
                t = state.node_type[n]
                before = self._frag(t, state_node_free(state, n))
                after = self._frag(t, state_node_free(state, n, o.whole, o.instances, o.layouts))
                out += self.weight * (after - before)
        return out

    def _gpu_reserve_cost(
        self, state: ClusterState, gang: Gang, gpu_type: str, overlays: Mapping[int, _Overlay]
    ) -> float:
        sets = self.sets_of.get(gpu_type)
        if not sets:
            return 0.0
        usable = usable_gang_types(state.snapshot, gang, self.present)
        if len(usable) < 2:
            return 0.0  # no choice of type: it pays for no reserve
        paying = [types for types, members in sets if not usable <= members]
        if not paying:
            return 0.0
        taken = sum(
            1 for n, o in overlays.items() for g in {*o.whole, *o.instances} if g in state.empty[n]
        )
        out = 0.0
        empty: dict[str, int] = {}  # per type, counted once for all the sets
        for types in paying:
            free = 0
            for t in types:
                if t not in empty:
                    empty[t] = empty_gpus(state, t) if t in state.nodes_by_type else 0
                free += empty[t]
            out += self.gpu_reserves[types].charge(free, taken)
        return out

    def _reserve_cost(
        self,
        state: ClusterState,
        gang: Gang,
        gpu_type: str,
        replicas: int,
        overlays: Mapping[int, _Overlay],
    ) -> float:
        if not self.gpu_reserves and not self.slot_reserves:
            return 0.0
        out = self._gpu_reserve_cost(state, gang, gpu_type, overlays)
        if not self.kinds_of.get(gpu_type) or not flexible_in(state.snapshot, gang, self.present):
            return out
        for kind in self.kinds_of.get(gpu_type, ()):
            slot_reserve = self.slot_reserves[kind]
            if item_gpus(gang, replicas) >= kind.gpus:
                continue  # a task of the size the slots are for
            lost = _slots_taken(state, overlays, kind)
            out += slot_reserve.charge(self.slots[kind], max(0, lost))
        return out

    def committing(
        self, state: ClusterState, replicas: Sequence[ReplicaPlacement]
    ) -> dict[SlotKind, int]:
        """Slots of each kind on the nodes `replicas` touch (call before committing them)."""
        if not self.slots or not replicas:
            return {}
        t = state.node_type[state.node_index[replicas[0].node]]
        return {k: self._slots_on(state, replicas, k) for k in self.kinds_of.get(t, ())}

    def committed(
        self, state: ClusterState, replicas: Sequence[ReplicaPlacement], before: dict[SlotKind, int]
    ) -> None:
        """Follow the state after a commit (with what `committing` returned before it)."""
        for kind, count in before.items():
            self.slots[kind] += self._slots_on(state, replicas, kind) - count

    @staticmethod
    def _slots_on(state: ClusterState, replicas: Sequence[ReplicaPlacement], kind: SlotKind) -> int:
        nodes = {state.node_index[r.node] for r in replicas}
        return sum(_node_slots(state, n, kind) for n in nodes)


def _taken(overlay: _Overlay) -> set[int]:
    return {*overlay.whole, *overlay.instances, *overlay.layouts}


def _slots_taken(state: ClusterState, overlays: Mapping[int, _Overlay], kind: SlotKind) -> int:
    """Free slots of `kind` that taking the `overlays`' GPUs in `state` would break."""
    return sum(
        _node_slots(state, n, kind) - _node_slots(state, n, kind, _taken(o))
        for n, o in overlays.items()
    )


def item_gpus(gang: Gang, replicas: int) -> int:
    """GPUs one of the gang's tasks takes on one node (0 for a MIG slice)."""
    if gang.mig_profile is not None:
        return 0
    if gang.topology is Topology.SAME_NODE:
        return gang.gpus_per_replica * replicas
    return gang.gpus_per_replica


def _node_slots(state: ClusterState, n: int, kind: SlotKind, taken: set[int] | None = None) -> int:
    if state.node_type[n] not in kind.types or not state.schedulable[n]:
        return 0
    domains: dict[int, int] = {}
    for g in state.empty[n]:
        if taken is None or g not in taken:
            d = state.domain_of[n][g]
            domains[d] = domains.get(d, 0) + 1
    return kind.count(domains.values())


def _state_slots_by_type(state: ClusterState, kind: SlotKind) -> dict[str, int]:
    return {
        t: sum(_node_slots(state, n, kind) for n in state.nodes_by_type.get(t, []))
        for t in kind.types
    }


def empty_gpus(state: ClusterState, gpu_type: str) -> int:
    """Empty GPUs of the type in the working state (what its GPU reserves count)."""
    return sum(k * len(bucket) for k, bucket in enumerate(state.type_nodes(gpu_type)))


# ----- a finished decision --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DecisionCosts:
    """What a decision costs against the expected workload (objective units)."""

    fragmentation_gpus: float  # growth of expected fragmentation, in GPUs (may be negative)
    fragmentation: float  # the same, weighted
    scarcity: float  # reserve charges


def decision_costs(
    snapshot: Snapshot, pending: Sequence[Gang], decision: Decision, policy: Policy
) -> DecisionCosts:
    """Fragmentation growth and reserve charges of a decision against its snapshot."""
    weights = policy.weights
    masses = masses_of(snapshot)
    per_set, per_slot = constrained_shares(snapshot)
    if not masses and not (weights.scarcity > 0 and (per_set or per_slot)):
        return DecisionCosts(0.0, 0.0, 0.0)
    evicted = {p.gang_id for p in decision.preemptions}
    moves = {m.gang_id: m for m in decision.moves}
    before = _Holdings.of_snapshot(snapshot, ())
    after = _Holdings.of_snapshot(snapshot, evicted | set(moves))
    layouts: dict[tuple[str, int], MigLayout | None] = {}
    for change in decision.repartitions:
        layouts[(change.node, change.gpu)] = change.new_layout
    gangs = {g.id: g for g in pending}
    present = present_types(snapshot)
    task_size: dict[str, int] = {}  # largest task placed per node
    occupied: list[tuple[str, int, set[str]]] = []  # type, GPUs newly taken, usable types
    held_before = before.gpus()
    placed = [(gangs[p.gang_id], p) for p in decision.placements]
    for running in snapshot.running:
        if running.id in moves and running.demand is not None:
            placed.append((running.demand, moves[running.id].placement))
    for gang, placement in placed:
        size = item_gpus(gang, placement.replica_count)
        for rep in placement.replicas:
            after.add(rep)
            task_size[rep.node] = max(task_size.get(rep.node, 0), size)
        gpus = {(r.node, g) for r in placement.replicas for g in r.gpus} - held_before
        occupied.append((placement.gpu_type, len(gpus), usable_gang_types(snapshot, gang, present)))
    touched = {r.node for _, p in placed for r in p.replicas}
    gone = evicted | set(moves)
    touched |= {r.node for g in snapshot.running if g.id in gone for r in g.replicas}
    touched |= {node for node, _ in layouts}
    frag = 0.0
    if masses:
        for name in sorted(touched):
            node = snapshot.node(name)
            mass = masses[node.gpu_type]
            old = node_free(node, snapshot.catalog, before.whole(name), before.instances(name))
            new_layouts = {g: lay for (n, g), lay in layouts.items() if n == name}
            new = node_free(
                node, snapshot.catalog, after.whole(name), after.instances(name), new_layouts
            )
            frag += fragmentation(new, mass) - fragmentation(old, mass)
    charge = 0.0
    if weights.scarcity > 0 and (per_set or per_slot):
        worths = gpu_worths(snapshot, policy, pending)
        empty = empty_per_type(snapshot)
        spare = spare_gpus(empty, pending)
        kept = reserves(snapshot, policy, spare, empty, worths, per_set)
        for types, reserve in kept.items():
            inside = [(n, u) for t, n, u in occupied if t in types]
            flexible = sum(n for n, u in inside if is_flexible(sorted(u)) and pays_for(u, types))
            charge += reserve.aggregate(sum(n for n, _ in inside), flexible)
        by_type = slots_per_type(snapshot, per_slot)
        slots = {k: sum(v.values()) for k, v in by_type.items()}
        claimed = {k: claimed_slots(k, by_type[k], empty, kept) for k in per_slot}
        for kind, reserve in slot_reserves(policy, spare, slots, worths, per_slot, claimed).items():
            lost = smaller_lost = 0.0
            for name in touched:
                node = snapshot.node(name)
                if node.gpu_type not in kind.types:
                    continue
                drop = max(0, before.slots(node, kind) - after.slots(node, kind))
                lost += drop
                if task_size.get(name, 0) < kind.gpus:  # not a task the slots are for
                    smaller_lost += drop
            charge += reserve.aggregate(lost, smaller_lost)
    return DecisionCosts(frag, weights.fragmentation * frag, charge)


class _Holdings:
    """GPUs held whole and MIG instances held, per node (a small ledger for pricing)."""

    def __init__(self) -> None:
        self._whole: dict[str, set[int]] = {}
        self._inst: dict[str, dict[int, set[MigPlacement]]] = {}

    @classmethod
    def of_snapshot(cls, snapshot: Snapshot, excluding: set[str] | tuple[()]) -> _Holdings:
        out = cls()
        for gang in snapshot.running:
            if gang.id in excluding:
                continue
            for rep in gang.replicas:
                out.add(rep)
        return out

    def add(self, rep: ReplicaPlacement) -> None:
        if rep.mig is None:
            self._whole.setdefault(rep.node, set()).update(rep.gpus)
        else:
            per_gpu = self._inst.setdefault(rep.node, {})
            per_gpu.setdefault(rep.gpus[0], set()).add(rep.mig)

    def whole(self, node: str) -> set[int]:
        return self._whole.get(node, set())

    def instances(self, node: str) -> dict[int, set[MigPlacement]]:
        return self._inst.get(node, {})

    def gpus(self) -> set[tuple[str, int]]:
        out = {(n, g) for n, gs in self._whole.items() for g in gs}
        out |= {(n, g) for n, per in self._inst.items() for g, held in per.items() if held}
        return out

    def used(self, node: str) -> set[int]:
        return self.whole(node) | {g for g, held in self.instances(node).items() if held}

    def slots(self, node: Node, kind: SlotKind) -> int:
        used = self.used(node.name)
        domains: dict[int, int] = {}
        for gpu in node.gpus:
            if gpu.index not in used:
                domains[gpu.nvlink_domain] = domains.get(gpu.nvlink_domain, 0) + 1
        return kind.count(domains.values())
