"""The what-if's stateful steps (scheduler/stateful_steps.py, admin/steps.py), over an in-memory
cache, a real `Scheduler` (the loop's fakes) and the real greedy core:

- the order: `remembered` and `offer` take the steps as `run_cycle` does (the loop calls them);
- beside a scheduler, the GPUs reserved for a gang it moved are held: a gang that needs them
  waits, and the reservation is neither dropped nor taken by the what-if;
- beside a scheduler, a gang whose moved placement's reservation is dropped (its node tainted
  meanwhile) says why, as the scheduler then writes it on its pods (`mover.with_dropped`);
- beside a scheduler, progress and the workload estimate are read from its trackers (the
  manifest's gangs counted in the estimate) and neither tracker changes;
- standalone, the estimate is the one the scheduler keeps in its ConfigMap, with the manifest's
  gangs counted; progress comes from a tracker of the API's own;
- a gang held back by the cap on identical gangs says why it would wait with the message the
  scheduler then writes on its pods (the reason of the identical gang offered in its place);
- the trackers hand out copies: `ProgressTracker.copy`, `ArrivalTracker.with_arrivals` and
  `mover.held`/`mover.taken` change nothing they were given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpufleet.admin import whatif
from gpufleet.admin.live import JobStore, LiveFleet
from gpufleet.admin.steps import BesideScheduler, ReadSteps, Standalone
from gpufleet.admin.whatif import what_if
from gpufleet.admin.workloads import manifest_pods
from gpufleet.core.decision import Decision, GangPlacement
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import MoveRule, Policy
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.workload import ArrivalCounts, TaskShape
from gpufleet.model.contract import names
from gpufleet.model.contract.timestamps import format_time
from gpufleet.model.gpus import load_catalog
from gpufleet.model.trainingjob import TrainingJob
from gpufleet.scheduler import pods
from gpufleet.scheduler.attained import AttainedService
from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.scheduler.cluster_view import ClusterView, PendingGang
from gpufleet.scheduler.loop import Scheduler
from gpufleet.scheduler.loop_settings import SchedulerSettings
from gpufleet.scheduler.mover import held, taken
from gpufleet.scheduler.progress import ProgressTracker
from gpufleet.scheduler.stateful_steps import offer, remembered
from tests.unit.scheduler.scheduler_builders import NodeBuilder, PodBuilder, job_manifest
from tests.unit.scheduler.scheduler_fakes import GREEDY, Clock, FakeBinder, load, scheduler

TYPES = "A100-80GB=0.5,L4=0.1"


def pending_pods(job: TrainingJob) -> list[dict[str, Any]]:
    """`job`'s pods as the operator creates them, pending (each with a uid of its own)."""
    made = manifest_pods(job, "ns")
    for pod in made:
        pod["metadata"]["uid"] = f"uid-{pod['metadata']['name']}"
        pod["status"] = {"phase": "Pending"}
    return made


def beside(cache: SchedulerCache, sched: Scheduler) -> LiveFleet:
    return LiveFleet(cache, JobStore(), load_catalog(), steps=BesideScheduler(sched))


# --- the order -------------------------------------------------------------------------------


class Recording:
    """Stateful steps that record the order they are called in."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.cap_identical_above = 64

    def hold(self, view: ClusterView) -> ClusterView:
        self.calls.append("hold")
        return view

    def progress(self, view: ClusterView) -> ClusterView:
        self.calls.append("progress")
        return view

    def protect_moves(self, view: ClusterView) -> ClusterView:
        self.calls.append("protect_moves")
        return view

    def estimate(self, view: ClusterView) -> ClusterView:
        self.calls.append("estimate")
        return view

    def take(
        self, view: ClusterView, offered: Sequence[PendingGang]
    ) -> tuple[list[PendingGang], list[GangPlacement], dict[str, PendingGang]]:
        self.calls.append("take")
        return list(offered), [], {}


class RecordingAttained(AttainedService):
    def __init__(self, calls: list[str]) -> None:
        super().__init__(load_catalog())
        self.calls = calls

    def attach(self, view: ClusterView, policy: Any) -> ClusterView:
        self.calls.append("attained")
        return view


def test_the_steps_come_in_the_loops_order() -> None:
    cache = SchedulerCache()
    load(cache, [NodeBuilder("l4-0", "L4", 4).obj()], [])
    sched = scheduler(cache, FakeBinder())
    state = cache.state()
    view = sched.views.build_state(state)
    for moves, expected in [
        (True, ["hold", "progress", "attained", "protect_moves", "estimate"]),
        (False, ["hold", "progress", "attained", "estimate"]),
    ]:
        steps = Recording()
        policy = replace(GREEDY, moves=MoveRule(enabled=moves))
        remembered(view, policy, steps, RecordingAttained(steps.calls))
        offer(view, state, set(), policy, steps)
        assert steps.calls == [*expected, "take"]


# --- beside a scheduler ------------------------------------------------------------------------


def moving_pod() -> dict[str, Any]:
    """A gang on 4 L4 GPUs, checkpointing on a signal, that the core moves to the A100s."""
    b = PodBuilder("long-0", "ns").gang("long", 1, 0).gpus(4).annotate(names.GPU_TYPES, TYPES)
    b = b.annotate(names.CHECKPOINT, "signal=2").bound("l4-0", "0,1,2,3")
    pod = b.annotate(names.ASSIGNED_TYPE, "L4").obj()
    pod["status"]["startTime"] = format_time(datetime.now(UTC) - timedelta(seconds=600))
    return pod


def test_the_gpus_reserved_for_a_moved_gang_are_held_and_kept() -> None:
    nodes = [NodeBuilder("l4-0", "L4", 4).obj(), NodeBuilder("a100-0", "A100-80GB", 8).obj()]
    cache, binder, clock = SchedulerCache(), FakeBinder(), Clock()
    load(cache, nodes, [moving_pod()])
    sched = scheduler(cache, binder, clock=clock)
    assert sched.run_cycle().moved == ["ns/long"]
    load(cache, nodes, [])  # the moved gang's old pod is gone; its new one not made yet
    reservations = sched.mover.reservations
    (reserved,) = reservations.values()
    assert reserved.expires is None  # the scheduler has not seen the old pod gone yet

    whole = what_if(beside(cache, sched), job_manifest("whole", 8, "A100-80GB"), GREEDY, "greedy")
    (gang,) = whole.gangs
    assert not gang.placed and gang.waiting is not None, gang  # 4 of the 8 A100s are reserved
    half = what_if(beside(cache, sched), job_manifest("half", 4, "A100-80GB"), GREEDY, "greedy")
    (gang,) = half.gangs
    assert gang.placed and gang.gpu_type == "A100-80GB", gang
    used = {g for r in gang.replicas for g in r.gpus}
    assert used.isdisjoint(reserved.placement.replicas[0].gpus)
    # Read, not changed: the same reservations, not yet expiring.
    assert sched.mover.reservations is reservations and reserved.expires is None


def test_a_gang_whose_moves_reservation_is_dropped_says_why_as_the_scheduler_does() -> None:
    nodes = [NodeBuilder("l4-0", "L4", 4).obj(), NodeBuilder("a100-0", "A100-80GB", 8).obj()]
    cache, binder, clock = SchedulerCache(), FakeBinder(), Clock()
    load(cache, nodes, [moving_pod()])
    sched = scheduler(cache, binder, clock=clock)
    assert sched.run_cycle().moved == ["ns/long"]
    # The moved gang's old pod is gone and the A100 node is tainted meanwhile: the recreated
    # pods (here the manifest's, of the same gang) may no longer use their reserved node.
    tainted = NodeBuilder("a100-0", "A100-80GB", 8).obj()  # a new object, as a watch gives
    tainted["spec"]["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]
    nodes = [nodes[0], tainted]
    load(cache, nodes, [])
    reservations = sched.mover.reservations
    job = job_manifest("long", 4, "A100-80GB")
    (gang,) = what_if(beside(cache, sched), job, GREEDY, "greedy").gangs
    assert not gang.placed and gang.waiting is not None, gang
    dropped = "its move's reservation on a100-0 was dropped: its pods may no longer use a100-0"
    # Before, the what-if gave the core's reason alone (the taint), without this.
    assert f"; {dropped} (a taint they do not tolerate" in gang.waiting.message, gang.waiting
    assert "maintenance" in gang.waiting.message
    assert sched.mover.reservations is reservations  # read, not dropped
    # The scheduler, given the gang's pods, drops the reservation and writes the same.
    load(cache, nodes, pending_pods(job))
    clock.t += 1
    sched.run_cycle()
    assert "ns/long" not in sched.mover.reservations
    key = pods.pod_key(pending_pods(job)[0])
    assert binder.marked[key] == f"{gang.waiting.reason}: {gang.waiting.message}"
    # Dropped in an earlier cycle, it is still said while the gang waits for the reason it
    # gave then (GangMover.dropped, GangMover.said), and not once it waits for another.
    steps = BesideScheduler(sched).look(["ns/long"])
    same = f"{gang.waiting.reason}: x"
    (said,) = steps.explain({"ns/long": same}).values()
    assert said.startswith(f"{same}; {dropped}"), said
    other = "WaitingForPreemption: x"
    assert gang.waiting.reason != "WaitingForPreemption"
    assert steps.explain({"ns/long": other}) == {"ns/long": other}


def test_progress_and_the_estimate_are_read_from_the_scheduler_and_left_alone() -> None:
    nodes = [NodeBuilder("l4-0", "L4", 4).obj(), NodeBuilder("a100-0", "A100-80GB", 8).obj()]
    cache = SchedulerCache()
    waiting = pending_pods(job_manifest("seen", 2, "L4"))
    load(cache, nodes, [moving_pod(), *waiting])
    sched = scheduler(cache, FakeBinder())
    sched.progress = ProgressTracker(60.0)
    sched.progress._lengths = [3600.0]  # a gang of an hour finished once
    sched.arrivals.observe(pg.gang for pg in sched.views.build_state(cache.state()).pending)
    counts, seen = sched.arrivals.counts, dict(sched.arrivals._seen)

    live = beside(cache, sched)
    steps = live.steps.look(["ns/new"])
    extra = pending_pods(job_manifest("new", 1, "A100-80GB"))
    view = live.observe(extra).view
    view = steps.estimate(steps.progress(view))
    (long,) = [g for g in view.snapshot.running if g.id == "ns/long"]
    assert long.progress is not None
    # From the scheduler's run lengths: an hour's run expected, 600 s of it done.
    assert 2990 <= long.progress.expected_remaining_s <= 3010
    # The estimate counts the gang the scheduler counted, and the manifest's.
    shapes = {s.shape for s in view.snapshot.workload.shapes}
    assert {TaskShape.of_gang(pg.gang)[0] for pg in view.pending} == shapes
    assert len(shapes) == 2
    # Nothing of the scheduler's changed.
    assert sched.progress.lengths == [3600.0]
    assert sched.arrivals.counts is counts and dict(sched.arrivals._seen) == seen


# --- standalone --------------------------------------------------------------------------------


class Kept:
    """The estimate ConfigMap's store, read only."""

    def __init__(self, counts: ArrivalCounts | None) -> None:
        self.counts = counts
        self.loads = 0

    def load(self) -> ArrivalCounts | None:
        self.loads += 1
        return self.counts

    def save(self, counts: ArrivalCounts) -> None:
        raise AssertionError("a what-if keeps nothing")


def test_standalone_the_estimate_is_the_kept_one_with_the_manifests_gangs() -> None:
    nodes = [NodeBuilder("a100-0", "A100-80GB", 8).obj()]
    cache = SchedulerCache()
    other = pending_pods(job_manifest("other", 2, "A100-80GB"))
    load(cache, nodes, other)
    live = LiveFleet(cache, JobStore(), load_catalog())
    seen = live.observe().view.pending[0].gang
    kept = ArrivalCounts().observed_gangs([seen] * 5)
    store = Kept(kept)
    steps = Standalone(SchedulerSettings(), store).look(["ns/new"])
    view = live.observe(pending_pods(job_manifest("new", 1, "A100-80GB"))).view
    estimate = steps.estimate(view).snapshot.workload
    new = next(pg.gang for pg in view.pending if pg.gang.id == "ns/new")
    # The kept counts, and the manifest's gang (the other pending gang is in them already).
    expected = kept.observed_gangs([new]).estimate()
    assert estimate == expected and store.loads == 1
    # Without a kept estimate: the manifest's gang alone.
    alone = Standalone(SchedulerSettings(), Kept(None)).look(["ns/new"]).estimate(view)
    assert {s.shape for s in alone.snapshot.workload.shapes} == {TaskShape.of_gang(new)[0]}


def test_standalone_progress_comes_from_a_tracker_of_its_own() -> None:
    nodes = [NodeBuilder("l4-0", "L4", 4).obj(), NodeBuilder("a100-0", "A100-80GB", 8).obj()]
    cache = SchedulerCache()
    load(cache, nodes, [moving_pod()])
    source = Standalone(SchedulerSettings(move_restart_s=42.0))
    view = source.look([]).progress(LiveFleet(cache, JobStore(), load_catalog()).observe().view)
    (long,) = view.snapshot.running
    assert long.progress is not None and long.progress.restart_s == 42.0 + 2
    assert isinstance(source.look([]), ReadSteps) and source.look([]).reservations == {}


# --- the cap on identical gangs ------------------------------------------------------------


def test_a_capped_gang_says_what_the_scheduler_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [NodeBuilder("l4-0", "L4", 4).obj()]
    running = PodBuilder("busy-0", "ns").gang("busy", 1, 0).gpus(4).bound("l4-0", "0,1,2,3")
    cache = SchedulerCache()
    ahead = pending_pods(job_manifest("ahead", 4, "L4"))
    load(cache, nodes, [running.annotate(names.ASSIGNED_TYPE, "L4").obj(), *ahead])
    binder = FakeBinder()
    sched = scheduler(cache, binder, cap_identical_above=1)

    offered: list[list[str]] = []

    def spy(snapshot: Snapshot, gangs: Sequence[Gang], policy: Policy) -> Decision:
        offered.append([g.id for g in gangs])
        return place(snapshot, gangs, policy)

    monkeypatch.setattr(whatif, "place", spy)
    job = job_manifest("later", 4, "L4")
    (gang,) = what_if(beside(cache, sched), job, GREEDY, "greedy").gangs
    assert not gang.placed and gang.waiting is not None
    assert offered == [["ns/ahead"]]  # no room: one of the two offered, its reason shared
    # The scheduler, given the job, holds it back behind `ahead` and writes ahead's reason.
    load(cache, nodes, [*cache.state().pods, *pending_pods(job)])
    sched.run_cycle()
    key = pods.pod_key(pending_pods(job)[0])
    assert binder.marked[key] == f"{gang.waiting.reason}: {gang.waiting.message}"
    assert binder.marked[key] == binder.marked["ns/ahead-worker-0"]


# --- copies ------------------------------------------------------------------------------------


def test_the_trackers_hand_out_copies() -> None:
    tracker = ProgressTracker(60.0)
    tracker._lengths = [10.0, 20.0]
    copy = tracker.copy()
    copy._lengths.append(30.0)
    assert tracker.lengths == [10.0, 20.0] and copy.lengths == [10.0, 20.0, 30.0]

    nodes = [NodeBuilder("l4-0", "L4", 4).obj(), NodeBuilder("a100-0", "A100-80GB", 8).obj()]
    cache, clock = SchedulerCache(), Clock()
    load(cache, nodes, [moving_pod()])
    sched = scheduler(cache, FakeBinder(), clock=clock)
    sched.run_cycle()
    load(cache, nodes, pending_pods(job_manifest("long", 4, "A100-80GB")))
    view = sched.views.build_state(cache.state())
    reservations = dict(sched.mover.reservations)
    shown, kept, dropped, _ = held(reservations, view, clock.t + 1.0, 120.0)
    assert reservations == dict(sched.mover.reservations) and not dropped
    assert [g.id for g in shown.snapshot.running] == ["ns/long#moving"]
    left = taken(kept, shown, list(shown.pending))
    assert kept.keys() == reservations.keys() and not left.reserved
    assert set(left.by_id) == {"ns/long"}
