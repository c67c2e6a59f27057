"""Independent checks of the queue rules a decision must keep (used by validate.py).

Recomputes, without the engine's `QuotaBook`, each queue's usage per resource before and after
the decision, and reports:
- a queue (or the cluster) over its limit after the decision when the decision made it worse:
  own usage + the children's E (usage, at least what they keep and do not lend) against
  nominal + borrowing limit, and outside-queue usage + the top-level E's against capacity;
- the same while victims still run: with the placements bound at once (they wait for no
  victim), and once the victims some placements wait for (their own and their `waits_for`)
  have gone and the others still run, with every placement bound by then: victims exit in
  any order, so every union of the placements' awaited sets is such a moment (up to
  `MAX_MOMENT_SETS` distinct sets; past that each set alone). A gang that fits only on quota
  the victims give back must wait for them (preempt.py `quota_waits`); before any wait was
  checked, one bound at once kept its queue over its limit for the victims' grace period;
- an admitted non-preemptible gang that borrows what a reclaim might need back (neither within
  nominal all the way up nor on capacity no queue is promised);
- a preemption across queues that is not a reclaim: the victim's queue did not borrow the
  victim's resource, or the winner's queue would go above its own nominal quota. The engine
  decides each reclaim on its working account, after the evictions and placements it made
  earlier in the same decision, an order the decision does not keep; so the victim's queue is
  judged on the most it can have held then (its usage before plus all its placements) and the
  winner's on the least (its usage before less all its evicted gangs);
- inside one queue, a preemption of a gang of equal or higher priority (but an elastic job's
  growth unit may go for a gang of its own priority: rebalance.py);
- a gang of an unusable queue, with a priority outside its queue's range, or from a namespace
  its queue's namespace selector does not take (or whose labels are unknown), that is placed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from gpufleet.core.borrowing import growth_job
from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.policy import SERVICE_TIER_GPU_S
from gpufleet.core.queues import QueueTree, resource_key, split_resource
from gpufleet.core.service_tier import rank
from gpufleet.core.snapshot import RunningGang, Snapshot

__all__ = ["MAX_MOMENT_SETS", "quota_problems", "start_moments"]

# Distinct awaited victim sets whose every union is checked as a moment (`start_moments`):
# 2**10 moments at most. The scheduler checks a placement in at most 64 such states
# (preempt.py MAX_START_STATES) on one resource.
MAX_MOMENT_SETS = 10

Usage = dict[str | None, Counter[str]]  # queue (None: outside) -> own usage per resource


def _charge(gang: RunningGang) -> tuple[str, int]:
    mig = gang.replicas[0].mig if gang.replicas else None
    if mig is not None:
        return resource_key(gang.gpu_type, mig.profile), len(gang.replicas)
    return gang.gpu_type, sum(len(r.gpus) for r in gang.replicas)


def _capacity(snapshot: Snapshot, resource: str) -> int:
    gpu_type, profile = split_resource(resource)
    gpus = sum(n.gpu_count for n in snapshot.nodes if n.gpu_type == gpu_type)
    if profile is None:
        return gpus
    if gpu_type not in snapshot.catalog:
        return 0
    gpu = snapshot.catalog[gpu_type]
    if not gpu.has_mig_profile(profile):
        return 0
    return gpus * gpu.mig_profile(profile).max_instances


def _namespace_taken(
    snapshot: Snapshot, tree: QueueTree, queue: str, namespace: str | None
) -> bool:
    """`queue` takes gangs from `namespace` (its selector matched here directly)."""
    selector = tree.queues[queue].namespace_selector
    if selector is None or not selector.requirements or namespace is None:
        return True
    labels = snapshot.namespace_labels.get(namespace)
    return labels is not None and selector.matches(labels)


class _Account:
    def __init__(self, tree: QueueTree, own: Usage) -> None:
        self.tree, self.own = tree, own

    def subtree(self, name: str, resource: str) -> int:
        mine = self.own.get(name, Counter())[resource]
        return mine + sum(self.subtree(k, resource) for k in self.tree.kids(name))

    def effective(self, name: str, resource: str) -> int:
        inner = self.load(name, resource)
        return max(inner, self.tree.queues[name].quota(resource).kept)

    def load(self, name: str | None, resource: str) -> int:
        """Own usage plus the children's E (the top level's under None)."""
        mine = self.own.get(name, Counter())[resource]
        return mine + sum(self.effective(k, resource) for k in self.tree.kids(name))


def _home(tree: QueueTree, queue: str | None) -> str | None:
    return queue if queue is not None and tree.usable(queue) else None


def quota_problems(
    snapshot: Snapshot,
    pending: Sequence[Gang],
    decision: Decision,
    tier_gpu_s: float | None = SERVICE_TIER_GPU_S,
) -> list[str]:
    """The decision's breaches of the queues' rules; `tier_gpu_s` is the service tier's
    threshold the decision was made with (`Policy.service_tier_gpu_s`)."""
    tree = snapshot.queues
    if tree is None:
        return []
    problems: list[str] = []
    gangs = {g.id: g for g in pending}
    running = {r.id: r for r in snapshot.running}
    before: Usage = {}
    for held in snapshot.running:
        resource, amount = _charge(held)
        before.setdefault(_home(tree, held.queue), Counter())[resource] += amount
    old = _Account(tree, before)
    after: Usage = {k: Counter(v) for k, v in before.items()}
    for pre in decision.preemptions:
        gone = running.get(pre.gang_id)
        if gone is not None:
            resource, amount = _charge(gone)
            after[_home(tree, gone.queue)][resource] -= amount
    least = _Account(tree, {k: Counter(v) for k, v in after.items()})
    most: Usage = {k: Counter(v) for k, v in before.items()}
    for placement in decision.placements:
        gang = gangs.get(placement.gang_id)
        if gang is None:
            continue
        if gang.queue is not None and not tree.usable(gang.queue):
            problems.append(f"{gang.id} placed though its queue {gang.queue} is unusable")
            continue
        if gang.queue is not None and not tree.queues[gang.queue].admits_priority(gang.priority):
            problems.append(f"{gang.id} placed with a priority its queue does not take")
        if gang.queue is not None and not _namespace_taken(
            snapshot, tree, gang.queue, gang.namespace
        ):
            problems.append(f"{gang.id} placed from a namespace its queue does not take")
        resource = resource_key(placement.gpu_type, gang.mig_profile)
        amount = gang.gpus_needed(placement.replica_count)
        after.setdefault(_home(tree, gang.queue), Counter())[resource] += amount
        most.setdefault(_home(tree, gang.queue), Counter())[resource] += amount
    highest = _Account(tree, most)
    for pre in decision.preemptions:
        victim, winner = running.get(pre.gang_id), gangs.get(pre.for_gang)
        if victim is None or winner is None:
            continue  # validate.py reports unknown gangs
        problems.extend(_preemption_problems(tree, highest, least, victim, winner, tier_gpu_s))
    new = _Account(tree, after)
    resources = sorted({r for usage in after.values() for r in usage})
    for resource in resources:
        problems.extend(_limit_problems(snapshot, tree, old, new, resource))
    problems.extend(_start_problems(snapshot, tree, old, before, gangs, running, decision))
    for placement in decision.placements:
        admitted = gangs.get(placement.gang_id)
        if admitted is None or admitted.preemptible or _home(tree, admitted.queue) is None:
            continue
        resource = resource_key(placement.gpu_type, admitted.mig_profile)
        if not _safe(snapshot, tree, new, admitted.queue or "", resource):
            problems.append(
                f"non-preemptible {admitted.id} borrows {resource} that may be reclaimed"
            )
    return problems


def _start_problems(
    snapshot: Snapshot,
    tree: QueueTree,
    old: _Account,
    before: Usage,
    gangs: Mapping[str, Gang],
    running: Mapping[str, RunningGang],
    decision: Decision,
) -> list[str]:
    """The queues' limits while victims still run. A placement is bound once every gang it
    waits for has gone (its own victims, if it preempted, and its `waits_for`); one waiting for
    none, at once. At each such moment (`start_moments`: no victim gone yet, then the victims
    of any placements' awaited sets gone, the others running), with the placements whose
    awaited victims are all gone bound, no queue may be over a limit the decision made it
    exceed: a gang that fits only on quota the victims give back must wait for them (preempt.py
    `quota_waits`). The moment every victim has gone is the decision's own account, judged
    above."""
    if not decision.preemptions:
        return []
    own: dict[str, set[str]] = {}
    for pre in decision.preemptions:
        own.setdefault(pre.for_gang, set()).add(pre.gang_id)
    victims = frozenset(p.gang_id for p in decision.preemptions)
    awaits = {  # a wait for a gang not evicted frees nothing (validate.py reports it)
        p.gang_id: (frozenset(own.get(p.gang_id, set()) | set(p.waits_for)) & victims, p)
        for p in decision.placements
        if p.gang_id in gangs
    }
    moments = start_moments([gone for gone, _ in awaits.values()], victims)
    out: list[str] = []
    for gone in sorted(moments, key=lambda m: (len(m), sorted(m))):
        usage: Usage = {k: Counter(v) for k, v in before.items()}
        for victim_id in gone:
            victim = running.get(victim_id)
            if victim is not None:
                resource, amount = _charge(victim)
                usage[_home(tree, victim.queue)][resource] -= amount
        bound: dict[str, list[str]] = {}  # resource -> gangs bound by this moment
        for gang_id, (awaited, placement) in awaits.items():
            if not awaited <= gone:
                continue
            gang = gangs[gang_id]
            resource = resource_key(placement.gpu_type, gang.mig_profile)
            amount = gang.gpus_needed(placement.replica_count)
            usage.setdefault(_home(tree, gang.queue), Counter())[resource] += amount
            bound.setdefault(resource, []).append(gang_id)
        account = _Account(tree, usage)
        when = (
            "bound at once, while the victims still run"
            if not gone
            else f"bound once {', '.join(sorted(gone))} {'has' if len(gone) == 1 else 'have'} "
            "gone, while other victims still run"
        )
        for resource, ids in sorted(bound.items()):
            out.extend(
                f"{', '.join(sorted(ids))} {when}: {problem} (a gang waits for the victims "
                "whose GPUs or queue quota it takes: waits_for)"
                for problem in _limit_problems(snapshot, tree, old, account, resource)
            )
    return out


def start_moments(
    awaited: Sequence[frozenset[str]], victims: frozenset[str]
) -> set[frozenset[str]]:
    """The sets of gone victims to check placements' starts at (`_start_problems`): none gone,
    and every union of the `awaited` sets short of all `victims` (which the decision's own
    account covers). Any other set of gone victims binds the same placements as the union of
    the awaited sets inside it, with no fewer victims gone, so no queue holds more then.
    Past `MAX_MOMENT_SETS` distinct sets, each set alone (no union)."""
    sets = sorted({a for a in awaited if a and not victims <= a}, key=sorted)
    if len(sets) > MAX_MOMENT_SETS:
        return {frozenset(), *sets}
    moments: set[frozenset[str]] = {frozenset()}
    for one in sets:
        moments |= {m | one for m in moments}
    return {m for m in moments if not victims <= m}


def _preemption_problems(
    tree: QueueTree,
    most: _Account,
    least: _Account,
    victim: RunningGang,
    winner: Gang,
    tier_gpu_s: float | None,
) -> list[str]:
    """`most`/`least`: the most and the least each queue can have held when the engine took
    this preemption (module docstring)."""
    vq, wq = _home(tree, victim.queue), _home(tree, winner.queue)
    if vq == wq:
        # An elastic job's growth unit may go for a gang of its own priority (rebalance.py).
        shrink = growth_job(victim) is not None and victim.priority <= winner.priority
        theta = None if vq is None else tier_gpu_s  # the service tier holds inside queues
        if rank(victim, theta) >= rank(winner, theta) and not shrink:
            return [f"{victim.id} preempted inside its queue for {winner.id} of no higher priority"]
        return []
    if wq is None:
        return [f"{victim.id} reclaimed for {winner.id}, which is outside any queue"]
    out: list[str] = []
    resource, _ = _charge(victim)
    if vq is not None:
        nominal = tree.queues[vq].quota(resource).nominal
        if most.subtree(vq, resource) <= nominal:
            out.append(f"{victim.id} reclaimed though queue {vq} did not borrow {resource}")
    need = resource_key(victim.gpu_type, winner.mig_profile)
    amount = winner.gpus_needed(winner.replicas_min)
    if least.subtree(wq, need) + amount > tree.queues[wq].quota(need).nominal:
        out.append(f"{victim.id} reclaimed for {winner.id}, beyond queue {wq}'s nominal")
    return out


def _limit_problems(
    snapshot: Snapshot, tree: QueueTree, old: _Account, new: _Account, resource: str
) -> list[str]:
    out: list[str] = []
    for name in sorted(tree.queues):
        if not tree.usable(name):
            continue
        limit = tree.queues[name].quota(resource).ceiling
        load = new.load(name, resource)
        if load > limit and load > old.load(name, resource):
            out.append(f"queue {name} over its {resource} limit: {load} > {limit:g}")
    capacity = _capacity(snapshot, resource)
    load = new.load(None, resource)
    if load > capacity and load > old.load(None, resource):
        out.append(f"cluster over its {resource} capacity: {load} > {capacity}")
    return out


def _safe(snapshot: Snapshot, tree: QueueTree, new: _Account, queue: str, resource: str) -> bool:
    queues = tree.queues
    path = tree.path(queue)
    if all(new.subtree(a, resource) <= queues[a].quota(resource).nominal for a in path):
        return True
    promised = sum(
        max(new.subtree(t, resource), queues[t].quota(resource).nominal) for t in tree.kids(None)
    )
    outside = new.own.get(None, Counter())[resource]
    return outside + promised <= _capacity(snapshot, resource)
