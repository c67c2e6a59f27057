"""Standby replicas: how a pool reaches the autoscaler's replica count when it keeps some asleep.

A standby replica is loaded but asleep (vLLM sleep mode level 1: weights offloaded to CPU
memory, the GPU's memory freed, the server process alive). Waking it takes seconds where a new
replica takes a cold start (minutes), so the pool's actuation follows one rule, the same in the
mixed simulator (`gpufleet.sim.mixed`) and on the live cluster (the ServingJob operator):

- **scale-up**: wake asleep replicas first; create new ones only for what the standbys cannot
  cover;
- **scale-down**: put replicas to sleep while the pool holds fewer than `standby` asleep, and
  remove the rest;
- **standby lowered** (or autoscaling off): asleep replicas beyond `standby` are removed.

The autoscaler's decision counts awake replicas only (the ones that serve); asleep ones never
count toward its replicas or its bounds. Standbys form only from scale-downs, so a pool never
holds more replicas, awake and asleep together, than it ran awake at its peak.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["StandbyPlan", "plan_standby"]


@dataclass(frozen=True, slots=True)
class StandbyPlan:
    """What to do to a pool: replicas to wake, put to sleep, create, and remove (awake ones
    `remove`, asleep ones `retire`)."""

    wake: int = 0
    sleep: int = 0
    create: int = 0
    remove: int = 0
    retire: int = 0

    def asleep_after(self, asleep: int) -> int:
        """Asleep replicas once the plan is carried out."""
        return asleep - self.wake - self.retire + self.sleep

    def total_after(self, awake: int, asleep: int) -> int:
        """Replicas, awake and asleep, once the plan is carried out (a Deployment's scale)."""
        return awake + asleep + self.create - self.remove - self.retire


def plan_standby(awake: int, asleep: int, desired: int, standby: int) -> StandbyPlan:
    """How a pool with `awake` serving and `asleep` standby replicas reaches `desired` awake
    ones while keeping at most `standby` asleep (module docstring)."""
    if min(awake, asleep, desired, standby) < 0:
        raise ValueError("replica counts must be >= 0")
    retire = max(0, asleep - standby)
    asleep -= retire
    if desired > awake:
        wake = min(asleep, desired - awake)
        return StandbyPlan(wake=wake, create=desired - awake - wake, retire=retire)
    fewer = awake - desired
    sleep = min(standby - asleep, fewer)
    return StandbyPlan(sleep=sleep, remove=fewer - sleep, retire=retire)
