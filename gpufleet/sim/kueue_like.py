"""A Kueue-like baseline for replays with queues: nominal quotas plus borrowing, FIFO per queue.

Callable like the core, `policy(snapshot, pending, core_policy) -> Decision`; it reads the
queues from the snapshot (`Snapshot.queues`) and ignores the core policy. What it models of
Kueue (kubernetes-sigs/kueue, ClusterQueues in one cohort, one ResourceFlavor per GPU type):

* **Quota.** A ClusterQueue's nominal quota per flavor, borrowing what other queues of the
  cohort leave unused. The arithmetic is the core's `QuotaBook`, the same rules the core
  enforces, so both sides are held to one definition of "within quota".
* **Order.** BestEffortFIFO: each queue's workloads by priority, higher first, then in arrival
  order, an evicted one from its eviction (Kueue's default requeue timestamp; as the engine
  passes them), as Kueue's ClusterQueue heap orders them (`queueOrderingFunc`,
  `pkg/queue/cluster_queue.go`: priority, then the queue-order timestamp); every round takes
  the head of each queue, and the heads go in Kueue's order (those that fit without borrowing
  first, then higher priority, then older); a head that does not fit is set aside and its
  queue's next workload becomes the head.
* **Flavors.** Heterogeneity-blind flavor fungibility: the flavors are tried in one fixed order
  for every workload, the fleet's types from the highest catalogue throughput down (how an
  administrator lists the best GPUs first), and a workload takes the first flavor where its
  queue's quota (borrowing allowed) and the free GPUs fit it. How fast the job runs on a type
  plays no part, nor does fairness beyond the quotas.
* **Reclaim.** reclaimWithinCohort: Any. A head that fits nowhere but would stay within its
  queue's nominal quota of a flavor evicts whole workloads of queues that borrow that flavor,
  lowest priority first, then the most recently admitted, while their queue still borrows,
  until it fits (node choice: best fit, as the gang-aware baselines).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.core.decision import Decision, GangPlacement, Preemption
from gpufleet.core.demand import Gang
from gpufleet.core.policy import Policy
from gpufleet.core.queues import resource_key
from gpufleet.core.quota import ROOT, Charge, QuotaBook, running_charge
from gpufleet.core.snapshot import RunningGang, Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.sim.baselines import best_fit, gang_gpus, place_gang, release_replicas, to_decision

__all__ = ["KueueLikePolicy"]


class KueueLikePolicy:
    """Kueue's admission with quotas, borrowing and reclaim (see the module docstring)."""

    name = "kueue"

    def __init__(self) -> None:
        self._decisions = 0
        self._admitted_at: dict[str, int] = {}  # gang id -> the decision that admitted it

    def __call__(self, snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
        tree = snapshot.queues
        if tree is None:
            raise ValueError("the Kueue-like baseline needs queues in the snapshot")
        self._decisions += 1
        catalog = snapshot.catalog
        flavors = sorted(
            {n.gpu_type for n in snapshot.nodes},
            key=lambda t: (-catalog[t].relative_throughput, t),
        )
        state = ClusterState(snapshot)
        book = QuotaBook(tree, snapshot)
        arrival = {g.id: i for i, g in enumerate(pending)}
        lines: dict[str, list[Gang]] = {}
        for gang in pending:
            lines.setdefault(book.home(gang.queue), []).append(gang)
        for line in lines.values():
            line.sort(key=lambda g: -g.priority)  # stable: arrival order within a priority
        placements: dict[str, GangPlacement] = {}
        preemptions: list[Preemption] = []
        evicted: set[str] = set()
        while lines:
            heads = [line.pop(0) for line in lines.values()]
            lines = {q: line for q, line in lines.items() if line}
            ranked = sorted(
                heads,
                key=lambda g: (self._borrows(book, g, flavors), -g.priority, arrival[g.id]),
            )
            for gang in ranked:
                placed = self._admit(state, book, gang, flavors)
                if placed is None:
                    placed, victims = self._reclaim(state, book, gang, flavors, evicted)
                    if placed is not None:
                        state, book = victims.state, victims.book
                        evicted.update(v.id for v in victims.gangs)
                        preemptions.extend(Preemption(v.id, gang.id, True) for v in victims.gangs)
                if placed is not None:
                    placements[gang.id] = placed
                    self._admitted_at[gang.id] = self._decisions
        return to_decision(state, placements, preemptions, engine="kueue")

    @staticmethod
    def _flavors(gang: Gang, flavors: Sequence[str]) -> list[str]:
        accepted = set(gang.type_names())
        return [f for f in flavors if f in accepted]

    def _borrows(self, book: QuotaBook, gang: Gang, flavors: Sequence[str]) -> bool:
        """The gang's first flavor with quota room needs borrowing (or none has room)."""
        need = gang_gpus(gang)
        for flavor in self._flavors(gang, flavors):
            resource = resource_key(flavor, gang.mig_profile)
            if gang.queue is None or book.fits(gang.queue, resource, need):
                return gang.queue is not None and not book.entitled(gang.queue, resource, need)
        return True

    def _admit(
        self, state: ClusterState, book: QuotaBook, gang: Gang, flavors: Sequence[str]
    ) -> GangPlacement | None:
        """The first flavor where quota and free GPUs fit the gang; takes them."""
        need = gang_gpus(gang)
        for flavor in self._flavors(gang, flavors):
            resource = resource_key(flavor, gang.mig_profile)
            if gang.queue is not None and not book.fits(gang.queue, resource, need):
                continue
            replicas = place_gang(state, gang, flavor, best_fit)
            if replicas:
                book.hold(gang.id, Charge(gang.queue, resource, need))
                return GangPlacement(gang.id, flavor, tuple(replicas))
        return None

    def _reclaim(
        self,
        state: ClusterState,
        book: QuotaBook,
        gang: Gang,
        flavors: Sequence[str],
        evicted: set[str],
    ) -> tuple[GangPlacement | None, _Victims]:
        """Evict borrowers of a flavor the gang's queue is owed (module docstring)."""
        nothing = _Victims(state, book, [])
        home = book.home(gang.queue)
        if home == ROOT:
            return None, nothing
        need = gang_gpus(gang)
        for flavor in self._flavors(gang, flavors):
            resource = resource_key(flavor, gang.mig_profile)
            if not book.entitled(home, resource, need):
                continue
            candidates = sorted(
                (
                    r
                    for r in state.snapshot.running
                    if r.id not in evicted
                    and r.preemptible
                    and r.gpu_type == flavor
                    and book.home(r.queue) not in (home, ROOT)
                ),
                key=lambda r: (r.priority, -self._admitted_at.get(r.id, 0), r.id),
            )
            trial = _Victims(state.copy(), book.copy(), [])
            for victim in candidates:
                charge = running_charge(victim)
                if not trial.book.borrowing(trial.book.home(victim.queue), charge.resource):
                    continue
                release_replicas(trial.state, victim)
                trial.book.free(victim.id)
                trial.gangs.append(victim)
                placed = self._admit(trial.state, trial.book, gang, [flavor])
                if placed is not None:
                    return placed, trial
        return None, nothing


class _Victims:
    """A what-if of one reclaim: the ledger and quota book with the victims gone."""

    def __init__(self, state: ClusterState, book: QuotaBook, gangs: list[RunningGang]) -> None:
        self.state = state
        self.book = book
        self.gangs = gangs
