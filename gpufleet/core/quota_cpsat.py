"""The queues' quota rules (quota.py) as CP-SAT constraints over the model's admission options.

For each resource the options use and each queue on their paths, e[q] >= own usage of q (now
plus what the options admit into q) + sum of e over q's children, and e[q] >= what q keeps; the
inner sum is bounded by q's nominal + borrowing limit, and at the cluster the usage outside
queues plus the top-level e's by the capacity. Queues without options stay at their current
E(q), a constant. So the solver admits exactly the sets of gangs that the quota checks of the
greedy pass would accept in some order.

A non-preemptible gang's option, when admitted, needs either its queue and every ancestor
within nominal (usage including everything admitted) or the cluster's capacity no queue is
promised (the same rule as `QuotaBook.fits`).

A reclaim greedy made (a victim of another queue, evicted because its queue borrowed the
victim's resource in greedy's working account) stays one: the victim's queue must still borrow
that resource with everything the model admits into it (`add_reclaim_floors`). Without it the
model, which keeps greedy's evictions but not the placements that made the victim's queue a
borrower, could admit fewer of that queue's gangs and leave the eviction taken from a queue
within its nominal quota (scale bench, 8 queues: 3 such reclaims on each of two samples).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ortools.sat.python import cp_model

from gpufleet.core.admission import QueueGate
from gpufleet.core.demand import Gang
from gpufleet.core.queues import resource_key
from gpufleet.core.quota import ROOT

__all__ = ["QuotaOption", "add_quota_constraints", "add_reclaim_floors"]


@dataclass(frozen=True, slots=True)
class QuotaOption:
    """One admission option of the model: `amount` of the gang's resource on `gpu_type` when
    `admit` is true (`amount` is a linear expression, 0 when not admitted)."""

    gang: Gang
    gpu_type: str
    amount: Any  # cp_model.LinearExprT
    admit: cp_model.IntVar


def _sum(terms: Sequence[Any]) -> Any:
    return cp_model.LinearExpr.sum(list(terms))


def add_quota_constraints(
    model: cp_model.CpModel, gate: QueueGate, options: Sequence[QuotaOption]
) -> None:
    by_resource: dict[str, dict[str, list[QuotaOption]]] = defaultdict(lambda: defaultdict(list))
    for o in options:
        resource = resource_key(o.gpu_type, o.gang.mig_profile)
        by_resource[resource][gate.book.home(o.gang.queue)].append(o)
    for resource, homes in sorted(by_resource.items()):
        _ResourceQuota(model, gate, resource, homes).build()


def add_reclaim_floors(
    model: cp_model.CpModel,
    gate: QueueGate,
    options: Sequence[QuotaOption],
    floors: Mapping[tuple[str, str], int],
) -> None:
    """For each (queue, resource) of `floors`, the options admitted into the queue's subtree
    take at least that much of the resource (module docstring). A floor no option can reach
    leaves no solution: the caller keeps greedy's decision then."""
    for (queue, resource), floor in sorted(floors.items()):
        if floor <= 0:
            continue
        terms = [
            o.amount
            for o in options
            if resource_key(o.gpu_type, o.gang.mig_profile) == resource
            and (home := gate.book.home(o.gang.queue)) != ROOT
            and queue in gate.tree.path(home)
        ]
        model.add(_sum(terms) >= floor)


class _ResourceQuota:
    """The constraints of one resource (module docstring)."""

    def __init__(
        self,
        model: cp_model.CpModel,
        gate: QueueGate,
        resource: str,
        homes: dict[str, list[QuotaOption]],
    ) -> None:
        self.model, self.book, self.tree = model, gate.book, gate.tree
        self.resource, self.homes = resource, homes
        book, tree = self.book, self.tree
        self.bound = book.capacity(resource) + book.outside(resource)
        self.bound += sum(book.used(t, resource) for t in tree.kids(None))
        self.bound += sum(
            o.gang.gpus_needed(o.gang.replicas_max) for opts in homes.values() for o in opts
        )
        # A queue's nominal quota may exceed the fleet (nodes gone, or quotas set ahead of
        # them), and the variables at least a nominal quota must reach it.
        nominal = max((q.quota(resource).nominal for q in tree.queues.values()), default=0)
        self.bound = max(self.bound, nominal)
        self.touched = {name for home in homes if home != ROOT for name in tree.path(home)}
        self.added: dict[str, Any] = {}  # queue -> what its subtree's options add

    def build(self) -> None:
        book, resource = self.book, self.resource
        tops = [self._level(t) for t in self.tree.kids(None)]
        outside = book.outside(resource) + self._own(ROOT)
        now = book.outside(resource) + sum(
            book.effective(t, resource) for t in self.tree.kids(None)
        )
        # Gangs outside every queue count as a top-level queue with nominal 0 (quota.py ROOT).
        every = _sum([o.amount for opts in self.homes.values() for o in opts])
        self._at_most(outside + _sum(tops), now, book.capacity(resource), every)
        for home, opts in sorted(self.homes.items()):
            for o in opts:
                if not o.gang.preemptible:
                    self._non_preemptible(home, o, outside)

    def _own(self, home: str) -> Any:
        return _sum([o.amount for o in self.homes.get(home, [])])

    def _level(self, name: str) -> Any:
        """e[name]: a variable for queues with options below them, E(name) for the others."""
        resource = self.resource
        if name not in self.touched:
            return self.book.effective(name, resource)
        quota = self.tree.queues[name].quota(resource)
        kids = self.tree.kids(name)
        inner = self.book.own[name][resource] if name in self.book.own else 0
        inner += self._own(name)
        inner += _sum([self._level(k) for k in kids])
        self.added[name] = self._own(name) + _sum([self.added[k] for k in kids if k in self.added])
        if quota.borrowing_limit is not None:
            now = self.book.own[name][resource] if name in self.book.own else 0
            now += sum(self.book.effective(k, resource) for k in kids)
            limit = quota.nominal + quota.borrowing_limit
            self._at_most(inner, now, limit, self.added[name])
        e = self.model.new_int_var(0, self.bound, f"quota[{name},{resource}]")
        self.model.add(e >= inner)
        self.model.add(e >= quota.kept)
        return e

    def _at_most(self, load: Any, now: int, limit: int, added: Any) -> None:
        """load <= limit; when the load is over the limit already (`now`, with nothing
        admitted: a quota lowered under running gangs, nodes gone, a queue keeping more than
        the fleet holds), nothing more (`added`), as `QuotaBook.fits` refuses any amount there,
        instead of a model with no solution at all."""
        if now > limit:
            self.model.add(added == 0)
        else:
            self.model.add(load <= limit)

    def _non_preemptible(self, home: str, option: QuotaOption, outside: Any) -> None:
        model, book, tree, resource = self.model, self.book, self.tree, self.resource
        key = f"{option.gang.id},{option.gpu_type}"
        within = model.new_bool_var(f"within_nominal[{key}]")
        unpromised = model.new_bool_var(f"unpromised[{key}]")
        model.add_bool_or([within, unpromised]).only_enforce_if(option.admit)
        if home == ROOT:
            model.add(within == 0)  # ROOT's nominal is 0
        for name in tree.path(home) if home != ROOT else ():
            nominal = tree.queues[name].quota(resource).nominal
            used = book.used(name, resource) + self.added[name]
            model.add(used <= nominal).only_enforce_if(within)
        promised = []
        for top in tree.kids(None):
            m = model.new_int_var(0, self.bound, f"promised[{key},{top}]")
            model.add(m >= book.used(top, resource) + self.added.get(top, 0))
            model.add(m >= tree.queues[top].quota(resource).nominal)
            promised.append(m)
        cap = book.capacity(resource)
        model.add(outside + _sum(promised) <= cap).only_enforce_if(unpromised)
