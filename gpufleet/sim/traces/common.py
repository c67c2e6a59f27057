"""Trace-independent job record and data-file lookup shared by the trace loaders."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.model.input_error import InputError

__all__ = ["DATA_DIR_ENV", "TraceJob", "default_data_dir"]

# Environment variable that overrides where the shared data directory is looked up.
DATA_DIR_ENV = "GPUFLEET_DATA_DIR"


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job as the simulator sees it, whatever trace it came from.

    `work_s` is the job's run time on a reference GPU (relative speed 1.0 = V100, the
    normalisation of the project's GPU reference, gpus.md §7.4) with its full gang; the engine
    divides it by the speed of the GPUs it actually gets (an elastic job running with fewer than
    `replicas` replicas goes slower, by the speed model's scaling curve). A job is a gang of
    `replicas` identical pods, each needing `gpus_per_replica` whole GPUs, or one MIG slice of
    `mig_g` compute slices when `mig_g` is set (fractional requests quantised to MIG sizes).
    """

    job_id: str
    arrival_s: float
    work_s: float
    replicas: int
    gpus_per_replica: int
    model: str
    queue: str = "default"
    mig_g: int | None = None
    gpu_milli: int = 1000
    gpu_types: frozenset[str] | None = None
    priority: int = 0
    min_replicas: int | None = None  # elastic: may run with fewer replicas (None = fixed size)
    same_node: bool = False  # all replicas wish to share one node (consolidated training)
    extra: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def num_gpus(self) -> int:
        """Whole GPUs the gang occupies (0 for a MIG-slice job)."""
        return 0 if self.mig_g is not None else self.replicas * self.gpus_per_replica

    @property
    def gpu_share(self) -> float:
        """GPU capacity the gang occupies, counting a MIG slice as `mig_g / 7` of a GPU."""
        if self.mig_g is not None:
            return self.replicas * self.mig_g / 7.0
        return float(self.num_gpus)


def default_data_dir() -> Path:
    """Locate the shared data directory (`<repo root>/../shared/data`).

    Order: the `GPUFLEET_DATA_DIR` environment variable; `../shared/data` next to the repository
    this package lives in; `../shared/data` relative to the working directory.
    """
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env)
    repo_root = Path(__file__).resolve().parents[3]
    for candidate in (repo_root.parent / "shared" / "data", Path.cwd().parent / "shared" / "data"):
        if candidate.is_dir():
            return candidate
    raise InputError(
        f"shared data directory not found; set {DATA_DIR_ENV}, pass --data-dir, or place it "
        "at ../shared/data"
    )
