"""The live workload estimate kept across restarts (arrivals.py with a store).

Aspects: a tracker starts from what the store kept, under its own window; it writes the counts
when they changed and the period has passed, not every cycle, and not while nothing new arrived;
a failed write neither stops the cycle nor is retried before the period; a store with nothing
kept starts an empty estimate. The ConfigMap adapter itself is tested against the sandbox's API
server (tests/integration/scheduler/test_estimate_store.py).
"""

from __future__ import annotations

from gpufleet.core.workload import ArrivalCounts
from gpufleet.scheduler.arrivals import ArrivalTracker
from tests.unit.core.placement_builders import gang

H100, T4 = "H100-80GB", "T4"


class FakeStore:
    """Records what is written; `fail` makes writes raise."""

    def __init__(self, kept: ArrivalCounts | None = None) -> None:
        self.kept = kept
        self.writes: list[ArrivalCounts] = []
        self.fail = False

    def load(self) -> ArrivalCounts | None:
        return self.kept

    def save(self, counts: ArrivalCounts) -> None:
        if self.fail:
            raise ConnectionError("API server unreachable")
        self.writes.append(counts)
        self.kept = counts


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_new_tracker_starts_from_what_was_kept() -> None:
    before = ArrivalCounts(500.0).observed_gangs([gang("a", H100, gpus=8)])
    tracker = ArrivalTracker(window=2000.0, store=FakeStore(before))
    assert tracker.counts.window == 2000.0
    assert dict(tracker.counts.counts) == dict(before.counts)
    assert [s.shape.gpus for s in tracker.counts.estimate().shapes] == [8]


def test_nothing_kept_starts_empty() -> None:
    assert ArrivalTracker(store=FakeStore()).counts.estimate().shapes == ()


def test_writes_when_changed_and_due() -> None:
    store, clock = FakeStore(), Clock()
    tracker = ArrivalTracker(store=store, save_every_s=60.0, clock=clock)
    tracker.observe([gang("a", T4)])
    assert len(store.writes) == 1  # the first change is written at once
    clock.now = 30.0
    tracker.observe([gang("b", T4, gpus=2)])
    assert len(store.writes) == 1  # not before the period
    clock.now = 61.0
    tracker.observe([])  # nothing new this cycle, but an unsaved change is due
    assert len(store.writes) == 2
    assert store.writes[-1] == tracker.counts
    clock.now = 200.0
    tracker.observe([gang("a", T4)])  # seen before: no change, nothing to write
    assert len(store.writes) == 2


def test_a_failed_write_is_retried_a_period_later() -> None:
    store, clock = FakeStore(), Clock()
    store.fail = True
    tracker = ArrivalTracker(store=store, save_every_s=60.0, clock=clock)
    tracker.observe([gang("a", T4)])  # raises inside: the cycle goes on
    store.fail = False
    clock.now = 10.0
    tracker.observe([])
    assert store.writes == []
    clock.now = 61.0
    tracker.observe([])
    assert store.writes == [tracker.counts]
