"""TrainingJob: a gang of identical workers that is placed whole or not at all.

Spec shape (DESIGN.md, "Custom resources"): a replica count (or elastic bounds), whole GPUs or one
MIG slice per replica, the acceptable GPU types with their relative throughput, priority and
queue, preemptibility, a topology wish, an energy preference, a pod template and a run policy in
the shape Kubeflow's RunPolicy users know. The status records the phase, conditions with stable
reasons, the chosen placement and the GPU time and energy spent.
"""

from __future__ import annotations

import enum
import itertools
from datetime import datetime
from typing import Annotated, Final, Literal, Self

from pydantic import ConfigDict, Field, model_validator

from gpufleet.model.contract import wishes
from gpufleet.model.crd_common import (
    API_GROUP,
    API_VERSION,
    MAX_GPUS_PER_REPLICA,
    MAX_REPLICAS,
    NAME_PATTERN,
    Condition,
    CRDModel,
    GPUType,
    MigProfile,
    ObjectMeta,
    PodTemplate,
    UsageStatus,
    cel,
    check_gpus_xor_mig,
    check_unique_gpu_types,
    gpu_types_field,
    gpus_per_replica_field,
    gpus_xor_mig_rules,
    mig_profile_field,
    validations,
)

__all__ = [
    "KIND",
    "MAX_PRIORITY",
    "CheckpointPolicy",
    "ElasticPolicy",
    "EnergyPolicy",
    "EnergyPreference",
    "MigSlice",
    "ReplicaPlacement",
    "RunPolicy",
    "ThroughputReport",
    "Topology",
    "TrainingJob",
    "TrainingJobConditionType",
    "TrainingJobPhase",
    "TrainingJobReason",
    "TrainingJobSpec",
    "TrainingJobStatus",
]

KIND: Final = "TrainingJob"
MAX_PRIORITY: Final = 1000
MAX_MOVE_TIMES: Final = 10


class Topology(enum.StrEnum):
    """Where the replicas of one job should sit relative to each other (the CRD's spelling;
    `wish` is the same choice as pods carry it and the core reads it)."""

    NONE = "none"
    SAME_NODE = "sameNode"
    NVLINK_DOMAIN = "nvlinkDomain"

    @property
    def wish(self) -> wishes.Topology:
        return _TOPOLOGY_WISH[self]


class EnergyPreference(enum.StrEnum):
    """How the scheduler trades speed for energy for one job (the CRD's spelling; `wish` is
    the same choice as pods carry it and the core reads it)."""

    PERFORMANCE = "performance"
    BALANCED = "balanced"
    ENERGY = "energy"

    @property
    def wish(self) -> wishes.EnergyPreference:
        return _ENERGY_WISH[self]


_TOPOLOGY_WISH: Final = {
    Topology.NONE: wishes.Topology.ANY,
    Topology.SAME_NODE: wishes.Topology.SAME_NODE,
    Topology.NVLINK_DOMAIN: wishes.Topology.NVLINK,
}
_ENERGY_WISH: Final = {
    EnergyPreference.PERFORMANCE: wishes.EnergyPreference.PERFORMANCE,
    EnergyPreference.BALANCED: wishes.EnergyPreference.BALANCED,
    EnergyPreference.ENERGY: wishes.EnergyPreference.EFFICIENT,
}


class TrainingJobPhase(enum.StrEnum):
    """Coarse lifecycle state of a TrainingJob; conditions carry the detail."""

    QUEUED = "Queued"
    ADMITTED = "Admitted"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    PREEMPTED = "Preempted"
    SUSPENDED = "Suspended"


class TrainingJobConditionType(enum.StrEnum):
    """Condition types a TrainingJob's status may carry."""

    ADMITTED = "Admitted"
    PODS_READY = "PodsReady"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    PREEMPTED = "Preempted"
    SUSPENDED = "Suspended"
    # An elastic job's gpufleet.io/throughput annotation: recorded, or why it could not be.
    THROUGHPUT_REPORTED = "ThroughputReported"


class TrainingJobReason(enum.StrEnum):
    """Stable condition reasons; tools and tests may switch on them."""

    PLACED = "Placed"
    # While the job waits for GPUs the Admitted condition's reason is the scheduler's code
    # (`gpufleet.model.contract.reasons`), or this one for a message without a known code.
    INSUFFICIENT_GPUS = "InsufficientGPUs"
    PREEMPTED_BY_HIGHER_PRIORITY = "PreemptedByHigherPriority"
    # Evicted for a job of its own queue and priority that has received less service (the
    # service tier, setting placement.service_tier_gpu_s).
    PREEMPTED_FOR_LESS_SERVED = "PreemptedForLessServedJob"
    SUSPENDED_BY_USER = "SuspendedByUser"
    COMPLETED = "Completed"
    BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    THROUGHPUT_RECORDED = "ThroughputRecorded"
    THROUGHPUT_UNREADABLE = "ThroughputUnreadable"


class ElasticPolicy(CRDModel):
    """Bounds for an elastic job, which runs with any replica count inside them, and how its
    throughput grows with the replica count."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.minReplicas <= self.maxReplicas",
                "minReplicas must be less than or equal to maxReplicas",
                ".minReplicas",
            ),
            cel(
                "!has(self.scaling) || size(self.scaling) == self.maxReplicas",
                "scaling needs one value per replica count from 1 to maxReplicas",
                ".scaling",
            ),
            cel(
                "!has(self.scaling) || self.scaling[0] == 1.0",
                "scaling is relative to one replica: its first value must be 1",
                ".scaling",
            ),
            cel(
                "!has(self.scaling) || self.scaling.isSorted()",
                "scaling must not decrease: more replicas never do less work in the curve "
                "you state (reported throughput may show otherwise)",
                ".scaling",
            ),
        )
    )

    min_replicas: int = Field(
        ge=1,
        le=MAX_REPLICAS,
        description="Fewest replicas the job can make progress with; it is admitted with these.",
    )
    max_replicas: int = Field(
        ge=1,
        le=MAX_REPLICAS,
        description="Most replicas the job can use; the scheduler grows it up to this when GPUs "
        "are idle and shrinks it back (never below minReplicas) to make room.",
    )

    scaling: list[Annotated[float, Field(gt=0, le=MAX_REPLICAS)]] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_REPLICAS,
        description=(
            "The job's throughput at 1, 2, ... maxReplicas replicas relative to one replica "
            "(first value 1, never decreasing; for example [1, 1.9, 2.6, 3.1]): the scheduler "
            "gives free GPUs to the elastic jobs whose next replica adds the most, and moves a "
            "replica beyond minReplicas to a job whose next replica adds more. Refined "
            "from the throughput the job reports in its gpufleet.io/throughput annotation "
            "(status.scaling is the curve in use). Omitted: linear, until the job reports."
        ),
    )

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.min_replicas > self.max_replicas:
            raise ValueError("minReplicas must be less than or equal to maxReplicas")
        curve = self.scaling
        if curve is not None:
            if len(curve) != self.max_replicas:
                raise ValueError("scaling needs one value per replica count from 1 to maxReplicas")
            if curve[0] != 1.0:
                raise ValueError("scaling is relative to one replica: its first value must be 1")
            if any(b < a for a, b in itertools.pairwise(curve)):
                raise ValueError("scaling must not decrease")
        return self


MAX_CHECKPOINT_INTERVAL_S: Final = 7 * 24 * 3600
MAX_CHECKPOINT_GRACE_S: Final = 3600


class CheckpointPolicy(CRDModel):
    """How the job saves its progress, which lets the scheduler move it to faster GPUs: every
    `intervalSeconds` of running, or when it is signalled (SIGTERM), within
    `gracePeriodSeconds`. A move restarts the whole gang from its last checkpoint, so the
    scheduler weighs the progress since then, and the restart, against the time it would save."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.intervalSeconds) != (has(self.onSignal) && self.onSignal)",
                "set exactly one of intervalSeconds or onSignal: true",
                ".intervalSeconds",
                "FieldValueRequired",
            ),
            cel(
                "!(has(self.onSignal) && self.onSignal) || has(self.gracePeriodSeconds)",
                "onSignal: true needs gracePeriodSeconds, the time the job takes to save on "
                "SIGTERM",
                ".gracePeriodSeconds",
                "FieldValueRequired",
            ),
            cel(
                "!has(self.gracePeriodSeconds) || (has(self.onSignal) && self.onSignal)",
                "gracePeriodSeconds applies only with onSignal: true",
                ".gracePeriodSeconds",
                "FieldValueForbidden",
            ),
        )
    )

    interval_seconds: int | None = Field(
        default=None,
        ge=10,
        le=MAX_CHECKPOINT_INTERVAL_S,
        description=(
            "The job saves a checkpoint every this many seconds of running (counted from each "
            "start of its pods); a move loses the run time since the last one."
        ),
    )
    on_signal: bool | None = Field(
        default=None,
        description=(
            "True: the job saves a checkpoint when its pods get SIGTERM, within "
            "gracePeriodSeconds, and a move loses no progress."
        ),
    )
    grace_period_seconds: int | None = Field(
        default=None,
        ge=1,
        le=MAX_CHECKPOINT_GRACE_S,
        description=(
            "With onSignal: seconds between SIGTERM and SIGKILL (the pods' "
            "terminationGracePeriodSeconds); the time a move waits for the checkpoint."
        ),
    )

    @model_validator(mode="after")
    def _one_mode(self) -> Self:
        signal = bool(self.on_signal)
        if (self.interval_seconds is not None) == signal:
            raise ValueError("set exactly one of intervalSeconds or onSignal: true")
        if signal and self.grace_period_seconds is None:
            raise ValueError("onSignal: true needs gracePeriodSeconds")
        if not signal and self.grace_period_seconds is not None:
            raise ValueError("gracePeriodSeconds applies only with onSignal: true")
        return self


class EnergyPolicy(CRDModel):
    """The job's energy preference."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.maxSlowdownPercent) || !has(self.preference) || "
                "self.preference != 'performance'",
                "maxSlowdownPercent allows a power cap and cannot be combined with "
                "preference performance",
                ".maxSlowdownPercent",
                "FieldValueForbidden",
            ),
        )
    )

    preference: EnergyPreference = Field(
        default=EnergyPreference.BALANCED,
        description=(
            "performance: fastest GPUs, no power cap. balanced: weigh time against energy. "
            "energy: prefer the placement and power cap with the least energy per unit of work."
        ),
    )
    max_slowdown_percent: int | None = Field(
        default=None,
        ge=1,
        le=50,
        description=(
            "Largest slowdown, in percent, the job accepts from a GPU power cap; the scheduler "
            "caps its GPUs at the lowest power that keeps the slowdown within it, whatever "
            "the cluster's placement policy. Omitted: the policy decides (the energy preset "
            "caps every job that does not ask for performance within 5 %)."
        ),
    )

    @model_validator(mode="after")
    def _cap_needs_tolerance(self) -> Self:
        if self.max_slowdown_percent is not None and (
            self.preference is EnergyPreference.PERFORMANCE
        ):
            raise ValueError("maxSlowdownPercent cannot be combined with preference performance")
        return self


class RunPolicy(CRDModel):
    """Retries, deadline and clean-up, as in Kubeflow's RunPolicy."""

    backoff_limit: int = Field(
        default=3,
        ge=0,
        le=100,
        description="Restarts of the whole gang after a replica fails before the job is Failed.",
    )
    active_deadline_seconds: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Seconds the job may run, counted from its first start; past it the job is Failed "
            "with reason DeadlineExceeded. Omitted means no deadline."
        ),
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None,
        ge=0,
        description=(
            "Seconds after the job finishes before it is deleted with its pods. Omitted means "
            "it is kept."
        ),
    )
    suspend: bool = Field(
        default=False,
        description=(
            "True holds the job: it is not admitted, or, if running, its pods are deleted and "
            "its GPUs released. Setting it back to false queues the job again."
        ),
    )


class TrainingJobSpec(CRDModel):
    """Desired state of a TrainingJob."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            *gpus_xor_mig_rules(),
            cel(
                "has(self.replicas) || has(self.elastic)",
                "replicas is required unless elastic gives minReplicas and maxReplicas",
                ".replicas",
                "FieldValueRequired",
            ),
            cel(
                "!has(self.replicas) || !has(self.elastic) || "
                "(self.replicas >= self.elastic.minReplicas && "
                "self.replicas <= self.elastic.maxReplicas)",
                "replicas must lie between elastic.minReplicas and elastic.maxReplicas",
                ".replicas",
            ),
            cel(
                "!has(self.checkpoint) || !has(self.elastic)",
                "checkpoint is for fixed-size jobs (moves restart the gang on faster GPUs); an "
                "elastic job is resized instead",
                ".checkpoint",
                "FieldValueForbidden",
            ),
            cel(
                "!has(self.migProfile) || !has(self.topology) || self.topology != 'nvlinkDomain'",
                "topology nvlinkDomain needs whole GPUs (gpusPerReplica); a MIG slice has "
                "no NVLink",
                ".topology",
                "FieldValueForbidden",
            ),
        )
    )

    replicas: int | None = Field(
        default=None,
        ge=1,
        le=MAX_REPLICAS,
        description=(
            "Number of identical replicas (pods) in the gang, placed all at once or not at all. "
            "For an elastic job it is the size to start with and may be omitted."
        ),
    )
    elastic: ElasticPolicy | None = Field(
        default=None,
        description="Makes the job elastic: it runs with any replica count inside these bounds.",
    )
    gpus_per_replica: int | None = gpus_per_replica_field()
    mig_profile: MigProfile | None = mig_profile_field()
    gpu_types: list[GPUType] | None = gpu_types_field("the replicas")
    priority: int = Field(
        default=0,
        ge=0,
        le=MAX_PRIORITY,
        description=(
            f"Priority from 0 to {MAX_PRIORITY} among the jobs of its queue (of all jobs where "
            "no GPUQueue exists): higher is admitted first and may preempt preemptible jobs of "
            "lower priority. Across queues, quotas and fair share decide, not priority."
        ),
    )
    queue: str = Field(
        default="default",
        max_length=63,
        pattern=NAME_PATTERN,
        description=(
            "The GPUQueue the job is charged to: its quota, borrowing and fair share. A queue "
            "that does not exist (yet) makes the job wait with QueueNotFound; one whose "
            "priorityRange or namespaceSelector does not take it, with QueueNotAllowed."
        ),
    )
    preemptible: bool = Field(
        default=True,
        description=(
            "Whether gpufleet may evict this job for others (it is requeued): for example a "
            "higher-priority job of its queue, or its queue's lender reclaiming borrowed quota. "
            "A non-preemptible job is never evicted for another, so it borrows no quota that a "
            "reclaim could want: it waits instead."
        ),
    )
    topology: Topology = Field(
        default=Topology.NONE,
        description=(
            "none: replicas anywhere. sameNode: all replicas on one node. nvlinkDomain: all "
            "GPUs of the job within one NVLink domain."
        ),
    )
    spread_slowdown_percent: int | None = Field(
        default=None,
        ge=0,
        le=99,
        description=(
            "How much slower (percent) the job trains when its replicas sit on more nodes than "
            "the fewest of their GPU type that could hold them (synchronous training waits on "
            "the network between nodes). The scheduler weighs it when it places the job: a "
            "packed placement on a slower GPU type beats a spread one worth less, and at 50 or "
            "more the job waits up to 30 minutes for packed room rather than start spread. "
            "Unset: 0, no slowdown known."
        ),
    )
    energy: EnergyPolicy = Field(
        default_factory=EnergyPolicy,
        description="Energy preference and an optional power-cap slowdown budget.",
        json_schema_extra={"default": {}},
    )
    template: PodTemplate = Field(
        description="Pod template for every replica; gpufleet adds GPU requests and placement.",
    )
    run_policy: RunPolicy = Field(
        default_factory=RunPolicy,
        description="Retries, deadline, clean-up and suspension.",
        json_schema_extra={"default": {}},
    )
    checkpoint: CheckpointPolicy | None = Field(
        default=None,
        description=(
            "How the job saves its progress. With it, a preemptible fixed-size job may be "
            "moved: restarted whole on faster GPUs that free up, when the time saved exceeds "
            "the restart and the progress lost (at most the placement policy's moves per "
            "hour). Omitted: the job is never moved."
        ),
    )

    @model_validator(mode="after")
    def _cross_field(self) -> Self:
        check_gpus_xor_mig(self.gpus_per_replica, self.mig_profile)
        check_unique_gpu_types(self.gpu_types)
        if self.replicas is None and self.elastic is None:
            raise ValueError("replicas is required unless elastic is set")
        elastic, replicas = self.elastic, self.replicas
        if (
            elastic is not None
            and replicas is not None
            and not (elastic.min_replicas <= replicas <= elastic.max_replicas)
        ):
            raise ValueError("replicas must lie between elastic.minReplicas and maxReplicas")
        if self.mig_profile is not None and self.topology is Topology.NVLINK_DOMAIN:
            raise ValueError("topology nvlinkDomain needs whole GPUs")
        if self.checkpoint is not None and self.elastic is not None:
            raise ValueError("checkpoint is for fixed-size jobs; an elastic job is resized instead")
        return self


class MigSlice(CRDModel):
    """A MIG slice held by one replica."""

    profile: MigProfile = Field(description="MIG profile of the slice, for example 3g.40gb.")
    gpu_index: int = Field(ge=0, le=MAX_GPUS_PER_REPLICA - 1, description="GPU holding the slice.")
    start: int | None = Field(
        default=None, ge=0, le=7, description="First memory slice the instance occupies."
    )


class ReplicaPlacement(CRDModel):
    """Where one replica runs."""

    replica: int = Field(ge=0, lt=MAX_REPLICAS, description="Replica index, from 0.")
    node: str = Field(max_length=253, description="Node the replica is bound to.")
    gpu_type: str | None = Field(default=None, max_length=32, description="GPU type of the node.")
    gpus: list[Annotated[int, Field(ge=0, lt=MAX_GPUS_PER_REPLICA)]] | None = Field(
        default=None,
        max_length=MAX_GPUS_PER_REPLICA,
        description="Indices of the whole GPUs the replica holds on the node.",
    )
    mig_slice: MigSlice | None = Field(
        default=None, description="The MIG slice the replica holds, for MIG jobs."
    )


class ThroughputReport(CRDModel):
    """The latest throughput the job reported at one replica count."""

    replicas: int = Field(ge=1, le=MAX_REPLICAS, description="Replica count it was measured at.")
    value: float = Field(gt=0, description="Throughput, in the job's own unit (e.g. samples/s).")


class TrainingJobStatus(UsageStatus):
    """Observed state of a TrainingJob, written by gpufleet."""

    phase: TrainingJobPhase | None = Field(
        default=None,
        description="Queued, Admitted, Running, Succeeded, Failed, Preempted or Suspended.",
    )
    conditions: list[Condition] | None = Field(
        default=None,
        max_length=16,
        description="Current conditions; a False Admitted condition says why the job waits.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    replicas: int | None = Field(
        default=None, ge=0, le=MAX_REPLICAS, description="Replicas currently placed."
    )
    gpu_type: str | None = Field(
        default=None, max_length=32, description="GPU type the job was placed on."
    )
    placement: list[ReplicaPlacement] | None = Field(
        default=None,
        max_length=MAX_REPLICAS,
        description="Chosen node and GPUs or MIG slice for each replica.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["replica"],
        },
    )
    restarts: int | None = Field(
        default=None,
        ge=0,
        description="Gang restarts after failures so far; compared with runPolicy.backoffLimit.",
    )
    start_time: datetime | None = Field(
        default=None, description="When the job first started running (RFC 3339)."
    )
    completion_time: datetime | None = Field(
        default=None, description="When the job succeeded or failed (RFC 3339)."
    )
    observed_generation: int | None = Field(
        default=None,
        ge=0,
        description="The .metadata.generation this status was computed from.",
    )
    moves: int | None = Field(
        default=None,
        ge=0,
        description="Times the scheduler moved the job (restarted it whole on faster GPUs).",
    )
    throughput: list[ThroughputReport] | None = Field(
        default=None,
        max_length=MAX_REPLICAS,
        description=(
            "An elastic job's reported throughput (its gpufleet.io/throughput annotation), "
            "the latest per replica count."
        ),
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["replicas"],
        },
    )
    scaling: list[float] | None = Field(
        default=None,
        max_length=MAX_REPLICAS,
        description=(
            "The scaling curve the scheduler uses for an elastic job (throughput at 1, 2, ... "
            "replicas relative to one): spec.elastic.scaling (or linear) refined from "
            "status.throughput."
        ),
    )
    attained_gpu_seconds: float | None = Field(
        default=None,
        ge=0,
        description=(
            "GPU-seconds of service the job's ended runs received (runs ended by a preemption, "
            "a move or a gang restart: each run's GPUs x its run time, a MIG slice counting its "
            "GPU fraction), recorded when its next run's pods are created; absent while it "
            "has had none. Inside a GPUQueue the scheduler ranks the job among those of its "
            "priority by it plus its current run's service: below the setting "
            "placement.service_tier_gpu_s it goes first and may preempt a job past it."
        ),
    )
    tier_evictions: int | None = Field(
        default=None,
        ge=0,
        description=(
            "How many of the job's runs the service tier ended (a preemption for a job of its "
            "queue and priority with less service), each counted once, as soon as the operator "
            "sees the run's workers evicted, whether or not they had started, or reads the "
            "count the scheduler wrote on the job as it evicted them (the annotation "
            "gpufleet.io/tier-evictions: the workers may be gone before the operator runs); "
            "absent while none. With placement.service_tier_rerun_s the tier does not preempt "
            "the job again until its current run has lasted that long."
        ),
    )
    move_times: list[datetime] | None = Field(
        default=None,
        max_length=MAX_MOVE_TIMES,
        description=(
            "When the latest moves began (RFC 3339, oldest first, at most "
            f"{MAX_MOVE_TIMES}); the scheduler counts those of the last hour against the "
            "policy's moves per hour."
        ),
    )


class TrainingJob(CRDModel):
    """A gang of identical GPU workers, scheduled all-or-nothing by gpufleet."""

    api_version: Literal["gpufleet.io/v1alpha1"] = Field(
        default="gpufleet.io/v1alpha1", description=f"{API_GROUP}/{API_VERSION}"
    )
    kind: Literal["TrainingJob"] = Field(default="TrainingJob", description="TrainingJob")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Object metadata.")
    spec: TrainingJobSpec = Field(description="Desired state.")
    status: TrainingJobStatus | None = Field(default=None, description="Observed state.")
