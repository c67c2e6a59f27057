"""Waiting for a switched-off node: when a gang should not start on slower powered GPUs.

With idle-node power-down (power_down.py) the fastest GPUs are sometimes on nodes that are off
or still booting, while slower powered GPUs are free. Starting there is costly: a running gang
reaches a faster type later only by a restart (moves.py), paid in restart time and unsaved
progress, and a long job may keep the slow type for its whole run. `boot_holds` decides, for
each pending gang, whether to hold it for a node that would boot, counting the boot:

    start now on the fastest powered type that fits:  E * s_max / s_now
    wait for a boot of `w` s, then run on type t:     w + E * s_max / s_t

where `s` is the gang's per-GPU speed on a type and `E` the expected run time of a new gang on
its fastest acceptable type. The core never reads a job's own length, so `E` is the policy's
prior (`PowerDownRule.expected_run_s`). A gang is held for the option with the least expected
completion time when that beats starting now; held gangs reserve the nodes they wait for, in the
greedy order, so two gangs never wait for the same GPUs. A gang that fits on no powered node is
not held here: `plan_power` wakes nodes for it as before.

`place()` leaves the held gangs pending (WaitingForFasterGpuType, naming the nodes) and
`plan_power` wakes the nodes they wait for, from the same function on the same inputs, so the
live scheduler and the simulator hold and wake alike. The caller lists the switched-off and
booting nodes in `Snapshot.boot_wait_s` (`boot_waits` builds it from the power states).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gpufleet.core.decision import GangPlacement
from gpufleet.core.demand import Gang
from gpufleet.core.greedy import Memo, commit, greedy_order, plan_gang, usable_types
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.core.valuation import base_throughput

__all__ = ["BootHold", "boot_holds"]


@dataclass(frozen=True, slots=True)
class BootHold:
    """A gang held for switched-off or booting nodes: where it would run, and the wait."""

    placement: GangPlacement
    wait_s: float
    instead_of: str  # the powered type it would have started on

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted({r.node for r in self.placement.replicas}))


def boot_holds(snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> dict[str, BootHold]:
    """The pending gangs to hold for nodes in `snapshot.boot_wait_s` (module docstring)."""
    waits = snapshot.boot_wait_s
    rule = policy.power_down
    if not rule.enabled or not waits or rule.expected_run_s <= 0 or not pending:
        return {}
    powered = ClusterState(snapshot)
    booting = ClusterState(_only_booting(snapshot, waits))
    memo, boot_memo = Memo(), Memo()
    holds: dict[str, BootHold] = {}
    for gang in greedy_order(pending):
        if gang.mig_profile is not None:
            continue  # slices are small and short-lived: never worth a boot
        speeds = {t: base_throughput(gang, snapshot.catalog[t]) for t in gang.type_names()}
        now = [
            t
            for t in usable_types(powered, gang, policy, memo)
            if plan_gang(powered, gang, t, policy, memo) is not None
        ]
        if not now:
            continue
        fastest_now = max(now, key=lambda t: speeds[t])
        work = rule.expected_run_s * max(speeds.values())  # E * s_max
        best = work / speeds[fastest_now]
        chosen = None
        for t in usable_types(booting, gang, policy, boot_memo):
            if speeds[t] <= speeds[fastest_now]:
                continue
            plan = plan_gang(booting, gang, t, policy, boot_memo)
            if plan is None:
                continue
            wait = max(waits[r.node] for r in plan.replicas)
            if wait + work / speeds[t] < best:
                best, chosen = wait + work / speeds[t], (plan, wait)
        if chosen is not None:
            plan, wait = chosen
            holds[gang.id] = BootHold(commit(booting, plan, policy), wait, fastest_now)
    return holds


def _only_booting(snapshot: Snapshot, waits: Mapping[str, float]) -> Snapshot:
    """The snapshot with the switched-off and booting nodes schedulable and no other node."""
    nodes = tuple(replace(n, schedulable=n.name in waits) for n in snapshot.nodes)
    return replace(snapshot, nodes=nodes)
