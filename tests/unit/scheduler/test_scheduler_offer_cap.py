"""Offering identical gangs (`offer.cap_identical`): past `cap_identical_above` offered
gangs, the core sees only as many of a set of identical gangs as could fit plus one; the gangs
bound are the same as without the cap, the ones held back carry the core's reason for the last
one offered, no GPU is handed out twice across cycles as capacity appears, and gangs that could
preempt, MIG gangs and small batches are offered whole."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler_builders import NodeBuilder, PodBuilder
from scheduler_fakes import FakeBinder, load, scheduler

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import Snapshot
from gpufleet.model.contract import names
from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.scheduler.loop import Scheduler


class SpyDecide:
    """The real core, remembering how many gangs each decision was offered."""

    def __init__(self) -> None:
        self.offered: list[int] = []

    def __call__(self, snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
        self.offered.append(len(pending))
        return place(snapshot, pending, policy)


def make(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]], cap: int = 64
) -> tuple[Scheduler, SchedulerCache, FakeBinder, SpyDecide]:
    cache = SchedulerCache()
    load(cache, nodes, pods)
    binder, spy = FakeBinder(), SpyDecide()
    sched = scheduler(cache, binder, decide=spy, cap_identical_above=cap)
    return sched, cache, binder, spy


def singles(n: int, **ann: str) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        b = PodBuilder(f"p-{i:03d}").gpus(1)
        for k, v in ann.items():
            b.annotate(k, v)
        out.append(b.obj())
    return out


def test_only_what_fits_plus_one_is_offered_and_the_rest_share_its_reason() -> None:
    sched, _, binder, spy = make([NodeBuilder("l0", "L4", 8).obj()], singles(100))
    report = sched.run_cycle()
    assert spy.offered == [9]
    assert sorted(binder.bound) == [f"default/p-{i:03d}" for i in range(8)]
    last_offered = report.pending["default/pod:p-008"]
    assert last_offered.startswith("CapacityGivenToOtherGangs")  # the core's own reason
    assert len(report.pending) == 92
    assert set(report.pending.values()) == {last_offered}


def test_same_gangs_bound_as_without_the_cap() -> None:
    nodes = [NodeBuilder("l0", "L4", 8).obj(), NodeBuilder("l1", "L4", 4).obj()]
    capped, _, capped_binder, _ = make(nodes, singles(100))
    whole, _, whole_binder, spy = make(nodes, singles(100), cap=10**6)
    a, b = capped.run_cycle(), whole.run_cycle()
    assert spy.offered == [100]
    assert capped_binder.bound == whole_binder.bound
    assert a.pending == b.pending


def test_capacity_appearing_over_cycles_never_double_books() -> None:
    nodes = [NodeBuilder(f"l{i}", "L4", 8).cordoned().obj() for i in range(4)]
    sched, cache, binder, spy = make(nodes, singles(40), cap=8)
    binder.hold = True  # bindings answered later (pipelined), assumptions hold the GPUs
    assert sched.run_cycle().sent == 0 and spy.offered == [1]
    for i in range(4):
        cache.node_event("MODIFIED", NodeBuilder(f"l{i}", "L4", 8).obj())
        assert sched.run_cycle().sent == 8
    binder.release()
    sched.run_cycle()
    assert len(binder.bound) == 32
    taken = [(r.node, r.annotations[names.ASSIGNED_GPUS]) for r in binder.bound.values()]
    assert len(set(taken)) == len(taken)


def test_gangs_that_could_preempt_are_all_offered() -> None:
    running = [PodBuilder(f"low-{i}").gpus(1).bound("l0", gpus=str(i)).obj() for i in range(8)]
    sched, _, _, spy = make(
        [NodeBuilder("l0", "L4", 8).obj()], running + singles(80, **{names.PRIORITY: "5"})
    )
    sched.run_cycle()
    assert spy.offered == [80]


def test_small_batches_and_mig_gangs_are_offered_whole() -> None:
    sched, _, _, spy = make([NodeBuilder("l0", "L4", 1).obj()], singles(64))
    sched.run_cycle()
    mig = [PodBuilder(f"m-{i:03d}").mig("1g.10gb").obj() for i in range(80)]
    sched2, _, _, spy2 = make([NodeBuilder("a0", "A100-80GB", 1).obj()], mig)
    sched2.run_cycle()
    assert spy.offered == [64] and spy2.offered == [80]
