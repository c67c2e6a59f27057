"""The live loop holds a nominated gang's planned GPUs while it waits (nominated.py): one 8-GPU
node; `high` (priority 10, 8 GPUs) evicts `v1` and `v2` (priority 1, 4 GPUs each). v1's pod
goes at once, v2's lingers in its grace period; a new gang `small` (4 GPUs) that would fit on
the GPUs v1 freed is not bound there, and high is bound on its planned GPUs once v2 is gone.
The hold ends with the nomination (its expiry), a planned placement a pod took meanwhile is
not bound (the gang is decided afresh), and the admin API's what-if sees the held GPUs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduler_builders import NodeBuilder, PodBuilder
from scheduler_fakes import GREEDY, Clock, FakeBinder, load, scheduler
from test_scheduler_cycle import gang

from gpufleet.admin.live import JobStore, LiveFleet
from gpufleet.admin.steps import BesideScheduler
from gpufleet.admin.whatif import what_if
from gpufleet.core.snapshot import ReplicaPlacement
from gpufleet.model.contract import names
from gpufleet.model.gpus import load_catalog
from gpufleet.model.trainingjob import TrainingJob
from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.scheduler.loop import Scheduler
from gpufleet.scheduler.nominated import HELD_SUFFIX, hold, ready

TTL = 30.0


def _victim(name: str, gpus: str) -> dict[str, Any]:
    b = PodBuilder(f"{name}-0").gpus(4).gang(name, 1, 0).annotate(names.PRIORITY, "1")
    return b.bound("h0", gpus=gpus).obj()


def _terminating(pod: dict[str, Any]) -> dict[str, Any]:
    """`pod` as the watch shows it in its grace period (or held by a finalizer)."""
    pod["metadata"]["deletionTimestamp"] = "2026-12-05T16:00:00Z"
    return pod


def _start() -> tuple[Scheduler, SchedulerCache, FakeBinder, Clock, list[dict[str, Any]]]:
    """high has evicted v1 and v2 for itself; v1's pod is gone, v2's lingers; small arrives."""
    clock = Clock()
    cache = SchedulerCache(assume_ttl=TTL, clock=clock)
    victims = [_victim("v1", "0,1,2,3"), _victim("v2", "4,5,6,7")]
    high = gang("high", 1, 8, **{names.PRIORITY: "10"})
    load(cache, [NodeBuilder("h0").obj()], [*victims, *high])
    binder = FakeBinder()
    sched = scheduler(cache, binder, clock=clock)
    report = sched.run_cycle()
    assert sorted(report.preempted) == ["default/v1", "default/v2"] and binder.bound == {}
    cache.pod_event("DELETED", victims[0])
    cache.pod_event("MODIFIED", _terminating(victims[1]))
    cache.pod_event("ADDED", PodBuilder("small").gpus(4).obj())
    return sched, cache, binder, clock, victims


def test_a_gang_is_not_bound_on_gpus_a_waiting_preemptor_freed() -> None:
    sched, cache, binder, _, victims = _start()
    report = sched.run_cycle()
    # Before: small was bound on GPUs 0-3, and high found them taken once v2 was gone.
    assert report.bound == [] and binder.bound == {}
    assert report.pending["default/pod:small"].startswith("InsufficientFreeGpus")
    assert report.pending["default/high"].startswith("WaitingForPreemption")
    cache.pod_event("DELETED", victims[1])
    report = sched.run_cycle()
    assert report.bound == ["default/high"]
    assert binder.bound["default/high-0"].node == "h0"
    assert binder.bound["default/high-0"].annotations[names.ASSIGNED_GPUS] == "0,1,2,3,4,5,6,7"
    assert "default/pod:small" in report.pending


def test_the_hold_ends_when_the_nomination_expires() -> None:
    sched, cache, _, clock, _ = _start()

    def held() -> list[tuple[str, tuple[int, ...]]]:
        state = cache.state()
        view = hold(sched.views.build_state(state), state.nominations)
        return [
            (g.id, r.gpus)
            for g in view.snapshot.running
            if g.id.endswith(HELD_SUFFIX)
            for r in g.replicas
        ]

    assert held() == [(f"default/high{HELD_SUFFIX}", (0, 1, 2, 3))]
    clock.t += TTL + 1  # v2 still lingers: the nomination expires, and the hold with it
    assert "default/high" not in cache.state().nominations
    assert held() == []


def test_a_planned_placement_taken_meanwhile_is_not_bound() -> None:
    sched, cache, binder, _, victims = _start()
    cache.pod_event("DELETED", PodBuilder("small").gpus(4).obj())
    foreign = PodBuilder("foreign").gpus(1).scheduler("default-scheduler").bound("h0", gpus="0")
    cache.pod_event("ADDED", foreign.obj())  # another scheduler's pod on a held GPU
    cache.pod_event("DELETED", victims[1])
    report = sched.run_cycle()
    # Decided afresh: 7 GPUs free, high needs 8.
    assert report.bound == [] and binder.bound == {}
    assert report.pending["default/high"].startswith("InsufficientFreeGpus")


def test_the_what_if_beside_the_scheduler_sees_the_held_gpus() -> None:
    sched, cache, _, _, _ = _start()
    cache.pod_event("DELETED", PodBuilder("small").gpus(4).obj())  # the probe alone
    job = TrainingJob.model_validate(
        {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "TrainingJob",
            "metadata": {"name": "probe", "namespace": "ns"},
            "spec": {
                "replicas": 1,
                "gpusPerReplica": 4,
                "gpuTypes": [{"name": "H100-80GB"}],
                "template": {"spec": {"containers": [{"name": "m", "image": "x"}]}},
            },
        }
    )
    live = LiveFleet(cache, JobStore(), load_catalog(), steps=BesideScheduler(sched))
    (outcome,) = what_if(live, job, GREEDY, "greedy").gangs
    # Before: placed on the GPUs v1 freed.
    assert not outcome.placed and outcome.waiting is not None
    assert outcome.waiting.reason == "InsufficientFreeGpus"


def test_a_gang_with_more_pods_than_planned_replicas_is_decided_afresh() -> None:
    # An elastic gang placed with fewer replicas than it has pods (or the rest of one) is not
    # bound to its plan once its wait ends: nothing is held from the core deciding it then.
    sched, cache, _, _, victims = _start()
    cache.pod_event("DELETED", victims[1])
    state = cache.state()
    (nomination,) = state.nominations.values()
    assert nomination.ready and nomination.placement is not None
    whole = nomination.placement.replicas[0]
    halves = (ReplicaPlacement("h0", whole.gpus[:4]), ReplicaPlacement("h0", whole.gpus[4:]))
    split = replace(nomination, placement=replace(nomination.placement, replicas=halves))
    view = sched.views.build_state(state)
    assert hold(view, {"default/high": nomination}).snapshot.running[-1].id.endswith(HELD_SUFFIX)
    shown = hold(view, {"default/high": split})
    assert not any(g.id.endswith(HELD_SUFFIX) for g in shown.snapshot.running)
    offered = [pg for pg in view.pending if pg.gang.id == "default/high"]
    assert ready(shown, {"default/high": split}, offered)[1] == []
