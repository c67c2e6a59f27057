"""Which victims a placement on queue quota given back waits for (preempt.py `quota_waits`),
and the validator's rule that no placement starts while the victims whose quota it needs run.

Before, a gang that fitted only on quota this decision's victims give back waited for every
victim on its GPU type, though one of them gave back enough; a preemptor was never checked, so
one that used the quota another gang's victim gives back started as soon as its own victims
had gone, its queue over its limit meanwhile; and the validator accepted a placement bound at
once on given-back quota (only a property test checked that it waited).

Then, a preemptor in a queue (or a cluster) over its limit before the decision, which its start
leaves no worse, still waited for other gangs' victims until the account was under the limit;
and a gang waiting for a victim's GPUs was charged as if bound at once, so a gang on free GPUs
found the account full and waited for victims too. And the validator checked a start with
each placement's awaited victims gone alone, not with several placements' (victims exit in any
order). And a non-preemptible gang was held to the strict check: within its nominal quota, on a
cluster over its capacity before the decision, it waited for other gangs' victims though its
start left nothing worse (it still waits where it would borrow what a reclaim could want back).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpufleet.core.admission import QueueGate
from gpufleet.core.decision import Decision, GangPlacement, Preemption
from gpufleet.core.demand import Gang
from gpufleet.core.policy import Engine
from gpufleet.core.preempt import quota_waits
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.snapshot import ReplicaPlacement, Snapshot
from gpufleet.core.validate import decision_problems
from tests.unit.core.placement_builders import (
    checked_decision,
    cluster,
    gang,
    queue_b_at_its_ceiling,
)


def two_reclaims_case(*extra: Gang) -> tuple[Snapshot, list[Gang]]:
    """Three 8-GPU L4 nodes. Queues a and c (nominal 8 each) lend nothing; b and x have no
    nominal quota. x borrows the 8 GPUs no queue is promised: v (n0's 0-3) and w (n1's 0-3);
    a's and c's gangs, not preemptible, hold n0's and n1's 4-7; n2 is idle. The cluster's
    account is full (a's 8 kept + c's 8 + x's 8 = 24). a's pa (4 GPUs, on n0) reclaims v and
    c's pc (4 GPUs, on n1) reclaims w; either eviction gives back 4 of the account, and b's
    gangs on n2 fit it with that (`extra`: b's gangs; by default one of 1 GPU)."""
    tree = QueueTree.build(
        [
            QueueSpec("a", quotas={"L4": Quota(8, lending_limit=0)}),
            QueueSpec("b", quotas={"L4": Quota(0)}),
            QueueSpec("c", quotas={"L4": Quota(8, lending_limit=0)}),
            QueueSpec("x", quotas={"L4": Quota(0)}),
        ]
    )
    snapshot = (
        cluster()
        .node("n0", "L4", 8)
        .node("n1", "L4", 8)
        .node("n2", "L4", 8)
        .run("v", "n0", (0, 1, 2, 3), queue="x")
        .run("ra", "n0", (4, 5, 6, 7), preemptible=False, queue="a")
        .run("w", "n1", (0, 1, 2, 3), queue="x")
        .run("rc", "n1", (4, 5, 6, 7), preemptible=False, queue="c")
        .queues(tree)
        .build()
    )
    pending = [
        gang("pa", "L4", gpus=4, queue="a", allowed={"n0"}),
        gang("pc", "L4", gpus=4, queue="c", allowed={"n1"}),
        *(extra or (gang("pb", "L4", gpus=1, queue="b"),)),
    ]
    return snapshot, pending


RECLAIMS = (Preemption("v", "pa", reclaim=True), Preemption("w", "pc", reclaim=True))
PA = GangPlacement("pa", "L4", (ReplicaPlacement("n0", (0, 1, 2, 3)),))
PC = GangPlacement("pc", "L4", (ReplicaPlacement("n1", (0, 1, 2, 3)),))


@pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT])
def test_a_gang_waits_only_for_the_victims_whose_quota_it_needs(engine: Engine) -> None:
    snapshot, pending = two_reclaims_case()
    decision = checked_decision(snapshot, pending, engine)
    assert decision.preemptions == RECLAIMS
    # v alone gives back room for pb's 1 GPU (25 -> 21 of 24): pb waits for v, not also for
    # w as before (every victim on its type).
    pb = decision.placement("pb")
    assert pb is not None and pb.gpu_type == "L4" and pb.waits_for == ("v",)
    assert decision.placement("pa") == PA  # a preemptor waits for its own victims only
    assert decision.placement("pc") == PC


@pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT])
def test_two_gangs_on_given_back_quota_wait_for_one_victim_each(engine: Engine) -> None:
    # Two 4-GPU gangs of b: each needs one victim's quota and both need both. pb1 waits for v;
    # pb2, which would not fit with pb1 also started on v's quota, waits for w (whichever of
    # them goes first, the account holds: 8 + 8 + 4 + 4 = 24). Before, both waited for both.
    snapshot, pending = two_reclaims_case(
        gang("pb1", "L4", gpus=4, queue="b"), gang("pb2", "L4", gpus=4, queue="b")
    )
    decision = checked_decision(snapshot, pending, engine)
    assert decision.preemptions == RECLAIMS
    waits = {p.gang_id: p.waits_for for p in decision.placements}
    assert waits == {"pa": (), "pc": (), "pb1": ("v",), "pb2": ("w",)}


def test_the_validator_wants_a_gang_on_given_back_quota_to_wait() -> None:
    snapshot, pending = two_reclaims_case()
    pb = GangPlacement("pb", "L4", (ReplicaPlacement("n2", (0,)),))
    waiting = Decision(placements=(PA, replace(pb, waits_for=("v",)), PC), preemptions=RECLAIMS)
    assert decision_problems(snapshot, pending, waiting) == []
    # Bound at once, pb would put the account at 25 of 24 while v and w run in their grace
    # period. Before, the validator accepted it.
    rushed = Decision(placements=(PA, pb, PC), preemptions=RECLAIMS)
    assert decision_problems(snapshot, pending, rushed) == [
        "pb bound at once, while the victims still run: cluster over its L4 capacity: 25 > 24 "
        "(a gang waits for the victims whose GPUs or queue quota it takes: waits_for)"
    ]


def test_the_validator_wants_gangs_sharing_a_victims_quota_to_wait_for_more() -> None:
    # pb1 and pb2 both on v's quota: once v has gone they start with pa, 28 of 24.
    snapshot, pending = two_reclaims_case(
        gang("pb1", "L4", gpus=4, queue="b"), gang("pb2", "L4", gpus=4, queue="b")
    )
    pb1 = GangPlacement("pb1", "L4", (ReplicaPlacement("n2", (0, 1, 2, 3)),), waits_for=("v",))
    pb2 = GangPlacement("pb2", "L4", (ReplicaPlacement("n2", (4, 5, 6, 7)),))
    shared = Decision(
        placements=(PA, pb1, replace(pb2, waits_for=("v",)), PC), preemptions=RECLAIMS
    )
    assert decision_problems(snapshot, pending, shared) == [
        "pa, pb1, pb2 bound once v has gone, while other victims still run: cluster over its "
        "L4 capacity: 28 > 24 (a gang waits for the victims whose GPUs or queue quota it "
        "takes: waits_for)"
    ]
    apart = Decision(placements=(PA, pb1, replace(pb2, waits_for=("w",)), PC), preemptions=RECLAIMS)
    assert decision_problems(snapshot, pending, apart) == []


def preemptor_case() -> tuple[Snapshot, list[Gang]]:
    """Queue b (nominal 3, borrowing limit 2) holds its ceiling of 5: r0 (n0's 0-3) and r1
    (n1's 0), both priority 0; a's gangs, not preemptible, fill the rest but n1's GPU 7. b's
    priority-4 p1 (3 GPUs, on n0) evicts r0, which gives back one GPU of b's quota more than
    p1 takes; b's priority-3 p2 (2 GPUs, on n1) then evicts r1 for its GPU and fits b's
    ceiling with that GPU of r0's too (5 - 4 - 1 + 3 + 2 = 5)."""
    snapshot = queue_b_at_its_ceiling()
    pending = [
        gang("p1", "L4", gpus=3, queue="b", priority=4, allowed={"n0"}),
        gang("p2", "L4", gpus=2, queue="b", priority=3, allowed={"n1"}),
    ]
    return snapshot, pending


@pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT])
def test_a_preemptor_on_another_gangs_given_back_quota_waits_for_that_victim(
    engine: Engine,
) -> None:
    snapshot, pending = preemptor_case()
    decision = checked_decision(snapshot, pending, engine)
    assert decision.preemptions == (Preemption("r0", "p1"), Preemption("r1", "p2"))
    # Started once r1 had gone but r0 still ran, p2 would put b at 6 of its 5: it waits for
    # r0 too. Before, it waited for its own victim only.
    assert decision.placement("p2") == GangPlacement(
        "p2", "L4", (ReplicaPlacement("n1", (0, 7)),), waits_for=("r0",)
    )
    p1 = decision.placement("p1")
    assert p1 is not None and p1.waits_for == ()


def test_the_validator_wants_a_preemptor_to_wait_for_the_quota_it_uses() -> None:
    snapshot, pending = preemptor_case()
    p1 = GangPlacement("p1", "L4", (ReplicaPlacement("n0", (0, 1, 2)),))
    p2 = GangPlacement("p2", "L4", (ReplicaPlacement("n1", (0, 7)),))
    evict = (Preemption("r0", "p1"), Preemption("r1", "p2"))
    own_only = Decision(placements=(p1, p2), preemptions=evict)
    assert decision_problems(snapshot, pending, own_only) == [
        "p2 bound once r1 has gone, while other victims still run: queue b over its L4 "
        "limit: 6 > 5 (a gang waits for the victims whose GPUs or queue quota it takes: "
        "waits_for)"
    ]
    waiting = Decision(placements=(p1, replace(p2, waits_for=("r0",))), preemptions=evict)
    assert decision_problems(snapshot, pending, waiting) == []


def over_capacity_case() -> tuple[Snapshot, list[Gang]]:
    """Two 4-GPU L4 nodes, 8 GPUs, and an account of 12: queues a and c (nominal 4 each) keep
    all of theirs (lend nothing), b (nominal 0) borrows 4 it could no longer have: v1 and v2
    (2 GPUs each, on n0). c's rc holds n1. a's pa (2 GPUs, on n0) reclaims v1 and v2 (the
    account comes down to 8); c's pc (priority 1, 4 GPUs, on n1) evicts c's own rc and takes
    its GPUs: started once rc has gone, the account is 12 again, over the capacity as before
    the decision but no higher."""
    tree = QueueTree.build(
        [
            QueueSpec("a", quotas={"L4": Quota(4, lending_limit=0)}),
            QueueSpec("b", quotas={"L4": Quota(0)}),
            QueueSpec("c", quotas={"L4": Quota(4, lending_limit=0)}),
        ]
    )
    snapshot = (
        cluster()
        .node("n0", "L4", 4)
        .node("n1", "L4", 4)
        .run("v1", "n0", (0, 1), queue="b")
        .run("v2", "n0", (2, 3), queue="b")
        .run("rc", "n1", (0, 1, 2, 3), queue="c")
        .queues(tree)
        .build()
    )
    pending = [
        gang("pa", "L4", gpus=2, queue="a", priority=5, allowed={"n0"}),
        gang("pc", "L4", gpus=4, queue="c", priority=1, allowed={"n1"}),
    ]
    return snapshot, pending


@pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT])
def test_a_preemptor_keeping_an_over_limit_account_where_it_was_waits_for_no_more(
    engine: Engine,
) -> None:
    snapshot, pending = over_capacity_case()
    decision = checked_decision(snapshot, pending, engine)
    assert set(decision.preemptions) == {
        Preemption("v1", "pa", reclaim=True),
        Preemption("v2", "pa", reclaim=True),
        Preemption("rc", "pc"),
    }
    # Before, pc also waited for pa's victims v1 and v2: the account, over the capacity before
    # the decision, let it in only with them gone, though its start makes nothing worse
    # (the validator's rule: a limit exceeded already may not be exceeded further).
    pc = decision.placement("pc")
    assert pc is not None and pc.replicas == (ReplicaPlacement("n1", (0, 1, 2, 3)),)
    assert pc.waits_for == ()


@pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT])
def test_a_non_preemptible_preemptor_within_nominal_waits_for_no_more_either(
    engine: Engine,
) -> None:
    snapshot, pending = over_capacity_case()
    pending = [replace(g, preemptible=False) if g.id == "pc" else g for g in pending]
    decision = checked_decision(snapshot, pending, engine)
    assert {p.gang_id for p in decision.preemptions} == {"v1", "v2", "rc"}
    # pc stays within c's nominal 4 in every state it can start in, so it takes nothing a
    # reclaim could want back; only the cluster's account, over the capacity before the
    # decision, is over a limit, and its start leaves it no worse. Before, a non-preemptible
    # gang was held to the strict check there and waited for pa's victims v1 and v2 as well.
    pc = decision.placement("pc")
    assert pc is not None and pc.waits_for == ()


def outside_over_capacity_case() -> tuple[Snapshot, list[Gang]]:
    """`over_capacity_case` with c's place taken by gangs of no queue: a (nominal 4) keeps
    all of its quota, b (nominal 0) borrows v1 and v2 (2 GPUs each, on n0), and ro, of no
    queue, holds n1: an account of 12 on 8 GPUs. a's pa reclaims v1 and v2 (the account comes
    down to 8); po, of no queue (priority 1, 4 GPUs, on n1), evicts ro (priority 0) and takes
    its GPUs: started once ro has gone, the account is 12 again, over the capacity as before
    the decision but no higher."""
    tree = QueueTree.build(
        [
            QueueSpec("a", quotas={"L4": Quota(4, lending_limit=0)}),
            QueueSpec("b", quotas={"L4": Quota(0)}),
        ]
    )
    snapshot = (
        cluster()
        .node("n0", "L4", 4)
        .node("n1", "L4", 4)
        .run("v1", "n0", (0, 1), queue="b")
        .run("v2", "n0", (2, 3), queue="b")
        .run("ro", "n1", (0, 1, 2, 3))
        .queues(tree)
        .build()
    )
    pending = [
        gang("pa", "L4", gpus=2, queue="a", priority=5, allowed={"n0"}),
        gang("po", "L4", gpus=4, priority=1, allowed={"n1"}),
    ]
    return snapshot, pending


@pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT])
def test_a_preemptor_of_no_queue_keeping_the_cluster_where_it_was_waits_for_no_more(
    engine: Engine,
) -> None:
    snapshot, pending = outside_over_capacity_case()
    decision = checked_decision(snapshot, pending, engine)
    assert set(decision.preemptions) == {
        Preemption("v1", "pa", reclaim=True),
        Preemption("v2", "pa", reclaim=True),
        Preemption("ro", "po"),
    }
    # Before, po also waited for pa's victims v1 and v2: a gang of no queue was held to the
    # strict check, though its start leaves the cluster's account, over the capacity before
    # the decision, no higher (as a queue's preemptor may: the validator's rule).
    po = decision.placement("po")
    assert po is not None and po.replicas == (ReplicaPlacement("n1", (0, 1, 2, 3)),)
    assert po.waits_for == ()
    # Not preemptible, po may take only capacity no queue is promised outside every queue,
    # and while v1 and v2 run (b borrows 4 beyond a's kept 4) there is none: it still waits
    # for them, as a queue's borrowing non-preemptible gang does.
    stiff = [replace(g, preemptible=False) if g.id == "po" else g for g in pending]
    gate = QueueGate(snapshot, aging_s=3600.0)
    waited = quota_waits(gate, stiff, decision, snapshot.running)
    assert waited.placement("po") == replace(po, waits_for=("v1", "v2"))


def test_a_non_preemptible_gang_borrowing_while_over_the_limit_still_waits() -> None:
    # The same scene with c's nominal at 2: pc (4 GPUs) borrows 2 that a reclaim could want
    # back, which it may take only on capacity no queue is promised; with v1 and v2 still
    # running the cluster's account is over the capacity, so it waits for them.
    snapshot, pending = over_capacity_case()
    assert snapshot.queues is not None
    specs = [
        replace(q, quotas={"L4": Quota(2, lending_limit=0)}) if q.name == "c" else q
        for q in snapshot.queues.queues.values()
    ]
    snapshot = replace(snapshot, queues=QueueTree.build(specs))
    pending = [replace(g, preemptible=False) if g.id == "pc" else g for g in pending]
    gate = QueueGate(snapshot, aging_s=3600.0)
    pa = GangPlacement("pa", "L4", (ReplicaPlacement("n0", (0, 1)),))
    pc = GangPlacement("pc", "L4", (ReplicaPlacement("n1", (0, 1, 2, 3)),))
    decision = Decision(
        placements=(pa, pc),
        preemptions=(
            Preemption("rc", "pc"),
            Preemption("v1", "pa", reclaim=True),
            Preemption("v2", "pa", reclaim=True),
        ),
    )
    waited = quota_waits(gate, pending, decision, snapshot.running)
    assert waited.placement("pc") == replace(pc, waits_for=("v1", "v2"))


def one_free_gpu_case() -> tuple[Snapshot, list[Gang]]:
    """Two 4-GPU L4 nodes, one GPU free (n0's 3): a (nominal 4) holds 4, not preemptible, and x
    (nominal 0) borrows 3 (v, n1's 0-2), so the account is at 7 of 8. b (nominal 4): pre
    (2 GPUs, on n1) reclaims v, gpu (1 GPU, on n1) takes v's third GPU and waits for it, and
    free (1 GPU, on n0) takes the free GPU: the account holds it at once (8 of 8)."""
    tree = QueueTree.build(
        [
            QueueSpec("a", quotas={"L4": Quota(4)}),
            QueueSpec("b", quotas={"L4": Quota(4)}),
            QueueSpec("x", quotas={"L4": Quota(0)}),
        ]
    )
    snapshot = (
        cluster()
        .node("n0", "L4", 4)
        .node("n1", "L4", 4)
        .run("ra", "n0", (0, 1, 2), preemptible=False, queue="a")
        .run("v", "n1", (0, 1, 2), queue="x")
        .run("ra2", "n1", (3,), preemptible=False, queue="a")
        .queues(tree)
        .build()
    )
    pending = [
        gang("pre", "L4", gpus=2, queue="b", priority=5, allowed={"n1"}),
        gang("gpu", "L4", gpus=1, queue="b", priority=4, allowed={"n1"}),
        gang("free", "L4", gpus=1, queue="b", priority=3, allowed={"n0"}),
    ]
    return snapshot, pending


@pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT])
def test_a_gang_waiting_for_a_victims_gpus_is_not_counted_as_bound_at_once(
    engine: Engine,
) -> None:
    snapshot, pending = one_free_gpu_case()
    decision = checked_decision(snapshot, pending, engine)
    assert decision.preemptions == (Preemption("v", "pre", reclaim=True),)
    waits = {p.gang_id: p.waits_for for p in decision.placements}
    # Before, gpu (which waits for v's GPU) was charged to the account as bound at once, so
    # free found the account full and waited for v too, beside an idle GPU.
    assert waits == {"pre": (), "gpu": ("v",), "free": ()}


def union_case() -> tuple[Snapshot, list[Gang], Decision]:
    """Queue b (nominal 0, borrowing limit 2) borrows 1 GPU: u. a's pa reclaims u and x's v,
    c's pc reclaims x's w; b's pb1 waits for v and pb2 for w (1 GPU each, on free GPUs of n1).
    With v gone b holds u and pb1 (2 of 2), with w gone u and pb2; with v and w gone but u
    still running, u, pb1 and pb2: 3 of 2."""
    tree = QueueTree.build(
        [
            QueueSpec("a", quotas={"L4": Quota(8)}),
            QueueSpec("b", quotas={"L4": Quota(0, borrowing_limit=2)}),
            QueueSpec("c", quotas={"L4": Quota(8)}),
            QueueSpec("x", quotas={"L4": Quota(0)}),
        ]
    )
    snapshot = (
        cluster()
        .node("n0", "L4", 8)
        .node("n1", "L4", 8)
        .run("u", "n0", (0,), queue="b")
        .run("v", "n0", (1,), queue="x")
        .run("w", "n0", (2,), queue="x")
        .queues(tree)
        .build()
    )
    pending = [
        gang("pa", "L4", gpus=1, queue="a"),
        gang("pc", "L4", gpus=1, queue="c"),
        gang("pb1", "L4", gpus=1, queue="b"),
        gang("pb2", "L4", gpus=1, queue="b"),
    ]

    def on_n1(name: str, gpu: int, *waits: str) -> GangPlacement:
        return GangPlacement(name, "L4", (ReplicaPlacement("n1", (gpu,)),), waits_for=waits)

    decision = Decision(
        placements=(on_n1("pa", 0), on_n1("pc", 1), on_n1("pb1", 2, "v"), on_n1("pb2", 3, "w")),
        preemptions=(
            Preemption("u", "pa", reclaim=True),
            Preemption("v", "pa", reclaim=True),
            Preemption("w", "pc", reclaim=True),
        ),
    )
    return snapshot, pending, decision


def test_the_validator_checks_starts_once_several_placements_victims_have_gone() -> None:
    snapshot, pending, decision = union_case()
    # Before, it checked each placement's own awaited set alone ({u, v}, {v}, {w}) and
    # accepted this decision; v and w can exit before u.
    assert decision_problems(snapshot, pending, decision) == [
        "pb1, pb2, pc bound once v, w have gone, while other victims still run: queue b over "
        "its L4 limit: 3 > 2 (a gang waits for the victims whose GPUs or queue quota it takes: "
        "waits_for)"
    ]
    # The scheduler's waits (quota_waits) check that state: pb2 waits for u too.
    waited = quota_waits(QueueGate(snapshot, 3600.0), pending, decision, snapshot.running)
    assert {p.gang_id: p.waits_for for p in waited.placements}["pb2"] == ("u", "w")
    assert decision_problems(snapshot, pending, waited) == []


@pytest.mark.parametrize("engine", [Engine.GREEDY, Engine.CPSAT])
def test_many_gangs_sharing_a_victims_quota_are_checked_by_the_states_they_make(
    engine: Engine,
) -> None:
    # Three 16-GPU L4 nodes, the account full (a's 16 kept + c's 16 + x's 16 = 48): a's pa and
    # c's pc (8 GPUs each) reclaim x's v and w, which give back 8 each; b's sixteen 1-GPU gangs
    # on n2 wait for v (eight of them) or w (the other eight).
    tree = QueueTree.build(
        [
            QueueSpec("a", quotas={"L4": Quota(16, lending_limit=0)}),
            QueueSpec("b", quotas={"L4": Quota(0)}),
            QueueSpec("c", quotas={"L4": Quota(16, lending_limit=0)}),
            QueueSpec("x", quotas={"L4": Quota(0)}),
        ]
    )
    half, rest = tuple(range(8)), tuple(range(8, 16))
    snapshot = (
        cluster()
        .node("n0", "L4", 16)
        .node("n1", "L4", 16)
        .node("n2", "L4", 16)
        .run("v", "n0", half, queue="x")
        .run("ra", "n0", rest, preemptible=False, queue="a")
        .run("w", "n1", half, queue="x")
        .run("rc", "n1", rest, preemptible=False, queue="c")
        .queues(tree)
        .build()
    )
    bs = [gang(f"pb{i:02d}", "L4", gpus=1, queue="b", allowed={"n2"}) for i in range(1, 17)]
    pending = [
        gang("pa", "L4", gpus=8, queue="a", allowed={"n0"}),
        gang("pc", "L4", gpus=8, queue="c", allowed={"n1"}),
        *bs,
    ]
    decision = checked_decision(snapshot, pending, engine)
    assert decision.preemptions == (
        Preemption("v", "pa", reclaim=True),
        Preemption("w", "pc", reclaim=True),
    )
    waits = {p.gang_id: p.waits_for for p in decision.placements if p.gang_id.startswith("pb")}
    # Before, the gangs after the eighth saw eight earlier ones (all awaiting v) each started
    # or not, past the bound of six, and waited for every victim on the type (v and w): now
    # those eight make two states (v gone or not), and they wait for w alone.
    assert waits == {g.id: ("v",) if int(g.id[2:]) <= 8 else ("w",) for g in bs}
