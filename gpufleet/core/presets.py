"""Named placement policies: the settings behind `performance`, `balanced` and `energy`.

One definition shared by the simulator, the live scheduler and the admin API, so a name means the
same weights everywhere. Presets are configuration only; every decision is `place`'s.

* `performance`: maximise admitted work; no energy weight, no consolidation, no power caps.
* `balanced`: the core's default weights; no power caps.
* `energy`: energy weighed against work, stronger consolidation, and every gang power-capped at
  a slowdown of at most 5 % while its GPU type has spare capacity (`PowerCapRule.spare_only`:
  no cap on a type that pending work is waiting for).
"""

from __future__ import annotations

from dataclasses import replace
from enum import StrEnum

from gpufleet.core.policy import (
    Policy,
    PowerCapRule,
    PowerDownRule,
    SolverSettings,
    TypeDelay,
    Weights,
)

__all__ = ["PRESET_NAMES", "Preset", "preset_policy"]


class Preset(StrEnum):
    PERFORMANCE = "performance"
    BALANCED = "balanced"
    ENERGY = "energy"


_PRESETS: dict[str, Policy] = {
    Preset.PERFORMANCE: Policy(weights=Weights(energy=0.0, consolidation=0.0)),
    Preset.BALANCED: Policy(),
    Preset.ENERGY: Policy(
        weights=Weights(energy=1.0, consolidation=0.2),
        power_caps=PowerCapRule(enabled=True, max_slowdown=0.05, cap_all=True, spare_only=True),
    ),
}

PRESET_NAMES: tuple[str, ...] = tuple(p.value for p in Preset)


def preset_policy(
    name: str,
    solver: SolverSettings | None = None,
    type_delay: TypeDelay | None = None,
    power_down: PowerDownRule | None = None,
) -> Policy:
    """The named preset, with the given solver settings, type delay and idle-node power-down
    rule (defaults otherwise: no delay, no power-down). Power-down is not part of any preset:
    it cordons nodes, which the cluster's other schedulers see, so it is always asked for."""
    try:
        policy = _PRESETS[name]
    except KeyError:
        raise ValueError(
            f"unknown policy preset {name!r}; choose from {', '.join(PRESET_NAMES)}"
        ) from None
    return replace(
        policy,
        solver=solver or SolverSettings(),
        type_delay=type_delay or TypeDelay(),
        power_down=power_down or PowerDownRule(),
    )
