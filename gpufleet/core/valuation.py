"""What a replica is worth and what it costs: throughput, power cap, watts, objective value.

Shared by the greedy heuristic, the CP-SAT model and the benchmark so all three score a decision
the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.core.demand import EnergyPreference, Gang
from gpufleet.core.policy import Policy
from gpufleet.model.gpus import GpuType
from gpufleet.model.power import PowerCapChoice, capped_power_w, choose_power_cap

# Energy enters the objective per kW so one H100 at full draw (~0.6 kW) weighs like 0.6 units
# of V100 work at energy weight 1.
WATTS_PER_ENERGY_UNIT = 1000.0
# Energy may make a placement less attractive but never worse than leaving the work pending.
MIN_NET_VALUE_SHARE = 0.1
# Each gang a decision starts adds this much (in units of work, times the work weight): a
# tie-break, 1 % of one V100's throughput, far below the gaps between the catalogue's types.
# When starting one gang of n GPUs and n gangs of one GPU do the same work, the n gangs
# start: with no run times known, starting more jobs is what shortens the average completion
# time (Smith's rule at equal expected lengths). Without it the solver broke such ties at
# random: on a queued Philly window an 8-GPU job of 9 h took a whole H100 node in some runs,
# and the 1-GPU jobs it displaced ran for hours on T4s and V100s (bench/README.md).
START_VALUE = 0.01


@dataclass(frozen=True, slots=True)
class ReplicaValue:
    """Per-replica figures of one gang on one GPU type."""

    work: float  # relative throughput x GPUs (or slice share), after any power cap
    power_w: float  # busy watts of the replica's GPUs (slice share for MIG)
    objective: float  # net contribution to the objective
    cap: PowerCapChoice | None


def base_throughput(gang: Gang, gpu: GpuType) -> float:
    """Per-GPU relative throughput of this gang on this type (job override or catalogue)."""
    for option in gang.acceptable:
        if option.gpu_type == gpu.name and option.relative_throughput is not None:
            return option.relative_throughput
    return gpu.relative_throughput


def power_cap(gang: Gang, gpu: GpuType, policy: Policy) -> PowerCapChoice | None:
    """The cap this gang gets on this type, if any: within the gang's own `max_slowdown` when
    it states one (its owner asked for the energy saving), else by the policy's rule."""
    if gang.energy is EnergyPreference.PERFORMANCE:
        return None
    if gang.max_slowdown is not None:
        return choose_power_cap(gpu, gang.max_slowdown)
    rule = policy.power_caps
    if not rule.enabled:
        return None
    if gang.energy is EnergyPreference.BALANCED and not rule.cap_all:
        return None
    return choose_power_cap(gpu, rule.max_slowdown)


def replica_value(gang: Gang, gpu: GpuType, policy: Policy) -> ReplicaValue:
    cap = power_cap(gang, gpu, policy)
    speed = 1.0 if cap is None else cap.speed_factor
    if gang.mig_profile is not None:
        share = gpu.mig_profile(gang.mig_profile).compute_fraction
    else:
        share = float(gang.gpus_per_replica)
    work = base_throughput(gang, gpu) * share * speed
    power = capped_power_w(gpu, None if cap is None else cap.cap_w) * share
    weights = policy.weights
    gain = weights.work * policy.priority_weight(gang.priority) * work
    net = gain - weights.energy * power / WATTS_PER_ENERGY_UNIT
    return ReplicaValue(work, power, max(net, MIN_NET_VALUE_SHARE * gain), cap)


def start_value(policy: Policy) -> float:
    """The objective's tie-break for each gang a decision starts (`START_VALUE`)."""
    return START_VALUE * policy.weights.work


def gang_value(gang: Gang, gpu: GpuType, policy: Policy, replicas: int) -> float:
    """Objective value of `replicas` replicas of the gang on `gpu`: the work its scaling curve
    says they do (diminishing returns for an elastic gang), net of the energy all of them draw."""
    if not gang.scaling:
        return replica_value(gang, gpu, policy).objective * replicas
    figures = replica_value(gang, gpu, policy)
    weights = policy.weights
    gain = weights.work * policy.priority_weight(gang.priority) * figures.work
    gain *= gang.speedup(replicas)
    net = gain - weights.energy * figures.power_w * replicas / WATTS_PER_ENERGY_UNIT
    return max(net, MIN_NET_VALUE_SHARE * gain)
