"""Gang-aware preemption: evict whole lower-priority preemptible gangs for a stuck gang.

For each gang still pending (highest priority first, a bounded number per decision) the victims
are running gangs that are preemptible and disruptable (no PodDisruptionBudget forbids stopping
them now), of strictly lower priority, on an acceptable GPU type and on a node the gang may use,
tried in borrowing.py's order (lowest priority, then least work lost: checkpoint age and
restart cost, then longest remaining time). With queues (admission.py) they are the gang's own
queue's gangs of lower rank (priority, then the service tier: service_tier.py) and other queues'
borrowers (a reclaim), the borrowers first.

Victims are released one victim set at a time (`_victim_sets`): the best candidates whatever
their node, then (when that fails) the candidates of one node at a time (`_victim_groups`), then
the best candidates of one GPU type at a time (a multi-node gang whose cheapest candidates are
on another type it accepts: `_by_type`).
Within a set they are released one at a time until the gang fits; then those that turn out
unnecessary are put back, and the eviction happens only if the gang's objective value beats
what the victims lose plus the disruption cost and, for each victim the service tier evicts
whose progress the caller gives, pays back the work the eviction throws away (its value over
the restart plus the run time since its last checkpoint) before it is expected to end
(`borrowing.restarts_paid_back`, the rule that shrinks elastic jobs: a served gang that ran 50
minutes since its checkpoint is not evicted for a small fresh gang of its queue; a priority
eviction is not priced); or if it is a reclaim (every victim another
queue's borrower: guaranteed quota is returned whatever the borrowed work is worth). A set
refused on value is taken back and the next set is tried. With queues the sets made of reclaim
candidates alone come before the mixed ones: otherwise a gang within its nominal quota whose
queue also holds lower-priority gangs spent the bounded per-node sets on its own queue's nodes,
each refused on value, and a node a pure reclaim would clear was never tried (the gang stayed
owed its quota: bench/README.md, Queues, ninth and tenth passes). Every what-if is undone when
not taken.

A stuck gang that fits, without a victim of its own, on GPUs freed by a victim evicted earlier
in the same decision for another gang (and not needed by it) is placed there instead of
evicting one more victim (`_on_freed`): it waits for that victim to exit, which the decision
says on its placement (`GangPlacement.waits_for`, set by place.py) and the live scheduler
honours by holding the gang until the victim's pods are gone. Before, such a gang evicted a
victim of its own while the freed GPUs stayed idle (a reclaim of another queue's borrowed GPU
beside three idle GPUs of its own queue's victim). Likewise a stuck gang that fits, without a
victim of its own, on queue quota those victims gave back (their queue borrows less, or they
were its own queue's gangs), on GPUs free already, is placed there (`_on_quota`): before, it
evicted one more gang to make room its queue's account already had. Such a plan leaves alone
the reserved GPUs lifted for this pass (a drain gives way only to a gang that evicts:
reservation.py), and waits for the victims whose GPUs it takes, if any, like the one above,
and for those whose quota it uses (`quota_waits`, applied to the finished decision whichever
engine made it: a placement, a preemptor's too, starts only when the queues' account holds it
with the victims it waits for gone and the others still running, so it waits for the fewest
victims that make it fit, not every victim on its type).

Known and left: a stuck gang that fits with no victim once the reserved GPUs are lifted (stuck
only by a drain) evicts the first victim it tries, since `release_until_fits` releases one
before planning and `put_back_unneeded` keeps the last one released, and may then land on the
drain's GPUs without using the victim's. Searching for such a gang's victims with the lifted
GPUs kept was measured and not kept: equal or better on tuning and greedy diagnosis, worse on
two CP-SAT diagnosis samples (bench/README.md, Queues, fifty-second pass).

The what-if steps here (`release_gang`, `retake`, `try_plan`, `release_until_fits`,
`put_back_unneeded`) are shared: rebalance.py releases and puts back growth units the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from functools import partial
from itertools import chain

from gpufleet.core.admission import QueueGate
from gpufleet.core.borrowing import jobs_of, restarts_paid_back, victim_key
from gpufleet.core.decision import Decision, GangPlacement, Preemption
from gpufleet.core.demand import Gang
from gpufleet.core.greedy import (
    Memo,
    Plan,
    commit,
    eligible_nodes,
    greedy_order,
    plan_gang,
    usable_types,
)
from gpufleet.core.objective import running_value
from gpufleet.core.policy import Policy
from gpufleet.core.quota import running_charge
from gpufleet.core.reservation import kept_while
from gpufleet.core.snapshot import RunningGang
from gpufleet.core.state import ClusterState
from gpufleet.core.valuation import gang_value

MAX_VICTIMS_PER_GANG = 8  # bounds the what-if work per stuck gang (per victim set; see below)
MAX_NODES_PER_GANG = 4  # one-node victim sets tried after the first set fails
MAX_OWED_GANGS = 4  # gangs owed their nominal quota tried after the per-decision bound is spent


def retake(state: ClusterState, gang: RunningGang) -> None:
    """Give a released running gang its GPUs back (undo a what-if)."""
    for replica in gang.replicas:
        n = state.node_index[replica.node]
        if replica.mig is None:
            state.take_whole(n, replica.gpus)
        else:
            state.take_instance(n, replica.gpus[0], replica.mig)
    if state.gate is not None:
        state.gate.hold(gang)


def release_gang(state: ClusterState, gang: RunningGang) -> None:
    """Free a running gang's GPUs (and its queue's usage) in the working state."""
    for replica in gang.replicas:
        state.release(replica)
    if state.gate is not None:
        state.gate.free(gang)


def retake_all(state: ClusterState, gangs: Iterable[RunningGang]) -> None:
    """Give released running gangs their GPUs back, in turn (undo a what-if)."""
    for gang in gangs:
        retake(state, gang)


def try_plan(state: ClusterState, gang: Gang, policy: Policy, layouts: Memo) -> Plan | None:
    """`gang`'s plan on the first usable GPU type that holds it in the working state, or None."""
    for gpu_type in usable_types(state, gang, policy, layouts):
        plan = plan_gang(state, gang, gpu_type, policy, layouts)
        if plan is not None:
            return plan
    return None


def release_until_fits(
    state: ClusterState,
    gang: Gang,
    victims: Iterable[RunningGang],
    policy: Policy,
    layouts: Memo,
    may_release: Callable[[RunningGang], bool] | None = None,
) -> tuple[list[RunningGang], Plan | None]:
    """Release `victims` one at a time, in order, until `gang` fits: the released ones and the
    plan. A victim `may_release` refuses (asked just before its turn, after the earlier ones are
    released) is passed over. If the gang does not fit even then, every released victim is taken
    back and the answer is `([], None)`."""
    released: list[RunningGang] = []
    for victim in victims:
        if may_release is not None and not may_release(victim):
            continue
        release_gang(state, victim)
        released.append(victim)
        plan = try_plan(state, gang, policy, layouts)
        if plan is not None:
            return released, plan
    retake_all(state, released)
    return [], None


def put_back_unneeded(
    state: ClusterState,
    gang: Gang,
    released: Sequence[RunningGang],
    plan: Plan,
    policy: Policy,
    layouts: Memo,
) -> tuple[list[RunningGang], Plan]:
    """Put back the released gangs that `gang` (placed by `plan`) turns out not to need, latest
    first, re-planning after each; the last released one is needed by design (release_until_fits
    stopped there). The ones still released and the gang's plan without the others."""
    needed = list(released)
    for victim in reversed(released[:-1]):
        retake(state, victim)
        again = try_plan(state, gang, policy, layouts)
        if again is None:
            release_gang(state, victim)
        else:
            needed.remove(victim)
            plan = again
    return needed, plan


def _victim_groups(
    candidates: Sequence[RunningGang], gpus: int, free: Mapping[str, int] | None = None
) -> Iterator[list[RunningGang]]:
    """The victim sets tried in turn, each in candidate order: the first candidates whatever
    their node; then the candidates holding GPUs on one node at a time, so that for a gang
    needing its GPUs on one node, victims scattered over many nodes do not use up the bound
    before any node is cleared: first the nodes whose free GPUs (`free`, by node name) and
    candidate GPUs add up to the gang's `gpus`, then the others, each by most candidate GPUs.
    A set holds at most MAX_VICTIMS_PER_GANG victims, or as many as `gpus` (so that a gang
    wider than the bound can still be made room for by one-GPU victims)."""
    bound = max(MAX_VICTIMS_PER_GANG, gpus)
    yield list(candidates[:bound])
    # A victim spread over several nodes is in each of their sets: evicting it frees its GPUs
    # on every one (without it, a node held partly by a wide borrower was never cleared and a
    # lender's one-node gang waited, owed its nominal quota: scoring window 2017-11-01).
    by_node: dict[str, list[RunningGang]] = {}
    for victim in candidates:
        for node in sorted({r.node for r in victim.replicas}):
            by_node.setdefault(node, []).append(victim)

    def freed(item: tuple[str, list[RunningGang]]) -> tuple[bool, int, str]:
        node, group = item
        held = sum(len(r.gpus) for v in group for r in v.replicas if r.node == node)
        # A node that cannot hold the gang even emptied of candidates comes last (a node
        # left with a free GPU by a move made for a reclaim: evacuation.py).
        short = free is not None and free.get(node, 0) + held < gpus
        return (short, -held, node)

    ranked = sorted(by_node.items(), key=freed)
    for _, group in ranked[:MAX_NODES_PER_GANG]:
        yield group[:bound]


def _victim_sets(
    candidates: Sequence[RunningGang],
    gang: Gang,
    free: Mapping[str, int],
    is_reclaim: Callable[[RunningGang], bool] | None,
) -> Iterator[list[RunningGang]]:
    """The victim sets tried for `gang`, in turn: `_victim_groups` of the candidates; with
    queues (`is_reclaim` given), first those of the reclaim candidates alone, then those of all
    candidates; each pool's groups followed by its first candidates of one GPU type at a time
    (`_by_type`). A set already tried or empty is skipped (a set's outcome depends only on the
    set: every refused what-if is undone). The bound on what-if work per stuck gang: at most
    1 + MAX_NODES_PER_GANG + T sets without queues, 2 x (1 + MAX_NODES_PER_GANG + T) with them
    (T: the gang's usable GPU types); a set
    holds at most max(MAX_VICTIMS_PER_GANG, GPUs needed) victims and costs one release and one
    plan per victim, plus one re-plan per victim put back when the gang fits."""
    gpus = gang.gpus_needed(gang.replicas_min)
    pools = [candidates]
    if is_reclaim is not None:
        pools.insert(0, [r for r in candidates if is_reclaim(r)])
    tried: set[tuple[str, ...]] = set()
    for pool in pools:
        for group in chain(_victim_groups(pool, gpus, free), _by_type(pool, gpus)):
            key = tuple(r.id for r in group)
            if group and key not in tried:
                tried.add(key)
                yield group


def _by_type(candidates: Sequence[RunningGang], gpus: int) -> Iterator[list[RunningGang]]:
    """The first candidates of each GPU type in turn (as many as `_victim_groups`' sets hold):
    a gang runs on one type, so a set mixing types spends its bound on victims that cannot make
    room together. Without these, a 16-GPU gang owed its nominal T4 quota, whose first set held
    the 14 V100 borrowers with the least unsaved work and 2 T4 ones and whose one-node sets
    cannot hold it on 4-GPU nodes, waited an hour (tuning 2017-10-23, 30-minute checkpoints)."""
    bound = max(MAX_VICTIMS_PER_GANG, gpus)
    by_type: dict[str, list[RunningGang]] = {}
    for victim in candidates:
        by_type.setdefault(victim.gpu_type, []).append(victim)
    for gpu_type in sorted(by_type):
        yield by_type[gpu_type][:bound]


def _evict_for(
    state: ClusterState,
    gang: Gang,
    group: Sequence[RunningGang],
    policy: Policy,
    layouts: Memo,
    values: Mapping[str, float],
    jobs: Mapping[str, Sequence[RunningGang]],
) -> tuple[list[RunningGang], Plan] | None:
    """Try one victim set for `gang`: the victims it needs and its plan, left released in
    `state`, when the eviction is taken (module docstring: a reclaim, or worth more than it
    loses, its lost work included); None, with every victim taken back, when the gang does not
    fit or the value check refuses it. `values`: the running gangs' values; `jobs`: their
    jobs' parts (borrowing.jobs_of)."""
    gate = state.gate
    # A queue stops being reclaimed from once it is back within its nominal quota.
    may_evict = None if gate is None else partial(gate.may_evict, gang=gang)
    released, plan = release_until_fits(state, gang, group, policy, layouts, may_evict)
    if plan is None:
        return None
    released, plan = put_back_unneeded(state, gang, released, plan, policy, layouts)
    if gate is not None and all(gate.is_reclaim(v, gang) for v in released):
        return released, plan  # guaranteed quota comes back whatever the borrowed work is worth
    gain = _plan_value(state, plan, policy)
    loss = sum(values[v.id] for v in released)
    # Only the tier's evictions pay for lost work: a higher priority must run now whatever the
    # victim loses, and a job that just started is expected to end at once (moves.py) when no
    # longer job has finished yet, so pricing it would make it unevictable.
    by_tier = [v for v in released if gate is not None and gate.by_tier(v, gang)]
    if gain > loss + policy.weights.disruption * len(released) and restarts_paid_back(
        gain - loss, by_tier, values, jobs
    ):
        return released, plan
    retake_all(state, released)
    return None


def preempt_for_pending(
    state: ClusterState,
    pending: Sequence[Gang],
    policy: Policy,
    layouts: Memo,
    max_gangs: int,
    already_evicted: frozenset[str] = frozenset(),
    lifted: Sequence[tuple[int, tuple[int, ...]]] = (),
) -> tuple[dict[str, GangPlacement], list[Preemption]]:
    """Place stuck gangs by evicting victims; mutates `state`. Gangs in `already_evicted` are
    gone from the state already and are not victims again. `lifted`: the reserved GPUs given
    back for this pass (reservation.lift_reservations), kept from a gang placed on quota
    other gangs' victims gave back (`_on_quota`). At most `max_gangs` stuck gangs with
    candidate victims are tried, then up to `MAX_OWED_GANGS` more owed their nominal quota."""
    placed: dict[str, GangPlacement] = {}
    preemptions: list[Preemption] = []
    evicted: set[str] = set(already_evicted)
    if not policy.allow_preemption:
        return placed, preemptions
    tried = 0
    values = layouts.running_values
    if not values:
        values.update(
            (r.id, running_value(state.snapshot, r, policy)) for r in state.snapshot.running
        )
    jobs = jobs_of(state.snapshot.running)
    gate = state.gate
    # The queues' account before this pass evicts anything: a gang that fits its quota now
    # and did not then fits on quota this pass's victims gave back (`_on_quota`).
    start = None if gate is None else gate.copy()
    freed = {
        (p.node, g)
        for r in state.snapshot.running
        if r.id in evicted
        for p in r.replicas
        for g in p.gpus
    }
    owed_tried = 0
    for gang in greedy_order(pending, state):
        if tried >= max_gangs:
            # Past the bound only gangs owed their nominal quota are tried, a few more: the
            # bound spent on gangs ahead that found no victim set, a 1-GPU gang owed a T4 (25th
            # of 31 stuck) was never tried and its quota stayed borrowed (tuning 2017-10-23,
            # 30-minute checkpoints). Serving owed gangs first instead cost fairness.
            if gate is None or owed_tried >= MAX_OWED_GANGS:
                break
            owed = gate.reclaim_note(gang, usable_types(state, gang, policy, layouts))
            if owed is None:
                continue
        # GPUs freed by a victim evicted for an earlier gang and not needed by it: the gang
        # waits for that victim (GangPlacement.waits_for) rather than evicting one of its own.
        plan = _on_freed(state, gang, freed, policy, layouts)
        if plan is None and start is not None and preemptions:
            # Quota given back by those victims (their queue borrows less, or it is the
            # gang's own queue): the gang uses it, and no victim of its own, where it fits.
            plan = _on_quota(state, gang, start, lifted, policy, layouts)
        if plan is not None:
            placed[gang.id] = commit(state, plan, policy)
            continue
        types = set(usable_types(state, gang, policy, layouts))
        allowed = eligible_nodes(state, gang, layouts)
        candidates = [
            r
            for r in state.snapshot.running
            if r.id not in evicted
            and r.preemptible
            and r.disruptable
            and r.gpu_type in types
            and (allowed is None or any(state.node_index[p.node] in allowed for p in r.replicas))
            and (r.priority < gang.priority if gate is None else gate.may_evict(r, gang))
        ]
        if not candidates:
            continue
        if tried >= max_gangs:
            owed_tried += 1
        else:
            tried += 1
        order = victim_key(values)
        if gate is None:
            candidates.sort(key=order)
        else:
            # With queues: other queues' borrowers first (admission.py), then the usual order.
            candidates.sort(key=lambda r: (gate.victim_key(r, gang), order(r)))
        free = {
            state.nodes[n].name: len(state.whole_mode_gpus(n))
            for t in types
            for n in state.nodes_by_type.get(t, [])
        }
        is_reclaim = None if gate is None else partial(gate.is_reclaim, gang=gang)
        taken = None
        for group in _victim_sets(candidates, gang, free, is_reclaim):
            taken = _evict_for(state, gang, group, policy, layouts, values, jobs)
            if taken is not None:
                break
        if taken is None:
            continue
        released, plan = taken
        placed[gang.id] = commit(state, plan, policy)
        for victim in sorted(released, key=lambda r: r.id):
            evicted.add(victim.id)
            reclaim = gate is not None and gate.is_reclaim(victim, gang)
            tier = gate is not None and gate.by_tier(victim, gang)
            preemptions.append(Preemption(victim.id, gang.id, reclaim, tier))
            freed.update((p.node, g) for p in victim.replicas for g in p.gpus)
    return placed, preemptions


def quota_waits(
    gate: QueueGate, pending: Sequence[Gang], decision: Decision, running: Sequence[RunningGang]
) -> Decision:
    """`decision` with each placement that relies on queue quota this decision's victims give
    back also waiting for them (`GangPlacement.waits_for`), whichever engine made it, as Kueue
    admits a preemptor only after its victims are evicted. `gate`: the queues' account before
    the decision (every victim still runs).

    A placement starts once every gang it awaits has gone: its own victims (a preemptor's) and
    its `waits_for`. First the gangs that evict nothing and wait for no victim's GPUs are
    charged to the account in queue order (`QueueGate.order`); those that fit are bound at
    once. Then the others, preemptors too, in the same order: each awaits, besides what it
    awaits already, the fewest victims on its GPU type (a queue's quota is per type) with which
    it fits the account in every state it can start in (`_fewest`): those victims gone, and any
    of the earlier waiting placements on its resource started (with what they await gone) or
    not. A gang also "fits" a state where each level of its queue's path that it would put
    over its limit was over it before the decision by as much or more (a preemptor taking back
    its own victims' share of a queue, or of a cluster, over its limit: the validator's rule,
    validate_quota.py); a non-preemptible one only when it takes nothing a reclaim could want
    back there either (within nominal all the way up, or capacity no queue is promised:
    quota.py). So whichever victims have exited, the placements
    started then fit the account or leave it no worse than before: the last of them in this
    order was checked in that state (validate_quota.py checks every such state). No queue goes
    over its limits while victims run in their grace period, and a gang does not wait for a
    victim whose quota it does not need.

    A gang of no queue is checked as one of ROOT, a top-level queue with nominal 0 (quota.py),
    the same way: its only level is the cluster's, which its start may leave no worse than
    before the decision (before, it was held to the strict check and, a preemptor on a cluster
    over its capacity, waited for other gangs' victims it did not need). A placement that
    does not fit even with every victim on its type gone (the engine charged in another
    order), or that would have to
    be checked in more than `MAX_START_STATES` states (unions of earlier placements' awaited
    sets), awaits, if it evicts nothing, every victim on its type (the decision's own account
    covers it), and if it is a preemptor, its own victims only (as before these checks). Moves
    are left out of the account."""
    if not decision.preemptions:
        return decision
    account = gate.copy()
    by_id = {g.id: g for g in pending}
    own: dict[str, set[str]] = {}
    for p in decision.preemptions:
        own.setdefault(p.for_gang, set()).add(p.gang_id)
    placed = {p.gang_id: p for p in decision.placements if p.gang_id in by_id}
    victims = [r for r in running if any(r.id in mine for mine in own.values())]
    later: list[Gang] = []
    for gang in account.order([by_id[g] for g in placed]):
        placement = placed[gang.id]
        # Bound at once: it evicts nothing and waits for no victim's GPUs (one that does is
        # not bound before they are gone: charged now, it made later gangs wait for nothing).
        at_once = gang.id not in own and not placement.waits_for
        if at_once and account.allows(gang, placement.gpu_type, placement.replica_count):
            account.take(gang, placement.gpu_type, placement.replica_count)
        else:
            later.append(gang)
    waits: dict[str, tuple[str, ...]] = {}
    earlier: list[_Waiter] = []
    for gang in later:
        placement = placed[gang.id]
        mine = own.get(gang.id, set())
        waiter = _Waiter(gang, placement, frozenset(mine | set(placement.waits_for)))
        others = [r for r in victims if r.gpu_type == placement.gpu_type and r.id not in mine]
        awaits = _fewest(account, earlier, waiter, others, gate)
        if awaits is None:  # no set found (docstring): as before
            awaits = waiter.awaits if mine else waiter.awaits | {r.id for r in others}
        waits[gang.id] = tuple(sorted(awaits - mine))
        earlier.append(replace(waiter, awaits=awaits))
    return replace(
        decision,
        placements=tuple(
            replace(p, waits_for=waits.get(p.gang_id, p.waits_for)) for p in decision.placements
        ),
    )


# The states a placement's quota check tries (`_fewest`: every union of the earlier waiting
# placements' awaited sets); past this many it is not checked. 2**6: six placements awaiting
# different victims, or more sharing or nesting theirs.
MAX_START_STATES = 64


@dataclass(frozen=True, slots=True)
class _Waiter:
    """A placement that starts after victims have gone (`quota_waits`): every gang it awaits
    (its own victims, its `waits_for`)."""

    gang: Gang
    placement: GangPlacement
    awaits: frozenset[str]

    def take(self, account: QueueGate) -> None:
        account.take(self.gang, self.placement.gpu_type, self.placement.replica_count)

    def fits(self, account: QueueGate, before: QueueGate) -> bool:
        """Whether it may start in the state `account`: it fits there, or it leaves no level
        of its queue's path (outside every queue: the cluster's, ROOT's only level) that was
        over its limit `before` the decision more loaded than
        then, as when a preemptor takes back what its own victims held in a queue over its
        limit: a wait for other victims would buy nothing the validator asks
        (validate_quota.py). A non-preemptible gang must also take nothing a reclaim could
        want back in that state (`QuotaBook.safe_unreclaimable`, borrowing.py); held to the
        strict check instead, one within its nominal quota on a cluster over its capacity
        before the decision waited for other gangs' victims."""
        gang, gpu_type, count = self.gang, self.placement.gpu_type, self.placement.replica_count
        if account.allows(gang, gpu_type, count):
            return True
        # A gang of no queue is charged to ROOT (quota.py), the cluster its only level.
        charged = account.charged(gang, gpu_type, count)
        if charged is None:
            return False
        home, charge = charged
        book = account.book
        if not book.no_worse(home, charge.resource, charge.amount, before.book):
            return False
        return gang.preemptible or book.safe_unreclaimable(home, charge.resource, charge.amount)


def _fewest(
    account: QueueGate,
    earlier: Sequence[_Waiter],
    waiter: _Waiter,
    others: Sequence[RunningGang],
    before: QueueGate,
) -> frozenset[str] | None:
    """What `waiter` must await so that its gang fits `account` (or makes no level over its
    limit `before` the decision worse: `_Waiter.fits`) in every state it can start in
    (`quota_waits`): what it awaits already, then `others` added, those giving back most of its
    resource first (then by id), until it fits, and those it turns out not to need dropped again
    (the last added first); None when it does not fit with all of them gone."""
    resource = account.charge(
        waiter.gang, waiter.placement.gpu_type, waiter.placement.replica_count
    ).resource
    near = [
        w for w in earlier if account.charge(w.gang, w.placement.gpu_type, 1).resource == resource
    ]  # placements on other resources share no limit with it

    def fits(gone: frozenset[str]) -> bool:
        # The victims gone when it starts: `gone` and any earlier placements' awaited sets; the
        # placements whose sets are all gone then have started (any other set of victims gone
        # starts the same placements with more victims gone, which only gives quota back).
        states = {gone}
        for awaits in sorted({w.awaits - gone for w in near} - {frozenset()}, key=sorted):
            states |= {state | awaits for state in states}
            if len(states) > MAX_START_STATES:
                return False
        for state in sorted(states, key=sorted):
            trial = account.copy()
            for victim in sorted(state):
                trial.book.free(victim)
            for w in near:
                if w.awaits <= state:
                    w.take(trial)
            if not waiter.fits(trial, before):
                return False
        return True

    gone = waiter.awaits
    added: list[str] = []
    for victim in sorted(others, key=partial(_given_back, resource)):
        if fits(gone):
            break
        gone |= {victim.id}
        added.append(victim.id)
    else:
        if not fits(gone):
            return None
    for victim_id in reversed(added):
        if fits(gone - {victim_id}):
            gone -= {victim_id}
    return gone


def _given_back(resource: str, victim: RunningGang) -> tuple[bool, int, str]:
    """Sort key: victims giving back `resource`, the most first, then by id."""
    charge = running_charge(victim)
    return (charge.resource != resource, -charge.amount, victim.id)


def _on_freed(
    state: ClusterState,
    gang: Gang,
    freed: AbstractSet[tuple[str, int]],
    policy: Policy,
    layouts: Memo,
) -> Plan | None:
    """`gang`'s plan in the working state without a victim of its own, when it takes some of
    the GPUs `freed` (node name, GPU) by this decision's victims; None otherwise. A gang that
    fits only on other GPUs (reservations lifted for preemption, quota the victims gave back:
    `_on_quota`) is not placed here."""
    if not any(_has_room(state, state.node_index[node], g) for node, g in freed):
        return None  # every freed GPU is taken already: no plan to try
    plan = try_plan(state, gang, policy, layouts)
    if plan is None or not any((r.node, g) in freed for r in plan.replicas for g in r.gpus):
        return None
    return plan


def _on_quota(
    state: ClusterState,
    gang: Gang,
    start: QueueGate,
    lifted: Sequence[tuple[int, tuple[int, ...]]],
    policy: Policy,
    layouts: Memo,
) -> Plan | None:
    """`gang`'s plan in the working state without a victim of its own, on a type whose quota
    it fits now but did not fit in `start` (the account before this pass evicted anything:
    placements since then only take quota, so the victims' evictions gave it back), with the
    `lifted` reserved GPUs kept (a drain gives way only to a gang that evicts); None otherwise.
    The gang waits for the victims whose quota it uses (`quota_waits`) and for those whose
    GPUs the plan takes, if any (`victim_waits`)."""
    need = gang.replicas_min
    types = [
        t for t in usable_types(state, gang, policy, layouts) if not start.allows(gang, t, need)
    ]
    if not types:
        return None
    with kept_while(state, lifted):
        for gpu_type in types:
            plan = plan_gang(state, gang, gpu_type, policy, layouts)
            if plan is not None:
                return plan
    return None


def _has_room(state: ClusterState, n: int, g: int) -> bool:
    """Whether GPU `g` of node `n` is empty, or has a MIG instance free, in the state."""
    layout = state.layout[n][g]
    return g in state.empty[n] or (layout is not None and len(state.used_inst[n][g]) < len(layout))


def _plan_value(state: ClusterState, plan: Plan, policy: Policy) -> float:
    return gang_value(plan.gang, state.catalog[plan.gpu_type], policy, len(plan.replicas))
