"""Reading pods: what GPUs a pod asks for or holds, which gang it belongs to, its gang's wishes.

Pure functions over pod dicts (the API's JSON), shared by the snapshot builder and the binder.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.core.demand import EnergyPreference, Topology, TypeOption
from gpufleet.model.mig import MigPlacement
from gpufleet.scheduler import names

Pod = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """Whole GPUs, or one MIG slice of `mig_profile`, that one pod needs."""

    gpus: int = 0
    mig_profile: str | None = None

    @property
    def empty(self) -> bool:
        return self.gpus == 0 and self.mig_profile is None


def pod_key(pod: Pod) -> str:
    meta = pod["metadata"]
    return f"{meta.get('namespace', 'default')}/{meta['name']}"


def _quantity(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def gpu_request(pod: Pod) -> GpuRequest:
    """Sum of the containers' GPU and MIG limits (extended resources: requests == limits)."""
    gpus = 0
    mig: str | None = None
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        wanted = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        for name, value in wanted.items():
            if name == names.WHOLE_GPU_RESOURCE:
                gpus += _quantity(value)
            elif name.startswith(names.MIG_RESOURCE_PREFIX) and _quantity(value) > 0:
                mig = name.removeprefix(names.MIG_RESOURCE_PREFIX)
    return GpuRequest(gpus, mig)


def is_terminal(pod: Pod) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def node_name(pod: Pod) -> str | None:
    name = (pod.get("spec") or {}).get("nodeName")
    return str(name) if name else None


def holds_gpus(pod: Pod) -> bool:
    """Bound and not finished: its GPUs are in use (a terminating pod still holds them)."""
    return node_name(pod) is not None and not is_terminal(pod) and not gpu_request(pod).empty


def is_ours_pending(pod: Pod) -> bool:
    """An unbound, live, ungated pod that names gpufleet as its scheduler."""
    spec = pod.get("spec") or {}
    return (
        spec.get("schedulerName") == names.SCHEDULER_NAME
        and not spec.get("nodeName")
        and not spec.get("schedulingGates")  # gated pods wait, as for any scheduler
        and not pod["metadata"].get("deletionTimestamp")
        and not is_terminal(pod)
    )


def disruption_reason(pod: Pod) -> str | None:
    """Why the pod is being disrupted: gpufleet's own reason when gpufleet disrupts it, else
    the reason of a true DisruptionTarget condition (node loss, someone else's eviction)."""
    own = pod_annotations(pod).get(names.DISRUPTED_BY)
    if own:
        return own
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == names.DISRUPTION_TARGET and c.get("status") == "True":
            return str(c.get("reason", ""))
    return None


def pod_annotations(pod: Pod) -> Mapping[str, str]:
    return pod["metadata"].get("annotations") or {}


def pod_labels(pod: Pod) -> Mapping[str, str]:
    return pod["metadata"].get("labels") or {}


def gang_id(pod: Pod) -> str:
    """`<namespace>/<gang>`; a pod without a gang label is a gang of one."""
    ns = pod["metadata"].get("namespace", "default")
    gang = pod_labels(pod).get(names.GANG_LABEL)
    return f"{ns}/{gang}" if gang else f"{ns}/pod:{pod['metadata']['name']}"


def gang_size(pod: Pod) -> int:
    return max(1, _quantity(pod_annotations(pod).get(names.GANG_SIZE, "1")))


def rank(pod: Pod) -> tuple[int, str]:
    """Sort key: replica index from the rank label, then the name."""
    raw = pod_labels(pod).get(names.RANK_LABEL, "")
    return (_quantity(raw) if raw.isdigit() else 1 << 30, pod["metadata"]["name"])


def priority(pod: Pod) -> int:
    return max(0, _quantity(pod_annotations(pod).get(names.PRIORITY, "0")))


def preemptible(pod: Pod) -> bool:
    return pod_annotations(pod).get(names.PREEMPTIBLE, "true").lower() != "false"


def topology(pod: Pod) -> Topology:
    try:
        return Topology(pod_annotations(pod).get(names.TOPOLOGY, Topology.ANY.value))
    except ValueError:
        return Topology.ANY


def energy(pod: Pod) -> EnergyPreference:
    try:
        return EnergyPreference(pod_annotations(pod).get(names.ENERGY, "balanced"))
    except ValueError:
        return EnergyPreference.BALANCED


def format_gpu_types(options: list[tuple[str, float | None]]) -> str:
    return ",".join(name if tp is None else f"{name}={tp:g}" for name, tp in options)


def gpu_types(pod: Pod) -> tuple[TypeOption, ...] | None:
    """Acceptable GPU types from the annotation; None when the pod accepts any type."""
    raw = pod_annotations(pod).get(names.GPU_TYPES, "").strip()
    if not raw:
        return None
    out: list[TypeOption] = []
    for item in raw.split(","):
        name, _, value = item.strip().partition("=")
        throughput: float | None = None
        if value:
            try:
                throughput = float(value)
            except ValueError:
                throughput = None
            if throughput is not None and throughput <= 0:
                throughput = None
        if name:
            out.append(TypeOption(name, throughput))
    return tuple(out) or None


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
    ours: bool  # schedulerName is gpufleet
    pending: bool  # is_ours_pending
    gang_label: bool  # carries the gang label (a gang of one otherwise)
    size: int  # gang_size
    rank: tuple[int, str]
    request: GpuRequest

    @property
    def holds_gpus(self) -> bool:
        return self.node is not None and not self.terminal and not self.request.empty


def facts(pod: Pod) -> PodFacts:
    """The `PodFacts` of `pod` (pure; memoised by the snapshot builder)."""
    return PodFacts(
        pod=pod,
        key=pod_key(pod),
        gang=gang_id(pod),
        node=node_name(pod),
        terminal=is_terminal(pod),
        deleting=bool(pod["metadata"].get("deletionTimestamp")),
        ours=(pod.get("spec") or {}).get("schedulerName") == names.SCHEDULER_NAME,
        pending=is_ours_pending(pod),
        gang_label=bool(pod_labels(pod).get(names.GANG_LABEL)),
        size=gang_size(pod),
        rank=rank(pod),
        request=gpu_request(pod),
    )


def assigned_gpus(pod: Pod) -> tuple[int, ...] | None:
    raw = pod_annotations(pod).get(names.ASSIGNED_GPUS)
    if not raw:
        return None
    try:
        return tuple(int(x) for x in raw.split(","))
    except ValueError:
        return None


def assigned_mig(pod: Pod) -> tuple[int, MigPlacement] | None:
    """(gpu index, instance) from the annotations the binding wrote."""
    gpus = assigned_gpus(pod)
    raw = pod_annotations(pod).get(names.ASSIGNED_MIG)
    if not raw or not gpus or len(gpus) != 1:
        return None
    profile, _, start = raw.rpartition("@")
    try:
        return gpus[0], MigPlacement(int(start), profile)
    except ValueError:
        return None
