"""The output of one placement decision: placements, MIG changes, preemptions, moves of running
gangs, pending reasons.

`PendingReason` is defined by the contract (`gpufleet.model.contract.reasons`): the scheduler
passes it on to the operator as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from gpufleet.core.snapshot import ReplicaPlacement, RunningGang
from gpufleet.model.contract.reasons import PendingReason as PendingReason
from gpufleet.model.mig import MigLayout


@dataclass(frozen=True, slots=True)
class GangPlacement:
    """An admitted gang: its GPU type, every replica's GPUs and an optional power cap.

    `waits_for`: the running gangs this decision evicts for other gangs (`Preemption.for_gang`
    is not this gang) whose GPUs the placement takes, and, for a gang placed (or a preemptor)
    on queue quota those victims give back, the fewest of them on its GPU type whose quota it
    needs (preempt.py `quota_waits`), sorted. The gang preempts none of them; it starts once
    they have exited (the live scheduler holds its pods until their pods are gone). Its own
    victims are its preemptions and are not listed (`victim_waits`)."""

    gang_id: str
    gpu_type: str
    replicas: tuple[ReplicaPlacement, ...]
    power_cap_w: float | None = None
    waits_for: tuple[str, ...] = ()

    @property
    def replica_count(self) -> int:
        return len(self.replicas)


@dataclass(frozen=True, slots=True)
class Repartition:
    """Change an empty GPU's MIG layout (None = MIG off, whole GPU)."""

    node: str
    gpu: int
    old_layout: MigLayout | None
    new_layout: MigLayout | None


@dataclass(frozen=True, slots=True)
class Preemption:
    """Evict a whole running gang to make room for `for_gang`. `reclaim`: the victim's queue
    borrowed the capacity and `for_gang`'s queue takes back its nominal quota. `service_tier`:
    the victim is of `for_gang`'s own queue and priority and has received more service
    (service_tier.py); otherwise a within-queue victim is of lower priority."""

    gang_id: str
    for_gang: str
    reclaim: bool = False
    service_tier: bool = False


@dataclass(frozen=True, slots=True)
class Move:
    """Restart a running gang, whole, on a new placement: a faster type (moves.py); with
    `for_gang`, elsewhere to empty the node reserved for that aged wide gang (evacuation.py);
    with `for_reserve`, off that type to refill its spent reserve (refill.py)."""

    gang_id: str
    from_type: str
    placement: GangPlacement
    gain_s: float  # expected seconds of its completion time saved, net of the move's price
    for_gang: str | None = None  # an evacuation: the gang it makes room for (gain_s <= 0)
    for_reserve: str | None = None  # a refill: the type whose reserve it refills (gain_s <= 0)


@dataclass(frozen=True, slots=True)
class Pending:
    gang_id: str
    reason: PendingReason
    message: str


@dataclass(frozen=True, slots=True)
class SolveStats:
    """How the decision was made. Wall time is excluded from equality (it is not reproducible)."""

    engine: str  # "cpsat", "greedy", or "greedy-fallback"
    status: str
    objective: float | None = None
    best_bound: float | None = None
    wall_time_s: float = field(default=0.0, compare=False)

    @property
    def gap(self) -> float | None:
        """Relative optimality gap of a CP-SAT solve (0 = proven optimal). A solve reported
        OPTIMAL may keep a gap below one gang's tie-break (`cpsat._solver`)."""
        if self.objective is None or self.best_bound is None:
            return None
        return abs(self.best_bound - self.objective) / max(abs(self.best_bound), 1e-9)


@dataclass(frozen=True, slots=True)
class Decision:
    placements: tuple[GangPlacement, ...] = ()
    repartitions: tuple[Repartition, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    pending: tuple[Pending, ...] = ()
    moves: tuple[Move, ...] = ()
    stats: SolveStats = field(default_factory=lambda: SolveStats("none", "EMPTY"))

    def placement(self, gang_id: str) -> GangPlacement | None:
        return next((p for p in self.placements if p.gang_id == gang_id), None)

    def pending_for(self, gang_id: str) -> Pending | None:
        return next((p for p in self.pending if p.gang_id == gang_id), None)

    @property
    def admitted_ids(self) -> frozenset[str]:
        return frozenset(p.gang_id for p in self.placements)


def victim_waits(decision: Decision, running: Sequence[RunningGang]) -> Decision:
    """`decision` with each placement's `waits_for` set: the gangs it evicts for another gang
    whose GPUs (whole, or the GPU of a MIG slice) the placement takes, added to those it names
    already (the victims whose queue quota it uses: preempt.py `quota_waits`)."""
    if not decision.preemptions:
        return decision
    by_id = {r.id: r for r in running}
    held: dict[tuple[str, int], set[str]] = {}
    for pre in decision.preemptions:
        victim = by_id.get(pre.gang_id)
        for replica in () if victim is None else victim.replicas:
            for g in replica.gpus:
                held.setdefault((replica.node, g), set()).add(pre.gang_id)
    own: dict[str, set[str]] = {}
    for pre in decision.preemptions:
        own.setdefault(pre.for_gang, set()).add(pre.gang_id)
    placements = []
    for p in decision.placements:
        victims = set(p.waits_for)
        for replica in p.replicas:
            for g in replica.gpus:
                victims |= held.get((replica.node, g), set())
        victims -= own.get(p.gang_id, set())
        placements.append(replace(p, waits_for=tuple(sorted(victims))))
    return replace(decision, placements=tuple(placements))
