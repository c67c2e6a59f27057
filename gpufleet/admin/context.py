"""What the admin API's routes work with, built once per process and held by the app."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpufleet.admin.auth import RateLimiter, Reviewer
from gpufleet.admin.fleet import FleetMemo
from gpufleet.admin.live import LiveFleet
from gpufleet.admin.nodes import NodeActions
from gpufleet.admin.policy import PolicyStore
from gpufleet.scheduler.policy_watch import PolicyWatch
from gpufleet.settings import AdminSettings


@dataclass
class AdminContext:
    """The admin API's collaborators. `owns_live`: the app starts and stops the informers
    (standalone); inside the operator the composition root does. `policy` is the live
    placement policy the scheduler decides with (shared with it inside the operator)."""

    settings: AdminSettings
    live: LiveFleet
    reviewer: Reviewer
    limiter: RateLimiter
    nodes: NodeActions
    policy: PolicyWatch
    policy_store: PolicyStore
    owns_live: bool = False
    fleet_memo: FleetMemo = field(default_factory=FleetMemo)
    closers: list[Callable[[], None]] = field(default_factory=list)
