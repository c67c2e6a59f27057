"""What each queue holds, lends and waits for: the figures a GPUQueue's status shows.

Per queue and resource (queues.py):
- `used`: GPUs (or slices) its subtree's running gangs hold;
- `borrowed`: of those, how many are above its nominal quota;
- `lent`: how many of its unused nominal GPUs other queues hold now. Borrowers among siblings
  are served first by what their parent (the cluster, for top-level queues) holds beyond the
  siblings' nominal quotas, then by the siblings' lendable unused quota (unused nominal, up to
  the lending limit), lenders taken in name order; so the queues' `lent` add up to what the
  siblings borrow beyond the unpromised capacity;
- `pending`: what its waiting gangs ask for at their minimum size, on their first acceptable
  type (a gang accepting several types is counted once); a gang from a namespace the queue's
  selector does not take is no demand of the queue, and not counted at all.
And per queue: its fair and attained share (fairshare.py), its running and pending gang counts,
whether it takes jobs (and why not), and the resources whose children's nominal quotas add up
to more than its own.

Apart from the queues, `outside_usage`: what the running gangs outside every queue hold (no
queue's status counts them), per resource.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpufleet.core.admission import namespace_refusal
from gpufleet.core.demand import Gang
from gpufleet.core.fairshare import queue_shares
from gpufleet.core.queues import QueueTree, resource_key
from gpufleet.core.quota import ROOT, QuotaBook, running_charge
from gpufleet.core.snapshot import Snapshot

__all__ = ["QueueFigures", "ResourceFigures", "outside_usage", "queue_report"]


@dataclass(frozen=True, slots=True)
class ResourceFigures:
    """One queue's numbers for one resource (see the module docstring)."""

    resource: str
    nominal: int
    used: int
    borrowed: int
    lent: int
    pending: int


@dataclass(frozen=True, slots=True)
class QueueFigures:
    """One queue's status figures (see the module docstring)."""

    name: str
    resources: tuple[ResourceFigures, ...]
    fair_share: float
    attained_share: float
    running: int
    pending: int
    unusable: str | None = None  # why it takes no jobs (None: it does)
    oversubscribed: tuple[str, ...] = field(default=())


def _lent(tree: QueueTree, book: QuotaBook, resource: str) -> dict[str, int]:
    """Queue -> how much of its unused nominal quota others hold (module docstring)."""
    out: dict[str, int] = {}
    for parent, kids in tree.children.items():
        if parent is None:
            room = book.capacity(resource) - book.outside(resource)
        else:
            room = tree.queues[parent].quota(resource).nominal
        nominal = sum(tree.queues[k].quota(resource).nominal for k in kids)
        borrowed = sum(book.borrowed(k, resource) for k in kids)
        owed = max(0, borrowed - max(0, room - nominal))
        for kid in kids:  # children() lists them in name order
            quota = tree.queues[kid].quota(resource)
            unused = max(0, quota.nominal - book.used(kid, resource))
            lendable = unused if quota.lending_limit is None else min(unused, quota.lending_limit)
            out[kid] = min(owed, lendable)
            owed -= out[kid]
    return out


def queue_report(snapshot: Snapshot, pending: Sequence[Gang]) -> dict[str, QueueFigures]:
    """The figures of every queue of the snapshot (empty without queues)."""
    tree = snapshot.queues
    if tree is None:
        return {}
    book = QuotaBook(tree, snapshot)
    # A gang from a namespace its queue does not take is no demand of the queue.
    pending = [g for g in pending if namespace_refusal(snapshot, g) is None]
    shares = queue_shares(snapshot, pending)
    asked: dict[str, Counter[str]] = {name: Counter() for name in tree.queues}
    waiting: Counter[str] = Counter()
    for gang in pending:
        if gang.queue is None or gang.queue not in tree.queues:
            continue
        waiting[gang.queue] += 1
        if tree.usable(gang.queue):
            resource = resource_key(gang.acceptable[0].gpu_type, gang.mig_profile)
            for name in tree.path(gang.queue):
                asked[name][resource] += gang.gpus_needed(gang.replicas_min)
    running: Counter[str] = Counter()
    for held in snapshot.running:
        # An elastic gang's extra replicas are units of their own, not more jobs.
        if held.queue is not None and "#extra-" not in held.id:
            running[held.queue] += 1
    resources = sorted(
        tree.resources()
        | {running_charge(g).resource for g in snapshot.running if g.queue in tree.queues}
        | {r for counts in asked.values() for r in counts}
    )
    lent = {r: _lent(tree, book, r) for r in resources}
    out: dict[str, QueueFigures] = {}
    for name in sorted(tree.queues):
        spec = tree.queues[name]
        rows: list[ResourceFigures] = []
        for r in resources:
            used = book.used(name, r) if tree.usable(name) else 0
            row = ResourceFigures(
                r,
                spec.quota(r).nominal,
                used,
                book.borrowed(name, r) if tree.usable(name) else 0,
                lent[r].get(name, 0),
                asked[name][r],
            )
            if row.nominal or row.used or row.pending or r in spec.quotas:
                rows.append(row)
        share = shares.get(name)
        out[name] = QueueFigures(
            name=name,
            resources=tuple(rows),
            fair_share=share.fair if share is not None else 0.0,
            attained_share=share.attained if share is not None else 0.0,
            running=running[name],
            pending=waiting[name],
            unusable=tree.unusable.get(name),
            oversubscribed=tuple(tree.oversubscribed.get(name, ())),
        )
    return out


def outside_usage(snapshot: Snapshot) -> dict[str, int] | None:
    """Resource -> GPUs (or slices) held by running gangs outside every usable queue: pods
    naming no queue (other clients' and other schedulers' pods among them) or a queue that does
    not exist or takes no jobs, as the quota book counts them (quota.py, ROOT). None when no
    queue exists: then nothing is promised, so nothing is outside a queue."""
    tree = snapshot.queues
    if tree is None or not tree.queues:
        return None
    outside = QuotaBook(tree, snapshot).own.get(ROOT, Counter())
    return {resource: n for resource, n in sorted(outside.items()) if n}
