"""Simulation metrics: per-job records, piecewise-constant integrals, and the summary table.

Definitions (all times in simulated seconds):

* **JCT** = completion - arrival; average, median and p99 (linear interpolation between ranks).
* **Queueing delay** = first start - arrival (time until the whole gang first ran).
* **Makespan** = last completion - first arrival.
* **Utilisation** = busy GPU-seconds / (fleet GPUs x makespan); a MIG slice counts its share of
  SM slices (g/7) of a GPU; GPUs held by a gang that is not running yet are *allocated*, not busy.
* **Utilisation while jobs arrive** = busy GPU-seconds from the first to the last arrival /
  (fleet GPUs x that span): the load-bearing part of a replay, without the drain at its end
  (where one long job left running decides the makespan).
* **Work utilisation while jobs arrive** = the same with each busy GPU-second weighted by the
  job's speed there over its speed on its fastest type in the fleet: the work done in the span,
  in GPU-seconds of each job's fastest type, over the capacity. On a heterogeneous fleet a job
  run on a slow type is busy for longer, which raises the plain figure for the same work; this
  one does not reward that (a job on its fastest type counts 1 per GPU-second, at a third of
  that speed 1/3).
* **Unallocated GPUs while a job waits** (the FGD paper's fragmentation measure) = time-average of
  the fleet's free GPU capacity over the periods when at least one job is pending, plus the mean
  of the same quantity sampled at each scheduling cycle that left a job pending.
* **Energy** = integral of fleet power (see `gpufleet.sim.energy`) from the first arrival to
  the last completion, in kWh; average power = energy / makespan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
    "Integrator",
    "JobRecord",
    "SimResult",
    "arrival_utilisation",
    "arrival_work_utilisation",
    "percentile",
    "summarise",
]


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


class Integrator:
    """Integral over time of a piecewise-constant value, updated when the value changes."""

    __slots__ = ("_last_t", "_value", "total")

    def __init__(self, t0: float = 0.0, value: float = 0.0) -> None:
        self._last_t = t0
        self._value = value
        self.total = 0.0

    @property
    def value(self) -> float:
        """The current value."""
        return self._value

    def advance(self, t: float) -> None:
        """Accumulate the current value up to time `t` (never backwards)."""
        if t < self._last_t:
            raise ValueError(f"time went backwards: {t} < {self._last_t}")
        self.total += self._value * (t - self._last_t)
        self._last_t = t

    def set(self, t: float, value: float) -> None:
        """Change the value at time `t`."""
        self.advance(t)
        self._value = value


@dataclass(slots=True)
class JobRecord:
    """What happened to one job."""

    job_id: str
    arrival_s: float
    gpu_share: float
    queue: str
    first_start_s: float | None = None
    completion_s: float | None = None
    busy_gpu_s: float = 0.0
    preemptions: int = 0
    moves: int = 0  # times the policy restarted it on a faster type
    resizes: int = 0  # times the policy grew or shrank it while it ran (elastic jobs)
    gpu_types: tuple[str, ...] = ()

    @property
    def jct_s(self) -> float:
        """Job completion time; raises if the job has not completed."""
        if self.completion_s is None:
            raise ValueError(f"job {self.job_id} did not complete")
        return self.completion_s - self.arrival_s

    @property
    def queueing_s(self) -> float:
        """Delay until the gang first ran."""
        if self.first_start_s is None:
            raise ValueError(f"job {self.job_id} never started")
        return self.first_start_s - self.arrival_s


@dataclass
class SimResult:
    """Raw outcome of one simulation run of one policy."""

    policy: str
    fleet_gpus: int
    jobs: list[JobRecord]
    start_s: float
    end_s: float
    energy_j: float
    busy_gpu_s: float
    allocated_gpu_s: float
    waiting_s: float
    unallocated_waiting_gpu_s: float
    unallocated_samples: list[float] = field(default_factory=list)
    # (time, busy GPUs, allocated GPUs, fleet power W) after each cycle, for plots.
    timeline: list[tuple[float, float, float, float]] = field(default_factory=list)
    place_calls: int = 0
    place_seconds: float = 0.0
    wall_seconds: float = 0.0
    unfinished: int = 0
    last_arrival_s: float = 0.0
    arrival_busy_gpu_s: float = 0.0  # busy GPU-seconds from the first to the last arrival
    # The same, each GPU-second weighted by the job's speed there over its speed on its fastest
    # type in the fleet (work done, in GPU-seconds of the job's fastest type).
    arrival_useful_gpu_s: float = 0.0


def arrival_utilisation(result: SimResult) -> float:
    """Utilisation from the first to the last arrival (module docstring); NaN for one instant."""
    span = result.last_arrival_s - result.start_s
    return result.arrival_busy_gpu_s / (result.fleet_gpus * span) if span > 0 else math.nan


def arrival_work_utilisation(result: SimResult) -> float:
    """Work-weighted utilisation over the same span (`arrival_useful_gpu_s`); NaN for one
    instant. Unlike `arrival_utilisation`, running a job slower does not raise it."""
    span = result.last_arrival_s - result.start_s
    return result.arrival_useful_gpu_s / (result.fleet_gpus * span) if span > 0 else math.nan


def summarise(result: SimResult) -> dict[str, float | int | str]:
    """The headline numbers of a run, as a flat dict (hours for JCT-like values)."""
    done = [j for j in result.jobs if j.completion_s is not None]
    jct = [j.jct_s for j in done]
    queueing = [j.queueing_s for j in done]
    makespan = max(result.end_s - result.start_s, 0.0)
    capacity = result.fleet_gpus * makespan
    hours = 3600.0
    kwh = result.energy_j / 3.6e6
    return {
        "policy": result.policy,
        "jobs": len(result.jobs),
        "completed": len(done),
        "avg_jct_h": (sum(jct) / len(jct) / hours) if jct else math.nan,
        "median_jct_h": percentile(jct, 50) / hours,
        "p99_jct_h": percentile(jct, 99) / hours,
        "avg_queueing_h": (sum(queueing) / len(queueing) / hours) if queueing else math.nan,
        "makespan_h": makespan / hours,
        "utilisation": result.busy_gpu_s / capacity if capacity > 0 else math.nan,
        "allocation": result.allocated_gpu_s / capacity if capacity > 0 else math.nan,
        "arrival_utilisation": arrival_utilisation(result),
        "arrival_work_utilisation": arrival_work_utilisation(result),
        "unallocated_gpus_waiting": (
            result.unallocated_waiting_gpu_s / result.waiting_s if result.waiting_s > 0 else 0.0
        ),
        "unallocated_gpus_at_failure": (
            sum(result.unallocated_samples) / len(result.unallocated_samples)
            if result.unallocated_samples
            else 0.0
        ),
        "energy_kwh": kwh,
        "avg_power_kw": (result.energy_j / makespan / 1000.0) if makespan > 0 else math.nan,
        "preemptions": sum(j.preemptions for j in result.jobs),
        "moves": sum(j.moves for j in result.jobs),
        "resizes": sum(j.resizes for j in result.jobs),
        "place_calls": result.place_calls,
        "place_s": result.place_seconds,
        "wall_s": result.wall_seconds,
    }
