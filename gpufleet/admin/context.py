"""What the admin API's routes work with, built once per process and held by the app."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpufleet.admin.auth import RateLimiter, Reviewer
from gpufleet.admin.fleet import FleetMemo
from gpufleet.admin.live import LiveFleet
from gpufleet.admin.nodes import NodeActions
from gpufleet.admin.settings import AdminSettings
from gpufleet.core.policy import Policy


@dataclass(frozen=True, slots=True)
class LivePolicy:
    """The placement policy the scheduler decides with now, and its preset's name."""

    name: str
    policy: Policy


@dataclass
class AdminContext:
    """The admin API's collaborators. `owns_live`: the app starts and stops the informers
    (standalone); inside the operator the composition root does."""

    settings: AdminSettings
    live: LiveFleet
    reviewer: Reviewer
    limiter: RateLimiter
    nodes: NodeActions
    policy: Callable[[], LivePolicy]
    owns_live: bool = False
    fleet_memo: FleetMemo = field(default_factory=FleetMemo)
    closers: list[Callable[[], None]] = field(default_factory=list)
