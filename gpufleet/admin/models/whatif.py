"""What-if: where a TrainingJob or ServingJob manifest would run now, and at whose expense."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from gpufleet.admin.models.common import JobRef, PublicModel
from gpufleet.admin.models.jobs import ReasonPublic
from gpufleet.model.servingjob import ServingJob
from gpufleet.model.trainingjob import TrainingJob

# The request body: a manifest, validated by the same models as the CRDs.
Manifest = Annotated[TrainingJob | ServingJob, Field(discriminator="kind")]


class PlacedReplicaPublic(PublicModel):
    """Where one replica would run."""

    node: str = Field(description="Node.")
    gpus: list[int] = Field(description="GPU indices on the node (one for a MIG slice).")
    mig_slice: str | None = Field(
        default=None, description="The MIG instance as profile@start, for MIG replicas."
    )


class VictimPublic(PublicModel):
    """A running gang the placement would preempt."""

    gang: str = Field(description="The gang, as namespace/gang.")
    job: JobRef | None = Field(default=None, description="Its TrainingJob or ServingJob.")
    pods: list[str] = Field(description="The pods that would be evicted, as namespace/name.")


class AwaitedVictimPublic(PublicModel):
    """A running gang the decision evicts for another gang, on whose GPUs this gang would be
    placed: it names no victim of its own for them, and the scheduler holds its pods until
    that gang's pods are gone."""

    gang: str = Field(description="The evicted gang, as namespace/gang.")
    job: JobRef | None = Field(default=None, description="Its TrainingJob or ServingJob.")
    pods: list[str] = Field(description="Its pods that would be evicted, as namespace/name.")
    for_gang: list[str] = Field(
        description="The gangs it would be evicted for, as namespace/gang (not this gang)."
    )


class MigChangePublic(PublicModel):
    """A GPU whose MIG layout would change first."""

    node: str = Field(description="Node.")
    gpu: int = Field(ge=0, description="GPU index.")
    layout: list[str] | None = Field(
        description="The new instances as profile@start; null turns MIG off."
    )


class MovePublic(PublicModel):
    """A running gang the scheduler would restart, whole, elsewhere to make room for this
    gang: an evacuation of the node reserved for it, or a relocation so that a reclaim can
    clear a node for it. After a move to GPUs of the moved gang's own type the gang is placed
    in the same decision (bound once the moved pods are gone); otherwise it waits and takes
    the freed node in a following decision."""

    gang: str = Field(description="The moved gang, as namespace/gang.")
    job: JobRef | None = Field(default=None, description="Its TrainingJob or ServingJob.")
    pods: list[str] = Field(
        description="Its pods that would be deleted and made again, as namespace/name."
    )
    from_gpu_type: str = Field(description="The GPU type it runs on now.")
    gpu_type: str = Field(description="The GPU type it would run on after the move.")
    from_nodes: list[str] = Field(description="The nodes it runs on now.")
    to_nodes: list[str] = Field(description="The nodes it would run on after the move.")
    replicas: list[PlacedReplicaPublic] = Field(
        description="Where each of its replicas would run after the move."
    )
    delay_s: float = Field(
        ge=0,
        description="Seconds later it is expected to finish: the price the core charged "
        "for the move (its restart, the work since its last checkpoint, and any slowdown on "
        "the new GPU type).",
    )
    reason: str = Field(
        description="Why it would move, in the words of the event the scheduler writes on "
        "its job when it moves it."
    )


class GangOutcomePublic(PublicModel):
    """The decision for one gang of the job (a TrainingJob is one gang; each ServingJob
    replica is a gang of its own)."""

    gang: str = Field(description="The gang, as namespace/gang.")
    placed: bool = Field(description="Whether the gang would be placed now.")
    gpu_type: str | None = Field(default=None, description="GPU type it would run on.")
    gpus: int = Field(ge=0, description="Whole GPUs (or MIG slices) it would hold.")
    replicas: list[PlacedReplicaPublic] = Field(description="Where each replica would run.")
    power_cap_w: float | None = Field(default=None, description="Power cap it would get.")
    preempts: list[VictimPublic] = Field(description="Gangs evicted to make room for it.")
    mig_changes: list[MigChangePublic] = Field(
        description="MIG repartitions of GPUs it would run on, done before it starts."
    )
    waiting: ReasonPublic | None = Field(
        default=None, description="Why it would wait; absent when placed."
    )
    moves: list[MovePublic] = Field(
        default_factory=list,
        description="Running gangs moved to make room for it (empty when none is): it is "
        "placed once they are gone, or waits for the node they free.",
    )
    waits_for: list[AwaitedVictimPublic] = Field(
        default_factory=list,
        description="Running gangs the same decision evicts for other gangs, whose GPUs or "
        "queue quota of its GPU type it would take: it starts once their pods are gone (empty "
        "when it needs no such wait; its own victims are in preempts).",
    )


class WhatIfPublic(PublicModel):
    """The answer to a what-if: nothing was written to the cluster."""

    job: JobRef = Field(description="The job of the manifest.")
    placed: bool = Field(description="Every gang of the job would be placed now.")
    gangs: list[GangOutcomePublic] = Field(description="The decision for each gang.")
    engine: str = Field(description="How the core decided: cpsat, greedy or greedy-fallback.")
    policy: str = Field(description="The live placement policy the core decided with.")
