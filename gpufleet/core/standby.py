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

`queue_wake` is a second, request-driven trigger (what a router or gateway that sees queued
requests at once could do, like Knative's activator or KEDA's HTTP add-on scaling on in-flight
requests): wake standbys as soon as the queued prefill work exceeds what the awake replicas
clear within a horizon (the pool's wake time: a standby woken now helps only after it), without
waiting for a metrics scrape and the autoscaler's period. Only the mixed simulator uses it; the
live operator does not (it wakes standbys on the autoscaler's decisions only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["StandbyPlan", "plan_standby", "queue_wake"]


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


def queue_wake(
    backlog_tokens: float, awake: int, asleep: int, tokens_per_s: float, horizon_s: float
) -> int:
    """Standbys to wake now: enough that `awake` replicas plus the woken ones, each prefilling
    `tokens_per_s`, clear `backlog_tokens` queued prompt tokens within `horizon_s`; at most
    `asleep` (module docstring)."""
    if min(awake, asleep) < 0 or min(backlog_tokens, tokens_per_s, horizon_s) < 0:
        raise ValueError("counts, backlog, rate and horizon must be >= 0")
    if tokens_per_s == 0 or horizon_s == 0:
        raise ValueError("tokens_per_s and horizon_s must be > 0")
    needed = math.ceil(backlog_tokens / (tokens_per_s * horizon_s) - 1e-9)
    return max(0, min(asleep, needed - awake))
