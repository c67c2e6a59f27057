"""Greedy placement: a fast, deterministic, first-class algorithm and the CP-SAT warm start.

Gangs go in order of priority, then size (largest first, the classic first-fit-decreasing rule).
Each gang tries its acceptable GPU types from most to least valuable; each replica goes to the
best-fitting node (fewest free GPUs that still fit), which packs partly used nodes first and keeps
idle nodes idle and large free blocks intact. MIG replicas use free slices on partly used GPUs
first, then slices of empty MIG GPUs whose layout serves the demand on the type, then cut an empty
GPU (fullest nodes first) to the layout the demand can use best (`cut_layout`). A gang is
committed only when all its (minimum) replicas fit.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpufleet.core.decision import GangPlacement
from gpufleet.core.demand import Gang, Topology
from gpufleet.core.policy import Policy
from gpufleet.core.pricing import Pricing
from gpufleet.core.queues import resource_key
from gpufleet.core.quota import ROOT
from gpufleet.core.reservation import MAX_RESERVED, reservable, reserve_node
from gpufleet.core.scarcity import gpu_use, is_flexible
from gpufleet.core.snapshot import ReplicaPlacement
from gpufleet.core.spread import fewest_node_count as fewest_node_count
from gpufleet.core.spread import spread_factor
from gpufleet.core.state import ClusterState
from gpufleet.core.valuation import base_throughput, gang_value, replica_value
from gpufleet.model.gpus import GpuType
from gpufleet.model.mig import MigLayout, MigPlacement, densest_layout, enumerate_layouts


@dataclass
class Plan:
    """A tentative placement of one gang, applied to the state only by `commit`."""

    gang: Gang
    gpu_type: str
    replicas: list[ReplicaPlacement] = field(default_factory=list)
    # (node, gpu, new layout) to apply before the replicas take their instances.
    repartitions: list[tuple[int, int, MigLayout]] = field(default_factory=list)


class Memo:
    """Results memoised for one decision only: densest MIG layouts and each gang's usable types
    (neither depends on what gets placed, only on the catalogue, the nodes and the policy)."""

    def __init__(self) -> None:
        self._layouts: dict[tuple[str, str], MigLayout] = {}
        self._maximal: dict[tuple[str, frozenset[str]], tuple[MigLayout, ...]] = {}
        self.types: dict[str, list[str]] = {}
        self.allowed: dict[str, frozenset[int] | None] = {}
        self.running_values: dict[str, float] = {}
        self._cuts: dict[tuple[str, str, int], MigLayout] = {}
        # `keeps` per (type, profile, layout): many empty GPUs share a layout.
        self._keeps: dict[tuple[str, str, MigLayout], bool] = {}
        # MIG slices asked for per (type, profile): running replicas plus pending gangs noted.
        self._slice_demand: Counter[tuple[str, str]] | None = None
        self._pending_profiles: Counter[str] = Counter()
        self._noted: set[str] = set()

    def note_pending(self, gangs: Sequence[Gang]) -> None:
        """Count the pending gangs' MIG replicas into the slice demand (each gang once)."""
        for gang in gangs:
            if gang.mig_profile is not None and gang.id not in self._noted:
                self._noted.add(gang.id)
                self._pending_profiles[gang.mig_profile] += gang.replicas_max
                self._cuts.clear()
                self._keeps.clear()

    def slice_demand(self, state: ClusterState, gpu_type: str) -> Counter[str]:
        """Expected demand per MIG profile on a type: what runs there plus what is pending."""
        if self._slice_demand is None:
            tally: Counter[tuple[str, str]] = Counter()
            for gang in state.snapshot.running:
                for replica in gang.replicas:
                    if replica.mig is not None:
                        tally[(gang.gpu_type, replica.mig.profile)] += 1
            self._slice_demand = tally
        out = Counter({p: c for (t, p), c in self._slice_demand.items() if t == gpu_type})
        gpu = state.catalog[gpu_type]
        out.update({p: c for p, c in self._pending_profiles.items() if gpu.has_mig_profile(p)})
        return out

    def cut(self, state: ClusterState, gpu_type: str, profile: str, need: int = 1) -> MigLayout:
        """Layout an empty GPU gets when cut for `need` replicas of `profile` (`cut_layout`)."""
        key = (gpu_type, profile, need)
        if key not in self._cuts:
            demand = self.slice_demand(state, gpu_type)
            gpu = state.catalog[gpu_type]
            candidates = self.maximal(state, gpu_type, base_profiles(gpu, profile))
            self._cuts[key] = cut_layout(gpu, profile, demand, candidates, need)
        return self._cuts[key]

    def keeps(self, state: ClusterState, n: int, g: int, profile: str) -> bool:
        """Whether empty GPU (n, g)'s current layout serves the demand on its type as well as
        the layout a cut for one `profile` replica would give (`layout_use`), so that a replica
        may take its free instance as it is instead of re-cutting the GPU."""
        layout = state.layout[n][g]
        if layout is None:
            return False
        gpu_type = state.node_type[n]
        key = (gpu_type, profile, layout)
        if key not in self._keeps:
            gpu = state.catalog[gpu_type]
            demand = with_profile(self.slice_demand(state, gpu_type), profile, 1)
            target = self.cut(state, gpu_type, profile)
            self._keeps[key] = layout_use(gpu, layout, demand) >= layout_use(gpu, target, demand)
        return self._keeps[key]

    def maximal(
        self, state: ClusterState, gpu_type: str, profiles: frozenset[str]
    ) -> tuple[MigLayout, ...]:
        """Maximal layouts of a type over a set of profiles."""
        key = (gpu_type, profiles)
        if key not in self._maximal:
            gpu = state.catalog[gpu_type]
            self._maximal[key] = enumerate_layouts(gpu, profiles=profiles, maximal_only=True)
        return self._maximal[key]

    def densest(self, state: ClusterState, gpu_type: str, profile: str) -> MigLayout:
        key = (gpu_type, profile)
        if key not in self._layouts:
            self._layouts[key] = densest_layout(state.catalog[gpu_type], profile)
        return self._layouts[key]


def with_profile(demand: Mapping[str, int], profile: str, need: int) -> Mapping[str, int]:
    """`demand` counting at least `need` slices of `profile` (the gang being placed is part of
    the demand even when no snapshot counted it, e.g. a move onto another type)."""
    if demand.get(profile, 0) >= need:
        return demand
    return {**demand, profile: need}


def layout_use(gpu: GpuType, layout: MigLayout, demand: Mapping[str, int]) -> tuple[float, int]:
    """How well a layout serves the demand on its type: the expected-usable compute (sum over
    its instances of the profile's share of `demand` x the instance's compute share), then the
    SM slices it instances (slices outside every instance are stranded until the GPU empties)."""
    total = sum(demand.values()) or 1
    shares = [gpu.mig_profile(inst.profile) for inst in layout]
    useful = sum(demand.get(p.name, 0) / total * p.compute_fraction for p in shares)
    return (round(useful, 9), sum(p.sm_slices for p in shares))


def cut_layout(
    gpu: GpuType,
    profile: str,
    demand: Mapping[str, int],
    layouts: Sequence[MigLayout] | None = None,
    need: int = 1,
) -> MigLayout:
    """The layout to cut an empty GPU to for `need` replicas of `profile`, in the spirit of FGD
    (ATC'23): the rest of the GPU goes to the instances the demand on the type can use.

    Among the maximal layouts with at least `need` instances of `profile` (at most as many as
    fit): the most expected-usable compute (`layout_use`: sum of demand share x compute share
    per instance; `demand` is slices per profile running or pending on the type), then the most
    compute instanced (a free instance can take the next gang of its size, stranded slices
    cannot), then fewer, larger instances (big blocks stay free), then the lowest starts. So a
    lone `2g` where `4g` pods are asked for gets `[4g, 2g, 1g]` and leaves room for a `4g`,
    while a `2g` among `2g` demand gets as many `2g` instances as fit.
    `layouts` are the GPU's maximal layouts over its base profiles (computed when omitted).
    """
    dense = densest_layout(gpu, profile)
    want = min(max(need, 1), len(dense))
    demand = with_profile(demand, profile, want)
    if layouts is None:
        layouts = enumerate_layouts(gpu, profiles=base_profiles(gpu, profile), maximal_only=True)
    best: tuple[tuple[float, int, int, list[int]], MigLayout] | None = None
    for lay in layouts:
        if sum(1 for inst in lay if inst.profile == profile) < want:
            continue
        useful, covered = layout_use(gpu, lay, demand)
        key = (useful, covered, -len(lay), [-inst.start for inst in lay])
        if best is None or key > best[0]:
            best = (key, lay)
    return dense if best is None else best[1]


def base_profiles(gpu: GpuType, profile: str) -> frozenset[str]:
    """Profiles a cut may use: `profile` and, per compute size, the smallest-memory profile
    without media extensions (the ones gangs ask for by compute size)."""
    smallest: dict[int, tuple[int, str]] = {}
    for p in gpu.mig_profiles:
        if "+me" in p.name:
            continue
        if p.sm_slices not in smallest or (p.memory_slices, p.name) < smallest[p.sm_slices]:
            smallest[p.sm_slices] = (p.memory_slices, p.name)
    return frozenset({profile} | {name for _, name in smallest.values()})


def eligible_nodes(
    state: ClusterState, gang: Gang, memo: Memo | None = None
) -> frozenset[int] | None:
    """Indices of the nodes `gang` may use (its `allowed_nodes`); None: every node."""
    if gang.allowed_nodes is None:
        return None
    if memo is not None and gang.id in memo.allowed:
        return memo.allowed[gang.id]
    index = state.node_index
    allowed = frozenset(index[n] for n in gang.allowed_nodes if n in index)
    if memo is not None:
        memo.allowed[gang.id] = allowed
    return allowed


def usable_types(
    state: ClusterState, gang: Gang, policy: Policy, memo: Memo | None = None
) -> list[str]:
    """Acceptable types that exist, offer the gang's MIG profile and have nodes the gang may
    use; best first."""
    if memo is not None and gang.id in memo.types:
        return memo.types[gang.id]
    allowed = eligible_nodes(state, gang, memo)
    scored: list[tuple[float, int, str]] = []
    for order, name in enumerate(gang.type_names()):
        if name not in state.catalog or not state.nodes_by_type.get(name):
            continue
        if allowed is not None and allowed.isdisjoint(state.nodes_by_type[name]):
            continue
        gpu = state.catalog[name]
        if gang.mig_profile is not None and not gpu.has_mig_profile(gang.mig_profile):
            continue
        value = replica_value(gang, gpu, policy).objective
        per_gpu = value / (1 if gang.uses_mig else gang.gpus_per_replica)
        scored.append((-per_gpu, order, name))
    result = [name for _, _, name in sorted(scored)]
    bar = policy.type_delay.bar(gang.waited_s)
    if bar > 0 and len(result) > 1:
        speed = {name: base_throughput(gang, state.catalog[name]) for name in result}
        fastest = max(speed.values())
        result = [
            name
            for name in result
            if speed[name] >= bar * fastest or _guaranteed(state, gang, name)
        ]
    if memo is not None:
        memo.types[gang.id] = result
    return result


def _guaranteed(state: ClusterState, gang: Gang, gpu_type: str) -> bool:
    """Whether the gang stays within its queue's nominal quota of `gpu_type`: its queue's
    guarantee there is a start at once (by reclaim if need be), so the type delay does not
    hold it back from that type."""
    gate = state.gate
    if gate is None or gang.queue is None:
        return False
    home = gate.book.home(gang.queue)
    if home == ROOT:
        return False
    resource = resource_key(gpu_type, gang.mig_profile)
    return gate.book.entitled(home, resource, gang.gpus_needed(gang.replicas_min))


def _best_fit_node(
    state: ClusterState,
    gpu_type: str,
    need: int,
    nvlink: bool,
    taken: dict[int, set[int]],
    allowed: frozenset[int] | None = None,
) -> int | None:
    """Schedulable node of the type (and in `allowed`, when given) with the fewest free GPUs
    that still holds `need`."""
    if nvlink and state.max_domain_size.get(gpu_type, 0) < need:
        return None
    best: tuple[int, int] | None = None
    for n, gpus in taken.items():  # nodes this plan already uses have reduced free counts
        if state.node_type[n] != gpu_type:
            continue
        free = len(state.empty[n]) - len(gpus)
        fits = state.max_domain_free(n, gpus) >= need if nvlink else free >= need
        if fits and (best is None or (free, n) < best):
            best = (free, n)
    buckets = state.type_nodes(gpu_type)
    for k in range(need, len(buckets)):
        if best is not None and k > best[0]:
            break
        for n in buckets[k]:  # sorted by index: the first usable one is the bucket's best
            if n in taken or (allowed is not None and n not in allowed):
                continue
            if nvlink and state.max_domain_free(n) < need:
                continue
            if best is None or (k, n) < best:
                best = (k, n)
            break
    return None if best is None else best[1]


def fewest_nodes(
    candidates: Sequence[tuple[int, int, int]], count: int, nodes: int
) -> list[tuple[int, int]] | None:
    """`count` replicas on at most `nodes` of the candidates, as (node, replicas), or None
    when the `nodes` roomiest candidates cannot hold them.

    A candidate is (replicas it holds, rank, node); a lower rank is a fuller node. Node by
    node, the lowest-ranked candidate whose room, with the roomiest others for the nodes still
    to choose, covers what is left: the fullest nodes that keep the minimum reachable, so a
    wide gang fills partly used nodes where it can and keeps the rest of the idle nodes whole.
    """
    pool = sorted((c for c in candidates if c[0] > 0), key=lambda c: (-c[0], c[1], c[2]))
    if sum(c[0] for c in pool[:nodes]) < count:
        return None
    chosen: list[tuple[int, int]] = []
    left = count
    for still in range(nodes, 0, -1):
        head = [c[0] for c in pool[:still]]  # the roomiest candidates
        total, but_last = sum(head), sum(head[: still - 1])
        best: tuple[int, int, int] | None = None
        for i, (room, rank, n) in enumerate(pool):
            # Room of the roomiest `still - 1` candidates other than this one.
            others = total - room if i < still else but_last
            if min(room, left) + others >= left and (best is None or (rank, n) < best[1:]):
                best = (i, rank, n)
        assert best is not None  # the roomiest candidate always qualifies
        room = pool.pop(best[0])[0]
        chosen.append((best[2], min(room, left)))
        left -= min(room, left)
        if not left:
            break
    return chosen


def _plan_fewest(
    state: ClusterState, gang: Gang, gpu_type: str, allowed: frozenset[int] | None
) -> Plan | None:
    """`replicas_max` replicas of a topology-`any` gang on the fewest nodes that can hold them
    (per node as many replicas as its largest node of the type holds), or None when no such
    nodes have the room. A synchronous gang spread over more nodes than it needs trains slower
    (Gavel measures its unconsolidated rate at down to a fifth of the consolidated one), and
    per-replica best fit spreads a wide gang over partly used nodes."""
    size, count = gang.gpus_per_replica, gang.replicas_max
    nodes = fewest_node_count(state, gpu_type, size, count)
    if nodes is None:
        return None
    # Per room (free GPUs), the first `nodes` usable nodes: no choice takes more of one room.
    candidates: list[tuple[int, int, int]] = []
    for free, bucket in enumerate(state.type_nodes(gpu_type)):
        if free < size:
            continue
        usable = (n for n in bucket if allowed is None or n in allowed)
        candidates.extend((free // size, free, n) for n in itertools.islice(usable, nodes))
    chosen = fewest_nodes(candidates, count, nodes)
    if chosen is None:
        return None
    plan = Plan(gang, gpu_type)
    for n, replicas in chosen:
        taken: set[int] = set()
        for _ in range(replicas):
            gpus = state.pick_gpus(n, size, False, taken)
            if gpus is None:
                return None
            taken.update(gpus)
            plan.replicas.append(ReplicaPlacement(state.nodes[n].name, gpus))
    return plan


def _plan_whole(
    state: ClusterState, gang: Gang, gpu_type: str, allowed: frozenset[int] | None
) -> Plan | None:
    plan = Plan(gang, gpu_type)
    size = gang.gpus_per_replica
    nvlink = gang.topology is Topology.NVLINK
    if gang.topology is Topology.ANY and gang.replicas_max > 1:
        fewest = _plan_fewest(state, gang, gpu_type, allowed)
        if fewest is not None:
            return fewest
    if gang.topology is Topology.SAME_NODE:
        for count in range(gang.replicas_max, gang.replicas_min - 1, -1):
            n = _best_fit_node(state, gpu_type, count * size, False, {}, allowed)
            if n is None:
                continue
            gpus = state.pick_gpus(n, count * size, nvlink=False)
            if gpus is None:
                continue
            name = state.nodes[n].name
            plan.replicas = [
                ReplicaPlacement(name, gpus[i * size : (i + 1) * size]) for i in range(count)
            ]
            return plan
        return None
    taken: dict[int, set[int]] = {}
    for _ in range(gang.replicas_max):
        n = _best_fit_node(state, gpu_type, size, nvlink, taken, allowed)
        if n is None:
            break
        gpus = state.pick_gpus(n, size, nvlink, taken.get(n, set()))
        if gpus is None:
            break
        taken.setdefault(n, set()).update(gpus)
        plan.replicas.append(ReplicaPlacement(state.nodes[n].name, gpus))
    return plan if len(plan.replicas) >= gang.replicas_min else None


def _mig_mode_first(state: ClusterState, n: int) -> Callable[[int], tuple[bool, int]]:
    def key(g: int) -> tuple[bool, int]:
        return (state.layout[n][g] is None, g)

    return key


def plan_mig(
    state: ClusterState, gang: Gang, gpu_type: str, policy: Policy, layouts: Memo
) -> Plan | None:
    assert gang.mig_profile is not None
    profile = gang.mig_profile
    plan = Plan(gang, gpu_type)
    want = gang.replicas_max
    allowed = eligible_nodes(state, gang, layouts)
    touched: set[tuple[int, int]] = set()
    recut: set[tuple[int, int]] = set()  # empty GPUs whose layout the demand is better cut for
    for tier, n, g, start in state.free_instances(gpu_type, profile):
        if len(plan.replicas) == want:
            break
        if allowed is not None and n not in allowed:
            continue
        # An empty GPU may be re-cut (DESIGN.md): its free instance is taken as it is only when
        # its layout serves the demand as well as a fresh cut would. A pre-cut [1g,1g,2g,3g]
        # whose 2g is taken leaves no room for the 4g pods asked for; [4g,2g,1g] does.
        fresh = tier == 1 and policy.allow_repartition and (n, g) not in touched
        if fresh and ((n, g) in recut or not layouts.keeps(state, n, g, profile)):
            recut.add((n, g))
            continue
        inst = MigPlacement(start, profile)
        plan.replicas.append(ReplicaPlacement(state.nodes[n].name, (g,), inst))
        touched.add((n, g))
    if len(plan.replicas) < want and policy.allow_repartition:
        buckets = state.type_nodes(gpu_type)
        for k in range(1, len(buckets)):  # emptiest-last keeps idle nodes idle
            for n in buckets[k]:
                if allowed is not None and n not in allowed:
                    continue
                # MIG-mode empty GPUs first: a config change, not a mode flip.
                for g in sorted(state.empty[n], key=_mig_mode_first(state, n)):
                    if len(plan.replicas) >= want:
                        break
                    if (n, g) in touched:
                        continue
                    touched.add((n, g))
                    need = want - len(plan.replicas)
                    target = layouts.cut(state, gpu_type, profile, need)
                    slices = [p for p in target if p.profile == profile]
                    plan.repartitions.append((n, g, target))
                    for inst in slices[: want - len(plan.replicas)]:
                        plan.replicas.append(ReplicaPlacement(state.nodes[n].name, (g,), inst))
                if len(plan.replicas) >= want:
                    break
            if len(plan.replicas) >= want:
                break
    return plan if len(plan.replicas) >= gang.replicas_min else None


def plan_gang(
    state: ClusterState,
    gang: Gang,
    gpu_type: str,
    policy: Policy,
    layouts: Memo,
    within: frozenset[int] | None = None,
) -> Plan | None:
    """A feasible placement of `gang` on `gpu_type` in the current state, or None. With
    queues, also within its queue's quota (an elastic gang is cut to the replicas it allows).
    `within`: whole GPUs only on these nodes (a node cleared for the gang: evacuation.py)."""
    gate = state.gate
    if gate is not None and not gate.allows(gang, gpu_type, gang.replicas_min):
        return None
    plan: Plan | None
    if gang.mig_profile is not None:
        plan = plan_mig(state, gang, gpu_type, policy, layouts)
    else:
        allowed = eligible_nodes(state, gang, layouts)
        if within is not None:
            allowed = within if allowed is None else allowed & within
        plan = _plan_whole(state, gang, gpu_type, allowed)
    if plan is not None and gate is not None and len(plan.replicas) > gang.replicas_min:
        del plan.replicas[gate.replicas_allowed(gang, gpu_type, len(plan.replicas)) :]
    return plan


def commit(
    state: ClusterState, plan: Plan, policy: Policy, charged: int | None = None
) -> GangPlacement:
    """Apply a plan to the state and return the resulting placement. With queues, the gang's
    queue is charged for the plan's replicas, or for `charged` replicas in all when the plan
    adds to (or replaces) what the gang already holds."""
    for n, g, layout in plan.repartitions:
        state.repartition(n, g, layout)
    for replica in plan.replicas:
        n = state.node_index[replica.node]
        if replica.mig is None:
            state.take_whole(n, replica.gpus)
        else:
            state.take_instance(n, replica.gpus[0], replica.mig)
    if state.gate is not None:
        if charged is None:
            state.gate.take(plan.gang, plan.gpu_type, len(plan.replicas))
        else:
            state.gate.resize(plan.gang, plan.gpu_type, charged)
    value = replica_value(plan.gang, state.catalog[plan.gpu_type], policy)
    return GangPlacement(
        gang_id=plan.gang.id,
        gpu_type=plan.gpu_type,
        replicas=tuple(plan.replicas),
        power_cap_w=None if value.cap is None else value.cap.cap_w,
    )


def commit_priced(
    state: ClusterState, plan: Plan, policy: Policy, pricing: Pricing, charged: int | None = None
) -> GangPlacement:
    """`commit`, with `pricing`'s slot counts following the state."""
    before = pricing.committing(state, plan.replicas)
    placement = commit(state, plan, policy, charged)
    pricing.committed(state, plan.replicas, before)
    return placement


def greedy_order(gangs: Sequence[Gang], state: ClusterState | None = None) -> list[Gang]:
    """Priority first, then larger gangs first, then the earliest in line (`Gang.in_line_s`:
    first come, first served among equals), then id for determinism; with queues, the queues'
    fair-share order (fairshare.py)."""
    if state is not None and state.gate is not None:
        return state.gate.order(gangs)
    return sorted(
        gangs, key=lambda g: (-g.priority, -g.gpus_needed(g.replicas_min), -g.in_line_s, g.id)
    )


def placed_value(state: ClusterState, plan: Plan, policy: Policy) -> float:
    """`gang_value` of a plan, its work at the speed the gang keeps there (`spread_factor`: a
    wide synchronous gang spread over more nodes than it needs may train at a fifth of its
    speed, so a packed plan on a slower type can be worth more than a spread one on a faster
    type). The energy is scaled with the work: a simplification (the GPUs draw the same)."""
    value = gang_value(plan.gang, state.catalog[plan.gpu_type], policy, len(plan.replicas))
    return value * spread_factor(state, plan.gang, plan.gpu_type, plan.replicas)


def _plan_first(
    state: ClusterState, gang: Gang, types: list[str], policy: Policy, memo: Memo
) -> Plan | None:
    """The plan on the most valuable type that fits; when that plan spreads the gang over more
    nodes than it needs, a packed plan on a later type instead if it is worth more at the
    speeds the two would get (`placed_value`)."""
    best: tuple[float, Plan] | None = None
    for t in types:
        plan = plan_gang(state, gang, t, policy, memo)
        if plan is None:
            continue
        factor = spread_factor(state, gang, t, plan.replicas)
        if best is None:
            if factor >= 1.0:
                return plan
            best = (placed_value(state, plan, policy), plan)
        elif factor >= 1.0:  # a later packed plan; types come best first, so the last to try
            value = placed_value(state, plan, policy)
            return plan if value > best[0] else best[1]
    return None if best is None else best[1]


def _plan_priced(
    state: ClusterState,
    gang: Gang,
    types: list[str],
    policy: Policy,
    pricing: Pricing,
    memo: Memo,
) -> Plan | None:
    """The best plan over all usable types, by value net of what the expected workload makes it
    cost (fragmentation growth and reserve charges, pricing.py)."""
    best: tuple[float, int, Plan] | None = None
    for order, t in enumerate(types):
        plan = plan_gang(state, gang, t, policy, memo)
        if plan is None:
            continue
        value = placed_value(state, plan, policy)
        value -= pricing.cost(state, gang, t, plan.replicas, plan.repartitions)
        if best is None or (-value, order) < (-best[0], best[1]):
            best = (value, order, plan)
    return None if best is None else best[2]


def place_greedy(
    state: ClusterState,
    gangs: Sequence[Gang],
    policy: Policy,
    layouts: Memo | None = None,
    pricing: Pricing | None = None,
) -> dict[str, GangPlacement]:
    """Place what fits, in greedy order; mutates `state`. Returns placements by gang id.

    A gang with one usable type takes the best-fitting place there. A gang with a choice of
    types, when the snapshot carries a workload estimate, takes the type whose plan is worth
    most net of the fragmentation it adds and the reserves it takes (FGD's rule, with the work
    the type is worth to the gang); without an estimate, its most valuable type that fits.
    Elastic gangs are placed at their minimum first; then free GPUs go, one replica at a time,
    to the elastic gang whose next replica adds the most value per GPU (`grow_elastic`), the
    gangs that grow a running job (`Gang.grows_from`) from their first replica on.
    """
    layouts = layouts or Memo()
    layouts.note_pending(gangs)
    pricing = pricing or Pricing(state, policy, gangs)
    placed: dict[str, GangPlacement] = {}
    reserved = 0  # gangs given a node this decision (reservation.py)
    for asked in greedy_order(gangs, state):
        if asked.grows_from:
            continue  # a running job's room to grow: every replica of it is growth
        gang = replace(asked, replicas_max=asked.replicas_min) if asked.elastic else asked
        types = usable_types(state, gang, policy, layouts)
        plan: Plan | None = None
        if pricing.active and is_flexible(types):
            plan = _plan_priced(state, gang, types, policy, pricing, layouts)
        else:
            plan = _plan_first(state, gang, types, policy, layouts)
        if plan is not None:
            placed[gang.id] = commit_priced(state, plan, policy, pricing)
        elif (
            state.gate is not None
            and reserved < MAX_RESERVED
            and reservable(gang, policy.queue_aging_s)
            and reserve_node(state, gang, types, eligible_nodes(state, gang, layouts)) is not None
        ):
            reserved += 1
    grow_elastic(state, {g.id: g for g in gangs}, placed, policy, pricing, layouts)
    return placed


def grow_elastic(
    state: ClusterState,
    gangs: Mapping[str, Gang],
    placed: dict[str, GangPlacement],
    policy: Policy,
    pricing: Pricing,
    memo: Memo,
) -> None:
    """Give placed elastic gangs more replicas, one at a time, to the gang whose next replica
    adds the most value per GPU (its scaling curve's marginal gain, net of what the replica
    costs against the expected workload): Pollux's and Sia's goodput rule, greedily. Mutates
    `state` and `placed`.

    A gang's next gain depends only on the gang and its replica count, so the candidates wait
    in a heap ordered by gain per GPU (then id) and only the grown gang's entry is renewed:
    linear in the growth steps rather than in steps times placed gangs."""
    heap: list[tuple[float, str]] = []
    types: dict[str, str] = {}  # gang id -> the type it grows on
    for gid in placed:
        types[gid] = placed[gid].gpu_type
        _push_next(heap, gangs[gid], types[gid], placed[gid].replica_count, state, policy)
    for gid, gang in sorted(gangs.items()):
        if gang.grows_from and gid not in placed:
            usable = usable_types(state, gang, policy, memo)
            if usable:  # the running job's type (the caller offers no other)
                types[gid] = usable[0]
                _push_next(heap, gang, types[gid], 0, state, policy, first=True)
    while heap:
        _, gid = heapq.heappop(heap)
        gang, placement = gangs[gid], placed.get(gid)
        count = 0 if placement is None else placement.replica_count
        plan = _one_more(state, gang, types[gid], placement, policy, memo)
        gpu = state.catalog[types[gid]]
        gain = gang_value(gang, gpu, policy, count + 1) - gang_value(gang, gpu, policy, count)
        # The first replica of a running job's growth is placed as any single-type gang is,
        # unpriced (pricing chooses among types); each further one must be worth its price.
        price = 0.0
        if plan is not None and placement is not None:
            price = pricing.cost(state, gang, types[gid], plan.replicas, plan.repartitions)
        if plan is None or gain <= price:
            continue  # full: it asks again in the next decision
        extra = commit_priced(
            state, plan, policy, pricing, charged=None if placement is None else count + 1
        )
        if placement is None:
            placed[gid] = extra
        else:
            placed[gid] = replace(placement, replicas=placement.replicas + extra.replicas)
        _push_next(heap, gang, types[gid], placed[gid].replica_count, state, policy)


def _push_next(
    heap: list[tuple[float, str]],
    gang: Gang,
    gpu_type: str,
    count: int,
    state: ClusterState,
    policy: Policy,
    first: bool = False,
) -> None:
    """Queue a gang holding `count` replicas on `gpu_type` for one more if it may grow (an
    elastic gang below its maximum, or the `first` replica of a gang that grows a running
    job) and the replica would add value."""
    if count >= gang.replicas_max or not (gang.elastic or first):
        return
    gpu = state.catalog[gpu_type]
    gain = gang_value(gang, gpu, policy, count + 1) - gang_value(gang, gpu, policy, count)
    if gain > 1e-9:
        heapq.heappush(heap, (-gain / gpu_use(gang, gpu, 1), gang.id))


def _one_more(
    state: ClusterState,
    gang: Gang,
    gpu_type: str,
    placement: GangPlacement | None,
    policy: Policy,
    memo: Memo,
) -> Plan | None:
    """A plan for one more replica of a gang on `gpu_type` (on its node when it must share
    one; the first replica of a gang not placed yet goes wherever it fits best), within its
    queue's quota."""
    if state.gate is not None and not state.gate.allows(gang, gpu_type, 1):
        return None  # its placed replicas are counted already: one more must fit on top
    if placement is not None and gang.topology is Topology.SAME_NODE and gang.mig_profile is None:
        n = state.node_index[placement.replicas[0].node]
        gpus = state.pick_gpus(n, gang.gpus_per_replica, nvlink=False)
        if gpus is None:
            return None
        return Plan(gang, gpu_type, [ReplicaPlacement(state.nodes[n].name, gpus)])
    single = replace(gang, replicas_min=1, replicas_max=1, scaling=(), grows_from=0)
    return plan_gang(state, single, gpu_type, policy, memo)
