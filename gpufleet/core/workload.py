"""The expected workload: which request shapes arrive and how often, estimated online.

Fragmentation (FGD, Weng et al., ATC'23) and the reserves for constrained demand are measured
against the workload the cluster expects, not against the gangs pending right now. The caller
keeps an estimate and passes it in the snapshot (`Snapshot.workload`); the core never looks
further ahead than that estimate.

A *shape* is what one pod-sized piece of a gang needs on one node: `gpus` whole GPUs (inside one
NVLink domain when `nvlink`), or one MIG slice of `mig_profile`, on one of `types`. A gang of n
replicas is n tasks of its replica shape; a same-node gang is one task of all its GPUs.

`ArrivalCounts` is the online estimator: exponentially decayed counts of the shapes seen, where
each arrival multiplies the older counts by `1 - 1/window` (a window of about `window` recent
tasks, independent of the arrival rate; an infinite window keeps plain counts). It may start
from a prior worth some number of tasks (a distribution from history, for example what a live
operator persisted), which then decays like any older arrival. It is a value: `observed`
returns a new estimator, so no state is shared between decisions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.core.demand import Gang, Topology
from gpufleet.model.gpus import Catalog


@dataclass(frozen=True, slots=True)
class TaskShape:
    """One node's worth of a request: whole GPUs or one MIG slice, on one of `types`."""

    types: tuple[str, ...]  # acceptable GPU types, sorted, unique
    gpus: int = 1  # whole GPUs on one node; 1 for a MIG slice
    mig_profile: str | None = None
    nvlink: bool = False

    def __post_init__(self) -> None:
        if not self.types or tuple(sorted(set(self.types))) != self.types:
            raise ValueError("a task shape needs sorted, unique acceptable types")
        if self.gpus < 1:
            raise ValueError("a task shape needs at least one GPU")
        if self.mig_profile is not None and (self.gpus != 1 or self.nvlink):
            raise ValueError("a MIG task shape is one slice, without NVLink")

    @property
    def sort_key(self) -> tuple[tuple[str, ...], int, str, bool]:
        return (self.types, self.gpus, self.mig_profile or "", self.nvlink)

    @classmethod
    def of_gang(cls, gang: Gang) -> tuple[TaskShape, int]:
        """The shape of a gang's tasks and how many tasks it has (at its largest size)."""
        types = tuple(sorted(set(gang.type_names())))
        if gang.mig_profile is not None:
            return cls(types, 1, gang.mig_profile), gang.replicas_max
        if gang.topology is Topology.SAME_NODE:
            return cls(types, gang.gpus_per_replica * gang.replicas_min), 1
        nvlink = gang.topology is Topology.NVLINK and gang.gpus_per_replica > 1
        return cls(types, gang.gpus_per_replica, None, nvlink), gang.replicas_max

    def compute(self, catalog: Catalog) -> float:
        """GPU capacity one task takes: its GPUs, or its slice's compute share."""
        if self.mig_profile is None:
            return float(self.gpus)
        for name in self.types:
            if name in catalog and catalog[name].has_mig_profile(self.mig_profile):
                return catalog[name].mig_profile(self.mig_profile).compute_fraction
        return 1.0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"types": list(self.types), "gpus": self.gpus}
        if self.mig_profile is not None:
            out["migProfile"] = self.mig_profile
        if self.nvlink:
            out["nvlink"] = True
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskShape:
        types = data.get("types")
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise ValueError("task shape: types must be a list of GPU type names")
        profile = data.get("migProfile")
        if profile is not None and not isinstance(profile, str):
            raise ValueError("task shape: migProfile must be a string")
        gpus = data.get("gpus", 1)
        if not isinstance(gpus, int) or isinstance(gpus, bool):
            raise ValueError("task shape: gpus must be an integer")
        return cls(tuple(sorted(set(types))), gpus, profile, bool(data.get("nvlink", False)))


@dataclass(frozen=True, slots=True)
class ShapeShare:
    """A shape and its share of the tasks expected (the FGD paper's task popularity)."""

    shape: TaskShape
    share: float

    def __post_init__(self) -> None:
        if not 0 < self.share <= 1:
            raise ValueError("a shape's share must be in (0, 1]")


@dataclass(frozen=True)
class WorkloadEstimate:
    """Expected request shapes with their shares of tasks (shares sum to 1)."""

    shapes: tuple[ShapeShare, ...]

    def __post_init__(self) -> None:
        if self.shapes and abs(sum(s.share for s in self.shapes) - 1.0) > 1e-6:
            raise ValueError("shape shares must sum to 1")

    @classmethod
    def of(cls, weights: Mapping[TaskShape, float]) -> WorkloadEstimate:
        """Normalise positive weights per shape into shares (empty when there are none)."""
        kept = {s: w for s, w in weights.items() if w > 0}
        total = sum(kept.values())
        if total <= 0:
            return cls(())
        ordered = sorted(kept.items(), key=lambda item: item[0].sort_key)
        return cls(tuple(ShapeShare(s, w / total) for s, w in ordered))

    def gpu_shares(self, catalog: Catalog) -> dict[TaskShape, float]:
        """Each shape's share of the GPU capacity requested (tasks x GPUs per task)."""
        weights = {s.shape: s.share * s.shape.compute(catalog) for s in self.shapes}
        total = sum(weights.values())
        return {s: w / total for s, w in weights.items()} if total > 0 else {}


# Tasks the online estimate stands for by default: each arrival decays older counts by 1/WINDOW.
WINDOW = 2000.0


@dataclass(frozen=True)
class ArrivalCounts:
    """Online estimate of the workload: decayed counts of arrived tasks per shape (see module)."""

    window: float = WINDOW
    counts: Mapping[TaskShape, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError("the estimate's window must be at least one task")
        if any(c < 0 for c in self.counts.values()):
            raise ValueError("task counts must be >= 0")

    @classmethod
    def seeded(cls, prior: WorkloadEstimate, tasks: float, window: float = WINDOW) -> ArrivalCounts:
        """An estimator that starts from `prior` as if `tasks` tasks of that mix had arrived."""
        if tasks < 0:
            raise ValueError("a prior's weight must be >= 0")
        return cls(window, {s.shape: s.share * tasks for s in prior.shapes})

    def observed(self, shape: TaskShape, tasks: int = 1) -> ArrivalCounts:
        """The estimate after `tasks` more tasks of `shape` arrived."""
        if math.isinf(self.window):  # no decay: plain counts
            counts = dict(self.counts)
            counts[shape] = counts.get(shape, 0.0) + tasks
            return ArrivalCounts(self.window, counts)
        keep = (1.0 - 1.0 / self.window) ** tasks
        counts = {s: c * keep for s, c in self.counts.items() if c * keep > 1e-9}
        counts[shape] = counts.get(shape, 0.0) + (1.0 - keep) * self.window
        return ArrivalCounts(self.window, counts)

    def observed_gangs(self, gangs: Iterable[Gang]) -> ArrivalCounts:
        out = self
        for gang in gangs:
            shape, tasks = TaskShape.of_gang(gang)
            out = out.observed(shape, tasks)
        return out

    def estimate(self) -> WorkloadEstimate:
        return WorkloadEstimate.of(self.counts)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form, for an adapter to persist and restore (`from_dict`)."""
        return {
            "window": self.window,
            "shapes": [
                {**s.to_dict(), "count": round(c, 6)}
                for s, c in sorted(self.counts.items(), key=lambda item: item[0].sort_key)
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ArrivalCounts:
        shapes = data.get("shapes", [])
        if not isinstance(shapes, list):
            raise ValueError("workload history: shapes must be a list")
        counts: dict[TaskShape, float] = {}
        for item in shapes:
            if not isinstance(item, Mapping):
                raise ValueError("workload history: each shape must be an object")
            count = item.get("count")
            if not isinstance(count, int | float) or isinstance(count, bool) or count < 0:
                raise ValueError("workload history: count must be a number >= 0")
            shape = TaskShape.from_dict(item)
            counts[shape] = counts.get(shape, 0.0) + float(count)
        window = data.get("window", WINDOW)
        if not isinstance(window, int | float) or isinstance(window, bool) or window != window:
            raise ValueError("workload history: window must be a number")
        return cls(float(window), counts)
