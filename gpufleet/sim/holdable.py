"""Which trace jobs a fleet can ever hold, and why a job cannot.

A job that no placement on the empty fleet could hold would wait for ever and distort every
waiting-time measure, so the simulator drops it before the replay and reports it (a count under
the table, the list in `results.json` and `results.md`, a warning line). The test runs on the
core demand the engine submits for the job (`gang_for_job`), so it agrees with what the core is
asked, and it is generous (it never drops a job that could fit):

* all replicas of a gang run on one GPU type, so capacity is counted per acceptable type;
* a whole-GPU replica needs `gpus_per_replica` GPUs on one node (inside one NVLink domain for
  the NVLink topology), and a same-node gang needs all its minimum replicas on one node;
* a MIG replica needs one slice of its profile, and a GPU holds at most 7 // (its SM slices).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.core.demand import Gang, Topology
from gpufleet.model.fleet import FleetSpec, NodePoolSpec
from gpufleet.model.gpus import SM_SLICES, Catalog

__all__ = ["DroppedJob", "why_unholdable"]


@dataclass(frozen=True)
class DroppedJob:
    """A job left out of a replay: its id, the GPUs it asks for and why no node can hold it."""

    job_id: str
    gpus: float
    reason: str


def _replica_slots(pool: NodePoolSpec, gang: Gang) -> tuple[int, int]:
    """(replicas one node of `pool` holds, GPUs one replica may draw from on it)."""
    unit = pool.domain_size if gang.topology is Topology.NVLINK else pool.gpus_per_node
    per_node = (pool.gpus_per_node // unit) * (unit // gang.gpus_per_replica)
    return per_node, unit


def why_unholdable(gang: Gang, fleet: FleetSpec, catalog: Catalog) -> str | None:
    """None when the empty fleet could hold `gang`; otherwise the reason, in words."""
    types = gang.type_names()
    pools = [p for p in fleet.node_pools if p.gpu_type in types]
    need = gang.replicas_min
    if gang.mig_profile is not None:
        slots = {t: 0 for t in types}
        for pool in pools:
            slices = catalog[pool.gpu_type].mig_profile(gang.mig_profile).sm_slices
            slots[pool.gpu_type] += pool.count * pool.gpus_per_node * (SM_SLICES // slices)
        most = max(slots.values(), default=0)
        if most >= need:
            return None
        return f"needs {need} {gang.mig_profile} slices of one type; the fleet holds {most}"
    gpus = gang.gpus_per_replica
    if gang.topology is Topology.SAME_NODE:
        largest = max((p.gpus_per_node for p in pools), default=0)
        if largest >= need * gpus:
            return None
        return (
            f"needs {need * gpus} GPUs on one node; the largest node of an acceptable type "
            f"has {largest}"
        )
    widest = max((_replica_slots(p, gang)[1] for p in pools), default=0)
    if widest < gpus:
        where = "NVLink domain" if gang.topology is Topology.NVLINK else "node"
        return (
            f"needs {gpus} GPUs per replica on one {where}; the largest {where} of an "
            f"acceptable type has {widest}"
        )
    per_type = {t: 0 for t in types}
    for pool in pools:
        per_type[pool.gpu_type] += pool.count * _replica_slots(pool, gang)[0]
    most = max(per_type.values(), default=0)
    if most >= need:
        return None
    return (
        f"needs {need * gpus} GPUs of one type ({need} x {gpus}); the fleet holds at most "
        f"{most * gpus} of an acceptable type"
    )
