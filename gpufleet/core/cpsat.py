"""CP-SAT placement: a count-based model over groups of identical nodes, warm-started by greedy.

Model (built in `_Model`, solved in `place_cpsat`, turned into GPUs by `_extract`):
- Nodes of one GPU type with the same free GPUs per NVLink domain (and the same idle flag) form a
  group. n[group, pattern] counts the group's nodes filled with each feasible pattern of replica
  items (see patterns.py), so the model size depends on node shapes, not on node count.
- admit[gang, type] picks at most one GPU type per gang; reps[gang, type] is its replica count
  (min..max when admitted, 0 otherwise). Same-node gangs pick one replica count as one item.
- Item supply from the patterns must cover the replicas' demand, per type and item size.
- MIG: z[type, layout] empty GPUs (left free by the patterns) get each candidate layout; slices
  from free instances on partly used GPUs plus those layouts must cover MIG replicas.
- Objective: priority-weighted net work, plus a tie-break per gang started (more gangs at equal
  work, valuation.START_VALUE), minus consolidation (idle nodes put to use), packing
  (free GPUs left on touched nodes), fragmentation (FGD: the growth of expected fragmentation a
  pattern causes on its node, against the workload estimate; whole-GPU items change it the same
  way on every node of a group, whatever the node's partly used MIG GPUs: those fragments are
  the same before and after), disruption (repartitions) and scarcity (GPUs and node slots taken
  from the reserves for constrained demand, scarcity.py).
Preemption victims are not chosen by the model: greedy's evictions come in as freed GPUs plus
gangs that must be admitted, and later evictions run after the solve (see place.py).
Gangs that differ only in id and wait are admitted first come, first served (`_build_fifo`);
inside a queue, those that differ in attained service too, fresh ones first (service_tier.py),
and with queues in the order greedy tries them (a gang waiting past the aging time first).
With queues, the queues' order (fair share and aging, fairshare.py) holds across queues as
greedy keeps it: a gang after one greedy admitted is admitted on a type that one may use only
if that one is admitted too (`_build_queue_order`). The greedy repair pass after the solve
(`_repair`) and the evictions place.py runs after it keep that rule too (kept_order.py).
Gangs restricted to some nodes (`Gang.allowed_nodes`) keep greedy's placement: the model counts
identical nodes and cannot tell which of them such a gang may use, so their GPUs are taken out
before it is built, and the repair pass gives those greedy left out another greedy try.
The model does not see how many nodes a gang spans either (a spread gang trains slower): a wide
topology-`any` gang greedy put on the fewest nodes that hold it keeps that placement the same
way; the model's other wide gangs get the fewest nodes its chosen slots allow (`_extract`).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ortools.sat.python import cp_model

from gpufleet.core.decision import GangPlacement, Preemption, SolveStats
from gpufleet.core.demand import Gang, Topology
from gpufleet.core.fragmentation import NodeFree, fragmentation
from gpufleet.core.greedy import (
    Memo,
    Plan,
    commit,
    fewest_node_count,
    fewest_nodes,
    greedy_order,
    place_greedy,
    plan_mig,
    usable_types,
)
from gpufleet.core.kept_order import closed_types, within_order
from gpufleet.core.patterns import (
    Item,
    Pattern,
    Signature,
    canonical_item,
    enumerate_patterns,
    pattern_size,
)
from gpufleet.core.policy import Policy
from gpufleet.core.preempt import release_gang
from gpufleet.core.pricing import Pricing
from gpufleet.core.quota import ROOT, running_charge
from gpufleet.core.quota_cpsat import QuotaOption, add_quota_constraints, add_reclaim_floors
from gpufleet.core.scarcity import gpu_use, is_flexible, pays_for
from gpufleet.core.snapshot import ReplicaPlacement
from gpufleet.core.state import ClusterState
from gpufleet.core.valuation import gang_value, replica_value, start_value
from gpufleet.model.mig import (
    MigLayout,
    make_layout,
    profile_counts,
)

SCALE = 1000  # objective coefficients are floats; CP-SAT needs integers
USE_UNITS = 100  # the scarcity excess is counted in 1/100 GPU (reserves are fractional)


def _scaled(x: float) -> int:
    return round(x * SCALE)


@dataclass
class _Group:
    gpu_type: str
    signature: Signature
    idle: bool
    nodes: list[int]
    patterns: list[Pattern]  # index 0 is the empty pattern
    counts: list[cp_model.IntVar] = field(default_factory=list)  # per pattern (0 unused)


@dataclass
class _Option:
    """One way to admit a gang: a GPU type and, for same-node gangs, a replica count."""

    gang: Gang
    gpu_type: str
    item: Item | None  # whole-GPU item per replica (or per gang when same-node); None for MIG
    fixed_replicas: int | None  # same-node options fix the replica count
    value: int  # scaled objective per replica
    admit: cp_model.IntVar
    replicas: cp_model.LinearExprT


@dataclass(eq=False)
class _Excess:
    """A GPU reserve's charge in the model: its excess over the reserve's headroom, from the
    options (per-replica GPUs, option) and MIG layouts (type, layout) that take its GPUs."""

    headroom: int  # in 1/USE_UNITS GPU
    every: list[tuple[int, _Option]] = field(default_factory=list)
    flexible: list[tuple[int, _Option]] = field(default_factory=list)
    every_z: list[tuple[str, MigLayout]] = field(default_factory=list)
    flexible_z: list[tuple[str, MigLayout]] = field(default_factory=list)
    excess: cp_model.IntVar | None = None
    over: cp_model.IntVar | None = None


@dataclass(eq=False)
class _SlotExcess:
    """A node reserve's charge in the model: reserved slots (1/USE_UNITS) not left free."""

    need: int
    untouched: int = 0  # free slots before the decision
    lost: list[tuple[int, _Group, int]] = field(default_factory=list)  # (slots, group, pattern)
    filled: list[_Option] = field(default_factory=list)  # items of the kind's size or more
    excess: cp_model.IntVar | None = None


def _total(exprs: Iterable[cp_model.LinearExprT]) -> cp_model.LinearExpr:
    return cp_model.LinearExpr.sum(list(exprs))


def _signature(state: ClusterState, n: int) -> Signature:
    per_domain = Counter(state.domain_of[n][g] for g in state.empty[n])
    return tuple(sorted(per_domain.values(), reverse=True))


def _upper_hull(points: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The upper concave hull of points sorted by x (Andrew's monotone chain, upper half)."""
    hull: list[tuple[int, int]] = []
    for x, y in points:
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (y2 - y1) * (x - x1) <= (y - y1) * (x2 - x1):  # the middle point is under the line
                hull.pop()
            else:
                break
        hull.append((x, y))
    return hull


@functools.lru_cache(maxsize=65536)
def _after_signature(signature: Signature, pattern: Pattern) -> Signature:
    """Empty GPUs per domain after a node takes the pattern's items the way `_extract` places
    them: NVLink items first, larger first, each in the tightest domain that holds it, else
    (not NVLink) spread over the fullest domains."""
    free = list(signature)
    for size, nv in sorted(pattern, key=lambda it: (not it[1], -it[0])):
        fitting = [i for i, c in enumerate(free) if c >= size]
        if fitting:
            i = min(fitting, key=lambda j: (free[j], j))
            free[i] -= size
            continue
        if nv:
            continue
        need = size
        for i in sorted(range(len(free)), key=lambda j: -free[j]):
            used = min(need, free[i])
            free[i] -= used
            need -= used
            if not need:
                break
    return tuple(sorted((c for c in free if c), reverse=True))


class _Model:
    def __init__(
        self,
        state: ClusterState,
        gangs: Sequence[Gang],
        policy: Policy,
        layouts: Memo,
        forced: frozenset[str] = frozenset(),
        line: Sequence[Gang] = (),
        greedy: Mapping[str, GangPlacement] | None = None,
        floors: Mapping[tuple[str, str], int] | None = None,
    ) -> None:
        self.state = state
        self.forced = forced
        self.policy = policy
        self.model = cp_model.CpModel()
        self.options: list[_Option] = []
        self.by_gang: dict[str, list[_Option]] = {}
        self.groups: list[_Group] = []
        self.z: dict[tuple[str, MigLayout], cp_model.IntVar] = {}
        # Variables whose value follows from the others (hinted from them, see `hint`).
        self.repartitions: dict[tuple[str, MigLayout], tuple[cp_model.IntVar, int]] = {}
        self.scarcity: list[_Excess] = []
        self.slots: list[_SlotExcess] = []
        self.goodput: list[tuple[cp_model.IntVar, _Option, list[tuple[int, int]]]] = []
        self.objective_terms: list[tuple[cp_model.LinearExprT, int]] = []
        # Per GPU type, "every gang greedy admitted so far in the queues' order is admitted".
        self.in_line: list[cp_model.IntVar] = []
        self.pricing = Pricing(state, policy, gangs)
        self._build_options(gangs, layouts)
        self._build_fifo(gangs, line)
        if state.gate is not None and greedy is not None:
            self._build_queue_order(line, greedy)
        if state.gate is not None:
            quota_options = self._quota_options()
            add_quota_constraints(self.model, state.gate, quota_options)
            add_reclaim_floors(self.model, state.gate, quota_options, floors or {})
        self._build_groups()
        self._build_whole_supply()
        self._build_mig(layouts)
        self._build_scarcity()
        self._build_objective()

    # Each gang runs on at most one type, all-or-nothing between replicas_min and replicas_max.
    def _build_options(self, gangs: Sequence[Gang], memo: Memo) -> None:
        m = self.model
        for gang in gangs:
            opts: list[_Option] = []
            for t in usable_types(self.state, gang, self.policy, memo):
                gpu = self.state.catalog[t]
                value = _scaled(replica_value(gang, gpu, self.policy).objective)
                if gang.scaling and not gang.elastic:
                    # A fixed count on a curve (a running job's growth of one): its average.
                    at = gang_value(gang, gpu, self.policy, gang.replicas_max)
                    value = _scaled(at / gang.replicas_max)
                key = f"{gang.id},{t}"
                if gang.topology is Topology.SAME_NODE:
                    largest = len(self.state.type_nodes(t)) - 1
                    for count in range(gang.replicas_min, gang.replicas_max + 1):
                        size = count * gang.gpus_per_replica
                        if size > largest:
                            break
                        admit = m.new_bool_var(f"admit[{key},{count}]")
                        # The option's value is per replica; with a scaling curve, its average.
                        at = _scaled(gang_value(gang, gpu, self.policy, count) / count)
                        opts.append(_Option(gang, t, (size, False), count, at, admit, admit))
                    continue
                admit = m.new_bool_var(f"admit[{key}]")
                replicas: cp_model.LinearExprT
                if gang.elastic:
                    reps = m.new_int_var(0, gang.replicas_max, f"reps[{key}]")
                    m.add(reps >= gang.replicas_min * admit)
                    m.add(reps <= gang.replicas_max * admit)
                    replicas = reps
                else:
                    replicas = gang.replicas_max * admit
                item = None
                if gang.mig_profile is None:
                    item = (gang.gpus_per_replica, gang.topology is Topology.NVLINK)
                opts.append(_Option(gang, t, item, None, value, admit, replicas))
            if opts:
                if gang.id in self.forced:  # it preempts: it must run, or the eviction is void
                    m.add_exactly_one(o.admit for o in opts)
                else:
                    m.add_at_most_one(o.admit for o in opts)
                self.by_gang[gang.id] = opts
                self.options.extend(opts)

    # Of gangs that differ only in id and wait, one is admitted only if every one that waited
    # longer is. They are worth the same, so without this the solver picked among them at
    # random, and a gang could be passed over for hours by identical ones that came later.
    # Gangs that must run (they preempted) are left out: they are admitted whatever the order.
    def _build_fifo(self, gangs: Sequence[Gang], line: Sequence[Gang] = ()) -> None:
        # Alike but for id, wait and service: admitted in the queue's order, the service tier's
        # fresh gangs first (service_tier.py), then the earliest in line (`Gang.in_line_s`).
        # With queues, in the order greedy tries them (`line`): a gang waiting past the aging
        # time goes ahead of fresh ones there (fairshare.py), and a chain that put the fresh
        # ones first contradicted greedy's decision, so the hint was no solution; with the
        # queues' order kept as well, the model had none when a gang behind had to be admitted
        # (it preempted), and the decision fell back to greedy's.
        place_in_line = {g.id: i for i, g in enumerate(line)}
        gate = self.state.gate
        alike: dict[Gang, list[Gang]] = {}
        for gang in gangs:
            if gang.id in self.by_gang and gang.id not in self.forced:
                # Nothing here weighs a spread slowdown (`Gang.spread_speed`): alike whatever it is.
                key = replace(
                    gang, id="", waited_s=0.0, queued_s=None, attained_gpu_s=0.0, spread_speed=1.0
                )
                alike.setdefault(key, []).append(gang)
        for same in alike.values():
            same.sort(
                key=lambda g: (
                    place_in_line.get(g.id, len(place_in_line)),
                    -(gate.rank(g)[1] if gate is not None else 0),
                    -g.in_line_s,
                    g.id,
                )
            )
            for first, then in itertools.pairwise(same):
                self.model.add(
                    sum(o.admit for o in self.by_gang[first.id])
                    >= sum(o.admit for o in self.by_gang[then.id])
                )

    # --- the queues' order across queues ---------------------------------------------------------
    # Greedy tries gangs in the queues' order (fairshare.py: tiers of nominal quota, aged gangs
    # first, then the queue furthest below its fair share) and admits each one that fits what
    # those before it took. The objective alone would pass over such a gang for gangs behind it
    # worth more (two 4-GPU gangs of a queue over its share start one more gang than the 8-GPU
    # gang of a queue under it), so across queues the order was only the hint's. Here a gang
    # greedy admitted keeps its place in line for the GPU types it may use: a gang behind it is
    # admitted on one of those types only if it is admitted too (on any of its types). A gang
    # greedy left pending did not fit what those before it took, as greedy found it; it binds
    # nothing, and a gang behind it may take what it could not. Growth of running jobs comes
    # last, as in greedy (`grow_elastic`). Greedy's decision satisfies every such constraint,
    # so the hint stays a solution. A weighted objective term for the order would have to
    # outweigh any sum of the terms behind it (weights doubling down the line), which the
    # integer objective cannot hold for thousands of gangs; the constraint needs one boolean
    # per admitted gang and type, and one implication per option.
    def _build_queue_order(self, line: Sequence[Gang], greedy: Mapping[str, GangPlacement]) -> None:
        m = self.model
        last: dict[str, cp_model.IntVar] = {}  # type -> its latest "in line" boolean
        for gang in sorted(line, key=lambda g: g.grows_from > 0):  # stable: the order kept
            opts = self.by_gang.get(gang.id)
            if not opts:
                continue
            for o in opts:
                if o.gpu_type in last:
                    m.add_implication(o.admit, last[o.gpu_type])
            placed = greedy.get(gang.id)
            if gang.grows_from or placed is None or _greedy_option(opts, placed) is None:
                continue
            admitted = _total(o.admit for o in opts)
            for t in sorted({o.gpu_type for o in opts}):
                held = m.new_bool_var(f"in_line[{gang.id},{t}]")
                m.add(held <= admitted)
                if t in last:
                    m.add_implication(held, last[t])
                last[t] = held
                self.in_line.append(held)

    def _quota_options(self) -> list[QuotaOption]:
        """Each option's use of its queue's quota: GPUs (or MIG slices) when admitted."""
        out: list[QuotaOption] = []
        for o in self.options:
            per = 1 if o.gang.mig_profile is not None else o.gang.gpus_per_replica
            amount = per * (o.fixed_replicas or 1) * o.replicas
            out.append(QuotaOption(o.gang, o.gpu_type, amount, o.admit))
        return out

    def _build_groups(self) -> None:
        items: dict[str, set[Item]] = {}
        for o in self.options:
            if o.item is not None:
                items.setdefault(o.gpu_type, set()).add(o.item)
        mig_types = {o.gpu_type for o in self.options if o.item is None}
        keyed: dict[tuple[str, Signature, bool], list[int]] = {}
        for t in sorted(set(items) | mig_types):
            for bucket in self.state.type_nodes(t)[1:]:
                for n in bucket:
                    idle = len(self.state.empty[n]) == self.state.nodes[n].gpu_count
                    keyed.setdefault((t, _signature(self.state, n), idle), []).append(n)
        pattern_cache: dict[tuple[str, Signature], list[Pattern]] = {}
        for (t, sig, idle), nodes in sorted(keyed.items()):
            if (t, sig) not in pattern_cache:
                pattern_cache[(t, sig)] = enumerate_patterns(sorted(items.get(t, ())), sig)
            group = _Group(t, sig, idle, sorted(nodes), pattern_cache[(t, sig)])
            # n[group, pattern]: nodes of the group filled with that pattern.
            gid = len(self.groups)
            group.counts = [self.model.new_constant(0)] + [
                self.model.new_int_var(0, len(nodes), f"n[{gid},{p}]")
                for p in range(1, len(group.patterns))
            ]
            self.model.add(_total(group.counts[1:]) <= len(nodes))
            self.groups.append(group)

    # Replica items placed on a type never exceed the slots its node patterns provide.
    def _build_whole_supply(self) -> None:
        supply: dict[tuple[str, int, bool], list[cp_model.LinearExprT]] = {}
        for group in self.groups:
            for p, pattern in enumerate(group.patterns[1:], start=1):
                for item, mult in Counter(pattern).items():
                    key = (group.gpu_type, item[0], item[1])
                    supply.setdefault(key, []).append(mult * group.counts[p])
        demand: dict[tuple[str, int, bool], list[cp_model.LinearExprT]] = {}
        for o in self.options:
            if o.item is not None:
                demand.setdefault((o.gpu_type, o.item[0], o.item[1]), []).append(o.replicas)
        for t, size in sorted({(t, s) for t, s, _ in demand}):
            nv_demand = demand.get((t, size, True), [])
            any_demand = demand.get((t, size, False), [])
            nv_supply = supply.get((t, size, True), [])
            any_supply = supply.get((t, size, False), [])
            # NVLink replicas need NVLink slots; other replicas may use either kind.
            if nv_demand:
                self.model.add(_total(nv_demand) <= _total(nv_supply))
            self.model.add(_total(nv_demand + any_demand) <= _total(nv_supply + any_supply))

    # MIG slices come from free instances on partly used GPUs or from layouts given to empty GPUs.
    def _build_mig(self, layouts: Memo) -> None:
        by_type: dict[str, dict[str, list[_Option]]] = {}
        for o in self.options:
            if o.item is None and o.gang.mig_profile is not None:
                by_type.setdefault(o.gpu_type, {}).setdefault(o.gang.mig_profile, []).append(o)
        for t, per_profile in sorted(by_type.items()):
            existing: Counter[MigLayout] = Counter()
            for group in self.groups:
                if group.gpu_type != t:
                    continue
                for n in group.nodes:
                    for g in self.state.empty[n]:
                        lay = self.state.layout[n][g]
                        if lay is not None:
                            existing[lay] += 1
            candidates = set(existing)
            if self.policy.allow_repartition:
                candidates |= set(layouts.maximal(self.state, t, frozenset(per_profile)))
                # Greedy's targets too, so its decision is always a solution of the model.
                candidates |= {
                    layouts.cut(self.state, t, p, need)
                    for p in per_profile
                    for need in range(1, len(layouts.densest(self.state, t, p)) + 1)
                }
            candidates.discard(make_layout(()))
            leftover: list[cp_model.LinearExprT] = []
            for group in self.groups:
                if group.gpu_type == t:
                    free = sum(group.signature)
                    leftover.append(free * len(group.nodes))
                    leftover.extend(
                        -pattern_size(pat) * group.counts[p]
                        for p, pat in enumerate(group.patterns[1:], start=1)
                    )
            zs: dict[MigLayout, cp_model.IntVar] = {}
            bound = sum(
                len(group.nodes) * self.state.nodes[group.nodes[0]].gpu_count
                for group in self.groups
                if group.gpu_type == t
            )
            for i, lay in enumerate(sorted(candidates)):
                z = self.model.new_int_var(0, bound, f"z[{t},{i}]")
                zs[lay] = z
                self.z[(t, lay)] = z
                # Repartitions: GPUs given this layout beyond those that already have it.
                extra = self.model.new_int_var(0, bound, f"repartition[{t},{i}]")
                self.model.add(extra >= z - existing.get(lay, 0))
                self.repartitions[(t, lay)] = (extra, existing.get(lay, 0))
                if not self.policy.allow_repartition:
                    self.model.add(extra == 0)
                self.objective_terms.append((extra, -_scaled(self.policy.weights.disruption)))
                # Slices a layout leaves un-instanced are stranded until the GPU empties.
                gpu = self.state.catalog[t]
                stranded = 1 - sum(gpu.mig_profile(i.profile).compute_fraction for i in lay)
                if stranded > 1e-9:
                    cost = _scaled(self.policy.weights.packing * stranded)
                    self.objective_terms.append((z, -cost))
            self.model.add(_total(zs.values()) <= _total(leftover))
            for profile, opts in sorted(per_profile.items()):
                partial = sum(1 for key in self.state.free_instances(t, profile) if key[0] == 0)
                slices = [profile_counts(lay)[profile] * z for lay, z in zs.items()]
                self.model.add(_total(o.replicas for o in opts) <= partial + _total(slices))

    # Gangs with a usable type outside a reserve's set of types pay for the empty GPUs they take
    # from it: the charge is min(X, max(0, A - (F - R))) GPUs (scarcity.py) with A the empty GPUs
    # of S put to use and X those put to use by such gangs; a boolean picks which bound of the
    # min holds (the objective then takes the smaller), so the gangs confined to S may use all of
    # its GPUs. MIG use is the empty GPUs given a layout (z), counted as flexible when such a gang
    # asks for slices of that type.
    def _build_scarcity(self) -> None:
        kept = self.pricing.gpu_reserves
        self._build_slot_reserves()
        for types, reserve in sorted(kept.items()):
            row = _Excess(headroom=round(USE_UNITS * (reserve.free - reserve.reserved)))
            mig_flexible: set[str] = set()
            bound = 0
            for opts in self.by_gang.values():
                usable = {o.gpu_type for o in opts}
                pays = is_flexible(sorted(usable)) and pays_for(usable, types)
                for o in opts:
                    if o.gpu_type not in types:
                        continue
                    if o.item is None:
                        if pays:
                            mig_flexible.add(o.gpu_type)
                        continue
                    gpu = self.state.catalog[o.gpu_type]
                    per = round(gpu_use(o.gang, gpu, o.fixed_replicas or 1))
                    row.every.append((per, o))
                    bound += per * o.gang.replicas_max
                    if pays:
                        row.flexible.append((per, o))
            for t, lay in self.z:
                if t in types:
                    row.every_z.append((t, lay))
                    bound += int(reserve.free)
                    if t in mig_flexible:
                        row.flexible_z.append((t, lay))
            if not row.flexible and not row.flexible_z:
                continue
            # In 1/USE_UNITS GPU so that a fractional reserve keeps its precision.
            name = reserve.gpu_type
            m = self.model
            row.excess = m.new_int_var(0, USE_UNITS * bound, f"scarcity[{name}]")
            row.over = m.new_bool_var(f"scarcity_over[{name}]")
            every = _total([per * o.replicas for per, o in row.every] + self._zs(row.every_z))
            flexible = _total(
                [per * o.replicas for per, o in row.flexible] + self._zs(row.flexible_z)
            )
            # over: the reserve's room is used past its headroom by less than X, so the charge is
            # that overrun; else it is X (every GPU flexible gangs took from the set).
            m.add(row.excess >= USE_UNITS * every - row.headroom).only_enforce_if(row.over)
            m.add(row.excess >= USE_UNITS * flexible).only_enforce_if(~row.over)
            self.scarcity.append(row)
            self.objective_terms.append((row.excess, -round(reserve.price * SCALE / USE_UNITS)))

    def _zs(self, keys: Sequence[tuple[str, MigLayout]]) -> list[cp_model.LinearExprT]:
        return [self.z[k] for k in keys]

    # Node reserves: free slots of a kind (room for s GPUs on one node of its types) left by the
    # patterns, plus the slots that items of s or more GPUs fill (what the reserve is for), should
    # not fall below the reserve: excess[kind] >= reserve - that, in 1/USE_UNITS slot, priced per
    # slot. MIG cuts are not followed here (the objective that compares engines counts them).
    def _build_slot_reserves(self) -> None:
        for kind, reserve in sorted(self.pricing.slot_reserves.items()):
            groups = [g for g in self.groups if g.gpu_type in kind.types]
            if not groups:
                continue
            row = _SlotExcess(need=round(USE_UNITS * reserve.reserved))
            for group in groups:
                here = kind.count(group.signature)
                row.untouched += here * len(group.nodes)
                for p, pattern in enumerate(group.patterns[1:], start=1):
                    lost = here - kind.count(_after_signature(group.signature, pattern))
                    if lost:
                        row.lost.append((lost, group, p))
            for o in self.options:
                size, _nv = o.item or (0, False)
                if o.gpu_type in kind.types and size >= kind.gpus:
                    row.filled.append(o)
            left: list[cp_model.LinearExprT] = [
                -lost * group.counts[p] for lost, group, p in row.lost
            ]
            left += [o.replicas if o.fixed_replicas is None else o.admit for o in row.filled]
            bound = USE_UNITS * max(1, math.ceil(reserve.reserved))
            row.excess = self.model.new_int_var(0, bound, f"slots[{kind}]")
            self.model.add(row.excess >= row.need - USE_UNITS * (row.untouched + _total(left)))
            self.slots.append(row)
            self.objective_terms.append((row.excess, -round(reserve.price * SCALE / USE_UNITS)))

    def _build_objective(self) -> None:
        w = self.policy.weights
        start = _scaled(start_value(self.policy))
        for o in self.options:  # at most one option of a gang is admitted
            self.objective_terms.append((o.admit, start))
        for o in self.options:
            if o.fixed_replicas is None and o.gang.elastic and o.gang.scaling:
                self._build_goodput(o)
            else:
                self.objective_terms.append((o.replicas, o.value * (o.fixed_replicas or 1)))
        masses = self.pricing.masses
        for group in self.groups:
            free = sum(group.signature)
            mass = masses.get(group.gpu_type)
            before = 0.0
            if mass is not None:
                before = fragmentation(NodeFree(group.signature, ()), mass)
            for p, pattern in enumerate(group.patterns[1:], start=1):
                cost = w.packing * (free - pattern_size(pattern))
                if mass is not None:
                    sig = _after_signature(group.signature, pattern)
                    after = fragmentation(NodeFree(sig, ()), mass)
                    cost += w.fragmentation * (after - before)
                if group.idle:
                    cost += w.consolidation
                if cost:
                    self.objective_terms.append((group.counts[p], -_scaled(cost)))
        self.model.maximize(
            cp_model.LinearExpr.weighted_sum(
                [e for e, _ in self.objective_terms], [c for _, c in self.objective_terms]
            )
        )

    # An elastic gang with a scaling curve is worth goodput[o] <= the concave envelope of its
    # value at 0..max replicas (one cut per envelope segment; maximising makes it equal there).
    def _build_goodput(self, o: _Option) -> None:
        gpu = self.state.catalog[o.gpu_type]
        points = [(0, 0)] + [
            (r, _scaled(gang_value(o.gang, gpu, self.policy, r)))
            for r in range(1, o.gang.replicas_max + 1)
        ]
        hull = _upper_hull(points)
        goodput = self.model.new_int_var(0, max(v for _, v in hull), f"goodput[{o.gang.id}]")
        self.goodput.append((goodput, o, hull))
        for (r0, v0), (r1, v1) in itertools.pairwise(hull):
            # goodput <= v0 + (v1 - v0) / (r1 - r0) x (reps - r0), scaled by (r1 - r0).
            self.model.add((r1 - r0) * goodput <= (r1 - r0) * v0 + (v1 - v0) * (o.replicas - r0))
        self.objective_terms.append((goodput, 1))

    # --- warm start ----------------------------------------------------------------------------

    def hint(self, greedy_state: ClusterState, greedy: dict[str, GangPlacement]) -> None:
        """Hint the greedy decision, every variable of the model: CP-SAT takes a complete
        feasible hint as its first solution without searching for it (see `_solver`)."""
        m = self.model
        reps: dict[int, int] = {}  # option (by id) -> value of its `replicas` expression
        for gang_id, opts in self.by_gang.items():
            placed = greedy.get(gang_id)
            pick = None if placed is None else _greedy_option(opts, placed)
            for o in opts:
                chosen = o is pick
                m.add_hint(o.admit, chosen)
                count = placed.replica_count if chosen and placed else 0
                if o.fixed_replicas is not None:
                    reps[id(o)] = int(chosen)
                elif o.gang.elastic:
                    assert isinstance(o.replicas, cp_model.IntVar)
                    m.add_hint(o.replicas, count)
                    reps[id(o)] = count
                else:
                    reps[id(o)] = o.gang.replicas_max * int(chosen)
        gangs = {o.gang.id: o.gang for o in self.options}
        items_on: dict[int, list[tuple[int, bool]]] = {}
        for placement in greedy.values():
            gang = gangs.get(placement.gang_id)
            if gang is None or gang.mig_profile is not None:
                continue
            # The items greedy put on each node, as the model's patterns describe them.
            if gang.topology is Topology.SAME_NODE:
                n = self.state.node_index[placement.replicas[0].node]
                size = gang.gpus_per_replica * placement.replica_count
                items_on.setdefault(n, []).append((size, False))
            else:
                nvlink = gang.topology is Topology.NVLINK
                for replica in placement.replicas:
                    n = self.state.node_index[replica.node]
                    items_on.setdefault(n, []).append((gang.gpus_per_replica, nvlink))
        counts: dict[tuple[int, int], int] = {}  # (group, pattern) -> nodes
        for gid, group in enumerate(self.groups):
            index = {pat: p for p, pat in enumerate(group.patterns)}
            tally = [0] * len(group.patterns)
            for n in group.nodes:
                pat = tuple(
                    sorted(
                        (canonical_item(s, nv, group.signature) for s, nv in items_on.get(n, [])),
                        reverse=True,
                    )
                )
                if pat in index:
                    tally[index[pat]] += 1
            for p in range(1, len(group.patterns)):
                m.add_hint(group.counts[p], tally[p])
                counts[(gid, p)] = tally[p]
        final: Counter[tuple[str, MigLayout]] = Counter()
        for group in self.groups:
            for n in group.nodes:
                for g in self.state.empty[n]:
                    lay = greedy_state.layout[n][g]
                    if lay is not None and (group.gpu_type, lay) in self.z:
                        final[(group.gpu_type, lay)] += 1
        for key, z in self.z.items():
            m.add_hint(z, final[key])
            extra, existing = self.repartitions[key]
            m.add_hint(extra, max(0, final[key] - existing))
        for held in self.in_line:  # made only for gangs admitted as greedy placed them
            m.add_hint(held, True)
        self._hint_derived(reps, counts, final)

    def _hint_derived(
        self,
        reps: dict[int, int],
        counts: dict[tuple[int, int], int],
        layouts: Counter[tuple[str, MigLayout]],
    ) -> None:
        """Hint the reserves' excesses and the goodput of elastic gangs from the hinted counts."""
        m = self.model
        for row in self.scarcity:
            assert row.excess is not None and row.over is not None
            every = sum(per * reps[id(o)] for per, o in row.every)
            every += sum(layouts[k] for k in row.every_z)
            flexible = sum(per * reps[id(o)] for per, o in row.flexible)
            flexible += sum(layouts[k] for k in row.flexible_z)
            overrun = max(0, USE_UNITS * every - row.headroom)
            over = overrun <= USE_UNITS * flexible
            m.add_hint(row.over, over)
            m.add_hint(row.excess, overrun if over else USE_UNITS * flexible)
        group_of = {id(g): gid for gid, g in enumerate(self.groups)}
        for slot in self.slots:
            assert slot.excess is not None
            left = slot.untouched - sum(
                lost * counts[(group_of[id(group)], p)] for lost, group, p in slot.lost
            )
            left += sum(reps[id(o)] for o in slot.filled)
            m.add_hint(slot.excess, max(0, slot.need - USE_UNITS * left))
        for goodput, o, hull in self.goodput:
            r = reps[id(o)]
            value = min(
                (v0 * (r1 - r0) + (v1 - v0) * (r - r0)) // (r1 - r0)
                for (r0, v0), (r1, v1) in itertools.pairwise(hull)
            )
            m.add_hint(goodput, min(max(0, value), max(v for _, v in hull)))


def _greedy_option(opts: Sequence[_Option], placed: GangPlacement) -> _Option | None:
    """The option that is greedy's placement of the gang (its type and, for a same-node gang,
    its replica count), if the model has one."""
    for o in opts:
        if o.gpu_type != placed.gpu_type:
            continue
        if o.fixed_replicas is None or o.fixed_replicas == placed.replica_count:
            return o
    return None


def _solver(policy: Policy) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    settings = policy.solver
    solver.parameters.max_time_in_seconds = settings.time_limit_s
    solver.parameters.max_deterministic_time = settings.deterministic_time
    solver.parameters.num_workers = settings.workers
    solver.parameters.random_seed = settings.seed
    # Presolve costs more than it gains on this model: measured on 1,000 nodes x 1,000 gangs it
    # took ~0.3 s and weakened the LP bound, while without it the hinted search proved optimal.
    solver.parameters.cp_model_presolve = settings.presolve
    # The hint is complete (`_Model.hint`), so CP-SAT checks it and starts from it as a solution;
    # the default hint phase (a dive following the hint's values) would then only find it again,
    # and took about 0.3 s of CPU on 1,000 nodes x 1,000 gangs (half of the solve).
    solver.parameters.hint_conflict_limit = 0
    # Parallel workers are only reproducible when interleaved deterministically.
    solver.parameters.interleave_search = settings.workers > 1
    # Linearization level 2 (default 1) puts more of the model into the LP relaxation. On the
    # placement bench's 1,000 x 1,000 row it proves all 50 solves optimal (was 49: one spent the
    # whole budget and ended FEASIBLE 2.8 work below its bound, with an optimal solution), p99
    # CPU 1.31-1.36 s -> 0.72-0.79 s, p50 about the same (bench/README.md, Robustness).
    solver.parameters.linearization_level = 2
    # Stop once the bound is less than one gang's tie-break (valuation.START_VALUE) above the
    # best solution. The tie-break makes small gangs worth more per GPU, so the LP relaxation
    # starts fractions of gangs and its bound can sit a fraction of one start above every
    # solution: on 3 of 30 solves of the placement bench's 1,000 x 1,000 row the search spent
    # the whole deterministic budget on a gap of 7 units (0.007 work) and ended FEASIBLE with
    # the solution it already had (bench/README.md, Robustness). The objective is an integer
    # and CP-SAT stops at a gap <= the limit, so the solution returned is less than one start
    # below the optimum: a decision that starts one more gang at otherwise equal value is never
    # passed over. The gap stays in the stats (SolveStats.gap).
    start = _scaled(start_value(policy))
    if start > 1:
        solver.parameters.absolute_gap_limit = start - 1
    return solver


def _extract(
    built: _Model, solver: cp_model.CpSolver, state: ClusterState, layouts: Memo
) -> dict[str, GangPlacement]:
    """Turn counts into concrete GPUs: patterns onto nodes, replicas onto pattern slots."""
    policy = built.policy
    # Slots per (type, size, nvlink): lists of (node, gpus).
    slots: dict[tuple[str, int, bool], list[tuple[int, tuple[int, ...]]]] = {}
    for group in built.groups:
        nodes = iter(group.nodes)
        for p, pattern in enumerate(group.patterns[1:], start=1):
            for _ in range(solver.value(group.counts[p])):
                n = next(nodes)
                taken: set[int] = set()
                # NVLink items first, largest first: best-fit domains keep the rest packable.
                for size, nv in sorted(pattern, key=lambda it: (not it[1], -it[0])):
                    gpus = state.pick_gpus(n, size, nv, taken)
                    if gpus is None:
                        continue
                    taken.update(gpus)
                    slots.setdefault((group.gpu_type, size, nv), []).append((n, gpus))
    placed: dict[str, GangPlacement] = {}
    chosen = [o for o in built.options if solver.value(o.admit)]
    # NVLink gangs claim NVLink slots before others may fall back onto them; then wider gangs
    # first, so that they find whole nodes' slots for the fewest-nodes pick below.
    chosen.sort(
        key=lambda o: (
            o.gang.topology is not Topology.NVLINK,
            -solver.value(o.replicas),
            -o.gang.priority,
            o.gang.id,
        )
    )
    mig: list[_Option] = []
    for o in chosen:
        if o.item is None:
            mig.append(o)
            continue
        count = solver.value(o.replicas) if o.fixed_replicas is None else 1
        size, nv = o.item
        pools = [slots.get((o.gpu_type, size, True), [])]
        if not nv:
            pools.insert(0, slots.get((o.gpu_type, size, False), []))
        if sum(len(pool) for pool in pools) < count:
            continue  # left for the greedy repair pass
        picked = _fewest_slots(state, o, pools, count)
        for pool in pools:
            while pool and len(picked) < count:
                picked.append(pool.pop(0))
        per = o.gang.gpus_per_replica
        replicas: list[ReplicaPlacement] = []
        for n, gpus in picked:
            name = state.nodes[n].name
            replicas.extend(
                ReplicaPlacement(name, gpus[i : i + per]) for i in range(0, len(gpus), per)
            )
        placed[o.gang.id] = commit(state, Plan(o.gang, o.gpu_type, replicas), policy)
    _apply_layouts(built, solver, state)
    for o in mig:
        want = solver.value(o.replicas)
        # Greedy's rule picks the instances: free ones on partly used GPUs first, then those of
        # empty GPUs whose layout serves the demand, re-cutting an empty GPU when it does not.
        exact = replace(o.gang, replicas_min=want, replicas_max=want)
        plan = plan_mig(state, exact, o.gpu_type, policy, layouts)
        if plan is None:
            continue  # left for the greedy repair pass
        placed[o.gang.id] = commit(state, replace(plan, gang=o.gang), policy)
    return placed


def _fewest_slots(
    state: ClusterState,
    o: _Option,
    pools: list[list[tuple[int, tuple[int, ...]]]],
    count: int,
) -> list[tuple[int, tuple[int, ...]]]:
    """A topology-`any` gang's slots on the fewest nodes, as greedy places it (`fewest_nodes`:
    the nodes with fewest slots that keep the minimum reachable), taken out of the pools; none
    when the slots the patterns made cannot put it on that few nodes (the model does not see
    how many nodes a gang spans, so it may spread one that greedy would not)."""
    least = _min_nodes(state, o.gang, o.gpu_type, count)
    if least is None or o.fixed_replicas is not None:
        return []
    room = Counter(n for pool in pools for n, _ in pool)
    chosen = fewest_nodes([(r, r, n) for n, r in room.items()], count, least)
    if chosen is None:
        return []
    want = dict(chosen)
    picked: list[tuple[int, tuple[int, ...]]] = []
    for pool in pools:
        kept = []
        for n, gpus in pool:
            if want.get(n, 0) > 0:
                want[n] -= 1
                picked.append((n, gpus))
            else:
                kept.append((n, gpus))
        pool[:] = kept
    return picked


def _min_nodes(state: ClusterState, gang: Gang, gpu_type: str, replicas: int) -> int | None:
    """Fewest nodes of the type that can hold `replicas` replicas of a wide topology-`any`
    whole-GPU gang (None for any other gang, or when no node holds a replica)."""
    if gang.topology is not Topology.ANY or gang.mig_profile is not None or replicas < 2:
        return None
    return fewest_node_count(state, gpu_type, gang.gpus_per_replica, replicas)


def _on_fewest(state: ClusterState, gang: Gang, placement: GangPlacement) -> bool:
    """Whether a placement puts a wide topology-`any` gang on the fewest nodes that hold it."""
    least = _min_nodes(state, gang, placement.gpu_type, placement.replica_count)
    return least is not None and len({r.node for r in placement.replicas}) <= least


def _apply_layouts(built: _Model, solver: cp_model.CpSolver, state: ClusterState) -> None:
    """Give the chosen layouts to empty GPUs: GPUs already in that layout first, then other
    MIG-mode GPUs, then whole GPUs on the fullest nodes (keeps idle nodes idle)."""
    claimed: set[tuple[int, int]] = set()
    for (t, lay), z in sorted(built.z.items()):
        want = solver.value(z)
        if not want:
            continue
        candidates: list[tuple[int, int, int, int]] = []
        for bucket_size, bucket in enumerate(state.type_nodes(t)):
            for n in bucket:
                for g in state.empty[n]:
                    if (n, g) in claimed:
                        continue
                    current = state.layout[n][g]
                    rank = 0 if current == lay else (1 if current is not None else 2)
                    candidates.append((rank, bucket_size, n, g))
        for rank, _size, n, g in sorted(candidates)[:want]:
            claimed.add((n, g))
            if rank:
                state.repartition(n, g, lay)


def _take(
    state: ClusterState, greedy_state: ClusterState, placement: GangPlacement, gang: Gang
) -> None:
    """Give `state` the GPUs of a placement greedy made, with the MIG layouts it gave them."""
    if state.gate is not None:
        state.gate.take(gang, placement.gpu_type, placement.replica_count)
    for replica in placement.replicas:
        n = state.node_index[replica.node]
        if replica.mig is None:
            state.take_whole(n, replica.gpus)
            continue
        g = replica.gpus[0]
        layout = greedy_state.layout[n][g]
        if layout is not None and state.layout[n][g] != layout:
            state.repartition(n, g, layout)
        state.take_instance(n, g, replica.mig)


def place_cpsat(
    initial: ClusterState,
    greedy_state: ClusterState,
    greedy: dict[str, GangPlacement],
    preemptions: Sequence[Preemption],
    pending: Sequence[Gang],
    policy: Policy,
    layouts: Memo,
) -> tuple[ClusterState, dict[str, GangPlacement], SolveStats]:
    """Improve on the greedy outcome (placements after its preemptions) with CP-SAT.

    The model sees the free GPUs plus those of the gangs greedy preempted, must admit every gang
    those preemptions were for, and is hinted with greedy's decision, which is one of its
    solutions. Returns the state, placements and stats; the greedy outcome when the solver found
    nothing within its limits or the solution could not be mapped onto GPUs in full.

    The model does not see how many nodes a gang spans, and its packing terms would rather fill
    partly used nodes: a wide topology-`any` gang that greedy put on the fewest nodes that hold
    it keeps greedy's placement (as gangs restricted to some nodes do), out of the model, when
    other gangs are left to solve. Otherwise, when the solution spreads such a gang, the model
    is solved once more with it fixed.
    """
    args = (initial, greedy_state, greedy, preemptions, pending, policy, layouts)
    by_id = {g.id: g for g in pending}
    compact = {
        gid for gid, p in greedy.items() if gid in by_id and _on_fewest(initial, by_id[gid], p)
    }
    # Fixing them up front costs one solve, not two (a second solve took ~0.23 s on 1,000 nodes
    # x 1,000 gangs), and a smaller model; with nothing else left, the model may still pick
    # another type or count for them.
    rest = [g for g in pending if g.id not in compact and g.allowed_nodes is None]
    keep = frozenset(compact) if rest else frozenset()
    state, placed, stats = _solve(*args, keep)
    if stats.engine != "cpsat":
        return state, placed, stats
    spread = frozenset(
        gid
        for gid in compact - keep
        if gid in placed and not _on_fewest(initial, by_id[gid], placed[gid])
    )
    if not spread:
        return state, placed, stats
    return _solve(*args, keep | spread)


def _repair(
    state: ClusterState,
    pending: Sequence[Gang],
    placed: dict[str, GangPlacement],
    line: Sequence[Gang],
    greedy: Mapping[str, GangPlacement],
    policy: Policy,
    layouts: Memo,
) -> None:
    """The repair pass: anything the counts could not map onto GPUs, or left out, gets a greedy
    try, in the queues' order as the model keeps it (kept_order.py: no gang behind a pending
    one greedy admitted takes a type that one may use). Mutates `state` and `placed`."""
    left = [g for g in pending if g.id not in placed]
    closed = closed_types(state, line, greedy, placed, policy, layouts)
    while left:
        with within_order(state, left, closed, policy, layouts) as tries:
            placed.update(place_greedy(state, tries, policy, layouts))
        # A gang ahead placed now gives its types back: those kept off them try again.
        before, closed = closed, closed_types(state, line, greedy, placed, policy, layouts)
        left = [
            g
            for g in left
            if g.id not in placed
            and not (before.get(g.id, frozenset()) - closed.get(g.id, frozenset())).isdisjoint(
                usable_types(state, g, policy, layouts)
            )
        ]


def _used(state: ClusterState, queue: str, resource: str) -> int:
    return 0 if state.gate is None else state.gate.book.used(queue, resource)


def _reclaimed(
    initial: ClusterState, preemptions: Sequence[Preemption], pending: Sequence[Gang]
) -> dict[tuple[str, str], tuple[int, int]]:
    """(queue, resource) -> (nominal, usage before the decision) of each queue greedy reclaimed
    from: a victim of another usable queue than its winner's (the queue borrowed the victim's
    resource when greedy evicted it: `QueueGate.may_evict`)."""
    gate = initial.gate
    if gate is None:
        return {}
    running = {r.id: r for r in initial.snapshot.running}
    winners = {g.id: g for g in pending}
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for pre in preemptions:
        victim, winner = running.get(pre.gang_id), winners.get(pre.for_gang)
        if victim is None or winner is None or not gate.is_reclaim(victim, winner):
            continue
        home = gate.book.home(victim.queue)
        if home == ROOT:
            continue
        resource = running_charge(victim).resource
        nominal = gate.tree.queues[home].quota(resource).nominal
        out[home, resource] = (nominal, gate.book.used(home, resource))
    return out


def _solve(
    initial: ClusterState,
    greedy_state: ClusterState,
    greedy: dict[str, GangPlacement],
    preemptions: Sequence[Preemption],
    pending: Sequence[Gang],
    policy: Policy,
    layouts: Memo,
    keep: frozenset[str],
) -> tuple[ClusterState, dict[str, GangPlacement], SolveStats]:
    """One solve (see `place_cpsat`), with the gangs in `keep` and those restricted to some
    nodes keeping greedy's placement."""
    state = initial.copy()
    # The queues' order, as greedy tried the gangs (before any of them took GPUs or quota);
    # ordering them here also gives this state's gate the queues' shares of all of them, as
    # greedy's has (`kept_order.queue_line` would leave it without).
    line = greedy_order(pending, state) if state.gate is not None else []
    victims = {p.gang_id for p in preemptions}
    for running in state.snapshot.running:
        if running.id in victims:
            release_gang(state, running)
    reclaimed = _reclaimed(initial, preemptions, pending)
    released = {k: _used(state, *k) for k in reclaimed}
    forced = frozenset(p.for_gang for p in preemptions)
    fixed = {
        g.id: greedy[g.id]
        for g in pending
        if g.id in greedy and (g.allowed_nodes is not None or g.id in keep)
    }
    by_id = {g.id: g for g in pending}
    for placement in fixed.values():
        _take(state, greedy_state, placement, by_id[placement.gang_id])
    # What the model must still admit into each reclaimed queue for it to borrow: its nominal
    # + 1, less its usage before the decision and what the gangs kept out of the model add.
    floors = {
        k: nominal + 1 - before - (_used(state, *k) - released[k])
        for k, (nominal, before) in reclaimed.items()
    }
    free = [g for g in pending if g.id not in fixed and g.allowed_nodes is None]
    built = _Model(state, free, policy, layouts, forced - fixed.keys(), line, greedy, floors)
    if not built.options:
        return greedy_state, greedy, SolveStats("greedy", "NOTHING_TO_SOLVE")
    built.hint(greedy_state, greedy)
    solver = _solver(policy)
    status = solver.solve(built.model)
    name = solver.status_name(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return (
            greedy_state,
            greedy,
            SolveStats("greedy-fallback", name, wall_time_s=solver.wall_time),
        )
    placed = _extract(built, solver, state, layouts) | fixed
    _repair(state, pending, placed, line, greedy, policy, layouts)
    if not forced <= placed.keys():
        stats = SolveStats("greedy-fallback", f"{name}_UNMAPPED", wall_time_s=solver.wall_time)
        return greedy_state, greedy, stats
    stats = SolveStats(
        "cpsat",
        name,
        solver.objective_value / SCALE,
        solver.best_objective_bound / SCALE,
        wall_time_s=solver.wall_time,
    )
    return state, placed, stats
