"""The Kueue-like baseline's own rules, on hand-made clusters (its module docstring).

Aspects: heterogeneity-blind flavors (a gang that accepts T4 and H100 takes the H100s, the
fleet's highest catalogue throughput, even when it runs faster on T4); FIFO per queue (a queue's
gangs by priority, then in arrival order, as Kueue's ClusterQueue heap; a head that does not fit
is set aside and the next one becomes the head); heads across queues (those that fit without
borrowing first); and reclaim (whole gangs of borrowing queues only, lowest priority first, the
lender's own and non-borrowers left alone).
"""

from __future__ import annotations

from gpufleet.core.policy import Policy
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.sim.kueue_like import KueueLikePolicy
from tests.unit.core.placement_builders import cluster, gang

H100, T4 = "H100-80GB", "T4"


def tree(**nominal: dict[str, int]) -> QueueTree:
    return QueueTree.build(
        [
            QueueSpec(q, quotas={t: Quota(n) for t, n in quotas.items()})
            for q, quotas in nominal.items()
        ]
    )


def test_flavors_are_tried_fastest_catalogue_type_first_whatever_the_job() -> None:
    snapshot = (
        cluster().node("t0", T4, 4).node("h0", H100, 4).queues(tree(a={T4: 4, H100: 4})).build()
    )
    # Runs 3x faster on T4 than on H100 (its own throughputs): the baseline does not look.
    odd = gang("odd", (T4, H100), gpus=4, queue="a", throughput={T4: 3.0, H100: 1.0})
    decision = KueueLikePolicy()(snapshot, [odd], Policy())
    assert [(p.gang_id, p.gpu_type) for p in decision.placements] == [("odd", H100)]


def test_a_queues_gangs_go_by_priority_then_in_arrival_order() -> None:
    snapshot = cluster().node("h0", H100, 4).queues(tree(a={H100: 4})).build()
    first = gang("first", gpus=4, queue="a", priority=0)
    urgent = gang("urgent", gpus=4, queue="a", priority=9)
    second = gang("second", gpus=4, queue="a", priority=0)
    decision = KueueLikePolicy()(snapshot, [first, urgent], Policy())
    assert decision.admitted_ids == {"urgent"}
    assert KueueLikePolicy()(snapshot, [first, second], Policy()).admitted_ids == {"first"}


def test_a_head_that_does_not_fit_is_set_aside_for_the_next() -> None:
    snapshot = cluster().node("h0", H100, 4).queues(tree(a={H100: 8})).build()
    big, small = gang("big", gpus=8, queue="a"), gang("small", gpus=4, queue="a")
    assert KueueLikePolicy()(snapshot, [big, small], Policy()).admitted_ids == {"small"}


def test_heads_that_fit_without_borrowing_go_first() -> None:
    snapshot = cluster().node("h0", H100, 4).queues(tree(a={}, b={H100: 4})).build()
    borrower = gang("borrower", gpus=4, queue="a", priority=9)  # a has no quota: it borrows
    owner = gang("owner", gpus=4, queue="b")
    decision = KueueLikePolicy()(snapshot, [borrower, owner], Policy())
    assert decision.admitted_ids == {"owner"}


def test_reclaim_evicts_whole_gangs_of_borrowers_lowest_priority_first() -> None:
    snapshot = (
        cluster()
        .nodes_of("h", H100, 3, count=4)
        .run("b-low", "h0", (0, 1, 2, 3), priority=0, queue="b")
        .run("b-high", "h1", (0, 1, 2, 3), priority=5, queue="b")
        .run("c-own", "h2", (0, 1, 2, 3), priority=0, queue="c")
        .queues(tree(a={H100: 4}, b={}, c={H100: 4}))
        .build()
    )
    decision = KueueLikePolicy()(snapshot, [gang("a1", gpus=4, queue="a")], Policy())
    assert decision.admitted_ids == {"a1"}
    assert [(p.gang_id, p.reclaim) for p in decision.preemptions] == [("b-low", True)]
