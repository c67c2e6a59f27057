"""Phase 2 of the cycle: gangs with a pod on a failed or vanished node restart whole.

A node that stays NotReady for `grace` seconds (or disappears) has failed; every pod of a gang
with a member on it is deleted, forced (no kubelet will confirm), so the operator recreates the
whole gang and the scheduler places it again elsewhere.

Unless many nodes fail at once (`disruption`, the rule of Kubernetes' node-lifecycle
controller): when every zone has all its nodes NotReady, the likelier cause is the control
plane (an API server or etcd outage long enough for every heartbeat to lapse), not the GPUs,
so no gang is restarted until a node is Ready again, and the nodes still NotReady then get a
full grace period from that moment. A zone with at least `unhealthy_zone_threshold` of its nodes
NotReady (and more than two) restarts the gangs of one failed node per
`partial_disruption_heal_interval_s` if it has more than `large_zone_nodes` nodes, and none if
it has fewer. Pausing and resuming are logged and reported (an Event on the scheduler's Lease).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gpufleet.model.contract import names
from gpufleet.model.contract.power import PowerState
from gpufleet.scheduler.binder import Binder
from gpufleet.scheduler.cache import CachedState
from gpufleet.scheduler.deletions import Deletions
from gpufleet.scheduler.nodes import node_ready
from gpufleet.scheduler.pods import PodFacts

log = logging.getLogger("gpufleet.scheduler")

NODE_FAILURE_REASON = "NodeFailure"
HEALING_PAUSED = "NodeHealingPaused"
HEALING_SLOWED = "NodeHealingSlowed"
HEALING_RESUMED = "NodeHealingResumed"
ZONE_LABEL = "topology.kubernetes.io/zone"
# Kubernetes' label for nodes left out of the zones' disruption counts.
EXCLUDE_DISRUPTION_LABEL = "node.kubernetes.io/exclude-disruption"

Notify = Callable[[str, str, str], None]  # (type, reason, message)


class ZoneState(StrEnum):
    NORMAL = "Normal"
    PARTIAL = "PartialDisruption"
    FULL = "FullDisruption"


@dataclass(frozen=True, slots=True)
class DisruptionRule:
    """When many NotReady nodes slow or stop restarts (`SchedulerSettings`)."""

    unhealthy_zone_threshold: float = 0.55
    partial_interval_s: float = 100.0
    large_zone_nodes: int = 50


@dataclass(frozen=True, slots=True)
class Zone:
    nodes: int
    not_ready: int

    def state(self, rule: DisruptionRule) -> ZoneState:
        if self.nodes and self.not_ready == self.nodes:
            return ZoneState.FULL
        if self.not_ready > 2 and self.not_ready >= rule.unhealthy_zone_threshold * self.nodes:
            return ZoneState.PARTIAL
        return ZoneState.NORMAL


def zone_of(node: Mapping[str, Any]) -> str:
    return str(((node.get("metadata") or {}).get("labels") or {}).get(ZONE_LABEL, ""))


def counted(node: Mapping[str, Any]) -> bool:
    """Whether the node counts in its zone's health: not excluded, not switched off (or
    booting) by idle-node power-down, where NotReady is expected."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    if EXCLUDE_DISRUPTION_LABEL in labels:
        return False
    return labels.get(names.POWER_STATE_LABEL) not in (PowerState.OFF, PowerState.WAKING)


def zones(nodes: Iterable[Mapping[str, Any]]) -> dict[str, Zone]:
    """Nodes and NotReady nodes per zone (nodes without a zone label form the zone "")."""
    total: dict[str, int] = defaultdict(int)
    down: dict[str, int] = defaultdict(int)
    for node in nodes:
        if not counted(node):
            continue
        zone = zone_of(node)
        total[zone] += 1
        down[zone] += not node_ready(node)
    return {z: Zone(total[z], down[z]) for z in total}


@dataclass(frozen=True, slots=True)
class HealPlan:
    """Which failed nodes' gangs restart now; `paused` when none may (every zone in full
    disruption); `slowed` names the zones in partial disruption."""

    heal: frozenset[str]
    paused: bool = False
    slowed: tuple[str, ...] = ()
    held: frozenset[str] = field(default_factory=frozenset)


def plan_healing(
    zone_counts: Mapping[str, Zone],
    failed: Mapping[str, tuple[str, float]],
    last_healed: Mapping[str, float],
    now: float,
    rule: DisruptionRule,
    done: Iterable[str] = (),
) -> HealPlan:
    """The node-lifecycle controller's zone rule over `failed` (node -> (zone, NotReady since)):
    every zone fully disrupted -> none; a zone in partial disruption -> none if it has at most
    `large_zone_nodes` nodes, else the failed node waiting longest, not among `done` (nodes
    whose gangs restarted already), once `partial_interval_s` has passed since the zone's last
    (`last_healed`); otherwise (a normal zone, or one fully disrupted while another is not)
    every failed node. Nodes in `done` stay healed (a gang bound there since restarts too)."""
    states = {z: counts.state(rule) for z, counts in zone_counts.items()}
    if states and all(s is ZoneState.FULL for s in states.values()):
        return HealPlan(frozenset(), paused=True, held=frozenset(failed))
    slowed = tuple(sorted(z for z, s in states.items() if s is ZoneState.PARTIAL))
    done = set(done)
    heal: set[str] = set()
    by_zone: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for node, (zone, since) in failed.items():
        if zone in slowed and node not in done:
            by_zone[zone].append((since, node))
        else:
            heal.add(node)
    for zone, nodes in by_zone.items():
        large = zone_counts[zone].nodes > rule.large_zone_nodes
        last = last_healed.get(zone)
        if large and (last is None or now - last >= rule.partial_interval_s):
            heal.add(min(nodes)[1])
    return HealPlan(frozenset(heal), slowed=slowed, held=frozenset(failed) - heal)


class NodeHealer:
    """Remembers since when each node is not ready; restarts the gangs of failed nodes."""

    def __init__(
        self,
        binder: Binder,
        deletions: Deletions,
        grace: float,
        clock: Callable[[], float],
        rule: DisruptionRule | None = None,
        notify: Notify | None = None,
    ) -> None:
        self.binder = binder
        self.deletions = deletions
        self.grace = grace
        self.clock = clock
        self.rule = rule or DisruptionRule()
        self.notify = notify
        self._not_ready_since: dict[str, float] = {}
        self._last_healed: dict[str, float] = {}  # zone -> when a failed node's gangs restarted
        self._healed: set[str] = set()  # failed nodes whose gangs restarted (until Ready again)
        self._mode: tuple[bool, tuple[str, ...]] = (False, ())  # (paused, zones slowed)

    def _failed_nodes(self, nodes: Mapping[str, Mapping[str, Any]]) -> set[str]:
        """Nodes not ready for `grace` seconds; forgets nodes that are gone."""
        now = self.clock()
        for name, node in nodes.items():
            if node_ready(node):
                self._not_ready_since.pop(name, None)
            else:
                self._not_ready_since.setdefault(name, now)
        failed = {n for n, t in self._not_ready_since.items() if now - t >= self.grace}
        for name in list(self._not_ready_since):
            if name not in nodes:
                self._not_ready_since.pop(name)
        self._healed &= failed
        return failed

    def _plan(self, nodes: Mapping[str, Mapping[str, Any]], cycle: int) -> HealPlan:
        """The failed nodes whose gangs may restart now (`plan_healing`); reports changes of
        mode, and restarts the grace period of every node still NotReady when a pause ends."""
        failed = self._failed_nodes(nodes)
        now = self.clock()
        counts = zones(nodes.values())
        plan = plan_healing(
            counts,
            {n: (zone_of(nodes[n]), self._not_ready_since[n]) for n in failed},
            self._last_healed,
            now,
            self.rule,
            self._healed,
        )
        mode = (plan.paused, plan.slowed)
        if mode != self._mode:
            was_paused = self._mode[0]
            self._mode = mode
            if was_paused and not plan.paused:
                # As the controller does when it leaves its disruption mode: the nodes that are
                # still NotReady were not heard from because of the outage, so their grace
                # starts now (no restart in this cycle).
                for name in self._not_ready_since:
                    self._not_ready_since[name] = now
                plan = HealPlan(frozenset(), slowed=plan.slowed, held=plan.held | plan.heal)
            self._report(cycle, plan, counts)
        for node in plan.heal - self._healed:
            self._last_healed[zone_of(nodes[node])] = now
        self._healed |= plan.heal
        return plan

    def _report(self, cycle: int, plan: HealPlan, counts: Mapping[str, Zone]) -> None:
        down = sum(z.not_ready for z in counts.values())
        total = sum(z.nodes for z in counts.values())
        if plan.paused:
            kind, reason = "Warning", HEALING_PAUSED
            text = (
                f"all {total} nodes are NotReady (every zone in full disruption): restarting "
                "no gangs until a node is Ready again (likely a control-plane outage)"
            )
        elif plan.slowed:
            kind, reason = "Warning", HEALING_SLOWED
            text = (
                f"zone(s) {', '.join(z or '<none>' for z in plan.slowed)} in partial "
                f"disruption ({down} of {total} nodes NotReady): restarting the gangs of at "
                f"most one failed node per {self.rule.partial_interval_s:g}s in zones of more "
                f"than {self.rule.large_zone_nodes} nodes, none in smaller ones"
            )
        else:
            kind, reason = "Normal", HEALING_RESUMED
            text = f"{down} of {total} nodes NotReady: restarting the gangs of failed nodes"
        log.warning("cycle=%d %s: %s", cycle, reason, text)
        if self.notify is not None:
            try:
                self.notify(kind, reason, text)
            except Exception:  # an Event is a report: never let it stop the cycle
                log.exception("cycle=%d posting the %s Event failed", cycle, reason)

    def restart_broken(
        self, state: CachedState, facts: Mapping[str, PodFacts], cycle: int
    ) -> list[str]:
        """Delete every pod of gangs that have a pod on a failed or vanished node; the gangs."""
        nodes = {n["metadata"]["name"]: n for n in state.nodes}
        failed_nodes = self._plan(nodes, cycle).heal
        broken: dict[str, str] = {}
        members: dict[str, list[str]] = defaultdict(list)
        for f in facts.values():
            if not f.ours or f.terminal:
                continue
            members[f.gang].append(f.key)
            where = f.node
            if where is None or f.deleting:
                continue
            if where not in nodes:
                broken[f.gang] = f"node {where} disappeared"
            elif where in failed_nodes:
                broken[f.gang] = f"node {where} is not ready"
        for gid, why in sorted(broken.items()):
            log.warning("cycle=%d gang %s: %s; restarting the whole gang", cycle, gid, why)
            # Forced: no kubelet will confirm the deletion of pods on a dead node.
            self.deletions.remember(members[gid])
            self.binder.delete_pods(members[gid], NODE_FAILURE_REASON, why, force=True)
        return sorted(broken)
