"""A kube-scheduler-like baseline for comparisons: pod by pod, no gang awareness.

Each replica is a pod scheduled on its own in submission order: filter nodes of an acceptable
type with enough free whole GPUs (or a free MIG instance of the profile; no repartitioning),
score by least allocated (most free GPUs: the default spreading score), take the best. A gang
whose pods only partly fit keeps the GPUs it got (they burn idle power and do no work), which is
what gang-unaware scheduling does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.core.demand import Gang
from gpufleet.core.snapshot import ReplicaPlacement, Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.model.mig import MigPlacement


@dataclass(frozen=True, slots=True)
class BaselineResult:
    admitted: dict[str, tuple[str, tuple[ReplicaPlacement, ...]]]  # gang -> (type, replicas)
    stranded: dict[str, tuple[str, tuple[ReplicaPlacement, ...]]]  # partial gangs' pods

    @property
    def stranded_gpus(self) -> int:
        return sum(len(r.gpus) for _, reps in self.stranded.values() for r in reps if r.mig is None)


def place_spread_podwise(snapshot: Snapshot, pending: Sequence[Gang]) -> BaselineResult:
    state = ClusterState(snapshot)
    admitted: dict[str, tuple[str, tuple[ReplicaPlacement, ...]]] = {}
    stranded: dict[str, tuple[str, tuple[ReplicaPlacement, ...]]] = {}
    for gang in pending:
        types = [t for t in gang.type_names() if t in state.catalog]
        placed: list[ReplicaPlacement] = []
        used_type = ""
        for _ in range(gang.replicas_max):
            pod = _schedule_pod(state, gang, types)
            if pod is None:
                break
            used_type, replica = pod
            placed.append(replica)
        if placed and len(placed) >= gang.replicas_min:
            admitted[gang.id] = (used_type, tuple(placed))
        elif placed:
            stranded[gang.id] = (used_type, tuple(placed))
    return BaselineResult(admitted, stranded)


def _schedule_pod(
    state: ClusterState, gang: Gang, types: list[str]
) -> tuple[str, ReplicaPlacement] | None:
    if gang.mig_profile is not None:
        best: tuple[int, int, int, int, str] | None = None
        for t in types:
            for _tier, n, g, start in state.free_instances(t, gang.mig_profile):
                # Least allocated: the node with the most free GPUs, then lowest index.
                key = (-len(state.empty[n]), n, g, start, t)
                if best is None or key < best:
                    best = key
        if best is None:
            return None
        _key, n, g, start, t = best
        inst = MigPlacement(start, gang.mig_profile)
        state.take_instance(n, g, inst)
        return t, ReplicaPlacement(state.nodes[n].name, (g,), inst)
    size = gang.gpus_per_replica
    choice: tuple[int, int, str] | None = None
    for t in types:
        buckets = state.type_nodes(t)
        for k in range(len(buckets) - 1, size - 1, -1):  # most free first
            if buckets[k]:
                spread = (-k, buckets[k][0], t)
                if choice is None or spread < choice:
                    choice = spread
                break
    if choice is None:
        return None
    _free, n, t = choice
    gpus = state.pick_gpus(n, size, nvlink=False)
    if gpus is None:
        return None
    state.take_whole(n, gpus)
    return t, ReplicaPlacement(state.nodes[n].name, gpus)
