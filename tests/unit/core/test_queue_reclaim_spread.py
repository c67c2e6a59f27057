"""A lender's one-node gang reclaims from a borrower spread over several nodes (preempt.py).

The victim sets tried after the first (the first candidates whatever their node) are one node's
candidates at a time; a borrower with replicas on several nodes must be in each of those sets,
or a node held partly by it is never cleared. Hand-built: four 8-GPU nodes, each with one
2-GPU replica of the spread borrower, three one-GPU borrowers and 3 GPUs of a queue within its
nominal quota (not evictable); the lender's 4-GPU gang needs one node. The first set (eight
one-GPU borrowers, two per node) frees 2 GPUs per node; each node's own one-GPU borrowers free
3; only with the spread borrower's replica does a node reach 4.
"""

from __future__ import annotations

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Policy
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.validate import decision_problems
from tests.unit.core.placement_builders import cluster, gang

A100 = "A100-80GB"
NODES = 4


def snapshot() -> Snapshot:
    nominal = {"lender": 16, "keeper": 16, "ones": 0, "spread": 0}
    tree = QueueTree.build(
        [QueueSpec(q, None, 1.0, {A100: Quota(n)}, 0, None) for q, n in nominal.items()]
    )
    builder = cluster().nodes_of("a", A100, NODES)
    for n in range(NODES):
        builder.run("wide", f"a{n}", (0, 1), queue="spread")
    for k in range(3):  # one-GPU borrowers listed node by node, so the first set spreads
        for n in range(NODES):
            builder.run(f"one-{k}-{n}", f"a{n}", (2 + k,), queue="ones")
    for n in range(NODES):
        builder.run(f"keep-{n}", f"a{n}", (5, 6, 7), queue="keeper")
    return builder.queues(tree).build()


def decide(snap: Snapshot, pending: list[Gang]) -> Decision:
    decision = place(snap, pending, Policy())
    assert decision_problems(snap, pending, decision) == []
    return decision


def test_the_lender_reclaims_a_node_held_partly_by_a_spread_borrower() -> None:
    snap = snapshot()
    lender = gang("l", types=A100, gpus=4, queue="lender")
    decision = decide(snap, [lender])
    assert decision.admitted_ids == {"l"}
    victims = {p.gang_id for p in decision.preemptions}
    assert "wide" in victims and all(p.reclaim for p in decision.preemptions)
    placement = decision.placement("l")
    assert placement is not None
    (node,) = {r.node for r in placement.replicas}
    # Only what that node needed: the spread borrower and that node's one-GPU borrowers.
    assert victims <= {"wide", *(f"one-{k}-{node[1:]}" for k in range(3))}
    assert not any(v.startswith("keep") for v in victims)
