"""Node power as the cluster records it: the caps a node agent applied, idle-node power-down.

**Applied caps.** The scheduler writes each pod's power cap with its binding (`assignment`); the
node agent (`gpufleet node-agent`) applies it to the pod's GPUs and records what it applied on
its node, `{"<gpu index>": watts}` for every capped GPU (`format_applied_caps`,
`applied_caps`), so anyone can see what a node enforces.

**Power-down marks.** With idle-node power-down on, the scheduler cordons an empty node it would
switch off and labels it `off`; a cluster autoscaler, a Karpenter node-pool rule or a BMC script
keyed on the label powers the machine down. When a pending gang needs it back the label becomes
`waking` (still cordoned) and the scheduler counts the boot time from the `since` annotation
before it uncordons the node and removes both. A node without the label is on; the scheduler
only ever uncordons nodes that carry it (a cordon of anyone else is left alone).
Readers are lenient: an unreadable value reads as absent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from gpufleet.model.contract import names

__all__ = [
    "PowerMark",
    "PowerState",
    "applied_caps",
    "format_applied_caps",
    "mark_patch",
]


class PowerState(StrEnum):
    """A node's power state under idle-node power-down."""

    ON = "on"  # no label
    OFF = "off"  # switched off (cordoned, marked for power-down)
    WAKING = "waking"  # switched back on, booting (still cordoned)


def format_applied_caps(caps: Mapping[int, float]) -> str:
    """The node annotation recording the caps applied, whole watts per GPU index."""
    return json.dumps({str(i): round(w) for i, w in sorted(caps.items())}, sort_keys=True)


def applied_caps(annotations: Mapping[str, str]) -> dict[int, float]:
    """The caps a node records as applied, by GPU index (empty: none, or unreadable)."""
    raw = annotations.get(names.APPLIED_POWER_CAPS)
    if not raw:
        return {}
    try:
        doc = json.loads(raw)
        return {int(k): float(v) for k, v in doc.items()}
    except (ValueError, TypeError, AttributeError):
        return {}


@dataclass(frozen=True, slots=True)
class PowerMark:
    """A node's power-down mark: its state and since when (seconds since the epoch; None when
    not recorded or unreadable)."""

    state: PowerState = PowerState.ON
    since: float | None = None

    @classmethod
    def read(cls, labels: Mapping[str, str], annotations: Mapping[str, str]) -> PowerMark:
        try:
            state = PowerState(labels.get(names.POWER_STATE_LABEL, PowerState.ON))
        except ValueError:
            return cls()
        if state is PowerState.ON:
            return cls()
        try:
            since = datetime.fromisoformat(annotations[names.POWER_STATE_SINCE]).timestamp()
        except (KeyError, ValueError):
            since = None
        return cls(state, since)


def mark_patch(mark: PowerMark) -> dict[str, Any]:
    """The node patch that records `mark`: cordoned with label and time while off or waking;
    uncordoned with both removed when on."""
    if mark.state is PowerState.ON:
        return {
            "spec": {"unschedulable": False},
            "metadata": {
                "labels": {names.POWER_STATE_LABEL: None},
                "annotations": {names.POWER_STATE_SINCE: None},
            },
        }
    since = datetime.fromtimestamp(mark.since or 0.0, UTC).isoformat(timespec="seconds")
    return {
        "spec": {"unschedulable": True},
        "metadata": {
            "labels": {names.POWER_STATE_LABEL: mark.state.value},
            "annotations": {names.POWER_STATE_SINCE: since},
        },
    }
