"""Score a decision with the policy's objective, the same way for every engine and baseline.

objective = sum over admitted replicas of their net value (priority-weighted work minus energy)
          + a small tie-break per gang started (valuation.START_VALUE: more gangs at equal work)
          - value of the running gangs it preempts
          - consolidation x idle nodes the decision starts using
          - packing x free GPUs left on nodes the decision touches
          - fragmentation x growth of expected fragmentation (FGD, fragmentation.py)
          + value moved gangs gain on their new type
          - disruption x (MIG repartitions + preempted gangs + moves)
          - scarcity charge for what flexible gangs take from single-type reserves (scarcity.py)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpufleet.core.decision import Decision, GangPlacement
from gpufleet.core.demand import Gang
from gpufleet.core.policy import Policy
from gpufleet.core.pricing import decision_costs
from gpufleet.core.service_tier import served_share
from gpufleet.core.snapshot import RunningGang, Snapshot
from gpufleet.core.valuation import base_throughput, gang_value, replica_value, start_value


@dataclass(frozen=True, slots=True)
class DecisionMetrics:
    admitted: int
    admitted_gpus: float  # whole GPUs plus MIG slices as compute fractions
    work: float  # relative throughput of admitted work (after power caps)
    weighted_work: float  # work x priority weight
    evicted_weighted_work: float  # priority-weighted work of preempted running gangs
    power_w: float  # busy watts of the admitted work
    nodes_opened: int  # idle nodes this decision starts using
    repartitions: int
    preemptions: int
    fragmentation_gpus: float  # growth of expected fragmentation (FGD), in GPUs
    objective: float


def evaluate(
    snapshot: Snapshot, pending: Sequence[Gang], decision: Decision, policy: Policy
) -> DecisionMetrics:
    gangs = {g.id: g for g in pending}
    evicted = {p.gang_id for p in decision.preemptions}
    moved = {m.gang_id for m in decision.moves}
    used_before: dict[str, set[int]] = {}
    used_after: dict[str, set[int]] = {}
    for running in snapshot.running:
        for replica in running.replicas:
            used_before.setdefault(replica.node, set()).update(replica.gpus)
            if running.id not in evicted and running.id not in moved:
                used_after.setdefault(replica.node, set()).update(replica.gpus)
    work = weighted = power = value = gpus = 0.0
    touched: set[str] = set()
    for placement in decision.placements:
        gang = gangs[placement.gang_id]
        gpu = snapshot.catalog[placement.gpu_type]
        figures = replica_value(gang, gpu, policy)
        count = placement.replica_count
        work += figures.work * gang.speedup(count)
        weighted += figures.work * gang.speedup(count) * policy.priority_weight(gang.priority)
        power += figures.power_w * count
        value += gang_value(gang, gpu, policy, count)
        if gang.mig_profile is not None:
            gpus += gpu.mig_profile(gang.mig_profile).compute_fraction * count
        else:
            gpus += gang.gpus_per_replica * count
        for replica in placement.replicas:
            touched.add(replica.node)
            used_after.setdefault(replica.node, set()).update(replica.gpus)
    move_value = 0.0
    running_by_id = {r.id: r for r in snapshot.running}
    for move in decision.moves:
        mover = running_by_id[move.gang_id]
        move_value += moved_value(snapshot, mover, move.placement, policy)
        move_value -= running_value(snapshot, mover, policy)
        for replica in move.placement.replicas:
            touched.add(replica.node)
            used_after.setdefault(replica.node, set()).update(replica.gpus)
    opened = sum(1 for name in touched if not used_before.get(name))
    stranded = sum(
        snapshot.node(name).gpu_count - len(used_after.get(name, set())) for name in touched
    )
    weights = policy.weights
    evicted_value = sum(
        running_value(snapshot, r, policy) for r in snapshot.running if r.id in evicted
    )
    costs = decision_costs(snapshot, pending, decision, policy)
    objective = (
        value
        + start_value(policy) * len(decision.placements)
        + move_value
        - costs.scarcity
        - costs.fragmentation
        - evicted_value
        - weights.consolidation * opened
        - weights.packing * stranded
        - weights.disruption
        * (len(decision.repartitions) + len(decision.preemptions) + len(decision.moves))
    )
    return DecisionMetrics(
        admitted=len(decision.placements),
        admitted_gpus=gpus,
        work=work,
        weighted_work=weighted,
        evicted_weighted_work=evicted_value / max(policy.weights.work, 1e-12),
        power_w=power,
        nodes_opened=opened,
        repartitions=len(decision.repartitions),
        preemptions=len(decision.preemptions),
        fragmentation_gpus=costs.fragmentation_gpus,
        objective=objective,
    )


def moved_value(
    snapshot: Snapshot, gang: RunningGang, placement: GangPlacement, policy: Policy
) -> float:
    """Objective value a running gang would contribute on its move's new placement."""
    assert gang.demand is not None
    gpu = snapshot.catalog[placement.gpu_type]
    return running_value(
        snapshot,
        replace(
            gang,
            gpu_type=placement.gpu_type,
            replicas=placement.replicas,
            relative_throughput=base_throughput(gang.demand, gpu),
        ),
        policy,
    )


def running_value(snapshot: Snapshot, gang: RunningGang, policy: Policy) -> float:
    """Objective value a running gang contributes (what evicting it loses)."""
    gpu = snapshot.catalog[gang.gpu_type]
    speed = gang.relative_throughput or gpu.relative_throughput
    work = 0.0
    for replica in gang.replicas:
        if replica.mig is None:
            work += speed * len(replica.gpus)
        else:
            work += speed * gpu.mig_profile(replica.mig.profile).compute_fraction
    if gang.demand is not None and gang.demand.scaling and gang.replicas:
        # An elastic gang does what its scaling curve says, not one replica's work n times.
        count = len(gang.replicas)
        work *= gang.demand.speedup(count) / count
    # Inside a queue, a gang past the service tier's threshold is worth less (service_tier.py).
    share = served_share(snapshot, gang, policy.service_tier_gpu_s)
    return policy.weights.work * policy.priority_weight(gang.priority) * work * share
