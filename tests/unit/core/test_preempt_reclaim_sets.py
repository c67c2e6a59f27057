"""A gang within its nominal quota reclaims even when its own queue's lower-ranked gangs are
eviction candidates too (preempt.py's victim sets).

Aspects: (1) a victim set refused on value (an eviction inside the gang's queue, of a lower
priority or of the same priority past the service tier, worth less than what it loses) is
taken back and the next set is tried, so the node a reclaim clears is reached; (2) with queues
the reclaim-only sets come first, so the per-node sets, bounded by `MAX_NODES_PER_GANG`, are
not all spent on the own queue's nodes (case (1) alone, with one own node, does not need this;
with four it does); (3) an eviction inside the queue that is worth it still happens;
(4) property: on random full one-type fleets with queues every victim an accepted eviction
takes is needed (with any one of them kept, the gang does not fit), and a gang never evicts its
own queue's gangs of equal or higher rank (priority, then service tier).

Hand-built fleet: `own` 8-GPU A100 nodes, each full with one priority-0 gang of queue `mine`;
four nodes each holding three one-GPU borrowers of queue `lent` (nominal 0) and five GPUs of
queue `keeper` (within its nominal, not evictable). The pending gang of `mine` (3 GPUs on one
node) is within `mine`'s nominal. Evicting an 8-GPU gang of `mine` for it is refused on value
(priority 1 against 0: 6 units of weighted work against 8; or the same priority against a
served gang, worth half: 3 against 4); the three borrowers of one node are a reclaim. The first
set (the eight first borrowers, ids interleaving the nodes) frees two GPUs per node and fails;
the per-node sets rank the own queue's full nodes first.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.core.admission import QueueGate
from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.greedy import Memo
from gpufleet.core.place import place
from gpufleet.core.policy import SERVICE_TIER_GPU_S, Engine, Policy, SolverSettings
from gpufleet.core.preempt import MAX_NODES_PER_GANG, preempt_for_pending, release_gang, try_plan
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.core.validate import decision_problems
from tests.unit.core.placement_builders import cluster, gang
from tests.unit.core.test_placement_properties import FAST
from tests.unit.core.test_queue_properties import busy_nodes

A100 = "A100-80GB"
LENT_NODES = 4


def snapshot(own: int, served: bool = False) -> Snapshot:
    """`served`: the own queue's gangs are of the pending gang's priority but past the service
    tier's threshold (the lower rank inside the queue) instead of a lower priority."""
    tree = QueueTree.build(
        [
            QueueSpec("mine", quotas={A100: Quota(8 * own + 8)}),
            QueueSpec("keeper", quotas={A100: Quota(5 * LENT_NODES)}),
            QueueSpec("lent", quotas={A100: Quota(0)}),
        ]
    )
    builder = cluster().nodes_of("a", A100, own).nodes_of("b", A100, LENT_NODES)
    for n in range(own):
        builder.run(f"low-{n}", f"a{n}", tuple(range(8)), priority=0, queue="mine")
    for n in range(LENT_NODES):
        for k in range(3):
            builder.run(f"lent-{k}-{n}", f"b{n}", (k,), queue="lent")
        builder.run(f"keep-{n}", f"b{n}", (3, 4, 5, 6, 7), queue="keeper")
    snap = builder.queues(tree).build()
    if not served:
        return snap
    past = 10 * SERVICE_TIER_GPU_S
    running = tuple(
        replace(r, attained_gpu_s=past) if r.id.startswith("low") else r for r in snap.running
    )
    return replace(snap, running=running)


def with_gate(snap: Snapshot, policy: Policy) -> ClusterState:
    """The working state place() starts from, with the snapshot's queue accounting."""
    state = ClusterState(snap)
    state.gate = QueueGate(snap, policy.queue_aging_s)
    return state


def decide(snap: Snapshot, pending: list[Gang], engine: Engine) -> Decision:
    decision = place(snap, pending, Policy(solver=SolverSettings(engine=engine)))
    assert decision_problems(snap, pending, decision) == []
    return decision


@pytest.mark.parametrize(
    "own",
    [
        pytest.param(1, id="one-own-node-refused-on-value"),
        pytest.param(MAX_NODES_PER_GANG, id="own-nodes-fill-the-per-node-bound"),
    ],
)
@pytest.mark.parametrize(
    "served", [pytest.param(False, id="lower-priority"), pytest.param(True, id="served-tier")]
)
@pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT])
def test_a_gang_within_nominal_reclaims_past_its_own_queues_lower_ranked_gangs(
    own: int, served: bool, engine: Engine
) -> None:
    # Served: 3 fresh GPUs at priority 0 against 8 served ones (worth half) plus disruption.
    snap = snapshot(own, served)
    urgent = gang("urgent", types=A100, gpus=3, priority=0 if served else 1, queue="mine")
    decision = decide(snap, [urgent], engine)
    assert decision.admitted_ids == {"urgent"}
    placement = decision.placement("urgent")
    assert placement is not None
    (node,) = {r.node for r in placement.replicas}
    assert node.startswith("b")
    # Exactly that node's three borrowers, all reclaims; the own queue's gangs stay.
    assert {(p.gang_id, p.reclaim) for p in decision.preemptions} == {
        (f"lent-{k}-{node[1:]}", True) for k in range(3)
    }


def test_an_eviction_worth_it_inside_the_queue_still_happens() -> None:
    # Control: without borrowers the own queue's priority-0 gang is evicted when the gang is
    # worth more (8 GPUs at priority 1 against 8 at priority 0): the reclaim-first order
    # does not stop within-queue priority preemption.
    tree = QueueTree.build([QueueSpec("mine", quotas={A100: Quota(16)})])
    snap = (
        cluster()
        .node("a0", A100)
        .run("low-0", "a0", tuple(range(8)), priority=0, queue="mine")
        .queues(tree)
        .build()
    )
    urgent = gang("urgent", types=A100, gpus=8, priority=1, queue="mine")
    decision = decide(snap, [urgent], Engine.GREEDY)
    assert decision.admitted_ids == {"urgent"}
    assert [(p.gang_id, p.reclaim) for p in decision.preemptions] == [("low-0", False)]


@st.composite
def full_fleets(draw: st.DrawFn) -> tuple[Snapshot, Gang]:
    """One type, every GPU busy with small gangs of random queues and priorities; one wide
    stuck gang, so that room for it takes several victims."""
    names = ("q0", "q1", "q2")
    tree = QueueTree.build(
        [QueueSpec(q, quotas={A100: Quota(draw(st.integers(0, 16)))}) for q in names]
    )
    snap = busy_nodes(draw, A100, (1, 1, 2, 4), list(names)).queues(tree).build()
    # Some running gangs past the service tier's threshold: the lower rank inside a queue.
    served = draw(st.sets(st.sampled_from([r.id for r in snap.running])))
    running = tuple(
        replace(r, attained_gpu_s=2 * SERVICE_TIER_GPU_S) if r.id in served else r
        for r in snap.running
    )
    stuck = gang(
        "stuck",
        A100,
        gpus=draw(st.sampled_from((2, 4, 8))),
        priority=draw(st.integers(0, 3)),
        queue=draw(st.sampled_from(names)),
    )
    return replace(snap, running=running), stuck


@FAST
@given(case=full_fleets())
def test_every_victim_is_needed_and_no_equal_rank_gang_of_the_queue_is_taken(
    case: tuple[Snapshot, Gang],
) -> None:
    snap, stuck = case
    policy = Policy(solver=SolverSettings(engine=Engine.GREEDY))
    state = with_gate(snap, policy)
    assert state.gate is not None
    if state.gate.refusal(stuck) is not None:
        return  # over its queue's quota: place() never lets it look for victims
    placed, preemptions = preempt_for_pending(state, [stuck], policy, Memo(), 1)
    running = {r.id: r for r in snap.running}
    victims = [running[p.gang_id] for p in preemptions]
    for victim in victims:
        if victim.queue == stuck.queue:
            assert state.gate.rank(victim) < state.gate.rank(stuck)
    if not placed:
        assert victims == []
        return
    for kept in victims:
        fresh = with_gate(snap, policy)
        for other in victims:
            if other is not kept:
                release_gang(fresh, other)
        assert try_plan(fresh, stuck, policy, Memo()) is None, kept.id
