"""The policies `gpufleet simulate --policies` accepts, by name.

gpufleet's own policies are the core `place` with three settings of the core `Policy`; the
baselines come from `gpufleet.sim.baselines`. The presets below are configuration only (weights,
power-cap rule, solver engine): every decision is the core's.

* `performance`: maximise admitted work; no energy weight, no power caps, nodes stay on.
* `balanced`: the core's default weights; no power caps; nodes stay on.
* `energy`: energy weighed against work, every gang power-capped at <= 5 % slowdown, stronger
  consolidation, and empty nodes switched off after the engine's idle grace period.

The solver engine is a parameter. The default is the product's default, CP-SAT (warm-started by
greedy, bounded by the policy's deterministic time so replays are reproducible); `greedy` runs
the greedy engine alone, which is faster on very long replays.
"""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, PowerCapRule, SolverSettings, TypeDelay, Weights
from gpufleet.sim.baselines import (
    FifoBinPackPolicy,
    GavelLikePolicy,
    KubeLikePolicy,
    TiresiasLikePolicy,
)
from gpufleet.sim.engine import SimPolicy

__all__ = ["BASELINES", "GPUFLEET_POLICIES", "POLICY_NAMES", "ROUND_S", "make_policy"]

# Round length of the preemptive baselines (Gavel's default round, scheduling.md §4).
ROUND_S = 360.0

GPUFLEET_POLICIES: tuple[str, ...] = ("performance", "balanced", "energy")
BASELINES: tuple[str, ...] = ("kube", "fifo-binpack", "gavel", "tiresias")
POLICY_NAMES: tuple[str, ...] = GPUFLEET_POLICIES + BASELINES


def _core_policy(name: str, engine: Engine, seed: int, delay: TypeDelay) -> Policy:
    solver = SolverSettings(engine=engine, seed=seed)
    if name == "performance":
        return Policy(
            weights=Weights(energy=0.0, consolidation=0.0), solver=solver, type_delay=delay
        )
    if name == "balanced":
        return Policy(solver=solver, type_delay=delay)
    if name == "energy":
        return Policy(
            weights=Weights(energy=1.0, consolidation=0.2),
            power_caps=PowerCapRule(enabled=True, max_slowdown=0.05, cap_all=True),
            solver=solver,
            type_delay=delay,
        )
    raise ValueError(f"unknown gpufleet policy {name!r}")


def make_policy(
    name: str,
    clock: Callable[[], float],
    *,
    engine: Engine = Engine.CPSAT,
    seed: int = 0,
    type_delay: TypeDelay | None = None,
) -> SimPolicy:
    """A named policy ready for the engine; `clock` is the simulation's clock (baselines).

    `type_delay` switches on the core's delay scheduling across GPU types for gpufleet's
    policies (off by default; see bench/README.md for what it does to each target)."""
    if name in GPUFLEET_POLICIES:
        return SimPolicy(
            name=name,
            place=place,
            policy=_core_policy(name, engine, seed, type_delay or TypeDelay()),
            power_down=name == "energy",
        )
    if name == "kube":
        return SimPolicy(name=name, place=KubeLikePolicy())
    if name in ("fifo-binpack", "best-fit"):
        return SimPolicy(name=name, place=FifoBinPackPolicy())
    if name == "gavel":
        return SimPolicy(name=name, place=GavelLikePolicy(clock), round_s=ROUND_S)
    if name == "tiresias":
        return SimPolicy(name=name, place=TiresiasLikePolicy(clock), round_s=ROUND_S)
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICY_NAMES)}")
