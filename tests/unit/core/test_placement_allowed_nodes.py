"""Gangs restricted to some nodes (`Gang.allowed_nodes`, from the adapter's node filters).

Aspects under test, with both engines:
- whole-GPU, same-node and MIG gangs land only on allowed nodes, also when the allowed node is
  the worse fit or needs a repartition;
- an unrestricted gang is still placed beside a restricted one (CP-SAT keeps the restricted
  gang's greedy placement while it solves for the rest);
- preemption evicts only victims on allowed nodes;
- a gang whose allowed nodes hold none of its types is pending with `NoEligibleNode`; one
  whose allowed nodes are too small or full is judged on those nodes only;
- the validator flags a placement outside the allowed nodes.
"""

from __future__ import annotations

import pytest
from placement_builders import cluster, gang, layout

from gpufleet.core.decision import Decision, GangPlacement, PendingReason
from gpufleet.core.demand import Gang, Topology
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.snapshot import ReplicaPlacement, Snapshot
from gpufleet.core.validate import decision_problems

ENGINES = [pytest.param(Engine.GREEDY, id="greedy"), pytest.param(Engine.CPSAT, id="cpsat")]


def decide(snapshot: Snapshot, pending: list[Gang], engine: Engine) -> Decision:
    decision = place(snapshot, pending, Policy(solver=SolverSettings(engine=engine)))
    assert decision_problems(snapshot, pending, decision) == []
    return decision


def nodes_of(decision: Decision, gang_id: str) -> set[str]:
    [placement] = [p for p in decision.placements if p.gang_id == gang_id]
    return {r.node for r in placement.replicas}


@pytest.mark.parametrize("engine", ENGINES)
def test_whole_gpu_gang_uses_only_allowed_nodes(engine: Engine) -> None:
    # h0 is the best fit (3 free GPUs for 2 replicas of 1), but only h2 is allowed.
    snap = cluster().nodes_of("h", "H100-80GB", 3).run("busy", "h0", (0, 1, 2, 3, 4)).build()
    pending = [gang("pinned", gpus=1, replicas=2, allowed={"h2"}), gang("free", gpus=2)]
    decision = decide(snap, pending, engine)
    assert nodes_of(decision, "pinned") == {"h2"}
    assert nodes_of(decision, "free") <= {"h0", "h1", "h2"}  # placed alongside


@pytest.mark.parametrize("engine", ENGINES)
def test_same_node_gang_goes_to_an_allowed_node(engine: Engine) -> None:
    snap = cluster().nodes_of("h", "H100-80GB", 3).build()
    pending = [gang("g", gpus=2, replicas=2, topology=Topology.SAME_NODE, allowed={"h1"})]
    assert nodes_of(decide(snap, pending, engine), "g") == {"h1"}


@pytest.mark.parametrize("engine", ENGINES)
def test_mig_gang_uses_slices_and_repartitions_only_on_allowed_nodes(engine: Engine) -> None:
    # a0 has free 3g.40gb slices, but only a1 (whole GPUs) is allowed: it is repartitioned.
    sliced = {0: layout("3g.40gb@0", "3g.40gb@4")}
    snap = cluster().node("a0", "A100-80GB", 8, sliced).node("a1", "A100-80GB", 8).build()
    pending = [gang("m", "A100-80GB", mig="3g.40gb", replicas=2, allowed={"a1"})]
    decision = decide(snap, pending, engine)
    assert nodes_of(decision, "m") == {"a1"}
    assert {r.node for r in decision.repartitions} == {"a1"}


@pytest.mark.parametrize("engine", ENGINES)
def test_preemption_evicts_only_victims_on_allowed_nodes(engine: Engine) -> None:
    snap = (
        cluster()
        .nodes_of("h", "H100-80GB", 2)
        .run("low0", "h0", tuple(range(8)), priority=0)
        .run("low1", "h1", tuple(range(8)), priority=1)
        .build()
    )
    # low0 is the cheaper victim, but the urgent gang may only use h1.
    pending = [gang("urgent", gpus=8, priority=5, allowed={"h1"})]
    decision = decide(snap, pending, engine)
    assert [p.gang_id for p in decision.preemptions] == ["low1"]
    assert nodes_of(decision, "urgent") == {"h1"}


@pytest.mark.parametrize("engine", ENGINES)
def test_no_allowed_node_of_an_acceptable_type_is_no_eligible_node(engine: Engine) -> None:
    snap = cluster().nodes_of("h", "H100-80GB", 2).node("a0", "A100-80GB").build()
    pending = [gang("g", "H100-80GB", allowed={"a0"}), gang("none", "H100-80GB", allowed=set())]
    decision = decide(snap, pending, engine)
    reasons = {p.gang_id: p for p in decision.pending}
    assert reasons["g"].reason is PendingReason.NO_ELIGIBLE_NODE
    assert reasons["g"].message == "no node with H100-80GB GPUs passes the job's node filters"
    assert reasons["none"].reason is PendingReason.NO_ELIGIBLE_NODE


@pytest.mark.parametrize("engine", ENGINES)
def test_reasons_are_judged_on_the_allowed_nodes_only(engine: Engine) -> None:
    snap = cluster().node("l0", "L4", 4).node("l1", "L4", 8).run("busy", "l0", (0, 1)).build()
    too_big = gang("big", "L4", gpus=6, allowed={"l0"})
    full = gang("full", "L4", gpus=1, replicas=3, allowed={"l0"})
    decision = decide(snap, [too_big, full], engine)
    reasons = {p.gang_id: p for p in decision.pending}
    assert reasons["big"].reason is PendingReason.REPLICA_TOO_LARGE
    assert "the largest node has 4 GPUs" in reasons["big"].message
    assert reasons["full"].reason is PendingReason.INSUFFICIENT_GPUS
    assert reasons["full"].message == "needs 3 x L4; 2 free"


def test_validator_flags_a_placement_outside_the_allowed_nodes() -> None:
    snap = cluster().nodes_of("h", "H100-80GB", 2).build()
    pinned = gang("g", allowed={"h1"})
    outside = GangPlacement("g", "H100-80GB", (ReplicaPlacement("h0", (0,)),))
    problems = decision_problems(snap, [pinned], Decision(placements=(outside,)))
    assert problems == ["g placed on h0, which its node filters exclude"]
