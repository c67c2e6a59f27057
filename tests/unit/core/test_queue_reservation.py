"""Node reservations for aged wide gangs (reservation.py), through `place` with queues.

Aspects: an aged gang that needs a whole node and fits nowhere keeps the node with the most free
GPUs from later gangs (which would otherwise take it); ties go to the node with fewer running
gangs; an aged gang whose replicas may spread keeps the fewest nodes that hold it packed, on
both engines (small gangs behind it took every GPU they freed: held-out 2017-11-22 s0, a
24-GPU gang waited 4.6 h); a reservation never stops a reclaim; young gangs, one-GPU gangs and
MIG gangs get no node; one gang per decision; without queues nothing is reserved.
"""

from __future__ import annotations

import pytest

from gpufleet.core.admission import QueueGate
from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang, Topology
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.reservation import (
    lift_reservations,
    renew_reservations,
    reservable,
    reserve_node,
)
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.core.validate import decision_problems
from tests.unit.core.placement_builders import ClusterBuilder, checked_decision, cluster, gang

H100 = "H100-80GB"
AGED = 7200.0  # past Policy().queue_aging_s (3600 s)


def tree() -> QueueTree:
    """Both queues borrow everything from an idle one (no reclaim: only borrowing tiers)."""
    nominal = {"wide": 0, "small": 0, "idle": 16}
    return QueueTree.build(
        [QueueSpec(q, None, 1.0, {H100: Quota(n)}, 0, None) for q, n in nominal.items()]
    )


def two_nodes(queues: bool = True) -> ClusterBuilder:
    """h0: 3 GPUs used by two gangs (5 free); h1: 4 GPUs used by one gang (4 free)."""
    builder = (
        cluster()
        .node("h0", H100)
        .node("h1", H100)
        .run("x0", "h0", (0, 1), queue="small")
        .run("x1", "h0", (2,), queue="small")
        .run("y0", "h1", (0, 1, 2, 3), queue="small")
    )
    return builder.queues(tree()) if queues else builder


def decide(snapshot: Snapshot, pending: list[Gang]) -> Decision:
    decision = place(snapshot, pending, Policy())
    assert decision_problems(snapshot, pending, decision) == []
    return decision


def test_an_aged_wide_gang_keeps_the_emptiest_node_from_later_gangs() -> None:
    five = gang("s5", gpus=5, queue="small")  # fits only h0 (5 free)
    young = [gang("w", gpus=8, queue="wide", waited_s=10), five]
    assert decide(two_nodes().build(), young).admitted_ids == {"s5"}
    aged = [gang("w", gpus=8, queue="wide", waited_s=AGED), five]
    assert decide(two_nodes().build(), aged).admitted_ids == set()


def test_later_gangs_still_use_the_other_nodes() -> None:
    pending = [gang("w", gpus=8, queue="wide", waited_s=AGED), gang("s4", gpus=4, queue="small")]
    decision = decide(two_nodes().build(), pending)
    assert decision.admitted_ids == {"s4"}
    placement = decision.placement("s4")
    assert placement is not None and {r.node for r in placement.replicas} == {"h1"}


def test_equal_free_gpus_reserve_the_node_with_fewer_gangs() -> None:
    snapshot = (
        cluster()
        .node("h0", H100)
        .node("h1", H100)
        .run("x0", "h0", (0, 1), queue="small")
        .run("x1", "h0", (2, 3), queue="small")  # h0: 4 free, two gangs
        .run("y0", "h1", (0, 1, 2, 3), queue="small")  # h1: 4 free, one gang
        .queues(tree())
        .build()
    )
    pending = [gang("w", gpus=8, queue="wide", waited_s=AGED), gang("s4", gpus=4, queue="small")]
    placement = decide(snapshot, pending).placement("s4")
    # h1 is the reserved one
    assert placement is not None and {r.node for r in placement.replicas} == {"h0"}


def test_one_gang_per_decision_gets_a_node() -> None:
    pending = [
        gang("w1", gpus=8, queue="wide", waited_s=AGED + 100),  # longest waiting: reserves h0
        gang("w2", gpus=8, queue="wide", waited_s=AGED),  # gets no node: h1 stays usable
        gang("s4", gpus=4, queue="small"),
    ]
    placement = decide(two_nodes().build(), pending).placement("s4")
    assert placement is not None and {r.node for r in placement.replicas} == {"h1"}
    pending.append(gang("s5", gpus=5, queue="small"))  # would need h0
    assert "s5" not in decide(two_nodes().build(), pending).admitted_ids


def test_a_reservation_never_stops_a_reclaim() -> None:
    nominal = {"wide": 0, "lender": 8, "keeper": 16, "borrower": 0}
    queues = QueueTree.build(
        [QueueSpec(q, None, 1.0, {H100: Quota(n)}, 0, None) for q, n in nominal.items()]
    )
    snapshot = (
        cluster()
        .node("h0", H100)
        .node("h1", H100)
        .node("h2", H100)
        .run("b0", "h0", (0, 1, 2, 3), queue="borrower")  # borrows 4: h0 has 4 free
        .run("k1", "h1", (0, 1, 2, 3, 4), queue="keeper")  # within nominal: not evictable
        .run("k2", "h2", (0, 1, 2, 3, 4, 5), queue="keeper")
        .queues(queues)
        .build()
    )
    # l (6 GPUs, within lender's nominal) fits nowhere; the aged w (9 GPUs of unused nominal
    # to borrow from) then reserves h0; l's reclaim of b0 needs h0's other 4 GPUs too.
    pending = [gang("l", gpus=6, queue="lender"), gang("w", gpus=8, queue="wide", waited_s=AGED)]
    decision = decide(snapshot, pending)
    assert decision.admitted_ids == {"l"}
    assert [(p.gang_id, p.reclaim) for p in decision.preemptions] == [("b0", True)]


def test_without_queues_nothing_is_reserved() -> None:
    pending = [gang("w", gpus=8, waited_s=AGED), gang("s5", gpus=5)]
    assert decide(two_nodes(queues=False).build(), pending).admitted_ids == {"s5"}


def test_which_gangs_may_be_given_a_node() -> None:
    aging = 3600.0
    assert reservable(gang("w", gpus=8, waited_s=aging), aging)
    assert not reservable(gang("w", gpus=8, waited_s=aging - 1), aging)  # not aged yet
    assert not reservable(gang("one", gpus=1, waited_s=aging), aging)  # any free GPU fits it
    assert not reservable(gang("mig", mig="1g.10gb", waited_s=aging), aging)
    spread = gang("spread", gpus=2, replicas=4, waited_s=aging)  # gets nodes: its fewest
    assert reservable(spread, aging)
    assert not reservable(gang("ones", replicas=4, waited_s=aging - 1), aging)
    together = gang("together", gpus=2, replicas=4, topology=Topology.SAME_NODE, waited_s=aging)
    assert reservable(together, aging)


def test_a_second_reservation_of_a_node_with_nothing_left_lifts_and_renews() -> None:
    """Two reservations in one decision (MAX_RESERVED > 1): the second one finds the node's
    free GPUs already kept, so it keeps none; lifting and renewing must take that."""
    owed = QueueTree.build([QueueSpec("wide", None, 1.0, {H100: Quota(8)}, 0, None)])
    snapshot = cluster().node("h0", H100).run("x0", "h0", (0, 1, 2, 3)).queues(owed).build()
    state = ClusterState(snapshot)
    state.gate = QueueGate(snapshot, Policy().queue_aging_s)
    for name in ("w1", "w2"):
        assert reserve_node(state, gang(name, gpus=4, queue="wide", waited_s=AGED), [H100]) == 0
    assert state.gate.reserved == [(0, (4, 5, 6, 7)), (0, ())]
    lifted = lift_reservations(state)  # raised "a replica needs at least one GPU" before
    assert state.gate.reserved == [] and state.whole_mode_gpus(0) == [4, 5, 6, 7]
    renew_reservations(state, lifted)
    assert state.gate.reserved == [(0, (4, 5, 6, 7))] and state.whole_mode_gpus(0) == []


def t4_fleet(quota: Quota | None = None) -> Snapshot:
    """Four 4-GPU T4 nodes, 6 GPUs free: t0 2, t1 3, t3 1; t2 full. Everything in one queue,
    whose quota holds by default what runs and the wide gang."""
    t4 = "T4"
    builder = cluster().nodes_of("t", t4, 4, count=4)
    builder.run("a", "t0", (0, 1), queue="q").run("b", "t1", (0,), queue="q")
    builder.run("c", "t2", (0, 1, 2, 3), queue="q").run("d", "t3", (0, 1, 2), queue="q")
    queues = QueueTree.build([QueueSpec("q", quotas={t4: quota or Quota(18)})])
    return builder.queues(queues).build()


@pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT])
def test_an_aged_spreadable_gang_keeps_its_fewest_nodes_from_the_gangs_behind(
    engine: Engine,
) -> None:
    # The wide gang (8 one-GPU replicas: 2 nodes packed) fits nowhere; the one-GPU gangs behind
    # it would take all 6 free GPUs, and the next ones every GPU a finishing gang frees. Aged,
    # it keeps t1 and t0 (the 2 nodes with the most free GPUs): only t3's GPU is left to them.
    smalls = [gang(f"s{i}", "T4", queue="q") for i in range(6)]
    young = [gang("wide", "T4", replicas=8, queue="q", waited_s=600.0), *smalls]
    assert len(checked_decision(t4_fleet(), young, engine).placements) == 6
    aged = [gang("wide", "T4", replicas=8, queue="q", waited_s=AGED), *smalls]
    decision = checked_decision(t4_fleet(), aged, engine)
    assert {r.node for p in decision.placements for r in p.replicas} == {"t3"}
    assert len(decision.placements) == 1 and not decision.moves


def test_no_nodes_are_kept_for_a_spreadable_gang_its_queue_would_not_admit() -> None:
    # The queue may use 16 T4s at most (10 run): the wide gang waits for quota, not for room,
    # and keeping nodes idle for it would help nobody.
    smalls = [gang(f"s{i}", "T4", queue="q") for i in range(6)]
    aged = [gang("wide", "T4", replicas=8, queue="q", waited_s=AGED), *smalls]
    snapshot = t4_fleet(Quota(8, borrowing_limit=8))
    assert len(checked_decision(snapshot, aged, Engine.GREEDY).placements) == 6
