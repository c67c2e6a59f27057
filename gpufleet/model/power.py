"""Power model: board watts of a busy GPU, the slowdown a power cap costs, energy per unit of work.

Active power is linear in utilisation between idle and TDP (the reference's simulator model, an
ESTIMATE). A cap below the uncapped draw slows the job by (cap / uncapped) ** CAP_EXPONENT: with
0.3, a 70 % cap costs about 10 % speed, in line with published power-limit sweeps (Zeus); also an
ESTIMATE, not a measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpufleet.model.gpus import GpuType

TRAINING_UTILIZATION = 0.85  # public training logs show 0.7-0.95 x TDP
CAP_EXPONENT = 0.3


def active_power_w(gpu: GpuType, utilization: float = TRAINING_UTILIZATION) -> float:
    """Watts one uncapped GPU draws at `utilization` (0..1)."""
    u = min(max(utilization, 0.0), 1.0)
    return gpu.power.idle_w + u * (gpu.power.tdp_w - gpu.power.idle_w)


def capped_power_w(gpu: GpuType, cap_w: float | None) -> float:
    """Watts drawn by a busy GPU under `cap_w` (None = no cap)."""
    uncapped = active_power_w(gpu)
    return uncapped if cap_w is None else min(uncapped, cap_w)


def speed_factor(gpu: GpuType, cap_w: float | None) -> float:
    """Fraction of uncapped throughput kept under `cap_w`."""
    uncapped = active_power_w(gpu)
    if cap_w is None or cap_w >= uncapped:
        return 1.0
    return float((cap_w / uncapped) ** CAP_EXPONENT)


@dataclass(frozen=True, slots=True)
class PowerCapChoice:
    cap_w: float
    speed_factor: float
    power_w: float


def choose_power_cap(gpu: GpuType, max_slowdown: float) -> PowerCapChoice | None:
    """The lowest settable cap that keeps slowdown <= max_slowdown, or None if no cap helps."""
    uncapped = active_power_w(gpu)
    if max_slowdown <= 0 or gpu.power.cap_min_w >= uncapped:
        return None
    # Invert speed_factor: cap = uncapped * (1 - slowdown) ** (1 / exponent).
    ideal = uncapped * (1.0 - min(max_slowdown, 0.99)) ** (1.0 / CAP_EXPONENT)
    # Round up to whole watts so the slowdown bound still holds.
    cap = float(math.ceil(max(ideal, gpu.power.cap_min_w)))
    if cap >= uncapped:
        return None
    return PowerCapChoice(cap, speed_factor(gpu, cap), capped_power_w(gpu, cap))


def energy_per_work(gpu: GpuType, throughput: float, cap_w: float | None = None) -> float:
    """Joules per unit of work (watts per unit of relative throughput) on one busy GPU."""
    return capped_power_w(gpu, cap_w) / (throughput * speed_factor(gpu, cap_w))
