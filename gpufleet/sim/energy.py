"""Fleet power from the core power model (`gpufleet.model.power`), per node and GPU state.

Per GPU, in watts (the busy and idle figures are the model's; the rest are stated assumptions):

* node powered down (only when the policy allows it and the node is empty): 0 W;
* free: the type's idle watts;
* running work: `capped_power_w(type, cap)`, i.e. idle + 0.85 x (TDP - idle) unless capped;
* held but not running (a gang waiting for its other pods, a restart, a boot or a MIG
  repartition): idle + `PARKING_W`, the "allocated but idle" overhead of gpus.md §6 (30-50 W);
* a MIG GPU: idle plus each held instance's compute share (SM slices / 7) of the running or
  parking overhead; a power cap is a whole-GPU setting and is not applied to MIG instances.

Only GPU board power is modelled: host CPUs, memory, fans and networking are not.
"""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.model.gpus import GpuType
from gpufleet.model.power import capped_power_w
from gpufleet.sim.occupancy import SimCluster, slice_share

__all__ = ["PARKING_W", "GangPowerState", "gpu_power_w", "node_power_w"]

# Extra watts of a GPU that holds a CUDA context without running work (gpus.md §6: 30-50 W).
PARKING_W = 40.0

# For a gang id: (is running, power cap in W or None).
GangPowerState = Callable[[str], tuple[bool, float | None]]


def gpu_power_w(
    gpu: GpuType, busy_share: float, parked_share: float, cap_w: float | None = None
) -> float:
    """Watts of one powered GPU with `busy_share` of it running and `parked_share` held idle."""
    idle = gpu.power.idle_w
    busy = capped_power_w(gpu, cap_w) - idle
    parked = min(PARKING_W, gpu.power.tdp_w - idle)
    return idle + busy_share * busy + parked_share * parked


def node_power_w(
    cluster: SimCluster, node_name: str, state_of: GangPowerState, powered: bool = True
) -> float:
    """Watts drawn by the GPUs of one node."""
    if not powered:
        return 0.0
    node = cluster.nodes[node_name]
    gpu_type = cluster.gpu_type_of(node_name)
    total = 0.0
    for gpu in node.gpus:
        if gpu.mig_layout is None:
            owner = cluster.gpu_owner(node_name, gpu.index)
            if owner is None:
                total += gpu_power_w(gpu_type, 0.0, 0.0)
            else:
                running, cap = state_of(owner)
                total += gpu_power_w(
                    gpu_type, 1.0 if running else 0.0, 0.0 if running else 1.0, cap
                )
            continue
        busy = parked = 0.0
        for inst in gpu.mig_layout:
            owner = cluster.mig_owner(node_name, gpu.index, inst)
            if owner is None:
                continue
            share = slice_share(gpu_type, inst)
            if state_of(owner)[0]:
                busy += share
            else:
                parked += share
        total += gpu_power_w(gpu_type, busy, parked)
    return total
