"""Move decisions: re-place a running gang on a faster GPU type, or with more replicas, when
the capacity is free.

A gang that started on a slow type keeps it until it ends unless something moves it; a few long
jobs on slow GPUs then set a fleet's average completion time (Gavel re-decides every round for
this reason). An elastic gang admitted small stays small in the same way (Pollux and Sia resize
jobs by checkpoint-restart). Here a move is a whole-gang restart on a new placement, of a faster
type or, for an elastic gang, more replicas (its speed then follows its scaling curve), taken
only when the expected gain exceeds its price, both in seconds of the job's completion:

    stay  = R                                   (R: expected remaining time at the current speed)
    move  = restart + (R + unsaved) x v0 / v1   (v0, v1: speeds on the current and the new type)
    gain  = stay - move

where `unsaved` is the run time since the job's last checkpoint (redone after the restart) and
`restart` the time to stop, reschedule and resume it (including a checkpoint-on-signal grace
period). The caller estimates R from what it has seen (`expected_remaining`: completed jobs'
lengths, never the job's own future) and counts recent moves; the rule allows at most
`max_per_hour` per gang. Moves use only capacity this decision leaves free, after every
pending gang was placed: a move never takes GPUs from waiting work. With a workload estimate
(pricing.py, scarcity.py) it is also priced as a placement there would be: it takes nothing a
GPU reserve keeps for demand confined to fewer types (sized at the move service level,
`scarcity.MOVE_SERVICE_LEVEL`, as a move is optional), nor the last free slot of a node reserve
for large tasks, nor a slot that a GPU reserve claims (net of the room its old placement frees:
`pricing.MovePrice` says why one slot), and the work it adds must exceed the FGD fragmentation
it adds where it lands. Without this, flexible pods moved onto the last free GPU of a type, or
the last empty 8-GPU node, and the pod that needed that room waited while a third of the fleet
sat free. A gang the caller marks not `disruptable` (a PodDisruptionBudget forbids stopping it
now) is never moved, nor is a job with such a growth unit. With queues, a move never lands on
a node where a gang waiting within its queue's nominal quota could be given room (free GPUs
plus other queues' borrowed ones), nor takes a queue's gang off a type where the queue is
within nominal and has gangs waiting for it, to a type where it borrows (`_Owed`).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace

from gpufleet.core.borrowing import growth_job
from gpufleet.core.decision import Move
from gpufleet.core.demand import Gang
from gpufleet.core.greedy import Memo, Plan, commit_priced, plan_gang, usable_types
from gpufleet.core.policy import Policy
from gpufleet.core.preempt import release_gang, retake
from gpufleet.core.pricing import Pricing
from gpufleet.core.queues import resource_key
from gpufleet.core.quota import ROOT, running_charge
from gpufleet.core.scarcity import MOVE_SERVICE_LEVEL
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, RunProgress
from gpufleet.core.state import ClusterState
from gpufleet.core.valuation import base_throughput, replica_value
from gpufleet.model.contract.wishes import Topology
from gpufleet.model.gpus import GpuType

__all__ = ["expected_remaining", "move_gain_s", "plan_moves", "unsaved_s", "work_value"]


def move_gain_s(remaining_s: float, unsaved_s: float, restart_s: float, speedup: float) -> float:
    """Seconds of completion time a move saves (negative: it costs), see module docstring."""
    return remaining_s - (restart_s + (remaining_s + unsaved_s) / speedup)


def unsaved_s(run_s: float, interval_s: float | None) -> float:
    """Run time since the last checkpoint of a gang that checkpoints every `interval_s` of
    running (None: on a signal, or never), i.e. what a restart now loses."""
    return 0.0 if interval_s is None else run_s % interval_s


def expected_remaining(completed: Sequence[float], attained: float) -> float:
    """Expected remaining length of a job that has run `attained`, from the lengths of
    completed jobs (sorted ascending): the mean of `length - attained` over those longer than
    it; with none longer, `attained` itself (the heavy tail of training jobs: the longer a job
    has run, the longer it is expected to run, as Tiresias's Gittins index uses)."""
    start = bisect.bisect_right(completed, attained)
    longer = completed[start:]
    if not longer:
        return attained
    return sum(longer) / len(longer) - attained


@dataclass(frozen=True, slots=True)
class _Candidate:
    rank: float  # priority-weighted throughput gained per GPU of the new placement
    gain_s: float
    gang: RunningGang
    demand: Gang  # the gang's demand at the new replica count
    gpu_type: str


def _best_move(
    state: ClusterState,
    running: RunningGang,
    policy: Policy,
    memo: Memo,
    pricing: Pricing,
    units: Sequence[RunningGang] = (),
    freed: frozenset[tuple[int, int]] = frozenset(),
    owed: _Owed | None = None,
) -> _Candidate | None:
    """The move that saves this gang the most time, if any is worth its price. `units`: the
    growth units of the same job (an elastic job grown past its minimum, rebalance.py), which
    move with it: the whole job restarts on the new placement. `freed`: (node, GPU) that moves
    earlier in the decision leave (`_changes_layout`)."""
    rule = policy.moves
    progress, demand = running.progress, running.demand
    if progress is None or demand is None or progress.recent_moves >= rule.max_per_hour:
        return None
    # Its own GPUs (and its queue's charge) are free for its new placement (a resize may keep
    # some of them); the move is charged to the queue the gang runs in.
    parts = (running, *units)
    for part in parts:
        release_gang(state, part)
    try:
        demand = replace(demand, queue=running.queue)
        return _best_on_free(state, parts, progress, demand, policy, memo, pricing, freed, owed)
    finally:
        for part in parts:
            retake(state, part)


def _best_on_free(
    state: ClusterState,
    parts: Sequence[RunningGang],
    progress: RunProgress,
    demand: Gang,
    policy: Policy,
    memo: Memo,
    pricing: Pricing,
    freed: frozenset[tuple[int, int]],
    owed: _Owed | None = None,
) -> _Candidate | None:
    rule = policy.moves
    catalog = state.catalog
    running = parts[0]
    held = tuple(r for part in parts for r in part.replicas)
    frozen = freed | _gpus_of(state, held)
    now = len(held)
    rate = base_throughput(demand, catalog[running.gpu_type]) * demand.speedup(now)
    best: _Candidate | None = None
    sizes = range(now, demand.replicas_max + 1) if demand.elastic else range(now, now + 1)
    for size in sizes:
        fixed = replace(demand, replicas_min=size, replicas_max=size)
        for t in usable_types(state, fixed, policy, memo):
            if t == running.gpu_type and size == now:
                continue
            if owed is not None and owed.blocks(state, running, t, fixed.gpus_needed(size)):
                continue
            new_rate = base_throughput(demand, catalog[t]) * demand.speedup(size)
            speedup = new_rate / rate
            if speedup <= 1.0 + rule.min_speedup:
                continue
            gain = move_gain_s(
                progress.expected_remaining_s, progress.unsaved_s, progress.restart_s, speedup
            )
            if gain <= rule.min_gain_s or (best is not None and gain <= best.gain_s):
                continue
            plan = plan_gang(state, fixed, t, policy, memo)
            if plan is None or _changes_layout(state, plan, frozen):
                continue
            if owed is not None and owed.takes_room(state, plan):
                continue
            if pricing.active:
                price = pricing.move_price(state, fixed, t, plan.replicas, plan.repartitions, held)
                added = work_value(fixed, catalog[t], size, policy) - work_value(
                    demand, catalog[running.gpu_type], now, policy
                )
                if price.reserved > 0 or price.fragmentation >= added:
                    continue  # room the expected workload needs more than this gang does
            gpus = fixed.gpus_needed(size)
            rank = policy.priority_weight(demand.priority) * (new_rate - rate) / gpus
            best = _Candidate(rank, gain, running, fixed, t)
    return best


class _Owed:
    """Queue debts a move must not deepen (only with queues): a gang waiting within its
    queue's nominal quota of a type is owed that type, and the decision's free GPUs of it are
    the room reclaim pays it with next cycle. Without this, a decision that left an owed 8-GPU
    gang 7 free GPUs on a node moved running gangs onto them, and one that paid a queue's owed
    T4 unit moved the same queue's own gang from T4 to A100 (where it borrows), re-opening a T4
    slot its waiting gangs were owed (issue 13: "owed" gangs, scoring window 2017-12-01)."""

    def __init__(
        self,
        state: ClusterState,
        waiting: Sequence[Gang],
        evicted: frozenset[str],
        policy: Policy,
        memo: Memo,
    ) -> None:
        gate = state.gate
        assert gate is not None
        self.claims: list[tuple[str, str, int]] = []  # (queue, type, GPUs on one node) owed
        self.nodes: set[int] = set()  # nodes whose room an owed gang could claim
        self.accepted: dict[str, set[str]] = {}  # queue -> resources its waiting gangs accept
        for gang in waiting:
            home = gate.book.home(gang.queue)
            if home == ROOT or gate.refusal(gang) is not None:
                continue
            need = gang.gpus_needed(gang.replicas_min)
            for t in usable_types(state, gang, policy, memo):
                resource = resource_key(t, gang.mig_profile)
                self.accepted.setdefault(home, set()).add(resource)
                if gang.mig_profile is None and gate.book.entitled(home, resource, need):
                    self.claims.append((home, t, _per_node(gang)))
        # Nodes where an owed gang could be given room by a later reclaim: free GPUs plus those
        # of other queues' preemptible borrowers (a disruption budget only protects them for
        # now), or of this decision's placements.
        kept: dict[tuple[str, int], int] = {}  # (owed queue, node) -> GPUs it cannot claim
        claimants = {home for home, _, _ in self.claims}
        for r in state.snapshot.running:
            if r.id in evicted:
                continue
            lender = gate.book.home(r.queue)
            lends = r.preemptible and (
                lender == ROOT or gate.book.borrowing(lender, running_charge(r).resource)
            )
            for home in claimants:
                if lends and lender != home:
                    continue  # a reclaim can give its GPUs to this queue's owed gangs
                for rep in r.replicas:
                    key = (home, state.node_index[rep.node])
                    kept[key] = kept.get(key, 0) + len(rep.gpus)
        for home, t, per_node in self.claims:
            for n in state.nodes_by_type.get(t, ()):
                if state.nodes[n].gpu_count - kept.get((home, n), 0) >= per_node:
                    self.nodes.add(n)

    def takes_room(self, state: ClusterState, plan: Plan) -> bool:
        """Whether the plan lands on a node where an owed gang could be given room."""
        return any(state.node_index[rep.node] in self.nodes for rep in plan.replicas)

    def blocks(self, state: ClusterState, running: RunningGang, gpu_type: str, gpus: int) -> bool:
        """Whether moving `running` (its charge released) to `gpu_type` with `gpus` GPUs moves
        it off a type where its queue is within nominal and has waiting gangs that accept it,
        to a type where it borrows."""
        gate = state.gate
        assert gate is not None
        home = gate.book.home(running.queue)
        charge = running_charge(running)
        old = charge.resource
        if home == ROOT or old not in self.accepted.get(home, ()):
            return False
        if not gate.book.entitled(home, old, charge.amount):
            return False  # it borrows there: moving off pays nobody's debt
        mig = running.replicas[0].mig if running.replicas else None
        new = resource_key(gpu_type, None if mig is None else mig.profile)
        return new != old and not gate.book.entitled(home, new, gpus)


def _per_node(gang: Gang) -> int:
    """GPUs the gang needs on one node: all of them for a one-node gang, else one replica's."""
    if gang.topology is Topology.SAME_NODE:
        return gang.gpus_needed(gang.replicas_min)
    return gang.gpus_per_replica


def release_priced(state: ClusterState, parts: Sequence[RunningGang], pricing: Pricing) -> None:
    """Release a moving job's gangs, with `pricing`'s slot counts following the state."""
    old = tuple(r for part in parts for r in part.replicas)
    before = pricing.committing(state, old)
    for part in parts:
        release_gang(state, part)
    pricing.committed(state, old, before)


def _gpus_of(state: ClusterState, replicas: Sequence[ReplicaPlacement]) -> set[tuple[int, int]]:
    return {(state.node_index[r.node], g) for r in replicas for g in r.gpus}


def _changes_layout(state: ClusterState, plan: Plan, frozen: AbstractSet[tuple[int, int]]) -> bool:
    """Whether the plan changes the MIG layout (a cut, or a switch to whole mode) of a GPU that
    a gang moved in this decision holds until it stops: a decision's repartitions are carried
    out before its moves, on GPUs that must be empty by then (the simulator refused
    "repartition of busy GPU" when an instance's move to an H100 freed an A100 GPU and a V100
    pod's move took it whole in the same decision)."""
    if any((n, g) in frozen for n, g, _ in plan.repartitions):
        return True
    for rep in plan.replicas:
        if rep.mig is None:
            n = state.node_index[rep.node]
            if any((n, g) in frozen and state.layout[n][g] is not None for g in rep.gpus):
                return True
    return False


def work_value(gang: Gang, gpu: GpuType, replicas: int, policy: Policy) -> float:
    """The objective's work term for `replicas` replicas of the gang on `gpu` (a move adds the
    difference; energy is left out, as the move's time gain leaves it out)."""
    weight = policy.weights.work * policy.priority_weight(gang.priority)
    return weight * replica_value(gang, gpu, policy).work * gang.speedup(replicas)


def plan_moves(
    state: ClusterState,
    evicted: frozenset[str],
    policy: Policy,
    memo: Memo,
    waiting: Sequence[Gang] = (),
) -> list[Move]:
    """Moves worth their price on the capacity `state` has free; mutates `state` (each move
    takes its new GPUs and frees its old ones). `waiting`: the gangs the decision leaves
    pending, which the reserves' prices count as `place_greedy` does."""
    if not policy.moves.enabled:
        return []
    units: dict[str, list[RunningGang]] = {}  # a grown elastic job's growth units move with it
    for r in state.snapshot.running:
        job = growth_job(r)
        if job is not None and r.id not in evicted:
            units.setdefault(job, []).append(r)
    # A move stops the whole job: none of it may be under a budget that forbids that now.
    movable = [
        r
        for r in state.snapshot.running
        if r.id not in evicted
        and r.progress is not None
        and r.demand is not None
        and growth_job(r) is None
        and r.disruptable
        and all(u.disruptable for u in units.get(r.id, ()))
    ]
    if not movable:
        return []
    # Reserves at the move service level: a move is optional (scarcity.MOVE_SERVICE_LEVEL).
    pricing = Pricing(state, policy, waiting, MOVE_SERVICE_LEVEL)
    owed = None if state.gate is None else _Owed(state, waiting, evicted, policy, memo)
    out: list[Move] = []
    moved: set[str] = set()
    freed: set[tuple[int, int]] = set()  # GPUs that moved gangs leave (`_changes_layout`)
    while True:
        best: _Candidate | None = None
        left = frozenset(freed)
        for running in movable:
            if running.id in moved:
                continue
            candidate = _best_move(
                state, running, policy, memo, pricing, units.get(running.id, ()), left, owed
            )
            if candidate is not None and (best is None or candidate.rank > best.rank):
                best = candidate
        if best is None:
            return out
        parts = (best.gang, *units.get(best.gang.id, ()))
        freed |= _gpus_of(state, [r for part in parts for r in part.replicas])
        release_priced(state, parts, pricing)
        plan = plan_gang(state, best.demand, best.gpu_type, policy, memo)
        assert plan is not None  # found free a moment ago, nothing changed since
        placement = commit_priced(state, plan, policy, pricing)
        moved.add(best.gang.id)
        out.append(Move(best.gang.id, best.gang.gpu_type, placement, best.gain_s))
