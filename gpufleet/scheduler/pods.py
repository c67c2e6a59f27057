"""Reading pods: what GPUs a pod asks for or holds, which gang it belongs to, its gang's wishes.

Pure functions over pod dicts (the API's JSON), shared by the snapshot builder and the binder.
The annotations are decoded by the contract (`gpufleet.model.contract`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.model.contract import assignment, names
from gpufleet.model.contract.reasons import disruption_reason
from gpufleet.model.contract.resources import GpuRequest, gpu_request
from gpufleet.model.contract.scaling import read_scaling
from gpufleet.model.contract.wishes import (
    EnergyPreference,
    GangWishes,
    Topology,
    TypeOption,
    read_gang_size,
    read_rank,
)
from gpufleet.model.mig import MigPlacement

__all__ = [
    "GpuRequest",
    "Pod",
    "PodFacts",
    "assigned_gpus",
    "assigned_mig",
    "disruption_reason",
    "energy",
    "facts",
    "gang_id",
    "gang_size",
    "gpu_request",
    "gpu_types",
    "holds_gpus",
    "is_ours_pending",
    "is_terminal",
    "max_slowdown",
    "node_name",
    "pod_annotations",
    "pod_key",
    "pod_labels",
    "preemptible",
    "priority",
    "rank",
    "scaling",
    "spread_speed",
    "topology",
    "wishes",
]

Pod = Mapping[str, Any]


def pod_key(pod: Pod) -> str:
    meta = pod["metadata"]
    return f"{meta.get('namespace', 'default')}/{meta['name']}"


def is_terminal(pod: Pod) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def node_name(pod: Pod) -> str | None:
    name = (pod.get("spec") or {}).get("nodeName")
    return str(name) if name else None


def holds_gpus(pod: Pod) -> bool:
    """Bound and not finished: its GPUs are in use (a terminating pod still holds them)."""
    return node_name(pod) is not None and not is_terminal(pod) and not gpu_request(pod).empty


def is_ours_pending(pod: Pod, scheduler_name: str = names.SCHEDULER_NAME) -> bool:
    """An unbound, live, ungated pod that names gpufleet (as `scheduler_name`) its scheduler."""
    spec = pod.get("spec") or {}
    return (
        spec.get("schedulerName") == scheduler_name
        and not spec.get("nodeName")
        and not spec.get("schedulingGates")  # gated pods wait, as for any scheduler
        and not pod["metadata"].get("deletionTimestamp")
        and not is_terminal(pod)
    )


def pod_annotations(pod: Pod) -> Mapping[str, str]:
    return pod["metadata"].get("annotations") or {}


def pod_labels(pod: Pod) -> Mapping[str, str]:
    return pod["metadata"].get("labels") or {}


def gang_id(pod: Pod) -> str:
    """`<namespace>/<gang>`; a pod without a gang label is a gang of one."""
    ns = pod["metadata"].get("namespace", "default")
    gang = pod_labels(pod).get(names.GANG_LABEL)
    return f"{ns}/{gang}" if gang else f"{ns}/pod:{pod['metadata']['name']}"


def wishes(pod: Pod) -> GangWishes:
    return GangWishes.read(pod_annotations(pod))


def gang_size(pod: Pod) -> int:
    return read_gang_size(pod_annotations(pod))


def rank(pod: Pod) -> tuple[int, str]:
    """Sort key: replica index from the rank label, then the name."""
    index = read_rank(pod_labels(pod))
    return (1 << 30 if index is None else index, pod["metadata"]["name"])


def priority(pod: Pod) -> int:
    return wishes(pod).priority


def preemptible(pod: Pod) -> bool:
    return wishes(pod).preemptible


def topology(pod: Pod) -> Topology:
    return wishes(pod).topology


def energy(pod: Pod) -> EnergyPreference:
    return wishes(pod).energy


def queue(pod: Pod) -> str | None:
    """The GPUQueue the pod's gang is charged to; None outside every queue."""
    return wishes(pod).queue


def scaling(pod: Pod) -> tuple[float, ...]:
    """The gang's scaling curve (throughput at 1, 2, ... replicas relative to one); () when
    it states none or none readable (linear)."""
    return read_scaling(pod_annotations(pod))


def max_slowdown(pod: Pod) -> float | None:
    """The largest slowdown (a fraction) the gang accepts from a power cap, if it says."""
    return wishes(pod).max_slowdown


def spread_speed(pod: Pod) -> float:
    """The gang's speed spread over more nodes than it needs, relative to the fewest (1.0
    when it says nothing)."""
    return wishes(pod).spread_speed


def gpu_types(pod: Pod) -> tuple[TypeOption, ...] | None:
    """Acceptable GPU types from the annotation; None when the pod accepts any type."""
    return wishes(pod).gpu_types


@dataclass(frozen=True, slots=True)
class PodFacts:
    """What every cycle reads of one pod, computed once per pod object.

    The cache replaces a pod's dict on every watch event and never mutates one in place, so
    the facts of an unchanged dict can be reused from the previous cycle (see
    `snapshot.ViewBuilder`): for 1,000 pods the per-pod helpers above were most of a cycle.
    """

    pod: Pod
    key: str
    gang: str  # gang_id
    node: str | None  # node_name
    terminal: bool
    deleting: bool  # has a deletionTimestamp
    ours: bool  # schedulerName is this scheduler's
    pending: bool  # is_ours_pending
    gang_label: bool  # carries the gang label (a gang of one otherwise)
    size: int  # gang_size
    rank: tuple[int, str]
    request: GpuRequest

    @property
    def holds_gpus(self) -> bool:
        return self.node is not None and not self.terminal and not self.request.empty


def facts(pod: Pod, scheduler_name: str = names.SCHEDULER_NAME) -> PodFacts:
    """The `PodFacts` of `pod` for the scheduler named `scheduler_name` (pure; memoised by the
    snapshot builder)."""
    return PodFacts(
        pod=pod,
        key=pod_key(pod),
        gang=gang_id(pod),
        node=node_name(pod),
        terminal=is_terminal(pod),
        deleting=bool(pod["metadata"].get("deletionTimestamp")),
        ours=(pod.get("spec") or {}).get("schedulerName") == scheduler_name,
        pending=is_ours_pending(pod, scheduler_name),
        gang_label=bool(pod_labels(pod).get(names.GANG_LABEL)),
        size=gang_size(pod),
        rank=rank(pod),
        request=gpu_request(pod),
    )


def assigned_gpus(pod: Pod) -> tuple[int, ...] | None:
    return assignment.assigned_gpus(pod_annotations(pod))


def assigned_mig(pod: Pod) -> tuple[int, MigPlacement] | None:
    """(gpu index, instance) from the annotations the binding wrote."""
    return assignment.assigned_mig(pod_annotations(pod))
