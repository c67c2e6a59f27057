"""A gang of higher priority may take the GPUs held for a waiting gang (nominated.py), as
kube-scheduler lets a pod be scheduled onto resources nominated for a lower-priority pod: the
hold is preemptible while the gang waits; taking it evicts nothing, the held gang says who took
its GPUs and is decided again once its victims are gone, and nothing is ever bound twice on one
GPU. The scene is test_scheduler_nominated_holds' (`_start`): high (priority 10, 8 GPUs) waits
for v2 while the 4 GPUs v1 freed are held for it."""

from __future__ import annotations

from typing import Any

from scheduler_builders import NodeBuilder, PodBuilder, job_manifest
from scheduler_fakes import GREEDY
from test_scheduler_cycle import gang
from test_scheduler_nominated_holds import _start

from gpufleet.admin.live import JobStore, LiveFleet
from gpufleet.admin.steps import BesideScheduler
from gpufleet.admin.whatif import what_if
from gpufleet.core.decision import Decision, GangPlacement, Preemption
from gpufleet.core.snapshot import ReplicaPlacement
from gpufleet.model.contract import names
from gpufleet.model.gpus import load_catalog
from gpufleet.scheduler.nominated import HELD_SUFFIX, TakenHold, taken


def _gpus(binder: Any) -> list[tuple[str, str]]:
    """(node, GPU) of every binding made, each GPU once per binding."""
    return [
        (b.node, g)
        for b in binder.bound.values()
        for g in b.annotations[names.ASSIGNED_GPUS].split(",")
    ]


def test_a_higher_priority_gang_takes_the_held_gpus_without_evicting() -> None:
    sched, cache, binder, _, victims = _start()
    cache.pod_event("DELETED", PodBuilder("small").gpus(4).obj())
    for pod in gang("urgent", 1, 4, **{names.PRIORITY: "20"}):
        cache.pod_event("ADDED", pod)
    report = sched.run_cycle()
    # Before: the hold was not preemptible; urgent evicted v2 again and waited for it.
    assert report.bound == ["default/urgent"] and report.preempted == []
    assert binder.bound["default/urgent-0"].annotations[names.ASSIGNED_GPUS] == "0,1,2,3"
    message = report.pending["default/high"]
    assert message.startswith("WaitingForPreemption: higher-priority gang default/urgent took")
    assert cache.state().nominations["default/high"].placement is None
    # Once v2 is gone high is decided afresh: 4 GPUs free, it needs 8 (urgent is above it).
    cache.pod_event("DELETED", victims[1])
    report = sched.run_cycle()
    assert report.bound == [] and report.preempted == []
    assert report.pending["default/high"].startswith("InsufficientFreeGpus")
    assert len(_gpus(binder)) == len(set(_gpus(binder))) == 4


def test_a_gang_of_the_same_priority_does_not_take_the_held_gpus() -> None:
    sched, cache, binder, _, _ = _start()
    cache.pod_event("DELETED", PodBuilder("small").gpus(4).obj())
    for pod in gang("peer", 1, 4, **{names.PRIORITY: "10"}):
        cache.pod_event("ADDED", pod)
    report = sched.run_cycle()
    assert report.bound == [] and binder.bound == {}
    assert report.pending["default/high"].startswith("WaitingForPreemption: waiting for")
    assert cache.state().nominations["default/high"].placement is not None


def test_a_hold_whose_wait_ended_is_bound_not_taken() -> None:
    # The hold is bound in the cycle its wait ends: a higher-priority gang arriving then does
    # not get its GPUs too (nothing bound twice).
    sched, cache, binder, _, victims = _start()
    cache.pod_event("DELETED", PodBuilder("small").gpus(4).obj())
    for pod in gang("urgent", 1, 4, **{names.PRIORITY: "20"}):
        cache.pod_event("ADDED", pod)
    cache.pod_event("DELETED", victims[1])
    report = sched.run_cycle()
    assert report.bound == ["default/high"] and "default/urgent" not in binder.bound
    assert len(_gpus(binder)) == len(set(_gpus(binder))) == 8


def test_a_taker_waiting_for_victims_of_its_own_keeps_the_gpus_held() -> None:
    # urgent needs the whole node: it takes high's hold (GPUs 0-3) and waits for v2 itself;
    # the 8 GPUs are then held for urgent, and bound to it alone once v2 is gone.
    sched, cache, binder, _, victims = _start()
    cache.pod_event("DELETED", PodBuilder("small").gpus(4).obj())
    for pod in gang("urgent", 1, 8, **{names.PRIORITY: "20"}):
        cache.pod_event("ADDED", pod)
    report = sched.run_cycle()
    assert report.bound == [] and "default/high" not in report.preempted
    assert report.pending["default/high"].startswith(
        "WaitingForPreemption: higher-priority gang default/urgent took"
    )
    nominations = cache.state().nominations
    assert nominations["default/high"].placement is None
    assert nominations["default/urgent"].placement is not None
    cache.pod_event("DELETED", victims[1])
    report = sched.run_cycle()
    assert report.bound == ["default/urgent"] and set(binder.bound) == {"default/urgent-0"}


def test_taken_removes_the_holds_from_preemptions_and_waits() -> None:
    hold = f"ns/low{HELD_SUFFIX}"
    rep = (ReplicaPlacement("n", (0,)),)
    decision = Decision(
        placements=(
            GangPlacement("ns/hi", "T4", rep),
            GangPlacement("ns/w", "T4", rep, waits_for=(hold, "ns/v")),
        ),
        preemptions=(Preemption(hold, "ns/hi", reclaim=True), Preemption("ns/v", "ns/hi")),
    )
    out, holds = taken(decision)
    assert out.preemptions == (Preemption("ns/v", "ns/hi"),)
    assert [p.waits_for for p in out.placements] == [(), ("ns/v",)]
    assert holds == [TakenHold("ns/low", "ns/hi", True, ("ns/w",))]
    assert taken(Decision(preemptions=(Preemption("ns/v", "ns/hi"),)))[1] == []


def test_the_what_if_places_a_higher_priority_probe_on_held_gpus_evicting_nothing() -> None:
    sched, cache, _, _, _ = _start()
    cache.pod_event("DELETED", PodBuilder("small").gpus(4).obj())
    live = LiveFleet(cache, JobStore(), load_catalog(), steps=BesideScheduler(sched))
    (outcome,) = what_if(
        live, job_manifest("probe", 4, "H100-80GB", priority=20), GREEDY, "greedy"
    ).gangs
    assert outcome.placed and outcome.preempts == [] and outcome.waits_for == []
    assert [(r.node, r.gpus) for r in outcome.replicas] == [("h0", [0, 1, 2, 3])]
    (outcome,) = what_if(
        live, job_manifest("probe", 4, "H100-80GB", priority=10), GREEDY, "greedy"
    ).gangs
    assert not outcome.placed
    # The what-if changed nothing: the GPUs are still held for high.
    assert cache.state().nominations["default/high"].placement is not None


def test_a_victim_in_its_grace_period_is_not_evicted_again_by_a_gang_below_the_waiter() -> None:
    # mid (priority 5) is above v2 (1) but below high (10), for whom v2's GPUs are planned.
    sched, cache, binder, _, victims = _start()
    cache.pod_event("DELETED", PodBuilder("small").gpus(4).obj())
    for pod in gang("mid", 1, 4, **{names.PRIORITY: "5"}):
        cache.pod_event("ADDED", pod)
    report = sched.run_cycle()
    # Before: mid evicted v2 again and waited for it; once v2 was gone, high and mid were
    # both bound on GPUs 4-7.
    assert report.preempted == [] and report.bound == []
    cache.pod_event("DELETED", victims[1])
    report = sched.run_cycle()
    assert report.bound == ["default/high"] and set(binder.bound) == {"default/high-0"}
    assert len(_gpus(binder)) == len(set(_gpus(binder))) == 8


def test_of_two_plans_sharing_gpus_only_the_higher_priority_one_is_held() -> None:
    sched, cache, binder, _, victims = _start()
    cache.pod_event("DELETED", PodBuilder("small").gpus(4).obj())
    urgent = gang("urgent", 1, 4, **{names.PRIORITY: "20"})
    for pod in urgent:
        cache.pod_event("ADDED", pod)
    plan = GangPlacement("default/urgent", "H100-80GB", (ReplicaPlacement("h0", (4, 5, 6, 7)),))
    # As if urgent had evicted v2 again for GPUs 4-7, which high's plan holds too.
    cache.nominate("default/urgent", frozenset({"default/v2-0"}), placement=plan)
    cache.pod_event("DELETED", victims[1])
    report = sched.run_cycle()
    # Before: both bound on GPUs 4-7.
    assert report.bound == ["default/urgent"] and set(binder.bound) == {"default/urgent-0"}
    assert report.pending["default/high"].startswith("InsufficientFreeGpus")


def test_a_taker_takes_an_exiting_victim_before_cutting_a_running_gang_short() -> None:
    # urgent (priority 20, 8 GPUs) may take high's hold (GPUs 0-3) with v2's GPUs (4-7, v2
    # exiting, shown at high's priority 10), or evict peer (priority 10, 4 GPUs) on h1 and
    # take the 4 GPUs free there. Evicting v2 again stops nothing sooner (it is going
    # anyway): urgent takes h0 and peer runs on.
    sched, cache, _, _, _ = _start()
    cache.pod_event("DELETED", PodBuilder("small").gpus(4).obj())
    cache.node_event("ADDED", NodeBuilder("h1").obj())
    peer = PodBuilder("peer-0").gpus(4).gang("peer", 1, 0).annotate(names.PRIORITY, "10")
    cache.pod_event("ADDED", peer.bound("h1", gpus="0,1,2,3").obj())
    for pod in gang("urgent", 1, 8, **{names.PRIORITY: "20"}):
        cache.pod_event("ADDED", pod)
    report = sched.run_cycle()
    # Before: an exiting victim counted the work of a running one; urgent evicted peer.
    assert report.preempted == ["default/v2"] and report.bound == []
    plan = cache.state().nominations["default/urgent"].placement
    assert plan is not None and {r.node for r in plan.replicas} == {"h0"}
    assert report.pending["default/high"].startswith(
        "WaitingForPreemption: higher-priority gang default/urgent took"
    )
