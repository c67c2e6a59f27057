"""Cluster-free autoscaling loop: replay a trace through the serving model and a controller.

Every `period_s` the loop advances the model, takes one `MetricsSample` per pool (a Prometheus
scrape), hands each pool's recent window to the controller and applies the replica counts it
returns. `PolicyController` wraps gpufleet's pure policy (`gpufleet.core.autoscaling.decide`),
carrying its explicit state between calls the way the live autoscaler
(`gpufleet.autoscaler.serving_autoscaler`) does; `StaticController` holds fixed counts.
Baselines implement the same `Controller` protocol.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gpufleet.core.autoscaling import (
    AutoscalerSettings,
    AutoscalerState,
    PoolDecision,
    PoolInput,
    ScalingInput,
    Slo,
    decide,
)
from gpufleet.core.autoscaling_types import MetricsSample, PoolRole
from gpufleet.sim.serving.model import RequestOutcome, ServingModel, slo_attainment

__all__ = [
    "Controller",
    "PolicyController",
    "PoolBounds",
    "PoolView",
    "ReplayResult",
    "StaticController",
    "replay",
]


@dataclass(frozen=True, slots=True)
class PoolView:
    """What a controller sees of one pool at a decision time."""

    name: str
    role: PoolRole
    current_replicas: int
    ready_replicas: int
    window: tuple[MetricsSample, ...]


class Controller(Protocol):
    """Decides replica counts from pool views; may keep its own state between calls."""

    def __call__(self, now: float, pools: Mapping[str, PoolView]) -> Mapping[str, int]: ...


@dataclass(frozen=True, slots=True)
class PoolBounds:
    min_replicas: int = 1
    max_replicas: int = 64


class StaticController:
    """Fixed replica counts (static provisioning)."""

    def __init__(self, replicas: Mapping[str, int]) -> None:
        self.replicas = dict(replicas)

    def __call__(self, now: float, pools: Mapping[str, PoolView]) -> Mapping[str, int]:
        return self.replicas


class PolicyController:
    """gpufleet's policy in a loop: builds `ScalingInput`, keeps `AutoscalerState`."""

    def __init__(
        self,
        model: ServingModel,
        slo: Slo,
        bounds: Mapping[str, PoolBounds],
        settings: AutoscalerSettings | None = None,
    ) -> None:
        self.slo = slo
        self.bounds = dict(bounds)
        self.settings = settings or AutoscalerSettings()
        self.state = AutoscalerState()
        self.capacity = {
            model.config.prefill.name: model.config.prefill.profile.capacity(),
            model.config.decode.name: model.config.decode.profile.capacity(),
        }
        self.decisions: list[PoolDecision] = []

    def __call__(self, now: float, pools: Mapping[str, PoolView]) -> Mapping[str, int]:
        inputs = ScalingInput(
            now=now,
            slo=self.slo,
            pools=tuple(
                PoolInput(
                    name=v.name,
                    role=v.role,
                    current_replicas=v.current_replicas,
                    min_replicas=self.bounds[v.name].min_replicas,
                    max_replicas=self.bounds[v.name].max_replicas,
                    capacity=self.capacity[v.name],
                    window=v.window,
                    ready_replicas=v.ready_replicas,
                )
                for v in pools.values()
            ),
        )
        decision, self.state = decide(inputs, self.state, self.settings)
        self.decisions.extend(d for d in decision.pools if d.changed)
        return {d.name: d.desired_replicas for d in decision.pools}


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """Outcome of one replay: per-request latencies, cost and the replica timeline."""

    outcomes: tuple[RequestOutcome, ...]
    unfinished: int
    gpu_seconds: float
    end_s: float
    timeline: tuple[tuple[float, str, int], ...] = field(default=())  # (time, pool, replicas)

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600.0

    def attainment(self, slo: Slo) -> float:
        """Fraction of all requests (unfinished ones count as misses) meeting both SLOs."""
        total = len(self.outcomes) + self.unfinished
        if total == 0:
            return 1.0
        met = slo_attainment(self.outcomes, slo.ttft_p90_s, slo.itl_p90_s) * len(self.outcomes)
        return met / total


def replay(
    model: ServingModel,
    controller: Controller,
    *,
    period_s: float = 15.0,
    window_s: float = 180.0,
    drain_limit_s: float = 1800.0,
) -> ReplayResult:
    """Run the model to the end of its trace under `controller`.

    Stops when every request has finished, or `drain_limit_s` after the last arrival
    (remaining requests are reported as unfinished). GPU time is billed until the stop.
    """
    windows: dict[str, deque[MetricsSample]] = {name: deque() for name in model.pool_names}
    roles = {
        model.config.prefill.name: PoolRole.PREFILL,
        model.config.decode.name: PoolRole.DECODE,
    }
    timeline: list[tuple[float, str, int]] = [
        (0.0, name, model.replicas(name)) for name in model.pool_names
    ]
    stop = model.last_arrival_s + drain_limit_s
    t = 0.0
    first = True
    while first or (not model.done() and t < stop):
        # The first tick is at time 0, before any scrape: the controller sees empty windows
        # (a freshly started autoscaler), later ticks see one more sample per pool.
        if not first:
            t += period_s
            model.advance_to(t)
        views: dict[str, PoolView] = {}
        for name in model.pool_names:
            window = windows[name]
            if not first:
                window.append(model.sample(name))
            while window and window[0].timestamp <= t - window_s:
                window.popleft()
            views[name] = PoolView(
                name=name,
                role=roles[name],
                current_replicas=model.replicas(name),
                ready_replicas=model.ready_replicas(name),
                window=tuple(window),
            )
        desired = controller(t, views)
        for name, n in desired.items():
            if n != model.replicas(name):
                model.set_replicas(name, n)
                timeline.append((t, name, n))
        first = False
    outcomes = model.outcomes()
    return ReplayResult(
        outcomes=outcomes,
        unfinished=model.num_requests - len(outcomes),
        gpu_seconds=model.gpu_seconds(),
        end_s=model.now,
        timeline=tuple(timeline),
    )
