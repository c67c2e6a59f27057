"""Preferred allocation: a container gets the GPUs gpufleet's scheduler assigned to its pod (pure).

The kubelet's GetPreferredAllocation request names no pod: only the free devices, the devices
that must be included and how many are wanted. gpufleet's scheduler records its choice on the pod
at binding time (the GPU indices, and the MIG instance for a slice), so the plugin matches the
request to a pod bound to its node that is still waiting to start, asks for this resource, and
whose assigned devices are all free. Pods are tried oldest binding first, as the kubelet admits
them in that order. When no pod matches (another scheduler's pod, a pod with several GPU
containers, an assignment already taken), the plugin packs: the devices that must be included,
then free devices in GPU order. Lend devices (`devices.LEND_SUFFIX`) go only to a pod that
borrows (`gpufleet.io/borrows`), and only on a GPU whose own device is taken (by the standby).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from gpufleet.agent.deviceplugin.devices import FakeDevice
from gpufleet.model.contract import names
from gpufleet.model.contract.assignment import assigned_gpus, assigned_mig
from gpufleet.model.contract.lending import borrowed_from
from gpufleet.model.mig_profiles import mig_resource_name
from gpufleet.model.migparted import WHOLE_GPU_RESOURCE

_DONE_PHASES = ("Running", "Succeeded", "Failed")


def _scheduled_at(pod: Mapping[str, Any]) -> str:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == names.POD_SCHEDULED and condition.get("status") == "True":
            return str(condition.get("lastTransitionTime") or "")
    return ""


def wanted_gpus(pod: Mapping[str, Any], resource: str) -> tuple[int, ...] | None:
    """GPU indices the scheduler assigned to `pod` for `resource`; None when it assigned none.

    A whole-GPU pod wants its GPUs; a MIG pod wants one device of its profile on its GPU.
    """
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    mig = assigned_mig(annotations)
    if mig is not None:
        gpu, placement = mig
        return (gpu,) if resource == mig_resource_name(placement.profile) else None
    if resource != WHOLE_GPU_RESOURCE:
        return None
    return assigned_gpus(annotations)


class Wanted(NamedTuple):
    """What one waiting pod was assigned: its GPUs, and whether it borrows from a standby."""

    gpus: tuple[int, ...]
    borrows: bool = False


def waiting_assignments(pods: Iterable[Mapping[str, Any]], resource: str) -> list[Wanted]:
    """Assignments of the pods still to be started, oldest binding first."""
    waiting = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        phase = (pod.get("status") or {}).get("phase")
        if meta.get("deletionTimestamp") or phase in _DONE_PHASES:
            continue
        gpus = wanted_gpus(pod, resource)
        if gpus:
            key = (
                _scheduled_at(pod),
                str(meta.get("creationTimestamp") or ""),
                str(meta.get("namespace") or ""),
                str(meta.get("name") or ""),
            )
            waiting.append((key, Wanted(gpus, bool(borrowed_from(pod)))))
    return [wanted for _, wanted in sorted(waiting)]


def _match(
    wanted: Wanted, free: Sequence[FakeDevice], must_include: frozenset[str]
) -> list[str] | None:
    """One free device on each wanted GPU (must-include devices first; a borrower's lend
    device only where the GPU's own device is taken), or None."""
    chosen: list[str] = []
    for gpu in wanted.gpus:
        on_gpu = [d for d in free if d.gpu == gpu and d.id not in chosen and not d.lend]
        if not on_gpu and wanted.borrows:
            on_gpu = [d for d in free if d.gpu == gpu and d.id not in chosen]
        if not on_gpu:
            return None
        on_gpu.sort(key=lambda d: d.id not in must_include)
        chosen.append(on_gpu[0].id)
    return chosen if must_include <= set(chosen) else None


def preferred_allocation(
    devices: Sequence[FakeDevice],
    available: Iterable[str],
    must_include: Iterable[str],
    size: int,
    assignments: Sequence[Wanted],
) -> list[str]:
    """The device ids to prefer for one container asking for `size` devices."""
    free_ids = set(available) | set(must_include)
    free = sorted((d for d in devices if d.id in free_ids), key=lambda d: (d.gpu, d.id))
    must = frozenset(must_include)
    for wanted in assignments:
        if len(wanted.gpus) == size:
            picked = _match(wanted, free, must)
            if picked is not None:
                return picked
    packed = [d.id for d in free if d.id in must]
    packed += [d.id for d in free if d.id not in must and not d.lend]
    return packed[:size]
