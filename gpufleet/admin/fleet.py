"""The fleet as the admin API shows it, built from one `Observed` reading (pure).

Who holds each GPU and MIG slice comes from the scheduler's view: its running gangs list their
replicas' placements in the order of their pods (`ClusterView.running_pods`), for gpufleet's
pods and for the GPU pods of other schedulers alike. Power is the power model's estimate: an
idle GPU draws its idle watts, a held one its busy draw under the pod's power cap, and a MIG
GPU its idle draw plus each held slice's compute share of the busy increment. Where GPUQueues
exist, the capacity totals also say how much is held outside every queue (no queue's status
counts it: core/queue_report.py `outside_usage`).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.admin.live import Observed
from gpufleet.admin.models.fleet import (
    CapacityPublic,
    FleetPublic,
    GpuPublic,
    HolderPublic,
    MigReconfigurationPublic,
    MigSlicePublic,
    NodePublic,
    TaintPublic,
)
from gpufleet.admin.paging import paginate
from gpufleet.admin.workloads import job_of_pod, job_ref
from gpufleet.core.queue_report import outside_usage
from gpufleet.core.queues import split_resource
from gpufleet.model.contract import names
from gpufleet.model.contract.assignment import MigState, power_cap
from gpufleet.model.gpus import GpuType
from gpufleet.model.inventory import Node
from gpufleet.model.mig import MigPlacement
from gpufleet.model.power import capped_power_w
from gpufleet.scheduler import pods
from gpufleet.scheduler.nodes import node_ready
from gpufleet.scheduler.queue_objects import without_holds

Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Held:
    """A GPU or slice held by one pod."""

    pod: Obj
    key: str
    gang: str
    power_cap_w: float | None


# (node, gpu) -> holder of the whole GPU; (node, gpu, instance) -> holder of a slice.
Holdings = tuple[dict[tuple[str, int], Held], dict[tuple[str, int, MigPlacement], Held]]


def holdings(observed: Observed) -> Holdings:
    """(node, gpu) -> holder of the whole GPU; (node, gpu, instance) -> holder of a slice."""
    view = observed.view
    whole: dict[tuple[str, int], Held] = {}
    slices: dict[tuple[str, int, MigPlacement], Held] = {}
    for gang in view.snapshot.running:
        members = view.running_pods.get(gang.id, ())
        for replica, key in zip(gang.replicas, members, strict=False):
            facts = view.facts.get(key)
            if facts is None:
                continue
            held = Held(facts.pod, key, facts.gang, _power_cap(facts.pod))
            for gpu in replica.gpus:
                if replica.mig is None:
                    whole[(replica.node, gpu)] = held
                else:
                    slices[(replica.node, gpu, replica.mig)] = held
    return whole, slices


def _power_cap(pod: Obj) -> float | None:
    return power_cap(pods.pod_annotations(pod))


def holder_public(held: Held, observed: Observed) -> HolderPublic:
    pod = held.pod
    job = job_ref(pod)
    obj = _job_object(pod, observed)
    queue = (obj.get("spec") or {}).get("queue", "default") if obj else None
    ours = (pod.get("spec") or {}).get("schedulerName") == observed.scheduler_name
    return HolderPublic(
        pod=held.key,
        gang=held.gang,
        job=job,
        queue=queue,
        priority=pods.priority(pod) if ours else 0,
        preemptible=ours and pods.preemptible(pod),
        scheduler=observed.scheduler_name if ours else "other",
        power_cap_w=held.power_cap_w,
    )


def _busy_w(gpu: GpuType, held: Held) -> float:
    return capped_power_w(gpu, held.power_cap_w)


def _node_public(
    raw: Obj,
    node: Node,
    gpu: GpuType,
    whole: Mapping[tuple[str, int], Held],
    slices: Mapping[tuple[str, int, MigPlacement], Held],
    observed: Observed,
) -> NodePublic:
    meta = raw.get("metadata") or {}
    labels = meta.get("labels") or {}
    spec = raw.get("spec") or {}
    gpus: list[GpuPublic] = []
    idle = gpu.power.idle_w
    for g in node.gpus:
        if g.mig_layout is None:
            held = whole.get((node.name, g.index))
            gpus.append(
                GpuPublic(
                    index=g.index,
                    nvlink_domain=g.nvlink_domain,
                    mig_enabled=False,
                    holder=holder_public(held, observed) if held else None,
                    power_w=round(_busy_w(gpu, held) if held else idle, 1),
                )
            )
            continue
        parts: list[MigSlicePublic] = []
        watts = idle
        for inst in g.mig_layout:
            held = slices.get((node.name, g.index, inst))
            profile = gpu.mig_profile(inst.profile)
            if held is not None:
                watts += profile.compute_fraction * max(0.0, _busy_w(gpu, held) - idle)
            parts.append(
                MigSlicePublic(
                    profile=inst.profile,
                    start=inst.start,
                    memory_slices=profile.memory_slices,
                    holder=holder_public(held, observed) if held else None,
                )
            )
        gpus.append(
            GpuPublic(
                index=g.index,
                nvlink_domain=g.nvlink_domain,
                mig_enabled=True,
                slices=parts,
                power_w=round(watts, 1),
            )
        )
    in_use = sum(1 for x in gpus if x.holder is not None or any(s.holder for s in x.slices))
    return NodePublic(
        name=node.name,
        gpu_type=node.gpu_type,
        ready=node_ready(raw),
        unschedulable=bool(spec.get("unschedulable")),
        schedulable=node.schedulable,
        taints=[
            TaintPublic(key=str(t.get("key", "")), value=t.get("value"), effect=str(t["effect"]))
            for t in spec.get("taints") or []
            if t.get("effect")
        ],
        mig_config=labels.get(names.MIG_CONFIG_LABEL),
        mig_config_state=labels.get(names.MIG_STATE_LABEL),
        gpus=gpus,
        gpus_in_use=in_use,
        power_w=round(sum(x.power_w for x in gpus), 1),
    )


def gpu_nodes(observed: Observed) -> Iterator[tuple[Obj, Node]]:
    """Every node the scheduler knows as a GPU node, with its core view."""
    snapshot = observed.view.snapshot
    for raw in observed.state.nodes:
        name = (raw.get("metadata") or {}).get("name", "")
        if snapshot.has_node(name):
            yield raw, snapshot.node(name)


def capacity(observed: Observed, held: Holdings | None = None) -> list[CapacityPublic]:
    """Allocatable and allocated whole GPUs and slices per type and profile (ready nodes)."""
    whole, slices = held or holdings(observed)
    allocatable: Counter[tuple[str, str | None]] = Counter()
    allocated: Counter[tuple[str, str | None]] = Counter()
    for raw, node in gpu_nodes(observed):
        if not node_ready(raw):
            continue
        for g in node.gpus:
            if g.mig_layout is None:
                allocatable[(node.gpu_type, None)] += 1
                allocated[(node.gpu_type, None)] += (node.name, g.index) in whole
            else:
                for inst in g.mig_layout:
                    allocatable[(node.gpu_type, inst.profile)] += 1
                    allocated[(node.gpu_type, inst.profile)] += (node.name, g.index, inst) in slices
    # GPUs held for a waiting gang are no usage, as in the GPUQueues' status (queue_objects.py).
    outside = outside_usage(without_holds(observed.view.snapshot))
    outside_of = Counter({split_resource(r): n for r, n in (outside or {}).items()})
    return [
        CapacityPublic(
            gpu_type=t,
            mig_profile=p,
            allocatable=allocatable[(t, p)],
            allocated=allocated[(t, p)],
            outside_queues=None if outside is None else outside_of[(t, p)],
        )
        for t, p in sorted(allocatable, key=lambda k: (k[0], k[1] or ""))
    ]


class FleetMemo:
    """Each node's public form, kept while nothing it shows has changed.

    A node shows its Node object, its GPUs' holders (pod objects) and their jobs (job objects);
    the cache and the job store replace such a dict on every change and never mutate one, so
    when all of them are the very same objects as last time the node is the same. With 1,000
    nodes, building every node's form anew was most of a GET /fleet. Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, tuple[tuple[object, ...], NodePublic]] = {}

    def nodes(self, observed: Observed, held: Holdings | None = None) -> list[NodePublic]:
        whole, slices = held or holdings(observed)
        catalog = observed.catalog
        with self._lock:
            old, new = self._nodes, {}
            out = []
            for raw, node in gpu_nodes(observed):
                inputs = (raw, node, *_shown(node, whole, slices, observed))
                seen = old.get(node.name)
                if seen is not None and _same(seen[0], inputs):
                    public = seen[1]
                else:
                    public = _node_public(
                        raw, node, catalog[node.gpu_type], whole, slices, observed
                    )
                new[node.name] = (inputs, public)
                out.append(public)
            self._nodes = new
        return out


def _shown(
    node: Node,
    whole: Mapping[tuple[str, int], Held],
    slices: Mapping[tuple[str, int, MigPlacement], Held],
    observed: Observed,
) -> list[object]:
    """The objects a node's public form is made of, besides the node: holders and their jobs."""
    out: list[object] = []
    for g in node.gpus:
        found = (
            [whole.get((node.name, g.index))]
            if g.mig_layout is None
            else [slices.get((node.name, g.index, inst)) for inst in g.mig_layout]
        )
        for held in found:
            out.append(None if held is None else held.pod)
            out.append(None if held is None else _job_object(held.pod, observed))
    return out


def _job_object(pod: Obj, observed: Observed) -> Obj | None:
    owner = job_of_pod(pod)
    if owner is None:
        return None
    return observed.jobs.get((str(pod["metadata"].get("namespace", "default")), *owner))


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def all_nodes(
    observed: Observed, held: Holdings | None = None, memo: FleetMemo | None = None
) -> list[NodePublic]:
    return (memo or FleetMemo()).nodes(observed, held)


def fleet_public(
    observed: Observed, limit: int, token: str | None, memo: FleetMemo | None = None
) -> FleetPublic:
    held = holdings(observed)
    nodes = all_nodes(observed, held, memo)
    page, meta = paginate("fleet", nodes, lambda n: (n.name,), limit, token)
    pending_mig = [
        MigReconfigurationPublic(node=n.name, config=n.mig_config, state=n.mig_config_state)
        for n in nodes
        if n.mig_config is not None and n.mig_config_state != MigState.SUCCESS
    ]
    return FleetPublic(
        observed_at=observed.at,
        nodes=page,
        metadata=meta,
        capacity=capacity(observed, held),
        power_w=round(sum(n.power_w for n in nodes), 1),
        pending_mig_reconfigurations=pending_mig,
        pending_gangs=len(observed.view.pending) + len(observed.view.held),
    )
