"""What the autoscaler reports to the ServingJob operator after a tick: the scaling changes made
and the health of the metrics behind them, which the operator turns into status and Events."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MetricsHealth", "ScaleChange"]


@dataclass(frozen=True, slots=True)
class ScaleChange:
    """A pool's replica count changed in this pass (by the autoscaler or the spec's bounds)."""

    pool: str
    from_replicas: int | None  # None: the Deployment was created
    to_replicas: int
    message: str


@dataclass(frozen=True, slots=True)
class MetricsHealth:
    """The autoscaler's view of its data after its last tick. `available is None`: no tick
    yet."""

    available: bool | None
    stale: bool = False
    message: str = ""
