"""TrainingJobs and ServingJobs as the admin API shows them."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import Field

from gpufleet.admin.models.common import ListMeta, PublicModel


class JobKind(StrEnum):
    """The kinds of jobs gpufleet runs."""

    TRAINING = "TrainingJob"
    SERVING = "ServingJob"


class ReasonPublic(PublicModel):
    """Why a job (or some of its replicas) waits."""

    reason: str = Field(
        description="Stable reason code: the core's pending reason (e.g. InsufficientFreeGpus) "
        "or the scheduler's (e.g. WaitingForMIGReconfiguration, GangNotReady)."
    )
    message: str = Field(description="Human-readable detail.")


class ReplicaPublic(PublicModel):
    """Where one pod of the job holds GPUs."""

    pod: str = Field(description="Pod name.")
    node: str = Field(description="Node the pod is bound to.")
    gpu_type: str | None = Field(default=None, description="GPU type of the node.")
    gpus: list[int] = Field(description="Indices of the GPUs the pod holds (one for a slice).")
    mig_slice: str | None = Field(
        default=None, description="The MIG instance as profile@start, for MIG replicas."
    )
    power_cap_w: float | None = Field(default=None, description="GPU power cap in watts.")


class PoolPublic(PublicModel):
    """One pool of a ServingJob."""

    name: str = Field(description="prefill, decode or server.")
    replicas: int = Field(ge=0, description="Replicas that exist.")
    ready_replicas: int = Field(ge=0, description="Replicas that are ready.")
    desired_replicas: int | None = Field(
        default=None, ge=0, description="Replicas the autoscaler last asked for."
    )
    last_scale_reason: str | None = Field(
        default=None, description="Why the desired replicas last changed."
    )


class JobPublic(PublicModel):
    """A job, where it runs, why it waits, and what it has used."""

    namespace: str = Field(description="Namespace of the job.")
    kind: JobKind = Field(description="TrainingJob or ServingJob.")
    name: str = Field(description="Name of the job.")
    queue: str = Field(description="Queue the job waits in.")
    priority: int = Field(ge=0, description="The job's priority.")
    phase: str | None = Field(default=None, description="The phase its status reports.")
    created_at: datetime | None = Field(default=None, description="When the job was created.")
    gpu_type: str | None = Field(
        default=None, description="GPU type its replicas run on (the first, if several)."
    )
    placement: list[ReplicaPublic] = Field(description="Pods holding GPUs now, by pod name.")
    waiting: ReasonPublic | None = Field(
        default=None, description="Why the job (or some replicas it needs) waits; absent if not."
    )
    queue_position: int | None = Field(
        default=None,
        ge=1,
        description="1 for the first waiting job of its queue (by priority, then age); absent "
        "when the job does not wait.",
    )
    gpu_seconds: float | None = Field(
        default=None, ge=0, description="GPU time used so far (TrainingJob status)."
    )
    estimated_energy_joules: float | None = Field(
        default=None, ge=0, description="Energy used so far, joules (TrainingJob status)."
    )
    pools: list[PoolPublic] = Field(
        default_factory=list, description="The pools of a ServingJob; empty for TrainingJobs."
    )


class JobListPublic(PublicModel):
    """One page of jobs, sorted by namespace, kind and name."""

    items: list[JobPublic] = Field(description="The jobs of this page.")
    metadata: ListMeta = Field(description="Pagination.")
