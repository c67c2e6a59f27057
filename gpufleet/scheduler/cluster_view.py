"""Cluster objects -> the core's input: a `Snapshot` of nodes and running gangs, pending `Gang`s.

Every GPU in use counts, whoever placed the pod: gpufleet's own pods carry the GPUs or MIG
instance they were bound to; pods of other schedulers only say how many GPUs (or which MIG
profile) they use, so they are given the lowest free whole GPUs or the first free instance of
their profile on their node. Those pods are never preemptible (gpufleet does not evict work it
does not own). Pending pods of gpufleet are grouped into gangs; a gang is offered to the core only
once all of its pods exist, so it has been pending since its latest pod was created: its
`waited_s` (the queues' aging and node reservations, the type delay's patience) counts from that
pod's `creationTimestamp` to the builder's wall clock, at least 0 (a clock skewed behind). The
operator recreates an evicted or moved job's workers as new pods, so a gang's wait starts again
at its eviction; a gang of bare pods counts from its own pods. Its place in line follows the
policy's requeue timestamp (`Policy.requeue_timestamp`, passed to `build`): with `eviction`
(the default, Kueue's default) it is that wait, so an evicted gang goes to the back; with
`creation` a gang is in line since its job was submitted, which the operator writes on every
TrainingJob worker (the job's `creationTimestamp`, `gpufleet.io/submitted-at`: the pods
alone tell, so the scheduler reads no jobs and the annotation survives the pods' recreation),
or for pods without it since the gang's earliest pod's creation; the gang's `queued_s` is that
time when it exceeds the wait (an evicted or moved gang), in whole seconds. A running job's
room to grow (`<gang>#rest` past its size) never waits: growth is opportunistic, as in the
simulator.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from gpufleet.core.borrowing import elastic_units
from gpufleet.core.demand import Gang, TypeOption
from gpufleet.core.policy import RequeueTimestamp
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.model.contract import names
from gpufleet.model.contract.lending import borrowed_from, loan_gpus
from gpufleet.model.contract.moves import Checkpoint
from gpufleet.model.contract.submitted import read_submitted
from gpufleet.model.contract.timestamps import parse_time
from gpufleet.model.gpus import Catalog
from gpufleet.model.inventory import Node
from gpufleet.scheduler import pods
from gpufleet.scheduler.cache import CachedState
from gpufleet.scheduler.eligibility import Eligibility, NodeFacts, Outcome, Resources
from gpufleet.scheduler.nodes import to_core_node
from gpufleet.scheduler.pods import Pod, PodFacts
from gpufleet.scheduler.queue_objects import QueueTrees


@dataclass(frozen=True, slots=True)
class PendingGang:
    """A gang offered to the core, with its pods in rank order (replica i -> pods[i])."""

    gang: Gang
    pods: tuple[str, ...]


@dataclass(frozen=True)
class ClusterView:
    """One cycle's input to the core plus what the adapter had to leave out, and why."""

    snapshot: Snapshot
    pending: tuple[PendingGang, ...] = ()
    # gang id -> reason it was not offered to the core (incomplete, invalid request).
    held: Mapping[str, str] = field(default_factory=dict)
    # gang id -> its pods (rank order) for every gang not offered, so reasons reach them.
    held_pods: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # running gang id -> its pod keys, for preemption.
    running_pods: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # pods holding GPUs that could not be accounted for (over-committed node).
    problems: tuple[str, ...] = ()
    # borrowing pod key -> {GPU index: lender pod key} for each GPU it holds on loan from an
    # asleep standby (model.contract.lending): the ledger counts those GPUs as the standby's.
    loans: Mapping[str, Mapping[int, str]] = field(default_factory=dict)
    # pod key -> what the cycle reads of it, for every pod in the cache (assumed ones bound).
    facts: Mapping[str, PodFacts] = field(default_factory=dict)
    # offered gang id -> which GPU nodes its pods may use and why not the others, and each GPU
    # node's free CPU, memory and ephemeral storage (eligibility.py).
    eligibility: Mapping[str, Outcome] = field(default_factory=dict)
    free: Mapping[str, Resources] = field(default_factory=dict)
    # GPU node name -> what the node filters read of it (`Eligibility.nodes`, memoised per
    # node object), for the checks of a move's target (mover.py).
    node_facts: Mapping[str, NodeFacts] = field(default_factory=dict)


def closed_to_new_pods(view: ClusterView, node_names: Collection[str]) -> ClusterView:
    """The view with the named nodes unschedulable (the pods on them stay accounted)."""
    if not any(n.name in node_names and n.schedulable for n in view.snapshot.nodes):
        return view
    nodes = tuple(
        replace(n, schedulable=False) if n.name in node_names else n for n in view.snapshot.nodes
    )
    return replace(view, snapshot=replace(view.snapshot, nodes=nodes))


def hide_overcommitted(view: ClusterView) -> ClusterView:
    """The view with every node that holds a pod the ledger could not account for made
    unschedulable: such a pod's GPUs are not in the snapshot, so they would look free, and a
    new gang bound there would share them (a chaos run's double booking after a leader change
    found a pod on GPUs its node had since partitioned). The node takes pods again once the
    over-commit clears."""
    crowded = {f.node for key in view.problems if (f := view.facts.get(key)) and f.node}
    return closed_to_new_pods(view, crowded)


def _assign(
    ledger: ClusterState, pod: Pod, exact: bool, lent: Collection[int] = ()
) -> ReplicaPlacement | None:
    """The GPUs `pod` holds on the ledger's one node: its recorded ones (`exact`; those `lent`
    to it by a standby are the standby's and left out) or the lowest free whole GPUs / the
    first free instance of its profile; None if they are not free."""
    request = pods.gpu_request(pod)
    name = ledger.nodes[0].name
    placement: ReplicaPlacement | None = None
    if request.mig_profile is not None:
        if exact:
            recorded = pods.assigned_mig(pod)
            if recorded is not None and recorded[1].profile == request.mig_profile:
                placement = ReplicaPlacement(name, (recorded[0],), recorded[1])
        else:
            found = ledger.node_instances(0, request.mig_profile)
            if found:
                placement = ReplicaPlacement(name, (found[0][0],), found[0][1])
    elif exact:
        gpus = pods.assigned_gpus(pod)
        if gpus is not None and len(gpus) == request.gpus:
            placement = ReplicaPlacement(name, tuple(g for g in gpus if g not in lent))
    else:
        free = ledger.whole_mode_gpus(0)
        if len(free) >= request.gpus:
            placement = ReplicaPlacement(name, tuple(free[: request.gpus]))
    if placement is None:
        return None
    try:
        ledger.hold(placement)
    except ValueError:
        return None
    return placement


def _acceptable(first: Pod, present: frozenset[str], catalog: Catalog) -> tuple[TypeOption, ...]:
    declared = pods.gpu_types(first)
    if declared is not None:
        return declared
    return tuple(TypeOption(t.name) for t in catalog if t.name in present) or tuple(
        TypeOption(t.name) for t in catalog
    )


def _running_gang(
    gid: str, gpu_type: str, items: list[tuple[PodFacts, ReplicaPlacement]], split: bool
) -> tuple[list[RunningGang], dict[str, tuple[str, ...]]]:
    """The running gang(s) of the pods of `gid` on `gpu_type` (already in rank order)."""
    first = items[0][0]
    ours = not gid.endswith("#foreign")
    # A gang spread over two GPU types (only after a manual bind) is split per type.
    rid = f"{gid}#{gpu_type}" if split else gid
    options = pods.gpu_types(first.pod) or ()
    speed = next((o.relative_throughput for o in options if o.gpu_type == gpu_type), None)
    placements = tuple(p for _, p in items)
    if not ours or len(items) <= first.size:
        gang = RunningGang(
            id=rid,
            gpu_type=gpu_type,
            replicas=placements,
            priority=pods.priority(first.pod) if ours else 0,
            preemptible=ours and pods.preemptible(first.pod),
            relative_throughput=speed,
            queue=pods.queue(first.pod) if ours else None,
        )
        return [gang], {rid: tuple(f.key for f, _ in items)}
    # Replicas beyond the gang size (an elastic gang grown past its minimum) are opportunistic:
    # each is its own preemptible unit at the lowest priority (`core.borrowing.elastic_units`,
    # as the simulator shows them), so a higher-priority gang shrinks elastic gangs toward
    # their minimum before it preempts any whole gang. Each carries the job's scaling curve as
    # one replica growing the job from its position, so it is worth its step of the curve and
    # a gang that adds more may take it (core/rebalance.py).
    units = elastic_units(
        rid,
        gpu_type,
        placements,
        first.size,
        priority=pods.priority(first.pod),
        preemptible=pods.preemptible(first.pod),
        relative_throughput=speed,
        demand=None if split else _growth_demand(rid, first, gpu_type, speed, len(items)),
        queue=pods.queue(first.pod),
    )
    base = len(units[0].replicas)
    members = {rid: tuple(f.key for f, _ in items[:base])}
    for unit, (f, _) in zip(units[1:], items[base:], strict=True):
        members[unit.id] = (f.key,)
    return list(units), members


def _growth_demand(
    gid: str, first: PodFacts, gpu_type: str, speed: float | None, count: int
) -> Gang | None:
    """The job a running elastic gang's growth units grow: one replica on the type it runs on,
    with the job's scaling curve from its pods (linear when the curve does not cover its
    `count` running replicas, as for its room to grow); None when its pods make no gang."""
    curve = pods.scaling(first.pod)
    try:
        gang = _gang_of(gid, first, (TypeOption(gpu_type, speed),), (1, 1), 0)
    except ValueError:
        return None
    return replace(gang, scaling=curve if len(curve) >= count else ())


def _borrowers_kept(running: list[RunningGang], borrowers: set[str]) -> list[RunningGang]:
    """`running` with the gangs that borrow GPUs not preemptible: a borrower leaves only as a
    whole when its lenders recall their GPUs (scheduler/lending.py); a preemption of its own
    GPUs alone would evict part of it and hand a standby's GPU to someone else."""
    return [
        replace(g, preemptible=False) if g.id.split("#", 1)[0] in borrowers else g for g in running
    ]


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    """Whether two tuples hold the very same objects (identity, not equality)."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


class ViewBuilder:
    """Builds each cycle's `ClusterView`, reusing what has not changed since the last cycle.

    The cache replaces an object's dict on every watch event and never mutates one in place,
    so an unchanged object is the very same dict as in the last cycle. Keyed by identity
    (with the object kept alive, so an id is never reused while remembered), this reuses: the
    facts of each pod, the core `Node` of each node, the placements found for the pods of a
    node, each running gang, and each pending gang (with its wait, copied again when its whole
    seconds change). A cycle then costs a few passes over the pods instead of re-reading every
    pod's JSON, which for 1,000 pods was most of the cycle.
    Every memo is rebuilt from the current objects each cycle, so nothing stale survives.
    The result equals `build_view` on the same input (tested).
    """

    def __init__(
        self,
        catalog: Catalog,
        scheduler_name: str = names.SCHEDULER_NAME,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.catalog = catalog
        self.scheduler_name = scheduler_name  # pods naming it are this scheduler's
        self.wall = wall  # the pending gangs' waits count to its reading (module docstring)
        self._facts: dict[int, PodFacts] = {}
        # node name -> (raw node, mig configs, core node)
        self._nodes: dict[str, tuple[Mapping[str, Any], Mapping[str, Any], Node | None]] = {}
        # node name -> (core node, its pods, placements, problems)
        self._usage: dict[
            str,
            tuple[
                Node,
                tuple[Pod, ...],
                list[tuple[PodFacts, ReplicaPlacement]],
                list[str],
                dict[str, dict[int, str]],
            ],
        ] = {}
        # (gang, type) -> (its pods, their placements, split, gangs, members)
        self._running: dict[
            tuple[str, str],
            tuple[
                tuple[Pod, ...],
                tuple[ReplicaPlacement, ...],
                bool,
                list[RunningGang],
                dict[str, tuple[str, ...]],
            ],
        ] = {}
        self._last_running: tuple[list[RunningGang], dict[str, tuple[str, ...]]] | None = None
        # gang -> (its pods, inputs, the pending gang or why it is held)
        # (bound members, offered as a rest, the type it runs on, GPU types present)
        self._pending: dict[
            str,
            tuple[tuple[Pod, ...], tuple[int, bool, str | None, frozenset[str]], PendingGang | str],
        ] = {}
        # gang -> (its pending gang as built, since when it waits and since when it is in line
        # by creation, its nodes, whole seconds waited and in line (None: as waited), the gang
        # offered with them): copied again only when one of those changes.
        self._waits: dict[
            str,
            tuple[
                PendingGang,
                tuple[datetime | None, datetime | None],
                tuple[frozenset[str] | None, int, int | None],
                PendingGang,
            ],
        ] = {}
        self._eligibility = Eligibility()
        self._trees = QueueTrees()

    def facts(self, all_pods: Iterable[Pod]) -> dict[str, PodFacts]:
        """Pod key -> facts, reusing those of pod dicts seen last cycle."""
        old, new = self._facts, {}
        out: dict[str, PodFacts] = {}
        for pod in all_pods:
            f = old.get(id(pod))
            if f is None or f.pod is not pod:
                f = pods.facts(pod, self.scheduler_name)
            new[id(pod)] = f
            out[f.key] = f
        self._facts = new
        return out

    def _core_nodes(
        self, nodes: Iterable[Mapping[str, Any]], mig_configs: Mapping[str, Any]
    ) -> dict[str, Node]:
        old, new = self._nodes, {}
        core_nodes: dict[str, Node] = {}
        for raw in nodes:
            name = raw["metadata"]["name"]
            seen = old.get(name)
            if seen is not None and seen[0] is raw and seen[1] is mig_configs:
                node = seen[2]
            else:
                node = to_core_node(raw, self.catalog, mig_configs)
            new[name] = (raw, mig_configs, node)
            if node is not None:
                core_nodes[node.name] = node
        self._nodes = new
        return core_nodes

    def _holders(
        self, core_nodes: Mapping[str, Node], facts: Mapping[str, PodFacts]
    ) -> tuple[list[tuple[PodFacts, ReplicaPlacement]], list[str], dict[str, dict[int, str]], bool]:
        """Placements of GPU-holding pods, keys of pods that do not fit, the GPUs of pods on
        loan, and whether all of it is what the last cycle found (no node or pod on a GPU node
        changed)."""
        on_node: dict[str, list[PodFacts]] = defaultdict(list)
        for f in facts.values():
            if f.node is not None and f.holds_gpus and f.node in core_nodes:
                on_node[f.node].append(f)
        old, new = self._usage, {}
        holders: list[tuple[PodFacts, ReplicaPlacement]] = []
        problems: list[str] = []
        loans: dict[str, dict[int, str]] = {}
        unchanged = on_node.keys() == old.keys()
        for name in sorted(on_node):
            node, here = core_nodes[name], on_node[name]
            objs = tuple(f.pod for f in here)
            seen = old.get(name)
            if seen is not None and seen[0] is node and _same(seen[1], objs):
                found, bad, lent = seen[2], seen[3], seen[4]
            else:
                found, bad, lent = _node_holders(self.catalog, node, here)
                unchanged = False
            new[name] = (node, objs, found, bad, lent)
            holders.extend(found)
            problems.extend(bad)
            loans.update(lent)
        self._usage = new
        return holders, problems, loans, unchanged

    def _running_gangs(
        self, holders: list[tuple[PodFacts, ReplicaPlacement]], core_nodes: Mapping[str, Node]
    ) -> tuple[list[RunningGang], dict[str, tuple[str, ...]]]:
        groups: dict[tuple[str, str], list[tuple[PodFacts, ReplicaPlacement]]] = defaultdict(list)
        for f, placement in holders:
            gid = f.gang if f.ours else f"{f.key}#foreign"
            groups[(gid, core_nodes[placement.node].gpu_type)].append((f, placement))
        multi_type: dict[str, int] = defaultdict(int)
        for gid, _ in groups:
            multi_type[gid] += 1
        old, new = self._running, {}
        gangs: list[RunningGang] = []
        members: dict[str, tuple[str, ...]] = {}
        for (gid, gpu_type), items in sorted(groups.items(), key=lambda kv: kv[0]):
            items.sort(key=lambda it: it[0].rank)
            objs = tuple(f.pod for f, _ in items)
            where = tuple(p for _, p in items)
            split = multi_type[gid] > 1
            seen = old.get((gid, gpu_type))
            if seen is not None and _same(seen[0], objs) and seen[1] == where and seen[2] is split:
                made, named = seen[3], seen[4]
            else:
                made, named = _running_gang(gid, gpu_type, items, split)
            new[(gid, gpu_type)] = (objs, where, split, made, named)
            gangs.extend(made)
            members.update(named)
        self._running = new
        return gangs, members

    def _with_waits(
        self,
        pending: list[PendingGang],
        outcomes: Mapping[str, Outcome],
        facts: Mapping[str, PodFacts],
        requeue: RequeueTimestamp,
    ) -> list[PendingGang]:
        """`pending` with each gang's allowed nodes, its wait and (requeued by creation) its
        time in line at the wall clock's reading, in whole seconds (the creation times'
        resolution; module docstring)."""
        now = self.wall()
        old, new = self._waits, {}
        out: list[PendingGang] = []
        by_creation = requeue is RequeueTimestamp.CREATION
        for pg in pending:
            allowed = outcomes[pg.gang.id].allowed
            seen = old.get(pg.gang.id)
            if seen is not None and seen[0] is not pg:
                seen = None
            stamps = (_since(pg, facts), _in_line_since(pg, facts)) if seen is None else seen[1]
            since, line_since = stamps
            waited = 0 if since is None else max(0, int((now - since).total_seconds()))
            queued = None
            if by_creation and line_since is not None:
                in_line = max(0, int((now - line_since).total_seconds()))
                queued = in_line if in_line > waited else None
            inputs = (allowed, waited, queued)
            if seen is not None and seen[2][0] is allowed and seen[2][1:] == inputs[1:]:
                made = seen[3]
            elif allowed is None and not waited and queued is None:
                made = pg
            else:
                gang = replace(
                    pg.gang,
                    allowed_nodes=allowed,
                    waited_s=float(waited),
                    queued_s=None if queued is None else float(queued),
                )
                made = PendingGang(gang, pg.pods)
            new[pg.gang.id] = (pg, stamps, inputs, made)
            out.append(made)
        self._waits = new
        return out

    def build_state(
        self,
        state: CachedState,
        extra_pods: Sequence[Pod] = (),
        requeue: RequeueTimestamp = RequeueTimestamp.EVICTION,
    ) -> ClusterView:
        """The core's input from the cache's `state` as the scheduler decides on it: its
        nodes, pods (plus `extra_pods`, as if they existed: the admin API's what-ifs), MIG
        configs, GPUQueues and namespace labels; `requeue` is the policy's requeue timestamp.
        The live loop and the admin API both build here, so a what-if sees the quotas (and
        the places in line) the scheduler sees."""
        return self.build(
            state.nodes,
            [*state.pods, *extra_pods] if extra_pods else state.pods,
            state.mig_configs,
            queues=state.queues,
            namespace_labels=state.namespace_labels,
            requeue=requeue,
        )

    def build(
        self,
        nodes: Iterable[Mapping[str, Any]],
        all_pods: Iterable[Pod],
        mig_configs: Mapping[str, Any],
        facts: Mapping[str, PodFacts] | None = None,
        queues: Iterable[Mapping[str, Any]] | None = None,
        namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
        requeue: RequeueTimestamp = RequeueTimestamp.EVICTION,
    ) -> ClusterView:
        """The core's input for one cycle. `all_pods` already includes assumed bindings;
        `facts` are `self.facts(all_pods)` when the caller has them already; `queues` are the
        GPUQueue objects (None: no queues, no quotas); `namespace_labels` the namespaces'
        labels, for the queues' namespace selectors; `requeue` the policy's requeue timestamp
        (`Policy.requeue_timestamp`: where an evicted gang's place in line is)."""
        catalog = self.catalog
        core_nodes = self._core_nodes(nodes, mig_configs)
        if facts is None:
            facts = self.facts(all_pods)
        holders, problems, loans, unchanged = self._holders(core_nodes, facts)
        if not unchanged or self._last_running is None:
            self._last_running = self._running_gangs(holders, core_nodes)
        running, running_pods = self._last_running
        if loans:
            running = _borrowers_kept(running, {facts[k].gang for k in loans})
        snapshot = Snapshot(
            catalog,
            tuple(core_nodes[n] for n in sorted(core_nodes)),
            tuple(running),
            queues=None if queues is None else self._trees.tree(queues),
            namespace_labels=namespace_labels or {},
        )

        bound_members: dict[str, int] = defaultdict(int)
        waiting: dict[str, list[PodFacts]] = defaultdict(list)
        for f in facts.values():
            if f.node and not f.terminal:
                bound_members[f.gang] += 1
            if f.pending:
                waiting[f.gang].append(f)
        running_type = {g.id: g.gpu_type for g in running}
        present = frozenset(n.gpu_type for n in core_nodes.values())

        old, new = self._pending, {}
        pending: list[PendingGang] = []
        held: dict[str, str] = {}
        held_pods: dict[str, tuple[str, ...]] = {}
        for gid in sorted(waiting):
            members = sorted(waiting[gid], key=lambda f: f.rank)
            objs = tuple(f.pod for f in members)
            rest = gid in running_pods
            inputs = (bound_members[gid], rest, running_type.get(gid), present)
            seen = old.get(gid)
            if seen is not None and _same(seen[0], objs) and seen[1] == inputs:
                outcome = seen[2]
            else:
                outcome = _pending_gang(catalog, gid, members, inputs[0], rest, inputs[2], present)
            new[gid] = (objs, inputs, outcome)
            if isinstance(outcome, PendingGang):
                pending.append(outcome)
            else:
                held[gid] = outcome
                held_pods[gid] = tuple(f.key for f in members)
        self._pending = new
        # Node filters (taints, selectors, affinity, CPU and memory) restrict a gang's nodes,
        # the nodes a movable running gang may move to included.
        gpu_nodes = [self._nodes[name][0] for name in core_nodes]
        movable = _movable(running, running_pods, facts)
        firsts = {pg.gang.id: facts[pg.pods[0]].pod for pg in pending}
        firsts |= {gid: f.pod for gid, f in movable.items()}
        outcomes, free = self._eligibility.evaluate(gpu_nodes, facts, firsts)
        snapshot = _with_demands(catalog, snapshot, movable, outcomes, present)
        pending = self._with_waits(pending, outcomes, facts, requeue)
        return ClusterView(
            snapshot,
            tuple(pending),
            held,
            held_pods,
            running_pods,
            tuple(problems),
            loans,
            facts,
            outcomes,
            free,
            self._eligibility.nodes,
        )


def _since(pg: PendingGang, facts: Mapping[str, PodFacts]) -> datetime | None:
    """Since when `pg` has been pending: its latest pod's creation; None (no wait) for a job's
    room to grow or when a pod says no creation time (module docstring)."""
    if pg.gang.grows_from:
        return None
    created = [parse_time(facts[k].pod["metadata"].get("creationTimestamp")) for k in pg.pods]
    stamps = [t for t in created if t is not None]
    return max(stamps) if stamps and len(stamps) == len(created) else None


def _in_line_since(pg: PendingGang, facts: Mapping[str, PodFacts]) -> datetime | None:
    """Since when `pg` is in line by its job's creation: when its pods say the job was
    submitted (the operator's `submitted-at`), else its earliest pod's creation; None for a
    job's room to grow or when no pod says (module docstring)."""
    if pg.gang.grows_from:
        return None
    metas = [facts[k].pod["metadata"] for k in pg.pods]
    said = [t for m in metas if (t := read_submitted(m.get("annotations") or {})) is not None]
    if said:
        return min(said)
    created = [t for m in metas if (t := parse_time(m.get("creationTimestamp"))) is not None]
    return min(created, default=None)


def _node_holders(
    catalog: Catalog, node: Node, here: list[PodFacts]
) -> tuple[list[tuple[PodFacts, ReplicaPlacement]], list[str], dict[str, dict[int, str]]]:
    """Placements of the GPU-holding pods of one node; keys of pods that do not fit; the GPUs
    each borrowing pod holds on loan from an asleep standby (not in its placement)."""
    ledger = ClusterState(Snapshot(catalog, (node,)))
    by_key = {f.key: f.pod for f in here}
    loans: dict[str, dict[int, str]] = {}
    for f in here:
        if f.ours and borrowed_from(f.pod):
            lent = loan_gpus(f.pod, by_key)
            if lent:
                loans[f.key] = lent
    holders: list[tuple[PodFacts, ReplicaPlacement]] = []
    unplaced: list[PodFacts] = []
    # Recorded placements first, so pods of other schedulers fill what is left; pods that say
    # they borrow come last, so a standby woken under its borrower keeps its GPU in the ledger.
    for f in sorted(here, key=lambda f: bool(borrowed_from(f.pod))):
        lent = loans.get(f.key, {})
        if lent and set(pods.assigned_gpus(f.pod) or ()) <= lent.keys():
            continue  # every GPU it holds is on loan: the standbys hold them
        placement = _assign(ledger, f.pod, exact=True, lent=lent.keys())
        if placement is None:
            unplaced.append(f)
        else:
            holders.append((f, placement))
    problems: list[str] = []
    for f in unplaced:
        placement = _assign(ledger, f.pod, exact=False)
        if placement is None:
            problems.append(f.key)
        else:
            holders.append((f, placement))
    return holders, problems, loans


def _pending_gang(
    catalog: Catalog,
    gid: str,
    members: list[PodFacts],
    bound: int,
    rest: bool,
    running_type: str | None,
    present: frozenset[str],
) -> PendingGang | str:
    """The gang `members` (rank order) offered to the core, or why it is held back."""
    keys = tuple(f.key for f in members)
    first = members[0]
    needed = first.size - bound
    reason = _hold_reason(members, needed)
    if reason is not None:
        return reason
    # The unbound rest of a partly bound gang (left by a crash between two bindings, or
    # the room an elastic gang may still grow into) is offered under its own id, on the
    # GPU type the gang already runs on: the core refuses an id both running and pending.
    acceptable = _acceptable(first.pod, present, catalog)
    if rest and running_type is not None:
        acceptable = tuple(o for o in acceptable if o.gpu_type == running_type) or (
            TypeOption(running_type),
        )
    # An elastic gang's scaling curve covers the whole job: a running job's room to grow is
    # valued from its running count on (`Gang.grows_from`), comparable with any other gang.
    # (The rest of a gang left partly bound below its size is no growth: no curve, as before.)
    grows_from = bound if rest and needed <= 0 else 0
    curve = pods.scaling(first.pod) if grows_from or not rest else ()
    if len(curve) < grows_from + len(members):
        curve = ()  # not this job's curve (the pods were written for other bounds): linear
    try:
        # Pods beyond the gang size are an elastic gang's room to grow: placed if there is
        # space, never required; growth past the minimum is opportunistic: it never preempts
        # anything.
        gang = replace(
            _gang_of(
                f"{gid}#rest" if rest else gid,
                first,
                acceptable,
                (max(1, needed), len(members)),
                pods.priority(first.pod) if needed > 0 else 0,
            ),
            scaling=curve,
            grows_from=grows_from,
        )
    except ValueError as exc:
        return f"invalid gang: {exc}"
    return PendingGang(gang, keys)


def _gang_of(
    gid: str,
    first: PodFacts,
    acceptable: tuple[TypeOption, ...],
    replicas: tuple[int, int],
    priority: int,
    allowed: frozenset[str] | None = None,
) -> Gang:
    """The core's gang of `replicas` (min, max) pods like `first`, as its annotations ask."""
    return Gang(
        id=gid,
        acceptable=acceptable,
        replicas_min=replicas[0],
        replicas_max=replicas[1],
        gpus_per_replica=max(1, first.request.gpus),
        mig_profile=first.request.mig_profile,
        priority=priority,
        preemptible=pods.preemptible(first.pod),
        topology=pods.topology(first.pod),
        energy=pods.energy(first.pod),
        max_slowdown=pods.max_slowdown(first.pod),
        spread_speed=pods.spread_speed(first.pod),
        queue=pods.queue(first.pod),
        namespace=first.pod["metadata"].get("namespace", "default"),
        allowed_nodes=allowed,
    )


def _movable(
    running: Iterable[RunningGang],
    members: Mapping[str, tuple[str, ...]],
    facts: Mapping[str, PodFacts],
) -> dict[str, PodFacts]:
    """Running gangs the core may move (gang id -> its first pod): gpufleet's own whole,
    fixed-size, preemptible gangs on one type whose pods say how they checkpoint (the
    operator writes it for a TrainingJob with `spec.checkpoint`), none of them being deleted."""
    out: dict[str, PodFacts] = {}
    for gang in running:
        if not gang.preemptible or "#" in gang.id:  # foreign pods, split gangs, extras
            continue
        keys = members.get(gang.id, ())
        gang_facts = [facts[k] for k in keys if k in facts]
        if not gang_facts or len(gang_facts) != gang_facts[0].size:
            continue
        first = gang_facts[0]
        if any(f.deleting for f in gang_facts):
            continue
        if Checkpoint.read(pods.pod_annotations(first.pod)) is None:
            continue
        out[gang.id] = first
    return out


def _with_demands(
    catalog: Catalog,
    snapshot: Snapshot,
    movable: Mapping[str, PodFacts],
    outcomes: Mapping[str, Outcome],
    present: frozenset[str],
) -> Snapshot:
    """`snapshot` with the demand (the gang as asked for, on the nodes its pods may use) of
    each movable running gang, which the core's move rule needs."""
    if not movable:
        return snapshot
    running: list[RunningGang] = []
    for gang in snapshot.running:
        first = movable.get(gang.id)
        if first is None:
            running.append(gang)
            continue
        size = len(gang.replicas)
        acceptable = _acceptable(first.pod, present, catalog)
        try:
            demand = _gang_of(
                gang.id, first, acceptable, (size, size), gang.priority, outcomes[gang.id].allowed
            )
        except ValueError:  # pods no gang could be made of: left where they are
            running.append(gang)
            continue
        running.append(replace(gang, demand=demand))
    return replace(snapshot, running=tuple(running))


def build_view(
    catalog: Catalog,
    nodes: Iterable[Mapping[str, Any]],
    all_pods: Iterable[Pod],
    mig_configs: Mapping[str, Any],
    queues: Iterable[Mapping[str, Any]] | None = None,
    namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
    wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    requeue: RequeueTimestamp = RequeueTimestamp.EVICTION,
) -> ClusterView:
    """The core's input for one cycle, from scratch, the waits counted to `wall`'s reading.
    `all_pods` already includes assumed bindings. The live loop keeps a `ViewBuilder` instead,
    which reuses unchanged parts."""
    return ViewBuilder(catalog, wall=wall).build(
        nodes,
        all_pods,
        mig_configs,
        queues=queues,
        namespace_labels=namespace_labels,
        requeue=requeue,
    )


def _hold_reason(members: list[PodFacts], needed: int) -> str | None:
    """Why a gang's pending pods cannot be offered to the core yet, or None."""
    if len(members) < needed:
        return f"waiting for {needed - len(members)} more pod(s) of the gang to be created"
    requests = {f.request for f in members}
    if len(requests) > 1:
        return "pods of one gang ask for different GPUs or MIG profiles"
    request = requests.pop()
    if request.empty:
        return "pod requests neither nvidia.com/gpu nor a nvidia.com/mig-<profile> slice"
    if request.mig_profile is not None and request.gpus:
        return "pod requests both whole GPUs and a MIG slice"
    return None
