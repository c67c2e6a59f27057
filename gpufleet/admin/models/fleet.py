"""The fleet: nodes, their GPUs and MIG slices, who holds them, and what it draws."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from gpufleet.admin.models.common import JobRef, ListMeta, PublicModel


class HolderPublic(PublicModel):
    """The pod holding a GPU or a MIG slice, and the job it belongs to."""

    pod: str = Field(description="The pod, as namespace/name.")
    gang: str = Field(description="The gang the pod is part of, as namespace/gang.")
    job: JobRef | None = Field(
        default=None, description="The TrainingJob or ServingJob owning the pod, if any."
    )
    queue: str | None = Field(default=None, description="The job's queue, when known.")
    priority: int = Field(ge=0, description="The gang's priority (0 for pods of others).")
    preemptible: bool = Field(description="Whether gpufleet may evict the gang for others.")
    scheduler: str = Field(description="gpufleet, or `other` for pods of other schedulers.")
    power_cap_w: float | None = Field(
        default=None, description="GPU power cap written on the pod, in watts."
    )


class MigSlicePublic(PublicModel):
    """One MIG instance of a GPU."""

    profile: str = Field(description="MIG profile, for example 3g.40gb.")
    start: int = Field(ge=0, le=7, description="First memory slice of the instance (0-7).")
    memory_slices: int = Field(ge=1, le=8, description="Memory slices it occupies.")
    holder: HolderPublic | None = Field(default=None, description="Who holds it; absent if free.")


class GpuPublic(PublicModel):
    """One physical GPU."""

    index: int = Field(ge=0, description="GPU index on the node.")
    nvlink_domain: int = Field(ge=0, description="NVLink domain of the GPU on its node.")
    mig_enabled: bool = Field(description="Whether the GPU is in MIG mode (cut into slices).")
    holder: HolderPublic | None = Field(
        default=None, description="The pod holding the whole GPU; absent if free or MIG."
    )
    slices: list[MigSlicePublic] = Field(
        default_factory=list, description="MIG instances, for a GPU in MIG mode."
    )
    power_w: float = Field(ge=0, description="Estimated draw in watts (power model).")


class TaintPublic(PublicModel):
    """A node taint."""

    key: str = Field(description="Taint key.")
    value: str | None = Field(default=None, description="Taint value.")
    effect: str = Field(description="NoSchedule, PreferNoSchedule or NoExecute.")


class NodePublic(PublicModel):
    """A GPU node."""

    name: str = Field(description="Node name.")
    gpu_type: str = Field(description="GPU type of every GPU of the node (catalogue name).")
    ready: bool = Field(description="The node's Ready condition is True.")
    unschedulable: bool = Field(description="The node is cordoned (spec.unschedulable).")
    schedulable: bool = Field(
        description="gpufleet places new work here: ready, not cordoned, no blocking taint "
        "and no MIG reconfiguration in progress."
    )
    taints: list[TaintPublic] = Field(default_factory=list, description="The node's taints.")
    mig_config: str | None = Field(
        default=None, description="The nvidia.com/mig.config layout the node was asked for."
    )
    mig_config_state: str | None = Field(
        default=None, description="nvidia.com/mig.config.state: pending, success or failed."
    )
    gpus: list[GpuPublic] = Field(description="The node's GPUs in index order.")
    gpus_in_use: int = Field(ge=0, description="GPUs held whole or with at least one slice held.")
    power_w: float = Field(ge=0, description="Estimated draw of the node's GPUs in watts.")


class CapacityPublic(PublicModel):
    """Allocatable and allocated GPUs of one type, whole or of one MIG profile."""

    gpu_type: str = Field(description="GPU type.")
    mig_profile: str | None = Field(default=None, description="MIG profile; absent for whole GPUs.")
    allocatable: int = Field(ge=0, description="Whole GPUs (or slices) on ready nodes.")
    allocated: int = Field(ge=0, description="Of those, held by pods.")
    outside_queues: int | None = Field(
        default=None,
        ge=0,
        description=(
            "Of those, held by pods outside every GPUQueue (naming no queue, or one that does"
            " not exist or takes no jobs): usage no queue's status shows. Absent where no"
            " GPUQueue exists."
        ),
    )


class MigReconfigurationPublic(PublicModel):
    """A node whose MIG layout is being changed."""

    node: str = Field(description="Node name.")
    config: str = Field(description="The mig-parted config it was asked for.")
    state: str | None = Field(default=None, description="nvidia.com/mig.config.state so far.")


class FleetPublic(PublicModel):
    """The fleet now: one page of nodes, plus totals over every node."""

    observed_at: datetime = Field(description="When this reading of the cluster was taken.")
    nodes: list[NodePublic] = Field(description="GPU nodes of this page, by name.")
    metadata: ListMeta = Field(description="Pagination of `nodes`.")
    capacity: list[CapacityPublic] = Field(
        description="Allocatable and allocated GPUs and slices by type and profile."
    )
    power_w: float = Field(ge=0, description="Estimated draw of every GPU in the fleet, watts.")
    pending_mig_reconfigurations: list[MigReconfigurationPublic] = Field(
        description="Nodes asked for a MIG layout that is not applied yet."
    )
    pending_gangs: int = Field(ge=0, description="Gangs of gpufleet pods waiting to be placed.")
