"""Gang-aware baseline policies, callable like the core: `policy(snapshot, pending, core_policy)`.

All three read only the snapshot and the pending gangs (oldest first, as the engine passes them)
and return a core `Decision`; the core `Policy` argument is accepted and ignored. Free capacity is
the core's ledger (`gpufleet.core.state.ClusterState`). None of them knows MIG layouts beyond the
homogeneous mig-manager configs: when a slice is needed and no free instance of its profile
exists, an empty MIG GPU is repartitioned to `all-<profile>` (as many instances of that one
profile as fit), the way an operator relabels a GPU for one profile, and when a whole GPU is
needed and none is free, an empty MIG GPU is switched back to a whole GPU.

* `FifoBinPackPolicy` — gangs in queue order, all-or-nothing, each replica on the node (or MIG
  GPU) with the fewest free GPUs that still fits (best fit); gangs that do not fit are skipped so
  later ones can backfill. This is also the "best-fit" baseline of the FGD comparison.
* `GavelLikePolicy` — heterogeneity-aware max-min fairness in the style of Gavel (OSDI'20),
  approximated greedily instead of with Gavel's LP: every round (the engine re-invokes it every
  `round_s`, 360 s in Gavel's code) jobs are ranked by attained *normalised* service (relative
  throughput x GPUs x time, divided by GPUs requested), the least-served are admitted up to the
  fleet's capacity, and the admitted jobs that gain most from fast GPUs (ratio of their fastest
  to slowest option) pick first, each its fastest type with room; running jobs outside the
  admitted set are preempted when an admitted job needs their GPUs.
* `GavelTenantPolicy` — the same, with tenants (the queues of the snapshot): Gavel's
  hierarchical max-min fairness, weighted across tenants, then max-min across a tenant's jobs.
  Every round, admission is progressive filling: the tenant holding the least effective
  throughput (relative throughput x GPUs of the jobs admitted so far this round) per unit of
  weight (its queue's weight) admits its next job by the ranking above, until the fleet's GPUs
  are spoken for. Gavel has no quotas: the queues' quotas play no part.
* `TiresiasLikePolicy` — Tiresias (NSDI'19) discretised two-dimensional least-attained-service:
  attained service = GPUs x time run; queues split at `thresholds` GPU-seconds; lower queue first,
  FIFO inside a queue; heterogeneity-agnostic best-fit placement; preemptive on every round.

The kube-scheduler-like baseline, which is pod by pod and never repartitions, is
`gpufleet.sim.kube_like`. The gang-aware baselines honour a same-node topology wish (the whole
gang on one node). The two round-based policies keep their own service ledger and read simulated
time from a clock that the engine injects at construction; they never see the engine's state.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence

from gpufleet.core.decision import (
    Decision,
    GangPlacement,
    Preemption,
    Repartition,
    SolveStats,
    victim_waits,
)
from gpufleet.core.demand import Gang, Topology
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.model.mig import MigLayout, MigPlacement
from gpufleet.sim.occupancy import initial_layout

__all__ = [
    "FifoBinPackPolicy",
    "GavelLikePolicy",
    "GavelTenantPolicy",
    "TiresiasLikePolicy",
    "best_fit",
    "gang_gpus",
    "place_gang",
    "release_replicas",
    "to_decision",
]

Clock = Callable[[], float]

# A change of one GPU's layout made while trying a gang: (node, gpu, layout before).
_LayoutChange = tuple[int, int, MigLayout | None]


# ----- moves on the ledger -----------------------------------------------------------------------


def _take_whole(
    state: ClusterState, n: int, count: int, changes: list[_LayoutChange]
) -> ReplicaPlacement:
    """Free whole-mode GPUs first (lowest index), then empty MIG GPUs switched back to whole."""
    whole = state.whole_mode_gpus(n)
    gpus = whole[:count]
    if len(gpus) < count:
        switched = [g for g in state.free_gpus(n) if state.layout[n][g] is not None]
        for g in switched[: count - len(gpus)]:
            changes.append((n, g, state.layout[n][g]))
            gpus.append(g)
    chosen = tuple(sorted(gpus))
    state.take_whole(n, chosen)
    return ReplicaPlacement(state.nodes[n].name, chosen)


def _instances(state: ClusterState, n: int, profile: str) -> list[tuple[int, MigPlacement]]:
    """The first free instance of `profile` on each MIG GPU of node n that has one."""
    first: dict[int, MigPlacement] = {}
    for g, inst in state.node_instances(n, profile):
        first.setdefault(g, inst)
    return list(first.items())


def _cut_empty(
    state: ClusterState, n: int, profile: str, changes: list[_LayoutChange]
) -> tuple[int, MigPlacement] | None:
    """Repartition an empty MIG GPU of node n to `all-<profile>`; its first instance."""
    gpu_type = state.catalog[state.node_type[n]]
    for g in state.free_gpus(n):
        current = state.layout[n][g]
        if current is None:
            continue
        layout = initial_layout(gpu_type, f"all-{profile}")
        if not layout or current == layout:
            continue
        changes.append((n, g, current))
        state.repartition(n, g, layout)
        return g, layout[0]
    return None


def _available(state: ClusterState, n: int) -> int:
    """GPUs a whole-GPU replica could get on node n (empty MIG GPUs switch back)."""
    return len(state.empty[n])


# ----- replica choice rules -----------------------------------------------------------------

# Node choice: (ledger, candidate node indices, GPUs needed) -> chosen node or None.
_NodeRule = Callable[[ClusterState, list[int], int], int | None]


def best_fit(state: ClusterState, nodes: list[int], need: int) -> int | None:
    """Fewest free GPUs that still fit (then the first node by name)."""
    best: tuple[int, str, int] | None = None
    for n in nodes:
        avail = _available(state, n)
        if avail >= need:
            key = (avail, state.nodes[n].name, n)
            if best is None or key < best:
                best = key
    return None if best is None else best[2]


def _place_replica(
    state: ClusterState,
    gang: Gang,
    gpu_type: str,
    rule: _NodeRule,
    changes: list[_LayoutChange],
) -> ReplicaPlacement | None:
    """One replica of `gang` on `gpu_type`, choosing a node by `rule`, or None."""
    nodes = state.nodes_by_type.get(gpu_type, [])
    if gang.mig_profile is None:
        n = rule(state, nodes, gang.gpus_per_replica)
        if n is None:
            return None
        return _take_whole(state, n, gang.gpus_per_replica, changes)
    # MIG: a free instance on the GPU with the fewest free instances, else cut one.
    options: list[tuple[int, str, int, MigPlacement]] = []
    for n in nodes:
        for g, inst in _instances(state, n, gang.mig_profile):
            slots = len(state.layout[n][g] or ()) - len(state.used_inst[n][g])
            options.append((slots, state.nodes[n].name, g, inst))
    by_name = {state.nodes[n].name: n for n in nodes}
    if options:
        _, name, g, inst = min(options, key=lambda o: (o[0], o[1], o[2]))
        n = by_name[name]
        state.take_instance(n, g, inst)
        return ReplicaPlacement(name, (g,), inst)
    for name in sorted(by_name):
        n = by_name[name]
        cut = _cut_empty(state, n, gang.mig_profile, changes)
        if cut is not None:
            g, inst = cut
            state.take_instance(n, g, inst)
            return ReplicaPlacement(name, (g,), inst)
    return None


def _undo(
    state: ClusterState, placed: list[ReplicaPlacement], changes: list[_LayoutChange]
) -> None:
    """Drop the replicas of a gang that did not fit and the layout changes made for them."""
    for rep in reversed(placed):
        state.release(rep)
    for n, g, layout in reversed(changes):
        state.repartition(n, g, layout)


def place_gang(
    state: ClusterState, gang: Gang, gpu_type: str, rule: _NodeRule
) -> list[ReplicaPlacement]:
    """All replicas of `gang` on one type, or nothing (the ledger is left unchanged then)."""
    out: list[ReplicaPlacement] = []
    changes: list[_LayoutChange] = []
    nodes = state.nodes_by_type.get(gpu_type, [])
    if gang.topology is Topology.SAME_NODE and gang.mig_profile is None:
        # The whole gang on the one node the rule picks for its total GPU count.
        n = rule(state, nodes, gang_gpus(gang))
        if n is None:
            return []
        for _ in range(gang.replicas_min):
            out.append(_take_whole(state, n, gang.gpus_per_replica, changes))
        return out
    for _ in range(gang.replicas_min):
        rep = _place_replica(state, gang, gpu_type, rule, changes)
        if rep is None:
            _undo(state, out, changes)
            return []
        out.append(rep)
    return out


def _speed(gang: Gang, gpu_type: str, snapshot: Snapshot) -> float:
    for opt in gang.acceptable:
        if opt.gpu_type == gpu_type:
            if opt.relative_throughput is not None:
                return opt.relative_throughput
            return snapshot.catalog[gpu_type].relative_throughput
    return 0.0


def _types(gang: Gang, state: ClusterState) -> list[str]:
    """Acceptable types with schedulable nodes in the fleet, in the gang's order."""
    return [t for t in gang.type_names() if t in state.nodes_by_type]


def release_replicas(state: ClusterState, gang: RunningGang) -> None:
    """Free a running gang's GPUs on the ledger (a what-if eviction)."""
    for replica in gang.replicas:
        state.release(replica)


def to_decision(
    state: ClusterState,
    placements: dict[str, GangPlacement],
    preemptions: Sequence[Preemption] = (),
    engine: str = "baseline",
) -> Decision:
    decision = Decision(
        placements=tuple(placements.values()),
        repartitions=tuple(
            Repartition(state.nodes[n].name, g, old, new) for n, g, old, new in state.repartitions()
        ),
        preemptions=tuple(preemptions),
        stats=SolveStats(engine, "HEURISTIC"),
    )
    return victim_waits(decision, state.snapshot.running)


def gang_gpus(gang: Gang) -> int:
    return gang.gpus_needed(gang.replicas_min)


# ----- the three baselines ----------------------------------------------------------------------


class FifoBinPackPolicy:
    """FIFO gangs, all-or-nothing, best-fit bin-packing, backfilling past gangs that wait."""

    name = "fifo-binpack"

    def __call__(self, snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
        state = ClusterState(snapshot)
        placements: dict[str, GangPlacement] = {}
        for gang in pending:
            for t in _types(gang, state):
                reps = place_gang(state, gang, t, best_fit)
                if reps:
                    placements[gang.id] = GangPlacement(gang.id, t, tuple(reps))
                    break
        return to_decision(state, placements, engine="fifo-binpack")


class _RoundBased:
    """Shared machinery of the preemptive, service-ranked baselines."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._last: float | None = None
        self._service: dict[str, float] = {}  # ledger, in each policy's own unit
        self._first_seen: dict[str, float] = {}
        self._gangs: dict[str, Gang] = {}

    def _rate(self, running: RunningGang, snapshot: Snapshot) -> float:
        raise NotImplementedError

    def _rank(self, gang_id: str) -> tuple[float, ...]:
        raise NotImplementedError

    def _choose_types(self, gang: Gang, state: ClusterState, snapshot: Snapshot) -> list[str]:
        return _types(gang, state)

    def _placement_order(self, gangs: list[Gang], snapshot: Snapshot) -> list[Gang]:
        return gangs

    def _admit(
        self,
        candidates: Sequence[str],
        need: Mapping[str, int],
        total: int,
        snapshot: Snapshot,
        pending: Mapping[str, Gang],
    ) -> set[str]:
        """The jobs admitted this round: best-ranked first while the fleet's GPUs last."""
        budget = total
        admitted: set[str] = set()
        for gid in candidates:
            if need[gid] <= budget:
                admitted.add(gid)
                budget -= need[gid]
        return admitted

    def _update_ledger(self, snapshot: Snapshot, pending: Sequence[Gang]) -> None:
        now = self._clock()
        dt = 0.0 if self._last is None else max(0.0, now - self._last)
        self._last = now
        for running in snapshot.running:
            self._service[running.id] = self._service.get(running.id, 0.0) + dt * self._rate(
                running, snapshot
            )
        for gang in pending:
            self._first_seen.setdefault(gang.id, now)
            self._gangs.setdefault(gang.id, gang)

    def __call__(self, snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
        self._update_ledger(snapshot, pending)
        total = sum(n.gpu_count for n in snapshot.nodes if n.schedulable)
        running = {g.id: g for g in snapshot.running}
        # 1. Admit the best-ranked jobs, running or pending, up to the fleet's GPU count.
        candidates = sorted([*running, *(g.id for g in pending)], key=lambda i: (*self._rank(i), i))
        pending_by_id = {g.id: g for g in pending}
        need = {
            gid: (
                gang_gpus(pending_by_id[gid])
                if gid in pending_by_id
                else sum(len(r.gpus) for r in running[gid].replicas)
            )
            for gid in candidates
        }
        admitted = self._admit(candidates, need, total, snapshot, pending_by_id)
        # 2. Place admitted pending jobs on free capacity, best-ranked first.
        free = ClusterState(snapshot)
        placements: dict[str, GangPlacement] = {}
        waiting: list[Gang] = []
        for gang in self._placement_order(
            [pending_by_id[i] for i in candidates if i in admitted and i in pending_by_id],
            snapshot,
        ):
            if not self._place(free, gang, snapshot, placements):
                waiting.append(gang)
        # 3. Preempt running jobs outside the admitted set, worst-ranked first, while an
        #    admitted job still waits and the evictions make it fit.
        victims_pool = sorted(
            (g for g in snapshot.running if g.id not in admitted and g.preemptible),
            key=lambda g: (*self._rank(g.id), g.id),
            reverse=True,
        )
        evicted: list[RunningGang] = []
        preemptions: list[Preemption] = []
        for gang in waiting:
            if not victims_pool:
                break
            trial: list[RunningGang] = []
            placed = False
            while victims_pool and not placed:
                trial.append(victims_pool.pop(0))
                # What-if: this call's decisions so far, minus everything evicted.
                view = free.copy()
                for victim in trial:
                    for replica in victim.replicas:
                        view.release(replica)
                placed = self._place(view, gang, snapshot, placements)
                if placed:
                    free = view
            if placed:
                evicted.extend(trial)
                preemptions.extend(Preemption(v.id, gang.id) for v in trial)
            else:
                victims_pool = trial + victims_pool  # nothing evicted for a gang that won't fit
                break
        return to_decision(free, placements, preemptions, engine=type(self).__name__)

    def _place(
        self,
        state: ClusterState,
        gang: Gang,
        snapshot: Snapshot,
        placements: dict[str, GangPlacement],
    ) -> bool:
        for t in self._choose_types(gang, state, snapshot):
            reps = place_gang(state, gang, t, best_fit)
            if reps:
                placements[gang.id] = GangPlacement(gang.id, t, tuple(reps))
                return True
        return False


class TiresiasLikePolicy(_RoundBased):
    """Discretised 2D-LAS: GPU-seconds attained decide the queue; FIFO inside a queue."""

    name = "tiresias"

    def __init__(self, clock: Clock, thresholds: Sequence[float] = (3600.0,)) -> None:
        super().__init__(clock)
        self.thresholds = tuple(sorted(thresholds))

    def _rate(self, running: RunningGang, snapshot: Snapshot) -> float:
        return float(sum(len(r.gpus) for r in running.replicas))

    def _rank(self, gang_id: str) -> tuple[float, ...]:
        service = self._service.get(gang_id, 0.0)
        queue = sum(1 for t in self.thresholds if service >= t)
        return (float(queue), self._first_seen.get(gang_id, 0.0))


class GavelLikePolicy(_RoundBased):
    """Heterogeneity-aware max-min fairness on normalised attained service (Gavel-style)."""

    name = "gavel"

    def _rate(self, running: RunningGang, snapshot: Snapshot) -> float:
        gpus = sum(len(r.gpus) for r in running.replicas)
        thr = running.relative_throughput
        if thr is None:
            thr = snapshot.catalog[running.gpu_type].relative_throughput
        return thr * gpus

    def _rank(self, gang_id: str) -> tuple[float, ...]:
        gang = self._gangs.get(gang_id)
        gpus = gang_gpus(gang) if gang is not None else 1
        return (self._service.get(gang_id, 0.0) / max(gpus, 1), self._first_seen.get(gang_id, 0.0))

    def _choose_types(self, gang: Gang, state: ClusterState, snapshot: Snapshot) -> list[str]:
        """The job's own fastest type first."""
        return sorted(_types(gang, state), key=lambda t: (-_speed(gang, t, snapshot), t))

    def _placement_order(self, gangs: list[Gang], snapshot: Snapshot) -> list[Gang]:
        """Jobs that gain most from fast GPUs (fastest / slowest option) choose first."""

        def advantage(gang: Gang) -> float:
            speeds = [_speed(gang, t, snapshot) for t in gang.type_names()]
            speeds = [s for s in speeds if s > 0] or [1.0]
            return max(speeds) / min(speeds)

        return sorted(gangs, key=lambda g: -advantage(g))


class GavelTenantPolicy(GavelLikePolicy):
    """Weighted max-min across tenants, then across each tenant's jobs (module docstring)."""

    name = "gavel-tenants"

    def _admit(
        self,
        candidates: Sequence[str],
        need: Mapping[str, int],
        total: int,
        snapshot: Snapshot,
        pending: Mapping[str, Gang],
    ) -> set[str]:
        tree = snapshot.queues
        if tree is None:
            return super()._admit(candidates, need, total, snapshot, pending)
        running = {g.id: g for g in snapshot.running}
        lines: dict[str, list[str]] = {}
        rate: dict[str, float] = {}
        for gid in candidates:
            if gid in pending:
                gang = pending[gid]
                tenant = gang.queue or ""
                rate[gid] = need[gid] * max(_speed(gang, t, snapshot) for t in gang.type_names())
            else:
                tenant = running[gid].queue or ""
                rate[gid] = self._rate(running[gid], snapshot)
            lines.setdefault(tenant, []).append(gid)

        def weight(tenant: str) -> float:
            return tree.queues[tenant].weight if tree.usable(tenant) else min_weight

        min_weight = min((q.weight for q in tree.queues.values()), default=1.0)
        heap = [(0.0, tenant) for tenant in sorted(lines)]
        budget = total
        admitted: set[str] = set()
        while heap:
            level, tenant = heapq.heappop(heap)
            line = lines[tenant]
            pick = next((i for i, gid in enumerate(line) if need[gid] <= budget), None)
            if pick is None:
                continue  # nothing of this tenant fits what is left
            gid = line.pop(pick)
            admitted.add(gid)
            budget -= need[gid]
            if line:
                heapq.heappush(heap, (level + rate[gid] / weight(tenant), tenant))
        return admitted
