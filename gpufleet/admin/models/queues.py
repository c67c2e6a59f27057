"""GPUQueues: what each holds, lends and waits for, as its status shows it."""

from __future__ import annotations

from pydantic import Field

from gpufleet.admin.models.common import ListMeta, PublicModel


class QueueResourcePublic(PublicModel):
    """One queue's figures for one GPU type (or MIG profile of it)."""

    gpu_type: str = Field(description="GPU type, e.g. H100-80GB.")
    mig_profile: str | None = Field(default=None, description="MIG profile; absent for whole GPUs.")
    nominal: int = Field(ge=0, description="Its nominal quota, in GPUs or slices.")
    used: int = Field(ge=0, description="GPUs or slices its subtree's running jobs hold.")
    borrowed: int = Field(ge=0, description="Of `used`, how many are above its nominal quota.")
    lent: int = Field(ge=0, description="Of its unused nominal quota, how much others hold.")
    pending: int = Field(ge=0, description="What its waiting jobs ask for at their minimum size.")
    held: int = Field(
        ge=0,
        description="Held for its waiting jobs (victims still exiting, moved jobs' "
        "reservations); not counted in `used`.",
    )


class QueueConditionPublic(PublicModel):
    """A condition of the queue, as in its status (without the transition time)."""

    type: str = Field(description="Active (takes jobs) or Oversubscribed.")
    status: str = Field(description="True or False.")
    reason: str = Field(description="Why, in one CamelCase word.")
    message: str = Field(description="Why, for people.")


class QueuePublic(PublicModel):
    """One GPUQueue's figures, computed now by the core function its status comes from."""

    name: str = Field(description="Queue name (GPUQueues are cluster-scoped).")
    parent: str | None = Field(default=None, description="Its parent queue; absent at the top.")
    resources: list[QueueResourcePublic] = Field(
        description="Per GPU type and MIG profile it has a quota, usage or demand of."
    )
    fair_share: float = Field(ge=0, description="Its fair share of the fleet's work.")
    attained_share: float = Field(ge=0, description="The share its running jobs attain now.")
    running_jobs: int = Field(ge=0, description="Its running jobs (gangs).")
    pending_jobs: int = Field(ge=0, description="Its waiting jobs (gangs).")
    conditions: list[QueueConditionPublic] = Field(
        description="Active: whether it takes jobs (and why not); Oversubscribed: whether its "
        "children's nominal quotas add up to more than its own."
    )


class QueueListPublic(PublicModel):
    """A page of queues, sorted by name."""

    items: list[QueuePublic] = Field(description="The queues of this page.")
    metadata: ListMeta = Field(description="Where the list stands.")
