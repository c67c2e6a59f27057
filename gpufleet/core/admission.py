"""Queue admission inside one placement decision: the hook between queues and placement.

When the snapshot carries queues, `place()` gives its working state a `QueueGate`; greedy,
preemption and CP-SAT then ask it (and only it) about queues:
- which gangs may not be placed at all (`refusal`: missing or unusable queue -> QueueNotFound,
  priority outside the queue's range or a namespace its namespaceSelector does not take ->
  QueueNotAllowed); a refused gang takes no quota and counts in no queue's fair share;
- in which order pending gangs are tried (`order`, fairshare.py);
- whether a gang fits its queue's quota on a GPU type, and with how many replicas
  (`allows`, `replicas_allowed`), and the usage it then adds (`take`); a gang outside every
  queue (none named) is held to the rules of a top-level queue with nominal 0 (quota.py ROOT):
  it only borrows, and a queue within its nominal quota reclaims it;
- which running gangs a stuck gang may evict (`may_evict`): never one a disruption budget
  protects now (`RunningGang.disruptable`); inside its own queue, preemptible gangs of lower
  rank (priority, then the service tier: service_tier.py, but not a gang the tier evicted
  before whose run is still short, `service_tier.rerun_guarded`, and never for or of a
  server); in other queues, only when
  this is a reclaim: the stuck gang stays within its queue's nominal quota and the victim's
  queue borrows the victim's resource. Priorities are never compared across queues (a queue's
  guarantee does not depend on how others rank their work), as with Kueue's
  reclaimWithinCohort.
The gate is copied with the working state, so what-ifs and the CP-SAT pass keep their own
accounts; `after(decision)` gives the account of a finished decision.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.core.decision import Decision, Pending, PendingReason
from gpufleet.core.demand import Gang
from gpufleet.core.fairshare import QueueShare, order_pending, queue_shares
from gpufleet.core.queues import resource_key, split_resource
from gpufleet.core.quota import ROOT, Charge, QuotaBook, running_charge
from gpufleet.core.service_tier import Rank, rank, rerun_guarded, served_note, threshold
from gpufleet.core.snapshot import RunningGang, Snapshot

__all__ = ["QueueGate", "namespace_refusal"]


def namespace_refusal(snapshot: Snapshot, gang: Gang) -> str | None:
    """Why the gang's (existing) queue does not take gangs from its namespace, or None."""
    if snapshot.queues is None or gang.queue is None or gang.queue not in snapshot.queues.queues:
        return None
    namespace = gang.namespace
    labels = None if namespace is None else snapshot.namespace_labels.get(namespace)
    return snapshot.queues.queues[gang.queue].namespace_refusal(namespace, labels)


class QueueGate:
    """The queues' view of one decision (see the module docstring). `tier_gpu_s` is the
    service tier's threshold (`Policy.service_tier_gpu_s`; None: no tier) and `tier_rerun_s`
    its limit on re-evictions (`Policy.service_tier_rerun_s`; None: no limit)."""

    def __init__(
        self,
        snapshot: Snapshot,
        aging_s: float,
        book: QuotaBook | None = None,
        tier_gpu_s: float | None = None,
        tier_rerun_s: float | None = None,
    ) -> None:
        if snapshot.queues is None:
            raise ValueError("a queue gate needs a snapshot with queues")
        self.snapshot = snapshot
        self.tree = snapshot.queues
        self.aging_s = aging_s
        self.tier_gpu_s = tier_gpu_s
        self.tier_rerun_s = tier_rerun_s
        self.book = book if book is not None else QuotaBook(self.tree, snapshot)
        self.shares: dict[str, QueueShare] = {}
        # Nodes reserved for aged wide gangs in this state (reservation.py): (node, GPUs).
        self.reserved: list[tuple[int, tuple[int, ...]]] = []
        self.reserved_for: dict[int, Gang] = {}  # node -> the gang it is reserved for

    def copy(self) -> QueueGate:
        twin = QueueGate(
            self.snapshot, self.aging_s, self.book.copy(), self.tier_gpu_s, self.tier_rerun_s
        )
        twin.shares = self.shares
        twin.reserved = list(self.reserved)
        twin.reserved_for = dict(self.reserved_for)
        return twin

    # --- before placement ------------------------------------------------------------------

    def refusal(self, gang: Gang) -> Pending | None:
        """Why the gang cannot be placed whatever the capacity, or None."""
        if gang.queue is None:
            return None
        if not self.tree.usable(gang.queue):
            why = self.tree.why_unusable(gang.queue)
            return Pending(gang.id, PendingReason.QUEUE_NOT_FOUND, why)
        spec = self.tree.queues[gang.queue]
        if not spec.admits_priority(gang.priority):
            return Pending(
                gang.id,
                PendingReason.QUEUE_NOT_ALLOWED,
                f"priority {gang.priority} is outside queue {gang.queue}'s priority range "
                f"{spec.priority_range()}",
            )
        outside = namespace_refusal(self.snapshot, gang)
        if outside is not None:
            return Pending(gang.id, PendingReason.QUEUE_NOT_ALLOWED, outside)
        return None

    def order(self, gangs: Sequence[Gang]) -> list[Gang]:
        """Pending gangs in the order placement tries them (fairshare.py)."""
        if not self.shares:
            self.shares = queue_shares(self.snapshot, gangs)
        return order_pending(self.snapshot, gangs, self.book, self.aging_s, self.tier_gpu_s)

    # --- quota -----------------------------------------------------------------------------

    def charge(self, gang: Gang, gpu_type: str, replicas: int) -> Charge:
        resource = resource_key(gpu_type, gang.mig_profile)
        return Charge(gang.queue, resource, gang.gpus_needed(replicas))

    def charged(self, gang: Gang, gpu_type: str, replicas: int) -> tuple[str, Charge] | None:
        """The queue the gang is charged to (outside every queue: ROOT) and the charge; None
        when its queue may not be used."""
        if gang.queue is not None and not self.tree.usable(gang.queue):
            return None
        return self._home(gang.queue), self.charge(gang, gpu_type, replicas)

    def allows(self, gang: Gang, gpu_type: str, replicas: int) -> bool:
        """`replicas` replicas of the gang on `gpu_type` fit its queue's quota (outside every
        queue: ROOT's, nominal 0)."""
        charged = self.charged(gang, gpu_type, replicas)
        if charged is None:
            return False
        home, charge = charged
        return self.book.fits(home, charge.resource, charge.amount, gang.preemptible)

    def allows_in_queues(self, gang: Gang, gpu_type: str, replicas: int) -> bool:
        """As `allows`, but up to the top-level queue only: the cluster's capacity, which
        running gangs give back as they end, is left aside (reservation.py)."""
        charged = self.charged(gang, gpu_type, replicas)
        if charged is None:
            return False
        home, charge = charged
        return self.book.fits_queues(home, charge.resource, charge.amount)

    def replicas_allowed(self, gang: Gang, gpu_type: str, upto: int) -> int:
        """The most replicas (at least the gang's minimum, at most `upto`) the quota allows;
        0 when not even the minimum fits."""
        best = 0
        for count in range(gang.replicas_min, upto + 1):
            if not self.allows(gang, gpu_type, count):
                break
            best = count
        return best

    def take(self, gang: Gang, gpu_type: str, replicas: int) -> None:
        self.book.hold(gang.id, self.charge(gang, gpu_type, replicas))

    def resize(self, gang: Gang, gpu_type: str, replicas: int) -> None:
        """Count the gang at `replicas` replicas on `gpu_type` instead of what it held (an
        elastic gang given one more replica, a running gang moved to another type)."""
        self.book.free(gang.id)
        self.take(gang, gpu_type, replicas)

    def free(self, running: RunningGang) -> None:
        self.book.free(running.id)

    def hold(self, running: RunningGang) -> None:
        self.book.hold(running.id, running_charge(running))

    # --- preemption ------------------------------------------------------------------------

    def _home(self, queue: str | None) -> str:
        return self.book.home(queue)

    def is_reclaim(self, victim: RunningGang, gang: Gang) -> bool:
        return self._home(victim.queue) != self._home(gang.queue)

    def by_tier(self, victim: RunningGang, gang: Gang) -> bool:
        """Whether evicting `victim` for `gang` is the service tier's doing: a gang of the
        same queue and priority (may_evict then allows it only past the threshold)."""
        return not self.is_reclaim(victim, gang) and victim.priority == gang.priority

    def rank(self, gang: Gang | RunningGang) -> Rank:
        """The gang's rank inside its queue (service_tier.py); outside any usable queue, its
        priority."""
        return rank(gang, threshold(self.tree, gang.queue, self.tier_gpu_s))

    def served(self, gang: Gang | RunningGang) -> bool:
        """Whether the gang is in a usable queue and past the service tier's threshold."""
        return (
            threshold(self.tree, gang.queue, self.tier_gpu_s) is not None
            and self.rank(gang)[1] == 0
        )

    def may_evict(self, victim: RunningGang, gang: Gang) -> bool:
        """Whether `gang` may evict `victim` now (module docstring)."""
        if not victim.preemptible or not victim.disruptable:
            return False
        if not self.is_reclaim(victim, gang):
            if self.by_tier(victim, gang) and (
                rerun_guarded(victim, self.tier_rerun_s)
                or not (victim.service_ranked and gang.service_ranked)
            ):
                return False
            return self.rank(victim) < self.rank(gang)
        home = self._home(gang.queue)
        if home == ROOT:
            return False  # outside any queue: nothing to reclaim
        resource = resource_key(victim.gpu_type, gang.mig_profile)
        if not self.book.entitled(home, resource, gang.gpus_needed(gang.replicas_min)):
            return False
        victim_home = self._home(victim.queue)
        if victim_home == ROOT:
            return True  # counted outside every queue (its queue is gone): nobody's guarantee
        return self.book.borrowing(victim_home, running_charge(victim).resource)

    def victim_key(self, victim: RunningGang, gang: Gang) -> tuple[float, ...]:
        """Sort key of eviction candidates: other queues' borrowers first, the queue furthest
        above its fair share first, then lower rank (priority, then the service tier)."""
        priority, tier = self.rank(victim)
        if not self.is_reclaim(victim, gang):
            return (1.0, 0.0, float(priority), float(tier))
        share = self.shares.get(self._home(victim.queue))
        return (0.0, -(share.rho if share is not None else 0.0), float(priority), float(tier))

    # --- after placement -------------------------------------------------------------------

    def after(self, decision: Decision, pending: Sequence[Gang]) -> QueueGate:
        """The account once `decision` is carried out."""
        gate = self.copy()
        gangs = {g.id: g for g in pending}
        for pre in decision.preemptions:
            gate.book.free(pre.gang_id)
        for placement in decision.placements:
            gate.take(gangs[placement.gang_id], placement.gpu_type, placement.replica_count)
        return gate

    def quota_reason(self, gang: Gang, types: Sequence[str]) -> Pending | None:
        """QuotaExceeded (or WaitingForReclaim for a gang within its nominal quota) when the
        gang fits its queue's quota on none of `types`; None when it fits on one."""
        if (gang.queue is not None and not self.tree.usable(gang.queue)) or not types:
            return None
        home = self._home(gang.queue)
        texts: list[str] = []
        for gpu_type in types:
            charge = self.charge(gang, gpu_type, gang.replicas_min)
            short = self.book.shortfall(home, charge.resource, charge.amount, gang.preemptible)
            if short is None or not short.quota:
                return None  # fits, or only the GPUs in use stop it: a capacity reason
            texts.append(short.text)
        waiting = self.reclaim_note(gang, types)
        if waiting is not None:
            return Pending(gang.id, PendingReason.WAITING_FOR_RECLAIM, waiting)
        text = "; ".join(texts)
        if self.tier_gpu_s is not None and self.served(gang):
            text += served_note(gang, self.tier_gpu_s)  # its queue's fresh gangs took the quota
        return Pending(gang.id, PendingReason.QUOTA_EXCEEDED, text)

    def reclaim_note(self, gang: Gang, types: Sequence[str]) -> str | None:
        """Why a gang within its queue's nominal quota still waits: the queues that borrow
        GPUs of its types (None when it is not within nominal, or nobody borrows them)."""
        home = self._home(gang.queue)
        if home == ROOT:
            return None
        need = gang.gpus_needed(gang.replicas_min)
        owed = [
            t for t in types if self.book.entitled(home, resource_key(t, gang.mig_profile), need)
        ]
        if not owed:
            return None
        holders: list[str] = []
        for name in sorted(self.tree.queues):
            if name == home or not self.tree.usable(name):
                continue
            for resource in sorted(self.book.sub.get(name, {})):
                if split_resource(resource)[0] not in owed:
                    continue
                if not self.book.borrowing(name, resource):
                    continue
                if any(self.book.borrowing(k, resource) for k in self.tree.kids(name)):
                    continue  # named at the child that borrows
                holders.append(f"{name} borrows {self.book.borrowed(name, resource)} x {resource}")
        if not holders:
            return None
        resource = resource_key(owed[0], gang.mig_profile)
        quota = self.tree.queues[home].quota(resource)
        return (
            f"within queue {home}'s nominal quota ({self.book.used(home, resource)} + {need} of "
            f"{quota.nominal} x {resource}); waiting for borrowed capacity to be reclaimed: "
            + ", ".join(holders)
        )
