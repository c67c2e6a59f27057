"""Which power cap each GPU of a node should have, from the pods bound to it (pure).

The scheduler writes a pod's cap with its binding (`gpufleet.model.contract.assignment`); the
cap holds for the GPUs the pod was given. A GPU shared by several pods (MIG slices) gets the
highest of their caps, and none if any of them is uncapped: no pod is slowed more than the
scheduler decided for it. Finished pods hold nothing; a pod being deleted still runs until it
is gone, so it keeps its cap.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpufleet.model.contract.assignment import Assignment

__all__ = ["desired_caps"]

_FINISHED = ("Succeeded", "Failed")


def desired_caps(pods: Iterable[Mapping[str, Any]]) -> dict[int, float]:
    """GPU index -> watts for every GPU that should be capped; the others run uncapped."""
    caps: dict[int, float] = {}
    uncapped: set[int] = set()
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in _FINISHED:
            continue
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        assignment = Assignment.read(annotations)
        if assignment is None:
            continue
        for gpu in assignment.gpus:
            if assignment.power_cap_w is None:
                uncapped.add(gpu)
            else:
                caps[gpu] = max(caps.get(gpu, 0.0), assignment.power_cap_w)
    return {gpu: watts for gpu, watts in caps.items() if gpu not in uncapped}
