"""One scheduling cycle against an in-memory cluster: whole-gang binding with annotations,
no GPU handed out twice across cycles, rollback of a partly failed gang, pending reasons written
once, preemption of whole gangs with the preemptor waiting, MIG requests holding their gang,
gangs restarted off a failed node, partly bound gangs completed (or restarted when their rest
cannot be placed), binding batches answered after the cycle that sent them (pipelining), and
the workload estimate from the gangs seen so far, each counted once.
Decisions come from the real core (greedy engine)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
import yaml
from scheduler_builders import NodeBuilder, PodBuilder
from scheduler_fakes import Clock, FakeBinder, FakeMig, load, scheduler

from gpufleet.core.decision import Decision, GangPlacement
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import ReplicaPlacement, Snapshot
from gpufleet.model.contract import names
from gpufleet.model.contract.assignment import layout_annotation
from gpufleet.model.mig import MigPlacement
from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.scheduler.inflight import bind_annotations
from gpufleet.scheduler.loop import Scheduler
from gpufleet.scheduler.mig_request import config_entries


def make(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]], grace: float = 0.0, **options: Any
) -> tuple[Scheduler, SchedulerCache, FakeBinder, FakeMig]:
    cache = SchedulerCache()
    load(cache, nodes, pods)
    binder, mig = FakeBinder(), FakeMig()
    sched = scheduler(cache, binder, mig, node_failure_grace_s=grace, **options)
    return sched, cache, binder, mig


def gang(name: str, size: int, gpus: int, **ann: str) -> list[dict[str, Any]]:
    out = []
    for i in range(size):
        b = PodBuilder(f"{name}-{i}").gpus(gpus).gang(name, size, i)
        for k, v in ann.items():
            b.annotate(k, v)
        out.append(b.obj())
    return out


def test_binds_a_whole_gang_with_its_gpus() -> None:
    sched, _, binder, _ = make([NodeBuilder("h0").obj()], gang("g", 2, 4))
    report = sched.run_cycle()
    assert report.bound == ["default/g"]
    assert set(binder.bound) == {"default/g-0", "default/g-1"}
    gpus = [binder.bound[k].annotations[names.ASSIGNED_GPUS] for k in sorted(binder.bound)]
    assert sorted(gpus) == ["0,1,2,3", "4,5,6,7"]
    assert all(r.node == "h0" for r in binder.bound.values())
    assert binder.bound["default/g-0"].annotations[names.ASSIGNED_TYPE] == "H100-80GB"
    # CPU time of the cycle is reported next to the phases' wall times (benchmarks read both).
    assert 0 < report.cpu_s <= sum(report.timings.values()) + 0.05


def test_assumed_gpus_are_not_given_out_again() -> None:
    sched, cache, binder, _ = make([NodeBuilder("h0").obj()], gang("a", 1, 8))
    assert sched.run_cycle().bound == ["default/a"]
    # The watch has not shown the binding yet; a new gang arrives.
    cache.pod_event("ADDED", PodBuilder("b").gpus(1).obj())
    report = sched.run_cycle()
    assert report.bound == []
    assert report.pending["default/pod:b"].startswith("InsufficientFreeGpus")
    assert "default/b" not in binder.bound


def test_competing_gangs_one_bound_whole_other_pending() -> None:
    pods = gang("a", 2, 4) + gang("b", 2, 4)
    sched, _, binder, _ = make([NodeBuilder("h0").obj()], pods)
    report = sched.run_cycle()
    assert len(report.bound) == 1
    winner = report.bound[0].split("/")[1]
    loser = "b" if winner == "a" else "a"
    assert {k.split("/")[1] for k in binder.bound} == {f"{winner}-0", f"{winner}-1"}
    assert f"default/{loser}-0" in binder.marked and f"default/{loser}-1" in binder.marked


def test_partly_failed_gang_is_rolled_back() -> None:
    sched, cache, binder, _ = make([NodeBuilder("h0").obj()], gang("g", 2, 4))
    binder.fail = {"default/g-1"}
    report = sched.run_cycle()
    assert report.bound == [] and "default/g" in report.bind_failures
    assert cache.assumed() == {}
    assert [d[0] for d in binder.deleted] == ["default/g-0"]


def test_pending_reason_is_written_once() -> None:
    sched, cache, binder, _ = make([NodeBuilder("l0", "L4", 4).obj()], gang("g", 1, 8))
    sched.run_cycle()
    message = binder.marked["default/g-0"]
    assert message.startswith("ReplicaExceedsNode: ")
    # The pod now carries the condition (as the API server would show it).
    pod = PodBuilder("g-0").gpus(8).gang("g", 1, 0).obj()
    pod["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    ]
    cache.pod_event("MODIFIED", pod)
    calls = binder.mark_calls
    sched.run_cycle()
    assert binder.mark_calls == calls


def test_incomplete_gang_waits_quietly() -> None:
    sched, _, binder, _ = make([NodeBuilder("h0").obj()], gang("g", 3, 1)[:2])
    report = sched.run_cycle()
    assert report.bound == []
    assert report.pending["default/g"].startswith("GangNotReady: waiting for 1 more pod")
    assert binder.marked == {}  # no condition writes while the operator is still creating pods


def test_preemption_evicts_whole_gangs_and_preemptor_waits() -> None:
    low = [
        PodBuilder(f"low-{i}")
        .gpus(4)
        .gang("low", 2, i)
        .bound("h0", gpus="0,1,2,3" if i == 0 else "4,5,6,7")
        .annotate(names.PRIORITY, "1")
        .obj()
        for i in range(2)
    ]
    high = gang("high", 1, 8, **{names.PRIORITY: "10"})
    sched, cache, binder, _ = make([NodeBuilder("h0").obj()], low + high)
    report = sched.run_cycle()
    assert report.preempted == ["default/low"]
    assert sorted(d[0] for d in binder.evicted) == ["default/low-0", "default/low-1"]
    assert all(d[1] == names.PREEMPTED_REASON for d in binder.evicted)
    assert binder.bound == {} and binder.deleted == []
    # Victims still terminating: the preemptor keeps waiting and nothing more is evicted.
    binder.evicted.clear()
    report = sched.run_cycle()
    assert report.bound == [] and binder.evicted == []
    assert report.pending["default/high"].startswith("WaitingForPreemption")
    for pod in low:
        cache.pod_event("DELETED", pod)
    assert sched.run_cycle().bound == ["default/high"]


def test_victim_recreated_under_its_name_is_not_the_rest_of_a_partial_gang() -> None:
    def low(i: int, node: str | None) -> dict[str, Any]:
        b = PodBuilder(f"low-{i}").gpus(8).gang("low", 2, i).annotate(names.PRIORITY, "1")
        pod = (b.bound(node, gpus="0,1,2,3,4,5,6,7") if node else b).obj()
        if node is None:
            pod["metadata"]["uid"] = f"uid-recreated-low-{i}"
        return pod

    old = [low(0, "h0"), low(1, "h1")]
    high = gang("high", 1, 8, **{names.PRIORITY: "10"})
    sched, cache, binder, _ = make([NodeBuilder("h0").obj(), NodeBuilder("h1").obj()], old + high)
    assert sched.run_cycle().preempted == ["default/low"]
    # The operator recreates low-0 at once (new uid) while the watch still shows low-1 bound:
    # low-0 is not the rest of a partly bound gang to bind onto the GPUs the preemptor awaits.
    cache.pod_event("DELETED", old[0])
    cache.pod_event("ADDED", low(0, None))
    report = sched.run_cycle()
    assert report.bound == [] and report.restarted == [] and binder.bound == {}
    cache.pod_event("DELETED", old[1])
    cache.pod_event("ADDED", low(1, None))
    assert sched.run_cycle().bound == ["default/high"]
    assert set(binder.bound) == {"default/high-0"}  # the new low gang does not fit whole


def test_non_preemptible_and_foreign_work_is_never_evicted() -> None:
    foreign = PodBuilder("f").gpus(8).scheduler("default-scheduler").bound("h0").obj()
    high = gang("high", 1, 8, **{names.PRIORITY: "10"})
    sched, _, binder, _ = make([NodeBuilder("h0").obj()], [foreign, *high])
    report = sched.run_cycle()
    assert report.preempted == [] and binder.evicted == [] and binder.bound == {}


def test_mig_repartition_holds_the_gang_until_applied() -> None:
    node = NodeBuilder("a0", "A100-80GB", 2).mig("all-disabled")
    pod = PodBuilder("m").mig("3g.40gb").obj()
    sched, cache, binder, mig = make([node.obj()], [pod])
    report = sched.run_cycle()
    assert list(report.mig_requests) == ["a0"] and binder.bound == {}
    assert report.pending["default/pod:m"].startswith("WaitingForMIGReconfiguration")
    assert mig.requests[0][0] == "a0"
    layouts = mig.requests[0][1]
    config = report.mig_requests["a0"]
    # Still reconfiguring: the gang is not offered again, no second request.
    report = sched.run_cycle()
    assert report.mig_requests == {} and binder.bound == {}
    # The MIG manager applied it: the node now advertises the slices.
    cache.configmap_event(
        "MODIFIED",
        {
            "metadata": {"name": names.MIG_CONFIGMAP_NAME},
            "data": {
                names.MIG_CONFIGMAP_KEY: yaml.safe_dump(
                    {"mig-configs": {config: config_entries(layouts)}}
                )
            },
        },
    )
    done = (
        NodeBuilder("a0", "A100-80GB", 2)
        .mig(config)
        .annotate(names.MIG_LAYOUT_ANNOTATION, layout_annotation(config, layouts))
        .annotate("gpufleet.io/mig-config-applied", config)
    )
    cache.node_event("MODIFIED", done.obj())
    report = sched.run_cycle()
    assert report.bound == ["default/pod:m"]
    assert binder.bound["default/m"].annotations[names.ASSIGNED_MIG].startswith("3g.40gb@")


def test_node_asked_for_mig_takes_no_new_pods_before_the_watch_shows_the_request() -> None:
    # Chaos run: "h100-mig-0: 8 x nvidia.com/gpu in use, 4 allocatable". The cycle after a MIG
    # request ran on the node as the watch still showed it (whole GPUs, schedulable) and bound
    # whole-GPU pods to the GPUs being repartitioned.
    node = NodeBuilder("a0", "A100-80GB", 2).mig("all-disabled")
    sched, cache, binder, mig = make([node.obj()], [PodBuilder("m").mig("3g.40gb").obj()])
    report = sched.run_cycle()
    assert list(report.mig_requests) == ["a0"] and binder.bound == {}
    assert any(layout is not None for layout in mig.requests[0][1])  # a GPU gets slices
    # A whole-GPU pod arrives; the node's labels are not yet back from the watch.
    cache.pod_event("ADDED", PodBuilder("w").gpus(2).obj())
    report = sched.run_cycle()
    assert binder.bound == {}
    assert "default/pod:w" in report.pending


def test_gpu_of_a_victim_is_not_repartitioned_before_the_victim_is_gone() -> None:
    # Chaos run: one cycle preempted two whole-GPU gangs on h100-1 and asked at once for MIG on
    # their GPUs; the MIG manager applied it under the evicted pods still running
    # ("h100-1: 6 x nvidia.com/gpu in use, 4 allocatable").
    node = NodeBuilder("a0", "A100-80GB", 1).mig("all-disabled")
    low = PodBuilder("low").gpus(1).bound("a0", gpus="0").annotate(names.PRIORITY, "0").obj()
    high = PodBuilder("m").mig("3g.40gb").annotate(names.PRIORITY, "10").obj()
    sched, cache, binder, mig = make([node.obj()], [low, high])
    report = sched.run_cycle()
    assert report.preempted == ["default/pod:low"]
    assert [e[0] for e in binder.evicted] == ["default/low"]
    assert mig.requests == [] and binder.bound == {}
    assert report.pending["default/pod:m"].startswith("WaitingFor")
    cache.pod_event("DELETED", low)
    report = sched.run_cycle()  # the victim is gone: now the GPU is repartitioned
    assert [r[0] for r in mig.requests] == ["a0"] and list(report.mig_requests) == ["a0"]


def test_a_node_holding_a_pod_it_cannot_account_for_takes_no_new_pods() -> None:
    # Chaos run: after a leader change a bound pod sat on GPUs its node no longer offered
    # whole; the view dropped it, its GPUs looked free and another gang was bound to them.
    foreign = PodBuilder("f").gpus(3).scheduler("default-scheduler").bound("l0").obj()
    ours = PodBuilder("a").gpus(2).gang("a", 1, 0).bound("l0", gpus="0,1").obj()
    waiting = PodBuilder("w").gpus(2).obj()
    nodes = [NodeBuilder("l0", "L4", 4).obj(), NodeBuilder("l1", "L4", 4).obj()]
    sched, cache, binder, _ = make(nodes, [foreign, ours, waiting])
    report = sched.run_cycle()
    assert report.bound == ["default/pod:w"]
    assert binder.bound["default/w"].node == "l1"  # not GPUs 2-3 of l0, which f may hold
    # Once the over-commit is gone the node is open again.
    cache.pod_event("DELETED", foreign)
    cache.pod_event("ADDED", PodBuilder("v").gpus(2).obj())
    filler = PodBuilder("x").gpus(4).bound("l1", gpus="0,1,2,3").obj()
    cache.pod_event("ADDED", filler)
    report = sched.run_cycle()
    assert binder.bound["default/v"].node == "l0"


def test_gang_on_a_vanished_node_is_restarted_whole() -> None:
    pods = [
        PodBuilder("g-0").gpus(1).gang("g", 2, 0).bound("gone", gpus="0").obj(),
        PodBuilder("g-1").gpus(1).gang("g", 2, 1).bound("h0", gpus="0").obj(),
    ]
    sched, _, binder, _ = make([NodeBuilder("h0").obj()], pods)
    report = sched.run_cycle()
    assert report.restarted == ["default/g"]
    assert sorted((d[0], d[2]) for d in binder.deleted) == [
        ("default/g-0", True),
        ("default/g-1", True),
    ]


def test_not_ready_node_waits_for_the_grace_period() -> None:
    clock = Clock()
    pods = [PodBuilder("p").gpus(1).bound("h0", gpus="0").obj()]
    cache = SchedulerCache(clock=clock)
    # h1 Ready beside it: with every node NotReady no gang restarts (test_heal_disruption.py).
    load(cache, [NodeBuilder("h0").not_ready().obj(), NodeBuilder("h1").obj()], pods)
    binder = FakeBinder()
    sched = scheduler(cache, binder, node_failure_grace_s=10, clock=clock)
    assert sched.run_cycle().restarted == []
    clock.t = 11
    assert sched.run_cycle().restarted == ["default/pod:p"]


def crashed_gang(size: int = 2, bound: int = 1, gpus: int = 4, **ann: str) -> list[dict[str, Any]]:
    """A gang left partly bound by a crash between two bindings: ranks < `bound` on h0."""
    out = []
    for i in range(size):
        b = PodBuilder(f"g-{i}").gpus(gpus).gang("g", size, i)
        if i < bound:
            b.bound("h0", gpus=",".join(str(g) for g in range(i * gpus, (i + 1) * gpus)))
        for k, v in ann.items():
            b.annotate(k, v)
        out.append(b.obj())
    return out


def test_partly_bound_gang_is_completed_next_to_its_bound_pods() -> None:
    sched, _, binder, _ = make([NodeBuilder("h0").obj()], crashed_gang())
    report = sched.run_cycle()
    assert report.error is None and report.completed == ["default/g"]
    assert report.bound == ["default/g#rest"] and report.restarted == []
    assert binder.deleted == []
    assert binder.bound["default/g-1"].node == "h0"
    assert binder.bound["default/g-1"].annotations[names.ASSIGNED_GPUS] == "4,5,6,7"


def test_partly_bound_gang_whose_rest_does_not_fit_restarts_whole() -> None:
    other = PodBuilder("o").gpus(4).scheduler("default-scheduler").bound("h0").obj()
    sched, _, binder, _ = make([NodeBuilder("h0").obj()], [*crashed_gang(), other])
    report = sched.run_cycle()
    assert report.restarted == ["default/g"] and report.completed == []
    assert [(d[0], d[1]) for d in binder.deleted] == [("default/g-0", "GangIncomplete")]
    assert binder.bound == {}
    # The deletion is on its way: the next cycle neither restarts nor completes the gang again.
    binder.deleted.clear()
    report = sched.run_cycle()
    assert report.restarted == [] and binder.deleted == [] and binder.bound == {}


def test_same_node_gang_is_not_completed_on_another_node() -> None:
    other = PodBuilder("o").gpus(4).scheduler("default-scheduler").bound("h0").obj()
    nodes = [NodeBuilder("h0").obj(), NodeBuilder("h1").obj()]
    pods = [*crashed_gang(**{names.TOPOLOGY: "same-node"}), other]
    sched, _, binder, _ = make(nodes, pods)
    report = sched.run_cycle()
    assert report.restarted == ["default/g"] and binder.bound == {}


def test_partly_bound_gang_missing_pods_waits_then_restarts() -> None:
    clock = Clock()
    cache = SchedulerCache(clock=clock)
    load(cache, [NodeBuilder("h0").obj()], crashed_gang(size=3, bound=1, gpus=2)[:2])
    binder = FakeBinder()
    sched = scheduler(cache, binder, clock=clock, partial_grace_s=10)
    report = sched.run_cycle()  # rank 2 is missing: the operator may still be creating it
    assert report.restarted == [] and report.completed == [] and binder.bound == {}
    clock.t = 11
    report = sched.run_cycle()
    assert report.restarted == ["default/g"]
    assert [d[0] for d in binder.deleted] == ["default/g-0"]


def test_bindings_in_flight_longer_than_the_assume_ttl_keep_their_gpus() -> None:
    # 1,000-node run: 2,867 bindings sent in one cycle took longer than the 30 s TTL to write;
    # the assumptions expired first and a later cycle bound other gangs onto those GPUs.
    clock = Clock()
    cache = SchedulerCache(assume_ttl=30, clock=clock)
    load(cache, [NodeBuilder("h0").obj()], gang("a", 1, 8))
    binder = FakeBinder()
    binder.hold = True
    sched = scheduler(cache, binder, clock=clock)
    assert sched.run_cycle().sent == 1
    clock.t = 100  # still not answered
    cache.pod_event("ADDED", PodBuilder("b").gpus(1).obj())
    report = sched.run_cycle()
    assert report.sent == 0 and "default/pod:b" in report.pending
    binder.release()
    sched.run_cycle()
    clock.t = 120  # answered 20 s ago; the watch has not shown it yet: still counted
    assert sched.run_cycle().sent == 0
    clock.t = 131  # a TTL after the answer without the watch confirming: given up
    assert sched.run_cycle().sent == 1


def test_bindings_in_flight_hold_their_gpus_and_settle_later() -> None:
    sched, cache, binder, _ = make([NodeBuilder("h0").obj()], gang("a", 1, 8))
    binder.hold = True
    report = sched.run_cycle()
    assert report.bound == [] and len(binder.held) == 1  # sent, not yet answered
    cache.pod_event("ADDED", PodBuilder("b").gpus(1).obj())
    report = sched.run_cycle()  # pipelined: the next cycle runs while "a" is being bound
    assert report.pending["default/pod:b"].startswith("InsufficientFreeGpus")
    binder.release()
    assert sched.run_cycle().bound == ["default/a"]


def test_failure_answered_after_the_cycle_rolls_the_gang_back() -> None:
    sched, cache, binder, _ = make([NodeBuilder("h0").obj()], gang("g", 2, 4))
    binder.hold = True
    binder.fail = {"default/g-1"}
    sched.run_cycle()
    assert set(cache.assumed()) == {"default/g-0", "default/g-1"}
    binder.release()
    report = sched.run_cycle()
    assert "default/g" in report.bind_failures and report.bound == []
    assert [d[0] for d in binder.deleted] == ["default/g-0"]
    assert "default/g-1" not in cache.assumed()


def test_elastic_gang_binds_what_fits_between_min_and_max() -> None:
    busy = PodBuilder("busy").gpus(5).scheduler("default-scheduler").bound("h0").obj()
    elastic = [PodBuilder(f"e-{i}").gpus(1).gang("e", 2, i).obj() for i in range(6)]
    sched, _, binder, _ = make([NodeBuilder("h0").obj()], [busy, *elastic])
    assert sched.run_cycle().bound == ["default/e"]
    assert sorted(binder.bound) == ["default/e-0", "default/e-1", "default/e-2"]


def test_higher_priority_gang_shrinks_elastic_gangs_before_preempting_whole_ones() -> None:
    def bound_pod(name: str, gang: str, size: int, rank: int, gpu: int, prio: str) -> Any:
        return (
            PodBuilder(name)
            .gpus(1)
            .gang(gang, size, rank)
            .bound("l0", gpus=str(gpu))
            .annotate(names.PRIORITY, prio)
            .obj()
        )

    elastic = [bound_pod(f"e-{i}", "e", 1, i, i, "5") for i in range(3)]  # min 1, grown to 3
    whole = [bound_pod("w-0", "w", 1, 0, 3, "1")]
    high = gang("high", 1, 2, **{names.PRIORITY: "10", names.GPU_TYPES: "L4"})
    sched, _, binder, _ = make([NodeBuilder("l0", "L4", 4).obj()], elastic + whole + high)
    report = sched.run_cycle()
    assert sorted(report.preempted) == ["default/e#extra-1", "default/e#extra-2"]
    assert sorted(d[0] for d in binder.evicted) == ["default/e-1", "default/e-2"]


def test_binding_carries_gpus_mig_instance_and_power_cap() -> None:
    placement = GangPlacement(
        "default/g",
        "A100-80GB",
        (ReplicaPlacement("a0", (3,), MigPlacement(4, "3g.40gb")),),
        power_cap_w=251.4,
    )
    assert bind_annotations(placement, 0) == {
        names.ASSIGNED_GPUS: "3",
        names.ASSIGNED_TYPE: "A100-80GB",
        names.ASSIGNED_MIG: "3g.40gb@4",
        names.POWER_CAP: "251",
    }


def test_pending_reason_is_written_once_it_has_held_for_the_delay() -> None:
    clock = Clock()
    cache = SchedulerCache(clock=clock)
    load(cache, [NodeBuilder("l0", "L4", 4).obj()], gang("g", 1, 8))
    binder = FakeBinder()
    sched = scheduler(cache, binder, clock=clock, explain_delay_s=1.0)
    sched.run_cycle()
    assert binder.marked == {}  # new reason: it may be gone next cycle
    clock.t = 0.5
    sched.run_cycle()
    assert binder.marked == {}
    clock.t = 1.0
    sched.run_cycle()
    assert binder.marked["default/g-0"].startswith("ReplicaExceedsNode: ")


def test_no_cycle_while_the_lease_is_not_held() -> None:
    # A process paused past its Lease must not decide before it has renewed it.
    sched, cache, binder, _ = make([NodeBuilder("h0").obj()], gang("g", 2, 4), resync_s=0.05)
    leading = threading.Event()
    sched.may_act = leading.is_set
    stop = threading.Event()
    runner = threading.Thread(target=sched.run, args=(stop,))
    runner.start()
    try:
        cache.changed.set()
        time.sleep(0.5)
        assert sched.cycle == 0 and not binder.bound
        leading.set()
        deadline = time.monotonic() + 5
        while not binder.bound and time.monotonic() < deadline:
            time.sleep(0.02)
        assert set(binder.bound) == {"default/g-0", "default/g-1"}
    finally:
        stop.set()
        runner.join(10)


def test_the_core_sees_the_shapes_of_the_gangs_seen_so_far() -> None:
    seen: list[Snapshot] = []

    def decide(snapshot: Snapshot, gangs: Sequence[Gang], policy: Policy) -> Decision:
        seen.append(snapshot)
        return place(snapshot, gangs, policy)

    sched, cache, _, _ = make([NodeBuilder("h0").obj()], gang("a", 2, 4), decide=decide)
    sched.run_cycle()
    assert seen[-1].workload is not None
    assert [(s.shape.gpus, s.share) for s in seen[-1].workload.shapes] == [(4, 1.0)]
    # "a" waits on: it is one arrival, however many cycles it is offered.
    cache.pod_event("ADDED", PodBuilder("b").gpus(1).obj())
    sched.run_cycle()
    sched.run_cycle()
    shares = {s.shape.gpus: s.share for s in seen[-1].workload.shapes}
    assert set(shares) == {1, 4}
    # Two tasks of 4 GPUs, then one of 1 GPU (decayed counts over the window).
    assert shares[4] == pytest.approx(2 / 3, rel=1e-3)


def test_gang_spanning_a_gpu_being_repartitioned_waits_though_its_first_gpu_is_not() -> None:
    # Chaos run (600 s, 20 kills): "h100-mig-0: 8 x nvidia.com/gpu in use, 4 allocatable". The
    # core turned MIG GPUs of the node whole for a replica spanning them and whole GPUs before
    # them; the cycle asked for the layout and bound the replica at once, since only a
    # replica's first GPU was compared with the GPUs being repartitioned. Here: GPU 0 whole,
    # GPU 1 in MIG (its slices free), a pod of 2 whole GPUs.
    entries = [
        {"devices": [0], "mig-enabled": False},
        {"devices": [1], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
    ]
    node = NodeBuilder("h0", "H100-80GB", 2).mig("half")
    sched, cache, binder, mig = make([node.obj()], [PodBuilder("w").gpus(2).obj()])
    cache.configmap_event(
        "ADDED",
        {
            "metadata": {"name": names.MIG_CONFIGMAP_NAME},
            "data": {names.MIG_CONFIGMAP_KEY: yaml.safe_dump({"mig-configs": {"half": entries}})},
        },
    )
    report = sched.run_cycle()
    assert mig.requests == [("h0", [None, None])] and list(report.mig_requests) == ["h0"]
    assert binder.bound == {} and report.bound == []
    assert report.pending["default/pod:w"].startswith("WaitingForMIGReconfiguration")
    # Once the node has both GPUs whole, the pod is bound to them.
    config = report.mig_requests["h0"]
    entries = config_entries([None, None])
    cache.configmap_event(
        "MODIFIED",
        {
            "metadata": {"name": names.MIG_CONFIGMAP_NAME},
            "data": {names.MIG_CONFIGMAP_KEY: yaml.safe_dump({"mig-configs": {config: entries}})},
        },
    )
    done = NodeBuilder("h0", "H100-80GB", 2).mig(config)
    cache.node_event("MODIFIED", done.annotate("gpufleet.io/mig-config-applied", config).obj())
    assert sched.run_cycle().bound == ["default/pod:w"]
    assert binder.bound["default/w"].annotations[names.ASSIGNED_GPUS] == "0,1"
