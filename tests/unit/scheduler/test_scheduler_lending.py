"""Lending asleep standbys' GPUs in the scheduler's cycle (scheduler/lending.py), against an
in-memory cluster with the real core.

Aspects under test: a preemptible gang of lower priority is bound onto an asleep standby's GPU,
its binding names the standby, and the standby is first marked lent conditionally on the
resourceVersion the cache holds; a non-preemptible gang is never placed there; the next cycle
counts the GPU once (no over-commit, nothing else lands on it); a refused mark keeps the gang
waiting; a recalled standby, or one woken under its borrower, has the borrowing gang preempted
whole (cause recorded as a preemption); the lent mark is removed once no pod borrows; a
recalled standby is not lent again; the view leaves a borrower's lent GPUs to the standby and
keeps the borrower from being a preemption victim.
"""

from __future__ import annotations

from typing import Any

from scheduler_builders import NodeBuilder, PodBuilder
from scheduler_fakes import FakeBinder, load, scheduler

from gpufleet.model.contract import names
from gpufleet.model.contract.standby import ASLEEP
from gpufleet.model.gpus import load_catalog
from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.scheduler.cluster_view import build_view
from gpufleet.scheduler.loop import Scheduler


def serving(name: str, gpu: int, asleep: bool = False, **ann: str) -> dict[str, Any]:
    """A one-GPU serving replica (priority 5, not preemptible) bound on h0."""
    b = PodBuilder(name).gpus(1).bound("h0", str(gpu))
    b.annotate(names.PRIORITY, "5").annotate(names.PREEMPTIBLE, "false")
    if asleep:
        b.annotate(names.STANDBY, ASLEEP)
    for k, v in ann.items():
        b.annotate(k, v)
    pod = b.obj()
    pod["metadata"]["resourceVersion"] = f"rv-{name}"
    return pod


def training(name: str, size: int = 1, preemptible: bool = True) -> list[dict[str, Any]]:
    return [
        PodBuilder(f"{name}-{i}")
        .gpus(1)
        .gang(name, size, i)
        .annotate(names.PREEMPTIBLE, str(preemptible).lower())
        .obj()
        for i in range(size)
    ]


def fleet(*pending: dict[str, Any]) -> tuple[Scheduler, SchedulerCache, FakeBinder]:
    """A 4-GPU node: standbys asleep on GPUs 0 and 1, awake replicas on 2 and 3."""
    pods = [
        serving("web-0", 0, asleep=True),
        serving("web-1", 1, asleep=True),
        serving("web-2", 2),
        serving("web-3", 3),
        *pending,
    ]
    cache = SchedulerCache()
    load(cache, [NodeBuilder("h0", gpus=4).obj()], pods)
    binder = FakeBinder()
    return scheduler(cache, binder), cache, binder


def lent_marks(binder: FakeBinder) -> dict[str, dict[str, Any]]:
    return {
        k: b["metadata"] for k, b in binder.patched if names.LENT_TO in b["metadata"]["annotations"]
    }


def test_a_preemptible_gang_borrows_the_asleep_standbys_gpus() -> None:
    sched, _, binder = fleet(*training("train", 2))
    report = sched.run_cycle()
    assert report.bound == ["default/train"]
    bound = {k: r.annotations for k, r in binder.bound.items()}
    assert {a[names.ASSIGNED_GPUS] for a in bound.values()} == {"0", "1"}
    by_gpu = {a[names.ASSIGNED_GPUS]: a[names.BORROWS] for a in bound.values()}
    assert by_gpu == {"0": "default/web-0", "1": "default/web-1"}
    # Both standbys were marked lent to the gang first, each on the version the cache holds.
    marks = lent_marks(binder)
    assert set(marks) == {"default/web-0", "default/web-1"}
    assert marks["default/web-0"]["annotations"][names.LENT_TO] == "default/train"
    assert marks["default/web-0"]["resourceVersion"] == "rv-web-0"
    assert sorted(report.lent) == ["default/web-0->default/train", "default/web-1->default/train"]


def test_a_non_preemptible_gang_is_never_placed_on_a_lent_gpu() -> None:
    sched, _, binder = fleet(*training("rigid", 1, preemptible=False))
    report = sched.run_cycle()
    assert report.bound == [] and binder.bound == {} and binder.patched == []
    assert report.pending["default/rigid"].startswith("InsufficientFreeGpus")


def test_the_lent_gpu_counts_once_and_is_not_given_out_again() -> None:
    sched, cache, _ = fleet(*training("train", 2))
    sched.run_cycle()
    # The borrowers are assumed; more gangs arrive, one of which could borrow.
    for pod in training("late") + training("rigid", 1, preemptible=False):
        cache.pod_event("ADDED", pod)
    view_report = sched.run_cycle()
    assert view_report.bound == [] and set(view_report.pending) == {"default/late", "default/rigid"}
    state = cache.state()
    view = build_view(load_catalog(), state.nodes, state.pods, state.mig_configs)
    assert view.problems == ()
    assert set(view.loans) == {"default/train-0", "default/train-1"}
    holders = [r for g in view.snapshot.running for r in g.replicas]
    assert sorted(g for r in holders for g in r.gpus) == [0, 1, 2, 3]  # each GPU once


def test_a_refused_lent_mark_keeps_the_gang_waiting() -> None:
    sched, cache, binder = fleet(*training("train"))
    binder.refuse_patch = {"default/web-0": "409 Conflict", "default/web-1": "409 Conflict"}
    report = sched.run_cycle()
    assert report.bound == [] and binder.bound == {}
    assert "standby" in report.pending["default/train"]
    assert cache.assumed() == {}


def borrowed(sched: Scheduler, cache: SchedulerCache, binder: FakeBinder) -> None:
    """Run the first cycle and show its writes as the watch would."""
    sched.run_cycle()
    for key, request in binder.bound.items():
        pod = cache.pod(key)
        assert pod is not None
        pod = {**pod, "spec": {**pod["spec"], "nodeName": request.node}}
        pod["metadata"] = {
            **pod["metadata"],
            "annotations": {**pod["metadata"]["annotations"], **request.annotations},
        }
        pod["status"] = {"phase": "Running"}
        cache.pod_event("MODIFIED", pod)
    for key, body in binder.patched:
        pod = cache.pod(key)
        assert pod is not None
        annotations = {**pod["metadata"]["annotations"], **body["metadata"]["annotations"]}
        cache.pod_event(
            "MODIFIED", {**pod, "metadata": {**pod["metadata"], "annotations": annotations}}
        )
    binder.patched.clear()


def test_a_recalled_standby_gets_its_gpu_back_and_the_borrower_goes_whole() -> None:
    sched, cache, binder = fleet(*training("train", 2))
    borrowed(sched, cache, binder)
    # The operator recalls web-0 only: the whole gang goes, both pods.
    cache.pod_event(
        "MODIFIED",
        serving("web-0", 0, asleep=True, **{names.LENT_TO: "default/train", names.RECALL: "t"}),
    )
    report = sched.run_cycle()
    assert report.reclaimed == ["default/train"]
    assert sorted(binder.preempted) == [
        ("default/train-0", names.PREEMPTED_REASON),
        ("default/train-1", names.PREEMPTED_REASON),
    ]
    # Once its pods are gone the lent marks go; a recalled standby is not lent again.
    cache.pod_event("DELETED", cache.pod("default/train-0") or {})
    cache.pod_event("DELETED", cache.pod("default/train-1") or {})
    for pod in training("again"):
        cache.pod_event("ADDED", pod)
    report = sched.run_cycle()
    unlent = {
        k for k, b in binder.patched if b == {"metadata": {"annotations": {names.LENT_TO: None}}}
    }
    assert unlent == {"default/web-0", "default/web-1"}
    assert report.bound == ["default/again"]
    assert binder.bound["default/again-0"].annotations[names.BORROWS] == "default/web-1"


def test_a_standby_woken_under_its_borrower_has_the_borrower_preempted() -> None:
    sched, cache, binder = fleet(*training("train"))
    borrowed(sched, cache, binder)
    lender = next(k for k, r in binder.bound.items())
    gpu = binder.bound[lender].annotations[names.ASSIGNED_GPUS]
    name = f"web-{gpu}"
    cache.pod_event("MODIFIED", serving(name, int(gpu), **{names.LENT_TO: "default/train"}))
    report = sched.run_cycle()
    assert report.reclaimed == ["default/train"]
    # Meanwhile the standby keeps its GPU in the ledger; the borrower is the over-commit.
    state = cache.state()
    view = build_view(load_catalog(), state.nodes, state.pods, state.mig_configs)
    assert view.problems == ("default/train-0",)


def test_a_partly_borrowing_gang_is_no_preemption_victim() -> None:
    # A 2-pod gang: one pod on web-0's GPU (lent), one on the free GPU 3.
    pods = [
        serving("web-0", 0, asleep=True, **{names.LENT_TO: "default/train"}),
        serving("web-1", 1),
        serving("web-2", 2),
    ]
    train = training("train", 2)
    train[0]["spec"]["nodeName"] = "h0"
    train[0]["metadata"]["annotations"] |= {
        names.ASSIGNED_GPUS: "0",
        names.BORROWS: "default/web-0",
    }
    train[1]["spec"]["nodeName"] = "h0"
    train[1]["metadata"]["annotations"][names.ASSIGNED_GPUS] = "3"
    for p in train:
        p["status"]["phase"] = "Running"
    urgent = PodBuilder("urgent").gpus(1).annotate(names.PRIORITY, "9").obj()
    cache = SchedulerCache()
    load(cache, [NodeBuilder("h0", gpus=4).obj()], [*pods, *train, urgent])
    state = cache.state()
    view = build_view(load_catalog(), state.nodes, state.pods, state.mig_configs)
    assert view.loans == {"default/train-0": {0: "default/web-0"}}
    gang = next(g for g in view.snapshot.running if g.id == "default/train")
    assert [r.gpus for r in gang.replicas] == [(3,)] and not gang.preemptible
    binder = FakeBinder()
    report = scheduler(cache, binder).run_cycle()
    assert report.preempted == [] and binder.evicted == []


def test_reclaim_writes_are_not_repeated_while_the_watch_lags() -> None:
    sched, cache, binder = fleet(*training("train"))
    borrowed(sched, cache, binder)
    lender = next(iter(binder.bound.values())).annotations[names.BORROWS].split("/")[1]
    gpu = int(lender.split("-")[1])
    recalled = {names.LENT_TO: "default/train", names.RECALL: "t"}
    cache.pod_event("MODIFIED", serving(lender, gpu, asleep=True, **recalled))
    sched.run_cycle()
    sched.run_cycle()  # the watch has not shown the deletion yet
    assert binder.preempted == [("default/train-0", names.PREEMPTED_REASON)]
    cache.pod_event("DELETED", cache.pod("default/train-0") or {})
    sched.run_cycle()
    sched.run_cycle()  # nor the removed mark
    unlent = [k for k, b in binder.patched if names.LENT_TO in b["metadata"]["annotations"]]
    assert unlent == [f"default/{lender}"]
