"""What a moved gang's queue is charged while its old pods exit (mover.py `held`), in the live
loop over an in-memory cache and the real greedy core.

Two H100 nodes: n0 (4 GPUs) and n1 (8). Queues (nominal H100 GPUs): keeper 4, ones 0, lender
8, rival 4. keeper's `long` (4 GPUs on n1) checkpoints; ones' `v` borrows n0. For lender's
`wide` (all of n1) the decision reclaims v and moves long onto v's GPUs (a reclaim with moves,
same type). While long's old pods and v's exit, v stands for long on n0 (charged to keeper)
and long's old pods for wide, which waits for them (charged to lender): keeper is charged for
long once, at its nominal quota. Before, keeper was charged for long's old pods and for v
(8 of 4): it looked borrowing, and rival's gang reclaimed v (or long's old pods) from it. When
the gang moved for is outside every queue, long's old pods stay in keeper.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpufleet.core.decision import Decision, GangPlacement, Move, Preemption
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import ReplicaPlacement, Snapshot
from gpufleet.model.contract import names
from gpufleet.scheduler.cache import SchedulerCache
from tests.unit.scheduler.scheduler_builders import NodeBuilder, PodBuilder
from tests.unit.scheduler.scheduler_fakes import Clock, FakeBinder, load, scheduler

QUOTAS = {"keeper": 4, "ones": 0, "lender": 8, "rival": 4}
H100 = "H100-80GB"


def _queue(name: str) -> dict[str, Any]:
    quota = {"gpuType": H100, "nominal": QUOTAS[name]}
    return {"metadata": {"name": name}, "spec": {"quotas": [quota]}}


def _nodes() -> list[dict[str, Any]]:
    return [NodeBuilder("n0", H100, 4).obj(), NodeBuilder("n1", H100, 8).obj()]


def _pod(name: str, queue: str, gpus: int, on: tuple[str, str] | None = None) -> PodBuilder:
    b = PodBuilder(f"{name}-0").gang(name, 1, 0).gpus(gpus).annotate(names.QUEUE, queue)
    return b if on is None else b.bound(*on)


def _decide(snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
    """For wide: v reclaimed, long moved onto its GPUs; else the greedy core."""
    if not any(g.id == "default/wide" for g in pending):
        return place(snapshot, pending, policy)
    n1 = GangPlacement("default/wide", H100, (ReplicaPlacement("n1", tuple(range(8))),))
    n0 = GangPlacement("default/long", H100, (ReplicaPlacement("n0", (0, 1, 2, 3)),))
    return Decision(
        placements=(n1,),
        preemptions=(Preemption("default/v", "default/wide", reclaim=True),),
        moves=(Move("default/long", H100, n0, -60.0, for_gang="default/wide"),),
    )


def _moved_for(wide: dict[str, Any], *pending: dict[str, Any]) -> Any:
    """The scheduler, its cache and binder once long is moved for `wide`, with long's old
    pods and v's still exiting and the gangs `pending` come (the next cycle not run yet)."""
    long = _pod("long", "keeper", 4, ("n1", "0,1,2,3")).annotate(names.CHECKPOINT, "signal=2")
    v = _pod("v", "ones", 4, ("n0", "0,1,2,3"))
    cache, binder, clock = SchedulerCache(), FakeBinder(), Clock()
    load(cache, _nodes(), [long.obj(), v.obj(), wide])
    cache.replace_queues([_queue(q) for q in QUOTAS])
    cache.replace_namespaces([{"metadata": {"name": "default"}}])
    sched = scheduler(cache, binder, clock=clock, decide=_decide)
    report = sched.run_cycle()
    assert report.moved == ["default/long"] and report.preempted == ["default/v"]
    # The watch shows long's and v's pods deleting, still there.
    exiting = [long.obj(), v.obj()]
    for pod in exiting:
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    load(cache, _nodes(), [*exiting, wide, *pending])
    clock.t += 1
    return sched, cache, binder


def test_a_moved_gangs_queue_is_charged_once_while_its_old_pods_exit() -> None:
    rival = _pod("r", "rival", 4).obj()  # rival's gang comes
    sched, cache, binder = _moved_for(_pod("wide", "lender", 8).obj(), rival)
    binder.evicted.clear()
    report = sched.run_cycle()
    # keeper is within its nominal quota (long counted once): nothing of it may be reclaimed.
    assert report.preempted == [], report.pending.get("default/r")
    assert "default/long" in sched.mover.reserved, sched.mover.dropped
    assert "default/r" in report.pending and "default/r-0" not in binder.bound
    # The GPUQueue status still counts long's old pods and v in their own queues.
    view = sched.views.build(cache.state().nodes, cache.state().pods, {})
    shown = sched.mover.hold(view)
    queues = {g.id: g.queue for g in shown.snapshot.running}
    assert (queues["default/long"], queues["default/v"]) == ("lender", "keeper")
    counted = {g.id: g.queue for g in sched.mover.as_charged(shown.snapshot).running}
    assert (counted["default/long"], counted["default/v"]) == ("keeper", "ones")


def test_a_moved_gangs_old_pods_stay_in_its_queue_when_the_gang_it_was_moved_for_has_none() -> None:
    # Charged outside every queue, they would be anyone's to reclaim.
    wide = PodBuilder("wide-0").gang("wide", 1, 0).gpus(8).obj()
    sched, cache, _ = _moved_for(wide)
    view = sched.views.build(cache.state().nodes, cache.state().pods, {})
    queues = {g.id: g.queue for g in sched.mover.hold(view).snapshot.running}
    assert (queues["default/long"], queues["default/v"]) == ("keeper", "keeper")
