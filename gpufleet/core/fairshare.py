"""Heterogeneity-aware fair share between queues, measured in effective throughput.

gpufleet follows Gavel's heterogeneity-aware max-min fairness (Narayanan et al., OSDI'20):
what a queue holds is worth the *throughput* its jobs get from it, not a count of GPUs, and it
is compared with what the queue's jobs would get from its weighted share of every GPU type.
For queue q:
  v_q(t)  per-GPU relative throughput of q's work on type t: the GPU-weighted mean over q's
          running and pending gangs (a pending gang's own per-type figures or the catalogue's;
          a running gang's figure on its type, carried to other types by the catalogue ratio;
          0 on a type a pending gang does not accept);
  T_q     = sum over types of (GPUs of t in the fleet) x v_q(t): the effective throughput q's
          work would get from the whole fleet;
  s_q     q's weighted share among the queues with work: weight / sum of weights of the active
          siblings, times the parent's share (hierarchical, as Gavel's hierarchical policies);
  A_q     = sum over q's running gangs of GPUs (a MIG slice: its compute share) x throughput;
  rho_q   = A_q / (s_q x T_q): 1 means q holds exactly its fair share of effective throughput.
Eight T4s and eight H100s are then very different shares for a queue whose jobs run five times
faster on an H100, and a queue whose jobs gain little from fast GPUs is not charged as much for
holding them as one whose jobs gain a lot.

Why not DRF over GPU types (Ghodsi et al., NSDI'11): DRF equalises each tenant's *dominant*
share of resources a task needs together (CPU and memory of one task). GPU types are
substitutes, not complements: a job runs on H100s *or* on T4s. Counting each type as its own
resource makes a tenant holding all T4s as "rich" (dominant share 1) as one holding all H100s,
which is exactly the heterogeneity blindness the quota of "8 GPUs" suffers from.

Pending gangs are offered to placement in max-min order (progressive filling): gangs their
queue's nominal quota covers first (the guarantee), then the rest; within each tier the queue
with the lowest rho goes next, and its rho grows by the gang's best-case throughput before the
next pick. Inside a queue: higher priority first, then the service tier (less attained service
first: service_tier.py), then earlier in line (`Gang.in_line_s`: the longer waiting, or with
the requeue timestamp `creation` an evicted gang by its job's creation), then larger. Aging: a
gang that has waited `aging_s` or longer goes ahead of every gang of its tier that has not,
earliest in line first, so a queue that is always above its share still gets its long-waiting
work in. Aging reads the wait (`waited_s`, since the gang's eviction if it was evicted), never
the place in line: an evicted gang with an old place in line is not aged at once (it would go
before the fair-share order at once and could evict its evictor: preemption thrash).
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpufleet.core.demand import Gang
from gpufleet.core.queues import QueueTree, resource_key
from gpufleet.core.quota import ROOT, QuotaBook
from gpufleet.core.service_tier import rank
from gpufleet.core.snapshot import RunningGang, Snapshot
from gpufleet.core.valuation import base_throughput
from gpufleet.model.gpus import Catalog

__all__ = ["QueueShare", "order_pending", "queue_shares"]


@dataclass(frozen=True, slots=True)
class QueueShare:
    """One queue's fair share figures (see the module docstring)."""

    queue: str
    fair: float  # s_q: share of the fleet's effective throughput it deserves now
    attained: float  # A_q / T_q: share it holds now
    reference: float  # T_q

    @property
    def rho(self) -> float:
        """Attained over fair (0 when it deserves nothing, i.e. has no work)."""
        return self.attained / self.fair if self.fair > 0 else 0.0


def _slice_share(catalog: Catalog, gpu_type: str, profile: str) -> float:
    return catalog[gpu_type].mig_profile(profile).compute_fraction


def running_work(gang: RunningGang, catalog: Catalog) -> float:
    """Effective throughput a running gang gets: GPUs (slice share) x relative throughput."""
    speed = gang.relative_throughput
    if speed is None:
        speed = catalog[gang.gpu_type].relative_throughput
    share = 0.0
    for replica in gang.replicas:
        if replica.mig is None:
            share += len(replica.gpus)
        else:
            share += _slice_share(catalog, gang.gpu_type, replica.mig.profile)
    return share * speed


def _gang_gpus(gang: Gang, catalog: Catalog) -> float:
    """GPUs a pending gang needs at its minimum size (a slice counts its compute share)."""
    if gang.mig_profile is None:
        return float(gang.gpus_needed(gang.replicas_min))
    shares = [
        _slice_share(catalog, o.gpu_type, gang.mig_profile)
        for o in gang.acceptable
        if o.gpu_type in catalog and catalog[o.gpu_type].has_mig_profile(gang.mig_profile)
    ]
    return gang.replicas_min * (max(shares) if shares else 1.0)


def best_work(gang: Gang, catalog: Catalog) -> float:
    """Throughput a pending gang would get at its minimum size on its fastest type."""
    speeds = [
        base_throughput(gang, catalog[o.gpu_type]) for o in gang.acceptable if o.gpu_type in catalog
    ]
    return _gang_gpus(gang, catalog) * max(speeds, default=0.0)


def _speeds(
    snapshot: Snapshot, pending: Sequence[Gang], fleet: Mapping[str, int]
) -> dict[str, dict[str, float]]:
    """v_q(t) for every queue with work (unqueued work under ROOT)."""
    catalog = snapshot.catalog
    total: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    weight: dict[str, float] = defaultdict(float)
    for gang in snapshot.running:
        home = gang.queue or ROOT
        base = catalog[gang.gpu_type].relative_throughput
        speed = gang.relative_throughput if gang.relative_throughput is not None else base
        gpus = float(sum(len(r.gpus) for r in gang.replicas))
        weight[home] += gpus
        for t in fleet:
            total[home][t] += gpus * speed * catalog[t].relative_throughput / base
    for pending_gang in pending:
        home = pending_gang.queue or ROOT
        gpus = _gang_gpus(pending_gang, catalog)
        weight[home] += gpus
        for option in pending_gang.acceptable:
            if option.gpu_type in fleet:
                total[home][option.gpu_type] += gpus * base_throughput(
                    pending_gang, catalog[option.gpu_type]
                )
    return {q: {t: total[q][t] / weight[q] for t in fleet} for q in weight if weight[q] > 0}


def _fair_shares(tree: QueueTree, active: set[str]) -> dict[str, float]:
    """s_q for every queue with work in its subtree (hierarchical weights)."""

    def has_work(name: str) -> bool:
        return name in active or any(has_work(k) for k in tree.kids(name))

    out: dict[str, float] = {}

    def walk(parent: str | None, share: float) -> None:
        members = [k for k in tree.kids(parent) if has_work(k)]
        weights = {k: tree.queues[k].weight for k in members}
        if parent is not None and parent in active:
            weights[parent] = tree.queues[parent].weight  # its own gangs compete as a child
        total = sum(weights.values())
        for name, w in weights.items():
            # A parent's own slot narrows what its children share; its figure stays that of
            # its whole subtree, which is what its attained share counts.
            if name != parent:
                out[name] = share * w / total
                walk(name, out[name])

    walk(None, 1.0)
    return out


def queue_shares(snapshot: Snapshot, pending: Sequence[Gang]) -> dict[str, QueueShare]:
    """Fair share figures of every usable queue with running or pending work."""
    tree = snapshot.queues
    if tree is None:
        return {}
    fleet: Counter[str] = Counter()
    for node in snapshot.nodes:
        fleet[node.gpu_type] += node.gpu_count
    speeds = _speeds(snapshot, pending, fleet)
    attained: dict[str, float] = defaultdict(float)
    for gang in snapshot.running:
        if gang.queue is not None and tree.usable(gang.queue):
            for name in tree.path(gang.queue):
                attained[name] += running_work(gang, snapshot.catalog)
    active = {q for q in speeds if q != ROOT and tree.usable(q)}
    fair = _fair_shares(tree, active)
    out: dict[str, QueueShare] = {}
    for name, share in sorted(fair.items()):
        reference = _reference(tree, name, speeds, fleet)
        got = attained[name] / reference if reference > 0 else 0.0
        out[name] = QueueShare(name, share, got, reference)
    return out


def _reference(
    tree: QueueTree, name: str, speeds: Mapping[str, Mapping[str, float]], fleet: Mapping[str, int]
) -> float:
    """T_q; a parent's is the mean of its members' (its own work counting as one member)."""
    members = [q for q in speeds if q in tree.queues and tree.usable(q) and name in tree.path(q)]
    if not members:
        return 0.0
    values = [sum(fleet[t] * speeds[q][t] for t in fleet) for q in members]
    return sum(values) / len(values)


def _within_queue(gang: Gang, tier_gpu_s: float | None) -> tuple[float, ...]:
    priority, tier = rank(gang, tier_gpu_s)
    return (-priority, -tier, -gang.in_line_s, -gang.gpus_needed(gang.replicas_min))


def order_pending(
    snapshot: Snapshot,
    pending: Sequence[Gang],
    book: QuotaBook,
    aging_s: float,
    tier_gpu_s: float | None = None,
) -> list[Gang]:
    """The order in which pending gangs are offered to placement (module docstring);
    `tier_gpu_s` is the service tier's threshold (None: no tier)."""
    catalog = snapshot.catalog
    shares = queue_shares(snapshot, pending)
    queues: dict[str, list[Gang]] = defaultdict(list)
    for gang in pending:
        queues[book.home(gang.queue)].append(gang)
    for home, members in queues.items():
        theta = None if home == ROOT else tier_gpu_s  # outside any queue: no tier
        members.sort(key=lambda g: (*_within_queue(g, theta), g.id))
    # Tier 0: what the queue's nominal quota covers, counted in queue order.
    planned: dict[str, Counter[str]] = defaultdict(Counter)
    tier: dict[str, int] = {}
    for home, members in queues.items():
        for gang in members:
            tier[gang.id] = 1
            if home == ROOT:
                continue
            for option in gang.acceptable:
                resource = resource_key(option.gpu_type, gang.mig_profile)
                need = gang.gpus_needed(gang.replicas_min)
                if book.entitled(home, resource, planned[home][resource] + need):
                    planned[home][resource] += need
                    tier[gang.id] = 0
                    break
    out: list[Gang] = []
    rho = {q: s.rho for q, s in shares.items()}
    for level in (0, 1):
        aged = [g for g in pending if tier[g.id] == level and g.waited_s >= aging_s]
        out.extend(sorted(aged, key=lambda g: (-g.in_line_s, g.id)))
        heads: list[tuple[float, str]] = []
        lines: dict[str, list[Gang]] = {}
        for home, members in queues.items():
            rest = [g for g in members if tier[g.id] == level and g.waited_s < aging_s]
            if rest:
                lines[home] = rest
                heapq.heappush(heads, (rho.get(home, 0.0), home))
        while heads:
            current, home = heapq.heappop(heads)
            gang = lines[home].pop(0)
            out.append(gang)
            share = shares.get(home)
            if share is not None and share.fair > 0 and share.reference > 0:
                current += best_work(gang, catalog) / (share.fair * share.reference)
            if lines[home]:
                heapq.heappush(heads, (current, home))
    return out
