"""Queue tree and quota arithmetic (core/queues.py, core/quota.py).

Aspects: the tree's checks (missing parent, parent cycles, descendants of a broken queue,
children whose nominal quotas exceed the parent's), borrowing what others do not use, the
borrowing limit, the lending limit (what a queue keeps), limits of ancestors, the cluster's
capacity, the non-preemptible rule, and the words of a shortfall.
"""

from __future__ import annotations

import pytest

from gpufleet.core.queues import QueueSpec, QueueTree, Quota, resource_key, split_resource
from gpufleet.core.quota import Charge, QuotaBook
from tests.unit.core.placement_builders import cluster

H100 = "H100-80GB"


def tree(*specs: QueueSpec) -> QueueTree:
    return QueueTree.build(specs)


def q(name: str, nominal: int = 0, parent: str | None = None, **limits: int) -> QueueSpec:
    return QueueSpec(name, parent=parent, quotas={H100: Quota(nominal, **limits)})


def book(
    queues: QueueTree, nodes: int = 2, running: tuple[tuple[str, str, int], ...] = ()
) -> QuotaBook:
    """A book over `nodes` 8 x H100 nodes with running (gang, queue, GPUs) on them."""
    builder = cluster().nodes_of("h", H100, nodes)
    free = {f"h{i}": list(range(8)) for i in range(nodes)}
    for gang_id, queue, gpus in running:
        node = next(n for n, left in free.items() if len(left) >= gpus)
        taken, free[node] = tuple(free[node][:gpus]), free[node][gpus:]
        builder.run(gang_id, node, taken, queue=queue)
    snapshot = builder.queues(queues).build()
    return QuotaBook(queues, snapshot)


def test_resource_keys_round_trip() -> None:
    assert resource_key(H100) == H100
    assert resource_key("A100-80GB", "3g.40gb") == "A100-80GB/3g.40gb"
    assert split_resource("A100-80GB/3g.40gb") == ("A100-80GB", "3g.40gb")
    assert split_resource(H100) == (H100, None)


def test_tree_marks_missing_parents_cycles_and_their_descendants() -> None:
    t = tree(
        q("orphan", parent="gone"),
        q("a", parent="b"),
        q("b", parent="a"),
        q("self", parent="self"),
        q("under-cycle", parent="a"),
        q("ok"),
        q("child", parent="ok"),
    )
    assert t.unusable["orphan"] == "parent gone does not exist"
    assert t.unusable["a"] == "parent cycle a -> b -> a"
    assert t.unusable["b"] == "parent cycle b -> a -> b"
    assert t.unusable["self"] == "parent cycle self -> self"
    assert t.unusable["under-cycle"] == "parent cycle a -> b -> a"
    assert t.usable("ok") and t.usable("child")
    assert t.path("child") == ("child", "ok")
    assert t.why_unusable("missing") == "queue missing does not exist"
    assert t.why_unusable("orphan") == "queue orphan is unusable: parent gone does not exist"


def test_tree_reports_children_whose_nominal_exceeds_the_parent() -> None:
    t = tree(q("dept", 8), q("t1", 6, parent="dept"), q("t2", 4, parent="dept"))
    assert t.oversubscribed == {"dept": (H100,)}
    assert t.usable("t1") and t.usable("t2")  # reported, still usable


def test_a_queue_borrows_what_others_do_not_use_and_no_more_than_exists() -> None:
    b = book(tree(q("a", 8), q("b", 8)))
    assert b.fits("a", H100, 16)
    assert not b.fits("a", H100, 17)
    assert b.room("a", H100, 20) == 16


def test_borrowing_limit_caps_the_queue_above_its_nominal() -> None:
    b = book(tree(q("a", 8, borrowing_limit=2), q("b", 8)))
    assert b.room("a", H100, 20) == 10
    short = b.shortfall("a", H100, 12)
    assert short is not None and short.room == 10
    assert short.text == (
        "queue a would exceed its quota for 12 x H100-80GB: uses 0 of nominal 8 + borrowing limit 2"
    )


def test_lending_limit_keeps_part_of_the_nominal_for_its_owner() -> None:
    b = book(tree(q("a", 8, lending_limit=3), q("b", 8)))
    assert b.room("b", H100, 20) == 11  # its 8 + the 3 that a lends
    short = b.shortfall("b", H100, 12)
    assert short is not None
    assert short.text == (
        "queue b needs 12 x H100-80GB; of the cluster's 16, 0 are in use, a keeps 5 it does "
        "not lend"
    )
    assert b.room("a", H100, 20) == 16  # the owner may still use all of it


def test_usage_counts_against_every_ancestor() -> None:
    t = tree(q("dept", 8, borrowing_limit=0), q("t1", 4, parent="dept"), q("t2", 4, parent="dept"))
    b = book(t, running=(("x", "t1", 6),))
    assert b.used("dept", H100) == 6 and b.used("t1", H100) == 6
    assert b.borrowing("t1", H100) and not b.borrowing("dept", H100)
    assert b.room("t2", H100, 8) == 2  # the department's ceiling of 8, not t2's own
    short = b.shortfall("t2", H100, 4)
    assert short is not None
    assert short.text.startswith("queue t2's ancestor dept would exceed its quota")


def test_a_freed_gang_gives_its_usage_back() -> None:
    b = book(tree(q("a", 8), q("b", 8)), running=(("x", "b", 8), ("y", "b", 8)))
    assert not b.fits("a", H100, 8)
    assert b.entitled("a", H100, 8)
    b.free("y")
    assert b.fits("a", H100, 8)
    assert b.free("y") is None


def test_a_trial_undoes_what_it_freed_and_held() -> None:
    t = tree(q("dept", 8, borrowing_limit=0), q("t1", 4, parent="dept"), q("t2", 4, parent="dept"))
    b = book(t, running=(("x", "t1", 6), ("y", "t2", 2)))
    assert not b.fits("t2", H100, 2)  # the department's ceiling (its cache is filled here)
    with b.trial():
        b.free("x")
        assert b.used("dept", H100) == 2 and b.fits("t2", H100, 2)
        b.hold("z", Charge("t2", H100, 4))
        assert b.used("t2", H100) == 6 and not b.fits("t1", H100, 4)
    assert b.used("dept", H100) == 8 and b.used("t1", H100) == 6 and b.used("t2", H100) == 2
    assert not b.fits("t2", H100, 2)
    assert b.free("z") is None and b.free("x") == Charge("t1", H100, 6)
    with pytest.raises(ValueError), b.trial():  # undone when the trial ends by an error
        b.free("y")
        b.hold("y", Charge("t2", H100, 2))
        b.hold("y", Charge("t2", H100, 2))
    assert b.used("t2", H100) == 2
    with b.trial(), pytest.raises(RuntimeError), b.trial():
        pass


def test_non_preemptible_gangs_stay_within_nominal_or_unpromised_capacity() -> None:
    b = book(tree(q("a", 4), q("b", 8)))  # 16 GPUs: 12 promised, 4 promised to nobody
    assert b.fits("a", H100, 4, preemptible=False)
    assert b.fits("a", H100, 8, preemptible=False)  # 4 nominal + the 4 unpromised
    assert not b.fits("a", H100, 9, preemptible=False)
    assert b.fits("a", H100, 9, preemptible=True)  # borrowing b's unused nominal
    short = b.shortfall("a", H100, 9, preemptible=False)
    assert short is not None and "non-preemptible" in short.text


def test_mig_resources_have_the_capacity_of_the_gpus_cut_for_them() -> None:
    snapshot = cluster().node("a0", "A100-80GB", 8).queues(tree(q("a"))).build()
    b = QuotaBook(tree(q("a")), snapshot)
    assert b.capacity("A100-80GB/1g.10gb") == 8 * 7
    assert b.capacity("A100-80GB/7g.80gb") == 8
    assert b.capacity("A100-80GB/9g.99gb") == 0


def test_quota_rejects_bad_numbers() -> None:
    with pytest.raises(ValueError, match="nominal"):
        Quota(-1)
    with pytest.raises(ValueError, match="lending limit"):
        Quota(4, lending_limit=5)
    with pytest.raises(ValueError, match="weight"):
        QueueSpec("a", weight=0)
