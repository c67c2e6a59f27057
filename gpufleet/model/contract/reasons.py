"""Why a gang waits, and why a pod was disrupted, as the scheduler tells the operator.

Pending: the scheduler writes a `PodScheduled=False` condition with reason `Unschedulable` (the
reason the rest of Kubernetes, cluster autoscalers included, knows) and the message
`<Code>: <detail>`, where the code is the core's `PendingReason` or one the scheduler adds
(`SchedulerReason`). `pending_text` writes that message and `read_pending` reads it back into
a `PendingNote`, so the operator receives the code itself and shows it as its own condition's
reason.

Disruption: when gpufleet evicts or deletes a pod it marks the pod with its reason
(`disruption_marker`), because the Eviction API rewrites the DisruptionTarget condition's reason
to its own; `disruption_reason` reads the mark, else a true DisruptionTarget condition. A
preemption is marked `PreemptionByGpufleet`, or `ServicePreemptionByGpufleet` when it makes room
for a gang of the victim's own queue and priority that has received less service (the service
tier); `is_preemption` knows both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from gpufleet.model.contract import names

__all__ = [
    "PendingNote",
    "PendingReason",
    "SchedulerReason",
    "WaitReason",
    "disruption_marker",
    "disruption_reason",
    "is_preemption",
    "pending_condition",
    "pending_text",
    "read_pending",
    "scheduled_message",
]


class PendingReason(StrEnum):
    """Stable machine-readable reason the core keeps a gang pending (used as condition reasons)."""

    UNKNOWN_GPU_TYPE = "UnknownGpuType"  # no acceptable type is in the catalogue
    NO_NODES_OF_TYPE = "NoNodesOfAcceptableType"  # the cluster has no such nodes
    NO_ELIGIBLE_NODE = "NoEligibleNode"  # the gang's node filters leave none of those nodes
    MIG_PROFILE_UNSUPPORTED = "MigProfileUnsupported"  # no acceptable type offers the profile
    REPLICA_TOO_LARGE = "ReplicaExceedsNode"  # a replica needs more GPUs than any node has
    GANG_TOO_LARGE = "GangExceedsCluster"  # more GPUs than the acceptable types have in total
    INSUFFICIENT_GPUS = "InsufficientFreeGpus"  # not enough free GPUs of acceptable types
    TOPOLOGY = "TopologyUnsatisfiable"  # enough GPUs but not on one node / NVLink domain
    INSUFFICIENT_MIG = "InsufficientMigSlices"  # not enough free slices nor empty GPUs to cut
    LOST_TO_OTHERS = "CapacityGivenToOtherGangs"  # fits alone; capacity went to better work
    WAITING_FOR_FASTER_TYPE = "WaitingForFasterGpuType"  # fits only on types it still delays
    QUEUE_NOT_FOUND = "QueueNotFound"  # its queue does not exist or is unusable
    QUEUE_NOT_ALLOWED = "QueueNotAllowed"  # its queue does not take its priority or namespace
    QUOTA_EXCEEDED = "QuotaExceeded"  # no acceptable type fits its queue's quota
    WAITING_FOR_RECLAIM = "WaitingForReclaim"  # within nominal quota; borrowers hold the GPUs
    # Preempting would make room but a PodDisruptionBudget forbids it: the core says so for
    # victims the scheduler marks not disruptable, the scheduler for a budget it reads after
    # the decision (victims.py); one code whichever found the budget.
    BUDGET = "PreemptionBlockedByDisruptionBudget"


class SchedulerReason(StrEnum):
    """Reasons the scheduler adapter adds to the core's, for gangs it holds back itself."""

    MIG = "WaitingForMIGReconfiguration"  # its GPUs are being repartitioned
    GANG = "GangNotReady"  # members missing, being deleted, or the gang is restarting
    PREEMPTING = "WaitingForPreemption"  # the gangs it preempted have not exited yet
    QUEUED = "QueuedBehindIdenticalGang"  # an identical gang ahead of it is offered instead
    BOOTING = "WaitingForNodeBoot"  # fits only on nodes switched back on for it (power-down)


WaitReason = PendingReason | SchedulerReason
_BY_CODE: Final[dict[str, WaitReason]] = {r.value: r for r in (*PendingReason, *SchedulerReason)}
_SEPARATOR: Final = ": "


def pending_text(reason: WaitReason, detail: str) -> str:
    """The pod condition's message: `<Code>: <detail>`."""
    return f"{reason.value}{_SEPARATOR}{detail}"


@dataclass(frozen=True, slots=True)
class PendingNote:
    """A pending reason and its detail. `reason` is None for a message that does not start
    with a known code (written by another client); `detail` is then the whole message."""

    reason: WaitReason | None
    detail: str

    @property
    def text(self) -> str:
        return self.detail if self.reason is None else pending_text(self.reason, self.detail)

    @classmethod
    def parse(cls, text: str) -> PendingNote:
        code, sep, detail = text.partition(_SEPARATOR)
        reason = _BY_CODE.get(code) if sep else None
        return cls(None, text) if reason is None else cls(reason, detail)


def pending_condition(text: str, transition_time: str) -> dict[str, Any]:
    """The PodScheduled=False condition carrying the message `text`."""
    return {
        "type": names.POD_SCHEDULED,
        "status": "False",
        "reason": names.UNSCHEDULABLE,
        "message": text,
        "lastTransitionTime": transition_time,
    }


def scheduled_message(pod: Mapping[str, Any]) -> str | None:
    """The message of a pod's PodScheduled=False condition, if any."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == names.POD_SCHEDULED and condition.get("status") == "False":
            return str(condition.get("message", ""))
    return None


def read_pending(pod: Mapping[str, Any]) -> PendingNote | None:
    """Why the scheduler keeps `pod` waiting, if it said."""
    text = scheduled_message(pod)
    return None if not text else PendingNote.parse(text)


def disruption_marker(reason: str | None) -> dict[str, str | None]:
    """The annotations (a merge patch) that mark a pod as disrupted by gpufleet for `reason`;
    None removes the mark."""
    return {names.DISRUPTED_BY: reason}


def disruption_reason(pod: Mapping[str, Any]) -> str | None:
    """Why the pod is being disrupted: gpufleet's own reason when gpufleet disrupts it, else
    the reason of a true DisruptionTarget condition (node loss, someone else's eviction)."""
    own = (pod["metadata"].get("annotations") or {}).get(names.DISRUPTED_BY)
    if own:
        return str(own)
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == names.DISRUPTION_TARGET and c.get("status") == "True":
            return str(c.get("reason", ""))
    return None


def is_preemption(reason: str | None) -> bool:
    """Whether a disruption reason is a gpufleet preemption (for higher-priority work, a
    queue's reclaim, or the service tier)."""
    return reason in (names.PREEMPTED_REASON, names.SERVICE_PREEMPTED_REASON)
