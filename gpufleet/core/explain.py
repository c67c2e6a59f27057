"""Pending reasons: why a gang was not placed, as a stable reason code and a human message.

Checks run from the most basic (the catalogue has none of the acceptable types) to the most
specific (free GPUs exist but not on one node). A gang that would fit on its own in the
snapshot was left out because other gangs got the capacity, and the message says so; one that
would fit only on types the policy's type delay still holds it back from waits for a faster type.
A gang that preemption would make room for but for running gangs the caller marks not
`disruptable` (a PodDisruptionBudget forbids stopping them now) waits for the budget
(`PreemptionBlockedByDisruptionBudget`, naming those gangs): it does not fit once every gang it
may preempt is released, and fits once the protected ones it may otherwise preempt go too.
A gang of a queue that has received the service tier's threshold of service waits behind
the fresh gangs of its queue and priority (service_tier.py): its CapacityGivenToOtherGangs
message says so.
A gang restricted to some nodes (`allowed_nodes`, the adapter's node filters) is judged on those
nodes only; when they hold none of its types the reason is `NoEligibleNode`, and the adapter
adds which filter left out how many nodes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from gpufleet.core.decision import Pending, PendingReason
from gpufleet.core.demand import Gang, Topology
from gpufleet.core.greedy import Memo, eligible_nodes, plan_gang, usable_types
from gpufleet.core.policy import Policy, TypeDelay
from gpufleet.core.preempt import (
    put_back_unneeded,
    release_gang,
    release_until_fits,
    retake_all,
    try_plan,
)
from gpufleet.core.service_tier import served_note
from gpufleet.core.snapshot import RunningGang
from gpufleet.core.state import ClusterState


def _types_text(types: list[str]) -> str:
    return types[0] if len(types) == 1 else "{" + ", ".join(types) + "}"


def _nodes_of(state: ClusterState, types: list[str]) -> list[int]:
    return sorted(n for t in types for n in state.nodes_by_type.get(t, []))


def explain(
    initial: ClusterState, gang: Gang, policy: Policy, layouts: Memo | None = None
) -> Pending:
    """The reason `gang` is pending, judged against the snapshot's free capacity (`initial`)."""
    layouts = layouts or Memo()
    catalog = initial.catalog
    known = [t for t in gang.type_names() if t in catalog]
    if not known:
        return Pending(
            gang.id,
            PendingReason.UNKNOWN_GPU_TYPE,
            f"none of the acceptable GPU types {_types_text(list(gang.type_names()))} "
            "is in the GPU catalogue",
        )
    if gang.mig_profile is not None:
        offering = [t for t in known if catalog[t].has_mig_profile(gang.mig_profile)]
        if not offering:
            return Pending(
                gang.id,
                PendingReason.MIG_PROFILE_UNSUPPORTED,
                f"MIG profile {gang.mig_profile} is not offered by {_types_text(known)}",
            )
        known = offering
    nodes = _nodes_of(initial, known)
    if not nodes:
        return Pending(
            gang.id,
            PendingReason.NO_NODES_OF_TYPE,
            f"no schedulable node has {_types_text(known)} GPUs",
        )
    allowed = eligible_nodes(initial, gang, layouts)
    if allowed is not None:
        nodes = [n for n in nodes if n in allowed]
        if not nodes:
            return Pending(
                gang.id,
                PendingReason.NO_ELIGIBLE_NODE,
                f"no node with {_types_text(known)} GPUs passes the job's node filters",
            )
    types = _types_text(known)
    fits_alone = any(
        plan_gang(initial, gang, t, policy, layouts) is not None
        for t in usable_types(initial, gang, policy, layouts)
    )
    if fits_alone:
        return Pending(
            gang.id,
            PendingReason.LOST_TO_OTHERS,
            f"fits on free {types} GPUs on its own, but this decision gave that capacity to "
            "higher-priority or more valuable gangs" + _served_note(initial, gang, policy),
        )
    delayed = _delayed_fit(initial, gang, policy, layouts)
    if delayed:
        bar = policy.type_delay.bar(gang.waited_s)
        return Pending(
            gang.id,
            PendingReason.WAITING_FOR_FASTER_TYPE,
            f"fits on free {_types_text(delayed)} GPUs, but after {gang.waited_s:.0f} s of "
            f"waiting it still starts only on types at >= {bar:.2f} of its fastest type's speed",
        )
    blocked = _budget_blocked(initial, gang, policy, layouts)
    if blocked is not None:
        return blocked
    if gang.mig_profile is not None:
        return _explain_mig(initial, gang, known, nodes, policy.allow_repartition)
    return _explain_whole(initial, gang, known, nodes, allowed is not None)


def _served_note(state: ClusterState, gang: Gang, policy: Policy) -> str:
    """For a gang of a queue past the service tier's threshold (service_tier.py): that its
    queue's gangs of its priority with less service go first; else nothing."""
    theta = policy.service_tier_gpu_s
    gate = state.gate
    if gate is None or theta is None or not gate.served(gang):
        return ""
    return served_note(gang, theta)


def _budget_blocked(
    state: ClusterState, gang: Gang, policy: Policy, layouts: Memo
) -> Pending | None:
    """BUDGET when only gangs a disruption budget protects keep preemption from making room
    for `gang` (module docstring), naming the fewest of them it needs; None otherwise. A
    what-if on `state`, undone before returning."""
    if not policy.allow_preemption:
        return None
    running = state.snapshot.running
    if all(r.disruptable for r in running):  # the common case: nothing to look at
        return None
    types = set(usable_types(state, gang, policy, layouts))
    allowed = eligible_nodes(state, gang, layouts)
    gate = state.gate

    def may_evict(victim: RunningGang) -> bool:
        """preempt.py's rule for its candidates, with the budget set aside."""
        free = replace(victim, disruptable=True)
        return (
            free.preemptible
            and free.gpu_type in types
            and (allowed is None or any(state.node_index[p.node] in allowed for p in free.replicas))
            and (free.priority < gang.priority if gate is None else gate.may_evict(free, gang))
        )

    protected = sorted(
        (r for r in running if not r.disruptable and may_evict(r)),
        key=lambda r: (r.priority, r.id),
    )
    if not protected:
        return None
    # Everything preemption may take goes first: if the gang fits then, it is not the budget
    # that keeps it waiting (the victims were not worth its value, say).
    released: list[RunningGang] = []
    needed: list[RunningGang] = []
    try:
        for victim in running:
            if victim.disruptable and may_evict(victim):
                release_gang(state, victim)
                released.append(victim)
        if try_plan(state, gang, policy, layouts) is not None:
            return None
        needed, plan = release_until_fits(state, gang, protected, policy, layouts, may_evict)
        if plan is None:
            return None
        needed, _ = put_back_unneeded(state, gang, needed, plan, policy, layouts)
    finally:
        retake_all(state, [*released, *needed])
    them = "it" if len(needed) == 1 else "them"
    return Pending(
        gang.id,
        PendingReason.BUDGET,
        f"cannot preempt {', '.join(sorted(r.id for r in needed))}: a PodDisruptionBudget "
        f"forbids stopping {them} now",
    )


def _delayed_fit(state: ClusterState, gang: Gang, policy: Policy, layouts: Memo) -> list[str]:
    """Types the type delay holds the gang back from and on which it would fit on its own."""
    if policy.type_delay.min_speed_share <= 0:
        return []
    allowed = set(usable_types(state, gang, policy, layouts))
    undelayed = replace(policy, type_delay=TypeDelay())
    return [
        t
        for t in usable_types(state, gang, undelayed)
        if t not in allowed and plan_gang(state, gang, t, policy, layouts) is not None
    ]


def _explain_whole(
    state: ClusterState, gang: Gang, known: list[str], nodes: list[int], restricted: bool
) -> Pending:
    types = _types_text(known)
    size = gang.gpus_per_replica
    replicas = gang.replicas_min
    same_node = gang.topology is Topology.SAME_NODE
    nvlink = gang.topology is Topology.NVLINK
    unit = replicas * size if same_node else size
    largest = max(state.nodes[n].gpu_count for n in nodes)
    if unit > largest:
        return Pending(
            gang.id,
            PendingReason.REPLICA_TOO_LARGE,
            f"needs {unit} x {types} on one node; the largest node has {largest} GPUs",
        )
    if restricted:
        largest_domain = max(max(Counter(state.domain_of[n]).values()) for n in nodes)
    else:
        largest_domain = max(state.max_domain_size.get(t, 0) for t in known)
    if nvlink and size > largest_domain:
        return Pending(
            gang.id,
            PendingReason.TOPOLOGY,
            f"needs {size} x {types} in one NVLink domain; the largest domain has "
            f"{largest_domain} GPUs",
        )
    total = sum(state.nodes[n].gpu_count for n in nodes)
    need = replicas * size
    if need > total:
        return Pending(
            gang.id,
            PendingReason.GANG_TOO_LARGE,
            f"needs {need} x {types}; the cluster has {total} such GPUs",
        )
    free = sum(len(state.empty[n]) for n in nodes)
    if free < need:
        return Pending(
            gang.id,
            PendingReason.INSUFFICIENT_GPUS,
            f"needs {need} x {types}; {free} free",
        )
    best = max((state.max_domain_free(n) if nvlink else len(state.empty[n])) for n in nodes)
    where = "in one NVLink domain" if nvlink else "on one node"
    if same_node or replicas == 1:
        message = f"needs {unit} x {types} {where}; the best node has {best} free"
    else:
        slots = sum(
            (state.max_domain_free(n) if nvlink else len(state.empty[n])) // size for n in nodes
        )
        message = (
            f"needs {replicas} replicas of {size} x {types}, each {where}; free GPUs fit "
            f"{slots} such replicas (the best node has {best} free)"
        )
    return Pending(gang.id, PendingReason.TOPOLOGY, message)


def _explain_mig(
    state: ClusterState, gang: Gang, types: list[str], nodes: list[int], repartition: bool
) -> Pending:
    assert gang.mig_profile is not None
    on = set(nodes)
    free_slices = sum(
        1 for t in types for _, n, _, _ in state.free_instances(t, gang.mig_profile) if n in on
    )
    empty = sum(len(state.empty[n]) for n in nodes)
    spare = f"{empty} empty GPUs to repartition" if repartition else "repartitioning is disabled"
    return Pending(
        gang.id,
        PendingReason.INSUFFICIENT_MIG,
        f"needs {gang.replicas_min} x {gang.mig_profile} slices on {_types_text(types)}; "
        f"{free_slices} free slices and {spare}",
    )
