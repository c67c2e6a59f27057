"""Independent checks of the queue rules a decision must keep (used by validate.py).

Recomputes, without the engine's `QuotaBook`, each queue's usage per resource before and after
the decision, and reports:
- a queue (or the cluster) over its limit after the decision when the decision made it worse:
  own usage + the children's E (usage, at least what they keep and do not lend) against
  nominal + borrowing limit, and outside-queue usage + the top-level E's against capacity;
- the same while victims still run: with the placements bound at once (they wait for no
  victim), and once the victims some placements wait for (their own and their `waits_for`)
  have gone and the others still run, with every placement bound by then: victims exit in
  any order, so every set of gone victims is such a moment. Per resource, the unions of its
  placements' awaited sets cover them all, and a branch of unions that cannot break a limit
  is not searched (`_Moments`), so the check is exact. A gang that fits only on quota the
  victims give back must wait for them (preempt.py `quota_waits`); before any wait was
  checked, one bound at once kept its queue over its limit for the victims' grace period;
- an admitted non-preemptible gang that borrows what a reclaim might need back (neither within
  nominal all the way up nor on capacity no queue is promised); a gang outside every queue
  counts as one of a top-level queue with nominal 0 (quota.py ROOT), so one of them must fit
  capacity no queue is promised (outside-queue usage is in the cluster's load above already);
- a preemption across queues that is not a reclaim: the victim's queue did not borrow the
  victim's resource, or the winner's queue would go above its own nominal quota. The engine
  decides each reclaim on its working account, after the evictions and placements it made
  earlier in the same decision, an order the decision does not keep; so the victim's queue is
  judged on the most it can have held then (its usage before plus all its placements) and the
  winner's on the least (its usage before less all its evicted gangs);
- inside one queue, a preemption of a gang of equal or higher priority (but an elastic job's
  growth unit may go for a gang of its own priority: rebalance.py), and, with the service
  tier's limit on re-evictions (`Policy.service_tier_rerun_s`), the tier's eviction (of a gang
  of the winner's priority) of a gang it evicted before whose current run is shorter than the
  limit; restated here rather than calling `service_tier.rerun_guarded`, so that a fault in
  the rule shows; and the tier's eviction for or of a server (`service_ranked` False);
- a gang of an unusable queue, with a priority outside its queue's range, or from a namespace
  its queue's namespace selector does not take (or whose labels are unknown), that is placed.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from gpufleet.core.borrowing import growth_job
from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.policy import SERVICE_TIER_GPU_S
from gpufleet.core.queues import QueueTree, resource_key, split_resource
from gpufleet.core.service_tier import rank
from gpufleet.core.snapshot import RunningGang, Snapshot

__all__ = ["quota_problems"]

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
    tier_rerun_s: float | None = None,
) -> list[str]:
    """The decision's breaches of the queues' rules; `tier_gpu_s` is the service tier's
    threshold the decision was made with (`Policy.service_tier_gpu_s`) and `tier_rerun_s` its
    limit on re-evictions (`Policy.service_tier_rerun_s`; None: no limit)."""
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
        problems.extend(
            _preemption_problems(tree, highest, least, victim, winner, tier_gpu_s, tier_rerun_s)
        )
    new = _Account(tree, after)
    resources = sorted({r for usage in after.values() for r in usage})
    for resource in resources:
        problems.extend(_limit_problems(snapshot, tree, old, new, resource))
    problems.extend(_start_problems(snapshot, tree, old, before, gangs, running, decision))
    for placement in decision.placements:
        admitted = gangs.get(placement.gang_id)
        if admitted is None or admitted.preemptible:
            continue
        if admitted.queue is not None and not tree.usable(admitted.queue):
            continue  # reported above
        resource = resource_key(placement.gpu_type, admitted.mig_profile)
        if not _safe(snapshot, tree, new, admitted.queue, resource):
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
    none, at once. Victims exit in any order, so every set of gone victims short of all of them
    is a moment (the moment every victim has gone is the decision's own account, judged above):
    with the placements whose awaited victims are all gone bound, no queue may be over a limit
    the decision made it exceed: a gang that fits only on quota the victims give back must wait
    for them (preempt.py `quota_waits`). Each resource is judged alone (`_Moments`)."""
    if not decision.preemptions:
        return []
    own: dict[str, set[str]] = {}
    for pre in decision.preemptions:
        own.setdefault(pre.for_gang, set()).add(pre.gang_id)
    victims = frozenset(p.gang_id for p in decision.preemptions)
    starts: dict[str, list[_Start]] = {}
    for p in decision.placements:
        gang = gangs.get(p.gang_id)
        if gang is None:
            continue
        # A wait for a gang not evicted frees nothing (validate.py reports it); one placement
        # that awaits every victim starts in the decision's own account only.
        awaited = frozenset(own.get(p.gang_id, set()) | set(p.waits_for)) & victims
        if awaited and victims <= awaited:
            continue
        resource = resource_key(p.gpu_type, gang.mig_profile)
        start = _Start(
            p.gang_id, _home(tree, gang.queue), gang.gpus_needed(p.replica_count), awaited
        )
        starts.setdefault(resource, []).append(start)
    gone_charges: dict[str, dict[str, tuple[str | None, int]]] = {}
    for victim_id in victims:
        victim = running.get(victim_id)
        if victim is not None:
            resource, amount = _charge(victim)
            gone_charges.setdefault(resource, {})[victim_id] = (_home(tree, victim.queue), amount)
    found: list[tuple[frozenset[str], str, list[str], list[str]]] = []
    for resource, on_resource in sorted(starts.items()):
        charges = gone_charges.get(resource, {})
        moments = _Moments(snapshot, tree, old, before, resource, on_resource, victims, charges)
        for gone, problems in moments.with_problems():
            ids = sorted(s.gang_id for s in on_resource if s.awaited <= gone)
            found.append((gone, resource, ids, problems))
    out: list[str] = []
    for gone, _, ids, problems in sorted(found, key=lambda f: (len(f[0]), sorted(f[0]), f[1])):
        when = (
            "bound at once, while the victims still run"
            if not gone
            else f"bound once {', '.join(sorted(gone))} {'has' if len(gone) == 1 else 'have'} "
            "gone, while other victims still run"
        )
        out.extend(
            f"{', '.join(ids)} {when}: {problem} (a gang waits for the victims whose GPUs or "
            "queue quota it takes: waits_for)"
            for problem in problems
        )
    return out


@dataclass(frozen=True)
class _Start:
    """A placement on one resource: its gang, home queue, amount and awaited victims."""

    gang_id: str
    home: str | None
    amount: int
    awaited: frozenset[str]


class _Moments:
    """The moments one resource's account must be judged at, and their problems.

    Only the placements on the resource and the victims charged on it change its account, and
    a level's (a queue's, or the cluster's) load only those under it. Take a level and any set
    G of gone victims: the placements under it bound at G are those whose awaited set is inside
    G, and they are as well bound at M, the union of those awaited sets; M is inside G, so no
    more victims are gone at M, and a load only grows with the usage of a queue under it: the
    level holds at least as much at M as at G. So each level is judged at the unions of its
    placements' distinct awaited sets (the empty one too): `witness` searches them, fewest
    victims gone first, and stops at the first that breaks the level's limit."""

    def __init__(
        self,
        snapshot: Snapshot,
        tree: QueueTree,
        old: _Account,
        before: Usage,
        resource: str,
        starts: Sequence[_Start],
        victims: frozenset[str],
        charges: Mapping[str, tuple[str | None, int]],
    ) -> None:
        """`charges`: the victims charged on `resource`, each with its home queue and amount."""
        self.snapshot, self.tree, self.old, self.resource = snapshot, tree, old, resource
        self.base = {q: c[resource] for q, c in before.items() if c[resource]}
        self.starts, self.victims, self.charges = starts, victims, charges
        # A level breaks a limit when its load passes both its limit and its load before.
        self.threshold: dict[str | None, float] = {
            q: max(tree.queues[q].quota(resource).ceiling, old.load(q, resource))
            for q in tree.queues
            if tree.usable(q)
        }
        self.threshold[None] = max(_capacity(snapshot, resource), old.load(None, resource))

    def account(self, gone: frozenset[str], reach: frozenset[str]) -> _Account:
        """With the victims in `gone` gone and every placement whose awaited set is inside
        `reach` bound."""
        own = dict(self.base)
        for victim_id in gone & self.charges.keys():
            home, amount = self.charges[victim_id]
            own[home] = own.get(home, 0) - amount
        for start in self.starts:
            if start.awaited <= reach:
                own[start.home] = own.get(start.home, 0) + start.amount
        return _Account(self.tree, {q: Counter({self.resource: n}) for q, n in own.items()})

    def with_problems(self) -> list[tuple[frozenset[str], list[str]]]:
        """A moment for each level broken at some moment, with all its problems."""
        most = self.account(frozenset(), self.victims)  # every placement bound, no victim gone
        moments = {
            self.witness(level)
            for level, limit in self.threshold.items()
            if most.load(level, self.resource) > limit
        }
        return [
            (
                gone,
                _limit_problems(
                    self.snapshot, self.tree, self.old, self.account(gone, gone), self.resource
                ),
            )
            for gone in moments
            if gone is not None
        ]

    def _block(self, home: str | None, level: str | None) -> str | bool | None:
        """The block of `level`'s load a queue's usage is in: its nearest queue up to `level`
        (not included) that keeps some quota (its load counts at least that much, so what its
        subtree gains and loses there does not pass on below it), else `level`; False: not
        under `level`."""
        if home is None:
            return None if level is None else False
        for name in self.tree.path(home):
            if name == level:
                return level
            if self.tree.queues[name].quota(self.resource).kept > 0:
                return name
        return level if level is None else False

    def witness(self, level: str | None) -> frozenset[str] | None:
        """The first moment (fewest victims gone, then by name) at which `level` breaks its
        limit; None: none. A search that puts each awaited set in or out in turn, and drops a
        branch when even the most its moments can hold (`_most`) breaks nothing."""
        blocks = {s.home: self._block(s.home, level) for s in self.starts}
        blocks |= {h: self._block(h, level) for h, _ in self.charges.values()}
        mine = [s for s in self.starts if blocks[s.home] is not False]
        sets = sorted({s.awaited for s in mine if s.awaited}, key=sorted)
        reach = [frozenset[str]()] * (len(sets) + 1)  # reach[i]: what sets i... can add
        for i in range(len(sets) - 1, -1, -1):
            reach[i] = reach[i + 1] | sets[i]
        seen: set[tuple[frozenset[str], int]] = set()
        todo: list[tuple[int, tuple[str, ...], int, frozenset[str]]] = [(0, (), 0, frozenset())]
        while todo:
            _, _, i, gone = heapq.heappop(todo)
            if (gone, i) in seen:
                continue
            seen.add((gone, i))
            if self._most(level, blocks, mine, gone, gone | reach[i]) <= self.threshold[level]:
                continue
            if i == len(sets):
                return gone  # nothing left to reach: the moment's own load
            for nxt in {gone, gone | sets[i]}:
                if not self.victims <= nxt:
                    heapq.heappush(todo, (len(nxt), tuple(sorted(nxt)), i + 1, nxt))
        return None

    def _most(
        self,
        level: str | None,
        blocks: Mapping[str | None, str | bool | None],
        mine: Sequence[_Start],
        gone: frozenset[str],
        reach: frozenset[str],
    ) -> Fraction:
        """The most `level`'s load can be at a moment from `gone` up to `reach`: its load at
        `gone`, plus what each placement bound on the way can add, net of a share of the victims
        it needs that could still go: each such victim's amount split among the placements in
        its block that need it (every such victim gone is paid once in full, by at most all
        of them; and within a block, the load is a sum)."""
        most = Fraction(self.account(gone, gone).load(level, self.resource))
        coming = [s for s in mine if not s.awaited <= gone and s.awaited <= reach]
        needs: Counter[tuple[str, str | bool | None]] = Counter()
        for s in coming:
            needs.update((v, blocks[s.home]) for v in s.awaited - gone)
        for s in coming:
            share = Fraction(0)
            for v in s.awaited - gone:
                if v in self.charges and blocks[self.charges[v][0]] == blocks[s.home]:
                    share += Fraction(self.charges[v][1], needs[v, blocks[s.home]])
            most += max(Fraction(0), s.amount - share)
        return most


def _preemption_problems(
    tree: QueueTree,
    most: _Account,
    least: _Account,
    victim: RunningGang,
    winner: Gang,
    tier_gpu_s: float | None,
    tier_rerun_s: float | None,
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
        by_tier = victim.priority == winner.priority and not shrink
        if by_tier and not (victim.service_ranked and winner.service_ranked):
            return [
                f"{victim.id} evicted by the service tier for {winner.id}: a server has no tier"
            ]
        if (
            by_tier
            and tier_rerun_s is not None
            and victim.tier_evictions > 0
            and victim.run_s < tier_rerun_s
        ):
            return [
                f"{victim.id} evicted by the service tier again for {winner.id} after "
                f"{victim.run_s:g} s of its run, under the limit of {tier_rerun_s:g} s"
            ]
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


def _safe(
    snapshot: Snapshot, tree: QueueTree, new: _Account, queue: str | None, resource: str
) -> bool:
    """Within nominal all the way up, or within capacity no queue is promised; outside every
    queue (None: nominal 0), only the latter."""
    queues = tree.queues
    if queue is not None and all(
        new.subtree(a, resource) <= queues[a].quota(resource).nominal for a in tree.path(queue)
    ):
        return True
    promised = sum(
        max(new.subtree(t, resource), queues[t].quota(resource).nominal) for t in tree.kids(None)
    )
    outside = new.own.get(None, Counter())[resource]
    return outside + promised <= _capacity(snapshot, resource)
