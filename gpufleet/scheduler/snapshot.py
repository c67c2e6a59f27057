"""Cluster objects -> the core's input: a `Snapshot` of nodes and running gangs, pending `Gang`s.

Every GPU in use counts, whoever placed the pod: gpufleet's own pods carry the GPUs or MIG
instance they were bound to; pods of other schedulers only say how many GPUs (or which MIG
profile) they use, so they are given the lowest free whole GPUs or the first free instance of
their profile on their node. Those pods are never preemptible (gpufleet does not evict work it
does not own). Pending pods of gpufleet are grouped into gangs; a gang is offered to the core only
once all of its pods exist.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.core.demand import Gang, TypeOption
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, Snapshot
from gpufleet.model.cluster import Node
from gpufleet.model.gpus import Catalog
from gpufleet.model.mig import MigPlacement
from gpufleet.scheduler import names, pods
from gpufleet.scheduler.nodes import to_core_node
from gpufleet.scheduler.pods import Pod


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


class _NodeUsage:
    """Free whole GPUs and MIG instances of one node while pods are assigned to it."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.busy: set[int] = set()
        self.used: set[tuple[int, MigPlacement]] = set()

    def _empty(self, g: int) -> bool:
        return g not in self.busy and not any(gi == g for gi, _ in self.used)

    def claim_gpus(self, gpus: tuple[int, ...]) -> bool:
        ok = all(
            0 <= g < self.node.gpu_count and self.node.gpus[g].mig_layout is None and self._empty(g)
            for g in gpus
        )
        if ok and len(set(gpus)) == len(gpus):
            self.busy.update(gpus)
            return True
        return False

    def claim_instance(self, g: int, inst: MigPlacement) -> bool:
        if not 0 <= g < self.node.gpu_count or g in self.busy:
            return False
        layout = self.node.gpus[g].mig_layout
        if layout is None or inst not in layout or (g, inst) in self.used:
            return False
        self.used.add((g, inst))
        return True

    def any_gpus(self, count: int) -> tuple[int, ...] | None:
        free = [g.index for g in self.node.gpus if g.mig_layout is None and self._empty(g.index)]
        return tuple(free[:count]) if len(free) >= count else None

    def any_instance(self, profile: str) -> tuple[int, MigPlacement] | None:
        for gpu in self.node.gpus:
            if gpu.index in self.busy or gpu.mig_layout is None:
                continue
            for inst in gpu.mig_layout:
                if inst.profile == profile and (gpu.index, inst) not in self.used:
                    return gpu.index, inst
        return None


def _assign(usage: _NodeUsage, pod: Pod, exact: bool) -> ReplicaPlacement | None:
    """The GPUs `pod` holds on its node: its recorded ones (`exact`) or any free ones."""
    request = pods.gpu_request(pod)
    name = usage.node.name
    if request.mig_profile is not None:
        if exact:
            recorded = pods.assigned_mig(pod)
            if recorded is None or recorded[1].profile != request.mig_profile:
                return None
            g, inst = recorded
            return ReplicaPlacement(name, (g,), inst) if usage.claim_instance(g, inst) else None
        found = usage.any_instance(request.mig_profile)
        if found is None:
            return None
        usage.claim_instance(*found)
        return ReplicaPlacement(name, (found[0],), found[1])
    if exact:
        gpus = pods.assigned_gpus(pod)
        if gpus is None or len(gpus) != request.gpus:
            return None
        return ReplicaPlacement(name, gpus) if usage.claim_gpus(gpus) else None
    chosen = usage.any_gpus(request.gpus)
    if chosen is None:
        return None
    usage.claim_gpus(chosen)
    return ReplicaPlacement(name, chosen)


def _acceptable(first: Pod, nodes: Iterable[Node], catalog: Catalog) -> tuple[TypeOption, ...]:
    declared = pods.gpu_types(first)
    if declared is not None:
        return declared
    present = {n.gpu_type for n in nodes}
    return tuple(TypeOption(t.name) for t in catalog if t.name in present) or tuple(
        TypeOption(t.name) for t in catalog
    )


def _running_gangs(
    holders: list[tuple[Pod, ReplicaPlacement]], core_nodes: Mapping[str, Node]
) -> tuple[list[RunningGang], dict[str, tuple[str, ...]]]:
    groups: dict[tuple[str, str], list[tuple[Pod, ReplicaPlacement]]] = defaultdict(list)
    for pod, placement in holders:
        ours = (pod.get("spec") or {}).get("schedulerName") == names.SCHEDULER_NAME
        gid = pods.gang_id(pod) if ours else f"{pods.pod_key(pod)}#foreign"
        groups[(gid, core_nodes[placement.node].gpu_type)].append((pod, placement))
    multi_type: dict[str, int] = defaultdict(int)
    for gid, _ in groups:
        multi_type[gid] += 1
    gangs: list[RunningGang] = []
    members: dict[str, tuple[str, ...]] = {}
    for (gid, gpu_type), items in sorted(groups.items(), key=lambda kv: kv[0]):
        items.sort(key=lambda it: pods.rank(it[0]))
        first = items[0][0]
        ours = not gid.endswith("#foreign")
        # A gang spread over two GPU types (only after a manual bind) is split per type.
        rid = gid if multi_type[gid] == 1 else f"{gid}#{gpu_type}"
        options = pods.gpu_types(first) or ()
        speed = next((o.relative_throughput for o in options if o.gpu_type == gpu_type), None)
        # Replicas beyond the gang size (an elastic gang grown past its minimum) are
        # opportunistic: each is its own preemptible unit at the lowest priority, so a
        # higher-priority gang shrinks elastic gangs toward their minimum before it preempts
        # any whole gang.
        core = items[: pods.gang_size(first)] if ours else items
        extra = items[len(core) :]
        gangs.append(
            RunningGang(
                id=rid,
                gpu_type=gpu_type,
                replicas=tuple(p for _, p in core),
                priority=pods.priority(first) if ours else 0,
                preemptible=ours and pods.preemptible(first),
                relative_throughput=speed,
            )
        )
        members[rid] = tuple(pods.pod_key(p) for p, _ in core)
        for pod, placement in extra:
            eid = f"{rid}#extra-{pods.rank(pod)[0]}"
            gangs.append(RunningGang(eid, gpu_type, (placement,), 0, True, speed))
            members[eid] = (pods.pod_key(pod),)
    return gangs, members


def build_view(
    catalog: Catalog,
    nodes: Iterable[Mapping[str, Any]],
    all_pods: Iterable[Pod],
    mig_configs: Mapping[str, Any],
) -> ClusterView:
    """The core's input for one cycle. `all_pods` already includes assumed bindings."""
    core_nodes: dict[str, Node] = {}
    for raw in nodes:
        node = to_core_node(raw, catalog, mig_configs)
        if node is not None:
            core_nodes[node.name] = node
    usage = {name: _NodeUsage(node) for name, node in core_nodes.items()}

    pod_list = list(all_pods)
    on_gpu_nodes = [p for p in pod_list if pods.holds_gpus(p) and pods.node_name(p) in core_nodes]
    holders: list[tuple[Pod, ReplicaPlacement]] = []
    unplaced: list[Pod] = []
    # Recorded placements first, so pods of other schedulers fill what is left.
    for pod in on_gpu_nodes:
        placement = _assign(usage[pods.node_name(pod) or ""], pod, exact=True)
        if placement is None:
            unplaced.append(pod)
        else:
            holders.append((pod, placement))
    problems: list[str] = []
    for pod in unplaced:
        placement = _assign(usage[pods.node_name(pod) or ""], pod, exact=False)
        if placement is None:
            problems.append(pods.pod_key(pod))
        else:
            holders.append((pod, placement))
    running, running_pods = _running_gangs(holders, core_nodes)
    snapshot = Snapshot(catalog, tuple(core_nodes[n] for n in sorted(core_nodes)), tuple(running))

    bound_members: dict[str, int] = defaultdict(int)
    for pod in pod_list:
        if pods.node_name(pod) and not pods.is_terminal(pod):
            bound_members[pods.gang_id(pod)] += 1
    running_type = {g.id: g.gpu_type for g in running}
    waiting: dict[str, list[Pod]] = defaultdict(list)
    for pod in pod_list:
        if pods.is_ours_pending(pod):
            waiting[pods.gang_id(pod)].append(pod)

    pending: list[PendingGang] = []
    held: dict[str, str] = {}
    held_pods: dict[str, tuple[str, ...]] = {}
    for gid in sorted(waiting):
        members = sorted(waiting[gid], key=pods.rank)
        keys = tuple(pods.pod_key(p) for p in members)
        first = members[0]
        needed = pods.gang_size(first) - bound_members[gid]
        reason = _hold_reason(members, needed)
        gang: Gang | None = None
        # The unbound rest of a partly bound gang (left by a crash between two bindings, or
        # the room an elastic gang may still grow into) is offered under its own id, on the
        # GPU type the gang already runs on: the core refuses an id both running and pending.
        rest = gid in running_pods
        acceptable = _acceptable(first, core_nodes.values(), catalog)
        if rest:
            acceptable = tuple(o for o in acceptable if o.gpu_type == running_type[gid]) or (
                TypeOption(running_type[gid]),
            )
        if reason is None:
            request = pods.gpu_request(first)
            try:
                gang = Gang(
                    id=f"{gid}#rest" if rest else gid,
                    acceptable=acceptable,
                    # Pods beyond the gang size are an elastic gang's room to grow: placed if
                    # there is space, never required.
                    replicas_min=max(1, needed),
                    replicas_max=len(members),
                    gpus_per_replica=max(1, request.gpus),
                    mig_profile=request.mig_profile,
                    # Growth past the minimum is opportunistic: it never preempts anything.
                    priority=pods.priority(first) if needed > 0 else 0,
                    preemptible=pods.preemptible(first),
                    topology=pods.topology(first),
                    energy=pods.energy(first),
                )
            except ValueError as exc:
                reason = f"invalid gang: {exc}"
        if gang is None:
            held[gid] = reason or "invalid gang"
            held_pods[gid] = keys
        else:
            pending.append(PendingGang(gang, keys))
    return ClusterView(snapshot, tuple(pending), held, held_pods, running_pods, tuple(problems))


def _hold_reason(members: list[Pod], needed: int) -> str | None:
    """Why a gang's pending pods cannot be offered to the core yet, or None."""
    if len(members) < needed:
        return f"waiting for {needed - len(members)} more pod(s) of the gang to be created"
    requests = {pods.gpu_request(p) for p in members}
    if len(requests) > 1:
        return "pods of one gang ask for different GPUs or MIG profiles"
    request = requests.pop()
    if request.empty:
        return "pod requests neither nvidia.com/gpu nor a nvidia.com/mig-<profile> slice"
    if request.mig_profile is not None and request.gpus:
        return "pod requests both whole GPUs and a MIG slice"
    return None
