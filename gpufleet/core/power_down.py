"""Idle-node power-down: which empty nodes to switch off, which to wake, which have booted.

A pure function of the snapshot after a decision, the gangs the decision left pending, each
node's power state and the caller's clock (`plan_power`), shared by the live scheduler and the
simulator so both switch the same nodes for the same reasons:

1. **Booted.** A node woken `boot_s` ago is usable again.
2. **Wake.** The gangs the decision holds for a boot (boot_wait.py, on the same inputs) get
   the nodes they wait for; the other pending gangs are placed, as a what-if with the greedy
   engine, first on the powered nodes and those already booting, then on the switched-off
   ones: the switched-off nodes the what-if needs are woken (never more than the demand
   needs), and each gang that waits for booting nodes is named with them. Then the running
   gangs: the moves the core would make (moves.py, its rule and price) with the switched-off
   nodes on, each gang's gain counted from the end of a boot; the nodes those moves land on
   stay on or are woken (the next decision moves the gangs). A decision moves gangs only onto
   powered nodes, so without this a gang that started on a slow type while the fast nodes were
   busy never reached them once they had gone off.
3. **Switch off** (the consolidation view): a powered node that holds nothing, has been empty
   for `idle_s` and is not needed by the what-ifs is switched off, longest idle first, except
   `warm_nodes_per_type` empty powered nodes of each GPU type kept as headroom for arrivals.
   A node holding anything (any running replica, a placement or move of this decision, or
   whatever the caller knows runs there: `NodePower.empty_since` None) is never switched off.

The states are the contract's (`gpufleet.model.contract.power.PowerState`), as the live
scheduler marks them on nodes. A switched-off or booting node must be unschedulable in the
snapshot (the caller cordons it), so placement never uses it while it is off: "not used while
another fits" follows, because it is woken only for gangs that fit nowhere else (pending,
or moving to a faster type).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpufleet.core.boot_wait import boot_holds
from gpufleet.core.borrowing import growth_job
from gpufleet.core.decision import Decision, GangPlacement, Move
from gpufleet.core.demand import Gang
from gpufleet.core.greedy import Memo, place_greedy
from gpufleet.core.moves import plan_moves
from gpufleet.core.policy import Engine, Policy, PowerDownRule, SolverSettings
from gpufleet.core.snapshot import RunningGang, RunProgress, Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.model.contract.power import PowerState as PowerState
from gpufleet.model.inventory import Node
from gpufleet.model.mig import MigLayout

__all__ = ["NodePower", "PowerPlan", "PowerState", "boot_waits", "plan_power"]


@dataclass(frozen=True, slots=True)
class NodePower:
    """One node's power state as the caller knows it (times on the caller's clock).

    `since`: when the node entered `state` (for WAKING, when it was woken).
    `empty_since`: for a powered node, since when nothing runs on it; None while anything does
    (the caller counts every pod it knows of, not only GPU holders).
    """

    state: PowerState = PowerState.ON
    since: float = 0.0
    empty_since: float | None = None


@dataclass(frozen=True)
class PowerPlan:
    """What to switch: nodes to switch off, to wake, and woken nodes that have booted."""

    power_off: tuple[str, ...] = ()
    wake: tuple[str, ...] = ()
    booted: tuple[str, ...] = ()
    # Pending gang id -> the switched-off or booting nodes it waits for.
    waiting_for: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # The earliest time the plan can change with nothing else happening (a node reaching its
    # idle time, a boot ending); None: never.
    next_change_s: float | None = None

    @property
    def changes(self) -> bool:
        return bool(self.power_off or self.wake or self.booted)


def plan_power(
    snapshot: Snapshot,
    pending: Sequence[Gang],
    power: Mapping[str, NodePower],
    now: float,
    policy: Policy,
    decision: Decision | None = None,
) -> PowerPlan:
    """The power plan after `decision` (placed on `snapshot`) left `pending` waiting.

    `power` gives the state of every node the caller tracks (missing: powered, not known to be
    empty). With the policy's rule off, nothing is switched off and only booting nodes are
    woken up to the end (a rule turned off mid-way leaves no node off for good: every node
    switched off is woken).
    """
    rule = policy.power_down
    after = _after(snapshot, decision) if decision is not None else snapshot
    booted = tuple(
        sorted(
            n for n, p in power.items() if p.state is PowerState.WAKING and _booted(p, now, rule)
        )
    )
    off = {n for n, p in power.items() if p.state is PowerState.OFF and after.has_node(n)}
    if not rule.enabled:
        return PowerPlan(wake=tuple(sorted(off)), booted=booted)
    waking = {
        n
        for n, p in power.items()
        if p.state is PowerState.WAKING and n not in booted and after.has_node(n)
    }
    busy = _held_nodes(after)
    idle = _idle_nodes(after, power, busy)
    # 2. Wake: the pending gangs on powered and booting nodes first, then on switched-off ones.
    # (Nothing to learn when no node is off or booting and none is idle long enough to go.)
    first: dict[str, GangPlacement] = {}
    second: dict[str, GangPlacement] = {}
    moves: list[Move] = []
    if off or waking or booted or any(since + rule.idle_s <= now for since, _ in idle):
        what_if = _what_if_policy(policy)
        waits = boot_waits(power, now, rule)
        held = boot_holds(replace(after, boot_wait_s=waits), pending, policy)
        first = {gid: h.placement for gid, h in held.items()}
        rest = [g for g in pending if g.id not in held]
        first |= _place(_with_held(after, first), waking | set(booted), rest, what_if)
        rest = [g for g in rest if g.id not in first]
        second = _place(_with_held(after, first), off | waking | set(booted), rest, what_if)
        # Moves are demand too, after the pending gangs: the nodes a running gang would move
        # to (the core's own rule and price, moves.py) stay on or are woken. Without this,
        # empty fast nodes went off, and the gangs that had started on slow types while they
        # were busy never reached them (a decision moves only onto powered nodes).
        placed = first | second
        waiting = [g for g in pending if g.id not in placed]
        moves = _move_what_if(
            _with_held(after, placed), off | waking | set(booted), waiting, what_if
        )
    used = _nodes_of(first.values()) | _nodes_of(second.values())
    used |= _nodes_of(m.placement for m in moves)
    wake = tuple(sorted(used & off))
    waiting_for = {
        gid: tuple(sorted(_nodes_of([p]) & (off | waking)))
        for gid, p in {**first, **second}.items()
        if _nodes_of([p]) & (off | waking)
    }
    # 3. Switch off idle nodes nobody needs, keeping the headroom.
    empty: dict[str, list[tuple[float, str]]] = {}
    for empty_since, name in idle:
        if name not in used:
            empty.setdefault(after.node(name).gpu_type, []).append((empty_since, name))
    soonest: float | None = None
    power_off: list[str] = []
    for _, nodes in sorted(empty.items()):
        spare = len(nodes) - rule.warm_nodes_per_type
        for empty_since, name in sorted(nodes):
            if spare <= 0:
                break
            due = empty_since + rule.idle_s
            if due <= now:
                power_off.append(name)
                spare -= 1
            elif soonest is None or due < soonest:
                soonest = due
    # Boots in progress end `boot_s` after their wake; the nodes woken now, `boot_s` from now.
    ends = [power[n].since + rule.boot_s for n in waking] + [now + rule.boot_s for n in wake]
    next_change = min([*ends, *([soonest] if soonest is not None else [])], default=None)
    return PowerPlan(tuple(sorted(power_off)), wake, booted, waiting_for, next_change)


def boot_waits(power: Mapping[str, NodePower], now: float, rule: PowerDownRule) -> dict[str, float]:
    """Seconds until each switched-off or booting node would be usable if woken `now`
    (`Snapshot.boot_wait_s`): a full boot for one that is off, what is left of it for one
    booting."""
    out: dict[str, float] = {}
    for name, p in power.items():
        if p.state is PowerState.OFF:
            out[name] = rule.boot_s
        elif p.state is PowerState.WAKING:
            out[name] = max(0.0, p.since + rule.boot_s - now)
    return out


def _idle_nodes(
    snapshot: Snapshot, power: Mapping[str, NodePower], busy: set[str]
) -> list[tuple[float, str]]:
    """(empty since, name) of the powered, schedulable nodes that hold nothing."""
    out = []
    for node in snapshot.nodes:
        p = power.get(node.name)
        if p is None or p.state is not PowerState.ON or p.empty_since is None:
            continue
        if node.schedulable and node.name not in busy:
            out.append((p.empty_since, node.name))
    return out


def _booted(p: NodePower, now: float, rule: PowerDownRule) -> bool:
    return now >= p.since + rule.boot_s


def _what_if_policy(policy: Policy) -> Policy:
    """The policy of the wake what-if: greedy, no preemption (a gang that would preempt is
    placed by the decision itself, not by waking a node)."""
    return replace(policy, allow_preemption=False, solver=SolverSettings(engine=Engine.GREEDY))


def _place(
    snapshot: Snapshot, opened: set[str], gangs: Sequence[Gang], policy: Policy
) -> dict[str, GangPlacement]:
    """Greedy placements of `gangs` with the nodes in `opened` made schedulable."""
    if not gangs:
        return {}
    nodes = tuple(replace(n, schedulable=True) if n.name in opened else n for n in snapshot.nodes)
    view = replace(snapshot, nodes=nodes) if opened else snapshot
    return place_greedy(ClusterState(view), gangs, policy)


def _move_what_if(
    snapshot: Snapshot, opened: set[str], waiting: Sequence[Gang], policy: Policy
) -> list[Move]:
    """The moves the core would make with the nodes in `opened` schedulable, each gang's gain
    counted from when a switched-off node would be usable (`boot_s` from now: it keeps running
    where it is meanwhile), so a wake is never paid for a move that gains less than the boot."""
    if not policy.moves.enabled or not any(r.progress is not None for r in snapshot.running):
        return []
    boot_s = policy.power_down.boot_s if opened else 0.0
    running = tuple(
        r if r.progress is None else replace(r, progress=_later(r.progress, boot_s))
        for r in snapshot.running
    )
    nodes = tuple(replace(n, schedulable=True) if n.name in opened else n for n in snapshot.nodes)
    view = replace(snapshot, nodes=nodes, running=running)
    return plan_moves(ClusterState(view), frozenset(), policy, Memo(), waiting)


def _later(progress: RunProgress, wait_s: float) -> RunProgress:
    return replace(progress, expected_remaining_s=max(0.0, progress.expected_remaining_s - wait_s))


def _nodes_of(placements: Iterable[GangPlacement]) -> set[str]:
    return {r.node for p in placements for r in p.replicas}


def _held_nodes(snapshot: Snapshot) -> set[str]:
    return {r.node for g in snapshot.running for r in g.replicas}


def _with_held(snapshot: Snapshot, placements: Mapping[str, GangPlacement]) -> Snapshot:
    """`snapshot` with `placements` running, on the MIG layouts they need: a what-if placement
    may take an empty MIG-mode GPU whole, or cut a whole one, as the decision would."""
    if not placements:
        return snapshot
    running = tuple(
        RunningGang(f"{gid}#what-if", p.gpu_type, p.replicas) for gid, p in placements.items()
    )
    layouts: dict[str, dict[int, MigLayout | None]] = {}
    for p in placements.values():
        for r in p.replicas:
            gpus = snapshot.node(r.node).gpus
            for g in r.gpus:
                now = gpus[g].mig_layout
                if r.mig is None and now is not None:
                    layouts.setdefault(r.node, {})[g] = None
                elif r.mig is not None and (now is None or r.mig not in now):
                    cut = layouts.setdefault(r.node, {}).get(g) or ()
                    layouts[r.node][g] = (*cut, r.mig)
    return replace(_relaid(snapshot, layouts), running=snapshot.running + running)


def _after(snapshot: Snapshot, decision: Decision) -> Snapshot:
    """The snapshot with the decision applied: its MIG repartitions, preemptions and
    placements (the power plan of a cycle looks at the cluster as the decision leaves it)."""
    layouts: dict[str, dict[int, MigLayout | None]] = {}
    for rep in decision.repartitions:
        layouts.setdefault(rep.node, {})[rep.gpu] = rep.new_layout
    evicted = {p.gang_id for p in decision.preemptions}
    moved = {m.gang_id: m.placement for m in decision.moves}
    # A moved gang runs on its new placement, its growth units with it, and it is not moved
    # again by the what-if in the same cycle (no progress).
    running = tuple(
        replace(g, gpu_type=moved[g.id].gpu_type, replicas=moved[g.id].replicas, progress=None)
        if g.id in moved
        else g
        for g in snapshot.running
        if g.id not in evicted and growth_job(g) not in moved
    ) + tuple(
        RunningGang(f"{p.gang_id}#placed", p.gpu_type, p.replicas) for p in decision.placements
    )
    return replace(_relaid(snapshot, layouts), running=running)


def _relaid(snapshot: Snapshot, layouts: Mapping[str, Mapping[int, MigLayout | None]]) -> Snapshot:
    """`snapshot` with the MIG layouts `layouts` gives (node -> GPU index -> layout)."""
    nodes = tuple(_node_relaid(n, layouts.get(n.name, {})) for n in snapshot.nodes)
    return replace(snapshot, nodes=nodes)


def _node_relaid(node: Node, layouts: Mapping[int, MigLayout | None]) -> Node:
    if not layouts:
        return node
    gpus = tuple(
        replace(g, mig_layout=layouts[g.index]) if g.index in layouts else g for g in node.gpus
    )
    return replace(node, gpus=gpus)
