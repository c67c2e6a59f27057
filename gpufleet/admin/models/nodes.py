"""Node actions: cordon, uncordon, drain, and MIG layout changes."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from gpufleet.admin.models.common import JobRef, PublicModel


class CordonPublic(PublicModel):
    """A node's cordon state after the action."""

    node: str = Field(description="Node name.")
    unschedulable: bool = Field(description="Whether the node is cordoned now.")


class DrainOutcome(StrEnum):
    """What happened to one gang of a drain."""

    EVICTED = "evicted"  # every pod evicted through the Eviction API
    WOULD_EVICT = "wouldEvict"  # dry run: every pod would be evicted
    BLOCKED = "blocked"  # a PodDisruptionBudget does not allow the whole gang to go
    PARTIAL = "partial"  # the API refused some evictions after the budget check


class DrainGangPublic(PublicModel):
    """One gang holding GPUs on the node, moved off whole or not at all."""

    gang: str = Field(description="The gang, as namespace/gang.")
    job: JobRef | None = Field(default=None, description="Its TrainingJob or ServingJob.")
    pods: list[str] = Field(
        description="Every pod of the gang, on this node or another, as namespace/name."
    )
    outcome: DrainOutcome = Field(
        description="evicted, wouldEvict (dry run), blocked (by a PodDisruptionBudget) or "
        "partial (some evictions refused after the check)."
    )
    reason: str | None = Field(default=None, description="Why it was blocked or partial.")


class DrainPublic(PublicModel):
    """The result of a drain."""

    node: str = Field(description="Node name.")
    dry_run: bool = Field(description="Nothing was changed; the gangs show what would move.")
    unschedulable: bool = Field(description="Whether the node is cordoned (it is unless dry run).")
    gangs: list[DrainGangPublic] = Field(description="The gangs holding GPUs on the node.")
    complete: bool = Field(description="Every gang was (or would be) evicted whole.")


class MigLayoutRequest(PublicModel):
    """A MIG layout for every GPU of a node, by mig-parted config name."""

    layout: str = Field(
        min_length=1,
        max_length=253,
        description="A config name of the MIG manager's mig-parted ConfigMap, e.g. all-1g.10gb.",
    )
    drain: bool = Field(
        default=False,
        description="Move the gangs on the node's GPUs off first (as a drain does); without "
        "it a node whose GPUs are in use is refused with 409.",
    )


class MigLayoutPublic(PublicModel):
    """A node's MIG layout request after the action."""

    node: str = Field(description="Node name.")
    layout: str = Field(description="The config the node was asked for (nvidia.com/mig.config).")
    state: str | None = Field(
        default=None,
        description="nvidia.com/mig.config.state: pending until the MIG manager "
        "has applied it, then success or failed.",
    )
    drained: DrainPublic | None = Field(
        default=None, description="The drain done first, with drain=true on a busy node."
    )
