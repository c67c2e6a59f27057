"""Independent checks that a decision obeys every hard rule (used by tests and the simulator).

It replays the snapshot, preemptions, repartitions and placements on its own simple GPU ledger,
without the engine's data structures, and returns every violation it finds as a sentence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from gpufleet.core.borrowing import growth_job
from gpufleet.core.decision import Decision, GangPlacement
from gpufleet.core.demand import Gang, Topology
from gpufleet.core.policy import SERVICE_TIER_GPU_S
from gpufleet.core.snapshot import RunningGang, Snapshot
from gpufleet.core.validate_quota import quota_problems
from gpufleet.model.mig import MigLayout, layout_problem


def decision_problems(
    snapshot: Snapshot,
    pending: Sequence[Gang],
    decision: Decision,
    tier_gpu_s: float | None = SERVICE_TIER_GPU_S,
    tier_rerun_s: float | None = None,
) -> list[str]:
    """What is wrong with `decision` for `pending` on `snapshot` (empty: nothing). `tier_gpu_s`
    is the service tier's threshold the decision was made with (`Policy.service_tier_gpu_s`)
    and `tier_rerun_s` its limit on re-evictions (`Policy.service_tier_rerun_s`)."""
    problems: list[str] = []
    gangs = {g.id: g for g in pending}
    running = {r.id: r for r in snapshot.running}
    placed_ids = [p.gang_id for p in decision.placements]
    pending_ids = [p.gang_id for p in decision.pending]
    # Every pending gang is either placed or explained, exactly once.
    if sorted(placed_ids + pending_ids) != sorted(gangs):
        problems.append("placed + pending gangs differ from the pending input")
    # Preemption: whole running gangs, preemptible, disruptable, strictly lower priority than an
    # admitted gang.
    evicted: set[str] = set()
    for pre in decision.preemptions:
        victim = running.get(pre.gang_id)
        winner = gangs.get(pre.for_gang)
        if victim is None or winner is None:
            problems.append(f"preemption {pre} names an unknown gang")
            continue
        if not victim.preemptible:
            problems.append(f"{victim.id} is not preemptible")
        if not victim.disruptable:
            problems.append(f"{victim.id} is preempted though a disruption budget protects it")
        # With queues, quota_problems judges preemptions (a reclaim ignores priorities). An
        # elastic job's growth unit may also go for a gang of its own priority (rebalance.py).
        shrink = growth_job(victim) is not None and victim.priority <= winner.priority
        if snapshot.queues is None and victim.priority >= winner.priority and not shrink:
            problems.append(
                f"{victim.id} (priority {victim.priority}) preempted for "
                f"{winner.id} (priority {winner.priority})"
            )
        if pre.for_gang not in placed_ids:
            problems.append(f"{victim.id} preempted for {winner.id}, which was not placed")
        evicted.add(victim.id)

    # Moves: whole running gangs, not also evicted, to another type; their GPUs are freed.
    moved: set[str] = set()
    for move in decision.moves:
        mover = running.get(move.gang_id)
        if mover is None:
            problems.append(f"move of {move.gang_id}, which is not running")
            continue
        if mover.id in evicted or mover.id in moved:
            problems.append(f"{mover.id} is moved and evicted, or moved twice")
        if mover.demand is None or mover.progress is None:
            problems.append(f"{mover.id} moved without its demand and progress")
        same = move.placement.gpu_type == mover.gpu_type
        if move.for_gang is not None:
            # An evacuation (evacuation.py): for a pending gang, to another placement; for a
            # gang placed in this decision (a reclaim with moves) only to the same type.
            if move.for_gang not in gangs:
                problems.append(f"{mover.id} moved for {move.for_gang}, which is not pending")
            elif move.for_gang in placed_ids and not same:
                problems.append(f"{mover.id} moved off its type for placed {move.for_gang}")
            if move.from_type != mover.gpu_type or move.placement.replicas == mover.replicas:
                problems.append(f"{mover.id} evacuated to where it runs")
        elif move.for_reserve is not None:
            # A refill (refill.py): off the type whose reserve it refills, to another type.
            if move.for_reserve != mover.gpu_type or same:
                problems.append(f"{mover.id} refilled the {move.for_reserve} reserve staying on it")
        elif move.from_type != mover.gpu_type or (
            same and move.placement.replica_count <= len(mover.replicas)
        ):
            problems.append(f"{mover.id} moved to neither another type nor more replicas")
        moved.add(mover.id)
    layouts: dict[tuple[str, int], MigLayout | None] = {
        (n.name, g.index): g.mig_layout for n in snapshot.nodes for g in n.gpus
    }
    # A moved elastic job's growth units move with it (moves.py).
    moved |= {r.id for r in snapshot.running if growth_job(r) in moved}
    # No move stops a gang a disruption budget protects now.
    problems.extend(
        f"{gid} is moved though a disruption budget protects it"
        for gid in sorted(moved)
        if gid in running and not running[gid].disruptable
    )
    whole, slices = snapshot.occupied(evicted | moved)
    used_gpus = whole | {(n, g) for n, g, _ in slices}
    # MIG layouts change only on empty GPUs and only to valid layouts.
    for rep in decision.repartitions:
        key = (rep.node, rep.gpu)
        if key not in layouts:
            problems.append(f"repartition of unknown GPU {key}")
            continue
        if key in used_gpus:
            problems.append(f"repartition of GPU {key} that is in use")
        if rep.old_layout != layouts[key]:
            problems.append(f"repartition of GPU {key} states the wrong old layout")
        if rep.new_layout is not None:
            gpu_type = snapshot.catalog[snapshot.node(rep.node).gpu_type]
            why = layout_problem(gpu_type, rep.new_layout)
            if why is not None:
                problems.append(f"invalid layout for GPU {key}: {why}")
        layouts[key] = rep.new_layout

    targets: list[tuple[Gang, GangPlacement]] = []
    for placement in decision.placements:
        gang = gangs.get(placement.gang_id)
        if gang is None:
            problems.append(f"placement for unknown gang {placement.gang_id}")
            continue
        targets.append((gang, placement))
    for move in decision.moves:
        demand = running[move.gang_id].demand if move.gang_id in running else None
        if demand is not None:
            count = len(running[move.gang_id].replicas)
            fixed = replace(demand, replicas_min=count)  # up to replicas_max when elastic
            targets.append((fixed, move.placement))
    for gang, placement in targets:
        problems.extend(_placement_problems(snapshot, gang, placement.gpu_type, placement))
        for r in placement.replicas:
            for g in r.gpus:
                key = (r.node, g)
                if key not in layouts:
                    continue
                if r.mig is None:
                    # A whole GPU: not shared, not cut into MIG slices.
                    if key in used_gpus:
                        problems.append(f"GPU {key} oversubscribed by {gang.id}")
                    if layouts[key] is not None:
                        problems.append(f"GPU {key} is in MIG mode but given whole to {gang.id}")
                    whole.add(key)
                    used_gpus.add(key)
                else:
                    layout = layouts[key]
                    if key in whole:
                        problems.append(f"GPU {key} is used whole; {gang.id} wants a slice")
                    if layout is None or r.mig not in layout:
                        problems.append(f"GPU {key} has no instance {r.mig} for {gang.id}")
                    if (r.node, g, r.mig) in slices:
                        problems.append(f"slice {r.mig} on {key} oversubscribed by {gang.id}")
                    slices.add((r.node, g, r.mig))
                    used_gpus.add(key)
    problems.extend(_wait_problems(running, decision))
    problems.extend(quota_problems(snapshot, pending, decision, tier_gpu_s, tier_rerun_s))
    return problems


def _wait_problems(running: Mapping[str, RunningGang], decision: Decision) -> list[str]:
    """A placement on GPUs of a gang evicted for another gang waits for it (`waits_for`), and
    waits only for gangs evicted for another gang that free its GPUs or ran on its GPU type
    (whose queue quota it may use: preempt.py `quota_waits`): otherwise its pods would be
    bound onto GPUs still busy, or held for a gang that gives it neither GPUs nor quota."""
    for_gang = {p.gang_id: p.for_gang for p in decision.preemptions}
    out: list[str] = []
    for placement in decision.placements:
        spots = {(r.node, g) for r in placement.replicas for g in r.gpus}
        others = {
            gid
            for gid, winner in for_gang.items()
            if winner != placement.gang_id and gid in running
        }
        takes = {
            gid
            for gid in others
            if any((r.node, g) in spots for r in running[gid].replicas for g in r.gpus)
        }
        quota = {gid for gid in others if running[gid].gpu_type == placement.gpu_type}
        out.extend(
            f"{placement.gang_id} takes GPUs of {gid}, evicted for {for_gang[gid]}, "
            "without waiting for it"
            for gid in sorted(takes - set(placement.waits_for))
        )
        out.extend(
            f"{placement.gang_id} waits for {gid}, which frees none of its GPUs and none of "
            "its type's quota for it"
            for gid in sorted(set(placement.waits_for) - takes - quota)
        )
    return out


def _placement_problems(
    snapshot: Snapshot, gang: Gang, gpu_type: str, placement: GangPlacement
) -> list[str]:
    out: list[str] = []
    if gpu_type not in gang.type_names():
        out.append(f"{gang.id} placed on unacceptable type {gpu_type}")
    count = placement.replica_count
    if not gang.replicas_min <= count <= gang.replicas_max:
        out.append(
            f"{gang.id} got {count} replicas, allowed {gang.replicas_min}..{gang.replicas_max}"
        )
    nodes: set[str] = set()
    for r in placement.replicas:
        if not snapshot.has_node(r.node):
            out.append(f"{gang.id} placed on unknown node {r.node}")
            continue
        node = snapshot.node(r.node)
        nodes.add(r.node)
        if node.gpu_type != gpu_type:
            out.append(f"{gang.id} replica on {r.node} ({node.gpu_type}), not {gpu_type}")
        if not node.schedulable:
            out.append(f"{gang.id} placed on unschedulable node {r.node}")
        if gang.allowed_nodes is not None and r.node not in gang.allowed_nodes:
            out.append(f"{gang.id} placed on {r.node}, which its node filters exclude")
        if any(not 0 <= g < node.gpu_count for g in r.gpus) or len(set(r.gpus)) != len(r.gpus):
            out.append(f"{gang.id} replica on {r.node} has bad GPU indices {r.gpus}")
            continue
        if gang.mig_profile is None:
            if r.mig is not None or len(r.gpus) != gang.gpus_per_replica:
                out.append(f"{gang.id} replica on {r.node} is not {gang.gpus_per_replica} GPUs")
            if gang.topology is Topology.NVLINK:
                domains = {node.gpus[g].nvlink_domain for g in r.gpus}
                if len(domains) != 1:
                    out.append(f"{gang.id} replica on {r.node} spans NVLink domains {domains}")
        elif r.mig is None or r.mig.profile != gang.mig_profile:
            out.append(f"{gang.id} replica on {r.node} is not a {gang.mig_profile} slice")
    if gang.topology is Topology.SAME_NODE and len(nodes) > 1:
        out.append(f"{gang.id} wants one node but spans {sorted(nodes)}")
    return out
