"""The service tier: least attained service first inside a queue, below the user's priority.

A team's queue is FIFO among gangs of one priority, so a one-GPU job of a minute waits behind
every long job its own team submitted a little earlier (bench/README.md, Queues, "Ninth
pass": that wait made the worst tenant's finish-time fairness). Tiresias (Gu et al., NSDI'19)
ranks jobs by their two-dimensional attained service (GPUs x run time) instead, without
knowing any job's length: a job that has received little service is likely short.

Here the rank of a gang inside its queue is (priority, tier): tier 1 while its attained
service is below the threshold theta (`Policy.service_tier_gpu_s`), 0 from then on. The tier
only splits gangs of one priority, so it never lifts a gang over a higher priority, and it is
never compared across queues (reclaims between queues ignore priorities and tiers alike). It
is used for
- the order in which a queue's pending gangs are offered (fairshare.order_pending);
- which gangs of its own queue a stuck gang may evict (admission.QueueGate.may_evict), and
  in which order (QueueGate.victim_key);
- the price of such an eviction: a running gang past the threshold is worth
  `SERVED_VALUE_SHARE` of its work (objective.running_value), as a lower priority is worth
  half, so a fresh gang of its queue outweighs it and preemption's value check lets it in.
A server (a ServingJob's replicas, `Gang.service_ranked` False) is not ranked by service: it
has no finish time for least attained service to favour, and its `preemptible` promises
eviction by higher priorities and reclaims only. The tier neither evicts it nor evicts for it
(admission.QueueGate.may_evict); it is offered in its queue as a gang of no service.
A pending gang's attained service counts its earlier runs (`Gang.attained_gpu_s`), a running
gang's its current run too (`RunningGang.attained_gpu_s`): a job preempted after theta comes
back in tier 0 and cannot evict the gangs of tier 0 it queues behind, so two served jobs never
evict each other for the tier. With theta None, or outside every usable queue (none named, or
one missing from the tree or with a broken ancestry: `threshold`), the rank is the priority and
a running gang is worth all its work.

A limit on re-evictions (`Policy.service_tier_rerun_s`, `rerun_guarded`): a running gang the
tier evicted before is not evicted by the tier again until its current run has lasted that
long. An evicted served gang that comes back ahead of its queue's fresh gangs (aged) takes the
GPUs that come free, and a fresh gang then evicts it again: the limit bounds that loop without
touching reclaims or higher priorities. Off by default: on the queue bench's tuning windows
every limit tried lost worst-tenant fairness (bench/README.md, Queues, "Thirty-second pass").
"""

from __future__ import annotations

from gpufleet.core.demand import Gang
from gpufleet.core.queues import QueueTree
from gpufleet.core.snapshot import RunningGang, Snapshot

__all__ = [
    "SERVED_VALUE_SHARE",
    "Rank",
    "rank",
    "rerun_guarded",
    "served_note",
    "served_share",
    "threshold",
    "tier",
]

# What a running gang past the threshold is worth, as a share of its work, inside a queue:
# the weight of one priority level less (Policy.priority_weight doubles per level).
SERVED_VALUE_SHARE = 0.5

Rank = tuple[int, int]  # (priority, tier): higher goes first and may evict lower


def tier(attained_gpu_s: float, theta: float | None) -> int:
    """1 while `attained_gpu_s` is below `theta` (fresh), else 0 (served); 0 without a tier."""
    return 1 if theta is not None and attained_gpu_s < theta else 0


def threshold(tree: QueueTree | None, queue: str | None, theta: float | None) -> float | None:
    """The threshold that applies to a gang of `queue`: `theta` inside a usable queue of
    `tree`, None (no tier) outside every usable one, where the gang is counted outside the
    queues (quota.QuotaBook.home). The one rule for both the rank (admission.QueueGate) and
    the value (`served_share`)."""
    if tree is None or queue is None or not tree.usable(queue):
        return None
    return theta


def rank(gang: Gang | RunningGang, theta: float | None) -> Rank:
    """The gang's rank among the gangs of its own queue (module docstring)."""
    return (gang.priority, tier(gang.attained_gpu_s, theta))


def rerun_guarded(victim: RunningGang, rerun_s: float | None) -> bool:
    """Whether the limit on re-evictions keeps the tier from evicting `victim` now: the tier
    evicted it before and its current run is shorter than `rerun_s` (None: no limit)."""
    return rerun_s is not None and victim.tier_evictions > 0 and victim.run_s < rerun_s


def served_note(gang: Gang, theta: float) -> str:
    """What a pending reason adds for a gang of a queue past the threshold."""
    return (
        f"; it has received {gang.attained_gpu_s:.0f} GPU-s of service, past the service tier "
        f"of {theta:.0f} GPU-s, so gangs of queue {gang.queue} and its priority with less "
        "service go first"
    )


def served_share(snapshot: Snapshot, gang: RunningGang, theta: float | None) -> float:
    """The share of its work a running gang is worth: SERVED_VALUE_SHARE for a gang of a usable
    queue past the threshold, else 1."""
    theta = threshold(snapshot.queues, gang.queue, theta)
    if theta is None:
        return 1.0
    return 1.0 if tier(gang.attained_gpu_s, theta) else SERVED_VALUE_SHARE
