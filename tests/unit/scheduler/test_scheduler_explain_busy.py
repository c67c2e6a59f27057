"""Pending reasons while bindings are in flight: a reason that has held for `explain_delay`
is written at once when no binding batch is in flight, but must hold `busy_explain_delay`
longer while one is (a burst of bindings goes first); once the batch is answered it is
written in the next cycle."""

from __future__ import annotations

from scheduler_builders import NodeBuilder, PodBuilder
from scheduler_fakes import Clock, FakeBinder, load, scheduler

from gpufleet.scheduler.cache import SchedulerCache


def test_reasons_wait_for_the_bindings_in_flight_then_are_written() -> None:
    clock = Clock()
    cache = SchedulerCache(clock=clock)
    pods = [PodBuilder(f"p{i}").gpus(1).obj() for i in range(3)]
    load(cache, [NodeBuilder("l0", "L4", 2).obj()], pods)
    binder = FakeBinder()
    binder.hold = True  # the API server has not answered the bindings yet
    sched = scheduler(cache, binder, clock=clock, explain_delay_s=1.0, busy_explain_delay_s=5.0)
    assert sched.run_cycle().sent == 2
    clock.t = 2.0  # p2's reason changes once the assumed GPUs count as taken
    sched.run_cycle()
    clock.t = 3.5  # held for longer than explain_delay, but bindings are in flight
    sched.run_cycle()
    assert binder.marked == {}
    clock.t = 4.0
    binder.release()  # answered: nothing in flight any more
    sched.run_cycle()
    assert list(binder.marked) == ["default/p2"]


def test_a_long_burst_delays_reasons_by_at_most_the_busy_delay() -> None:
    clock = Clock()
    cache = SchedulerCache(clock=clock)
    load(cache, [NodeBuilder("l0", "L4", 1).obj()], [PodBuilder("a").gpus(2).obj()])
    cache.pod_event("ADDED", PodBuilder("b").gpus(1).obj())
    binder = FakeBinder()
    binder.hold = True
    sched = scheduler(cache, binder, clock=clock, explain_delay_s=1.0, busy_explain_delay_s=5.0)
    assert sched.run_cycle().sent == 1  # b bound (in flight), a does not fit
    clock.t = 5.9
    sched.run_cycle()
    assert binder.marked == {}
    clock.t = 6.0
    sched.run_cycle()
    assert list(binder.marked) == ["default/a"]
