"""The policies `gpufleet simulate --policies` accepts, by name.

gpufleet's own policies are the core `place` with the core's presets (`gpufleet.core.presets`:
`performance`, `balanced`, `energy`); the baselines come from `gpufleet.sim.baselines` and
`gpufleet.sim.kube_like`. `energy` is the energy preset with the core's idle-node power-down
rule on (`ENERGY_POWER_DOWN`), i.e. the live scheduler with `placement.preset: energy` and
`placement.power_down.enabled: true` and that group's defaults.

The solver engine is a parameter. The default is the product's default, CP-SAT (warm-started by
greedy, bounded by the policy's deterministic time so replays are reproducible); `greedy` runs
the greedy engine alone, which is faster on very long replays.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields, replace

from gpufleet.core.place import place
from gpufleet.core.policy import (
    Engine,
    MoveRule,
    Policy,
    PowerDownRule,
    SolverSettings,
    TypeDelay,
    Weights,
)
from gpufleet.core.presets import PRESET_NAMES, preset_policy
from gpufleet.sim.baselines import FifoBinPackPolicy, GavelLikePolicy, TiresiasLikePolicy
from gpufleet.sim.engine import SimPolicy
from gpufleet.sim.kube_like import KubeLikePolicy

__all__ = [
    "BASELINES",
    "ENERGY_POWER_DOWN",
    "GPUFLEET_POLICIES",
    "POLICY_NAMES",
    "ROUND_S",
    "make_policy",
]

# Round length of the preemptive baselines (Gavel's default round, scheduling.md §4).
ROUND_S = 360.0
# The baselines decide without the core's policy; moves off, so the engine does not compute the
# running gangs' progress (which only gpufleet's move rule reads) for them.
BASELINE = Policy(moves=MoveRule(enabled=False))

# The power-down rule of the `energy` policy: the core's defaults, switched on (30 min idle,
# two warm nodes per GPU type, 300 s boot).
ENERGY_POWER_DOWN = PowerDownRule(enabled=True)

GPUFLEET_POLICIES: tuple[str, ...] = PRESET_NAMES
BASELINES: tuple[str, ...] = ("kube", "fifo-binpack", "gavel", "tiresias")
POLICY_NAMES: tuple[str, ...] = GPUFLEET_POLICIES + BASELINES


def make_policy(
    name: str,
    clock: Callable[[], float],
    *,
    engine: Engine = Engine.CPSAT,
    seed: int = 0,
    type_delay: TypeDelay | None = None,
    weights: Mapping[str, float] | None = None,
) -> SimPolicy:
    """A named policy ready for the engine; `clock` is the simulation's clock (baselines).

    `seed` seeds CP-SAT for gpufleet's policies and the kube-like baseline's choice among
    equally scored nodes. `type_delay` switches on the core's delay scheduling across GPU types
    for gpufleet's policies (off by default; see bench/README.md for what it does to each
    target). `weights` replaces objective weights of gpufleet's policies by name (sensitivity
    runs)."""
    if name in GPUFLEET_POLICIES:
        power_down = ENERGY_POWER_DOWN if name == "energy" else None
        solver = SolverSettings(engine=engine, seed=seed)
        policy = preset_policy(name, solver, type_delay, power_down)
        if weights:
            unknown = sorted(set(weights) - {f.name for f in fields(Weights)})
            if unknown:
                raise ValueError(f"unknown objective weights: {', '.join(unknown)}")
            policy = replace(policy, weights=replace(policy.weights, **weights))
        # Elastic jobs grow and shrink replica by replica, as the live scheduler resizes them.
        return SimPolicy(name=name, place=place, policy=policy, resize=True)
    if name == "kube":
        return SimPolicy(name=name, place=KubeLikePolicy(seed), policy=BASELINE)
    if name in ("fifo-binpack", "best-fit"):
        return SimPolicy(name=name, place=FifoBinPackPolicy(), policy=BASELINE)
    if name == "gavel":
        return SimPolicy(name=name, place=GavelLikePolicy(clock), policy=BASELINE, round_s=ROUND_S)
    if name == "tiresias":
        return SimPolicy(
            name=name, place=TiresiasLikePolicy(clock), policy=BASELINE, round_s=ROUND_S
        )
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICY_NAMES)}")
