"""How much slower a gang runs spread over more nodes than it needs (`Gang.spread_speed`).

A synchronous gang whose replicas sit on more nodes than the fewest of its type that could hold
them waits on the network between nodes at every step: Gavel measures such "unconsolidated"
runs at 0.1 to 1.0 of the consolidated rate, by model. The gang states the factor
(`spread_speed`: a TrainingJob's `spreadSlowdownPercent`, the simulator's Gavel profile); a
decision that compares placements multiplies a placement's speed by `spread_factor`. Without
it, moves took wide gangs from the fewest nodes of one type onto twice as many of a faster one
and got a third of the speed-up they expected (issue 13, diagnosis window 2017-10-26).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.core.demand import Gang
from gpufleet.core.snapshot import ReplicaPlacement
from gpufleet.core.state import ClusterState

__all__ = ["fewest_node_count", "spread_factor"]


def fewest_node_count(state: ClusterState, gpu_type: str, size: int, replicas: int) -> int | None:
    """Fewest nodes of the type that can hold `replicas` replicas of `size` whole GPUs each
    (as many per node as its largest node holds), or None when no node holds one."""
    per_node = state.max_node_size.get(gpu_type, 0) // max(1, size)
    return -(-replicas // per_node) if per_node else None


def spread_factor(
    state: ClusterState, gang: Gang, gpu_type: str, replicas: Sequence[ReplicaPlacement]
) -> float:
    """The gang's speed on these replicas of `gpu_type` relative to the fewest nodes that could
    hold them: its `spread_speed` when they sit on more nodes, else 1 (also for MIG slices,
    whose speed the slice decides)."""
    if gang.spread_speed >= 1.0 or gang.uses_mig or len(replicas) < 2:
        return 1.0
    fewest = fewest_node_count(state, gpu_type, gang.gpus_per_replica, len(replicas))
    spread = fewest is not None and len({r.node for r in replicas}) > fewest
    return gang.spread_speed if spread else 1.0
