"""GPUQueue objects into the core and the core's figures back into GPUQueue status.

Aspects: a GPUQueue object becomes the core's `QueueSpec` (quotas keyed by type and MIG
profile, limits, weight, priority range, parent); an unreadable object is left out (its gangs
then wait with QueueNotFound); the tree is rebuilt only when an object changed; a pod's queue
annotation reaches the core's pending and running gangs; the status figures (used, borrowed,
lent, pending: the subtree's; job counts: the queue's own; fair and attained shares;
conditions, a parent cycle named) match the running gangs, and GPUs held for a waiting gang
are shown apart (`held`), not as usage; what gangs outside every queue hold is reported apart
from every queue's figures; the writer writes only what changed, keeps a
condition's transition time while its status holds, and retries a failed write at the next cycle.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gpufleet.core.queue_report import outside_usage, queue_report
from gpufleet.core.queues import QueueSpec, QueueTree, Quota
from gpufleet.model.contract import names
from gpufleet.model.gpuqueue import GPUQueueStatus
from gpufleet.scheduler.cache import HELD_SUFFIX, RESERVED_SUFFIX
from gpufleet.scheduler.cluster_view import build_view
from gpufleet.scheduler.queue_objects import QueueStatusWriter, QueueTrees, queue_spec, status_body
from tests.unit.core.placement_builders import cluster, gang

H100 = "H100-80GB"


def gq(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "GPUQueue",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


def test_an_object_becomes_the_cores_queue() -> None:
    spec = queue_spec(
        gq(
            "team",
            parent="dept",
            weight=2.5,
            priorityRange={"min": 10, "max": 20},
            quotas=[
                {"gpuType": H100, "nominal": 8, "borrowingLimit": 2, "lendingLimit": 4},
                {"gpuType": "A100-80GB", "migProfile": "3g.40gb", "nominal": 3},
            ],
        )
    )
    assert (spec.name, spec.parent, spec.weight) == ("team", "dept", 2.5)
    assert (spec.priority_min, spec.priority_max) == (10, 20)
    assert dict(spec.quotas) == {H100: Quota(8, 2, 4), "A100-80GB/3g.40gb": Quota(3)}
    default = queue_spec(gq("default", weight=1.0))
    assert (default.priority_min, default.priority_max, dict(default.quotas)) == (0, None, {})


def test_an_unreadable_object_is_left_out_and_the_tree_is_reused_until_a_change() -> None:
    trees = QueueTrees()
    good, bad = gq("good"), gq("bad", quotas=[{"gpuType": "B300", "nominal": 1}])
    first = trees.tree([good, bad])
    assert set(first.queues) == {"good"}
    assert trees.tree([bad, good]) is first  # same objects, any order: the same tree
    changed = gq("good", weight=3.0)
    assert trees.tree([changed, bad]).queues["good"].weight == 3.0


def _pod(name: str, queue: str | None, node: str | None = None) -> dict[str, Any]:
    annotations = {names.GANG_SIZE: "1", names.GPU_TYPES: H100}
    if queue is not None:
        annotations[names.QUEUE] = queue
    if node is not None:
        annotations[names.ASSIGNED_GPUS] = "0,1"
        annotations[names.ASSIGNED_TYPE] = H100
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": name,
                     "labels": {names.GANG_LABEL: name, names.RANK_LABEL: "0"},
                     "annotations": annotations},
        "spec": {"schedulerName": names.SCHEDULER_NAME, "nodeName": node,
                 "containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
        "status": {"phase": "Running" if node else "Pending"},
    }  # fmt: skip


def _node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                              "nvidia.com/gpu.count": "8"}},
        "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
        "spec": {},
    }  # fmt: skip


def test_the_pods_queue_reaches_the_cores_gangs() -> None:
    catalog = cluster().catalog
    pods = [_pod("run", "team", node="n0"), _pod("wait", "team"), _pod("loose", None)]
    view = build_view(catalog, [_node("n0")], pods, {}, queues=[gq("team")])
    assert view.snapshot.queues is not None and set(view.snapshot.queues.queues) == {"team"}
    [running] = view.snapshot.running
    assert running.queue == "team"
    assert {pg.gang.id: pg.gang.queue for pg in view.pending} == {
        "ns/wait": "team",
        "ns/loose": None,
    }
    # Without queue objects (not watched) the core sees no queues at all.
    assert build_view(catalog, [_node("n0")], pods, {}).snapshot.queues is None


def _teams() -> QueueTree:
    return QueueTree.build(
        [
            QueueSpec("a", quotas={H100: Quota(8)}),
            QueueSpec("b", quotas={H100: Quota(8)}),
            QueueSpec("c", quotas={H100: Quota(0)}),
            QueueSpec("orphan", parent="gone"),
        ]
    )


def test_figures_show_borrowing_lending_and_pending() -> None:
    snapshot = (
        cluster()
        .nodes_of("h", H100, 2)
        .run("b1", "h0", tuple(range(8)), queue="b")
        .run("b2", "h1", (0, 1, 2, 3), queue="b")
        .queues(_teams())
        .build()
    )
    report = queue_report(snapshot, [gang("a1", gpus=8, queue="a"), gang("x", queue="orphan")])
    a, b = report["a"].resources[0], report["b"].resources[0]
    assert (a.nominal, a.used, a.borrowed, a.lent, a.pending) == (8, 0, 0, 4, 8)
    assert (b.nominal, b.used, b.borrowed, b.lent, b.pending) == (8, 12, 4, 0, 0)
    assert (report["b"].running, report["a"].pending) == (2, 1)
    assert report["orphan"].unusable == "parent gone does not exist"
    assert report["orphan"].pending == 1
    assert report["a"].fair_share > 0 and report["b"].attained_share > 0


def test_usage_outside_every_queue_is_reported_apart() -> None:
    # Pods naming no queue, a queue that does not exist or one that takes no jobs (its parent
    # is missing): the quota book's ROOT, in no queue's figures.
    snapshot = (
        cluster()
        .nodes_of("h", H100, 2)
        .run("b1", "h0", (0, 1, 2, 3), queue="b")
        .run("loose", "h0", (4, 5))
        .run("typo", "h1", (0,), queue="missing")
        .run("lost", "h1", (1, 2, 3), queue="orphan")
        .queues(_teams())
        .build()
    )
    assert outside_usage(snapshot) == {H100: 6}
    report = queue_report(snapshot, [])
    used = {n: sum(r.used for r in f.resources) for n, f in report.items()}
    assert used == {"a": 0, "b": 4, "c": 0, "orphan": 0}
    assert outside_usage(cluster().nodes_of("h", H100, 1).queues(_teams()).build()) == {}
    # No queue at all: nothing is promised, so nothing is outside a queue.
    lone = cluster().nodes_of("h", H100, 1).run("loose", "h0", (0,))
    assert outside_usage(lone.build()) is None
    assert outside_usage(lone.queues(QueueTree.build([])).build()) is None


def test_pending_counts_the_childrens_demand_and_the_job_counts_do_not() -> None:
    # As the CRD says: `pending` per resource is the subtree's waiting demand, each gang at its
    # minimum size on the first type it accepts; pendingJobs counts the queue's own jobs.
    a100 = "A100-80GB"
    tree = QueueTree.build(
        [QueueSpec("dept", quotas={H100: Quota(8)}), QueueSpec("team", parent="dept")]
    )
    snapshot = cluster().nodes_of("h", H100, 1).nodes_of("a", a100, 1).queues(tree).build()
    either = gang("t1", (a100, H100), gpus=2, replicas=(1, 3), queue="team")
    report = queue_report(snapshot, [either, gang("d1", H100, queue="dept")])
    pending = {n: {r.resource: r.pending for r in f.resources} for n, f in report.items()}
    assert pending == {"dept": {a100: 2, H100: 1}, "team": {a100: 2}}
    assert (report["dept"].pending, report["team"].pending) == (1, 1)


def test_the_writer_writes_what_changed_and_keeps_transition_times() -> None:
    writes: list[tuple[str, dict[str, Any]]] = []
    fail = {"b"}
    clock = [datetime(2026, 1, 1, tzinfo=UTC)]

    def patch(name: str, body: dict[str, Any]) -> None:
        if name in fail:
            raise RuntimeError("API server unavailable")
        writes.append((name, body))

    writer = QueueStatusWriter(patch, now=lambda: clock[0])
    snapshot = cluster().nodes_of("h", H100, 1).queues(_teams()).build()
    assert writer.write(snapshot, []) == ["a", "c", "orphan"]  # b failed: retried next time
    first = dict(writes)["a"]["conditions"][0]["lastTransitionTime"]
    clock[0] += timedelta(minutes=5)
    fail.clear()
    assert writer.write(snapshot, []) == ["b"]  # nothing else changed
    busy = cluster().nodes_of("h", H100, 1).run("a1", "h0", (0, 1), queue="a")
    assert writer.write(busy.queues(_teams()).build(), []) == ["a"]
    [*_, (name, body)] = writes
    assert name == "a" and body["resources"][0]["used"] == 2 and body["runningJobs"] == 1
    assert body["conditions"][0]["lastTransitionTime"] == first  # still Active since then


def test_status_body_names_why_a_queue_takes_no_jobs() -> None:
    snapshot = cluster().nodes_of("h", H100, 1).queues(_teams()).build()
    body = status_body(queue_report(snapshot, [])["orphan"], "2026-01-01T00:00:00Z")
    active, over = body["conditions"]
    assert (active["type"], active["status"], active["reason"]) == (
        "Active",
        "False",
        "ParentNotFound",
    )
    assert active["message"] == "parent gone does not exist"
    assert (over["type"], over["status"]) == ("Oversubscribed", "False")


def test_status_body_carries_the_shares_and_names_a_parent_cycle() -> None:
    # b runs 8 of the 16 H100s: half the fleet's throughput for its work. Idle a deserves
    # nothing; once a has work too, the two equal weights split the fleet.
    tree = QueueTree.build(
        [
            QueueSpec("a", quotas={H100: Quota(8)}),
            QueueSpec("b", quotas={H100: Quota(8)}),
            QueueSpec("x", parent="z"),
            QueueSpec("y", parent="x"),
            QueueSpec("z", parent="y"),
        ]
    )
    snapshot = (
        cluster().nodes_of("h", H100, 2).run("b1", "h0", tuple(range(8)), queue="b").queues(tree)
    ).build()
    stamp = "2026-01-01T00:00:00Z"
    alone = queue_report(snapshot, [gang("y1", queue="y")])
    bodies = {n: status_body(alone[n], stamp) for n in "ab"}
    shares = {n: (b["fairShare"], b["attainedShare"]) for n, b in bodies.items()}
    assert shares == {"a": (0.0, 0.0), "b": (1.0, 0.5)}
    both = queue_report(snapshot, [gang("a1", gpus=8, queue="a")])
    assert [status_body(both[n], stamp)["fairShare"] for n in "ab"] == [0.5, 0.5]
    # A queue on a parent cycle longer than two (the admission policy refuses only two-queue
    # cycles) takes no jobs and says why.
    active = status_body(alone["y"], stamp)["conditions"][0]
    assert (active["type"], active["status"], active["reason"]) == (
        "Active",
        "False",
        "ParentCycle",
    )
    assert active["message"] == "parent cycle y -> x -> z -> y"
    GPUQueueStatus.model_validate(status_body(alone["y"], stamp))


def test_gpus_held_for_a_waiting_gang_are_shown_apart_not_as_usage() -> None:
    # a1 (queue a) waits for its victims on h0 with the 4 GPUs already free held for it
    # (nominated.py: a running gang `<gang>#nominated` to the core): no usage of a, nor a
    # running job, nor what a lends or borrows; `held` says them, for a and its parent.
    tree = QueueTree.build(
        [
            QueueSpec("org", quotas={H100: Quota(16)}),
            QueueSpec("a", parent="org", quotas={H100: Quota(2)}),
            QueueSpec("b", parent="org", quotas={H100: Quota(8)}),
        ]
    )
    snapshot = (
        cluster()
        .nodes_of("h", H100, 2)
        .run(f"a1{HELD_SUFFIX}", "h0", (0, 1, 2, 3), priority=5, queue="a")
        .run("b1", "h1", (0, 1), queue="b")
        .queues(tree)
        .build()
    )
    writes: dict[str, dict[str, Any]] = {}
    QueueStatusWriter(writes.__setitem__).write(snapshot, [gang("a1", gpus=4, queue="a")])
    (a,), (org,) = writes["a"]["resources"], writes["org"]["resources"]
    # Before: a used 4 GPUs, borrowed 2 and ran one job.
    assert (a["used"], a["borrowed"], a["held"], a["pending"]) == (0, 0, 4, 4)
    assert (writes["a"]["runningJobs"], writes["a"]["pendingJobs"]) == (0, 1)
    assert (org["used"], org["held"]) == (2, 4)
    assert writes["b"]["resources"][0]["held"] == 0
    GPUQueueStatus.model_validate(writes["a"])  # the CRD's status model takes it


def test_a_moved_gangs_reservation_is_held_not_a_second_use_of_its_queue() -> None:
    # a1 (queue a) moves from h0 to h1 (mover.py): while its old pod runs, its new placement
    # is shown to the core as a running gang `a1#moving`. The queue uses a1's 2 GPUs once;
    # the reservation is shown as `held` (not used, borrowed, a running job).
    tree = QueueTree.build([QueueSpec("a", quotas={H100: Quota(2)})])
    snapshot = (
        cluster()
        .nodes_of("h", H100, 2)
        .run("a1", "h0", (0, 1), queue="a")
        .run(f"a1{RESERVED_SUFFIX}", "h1", (0, 1), priority=0, queue="a")
        .queues(tree)
        .build()
    )
    writes: dict[str, dict[str, Any]] = {}
    QueueStatusWriter(writes.__setitem__).write(snapshot, [])
    (a,) = writes["a"]["resources"]
    # Before: used 4, borrowed 2, two running jobs.
    assert (a["used"], a["borrowed"], a["held"]) == (2, 0, 2)
    assert writes["a"]["runningJobs"] == 1
    GPUQueueStatus.model_validate(writes["a"])
