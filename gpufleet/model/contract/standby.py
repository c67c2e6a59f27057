"""Standby serving replicas on pods: which are asleep, when one was woken, and the patches.

The operator marks a replica it puts to sleep with `gpufleet.io/standby: asleep` and a high
`controller.kubernetes.io/pod-deletion-cost` (a scale-down of the Deployment then removes awake
replicas, never a standby); waking removes both and stamps `gpufleet.io/woken-at`. A standby to
be removed (its pool's standby count was lowered) gets the lowest deletion cost instead, so the
next scale-down removes it first. The server side honours the mark: vLLM started with
`--enable-sleep-mode` sleeps on `POST /sleep?level=1` and wakes on `POST /wake_up`; the
sandbox's simulated servers read the mark themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from gpufleet.model.contract.names import POD_DELETION_COST, STANDBY, WOKEN_AT
from gpufleet.model.contract.timestamps import format_time, parse_time

__all__ = [
    "ASLEEP",
    "is_asleep",
    "retire_patch",
    "sleep_patch",
    "wake_patch",
    "waking",
]

ASLEEP: Final = "asleep"
# Deletion costs: a standby is kept through scale-downs, a retired one goes first.
_KEEP_COST: Final = "1000"
_RETIRE_COST: Final = "-1000"


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def is_asleep(pod: Mapping[str, Any]) -> bool:
    """Whether the pod (API JSON) is a standby marked asleep."""
    return _annotations(pod).get(STANDBY) == ASLEEP


def waking(pod: Mapping[str, Any], now: datetime, wake: timedelta) -> bool:
    """Whether the pod was woken less than `wake` before `now` (it does not serve yet)."""
    if is_asleep(pod):
        return False
    woken = parse_time(_annotations(pod).get(WOKEN_AT))
    return woken is not None and now - woken < wake


def sleep_patch() -> dict[str, Any]:
    """Merge patch that marks a pod asleep and keeps it through scale-downs."""
    return {"metadata": {"annotations": {STANDBY: ASLEEP, POD_DELETION_COST: _KEEP_COST}}}


def wake_patch(now: datetime) -> dict[str, Any]:
    """Merge patch that wakes a standby at `now`."""
    annotations = {STANDBY: None, POD_DELETION_COST: None, WOKEN_AT: format_time(now)}
    return {"metadata": {"annotations": annotations}}


def retire_patch() -> dict[str, Any]:
    """Merge patch that makes an asleep pod the first one a scale-down removes."""
    return {"metadata": {"annotations": {POD_DELETION_COST: _RETIRE_COST}}}
