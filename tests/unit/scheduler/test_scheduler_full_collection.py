"""The scheduler's periodic full garbage collection (full_collection.py)."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator

import pytest

from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.scheduler.full_collection import FULL_COLLECTION_S, FullCollections
from gpufleet.scheduler.runtime import GC_THRESHOLDS
from tests.unit.scheduler.scheduler_fakes import FakeBinder, scheduler


class Cycle:
    """An object in a reference cycle with itself, as kopf's body views are."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def process_thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def test_a_full_pass_runs_once_a_period() -> None:
    now = [0.0]
    passes: list[float] = []
    collections = FullCollections(60.0, lambda: now[0], lambda: passes.append(now[0]))
    assert not collections.when_due()
    now[0] = 59.9
    assert not collections.when_due()
    now[0] = 60.0
    assert collections.when_due()
    now[0] = 100.0
    assert not collections.when_due()
    now[0] = 120.0
    assert collections.when_due()
    assert passes == [60.0, 120.0]


def test_a_period_below_or_at_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        FullCollections(0.0)


@pytest.mark.usefixtures("process_thresholds")
def test_a_dead_cycle_in_the_oldest_generation_is_freed_by_the_periodic_pass() -> None:
    obj = Cycle()
    ref = weakref.ref(obj)
    gc.collect(1)  # young passes while it lives: it moves to the oldest generation
    del obj
    gc.collect(1)  # what the process's young passes do: the dead cycle stays
    assert ref() is not None
    now = [0.0]
    collections = FullCollections(FULL_COLLECTION_S, lambda: now[0])
    now[0] = FULL_COLLECTION_S
    assert collections.when_due()
    assert ref() is None


def test_the_scheduler_loop_runs_the_due_pass_between_cycles() -> None:
    now = [0.0]
    cache = SchedulerCache(clock=lambda: now[0])
    sched = scheduler(cache, FakeBinder(), clock=lambda: now[0], resync_s=0.01, debounce_s=0.0)
    passes: list[float] = []
    stop = threading.Event()

    def collect() -> None:
        passes.append(now[0])
        stop.set()

    sched.collections = FullCollections(60.0, lambda: now[0], collect)
    now[0] = 60.0
    thread = threading.Thread(target=sched.run, args=(stop,))
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    assert passes == [60.0]
    assert sched.cycle >= 1
