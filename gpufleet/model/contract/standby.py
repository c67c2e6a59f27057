"""Standby serving replicas on pods: which are asleep, when one was woken, and the patches.

The operator marks a replica it puts to sleep with `gpufleet.io/standby: asleep` and a high
`controller.kubernetes.io/pod-deletion-cost` (a scale-down of the Deployment then prefers awake
replicas to a standby); waking removes both and stamps `gpufleet.io/woken-at`. The server side
honours the mark: vLLM started with `--enable-sleep-mode` sleeps on `POST /sleep?level=1` and
wakes on `POST /wake_up`; the sandbox's simulated servers read the mark themselves.

Routing: the pods of a pool with standbys carry the readiness gate `gpufleet.io/awake` (pod
`spec.readinessGates`). The kubelet reports a pod Ready only when its containers are ready and
every gate's pod condition is True, and the EndpointSlice controller marks a pod that is not
Ready as a not-ready endpoint of the pool's Service, which kube-proxy and routers skip. The
operator writes the condition (`awake_patch`, on the pod's status): False while the replica is
asleep or waking; True otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from gpufleet.model.contract.names import (
    AWAKE_CONDITION,
    POD_DELETION_COST,
    RECALL,
    STANDBY,
    WOKEN_AT,
)
from gpufleet.model.contract.timestamps import format_time, parse_time

__all__ = [
    "ASLEEP",
    "awake_patch",
    "awake_status",
    "gated",
    "is_asleep",
    "is_woken",
    "readiness_gate",
    "sleep_patch",
    "wake_patch",
    "waking",
]

ASLEEP: Final = "asleep"
_KEEP_COST: Final = "1000"  # a standby is kept through scale-downs


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def is_asleep(pod: Mapping[str, Any]) -> bool:
    """Whether the pod (API JSON) is a standby marked asleep."""
    return _annotations(pod).get(STANDBY) == ASLEEP


def is_woken(pod: Mapping[str, Any]) -> bool:
    """Whether the operator ever woke the pod (and it is not asleep again)."""
    return not is_asleep(pod) and WOKEN_AT in _annotations(pod)


def waking(pod: Mapping[str, Any], now: datetime, wake: timedelta) -> bool:
    """Whether the pod was woken less than `wake` before `now` (it does not serve yet)."""
    if is_asleep(pod):
        return False
    woken = parse_time(_annotations(pod).get(WOKEN_AT))
    return woken is not None and now - woken < wake


def sleep_patch() -> dict[str, Any]:
    """Merge patch that marks a pod asleep and keeps it through scale-downs."""
    return {"metadata": {"annotations": {STANDBY: ASLEEP, POD_DELETION_COST: _KEEP_COST}}}


def wake_patch(now: datetime, resource_version: str | None = None) -> dict[str, Any]:
    """Merge patch that wakes a standby at `now` (and clears a recall of its lent GPUs); with
    the resourceVersion the operator read, the API server refuses it (409) if the pod changed
    since, e.g. the scheduler lent it meanwhile (model.contract.lending)."""
    annotations = {
        STANDBY: None,
        POD_DELETION_COST: None,
        RECALL: None,
        WOKEN_AT: format_time(now),
    }
    meta: dict[str, Any] = {"annotations": annotations}
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {"metadata": meta}


def readiness_gate() -> dict[str, str]:
    """The pod spec's `readinessGates` entry of a pool with standbys."""
    return {"conditionType": AWAKE_CONDITION}


def gated(pod: Mapping[str, Any]) -> bool:
    """Whether the pod (API JSON) declares the awake readiness gate."""
    gates = (pod.get("spec") or {}).get("readinessGates") or ()
    return any(g.get("conditionType") == AWAKE_CONDITION for g in gates)


def awake_status(pod: Mapping[str, Any]) -> bool | None:
    """The pod's awake condition: True, False, or None while nobody has written it."""
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == AWAKE_CONDITION:
            return {"True": True, "False": False}.get(str(c.get("status")))
    return None


def awake_patch(awake: bool, why: str, now: datetime) -> dict[str, Any]:
    """Strategic merge patch of the pod's status (conditions merge by type) that sets the
    awake condition; `why` is its reason (one CamelCase word)."""
    condition = {
        "type": AWAKE_CONDITION,
        "status": "True" if awake else "False",
        "reason": why,
        "lastTransitionTime": format_time(now),
    }
    return {"status": {"conditions": [condition]}}
