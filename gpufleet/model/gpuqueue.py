"""GPUQueue: a team's share of the fleet (cluster-scoped).

A queue holds nominal quotas per GPU type (and per MIG profile of a type), how far above them its
jobs may borrow what other queues leave unused, how much of its own unused quota it lends, a
weight for fair share, the priorities it takes, the namespaces whose jobs it takes (a label
selector), and optionally a parent (department -> team).
Jobs name it in `spec.queue`. The scheduler enforces it through the pure core
(`gpufleet.core.queues`); it writes the status: usage, borrowing, lending, pending demand and
fair share per resource.

What the API server checks on one object: bounds and enums (a negative quota, an unknown GPU type
or MIG profile), a MIG profile the GPU type offers, a lending limit within the nominal quota, each
GPU type and MIG profile listed once, the priority range in order, a queue that is not its own
parent, and a namespace selector in metav1's shape (`label_selector.py`). What needs other
queues (a parent's quota against its children's, longer parent cycles) is checked by the
ValidatingAdmissionPolicy rendered in `gpuqueue_policy.py` where one object is enough to see
it, and otherwise reported on the queue's status by the scheduler.
"""

from __future__ import annotations

import enum
from typing import Final, Literal, Self

from pydantic import ConfigDict, Field, model_validator

from gpufleet.model.crd_common import (
    API_GROUP,
    API_VERSION,
    NAME_PATTERN,
    Condition,
    CRDModel,
    MigProfile,
    ObjectMeta,
    cel,
    validations,
)
from gpufleet.model.gpus import load_catalog
from gpufleet.model.label_selector import LabelSelectorSpec
from gpufleet.model.trainingjob import MAX_PRIORITY

__all__ = [
    "DEFAULT_QUEUE",
    "GPU_TYPE_NAMES",
    "KIND",
    "MAX_QUOTA",
    "MAX_QUOTAS",
    "GPUQueue",
    "GPUQueueConditionType",
    "GPUQueueReason",
    "GPUQueueSpec",
    "GPUQueueStatus",
    "PriorityRange",
    "QueueQuota",
    "ResourceUsage",
]

KIND: Final = "GPUQueue"
# The queue a job waits in when it names none (TrainingJob and ServingJob `spec.queue` default).
DEFAULT_QUEUE: Final = "default"
# Bounds that keep CEL cost estimates finite; far above any real cluster.
MAX_QUOTA: Final = 1_000_000
MAX_QUOTAS: Final = 64

_CATALOG = load_catalog()
# The built-in catalogue's GPU types: the enum of `gpuType` (a quota on a type the scheduler does
# not know would never apply).
GPU_TYPE_NAMES: Final = _CATALOG.names
# GPU type -> the MIG profiles it offers, for the rule that a quota's profile exists on its type.
_PROFILES_BY_TYPE: Final = {
    t.name: tuple(p.name for p in t.mig_profiles) for t in _CATALOG if t.mig_profiles
}


def _profile_rule() -> str:
    """CEL: a quota's migProfile is one its gpuType offers."""
    offered = " || ".join(
        f"(self.gpuType == '{name}' && self.migProfile in {list(profiles)!r})"
        for name, profiles in sorted(_PROFILES_BY_TYPE.items())
    )
    return f"!has(self.migProfile) || {offered}"


class QueueQuota(CRDModel):
    """The queue's quota for whole GPUs of one type, or for MIG slices of one profile on it."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.lendingLimit) || self.lendingLimit <= self.nominal",
                "lendingLimit must not exceed nominal: a queue lends only its own quota",
                ".lendingLimit",
            ),
            cel(
                _profile_rule(),
                "migProfile is not offered by gpuType",
                ".migProfile",
            ),
        )
    )

    gpu_type: str = Field(
        max_length=32,
        description="GPU type as the GPU catalogue spells it, for example H100-80GB or T4.",
        json_schema_extra={"enum": list(GPU_TYPE_NAMES)},
    )
    mig_profile: MigProfile | None = Field(
        default=None,
        description=(
            "A MIG profile of gpuType, for example 3g.40gb: the quota then counts slices of "
            "that profile (one per replica) instead of whole GPUs. Omitted: whole GPUs."
        ),
    )
    nominal: int = Field(
        ge=0,
        le=MAX_QUOTA,
        description=(
            "GPUs (or slices) guaranteed to the queue: while they are lent, the queue takes "
            "them back by preempting the borrowers' jobs when its own jobs wait."
        ),
    )
    borrowing_limit: int | None = Field(
        default=None,
        ge=0,
        le=MAX_QUOTA,
        description=(
            "How many GPUs (or slices) above nominal the queue and its children may borrow "
            "from queues that do not use theirs. Omitted: no limit; 0: never borrow."
        ),
    )
    lending_limit: int | None = Field(
        default=None,
        ge=0,
        le=MAX_QUOTA,
        description=(
            "How many of the queue's unused nominal GPUs (or slices) other queues may borrow. "
            "Omitted: all of them."
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.lending_limit is not None and self.lending_limit > self.nominal:
            raise ValueError("lendingLimit must not exceed nominal")
        if self.gpu_type not in GPU_TYPE_NAMES:
            raise ValueError(
                f"unknown GPU type {self.gpu_type}; known: {', '.join(GPU_TYPE_NAMES)}"
            )
        offered = _PROFILES_BY_TYPE.get(self.gpu_type, ())
        if self.mig_profile is not None and self.mig_profile not in offered:
            raise ValueError(f"{self.gpu_type} offers no MIG profile {self.mig_profile}")
        return self


class PriorityRange(CRDModel):
    """The job priorities a queue takes."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.max) || self.min <= self.max",
                "min must be less than or equal to max",
                ".min",
            ),
        )
    )

    min: int = Field(default=0, ge=0, le=MAX_PRIORITY, description="Lowest priority taken.")
    max: int | None = Field(
        default=None,
        ge=0,
        le=MAX_PRIORITY,
        description="Highest priority taken. Omitted: no upper bound.",
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.max is not None and self.min > self.max:
            raise ValueError("min must be less than or equal to max")
        return self


# CEL: no two quotas for the same GPU type and MIG profile (omitted profile: whole GPUs).
_UNIQUE_QUOTAS: Final = (
    "!has(self.quotas) || self.quotas.all(q, self.quotas.exists_one(p, p.gpuType == q.gpuType "
    "&& (has(p.migProfile) ? p.migProfile : '') == (has(q.migProfile) ? q.migProfile : '')))"
)


class GPUQueueSpec(CRDModel):
    """The desired state of a GPUQueue."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                _UNIQUE_QUOTAS,
                "each gpuType (with each migProfile) may have one quota only",
                ".quotas",
                "FieldValueDuplicate",
            ),
        )
    )

    parent: str | None = Field(
        default=None,
        max_length=63,
        pattern=NAME_PATTERN,
        description=(
            "The parent queue (for example the department of a team). The queue's usage also "
            "counts against the parent's quota and limits. Refused by the API server: a nominal "
            "quota above the parent's for the same gpuType and migProfile (and, on the parent, "
            "lowering its quota below a child's), a queue as its own parent, two queues as each "
            "other's parent. Accepted but reported on the parent's status (condition "
            "Oversubscribed): children whose nominal quotas add up to more than the parent's "
            "(then they are not all guaranteed at once). A parent that does not exist yet is "
            "accepted; a queue whose parent does not exist, or that sits on a longer parent "
            "cycle, takes no jobs (they wait with QueueNotFound)."
        ),
    )
    quotas: list[QueueQuota] | None = Field(
        default=None,
        max_length=MAX_QUOTAS,
        description=(
            "Nominal quota, borrowing limit and lending limit per GPU type (and per MIG profile). "
            "A type listed nowhere has nominal 0: the queue may only borrow it."
        ),
    )
    weight: float = Field(
        default=1.0,
        gt=0,
        le=1000,
        description=(
            "Weight in fair share: the queue's share of the fleet's effective throughput among "
            "its siblings with work is weight over the sum of their weights."
        ),
    )
    priority_range: PriorityRange | None = Field(
        default=None,
        description=(
            "The job priorities the queue takes; a job outside it waits with QueueNotAllowed. "
            "Omitted: any priority."
        ),
    )
    namespace_selector: LabelSelectorSpec | None = Field(
        default=None,
        description=(
            "The namespaces whose jobs the queue takes, by the namespaces' labels (a standard "
            "label selector; every namespace carries kubernetes.io/metadata.name=<its name>). "
            "A job from another namespace is accepted but waits with QueueNotAllowed, takes no "
            "quota and is not counted in the queue's status; it runs once its namespace's "
            "labels or the selector change to admit it. Running jobs are never stopped by a "
            "selector change. Omitted or {}: every namespace (unlike Kueue's ClusterQueue, "
            "where an omitted selector admits none)."
        ),
    )

    @model_validator(mode="after")
    def _unique(self) -> Self:
        keys = [(q.gpu_type, q.mig_profile) for q in self.quotas or []]
        if len(set(keys)) != len(keys):
            raise ValueError("each gpuType (with each migProfile) may have one quota only")
        return self


class GPUQueueConditionType(enum.StrEnum):
    """Condition types a GPUQueue's status carries."""

    ACTIVE = "Active"  # the queue takes jobs
    OVERSUBSCRIBED = "Oversubscribed"  # children's nominal quotas add up to more than its own


class GPUQueueReason(enum.StrEnum):
    """Stable reasons of the GPUQueue conditions."""

    READY = "Ready"
    PARENT_NOT_FOUND = "ParentNotFound"
    PARENT_CYCLE = "ParentCycle"
    CHILDREN_FIT = "ChildrenFit"
    CHILDREN_EXCEED_PARENT = "ChildrenExceedParent"


class ResourceUsage(CRDModel):
    """The queue's numbers for one resource (whole GPUs of a type, or slices of a profile)."""

    gpu_type: str = Field(description="GPU type.")
    mig_profile: str | None = Field(default=None, description="MIG profile; omitted: whole GPUs.")
    nominal: int = Field(ge=0, description="The queue's nominal quota.")
    used: int = Field(ge=0, description="In use by running jobs of the queue and its children.")
    borrowed: int = Field(ge=0, description="Of `used`, how much is above the nominal quota.")
    lent: int = Field(ge=0, description="Of the unused nominal quota, how much others use now.")
    pending: int = Field(
        ge=0,
        description=(
            "Asked for by the waiting jobs of the queue and its children: each job's minimum "
            "size, on the first GPU type it accepts."
        ),
    )
    held: int | None = Field(
        default=None,
        ge=0,
        description=(
            "GPUs (or slices) held for the queue's jobs (and its children's) that do not run "
            "there yet: free ones kept for a job waiting for its preemption victims to exit, "
            "and a moved job's new placement until it is bound there; not in `used`, which "
            "counts running jobs only (a moved job's old pods, while they run)."
        ),
    )


class GPUQueueStatus(CRDModel):
    """What the scheduler observed of the queue at its last cycle."""

    resources: list[ResourceUsage] | None = Field(
        default=None,
        max_length=4 * MAX_QUOTAS,
        description="Per GPU type (and MIG profile) with a quota, usage or pending demand.",
    )
    fair_share: float | None = Field(
        default=None,
        ge=0,
        description=(
            "The share of the fleet's effective throughput the queue deserves now among its "
            "siblings with work (weight-proportional, times its parent's share); 0 when idle."
        ),
    )
    attained_share: float | None = Field(
        default=None,
        ge=0,
        description=(
            "The share of the fleet's effective throughput its running jobs hold now, with "
            "each GPU counted at its jobs' speed on that type."
        ),
    )
    pending_jobs: int | None = Field(
        default=None, ge=0, description="Jobs waiting in it (its children's not counted)."
    )
    running_jobs: int | None = Field(
        default=None, ge=0, description="Jobs running in it (its children's not counted)."
    )
    conditions: list[Condition] | None = Field(
        default=None,
        max_length=16,
        description="Active (it takes jobs) and Oversubscribed (children over its quota).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class GPUQueue(CRDModel):
    """A whole GPUQueue object."""

    api_version: Literal["gpufleet.io/v1alpha1"] = Field(
        default="gpufleet.io/v1alpha1", description=f"{API_GROUP}/{API_VERSION}"
    )
    kind: Literal["GPUQueue"] = Field(default="GPUQueue", description="GPUQueue")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Object metadata.")
    spec: GPUQueueSpec = Field(default_factory=GPUQueueSpec, description="Desired state.")
    status: GPUQueueStatus | None = Field(default=None, description="Observed state.")
