"""What the ServingJob operator and the autoscaler exchange: the job's identity, and after a
tick the scaling changes made and the health of the metrics behind them, which the operator
turns into status and Events."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["MetricsHealth", "ScaleChange", "ServingJobRef"]


class ServingJobRef(Protocol):
    """The identity of a ServingJob: what an autoscaler keys its memory by and names it by."""

    @property
    def name(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    @property
    def uid(self) -> str: ...


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
