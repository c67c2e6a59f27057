"""Quota arithmetic over the queue tree: who uses what, and whether one more gang fits.

A `QuotaBook` holds, per resource (queues.py), the usage of each queue's own gangs, of each
subtree, and of gangs outside any queue, and the cluster's capacity of the resource (whole GPUs
of a type; for a MIG resource, as many slices as the type's GPUs could hold if all were cut for
it). It is built from a snapshot and updated as a decision takes and frees capacity, so every
check sees the gangs admitted before it in the same decision.

Whether `amount` more of a resource fits queue q (`check`), with E(c) = max(own usage of c + E
of c's children, nominal c keeps and does not lend):
  at q and every ancestor a:   own(a) + sum of E(children of a) <= nominal(a) + borrowing limit(a)
  at the cluster:               outside-queue usage + sum of E(top-level queues) <= capacity
So a queue borrows only what others lend (their unused nominal beyond what they keep) and what
no queue is promised, never more than its borrowing limit, and never makes its ancestors exceed
theirs. A non-preemptible gang may not borrow what could have to be reclaimed: it must stay
within the nominal quota of its queue and every ancestor, or take only capacity no queue is
promised at all (KAI Scheduler's rule that non-preemptible workloads run within quota).

Gangs outside every queue (pods naming none) are held to the same rules as one more top-level
queue, ROOT, with nominal 0 on every resource and no borrowing limit: they only borrow, so a
queue within its nominal quota reclaims them, and a non-preemptible one takes only capacity no
queue is promised (as Kueue and KAI treat a workload no quota covers). Without it such a gang
took a queue's idle nominal quota and, non-preemptible, kept it from the queue for good.

A queue *borrows* a resource while its subtree uses more than its nominal quota; only gangs of
borrowing queues are taken back by reclaim (reclaim.py).
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

from gpufleet.core.queues import NO_QUOTA, QueueTree, Quota, resource_key, split_resource
from gpufleet.core.snapshot import RunningGang, Snapshot

__all__ = ["Charge", "QuotaBook", "Shortfall", "running_charge"]

ROOT: Final = "<cluster>"
# Read-only stand-in for a queue with no usage yet (lookups in the hot path build no Counter).
_NONE: Final[Counter[str]] = Counter()


@dataclass(frozen=True, slots=True)
class Charge:
    """What one gang counts against its queue: `amount` of `resource`."""

    queue: str | None
    resource: str
    amount: int


def running_charge(gang: RunningGang) -> Charge:
    """A running gang's charge: its whole GPUs, or its MIG slices (one per replica)."""
    mig = gang.replicas[0].mig if gang.replicas else None
    if mig is not None:
        return Charge(gang.queue, resource_key(gang.gpu_type, mig.profile), len(gang.replicas))
    return Charge(gang.queue, gang.gpu_type, sum(len(r.gpus) for r in gang.replicas))


@dataclass(frozen=True, slots=True)
class Shortfall:
    """Why `need` more of `resource` does not fit a queue: the first limit it would break."""

    resource: str
    need: int
    room: int  # the most that would fit
    text: str
    # False when only the cluster's capacity binds, no queue keeps any of it and the queue
    # stays within its nominal quota: then the GPUs are simply in use, which is a capacity
    # reason (or a wait for reclaim) rather than a quota one.
    quota: bool = True


class QuotaBook:
    """Usage per queue and resource, updated through a decision (see module docstring)."""

    def __init__(self, tree: QueueTree, snapshot: Snapshot) -> None:
        self.tree = tree
        self._gpus: Counter[str] = Counter()
        for node in snapshot.nodes:
            self._gpus[node.gpu_type] += node.gpu_count
        self._catalog = snapshot.catalog
        self.own: dict[str, Counter[str]] = {}  # queue (ROOT: outside any queue) -> usage
        self.sub: dict[str, Counter[str]] = {}  # queue -> usage of its subtree
        self.held: dict[str, Charge] = {}  # running gang id -> its charge
        self._effective: dict[tuple[str, str], int] = {}
        self._undo: list[tuple[str, Charge | None]] | None = None  # inside `trial`
        for gang in snapshot.running:
            self.hold(gang.id, running_charge(gang))

    def copy(self) -> QuotaBook:
        twin = copy.copy(self)
        twin.own = {k: Counter(v) for k, v in self.own.items()}
        twin.sub = {k: Counter(v) for k, v in self.sub.items()}
        twin.held = dict(self.held)
        twin._effective = dict(self._effective)
        twin._undo = None
        return twin

    @contextmanager
    def trial(self) -> Iterator[None]:
        """A what-if on this book: what is held and freed inside is undone on leaving. For a
        what-if of a few gangs, far cheaper than a `copy` (evacuation.py asks one per node tried
        for an owed gang: at 1,000 nodes x 1,000 gangs the copies took a third of a decision)."""
        if self._undo is not None:
            raise RuntimeError("quota book trials do not nest")
        self._undo = []
        # Entries cached before the first change stay true after the undo (`_add` replaces the
        # cache rather than editing it, so this dict only gains entries computed before then).
        cache = self._effective
        try:
            yield
        finally:
            undo, self._undo = self._undo, None
            for gang_id, charge in reversed(undo):
                if charge is None:
                    self.free(gang_id)
                else:
                    self.hold(gang_id, charge)
            self._effective = cache

    # --- capacity and usage ----------------------------------------------------------------

    def capacity(self, resource: str) -> int:
        """The cluster's capacity of a resource (see module docstring)."""
        gpu_type, profile = split_resource(resource)
        gpus = self._gpus.get(gpu_type, 0)
        if profile is None:
            return gpus
        if gpu_type not in self._catalog or not self._catalog[gpu_type].has_mig_profile(profile):
            return 0
        return gpus * self._catalog[gpu_type].mig_profile(profile).max_instances

    def home(self, queue: str | None) -> str:
        """Where a gang of `queue` is counted: its queue, or ROOT outside any usable queue."""
        return queue if queue is not None and self.tree.usable(queue) else ROOT

    def used(self, queue: str, resource: str) -> int:
        """Usage of the queue's subtree (ROOT: of the gangs outside every queue)."""
        return self.sub.get(queue, _NONE)[resource]

    def quota(self, queue: str, resource: str) -> Quota:
        """The queue's quota of `resource`; ROOT's is nominal 0 with no limits (docstring)."""
        return NO_QUOTA if queue == ROOT else self.tree.queues[queue].quota(resource)

    def outside(self, resource: str) -> int:
        """Usage of gangs outside any usable queue."""
        return self.own.get(ROOT, _NONE)[resource]

    def borrowing(self, queue: str, resource: str) -> bool:
        """The queue's subtree uses more than its nominal quota of `resource`."""
        return self.used(queue, resource) > self.quota(queue, resource).nominal

    def borrowed(self, queue: str, resource: str) -> int:
        return max(0, self.used(queue, resource) - self.quota(queue, resource).nominal)

    def _add(self, home: str, resource: str, amount: int) -> None:
        self.own.setdefault(home, Counter())[resource] += amount
        for name in self.tree.path(home) if home != ROOT else (ROOT,):
            self.sub.setdefault(name, Counter())[resource] += amount
        self._effective = {k: v for k, v in self._effective.items() if k[1] != resource}

    def hold(self, gang_id: str, charge: Charge) -> None:
        """Count a gang's charge (a running gang, or one admitted by this decision)."""
        if gang_id in self.held:
            raise ValueError(f"gang {gang_id} is already counted")
        self.held[gang_id] = charge
        self._add(self.home(charge.queue), charge.resource, charge.amount)
        if self._undo is not None:
            self._undo.append((gang_id, None))

    def free(self, gang_id: str) -> Charge | None:
        """Stop counting a gang (preempted); its charge, or None when it was not counted."""
        charge = self.held.pop(gang_id, None)
        if charge is not None:
            self._add(self.home(charge.queue), charge.resource, -charge.amount)
            if self._undo is not None:
                self._undo.append((gang_id, charge))
        return charge

    # --- the checks ------------------------------------------------------------------------

    def effective(self, queue: str, resource: str) -> int:
        """E(queue): its subtree's usage, with each queue at least at what it keeps."""
        key = (queue, resource)
        if key not in self._effective:
            spec = self.tree.queues[queue]
            inner = self.own.get(queue, _NONE)[resource] + sum(
                self.effective(k, resource) for k in self.tree.kids(queue)
            )
            self._effective[key] = max(inner, spec.quota(resource).kept)
        return self._effective[key]

    def _levels(self, queue: str, resource: str, amount: int) -> Iterable[tuple[str, int, float]]:
        """(level, load with `amount` added to `queue`, limit) from the queue up to the root;
        for `queue` ROOT (outside every queue), the root's only."""
        path = self.tree.path(queue) if queue != ROOT else ()
        below: str | None = None
        below_effective = 0
        for name in path:
            spec = self.tree.queues[name]
            own = self.own.get(name, _NONE)[resource] + (amount if name == queue else 0)
            load = own + below_effective
            load += sum(self.effective(k, resource) for k in self.tree.kids(name) if k != below)
            yield name, load, spec.quota(resource).ceiling
            below, below_effective = name, max(load, spec.quota(resource).kept)
        load = self.outside(resource) + below_effective + (amount if queue == ROOT else 0)
        load += sum(self.effective(k, resource) for k in self.tree.kids(None) if k != below)
        yield ROOT, load, float(self.capacity(resource))

    def fits(self, queue: str, resource: str, amount: int, preemptible: bool = True) -> bool:
        if any(load > limit for _, load, limit in self._levels(queue, resource, amount)):
            return False
        return preemptible or self.safe_unreclaimable(queue, resource, amount)

    def fits_queues(self, queue: str, resource: str, amount: int) -> bool:
        """`amount` more of `resource` in `queue` keeps each queue level within its limit; the
        cluster's capacity aside (reservation.py: a drain waits for running gangs to end)."""
        return all(
            load <= limit
            for name, load, limit in self._levels(queue, resource, amount)
            if name != ROOT
        )

    def no_worse(self, queue: str, resource: str, amount: int, than: QuotaBook) -> bool:
        """`amount` more of `resource` in `queue` leaves each level from the queue up to the
        cluster within its limit or no more loaded than in `than` (the account before a
        decision, over the same tree): a level over its limit already is not made worse
        (preempt.py `quota_waits`, the rule validate_quota.py holds decisions to)."""
        now = self._levels(queue, resource, amount)
        then = than._levels(queue, resource, 0)
        return all(
            load <= limit or load <= old
            for (_, load, limit), (_, old, _) in zip(now, then, strict=True)
        )

    def safe_unreclaimable(self, queue: str, resource: str, amount: int) -> bool:
        """Within nominal all the way up, or only capacity that no queue is promised (ROOT,
        with nominal 0: the latter only)."""
        queues = self.tree.queues
        if queue == ROOT:
            if amount <= 0:
                return True
            path: tuple[str, ...] = ()
        else:
            path = self.tree.path(queue)
            if all(
                self.used(a, resource) + amount <= queues[a].quota(resource).nominal for a in path
            ):
                return True
        top = path[-1] if path else ROOT
        promised = sum(
            max(
                self.used(t, resource) + (amount if t == top else 0),
                queues[t].quota(resource).nominal,
            )
            for t in self.tree.kids(None)
        )
        outside = self.outside(resource) + (amount if queue == ROOT else 0)
        return outside + promised <= self.capacity(resource)

    def entitled(self, queue: str, resource: str, amount: int) -> bool:
        """`amount` more keeps the queue within its own nominal quota (so it may reclaim)."""
        return self.used(queue, resource) + amount <= self.quota(queue, resource).nominal

    def room(self, queue: str, resource: str, upto: int, preemptible: bool = True) -> int:
        """The most of `resource` (at most `upto`) the queue could take now."""
        low, high = 0, upto
        while low < high:
            mid = (low + high + 1) // 2
            if self.fits(queue, resource, mid, preemptible):
                low = mid
            else:
                high = mid - 1
        return low

    def shortfall(
        self, queue: str, resource: str, need: int, preemptible: bool = True
    ) -> Shortfall | None:
        """None when `need` fits; else the first limit it breaks, in words."""
        if self.fits(queue, resource, need, preemptible):
            return None
        room = self.room(queue, resource, need, preemptible)
        what = _units(resource, need)
        for level, load, limit in self._levels(queue, resource, need):
            if load <= limit:
                continue
            text = self._describe(queue, level, resource, what)
            is_quota = level != ROOT or bool(self._kept(None, resource))
            if not is_quota and self._beyond_guarantees(queue, resource, need):
                is_quota = True
                nominal = self.quota(queue, resource).nominal
                text += (
                    "; it has no nominal quota and the rest is the queues' nominal quota, in use"
                    if queue == ROOT
                    else f"; beyond its nominal quota ({self.used(queue, resource)} of {nominal} "
                    "used) the rest is other queues' nominal quota, in use"
                )
            return Shortfall(resource, need, room, text, is_quota)
        if queue == ROOT:
            text = (
                f"{_who(queue)} needs {what}; a non-preemptible job in no queue may use only "
                f"capacity no queue is promised ({room} free)"
            )
            return Shortfall(resource, need, room, text)
        quota = self.tree.queues[queue].quota(resource)
        text = (
            f"queue {queue} needs {what}; a non-preemptible job may use only its queues' "
            f"nominal quota (uses {self.used(queue, resource)} of {quota.nominal}) or capacity "
            f"no queue is promised ({room} free)"
        )
        return Shortfall(resource, need, room, text)

    def _beyond_guarantees(self, queue: str, resource: str, need: int) -> bool:
        """At the cluster's limit: the queue would borrow, and `need` would not fit even if
        every borrowed GPU of the other top-level queues were free, as the rest is their
        nominal quota in use (or kept). Then no finishing borrower helps: a quota reason.
        Otherwise the GPUs are in use by borrowers or the queue itself: a capacity reason."""
        if self.entitled(queue, resource, need):
            return False
        top = self.tree.path(queue)[-1] if queue != ROOT else ROOT
        guaranteed = sum(
            max(min(self.used(t, resource), nominal), kept)
            for t in self.tree.kids(None)
            if t != top
            for nominal, kept in [(self.tree.queues[t].quota(resource).nominal,
                                   self.tree.queues[t].quota(resource).kept)]
        )  # fmt: skip
        room = self.capacity(resource) - guaranteed
        if top == ROOT:
            # Outside every queue, what it uses comes back as its gangs end (nothing else is
            # charged there): only the queues' guarantees make it a quota reason.
            return need > room
        return self.used(top, resource) + need > room - self.outside(resource)

    def _kept(self, parent: str | None, resource: str) -> list[tuple[str, int]]:
        """Children of `parent` (None: the top level) keeping unused nominal they do not lend."""
        return sorted(
            (k, self.effective(k, resource) - self.used(k, resource))
            for k in self.tree.kids(parent)
            if self.effective(k, resource) > self.used(k, resource)
        )

    def _describe(self, queue: str, level: str, resource: str, what: str) -> str:
        if level == ROOT:
            kept = self._kept(None, resource)
            used = self.outside(resource) + sum(
                self.used(t, resource) for t in self.tree.kids(None)
            )
            detail = "".join(f", {t} keeps {k} it does not lend" for t, k in kept)
            return (
                f"{_who(queue)} needs {what}; of the cluster's {self.capacity(resource)}, "
                f"{used} are in use{detail}"
            )
        quota = self.tree.queues[level].quota(resource)
        where = f"queue {queue}" if level == queue else f"queue {queue}'s ancestor {level}"
        text = (
            f"{where} would exceed its quota for {what}: uses {self.used(level, resource)} of "
            f"nominal {quota.nominal} + borrowing limit {quota.borrowing_limit}"
        )
        kept = self._kept(level, resource)
        return text + "".join(f", {k} keeps {n} it does not lend" for k, n in kept)


def _who(queue: str) -> str:
    return "a job in no queue" if queue == ROOT else f"queue {queue}"


def _units(resource: str, count: int) -> str:
    gpu_type, profile = split_resource(resource)
    if profile is None:
        return f"{count} x {gpu_type}"
    return f"{count} x {profile} on {gpu_type}"
