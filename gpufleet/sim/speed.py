"""How fast a trace job runs on a given placement (work units per second; V100 = 1.0).

* **Per-type speed.** For V100 the speed is 1.0 by definition. For another catalogue type with
  relative throughput R (gpus.md §7.4) the job runs at `R ** s`, where `s` is the job's
  *heterogeneity sensitivity*: how much its Gavel model class gains from V100 over K80, relative
  to the geometric mean over all classes (`s = log(v100/k80) / log(geomean v100/k80)`, clamped to
  [0.25, 1.5]). So a ResNet job gains more from an H100 than a Recommendation job does, as in
  Gavel's measurements. This extrapolation beyond the measured K80/P100/V100 is an ESTIMATE.
* **Spread.** A multi-replica job whose replicas sit on more nodes than the fewest that could
  hold it runs at Gavel's unconsolidated/consolidated ratio for its class; on mixed GPU types
  it runs at the slowest type's speed (synchronous training waits for the slowest worker). The
  core is told the same factor (`Gang.spread_speed`, `spread_factor`).
* **Elastic size.** With r of `replicas` replicas the speed is the full gang's times
  `f(r) / f(replicas)`, where f is the job's scaling curve from Gavel's measurements of its
  model class at 1, 2, 4 and 8 GPUs (aggregate rates, consolidated, on V100), linear between
  them and at the last measured efficiency beyond, never falling as replicas are added;
  linear for classes Gavel measured on one GPU only (ResNet-50 at batch 64 does 1.8x at 2).
  Interpolated so, most classes' curves are not concave (LM at batch 10: 2.0x at 2 and at 4
  GPUs, 7.5x at 8). With `fitted_scaling` the curve is instead Amdahl's law fitted to the same
  points, `f(r) = r / (1 + s (r - 1))` with the serial share s in [0, 1] minimising the squared
  log error (Pollux likewise fits a throughput model to what it measured): diminishing returns
  for every class (ResNet-50 at batch 16: s = 0.33, 2.4x at 8; LM at batch 80: nearly linear).
* **Power cap.** Multiplied by `speed_factor(type, cap)` from the core power model.
* **MIG slices.** A fractional job runs at its type's speed on its slice: the trace's request
  already says how much GPU it needs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from functools import lru_cache

from gpufleet.core.snapshot import ReplicaPlacement
from gpufleet.model.gpus import Catalog
from gpufleet.model.power import speed_factor
from gpufleet.sim.gavel_profiles import GavelProfile, gavel_scale
from gpufleet.sim.traces.common import TraceJob

__all__ = ["SpeedModel"]

_SENSITIVITY_RANGE = (0.25, 1.5)


class SpeedModel:
    """Per-job throughput on catalogue GPU types, from the Gavel profile."""

    def __init__(
        self,
        catalog: Catalog,
        profile: GavelProfile,
        max_gpus_per_node: dict[str, int] | None = None,
        fitted_scaling: bool = False,
    ) -> None:
        self.catalog = catalog
        self.fitted_scaling = fitted_scaling
        # Largest node of each GPU type in the fleet (decides when a gang is "spread").
        self.max_gpus_per_node = dict(max_gpus_per_node or {})
        self.profile = profile
        ratios = [
            profile.relative_speed(t, 1, "v100") / profile.relative_speed(t, 1, "k80")
            for t in profile.job_types(1)
        ]
        self._log_geomean = sum(math.log(r) for r in ratios) / len(ratios)
        self.sensitivity = lru_cache(maxsize=None)(self._sensitivity)

    def _sensitivity(self, model: str, scale: int) -> float:
        if self.profile.rates.get(("k80", model, scale), 0.0) <= 0:
            return 1.0  # not profiled on K80: assume an average job
        k80 = self.profile.relative_speed(model, scale, "k80")
        s = math.log(1.0 / k80) / self._log_geomean
        return min(max(s, _SENSITIVITY_RANGE[0]), _SENSITIVITY_RANGE[1])

    def type_speed(self, job: TraceJob, gpu_type: str) -> float:
        """Speed of the whole gang on `gpu_type`, consolidated and uncapped."""
        base = self.catalog[gpu_type].relative_throughput
        return float(base ** self.sensitivity(job.model, gavel_scale(job.num_gpus or 1)))

    def scaling(self, job: TraceJob) -> tuple[float, ...]:
        """Throughput at 1..replicas replicas relative to one (see module docstring)."""
        return self._curve(job.model, job.replicas, max(1, job.gpus_per_replica))

    @functools.cache  # noqa: B019 - one model per process; few distinct keys
    def _curve(self, model: str, replicas: int, per_replica: int) -> tuple[float, ...]:
        one = self.profile.rates.get(("v100", model, per_replica), 0.0)
        measured = {1: 1.0}
        for scale in (2, 4, 8):
            rate = self.profile.rates.get(("v100", model, scale * per_replica), 0.0)
            if one > 0 and rate > 0:
                measured[scale] = rate / one
        out: list[float] = []
        points = sorted(measured.items())
        if self.fitted_scaling:
            serial = amdahl_fit(points)
            return tuple(r / (1.0 + serial * (r - 1)) for r in range(1, replicas + 1))
        for r in range(1, replicas + 1):
            below = max((p for p in points if p[0] <= r), key=lambda p: p[0])
            above = [p for p in points if p[0] >= r]
            if above:
                (x0, y0), (x1, y1) = below, min(above, key=lambda p: p[0])
                out.append(y0 if x1 == x0 else y0 + (y1 - y0) * (r - x0) / (x1 - x0))
            else:  # beyond the largest measured scale: its per-replica efficiency
                x0, y0 = points[-1]
                out.append(r * y0 / x0)
        # A job never runs slower with more replicas than with fewer (it could leave some idle).
        return tuple(max(out[: i + 1]) for i in range(len(out)))

    def serial_share(self, job: TraceJob) -> float:
        """The fitted Amdahl serial share of the job's class (see `fitted_scaling`)."""
        one = self.profile.rates.get(("v100", job.model, max(1, job.gpus_per_replica)), 0.0)
        points = [(1, 1.0)]
        for scale in (2, 4, 8):
            rate = self.profile.rates.get(
                ("v100", job.model, scale * max(1, job.gpus_per_replica)), 0.0
            )
            if one > 0 and rate > 0:
                points.append((scale, rate / one))
        return amdahl_fit(points)

    def _min_nodes(self, job: TraceJob, types: set[str]) -> int:
        """Fewest nodes the gang could fit on (spreading beyond that costs the spread factor)."""
        per_node = min(self.max_gpus_per_node.get(t, 8) for t in types)
        return max(1, math.ceil(job.num_gpus / max(per_node, 1)))

    def spread_factor(self, job: TraceJob) -> float:
        """The job's speed spread over more nodes than it needs, relative to the fewest (Gavel's
        unconsolidated/consolidated ratio for its class; 1 for a one-GPU job)."""
        return self.profile.spread_factor(job.model, gavel_scale(job.num_gpus))

    def placement_speed(
        self,
        job: TraceJob,
        replicas: Sequence[ReplicaPlacement],
        gpu_type_of: dict[str, str],
        cap_w: float | None = None,
    ) -> float:
        """Speed of `job` on the given replicas (`gpu_type_of` maps node -> GPU type)."""
        if not replicas:
            return 0.0
        types = {gpu_type_of[r.node] for r in replicas}
        speed = min(self.type_speed(job, t) for t in types)
        if len({r.node for r in replicas}) > self._min_nodes(job, types):
            speed *= self.spread_factor(job)
        curve = self.scaling(job)
        speed *= curve[min(len(replicas), job.replicas) - 1] / curve[job.replicas - 1]
        if cap_w is not None:
            speed *= min(speed_factor(self.catalog[t], cap_w) for t in types)
        return speed


def amdahl_fit(points: Sequence[tuple[int, float]]) -> float:
    """The serial share s in [0, 1] (steps of 0.001) whose `r / (1 + s (r - 1))` fits the
    measured (replicas, speedup) points best in squared log error; 0 with nothing beyond one
    replica."""
    useful = [(r, y) for r, y in points if r > 1 and y > 0]
    if not useful:
        return 0.0

    def error(s: float) -> float:
        return sum((math.log(r / (1.0 + s * (r - 1))) - math.log(y)) ** 2 for r, y in useful)

    return min((i / 1000.0 for i in range(1001)), key=error)
