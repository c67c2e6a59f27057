"""Evacuating a reserved node: move the few small gangs that keep an aged wide gang waiting.

A node reserved for an aged wide gang (reservation.py) only drains as its gangs end. On a busy
fleet its last small gangs can run for hours while the wide gang, often itself a job of
minutes, waits for them (tuning window 2017-10-23, seed 0: four 8-GPU gangs of 2-5 minutes
waited 130-141 minutes for a whole node; their finish-time fairness made their tenant the
worst off). Evacuation moves those small gangs, whole, to capacity the decision leaves free
elsewhere, so the node is empty in the next decision and the wide gang, going first as an
aged gang, takes it then.

A move here is for another gang's benefit, so it is priced for the moved gangs and weighed
against the wide gang's wait, both in seconds of completion time:

    loss(m) = restart + (R_m + unsaved_m) x v0 / v1 - R_m   (moves.py's price, speedup v1 / v0)
    gain    = max R_m over the moved gangs                   (the wait they would impose)

The node is evacuated only when the sum of the losses is below the gain: a move to a slower
type costs a long gang its slowdown over all its remaining time, so long gangs stay and short
ones go. R is the caller's expected remaining time (`RunProgress`, from completed jobs'
lengths, never the job's own). The cheapest gangs go first, only as many as the wide gang
needs GPUs, each to its cheapest placement on the GPUs the decision leaves free (never onto
the node itself, nor onto room the expected workload keeps, as moves.py). Only preemptible
and disruptable gangs (no PodDisruptionBudget forbids stopping them now) the caller gives
progress for, of a priority not above the wide gang's, are moved, and
an evacuation may exceed the hourly move limit by one (`recent_moves <= max_per_hour`): on the
tuning window 2017-10-23 the small gangs left on a reserved node had nearly always just been
moved there to a faster type, and the wide gang waited out their hour. So a gang moves at most
`max_per_hour + 1` times an hour, and the last of those only to make room. The moves are
ordinary `Move`s (with `for_gang` set): the simulator and the live scheduler carry them out as
they do moves to faster types.

Relocation for a reclaim (`plan_reclaim_moves`). A gang owed its queue's nominal quota reclaims
borrowed GPUs by evicting borrowers (preempt.py), but a reclaim stops taking from a queue once
it is back within its nominal quota. On a full type every node may then hold a gang that no
reclaim may take: on the 2017-11-01 queue sample (seed 0) four 8-GPU one-node gangs of a queue
entitled to 8 more A100s waited 26 minutes because each A100 node held, besides borrowers, a
one-GPU gang of a queue within its nominal quota or a second gang of a queue borrowing only one
GPU. For the first such gang in the queues' order the decision finds the node where the fewest
gangs (at most `MAX_RELOCATED`) are all that a reclaim could not evict, and moves them to free
capacity elsewhere (their queue keeps what it uses), priced and limited as an evacuation: only
when the sum of the moves' losses is below the largest remaining time among them (the wait they
impose). The node's freed GPUs are kept for the rest of the decision, and in the next decision
the gang, still owed, reclaims the node from its borrowers.

Reclaim with moves, in one decision (`reclaim_with_moves`). The relocation above leaves the
gang waiting a decision, and its moves can undo their own premise: a gang moved to another type
takes its queue's charge off the type, which can bring that queue back within nominal there and
make its other gangs on the node unevictable; the freed GPU can also be given to a fresh gang of
a borrowing queue before the reclaim comes (fresh window 2017-11-18 seed 2: seven 8-GPU gangs
owed their queue's nominal H100 quota waited 140 s while every H100 node held, besides
borrowers, a gang that a reclaim stopping at the borrower's nominal quota may not take). So,
before the relocation, a gang still owed its nominal quota (one node, whole GPUs) is given a
node in the same decision: on a node of a type where its queue is entitled, the gangs a reclaim
may take are evicted (`QueueGate.may_evict`, in order, so a queue is reclaimed only while it
still borrows), and the few left (at most `MAX_RELOCATED`, each movable as an evacuation) are
moved to GPUs *of the same type* elsewhere: free ones, or ones freed by reclaiming more
borrowed gangs of the type (the same rule: only while their queue borrows, only for a gang
within nominal). A move to the same type leaves every queue's usage of the type as it was, so
it cannot change what a reclaim may take; its price is its restart and unsaved work, and the
moves are made only when those add up to less than the longest remaining time among the moved
gangs (as above: gangs about to end are waited for); otherwise the moves are not weighed
against the gang's wait, as the owed gang's start is the queue's guarantee, as for any
reclaim, and the moved gangs keep their quota and GPUs of their type. The node with the
fewest moves (then the fewest GPUs moved, then reclaimed) is chosen. The decision carries the
evictions (`Preemption.reclaim`), the moves (`Move.for_gang`, the placed gang) and the
placement together; the gang's GPUs are the victims' and the moved gangs' old ones, so the
simulator stops moved gangs before placing, and the live scheduler binds the gang only once
they are gone, as after any preemption.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpufleet.core.decision import GangPlacement, Move, Preemption
from gpufleet.core.demand import Gang, Topology
from gpufleet.core.greedy import Memo, Plan, commit, eligible_nodes, plan_gang, usable_types
from gpufleet.core.moves import move_gain_s
from gpufleet.core.policy import Policy
from gpufleet.core.preempt import release_gang, retake, retake_all
from gpufleet.core.pricing import Pricing
from gpufleet.core.queues import resource_key
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang
from gpufleet.core.state import ClusterState
from gpufleet.core.valuation import base_throughput

__all__ = ["Cleared", "plan_evacuations", "plan_reclaim_moves", "reclaim_with_moves"]


@dataclass(frozen=True, slots=True)
class _Step:
    gang: RunningGang
    plan: Plan
    loss_s: float


def _movable(gang: RunningGang, wide: Gang, policy: Policy) -> bool:
    progress = gang.progress
    return (
        progress is not None
        and gang.demand is not None
        and gang.preemptible
        and gang.disruptable
        and gang.priority <= wide.priority
        and progress.recent_moves <= policy.moves.max_per_hour
        and all(r.mig is None for r in gang.replicas)
    )


def _loss(gang: RunningGang, gpu_type: str, state: ClusterState) -> float:
    """Seconds of completion time the move costs `gang` (module docstring)."""
    assert gang.progress is not None and gang.demand is not None
    catalog = state.catalog
    now = base_throughput(gang.demand, catalog[gang.gpu_type])
    new = base_throughput(gang.demand, catalog[gpu_type])
    if now <= 0 or new <= 0:
        return float("inf")
    p = gang.progress
    return -move_gain_s(p.expected_remaining_s, p.unsaved_s, p.restart_s, new / now)


def _cheapest(
    state: ClusterState, gang: RunningGang, policy: Policy, memo: Memo, pricing: Pricing
) -> _Step | None:
    """The gang's cheapest new placement on free capacity (its own GPUs already released)."""
    assert gang.demand is not None
    demand = replace(gang.demand, queue=gang.queue)
    best: _Step | None = None
    for gpu_type in usable_types(state, demand, policy, memo):
        loss = _loss(gang, gpu_type, state)
        if best is not None and loss >= best.loss_s:
            continue
        plan = plan_gang(state, demand, gpu_type, policy, memo)
        if plan is None or plan.repartitions:
            continue
        if pricing.active:
            price = pricing.move_price(
                state, demand, gpu_type, plan.replicas, plan.repartitions, gang.replicas
            )
            if price.reserved > 0:
                continue  # room the expected workload keeps, as moves.py
        best = _Step(gang, plan, loss)
    return best


def _evacuate(
    state: ClusterState,
    node: int,
    reserved: int,
    wide: Gang,
    excluded: frozenset[str],
    policy: Policy,
    memo: Memo,
    pricing: Pricing,
) -> list[_Step] | None:
    """The moves that free `wide`'s GPUs on `node`, where `reserved` GPUs are already kept
    for it, planned on `state` (mutated); None when they cannot be found or cost more than
    they save."""
    name = state.nodes[node].name
    candidates = [
        gang
        for gang in state.running_on(name)
        if gang.id not in excluded and _movable(gang, wide, policy)
    ]
    free = state.whole_mode_gpus(node)
    short = wide.gpus_needed(wide.replicas_min) - len(free) - reserved
    if short <= 0 or not candidates:
        return None
    state.take_whole(node, free)  # kept for the wide gang too

    def upfront(gang: RunningGang) -> tuple[float, str]:
        """Cheapest to move first: restart and unsaved work per GPU the move frees here."""
        assert gang.progress is not None
        p = gang.progress
        return ((p.restart_s + p.unsaved_s) / len(_on_node(gang, name)), gang.id)

    steps: list[_Step] = []
    for gang in sorted(candidates, key=upfront):
        if short <= 0:
            break
        freed = _on_node(gang, name)
        release_gang(state, gang)
        state.take_whole(node, freed)  # nothing else moves onto the node
        step = _cheapest(state, gang, policy, memo, pricing)
        if step is None:
            return None
        commit(state, step.plan, policy)
        steps.append(step)
        short -= len(freed)
    if short > 0 or not _paid_back(steps):
        return None
    return steps


def _paid_back(steps: Sequence[_Step]) -> bool:
    """Whether the moves' restarts and unsaved work add up to less than the longest remaining
    time among the moved gangs (the wait they impose); otherwise the gang waits for them."""
    gain = max(s.gang.progress.expected_remaining_s for s in steps if s.gang.progress)
    return sum(s.loss_s for s in steps) < gain


def _on_node(gang: RunningGang, name: str) -> list[int]:
    return [g for r in gang.replicas if r.node == name for g in r.gpus]


def plan_evacuations(
    state: ClusterState,
    reservations: Sequence[tuple[int, tuple[int, ...], Gang]],
    excluded: frozenset[str],
    policy: Policy,
    memo: Memo,
    waiting: Sequence[Gang] = (),
) -> list[Move]:
    """Moves that empty each reserved node for its wide gang (module docstring); mutates
    `state` when a node is evacuated. `reservations`: (node, GPUs kept, gang) of the greedy
    pass, whose GPUs `state` holds taken; `excluded`: gangs already evicted or moved by this
    decision; `waiting`: the gangs the decision leaves pending (for the reserves' prices, as
    moves.py)."""
    if not reservations or not policy.moves.enabled:
        return []
    pricing = Pricing(state, policy, waiting)
    out: list[Move] = []
    moved = set(excluded)
    for node, kept, wide in reservations:
        trial = state.copy()
        steps = _evacuate(trial, node, len(kept), wide, frozenset(moved), policy, memo, pricing)
        if steps is None:
            continue
        state.take_whole(node, state.whole_mode_gpus(node))
        for step in steps:
            release_gang(state, step.gang)
            state.take_whole(node, _on_node(step.gang, state.nodes[node].name))
            placement = commit(state, step.plan, policy)
            moved.add(step.gang.id)
            out.append(
                Move(step.gang.id, step.gang.gpu_type, placement, -step.loss_s, for_gang=wide.id)
            )
    return out


MAX_RELOCATED = 2  # gangs moved off one node so that a reclaim can clear it


def plan_reclaim_moves(
    state: ClusterState,
    owed: Sequence[Gang],
    excluded: frozenset[str],
    policy: Policy,
    memo: Memo,
    waiting: Sequence[Gang] = (),
) -> list[Move]:
    """Moves that let a reclaim clear a node for a gang owed its nominal quota (module
    docstring, "Relocation for a reclaim"); mutates `state` when they are made. `owed`: the
    gangs the decision leaves waiting for reclaim, in the queues' order; the first one-node gang
    among them with a node that only such moves stand between it and a reclaim gets them (one
    gang per decision). `excluded`, `waiting`: as `plan_evacuations`."""
    gate = state.gate
    if gate is None or not policy.moves.enabled or not policy.allow_preemption:
        return []
    pricing = Pricing(state, policy, waiting)
    for wide in owed:
        if not _one_node(wide):
            continue
        found = _relocation(state, wide, excluded, policy, memo, pricing)
        if found is None:
            continue
        node, steps = found
        name = state.nodes[node].name
        state.take_whole(node, state.whole_mode_gpus(node))
        out: list[Move] = []
        for step in steps:
            release_gang(state, step.gang)
            state.take_whole(node, _on_node(step.gang, name))
            placement = commit(state, step.plan, policy)
            out.append(
                Move(step.gang.id, step.gang.gpu_type, placement, -step.loss_s, for_gang=wide.id)
            )
        return out
    return []


def _one_node(gang: Gang) -> bool:
    one_node = gang.topology is Topology.SAME_NODE or gang.replicas_min == 1
    return one_node and gang.mig_profile is None and gang.gpus_needed(gang.replicas_min) > 1


def _relocation(
    state: ClusterState,
    wide: Gang,
    excluded: frozenset[str],
    policy: Policy,
    memo: Memo,
    pricing: Pricing,
) -> tuple[int, list[_Step]] | None:
    """The node, and the moves off it, after which a reclaim frees `wide`'s GPUs there: the
    node whose blocking gangs (those a reclaim may not evict) are fewest, when each of them can
    move to free capacity for less than the wait it imposes; None when there is none."""
    gate = state.gate
    assert gate is not None
    need = wide.gpus_needed(wide.replicas_min)
    home = gate.book.home(wide.queue)
    allowed = eligible_nodes(state, wide, memo)
    options: list[tuple[int, int, int, list[RunningGang]]] = []
    for gpu_type in usable_types(state, wide, policy, memo):
        if not gate.book.entitled(home, resource_key(gpu_type), need):
            continue
        for n in state.nodes_by_type.get(gpu_type, []):
            if state.nodes[n].gpu_count < need or (allowed is not None and n not in allowed):
                continue
            if _stuck(state, n, wide, frozenset(), policy, in_queue=False):
                continue  # (a quick test, most nodes on a busy fleet, before the what-if)
            blocked = _blocking(state, n, wide, excluded)
            if not blocked or len(blocked) > MAX_RELOCATED:
                continue
            if not all(_movable(b, wide, policy) for b in blocked):
                continue
            gpus = sum(len(_on_node(b, state.nodes[n].name)) for b in blocked)
            options.append((gpus, len(blocked), n, blocked))
    for _, _, n, blocked in sorted(options, key=lambda o: o[:3]):
        steps = _moves_off(state, n, wide, blocked, excluded, policy, memo, pricing)
        if steps is None:
            continue
        if _paid_back(steps):
            return n, steps
    return None


def _moves_off(
    state: ClusterState,
    n: int,
    wide: Gang,
    blocked: list[RunningGang],
    excluded: frozenset[str],
    policy: Policy,
    memo: Memo,
    pricing: Pricing,
) -> list[_Step] | None:
    """The cheapest moves of `blocked` off node `n` after which a reclaim clears it for `wide`;
    None when one cannot move or the node still would not clear. A move takes its gang's
    charge off the type, and that can bring its queue back within nominal there, making its
    other gangs on the node unevictable (fresh window 2017-11-18 seed 2: one of a queue's two
    one-GPU gangs on an H100 node was moved, the queue stopped borrowing H100s, and seven
    8-GPU gangs owed their nominal H100 quota waited 140 s for a node no reclaim could clear):
    such gangs are moved too, up to `MAX_RELOCATED` in all."""
    chosen = list(blocked)
    while True:
        trial = state.copy()
        name = trial.nodes[n].name
        trial.take_whole(n, trial.whole_mode_gpus(n))  # nothing else lands on the node
        steps: list[_Step] = []
        for gang in chosen:
            freed = _on_node(gang, name)
            release_gang(trial, gang)
            trial.take_whole(n, freed)
            step = _cheapest(trial, gang, policy, memo, pricing)
            if step is None:
                return None
            commit(trial, step.plan, policy)
            steps.append(step)
        after = state.copy()
        for step in steps:
            release_gang(after, step.gang)
            commit(after, step.plan, policy)
        more = _blockers(after, n, wide, excluded, frozenset(g.id for g in chosen))
        if more is None:
            return None
        if not more:
            return steps
        if len(chosen) + len(more) > MAX_RELOCATED or not all(
            _movable(b, wide, policy) for b in more
        ):
            return None
        chosen += more


def _stuck(
    state: ClusterState,
    n: int,
    wide: Gang,
    gone: frozenset[str],
    policy: Policy,
    in_queue: bool,
) -> bool:
    """Whether node `n` can be passed over without the what-if on the queues' accounts: a gang
    there (outside `gone`) that a reclaim for `wide` leaves whatever it evicts first is not
    movable, or more than `MAX_RELOCATED` are left so. Those gangs are among the blockers
    `_blockers` (`in_queue` False) or `_split` (True) would find, so such a node is never an
    option. The accounts decide only whether other queues' gangs may go (their queue still
    borrows); a gang that may not be disrupted always stays, and one of `wide`'s own queue
    stays when of no lower rank (`_blockers`, as `QueueGate.may_evict`) or always (`_split`,
    which evicts by reclaim only)."""
    gate = state.gate
    assert gate is not None
    mine = gate.rank(wide)
    fixed = 0
    for gang in state.running_on(state.nodes[n].name):
        if gang.id in gone:
            continue
        may_go = gate.is_reclaim(gang, wide) or (not in_queue and gate.rank(gang) < mine)
        if gang.preemptible and gang.disruptable and may_go:
            continue
        fixed += 1
        if fixed > MAX_RELOCATED or not _movable(gang, wide, policy):
            return True
    return False


def _blocking(
    state: ClusterState, n: int, wide: Gang, excluded: frozenset[str]
) -> list[RunningGang]:
    """The gangs on node `n` a reclaim for `wide` could not evict once it has evicted every
    other gang there it may (evicting a borrower can bring its queue back to its nominal
    quota, after which that queue's other gangs stay); empty when the node's GPUs would not
    hold `wide` even without them."""
    return _blockers(state, n, wide, excluded) or []


def _blockers(
    state: ClusterState,
    n: int,
    wide: Gang,
    excluded: frozenset[str],
    moved: frozenset[str] = frozenset(),
) -> list[RunningGang] | None:
    """`_blocking`, None instead of empty when the node would not hold `wide` even without
    them; gangs in `moved` are already off the node in `state` (moves of this decision)."""
    gate = state.gate
    assert gate is not None
    name = state.nodes[n].name
    on_node = [g for g in state.running_on(name) if g.id not in moved]
    if any(g.id in excluded for g in on_node):
        return None  # already leaving in this decision: its GPUs are not free yet
    # The evictions are a what-if on the queues' accounts (undone on leaving) and node n alone
    # (`release_gang` on a copy of the state would free the same GPUs there; no other node is
    # read).
    blocked: list[RunningGang] = []
    released: list[ReplicaPlacement] = []
    order = sorted(on_node, key=lambda g: (gate.victim_key(g, wide), g.id))
    with gate.book.trial():
        for gang in order:
            if gate.may_evict(gang, wide):
                released.extend(gang.replicas)
                gate.free(gang)
            else:
                blocked.append(gang)
    free = state.whole_mode_free_after(n, released)
    held = sum(len(_on_node(b, name)) for b in blocked)
    return blocked if free + held >= wide.gpus_needed(wide.replicas_min) else None


MAX_CLEARED_TRIALS = 4  # candidate nodes tried in full per owed gang (reclaim_with_moves)


@dataclass(frozen=True, slots=True)
class Cleared:
    """A gang owed its nominal quota, placed on a node a reclaim with moves cleared for it."""

    placement: GangPlacement
    preemptions: tuple[Preemption, ...]
    moves: tuple[Move, ...]


@dataclass(frozen=True, slots=True)
class _Clearing:
    victims: list[RunningGang]  # in the order evicted
    steps: list[_Step]  # the same-type moves
    plan: Plan  # the owed gang's, on the node


def reclaim_with_moves(
    state: ClusterState,
    owed: Sequence[Gang],
    excluded: frozenset[str],
    policy: Policy,
    memo: Memo,
    waiting: Sequence[Gang] = (),
) -> list[Cleared]:
    """Place gangs owed their nominal quota by reclaiming and moving, in one decision (module
    docstring, "Reclaim with moves"); mutates `state` for each one placed. `owed`: waiting
    gangs in the queues' order (those not within nominal, or whose types nobody borrows, are
    passed over); at most `policy.max_preempting_gangs` of them are tried. `excluded`: gangs
    already evicted or moved by this decision (gone from `state`); `waiting`: as
    `plan_evacuations`."""
    gate = state.gate
    if gate is None or not policy.moves.enabled or not policy.allow_preemption:
        return []
    pricing = Pricing(state, policy, waiting)
    out: list[Cleared] = []
    gone = set(excluded)
    tried = 0
    for wide in owed:
        if tried >= policy.max_preempting_gangs:
            break
        if not _one_node(wide):
            continue
        types = usable_types(state, wide, policy, memo)
        if gate.reclaim_note(wide, types) is None:
            continue
        tried += 1
        found = _clearing(state, wide, types, frozenset(gone), policy, memo, pricing)
        if found is None:
            continue
        for victim in found.victims:
            release_gang(state, victim)
        for step in found.steps:
            release_gang(state, step.gang)
        moves = []
        for step in found.steps:
            placement = commit(state, step.plan, policy)
            moves.append(
                Move(step.gang.id, step.gang.gpu_type, placement, -step.loss_s, for_gang=wide.id)
            )
        placed = commit(state, found.plan, policy)
        preemptions = tuple(
            Preemption(v.id, wide.id, reclaim=True) for v in sorted(found.victims, key=_id)
        )
        gone.update(v.id for v in found.victims)
        gone.update(m.gang_id for m in moves)
        out.append(Cleared(placed, preemptions, tuple(moves)))
    return out


def _id(gang: RunningGang) -> str:
    return gang.id


def _clearing(
    state: ClusterState,
    wide: Gang,
    types: Sequence[str],
    excluded: frozenset[str],
    policy: Policy,
    memo: Memo,
    pricing: Pricing,
) -> _Clearing | None:
    """The evictions and same-type moves that clear a node for `wide`, and its plan there:
    candidate nodes ranked by the moves they need, then the GPUs moved, then the GPUs
    reclaimed; the first `MAX_CLEARED_TRIALS` tried in full. None when no node clears."""
    gate = state.gate
    assert gate is not None
    need = wide.gpus_needed(wide.replicas_min)
    home = gate.book.home(wide.queue)
    allowed = eligible_nodes(state, wide, memo)
    options: list[tuple[int, int, int, int, list[RunningGang], list[RunningGang]]] = []
    for gpu_type in types:
        if not gate.book.entitled(home, resource_key(gpu_type, wide.mig_profile), need):
            continue
        for n in state.nodes_by_type.get(gpu_type, []):
            node = state.nodes[n]
            if node.gpu_count < need or (allowed is not None and n not in allowed):
                continue
            if _stuck(state, n, wide, excluded, policy, in_queue=True):
                continue
            split = _split(state, n, wide, excluded)
            if split is None:
                continue
            victims, blockers = split
            if len(blockers) > MAX_RELOCATED or not all(
                _movable(b, wide, policy) for b in blockers
            ):
                continue
            moved = sum(len(_on_node(b, node.name)) for b in blockers)
            reclaimed = sum(len(_on_node(v, node.name)) for v in victims)
            options.append((len(blockers), moved, reclaimed, n, victims, blockers))
    options.sort(key=lambda o: o[:4])
    for _, _, _, n, victims, blockers in options[:MAX_CLEARED_TRIALS]:
        found = _clear(state, n, wide, victims, blockers, excluded, policy, memo, pricing)
        if found is not None:
            return found
    return None


def _split(
    state: ClusterState, n: int, wide: Gang, excluded: frozenset[str]
) -> tuple[list[RunningGang], list[RunningGang]] | None:
    """The gangs on node `n` a reclaim for `wide` evicts (in the order it would, each only while
    its queue still borrows) and those left; None when the node would not hold `wide` even
    emptied, or when nothing there would be evicted or moved (preemption's case)."""
    gate = state.gate
    assert gate is not None
    name = state.nodes[n].name
    on_node = [g for g in state.running_on(name) if g.id not in excluded]
    free = len(state.whole_mode_gpus(n))
    held = sum(len(_on_node(g, name)) for g in on_node)
    need = wide.gpus_needed(wide.replicas_min)
    if free >= need or free + held < need:
        return None
    victims: list[RunningGang] = []
    blockers: list[RunningGang] = []
    order = sorted(on_node, key=lambda g: (gate.victim_key(g, wide), g.id))
    with gate.book.trial():  # the evictions, a what-if on the queues' accounts
        for gang in order:
            if gate.is_reclaim(gang, wide) and gate.may_evict(gang, wide):
                gate.free(gang)
                victims.append(gang)
            else:
                blockers.append(gang)
    # Victims the node does not need once the blockers are gone stay, latest first.
    spare = free + held - need
    for victim in reversed(list(victims)):
        gpus = len(_on_node(victim, name))
        if gpus <= spare:
            victims.remove(victim)
            spare -= gpus
    return victims, blockers


def _clear(
    state: ClusterState,
    n: int,
    wide: Gang,
    victims: list[RunningGang],
    blockers: list[RunningGang],
    excluded: frozenset[str],
    policy: Policy,
    memo: Memo,
    pricing: Pricing,
) -> _Clearing | None:
    """Try clearing node `n` on a copy of `state`: evict `victims`, plan `wide` there, move each
    blocker to its type elsewhere (reclaiming more of the type when no GPUs are free)."""
    trial = state.copy()
    gate = trial.gate
    assert gate is not None
    for gang in [*victims, *blockers]:
        if gang in victims and not gate.may_evict(gang, wide):
            return None
        release_gang(trial, gang)
    plan = plan_gang(trial, wide, trial.node_type[n], policy, memo, within=frozenset({n}))
    if plan is None:
        return None
    kept = [(trial.node_index[r.node], r.gpus) for r in plan.replicas]
    for node, gpus in kept:
        trial.take_whole(node, gpus)  # the gang's, while the moved gangs find room
    taken = list(victims)
    steps: list[_Step] = []
    gone = excluded | {g.id for g in victims} | {g.id for g in blockers}
    for blocker in sorted(blockers, key=_id):
        found = _same_type(trial, blocker, wide, gone, policy, memo, pricing)
        if found is None:
            return None
        more, step = found
        taken += more
        gone |= {g.id for g in more}
        commit(trial, step.plan, policy)
        steps.append(step)
    if steps and not _paid_back(steps):
        return None  # they end before their restarts would be done: the gang waits
    return _Clearing(taken, steps, plan)


def _same_type(
    state: ClusterState,
    gang: RunningGang,
    wide: Gang,
    gone: frozenset[str] | set[str],
    policy: Policy,
    memo: Memo,
    pricing: Pricing,
) -> tuple[list[RunningGang], _Step] | None:
    """`gang`'s new placement on its own type (its GPUs already released in `state`): on free
    GPUs, else on GPUs freed by reclaiming other gangs of the type for `wide` (fewest GPUs
    first, each only while its queue borrows; those then not needed are put back). The gangs
    reclaimed and the move; None when there is no room."""
    assert gang.demand is not None
    gate = state.gate
    assert gate is not None
    count = len(gang.replicas)
    demand = replace(gang.demand, queue=gang.queue, replicas_min=count, replicas_max=count)
    gpu_type = gang.gpu_type
    loss = _loss(gang, gpu_type, state)

    def fits() -> Plan | None:
        plan = plan_gang(state, demand, gpu_type, policy, memo)
        if plan is None or plan.repartitions:
            return None
        if pricing.active:
            price = pricing.move_price(
                state, demand, gpu_type, plan.replicas, plan.repartitions, gang.replicas
            )
            if price.reserved > 0:
                return None  # room the expected workload keeps, as moves.py
        return plan

    plan = fits()
    if plan is not None:
        return [], _Step(gang, plan, loss)
    candidates = sorted(
        (
            r
            for r in state.snapshot.running
            if r.id not in gone and r.gpu_type == gpu_type and r.id != gang.id
        ),
        key=lambda r: (sum(len(p.gpus) for p in r.replicas), gate.victim_key(r, wide), r.id),
    )
    released: list[RunningGang] = []
    for victim in candidates:
        if not gate.is_reclaim(victim, wide) or not gate.may_evict(victim, wide):
            continue
        release_gang(state, victim)
        released.append(victim)
        plan = fits()
        if plan is not None:
            break
        if len(released) >= MAX_RELOCATED:
            break
    if plan is None:
        retake_all(state, released)
        return None
    for victim in reversed(released[:-1]):  # put back those not needed
        retake(state, victim)
        again = fits()
        if again is None:
            release_gang(state, victim)
        else:
            released.remove(victim)
            plan = again
    return released, _Step(gang, plan, loss)
