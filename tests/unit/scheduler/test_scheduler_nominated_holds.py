"""The live loop holds a nominated gang's planned GPUs while it waits (nominated.py): one 8-GPU
node; `high` (priority 10, 8 GPUs) evicts `v1` and `v2` (priority 1, 4 GPUs each). v1's pod
goes at once, v2's lingers in its grace period; a new gang `small` (4 GPUs) that would fit on
the GPUs v1 freed is not bound there, and high is bound on its planned GPUs once v2 is gone.
The hold ends with the nomination (its expiry), a planned placement a pod took meanwhile is
not bound (the gang is decided afresh), and the admin API's what-if sees the held GPUs. The
direct bind at the end of the wait passes the checks a placement of the core passes (taints,
CPU and memory, counted before the cycle's other placements), and MIG instances are held as
whole GPUs are."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import yaml
from scheduler_builders import NodeBuilder, PodBuilder, job_manifest
from scheduler_fakes import GREEDY, Clock, FakeBinder, load, scheduler
from test_scheduler_cycle import gang

from gpufleet.admin.live import JobStore, LiveFleet
from gpufleet.admin.steps import BesideScheduler
from gpufleet.admin.whatif import what_if
from gpufleet.core.snapshot import ReplicaPlacement
from gpufleet.model.contract import names
from gpufleet.model.gpus import load_catalog
from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.scheduler.loop import Scheduler
from gpufleet.scheduler.nominated import HELD_SUFFIX, hold, ready

TTL = 30.0


def _victim(name: str, gpus: str) -> dict[str, Any]:
    b = (
        PodBuilder(f"{name}-0")
        .gpus(len(gpus.split(",")))
        .gang(name, 1, 0)
        .annotate(names.PRIORITY, "1")
    )
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
    job = job_manifest("probe", 4, "H100-80GB")
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


# -- the direct bind at the end of a wait passes the checks a placement of the core passes ------


def _requests(pods: list[dict[str, Any]], cpu: str) -> list[dict[str, Any]]:
    for pod in pods:
        pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu}
    return pods


def _with_cpu(node: dict[str, Any], cpu: str) -> dict[str, Any]:
    node["status"]["allocatable"] = {"cpu": cpu, "memory": "1Ti", "ephemeral-storage": "1Ti"}
    return node


def _start_with_cpu(
    high_gpus: int = 8,
) -> tuple[Scheduler, SchedulerCache, FakeBinder, list[dict[str, Any]]]:
    """As `_start`, on a node with 10 CPUs, high asking 6 of them, and no `small`; with
    `high_gpus` 6, v1 and v2 hold 3 GPUs each and 2 stay free."""
    clock = Clock()
    cache = SchedulerCache(assume_ttl=TTL, clock=clock)
    if high_gpus == 8:
        victims = [_victim("v1", "0,1,2,3"), _victim("v2", "4,5,6,7")]
    else:
        victims = [_victim("v1", "0,1,2"), _victim("v2", "3,4,5")]
    high = _requests(gang("high", 1, high_gpus, **{names.PRIORITY: "10"}), "6")
    load(cache, [_with_cpu(NodeBuilder("h0").obj(), "10")], [*victims, *high])
    binder = FakeBinder()
    sched = scheduler(cache, binder, clock=clock)
    report = sched.run_cycle()
    assert sorted(report.preempted) == ["default/v1", "default/v2"] and binder.bound == {}
    cache.pod_event("DELETED", victims[0])
    cache.pod_event("MODIFIED", _terminating(victims[1]))
    assert sched.run_cycle().bound == []
    return sched, cache, binder, victims


def test_the_planned_placement_is_not_bound_on_a_node_now_short_of_cpu() -> None:
    sched, cache, binder, victims = _start_with_cpu()
    # Another scheduler's pod without GPUs takes 8 of the node's 10 CPUs during the wait.
    other = PodBuilder("web").scheduler("default-scheduler").bound("h0").obj()
    cache.pod_event("ADDED", _requests([other], "8")[0])
    cache.pod_event("DELETED", victims[1])
    report = sched.run_cycle()
    # Before: bound on its planned GPUs, asking the node for 6 CPUs it no longer had.
    assert report.bound == [] and binder.bound == {}
    assert "NodeResourcesFit" in report.pending["default/high"]


def test_the_planned_placement_is_not_bound_on_a_node_tainted_meanwhile() -> None:
    sched, cache, binder, victims = _start_with_cpu()
    node = _with_cpu(NodeBuilder("h0").obj(), "10")
    node["spec"]["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]
    cache.node_event("MODIFIED", node)
    cache.pod_event("DELETED", victims[1])
    report = sched.run_cycle()
    # Before: bound on the tainted node, which a placement of the core never is.
    assert report.bound == [] and binder.bound == {}
    assert "TaintToleration" in report.pending["default/high"]


def test_a_fresh_gang_placed_beside_a_planned_placement_counts_its_cpu() -> None:
    # high plans 6 GPUs; a gang arriving as its wait ends fits the other 2 but, with high's 6
    # CPUs bound in the same cycle, not the node's 10 CPUs: it waits.
    sched, cache, binder, victims = _start_with_cpu(high_gpus=6)
    late = _requests([PodBuilder("late").gpus(2).obj()], "6")[0]
    cache.pod_event("ADDED", late)
    cache.pod_event("DELETED", victims[1])
    report = sched.run_cycle()
    # Before: both bound, 12 CPUs asked of 10.
    assert report.bound == ["default/high"] and set(binder.bound) == {"default/high-0"}
    assert "NodeResourcesFit" in report.pending["default/pod:late"]


# -- MIG instances are held too -----------------------------------------------------------------


def _mig_pod(name: str, gang_name: str, size: int, rank: int, priority: str) -> PodBuilder:
    b = PodBuilder(name).mig("1g.10gb").gang(gang_name, size, rank)
    return b.annotate(names.PRIORITY, priority)


def test_mig_instances_a_victim_freed_are_held_and_bound_to_the_waiting_gang() -> None:
    # One H100 in 7 x 1g.10gb: f (5 instances, priority 20), v1 and v2 (one each, priority 1);
    # high (2 x 1g.10gb, priority 10) evicts v1 and v2.
    clock = Clock()
    cache = SchedulerCache(assume_ttl=TTL, clock=clock)
    entries = [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]
    cache.configmap_event(
        "ADDED",
        {
            "metadata": {"name": names.MIG_CONFIGMAP_NAME},
            "data": {names.MIG_CONFIGMAP_KEY: yaml.safe_dump({"mig-configs": {"m": entries}})},
        },
    )
    full = [
        _mig_pod(f"f-{i}", "f", 5, i, "20").bound("h0", gpus="0", mig=f"1g.10gb@{i}").obj()
        for i in range(5)
    ]
    victims = [
        _mig_pod(f"{v}-0", v, 1, 0, "1").bound("h0", gpus="0", mig=f"1g.10gb@{5 + i}").obj()
        for i, v in enumerate(("v1", "v2"))
    ]
    high = [_mig_pod(f"high-{i}", "high", 2, i, "10").obj() for i in range(2)]
    load(cache, [NodeBuilder("h0", gpus=1).mig("m").obj()], [*full, *victims, *high])
    binder = FakeBinder()
    sched = scheduler(cache, binder, clock=clock)
    report = sched.run_cycle()
    assert sorted(report.preempted) == ["default/v1", "default/v2"] and binder.bound == {}
    cache.pod_event("DELETED", victims[0])
    cache.pod_event("MODIFIED", _terminating(victims[1]))
    cache.pod_event("ADDED", PodBuilder("small").mig("1g.10gb").obj())
    report = sched.run_cycle()
    # Before: small was bound on the instance v1 freed.
    assert report.bound == [] and binder.bound == {}
    cache.pod_event("DELETED", victims[1])
    report = sched.run_cycle()
    assert report.bound == ["default/high"] and report.mig_requests == {}
    assigned = sorted(
        binder.bound[f"default/high-{i}"].annotations[names.ASSIGNED_MIG] for i in (0, 1)
    )
    assert assigned == ["1g.10gb@5", "1g.10gb@6"]
    assert "default/pod:small" in report.pending


# -- CPU, memory and ephemeral storage are held with the GPUs -------------------------------------


def test_a_gang_is_not_placed_on_the_cpu_a_waiting_preemptor_will_need() -> None:
    # high plans 6 GPUs and 6 of the node's 10 CPUs; while v2 lingers, late (2 GPUs, 6 CPUs)
    # would fit the 2 GPUs no one plans, but not beside high's CPUs: it waits, and high is
    # bound on its plan once v2 is gone.
    sched, cache, binder, victims = _start_with_cpu(high_gpus=6)
    cache.pod_event("ADDED", _requests([PodBuilder("late").gpus(2).obj()], "6")[0])
    report = sched.run_cycle()
    # Before: late was bound on GPUs 6-7 with 6 CPUs, and high, short of CPU once v2 was
    # gone, was decided afresh.
    assert report.bound == [] and binder.bound == {}
    assert "NodeResourcesFit: 1 node does not have the cpu" in report.pending["default/pod:late"]
    cache.pod_event("DELETED", victims[1])
    report = sched.run_cycle()
    assert report.bound == ["default/high"] and set(binder.bound) == {"default/high-0"}


def test_a_higher_priority_gang_may_take_the_cpu_held_for_a_waiting_one() -> None:
    # As kube-scheduler ignores a lower-priority pod's nomination: a gang that could evict
    # the held gang is not kept from the CPU planned for it.
    sched, cache, binder, _ = _start_with_cpu(high_gpus=6)
    late = PodBuilder("late").gpus(2).annotate(names.PRIORITY, "20").obj()
    cache.pod_event("ADDED", _requests([late], "6")[0])
    report = sched.run_cycle()
    assert report.bound == ["default/pod:late"]
    assert binder.bound["default/late"].annotations[names.ASSIGNED_GPUS] == "6,7"
