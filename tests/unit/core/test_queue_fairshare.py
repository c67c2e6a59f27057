"""Fair share between queues and the spec checks of the queue tree (core/fairshare.py,
core/queues.py).

Aspects: hierarchical weighted shares among the queues that have work (an idle queue deserves
nothing and leaves its share to its siblings; a parent's own gangs compete as one more child);
attained share counted in throughput; the order of pending gangs (within-nominal work first,
then the queue furthest below its share, aging ahead of both; priority orders a queue's own
gangs only); and the checks of one queue's
spec and of the tree (duplicates, weights, priority ranges).
"""

from __future__ import annotations

import pytest

from gpufleet.core.fairshare import order_pending, queue_shares
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.core.quota import QuotaBook
from tests.unit.core.placement_builders import cluster, gang

H100 = "H100-80GB"
T4 = "T4"


def spec(name: str, weight: float = 1.0, parent: str | None = None, h100: int = 0) -> QueueSpec:
    return QueueSpec(name, parent=parent, weight=weight, quotas={H100: Quota(h100)})


def test_shares_follow_weights_down_the_hierarchy() -> None:
    tree = QueueTree.build(
        [spec("dept"), spec("t1", 3.0, "dept"), spec("t2", 1.0, "dept"), spec("other")]
    )
    snapshot = cluster().nodes_of("h", H100, 2).queues(tree).build()
    pending = [gang("a", queue="t1"), gang("b", queue="t2"), gang("c", queue="other")]
    shares = queue_shares(snapshot, pending)
    assert shares["dept"].fair == pytest.approx(0.5)
    assert shares["other"].fair == pytest.approx(0.5)
    assert shares["t1"].fair == pytest.approx(0.375)
    assert shares["t2"].fair == pytest.approx(0.125)


def test_an_idle_queue_deserves_nothing_and_leaves_its_share_to_siblings() -> None:
    tree = QueueTree.build([spec("busy"), spec("idle", 5.0)])
    snapshot = cluster().nodes_of("h", H100, 1).queues(tree).build()
    shares = queue_shares(snapshot, [gang("a", queue="busy")])
    assert set(shares) == {"busy"}
    assert shares["busy"].fair == pytest.approx(1.0)


def test_a_parents_own_gangs_compete_as_one_more_child() -> None:
    tree = QueueTree.build([spec("dept", 1.0), spec("team", 1.0, "dept")])
    snapshot = cluster().nodes_of("h", H100, 1).queues(tree).build()
    shares = queue_shares(snapshot, [gang("a", queue="dept"), gang("b", queue="team")])
    assert shares["dept"].fair == pytest.approx(1.0)
    assert shares["team"].fair == pytest.approx(0.5)


def test_attained_share_counts_throughput_per_gpu_type() -> None:
    tree = QueueTree.build([spec("fast"), spec("slow")])
    snapshot = (
        cluster()
        .nodes_of("h", H100, 1)
        .nodes_of("t", T4, 1)
        .run("f", "h0", (0, 1, 2, 3), queue="fast")
        .run("s", "t0", (0, 1, 2, 3), queue="slow")
        .queues(tree)
        .build()
    )
    shares = queue_shares(snapshot, [])
    # Four GPUs each, but an H100 is worth several T4s: the fast queue holds a larger share
    # of the effective throughput its own work could get from the fleet.
    assert shares["fast"].attained > 0 and shares["slow"].attained > 0
    assert shares["fast"].fair == shares["slow"].fair == pytest.approx(0.5)
    h100 = snapshot.catalog[H100].relative_throughput
    t4 = snapshot.catalog[T4].relative_throughput
    assert shares["fast"].reference == pytest.approx(8 * h100 + 8 * t4 * h100 / h100)
    assert shares["fast"].attained * shares["fast"].reference == pytest.approx(4 * h100)
    assert shares["slow"].attained * shares["slow"].reference == pytest.approx(4 * t4)


def test_order_puts_work_within_nominal_first_then_the_poorer_queue() -> None:
    tree = QueueTree.build([spec("owner", h100=4), spec("rich"), spec("poor")])
    snapshot = (
        cluster()
        .nodes_of("h", H100, 2)
        .run("r", "h0", (0, 1, 2, 3, 4, 5), queue="rich")
        .queues(tree)
        .build()
    )
    pending = [
        gang("rich-1", queue="rich", gpus=2),
        gang("poor-1", queue="poor", gpus=2),
        gang("owner-1", queue="owner", gpus=4),
    ]
    order = order_pending(snapshot, pending, QuotaBook(tree, snapshot), aging_s=3600.0)
    assert [g.id for g in order] == ["owner-1", "poor-1", "rich-1"]


def test_priority_orders_gangs_inside_a_queue_never_across_queues() -> None:
    """The TrainingJob and ServingJob `priority` descriptions: a queue's higher-priority gang
    goes first in its queue, but the poorer queue's gang of priority 0 goes ahead of the
    richer queue's of priority 9."""
    tree = QueueTree.build([spec("rich"), spec("poor")])
    snapshot = (
        cluster().nodes_of("h", H100, 2).run("r", "h0", (0, 1), queue="rich").queues(tree).build()
    )
    pending = [
        gang("rich-urgent", queue="rich", gpus=2, priority=9),
        gang("poor-low", queue="poor", gpus=2, priority=0),
        gang("poor-high", queue="poor", gpus=2, priority=5),
    ]
    order = order_pending(snapshot, pending, QuotaBook(tree, snapshot), aging_s=3600.0)
    assert [g.id for g in order] == ["poor-high", "poor-low", "rich-urgent"]


def test_aged_gangs_go_ahead_of_their_tier_oldest_first() -> None:
    tree = QueueTree.build([spec("rich"), spec("poor")])
    snapshot = (
        cluster().nodes_of("h", H100, 1).run("r", "h0", (0, 1, 2, 3), queue="rich").queues(tree)
    ).build()
    pending = [
        gang("poor-1", queue="poor"),
        gang("rich-old", queue="rich", waited_s=7200.0),
        gang("rich-older", queue="rich", waited_s=9000.0),
    ]
    order = order_pending(snapshot, pending, QuotaBook(tree, snapshot), aging_s=3600.0)
    assert [g.id for g in order] == ["rich-older", "rich-old", "poor-1"]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        pytest.param(lambda: QueueSpec(""), "needs a name", id="no-name"),
        pytest.param(lambda: QueueSpec("q", weight=0.0), "weight must be positive", id="weight"),
        pytest.param(
            lambda: QueueSpec("q", priority_min=5, priority_max=2),
            "priority_max < priority_min",
            id="priority-range",
        ),
        pytest.param(
            lambda: QueueTree.build([QueueSpec("q"), QueueSpec("q")]),
            "duplicate queue q",
            id="duplicate",
        ),
        pytest.param(lambda: Quota(-1), "nominal quota must be >= 0", id="negative"),
        pytest.param(lambda: Quota(2, lending_limit=3), "lending limit", id="lend-above"),
    ],
)
def test_bad_queue_specs_are_refused(build: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()  # type: ignore[operator]


def test_priority_range_bounds_are_inclusive() -> None:
    queue = QueueSpec("q", priority_min=10, priority_max=20)
    assert [queue.admits_priority(p) for p in (9, 10, 20, 21)] == [False, True, True, False]
    assert QueueSpec("open").admits_priority(1000)
