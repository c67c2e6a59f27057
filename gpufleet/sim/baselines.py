"""Baseline policies with the core's callable shape: `policy(snapshot, pending, core_policy)`.

All four read only the snapshot and the pending gangs (oldest first, as the engine passes them)
and return a core `Decision`; the core `Policy` argument is accepted and ignored. None of them
knows MIG layouts beyond the homogeneous mig-manager configs: when a slice is needed and no free
instance of its profile exists, an empty MIG GPU is repartitioned to `all-<profile>` (as many
instances of that one profile as fit), the way an operator relabels a GPU for one profile, and
when a whole GPU is needed and none is free, an empty MIG GPU is switched back to a whole GPU.

* `KubeLikePolicy` — kube-scheduler's default behaviour for GPU pods: pods one by one in queue
  order, each on the schedulable node with the most free GPUs (the `LeastAllocated` score), no
  gang awareness: a gang's first pods can bind while the rest do not fit, holding GPUs idle; no
  topology awareness either (a same-node wish is not something kube-scheduler sees).
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
* `TiresiasLikePolicy` — Tiresias (NSDI'19) discretised two-dimensional least-attained-service:
  attained service = GPUs x time run; queues split at `thresholds` GPU-seconds; lower queue first,
  FIFO inside a queue; heterogeneity-agnostic best-fit placement; preemptive on every round.

The gang-aware baselines honour a same-node topology wish (the whole gang on one node). The two
round-based policies keep their own service ledger and read simulated time from a clock
that the engine injects at construction; they never see the engine's state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from gpufleet.core.decision import (
    Decision,
    GangPlacement,
    Preemption,
    Repartition,
    SolveStats,
)
from gpufleet.core.demand import Gang, Topology
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import ReplicaPlacement, RunningGang, Snapshot
from gpufleet.model.mig import MigLayout, MigPlacement
from gpufleet.sim.occupancy import initial_layout

__all__ = [
    "FifoBinPackPolicy",
    "GavelLikePolicy",
    "KubeLikePolicy",
    "TiresiasLikePolicy",
]

Clock = Callable[[], float]


# ----- free capacity view ------------------------------------------------------------------------


@dataclass
class _Free:
    """Free whole GPUs and MIG instances per node, updated as a decision is built."""

    snapshot: Snapshot
    whole: dict[str, list[int]] = field(default_factory=dict)  # free non-MIG GPU indices
    mig_free: dict[tuple[str, int], list[MigPlacement]] = field(default_factory=dict)
    mig_used: dict[tuple[str, int], int] = field(default_factory=dict)  # instances in use
    layouts: dict[tuple[str, int], MigLayout] = field(default_factory=dict)
    by_type: dict[str, list[str]] = field(default_factory=dict)  # schedulable nodes per type
    repartitions: list[Repartition] = field(default_factory=list)

    @classmethod
    def of(cls, snapshot: Snapshot, removed: Iterable[RunningGang] = ()) -> _Free:
        used_whole, used_mig = snapshot.occupied({g.id for g in removed})
        free = cls(snapshot)
        for node in snapshot.nodes:
            if not node.schedulable:
                continue
            free.by_type.setdefault(node.gpu_type, []).append(node.name)
            free.whole[node.name] = []
            for gpu in node.gpus:
                key = (node.name, gpu.index)
                if gpu.mig_layout is None:
                    if key not in used_whole:
                        free.whole[node.name].append(gpu.index)
                    continue
                free.layouts[key] = gpu.mig_layout
                free.mig_free[key] = [
                    p for p in gpu.mig_layout if (node.name, gpu.index, p) not in used_mig
                ]
                free.mig_used[key] = len(gpu.mig_layout) - len(free.mig_free[key])
        return free

    def node_gpus(self, node: str) -> int:
        return self.snapshot.node(node).gpu_count

    def empty_mig(self, node: str) -> list[int]:
        """MIG-mode GPUs of `node` with no instance in use (could be switched to whole)."""
        return [
            gpu.index
            for gpu in self.snapshot.node(node).gpus
            if self.mig_used.get((node, gpu.index)) == 0
        ]

    def available(self, node: str) -> int:
        """GPUs a whole-GPU replica could get on `node`."""
        return len(self.whole.get(node, ())) + len(self.empty_mig(node))

    def take_whole(self, node: str, count: int) -> tuple[int, ...]:
        """Free whole GPUs first, then empty MIG GPUs switched back to whole GPUs."""
        gpus = self.whole[node][:count]
        del self.whole[node][:count]
        for g in self.empty_mig(node)[: count - len(gpus)]:
            key = (node, g)
            self.repartitions.append(Repartition(node, g, self.layouts.pop(key), None))
            del self.mig_free[key], self.mig_used[key]
            gpus.append(g)
        return tuple(sorted(gpus))

    def mig_candidates(self, node: str, profile: str) -> list[tuple[int, MigPlacement]]:
        """Free instances of `profile` on `node`, and empty GPUs that could be cut for it."""
        out: list[tuple[int, MigPlacement]] = []
        for gpu in self.snapshot.node(node).gpus:
            key = (node, gpu.index)
            if key not in self.layouts:
                continue
            for inst in self.mig_free[key]:
                if inst.profile == profile:
                    out.append((gpu.index, inst))
                    break
        return out

    def cut_empty(self, node: str, profile: str) -> tuple[int, MigPlacement] | None:
        """Repartition an empty MIG GPU of `node` to `all-<profile>`; its first instance."""
        gpu_type = self.snapshot.catalog[self.snapshot.node(node).gpu_type]
        for gpu in self.snapshot.node(node).gpus:
            key = (node, gpu.index)
            if key not in self.layouts or self.mig_used[key] != 0:
                continue
            layout = initial_layout(gpu_type, f"all-{profile}")
            if not layout or self.layouts[key] == layout:
                continue
            self.repartitions.append(Repartition(node, gpu.index, self.layouts[key], layout))
            self.layouts[key] = layout
            self.mig_free[key] = list(layout)
            return gpu.index, layout[0]
        return None

    def adopt_repartitions(self, repartitions: Sequence[Repartition]) -> None:
        """Carry cuts decided earlier in the same call over to this (fresher) view."""
        for rep in repartitions:
            key = (rep.node, rep.gpu)
            if self.mig_used.get(key, 1) != 0:
                continue
            if rep.new_layout is None:  # switched to a whole GPU, already given out
                del self.layouts[key], self.mig_free[key], self.mig_used[key]
                self.repartitions.append(rep)
                continue
            self.layouts[key] = rep.new_layout
            self.mig_free[key] = list(rep.new_layout)
            self.repartitions.append(rep)

    def take_instance(self, node: str, gpu: int, inst: MigPlacement) -> None:
        key = (node, gpu)
        self.mig_free[key].remove(inst)
        self.mig_used[key] += 1

    def mig_free_slots(self, node: str, gpu: int) -> int:
        return len(self.mig_free[(node, gpu)])


# ----- replica choice rules -----------------------------------------------------------------

# Node choice: (free object, candidate node names, GPUs needed) -> chosen node or None.
_NodeRule = Callable[[_Free, list[str], int], str | None]


def _least_allocated(free: _Free, nodes: list[str], need: int) -> str | None:
    """Most free GPUs as a fraction of the node (kube-scheduler's LeastAllocated)."""
    best: tuple[float, str] | None = None
    for n in nodes:
        avail = free.available(n)
        if avail >= need:
            score = (-(avail - need) / free.node_gpus(n), n)
            if best is None or score < best:
                best = score
    return None if best is None else best[1]


def _best_fit(free: _Free, nodes: list[str], need: int) -> str | None:
    """Fewest free GPUs that still fit."""
    best: tuple[int, str] | None = None
    for n in nodes:
        avail = free.available(n)
        if avail >= need and (best is None or (avail, n) < best):
            best = (avail, n)
    return None if best is None else best[1]


def _place_replica(
    free: _Free, gang: Gang, gpu_type: str, rule: _NodeRule, spread: bool
) -> ReplicaPlacement | None:
    """One replica of `gang` on `gpu_type`, choosing a node by `rule`, or None."""
    nodes = free.by_type.get(gpu_type, [])
    if gang.mig_profile is None:
        node = rule(free, nodes, gang.gpus_per_replica)
        if node is None:
            return None
        return ReplicaPlacement(node, free.take_whole(node, gang.gpus_per_replica))
    # MIG: a free instance on the GPU chosen by the rule (least or most used), else cut one.
    options: list[tuple[int, str, int, MigPlacement]] = []
    for n in nodes:
        for g, inst in free.mig_candidates(n, gang.mig_profile):
            slots = free.mig_free_slots(n, g)
            options.append((-slots if spread else slots, n, g, inst))
    if options:
        _, n, g, inst = min(options, key=lambda o: (o[0], o[1], o[2]))
        free.take_instance(n, g, inst)
        return ReplicaPlacement(n, (g,), inst)
    for n in sorted(nodes):
        cut = free.cut_empty(n, gang.mig_profile)
        if cut is not None:
            g, inst = cut
            free.take_instance(n, g, inst)
            return ReplicaPlacement(n, (g,), inst)
    return None


def _try_gang(free: _Free, gang: Gang, gpu_type: str, rule: _NodeRule) -> list[ReplicaPlacement]:
    """All replicas of `gang` on one type, or nothing (the free view is left unchanged then)."""
    saved_whole = {k: list(v) for k, v in free.whole.items()}
    saved_mig = {k: list(v) for k, v in free.mig_free.items()}
    saved_used = dict(free.mig_used)
    saved_layouts = dict(free.layouts)
    saved_reparts = len(free.repartitions)
    out: list[ReplicaPlacement] = []
    if gang.topology is Topology.SAME_NODE and gang.mig_profile is None:
        # The whole gang on the one node the rule picks for its total GPU count.
        node = rule(free, free.by_type.get(gpu_type, []), _gpus(gang))
        if node is None:
            return []
        for _ in range(gang.replicas_min):
            out.append(ReplicaPlacement(node, free.take_whole(node, gang.gpus_per_replica)))
        return out
    for _ in range(gang.replicas_min):
        rep = _place_replica(free, gang, gpu_type, rule, spread=False)
        if rep is None:
            free.whole, free.mig_free, free.mig_used = saved_whole, saved_mig, saved_used
            free.layouts = saved_layouts
            del free.repartitions[saved_reparts:]
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


def _types(gang: Gang, free: _Free) -> list[str]:
    """Acceptable types present in the fleet, in the gang's order."""
    return [t for t in gang.type_names() if t in free.by_type]


def _decision(
    free: _Free,
    placements: dict[str, GangPlacement],
    preemptions: Sequence[Preemption] = (),
    engine: str = "baseline",
) -> Decision:
    return Decision(
        placements=tuple(placements.values()),
        repartitions=tuple(free.repartitions),
        preemptions=tuple(preemptions),
        stats=SolveStats(engine, "HEURISTIC"),
    )


def _gpus(gang: Gang) -> int:
    return gang.gpus_needed(gang.replicas_min)


# ----- the four baselines -----------------------------------------------------------------------


class KubeLikePolicy:
    """kube-scheduler-like: pod by pod, least-allocated spreading, no gang awareness."""

    name = "kube"

    def __call__(self, snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
        free = _Free.of(snapshot)
        placements: dict[str, GangPlacement] = {}
        for gang in pending:
            replicas: list[ReplicaPlacement] = []
            first_type = ""
            for _ in range(gang.replicas_max):  # every pod of the job exists and is scheduled
                # Each pod may land on any acceptable type: pods are scheduled independently.
                best: tuple[float, str] | None = None
                for t in _types(gang, free):
                    if gang.mig_profile is None:
                        node = _least_allocated(free, free.by_type[t], gang.gpus_per_replica)
                        if node is not None:
                            score = -free.available(node) / free.node_gpus(node)
                            if best is None or (score, t) < best:
                                best = (score, t)
                    elif best is None:
                        best = (0.0, t)
                rep = None
                if best is not None:
                    rep = _place_replica(free, gang, best[1], _least_allocated, spread=True)
                if rep is None:
                    break  # the remaining pods of this gang are identical: none fits
                replicas.append(rep)
                first_type = first_type or snapshot.node(rep.node).gpu_type
            if replicas:
                placements[gang.id] = GangPlacement(gang.id, first_type, tuple(replicas))
        return _decision(free, placements, engine="kube-like")


class FifoBinPackPolicy:
    """FIFO gangs, all-or-nothing, best-fit bin-packing, backfilling past gangs that wait."""

    name = "fifo-binpack"

    def __call__(self, snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
        free = _Free.of(snapshot)
        placements: dict[str, GangPlacement] = {}
        for gang in pending:
            for t in _types(gang, free):
                reps = _try_gang(free, gang, t, _best_fit)
                if reps:
                    placements[gang.id] = GangPlacement(gang.id, t, tuple(reps))
                    break
        return _decision(free, placements, engine="fifo-binpack")


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

    def _choose_types(self, gang: Gang, free: _Free, snapshot: Snapshot) -> list[str]:
        return _types(gang, free)

    def _placement_order(self, gangs: list[Gang], snapshot: Snapshot) -> list[Gang]:
        return gangs

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
        budget = total
        admitted: set[str] = set()
        for gid in candidates:
            need = (
                _gpus(pending_by_id[gid])
                if gid in pending_by_id
                else sum(len(r.gpus) for r in running[gid].replicas)
            )
            if need <= budget:
                admitted.add(gid)
                budget -= need
        # 2. Place admitted pending jobs on free capacity, best-ranked first.
        free = _Free.of(snapshot)
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
                view = _Free.of(snapshot, [*evicted, *trial])
                view.adopt_repartitions(free.repartitions)
                self._replay(view, placements)
                placed = self._place(view, gang, snapshot, placements)
                if placed:
                    free = view
            if placed:
                evicted.extend(trial)
                preemptions.extend(Preemption(v.id, gang.id) for v in trial)
            else:
                victims_pool = trial + victims_pool  # nothing evicted for a gang that won't fit
                break
        return _decision(free, placements, preemptions, engine=type(self).__name__)

    @staticmethod
    def _replay(view: _Free, placements: dict[str, GangPlacement]) -> None:
        """Mark the capacity of placements already decided in this call as used in `view`."""
        for gp in placements.values():
            for rep in gp.replicas:
                if rep.mig is None:
                    for ix in rep.gpus:
                        if ix in view.whole[rep.node]:
                            view.whole[rep.node].remove(ix)
                else:
                    view.take_instance(rep.node, rep.gpus[0], rep.mig)

    def _place(
        self,
        free: _Free,
        gang: Gang,
        snapshot: Snapshot,
        placements: dict[str, GangPlacement],
    ) -> bool:
        for t in self._choose_types(gang, free, snapshot):
            reps = _try_gang(free, gang, t, _best_fit)
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
        gpus = _gpus(gang) if gang is not None else 1
        return (self._service.get(gang_id, 0.0) / max(gpus, 1), self._first_seen.get(gang_id, 0.0))

    def _choose_types(self, gang: Gang, free: _Free, snapshot: Snapshot) -> list[str]:
        """The job's own fastest type first."""
        return sorted(_types(gang, free), key=lambda t: (-_speed(gang, t, snapshot), t))

    def _placement_order(self, gangs: list[Gang], snapshot: Snapshot) -> list[Gang]:
        """Jobs that gain most from fast GPUs (fastest / slowest option) choose first."""

        def advantage(gang: Gang) -> float:
            speeds = [_speed(gang, t, snapshot) for t in gang.type_names()]
            speeds = [s for s in speeds if s > 0] or [1.0]
            return max(speeds) / min(speeds)

        return sorted(gangs, key=lambda g: -advantage(g))
