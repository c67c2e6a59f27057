"""Idle GPUs a waiting gang could legally start on right now, and why a decision left them so.

`tenant_metrics.IdleMonitor` counts every idle GPU of a type while some waiting gang fits it,
quotas ignored. This monitor (an `EventObserver` of the engine) counts instead, after every
event, the idle GPUs the waiting gangs could actually take at that moment (*usable*): the gangs
waiting whole, in the order they wait, each taking the first type it accepts (fastest first)
where

* its queue's quota allows it (`QuotaBook.fits`, the rule the core and the Kueue-like baseline
  both keep: nominal quota plus what the cohort lends, within the borrowing limit; a
  non-preemptible gang within nominal), counting the gangs taken before it, and
* its replicas fit the idle GPUs node by node (best fit: the fullest node that holds a replica;
  a same-node gang all on one node; NVLink domains are not checked, MIG gangs not counted).

The same count with quotas ignored (*quota-blind*) tells how much
idle capacity the queues' quotas alone keep from waiting gangs (no policy may use it). A gang of
the same queue and shape as one that found no room finds none either (the free GPUs
and the quota only shrink as gangs take them), so it is skipped. Every node must be on (the
queue bench's policies never switch nodes off); the monitor refuses a replay where one is not.

*Left by a decision*: the usable GPUs right after a decision, carried per type until the next
while they stay usable (between decisions no GPU is taken and no waiting gang leaves); the rest
(*next cycle*) appeared since, GPUs freed or gangs arrived, and awaits the next cycle (at most
`SimSettings.cycle_s`). Only the arrival span counts (`until`, the last arrival: the figures
are shares of the fleet's GPUs x that span, like the utilisation).

*None fits* (`NONE_FITS`): the idle GPUs left after the quota-blind count while gangs wait,
per type, by why no gang left waiting takes them: `no taker` (every waiting gang that accepts
the type was counted on some type: more idle than waiting demand), `node too small` (those
left need more GPUs on one node than the type's nodes hold: an 8-GPU one-node gang on 4-GPU
nodes), `too few` (more GPUs than the type has idle), `fragmented` (enough idle, not node by
node). Node filters (`allowed_nodes`) are ignored here.

The part left by a decision is split by cause on the policy's side, per GPU taken, the first
that applies (`CAUSES`):

* `reservation`: on the node the core's reservation rule (`core.reservation.reserve_node`)
  keeps for the longest-waiting reservable gang that fits no idle GPUs, applied to the state
  after the decision, which does not report its reservations (without the rule's quota check
  and the gang's eligible nodes);
* `move`: freed on that node by the decision's moves (the core places gangs before it plans
  moves, so what a move frees waits for the next decision);
* `eviction`: freed by the decision's preemptions and not taken again in it;
* else the core's reason for the gang (`Decision.pending`): `fast type` (it waits for a faster
  type: a type delay) or `boot` (for a switched-off node to boot); `quota` (the core judged the
  queue's quota to exclude it where the monitor's check allows it); `shape` (the core found too
  few GPUs or no topology for it where the count fit found room: NVLink domains, node filters);
  `lost to others` (it fits alone, the core gave the capacity to other gangs); `other` (another
  reason); `not offered` (not among the gangs passed to the decision, `SimSettings.max_pending`);
  `unexplained` (offered, no reason given: the Kueue-like baseline reports none).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpufleet.core.decision import Decision, Pending
from gpufleet.core.demand import Gang, Topology
from gpufleet.core.policy import Policy
from gpufleet.core.queues import QueueTree
from gpufleet.core.quota import Charge, QuotaBook
from gpufleet.core.reservation import MAX_RESERVED, reservable, reserve_node
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.model.contract.reasons import PendingReason
from gpufleet.sim.engine import PlaceFn
from gpufleet.sim.occupancy import SimCluster

__all__ = [
    "CAUSES",
    "NONE_FITS",
    "DecisionTap",
    "Take",
    "UsableIdleMonitor",
    "UsableSeconds",
    "UsableStep",
    "fill",
    "none_fits",
    "usable_gpu_seconds",
]

CAUSES: tuple[str, ...] = (
    "reservation",
    "move",
    "eviction",
    "fast type",
    "boot",
    "quota",
    "shape",
    "lost to others",
    "other",
    "not offered",
    "unexplained",
)

NONE_FITS: tuple[str, ...] = ("no taker", "node too small", "too few", "fragmented")

_REASON_CAUSE: dict[PendingReason, str] = {
    PendingReason.QUOTA_EXCEEDED: "quota",
    PendingReason.WAITING_FOR_RECLAIM: "quota",
    PendingReason.QUEUE_NOT_FOUND: "quota",
    PendingReason.QUEUE_NOT_ALLOWED: "quota",
    PendingReason.INSUFFICIENT_GPUS: "shape",
    PendingReason.INSUFFICIENT_MIG: "shape",
    PendingReason.TOPOLOGY: "shape",
    PendingReason.LOST_TO_OTHERS: "lost to others",
}


class DecisionTap:
    """A place function that keeps its last call: the snapshot, the gangs passed and the
    decision (for the causes; it changes nothing)."""

    def __init__(self, place: PlaceFn) -> None:
        self.place = place
        self.snapshot: Snapshot | None = None
        self.pending: tuple[Gang, ...] = ()
        self.decision: Decision | None = None

    def __call__(self, snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
        decision = self.place(snapshot, pending, policy)
        self.snapshot, self.pending, self.decision = snapshot, tuple(pending), decision
        return decision


@dataclass(frozen=True)
class Take:
    """GPUs one waiting gang could take on one node."""

    gang_id: str
    gpu_type: str
    node: str
    gpus: int


def _fastest_first(gang: Gang) -> list[str]:
    ranked = sorted(
        enumerate(gang.acceptable), key=lambda o: (-(o[1].relative_throughput or 0.0), o[0])
    )
    return [option.gpu_type for _, option in ranked]


def _fit(gang: Gang, idle: Mapping[str, int]) -> Counter[str] | None:
    """GPUs per node the gang's minimum takes on `idle` (module docstring), or None."""
    per = gang.gpus_per_replica
    if gang.topology is Topology.SAME_NODE:
        need = gang.gpus_needed(gang.replicas_min)
        holding = [(n, node) for node, n in idle.items() if n >= need]
        return Counter({min(holding)[1]: need}) if holding else None
    left = dict(idle)
    plan: Counter[str] = Counter()
    for _ in range(gang.replicas_min):
        holding = [(n, node) for node, n in left.items() if n >= per]
        if not holding:
            return None
        node = min(holding)[1]
        left[node] -= per
        plan[node] += per
    return plan


def fill(
    idle: Mapping[str, int],
    type_of: Mapping[str, str],
    waiting: Sequence[Gang],
    book: QuotaBook | None,
) -> list[Take]:
    """What the waiting gangs could take of the idle GPUs per node, in order (module
    docstring); `book` holds the gangs taken (None: no quotas)."""
    free = {node: n for node, n in idle.items() if n > 0}
    by_type: dict[str, list[str]] = {}
    for node in free:
        by_type.setdefault(type_of[node], []).append(node)
    takes: list[Take] = []
    no_room: set[tuple[object, ...]] = set()
    for gang in waiting:
        if not any(free.values()):
            break
        shape = (gang.queue, gang.acceptable, gang.replicas_min, gang.gpus_per_replica)
        key = (*shape, gang.topology, gang.preemptible, gang.allowed_nodes)
        if gang.uses_mig or key in no_room:
            continue
        need = gang.gpus_needed(gang.replicas_min)
        for gpu_type in _fastest_first(gang):
            nodes = {
                n: free[n]
                for n in by_type.get(gpu_type, ())
                if gang.allowed_nodes is None or n in gang.allowed_nodes
            }
            if sum(nodes.values()) < need:
                continue
            if book is not None and not book.fits(
                book.home(gang.queue), gpu_type, need, gang.preemptible
            ):
                continue
            plan = _fit(gang, nodes)
            if plan is None:
                continue
            for node, n in sorted(plan.items()):
                free[node] -= n
                takes.append(Take(gang.id, gpu_type, node, n))
            if book is not None:
                book.hold(gang.id, Charge(gang.queue, gpu_type, need))
            break
        else:
            no_room.add(key)
    return takes


def _on_one_node(gang: Gang) -> int:
    """GPUs the gang needs on one node: all of them for a same-node gang, else a replica's."""
    if gang.topology is Topology.SAME_NODE:
        return gang.gpus_needed(gang.replicas_min)
    return gang.gpus_per_replica


def none_fits(
    idle: Mapping[str, int],
    type_of: Mapping[str, str],
    node_size: Mapping[str, int],
    waiting: Sequence[Gang],
    takes: Sequence[Take],
) -> Counter[str]:
    """The idle GPUs per node left after the quota-blind `takes`, by why no waiting gang takes
    them (module docstring, `NONE_FITS`); `node_size`: the GPUs of each type's largest node."""
    left = dict(idle)
    for take in takes:
        left[take.node] -= take.gpus
    per_type: Counter[str] = Counter()
    for node, n in left.items():
        if n > 0:
            per_type[type_of[node]] += n
    taken = {take.gang_id for take in takes}
    rest = [g for g in waiting if not g.uses_mig and g.id not in taken]
    out: Counter[str] = Counter()
    for gpu_type, n in per_type.items():
        takers = [g for g in rest if gpu_type in g.type_names()]
        fitting = [g for g in takers if _on_one_node(g) <= node_size.get(gpu_type, 0)]
        if not takers:
            out["no taker"] += n
        elif not fitting:
            out["node too small"] += n
        elif min(g.gpus_needed(g.replicas_min) for g in fitting) > n:
            out["too few"] += n
        else:
            out["fragmented"] += n
    return out


@dataclass(frozen=True)
class UsableStep:
    """From `t` until the next step: the usable idle GPUs per type, and of them the ones the
    last decision left so, per (type, cause)."""

    t: float
    usable: Mapping[str, int]
    left: Mapping[tuple[str, str], float] = field(default_factory=dict)
    blind: int = 0  # GPUs usable with quotas ignored
    none_fits: Mapping[str, int] = field(default_factory=dict)  # idle left by cause, NONE_FITS


@dataclass(frozen=True)
class UsableSeconds:
    """Usable idle GPU-seconds over a span: all, left by a decision, those by cause, all
    with quotas ignored, and the idle ones no waiting gang fits by cause (`NONE_FITS`)."""

    usable: float
    left: float
    left_by_cause: Mapping[str, float]
    blind: float = 0.0
    none_fits: Mapping[str, float] = field(default_factory=dict)

    @property
    def next_cycle(self) -> float:
        return self.usable - self.left


def usable_gpu_seconds(steps: Sequence[UsableStep], start: float, end: float) -> UsableSeconds:
    """Integrate the steps (in time order; each holds until the next, the last until `end`)
    over [start, end]."""
    usable = left = blind = 0.0
    by_cause: dict[str, float] = {}
    unfit: dict[str, float] = {}
    for i, step in enumerate(steps):
        until = steps[i + 1].t if i + 1 < len(steps) else end
        dt = min(until, end) - max(step.t, start)
        if dt <= 0:
            continue
        usable += sum(step.usable.values()) * dt
        blind += step.blind * dt
        for cause, n in step.none_fits.items():
            unfit[cause] = unfit.get(cause, 0.0) + n * dt
        for (_, cause), n in step.left.items():
            left += n * dt
            by_cause[cause] = by_cause.get(cause, 0.0) + n * dt
    causes = {c: by_cause[c] for c in CAUSES if c in by_cause}
    return UsableSeconds(
        usable, left, causes, blind, {c: unfit[c] for c in NONE_FITS if c in unfit}
    )


@dataclass(frozen=True)
class _Seen:
    """One call's state, evaluated once the clock moves on (the last call of an instant
    holds)."""

    t: float
    decided: bool
    idle: dict[str, int]
    waiting: tuple[Gang, ...]
    snapshot: Snapshot
    tapped: tuple[Snapshot | None, tuple[Gang, ...], Decision | None]


class UsableIdleMonitor:
    """Records the usable idle GPUs after every event and, after a decision, why it left them
    (module docstring). `tap` wraps the policy's place function (None: every cause
    `unexplained`); `aging_s` is the policy's queue aging, for its reservations (None: it makes
    none); `until` the end of the span measured (later events are not evaluated)."""

    def __init__(
        self,
        cluster: SimCluster,
        tree: QueueTree | None,
        tap: DecisionTap | None = None,
        aging_s: float | None = None,
        until: float = math.inf,
    ) -> None:
        self.cluster = cluster
        self.tree = tree
        self.tap = tap
        self.aging_s = aging_s
        self.until = until
        self.type_of = {name: node.gpu_type for name, node in cluster.nodes.items()}
        self.node_size: dict[str, int] = {}
        for node in cluster.nodes.values():
            size = self.node_size.get(node.gpu_type, 0)
            self.node_size[node.gpu_type] = max(size, node.gpu_count)
        self._steps: list[UsableStep] = []
        self._seen: _Seen | None = None
        self._left_at: Counter[tuple[str, str]] = Counter()  # right after the last decision

    @property
    def steps(self) -> list[UsableStep]:
        """One step per change up to the last call (evaluating the last one seen)."""
        self._flush()
        return self._steps

    def __call__(
        self,
        now: float,
        idle: Mapping[str, Sequence[int]],
        waiting: Sequence[Gang],
        decided: bool,
    ) -> None:
        if self._seen is not None and self._seen.t != now:
            self._flush()
        if now > self.until:
            return
        by_node = self.cluster.idle_gpus()
        counts: Counter[str] = Counter()
        for node, n in by_node.items():
            counts[self.type_of[node]] += n
        if any(counts[t] != sum(nodes) for t, nodes in idle.items()):
            raise ValueError("UsableIdleMonitor needs every node on (power-down off)")
        tap = self.tap
        tapped = (tap.snapshot, tap.pending, tap.decision) if tap else (None, (), None)
        self._seen = _Seen(now, decided, by_node, tuple(waiting), self.cluster.snapshot(), tapped)

    def _flush(self) -> None:
        seen, self._seen = self._seen, None
        if seen is None:
            return
        takes: list[Take] = []
        blind = 0
        unfit: Counter[str] = Counter()
        if seen.waiting and any(seen.idle.values()):
            book = QuotaBook(self.tree, seen.snapshot) if self.tree is not None else None
            takes = fill(seen.idle, self.type_of, seen.waiting, book)
            blind_takes = fill(seen.idle, self.type_of, seen.waiting, None)
            blind = sum(t.gpus for t in blind_takes)
            unfit = none_fits(seen.idle, self.type_of, self.node_size, seen.waiting, blind_takes)
        usable: Counter[str] = Counter()
        for take in takes:
            usable[take.gpu_type] += take.gpus
        if seen.decided:
            self._left_at = self._causes(seen, takes)
        left: dict[tuple[str, str], float] = {}
        at_decision: Counter[str] = Counter()
        for (gpu_type, _), n in self._left_at.items():
            at_decision[gpu_type] += n
        for (gpu_type, cause), n in self._left_at.items():
            # What the decision left stays usable until the next one, as far as it still is.
            kept = min(at_decision[gpu_type], usable[gpu_type]) / at_decision[gpu_type]
            if kept > 0:
                left[(gpu_type, cause)] = n * kept
        step = UsableStep(seen.t, dict(usable), left, blind, dict(unfit))
        last = self._steps[-1] if self._steps else None
        if last is None or (last.usable, last.left, last.blind, last.none_fits) != (
            usable,
            left,
            blind,
            unfit,
        ):
            self._steps.append(step)

    def _causes(self, seen: _Seen, takes: Sequence[Take]) -> Counter[tuple[str, str]]:
        """GPUs left usable by the last decision per (type, cause) (module docstring)."""
        out: Counter[tuple[str, str]] = Counter()
        if not takes:
            return out
        before, offered, decision = seen.tapped
        if decision is None or before is None:
            for take in takes:
                out[(take.gpu_type, "unexplained")] += take.gpus
            return out
        reserved = self._reserved(seen, offered)
        running = {r.id: r for r in before.running}
        moved: Counter[str] = Counter()
        evicted: Counter[str] = Counter()
        for move in decision.moves:
            if move.gang_id in running:
                for rep in running[move.gang_id].replicas:
                    moved[rep.node] += len(rep.gpus)
            for rep in move.placement.replicas:
                moved[rep.node] -= len(rep.gpus)
        for pre in decision.preemptions:
            if pre.gang_id in running:
                for rep in running[pre.gang_id].replicas:
                    evicted[rep.node] += len(rep.gpus)
        for placement in decision.placements:
            for rep in placement.replicas:
                evicted[rep.node] -= len(rep.gpus)
        reasons = {p.gang_id: p for p in decision.pending}
        offered_ids = {g.id for g in offered}
        for take in takes:
            n = take.gpus
            if take.node in reserved:
                out[(take.gpu_type, "reservation")] += n
                continue
            for cause, freed in (("move", moved), ("eviction", evicted)):
                got = min(n, max(0, freed[take.node]))
                if got:
                    out[(take.gpu_type, cause)] += got
                    freed[take.node] -= got
                    n -= got
            if n:
                out[(take.gpu_type, _gang_cause(take.gang_id, offered_ids, reasons))] += n
        return out

    def _reserved(self, seen: _Seen, offered: Sequence[Gang]) -> set[str]:
        """The nodes the core's reservation rule would keep after this state (module
        docstring)."""
        if self.aging_s is None:
            return set()
        waiting = {g.id for g in seen.waiting}
        aged = [
            g
            for g in offered
            if g.id in waiting and reservable(g, self.aging_s) and not self._fits_idle(seen, g)
        ]
        aged.sort(key=lambda g: (-g.waited_s, g.id))
        state = ClusterState(seen.snapshot)
        out: set[str] = set()
        for gang in aged[:MAX_RESERVED]:
            node = reserve_node(state, gang, _fastest_first(gang))
            if node is not None:
                out.add(state.nodes[node].name)
        return out

    def _fits_idle(self, seen: _Seen, gang: Gang) -> bool:
        for gpu_type in gang.type_names():
            nodes = {n: k for n, k in seen.idle.items() if self.type_of[n] == gpu_type and k}
            if _fit(gang, nodes) is not None:
                return True
        return False


def _gang_cause(gang_id: str, offered: set[str], reasons: Mapping[str, Pending]) -> str:
    if gang_id not in offered:
        return "not offered"
    pending = reasons.get(gang_id)
    if pending is None:
        return "unexplained"
    if pending.reason is PendingReason.WAITING_FOR_FASTER_TYPE:
        # The boot hold's message (core/place.py `_held`) says it waits for nodes to boot.
        return "boot" if "to boot" in pending.message else "fast type"
    return _REASON_CAUSE.get(pending.reason, "other")
