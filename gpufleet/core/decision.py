"""The output of one placement decision: placements, MIG changes, preemptions, pending reasons."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from gpufleet.core.snapshot import ReplicaPlacement
from gpufleet.model.mig import MigLayout


class PendingReason(StrEnum):
    """Stable machine-readable reason a gang stays pending (used as condition reasons)."""

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


@dataclass(frozen=True, slots=True)
class GangPlacement:
    """An admitted gang: its GPU type, every replica's GPUs and an optional power cap."""

    gang_id: str
    gpu_type: str
    replicas: tuple[ReplicaPlacement, ...]
    power_cap_w: float | None = None

    @property
    def replica_count(self) -> int:
        return len(self.replicas)


@dataclass(frozen=True, slots=True)
class Repartition:
    """Change an empty GPU's MIG layout (None = MIG off, whole GPU)."""

    node: str
    gpu: int
    old_layout: MigLayout | None
    new_layout: MigLayout | None


@dataclass(frozen=True, slots=True)
class Preemption:
    """Evict a whole running gang to make room for `for_gang`."""

    gang_id: str
    for_gang: str


@dataclass(frozen=True, slots=True)
class Pending:
    gang_id: str
    reason: PendingReason
    message: str


@dataclass(frozen=True, slots=True)
class SolveStats:
    """How the decision was made. Wall time is excluded from equality (it is not reproducible)."""

    engine: str  # "cpsat", "greedy", or "greedy-fallback"
    status: str
    objective: float | None = None
    best_bound: float | None = None
    wall_time_s: float = field(default=0.0, compare=False)

    @property
    def gap(self) -> float | None:
        """Relative optimality gap of a CP-SAT solve (0 = proven optimal)."""
        if self.objective is None or self.best_bound is None:
            return None
        return abs(self.best_bound - self.objective) / max(abs(self.best_bound), 1e-9)


@dataclass(frozen=True, slots=True)
class Decision:
    placements: tuple[GangPlacement, ...] = ()
    repartitions: tuple[Repartition, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    pending: tuple[Pending, ...] = ()
    stats: SolveStats = field(default_factory=lambda: SolveStats("none", "EMPTY"))

    def placement(self, gang_id: str) -> GangPlacement | None:
        return next((p for p in self.placements if p.gang_id == gang_id), None)

    def pending_for(self, gang_id: str) -> Pending | None:
        return next((p for p in self.pending if p.gang_id == gang_id), None)

    @property
    def admitted_ids(self) -> frozenset[str]:
        return frozenset(p.gang_id for p in self.placements)
