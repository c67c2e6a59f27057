"""Moves in the live loop, over an in-memory cache and the real greedy core: a running gang
whose pods say how they checkpoint gets its demand and progress in the snapshot, the core's
move deletes its pods (marked, with their own grace) and reserves the new placement, nothing
else is placed on the reserved GPUs, and the recreated pods are bound to them; the per-hour
limit is read from the pods' move times; gangs without a checkpoint, or not preemptible, are
never moved; an evacuation (a move for a waiting gang) and a refill (a move that keeps GPUs of a
type free) are carried out the same way; a gang placed on GPUs of gangs moved for it waits for
them to go."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpufleet.core.decision import Decision, GangPlacement, Move, Preemption
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import ReplicaPlacement, Snapshot
from gpufleet.model.contract import names
from gpufleet.model.contract.timestamps import format_time
from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.scheduler.mover import RESERVED_SUFFIX, held, reason_of, with_dropped
from gpufleet.scheduler.nominated import NOTHING_RUNS
from gpufleet.scheduler.progress import ProgressTracker, run_length
from tests.unit.scheduler.scheduler_builders import NodeBuilder, PodBuilder
from tests.unit.scheduler.scheduler_fakes import Clock, FakeBinder, load, scheduler

TYPES = "A100-80GB=0.5,L4=0.1"


def nodes() -> list[dict[str, Any]]:
    return [NodeBuilder("l4-0", "L4", 4).obj(), NodeBuilder("a100-0", "A100-80GB", 8).obj()]


def long_pod(
    uid: str = "u1",
    ran_s: float = 600.0,
    checkpoint: str | None = "signal=2",
    bound: bool = True,
    **annotations: str,
) -> dict[str, Any]:
    b = PodBuilder("long-0", "ns").gang("long", 1, 0).gpus(4).annotate(names.GPU_TYPES, TYPES)
    if checkpoint is not None:
        b = b.annotate(names.CHECKPOINT, checkpoint)
    for key, value in annotations.items():
        b = b.annotate(key, value)
    if bound:
        b = b.bound("l4-0", "0,1,2,3").annotate(names.ASSIGNED_TYPE, "L4")
    pod = b.obj()
    pod["metadata"]["uid"] = uid
    if bound:
        started = datetime.now(UTC) - timedelta(seconds=ran_s)
        pod["status"]["startTime"] = format_time(started)
    return pod


def test_a_checkpointing_gang_moves_to_a_faster_type_and_keeps_its_reservation() -> None:
    cache, binder, clock = SchedulerCache(), FakeBinder(), Clock()
    load(cache, nodes(), [long_pod()])
    sched = scheduler(cache, binder, clock=clock)

    report = sched.run_cycle()
    assert report.moved == ["ns/long"]
    assert [k for k, _ in binder.moved] == ["ns/long-0"]
    marker = binder.moved[0][1]
    assert marker[names.DISRUPTED_BY] == names.MOVED_REASON and names.MOVED_AT in marker
    reserved = sched.mover.reserved["ns/long"]
    assert reserved.gpu_type == "A100-80GB" and len(reserved.replicas) == 1

    # The old pod is gone; another gang asks for the whole A100 node: the reservation keeps
    # four of its GPUs, so it cannot be placed there.
    other = PodBuilder("other-0", "ns").gang("other", 1, 0).gpus(8).obj()
    other["metadata"]["annotations"][names.GPU_TYPES] = "A100-80GB"
    load(cache, nodes(), [other])
    clock.t += 1
    report = sched.run_cycle()
    assert "ns/other-0" not in binder.bound
    assert "ns/other" in report.pending

    # The operator recreates the worker: it is bound to the reserved GPUs, not re-decided.
    load(cache, nodes(), [other, long_pod(uid="u2", bound=False)])
    clock.t += 1
    sched.run_cycle()
    bound = binder.bound["ns/long-0"]
    assert bound.node == reserved.replicas[0].node
    assert bound.annotations[names.ASSIGNED_GPUS] == ",".join(map(str, reserved.replicas[0].gpus))
    assert "ns/long" not in sched.mover.reserved


@pytest.mark.parametrize(
    ("why", "says"),
    [
        # An evacuation (core/evacuation.py): the message names the waiting gang.
        ({"for_gang": "ns/wide"}, "to empty a node for waiting gang ns/wide"),
        # A refill of a spent reserve (core/refill.py): it names the type it keeps free.
        ({"for_reserve": "L4"}, "to keep L4 GPUs free for gangs that need that type"),
    ],
    ids=["evacuation", "refill"],
)
def test_a_move_for_another_reason_is_carried_out_as_a_move_and_says_why(
    why: dict[str, str], says: str
) -> None:
    # The core's move turned into one made for another gang's sake: the loop deletes and
    # reserves as for any move; the message says why and what it costs the moved gang.
    def decide(snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
        decision = place(snapshot, pending, policy)
        moves = tuple(replace(m, **why, gain_s=-75.0) for m in decision.moves)
        return replace(decision, moves=moves)

    cache, binder = SchedulerCache(), FakeBinder()
    load(cache, nodes(), [long_pod()])
    sched = scheduler(cache, binder, clock=Clock(), decide=decide)
    assert sched.run_cycle().moved == ["ns/long"]
    assert "ns/long" in sched.mover.reserved
    (message,) = binder.move_messages
    assert says in message
    assert "75s later" in message


def test_a_gang_placed_where_gangs_move_for_it_waits_for_them_to_go() -> None:
    # A reclaim with moves (core/evacuation.py): the core places `wide` on the GPUs `long`
    # gives up by moving for it. Those are still held by long's pods, so wide is not bound
    # this cycle; it waits, as a preemptor waits for its victims, while the move goes ahead.
    def decide(snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
        if not any(g.id == "ns/wide" for g in pending):
            return place(snapshot, pending, policy)
        l4 = GangPlacement("ns/wide", "L4", (ReplicaPlacement("l4-0", (0, 1, 2, 3)),))
        a100 = GangPlacement("ns/long", "A100-80GB", (ReplicaPlacement("a100-0", (0, 1, 2, 3)),))
        return Decision(
            placements=(l4,), moves=(Move("ns/long", "L4", a100, -60.0, for_gang="ns/wide"),)
        )

    wide = PodBuilder("wide-0", "ns").gang("wide", 1, 0).gpus(4).annotate(names.GPU_TYPES, "L4")
    cache, binder = SchedulerCache(), FakeBinder()
    load(cache, nodes(), [long_pod(), wide.obj()])
    sched = scheduler(cache, binder, clock=Clock(), decide=decide)
    report = sched.run_cycle()
    assert report.moved == ["ns/long"]
    assert "ns/wide-0" not in binder.bound
    assert "moved to make room for it" in report.pending["ns/wide"]


def test_reserved_gpus_are_shown_held_and_not_twice() -> None:
    cache, binder, clock = SchedulerCache(), FakeBinder(), Clock()
    load(cache, nodes(), [long_pod()])
    sched = scheduler(cache, binder, clock=clock)
    sched.run_cycle()
    # Still terminating: its L4 GPUs are its own, the A100 GPUs are the reservation's.
    view = sched.mover.hold(sched.views.build(cache.state().nodes, cache.state().pods, {}))
    held = {g.id: g for g in view.snapshot.running}
    assert set(held) == {"ns/long", f"ns/long{RESERVED_SUFFIX}"}
    assert not held[f"ns/long{RESERVED_SUFFIX}"].preemptible


def test_a_reservation_ends_when_its_gpus_are_taken_or_it_expires() -> None:
    cache, binder, clock = SchedulerCache(), FakeBinder(), Clock()
    load(cache, nodes(), [long_pod()])
    sched = scheduler(cache, binder, clock=clock, move_reserve_s=5.0)
    sched.run_cycle()
    gpus = ",".join(map(str, sched.mover.reserved["ns/long"].replicas[0].gpus))
    # A pod of another scheduler is bound onto the reserved GPUs: the reservation gives way.
    foreign = PodBuilder("x", "ns").scheduler("other").gpus(4).bound("a100-0", gpus).obj()
    load(cache, nodes(), [foreign])
    sched.mover.hold(sched.views.build(cache.state().nodes, cache.state().pods, {}))
    assert sched.mover.reserved == {}

    cache2, binder2, clock2 = SchedulerCache(), FakeBinder(), Clock()
    load(cache2, nodes(), [long_pod()])
    sched2 = scheduler(cache2, binder2, clock=clock2, move_reserve_s=5.0)
    sched2.run_cycle()
    load(cache2, nodes(), [])  # old pod gone, never recreated
    sched2.run_cycle()
    assert "ns/long" in sched2.mover.reserved
    clock2.t += 6
    sched2.run_cycle()
    assert sched2.mover.reserved == {}


def test_the_hourly_limit_is_read_from_the_pods() -> None:
    recent = format_time(datetime.now(UTC) - timedelta(minutes=10))
    old = format_time(datetime.now(UTC) - timedelta(minutes=70))
    for times, moves in ((recent, []), (old, ["ns/long"])):
        cache, binder = SchedulerCache(), FakeBinder()
        load(cache, nodes(), [long_pod(**{names.MOVE_TIMES: times})])
        assert scheduler(cache, binder, clock=Clock()).run_cycle().moved == moves


def test_gangs_that_do_not_checkpoint_or_may_not_be_preempted_stay() -> None:
    for pod in (
        long_pod(checkpoint=None),
        long_pod(**{names.PREEMPTIBLE: "false"}),
        long_pod(checkpoint="never=3"),
    ):
        cache, binder = SchedulerCache(), FakeBinder()
        load(cache, nodes(), [pod])
        sched = scheduler(cache, binder, clock=Clock())
        assert sched.run_cycle().moved == []
        assert binder.moved == []


def test_a_short_run_is_not_worth_the_restart() -> None:
    # 30 s run so far: expected 30 s more; a restart of 62 s never pays back.
    cache, binder = SchedulerCache(), FakeBinder()
    load(cache, nodes(), [long_pod(ran_s=30.0)])
    assert scheduler(cache, binder, clock=Clock()).run_cycle().moved == []


def test_progress_from_pods() -> None:
    cache = SchedulerCache()
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    pod = long_pod(checkpoint="interval=100", **{names.MOVE_TIMES: format_time(now)})
    pod["status"]["startTime"] = format_time(now - timedelta(seconds=250))
    load(cache, nodes(), [pod])
    sched = scheduler(cache, FakeBinder(), clock=Clock(), move_restart_s=7.0)
    view = sched.views.build(cache.state().nodes, cache.state().pods, {})
    gang = next(g for g in view.snapshot.running if g.id == "ns/long")
    assert gang.demand is not None
    assert gang.demand.replicas_min == gang.demand.replicas_max == 1
    assert [o.gpu_type for o in gang.demand.acceptable] == ["A100-80GB", "L4"]
    tracker = ProgressTracker(7.0, wall=lambda: now)
    progress = next(g.progress for g in tracker.attach(view).snapshot.running if g.id == "ns/long")
    assert progress is not None
    assert progress.expected_remaining_s == 250.0  # nothing seen finish: the run so far
    assert progress.unsaved_s == 50.0  # 250 s run, checkpoints every 100 s
    assert progress.restart_s == 7.0  # no grace period with interval checkpoints
    assert progress.recent_moves == 1

    # Runs seen finishing: the expected remaining time is the mean excess of longer ones.
    done = []
    for i, length in enumerate((100.0, 400.0, 800.0)):
        p = PodBuilder(f"d{i}", "ns").gang(f"d{i}", 1, 0).gpus(1).phase("Succeeded").obj()
        p["status"]["startTime"] = format_time(now)
        finished = format_time(now + timedelta(seconds=length))
        p["status"]["containerStatuses"] = [{"state": {"terminated": {"finishedAt": finished}}}]
        assert run_length(p) == length
        done.append(p)
    tracker.observe(sched.views.facts(done).values())
    tracker.observe(sched.views.facts(done).values())  # counted once
    assert tracker.lengths == [100.0, 400.0, 800.0]
    progress = next(g.progress for g in tracker.attach(view).snapshot.running if g.id == "ns/long")
    assert progress is not None and progress.expected_remaining_s == 350.0  # (400+800)/2-250


def test_a_moves_run_time_reads_every_bound_pod_and_needs_each_started() -> None:
    # Unlike the tier's run time (model.contract.service.run_s: Running pods only, one not
    # started skipped), a move's counts a bound pod whatever its phase, and waits for each.
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    tracker = ProgressTracker(7.0, wall=lambda: now)
    starting = long_pod()
    started = format_time(now - timedelta(seconds=90))
    starting["status"] |= {"phase": "Pending", "startTime": started}
    unstarted = long_pod()
    del unstarted["status"]["startTime"]
    for pod, ran in ((starting, 90.0), (unstarted, None)):
        cache = SchedulerCache()
        load(cache, nodes(), [pod])
        sched = scheduler(cache, FakeBinder(), clock=Clock())
        view = tracker.attach(sched.views.build(cache.state().nodes, cache.state().pods, {}))
        gang = next(g for g in view.snapshot.running if g.id == "ns/long")
        if ran is None:
            assert gang.demand is None and gang.progress is None
        else:
            assert gang.progress is not None and gang.progress.expected_remaining_s == ran


def test_a_reservation_ends_when_the_old_pods_never_go() -> None:
    cache, binder, clock = SchedulerCache(), FakeBinder(), Clock()
    load(cache, nodes(), [long_pod()])
    sched = scheduler(cache, binder, clock=clock, move_reserve_s=5.0)
    sched.run_cycle()
    clock.t += 8  # within 5 s + twice the 2 s grace: still waiting for the old pod
    sched.mover.hold(sched.views.build(cache.state().nodes, cache.state().pods, {}))
    assert "ns/long" in sched.mover.reserved
    clock.t += 2
    sched.mover.hold(sched.views.build(cache.state().nodes, cache.state().pods, {}))
    assert sched.mover.reserved == {}


def test_a_move_onto_gpus_a_reclaim_frees_keeps_its_reservation_while_the_victim_exits() -> None:
    # A reclaim with moves (core/evacuation.py): for `wide`, the core evicts `v` from the A100
    # node and moves `long` onto v's GPUs there. v's pod exits after long's: its GPUs are the
    # move's, not taken by anyone else; long waits for it, then is bound there.
    def decide(snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
        if not any(g.id == "ns/wide" for g in pending):
            return place(snapshot, pending, policy)
        l4 = GangPlacement("ns/wide", "L4", (ReplicaPlacement("l4-0", (0, 1, 2, 3)),))
        a100 = GangPlacement("ns/long", "A100-80GB", (ReplicaPlacement("a100-0", (0, 1, 2, 3)),))
        return Decision(
            placements=(replace(l4, waits_for=()),),
            preemptions=(Preemption("ns/v", "ns/wide", reclaim=True),),
            moves=(Move("ns/long", "L4", a100, -60.0, for_gang="ns/wide"),),
        )

    victim = PodBuilder("v-0", "ns").gang("v", 1, 0).gpus(4).annotate(names.GPU_TYPES, TYPES)
    victim = victim.bound("a100-0", "0,1,2,3").annotate(names.ASSIGNED_TYPE, "A100-80GB")
    v = victim.obj()
    v["metadata"]["uid"] = "v1"
    wide = PodBuilder("wide-0", "ns").gang("wide", 1, 0).gpus(4).annotate(names.GPU_TYPES, "L4")
    cache, binder, clock = SchedulerCache(), FakeBinder(), Clock()
    load(cache, nodes(), [long_pod(), v, wide.obj()])
    sched = scheduler(cache, binder, clock=clock, decide=decide)
    report = sched.run_cycle()
    assert report.moved == ["ns/long"] and report.preempted == ["ns/v"]
    # long's old pod is gone and recreated; v's still exits.
    v["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    load(cache, nodes(), [v, wide.obj(), long_pod(uid="u2", bound=False)])
    clock.t += 1
    sched.run_cycle()
    # Before: dropped as "GPUs taken" (v's), and long was decided afresh.
    assert "ns/long" in sched.mover.reserved, sched.mover.dropped
    assert "ns/long-0" not in binder.bound
    # Meanwhile v is shown at long's priority (if below) with no work left to lose, its GPUs
    # not held twice: only a gang that could evict a gang of that priority is given them.
    view = sched.views.build(cache.state().nodes, cache.state().pods, {})
    shown, kept, _, _ = held(sched.mover.reservations, view, clock(), 60.0)
    running = {g.id: g for g in shown.snapshot.running}
    assert set(kept) == {"ns/long"} and running["ns/v"].progress == NOTHING_RUNS
    assert f"ns/long{RESERVED_SUFFIX}" not in running
    load(cache, nodes(), [wide.obj(), long_pod(uid="u2", bound=False)])
    clock.t += 1
    sched.run_cycle()
    bound = binder.bound["ns/long-0"]
    assert (bound.node, bound.annotations[names.ASSIGNED_GPUS]) == ("a100-0", "0,1,2,3")


def _reclaim_with_a_move(
    cache: SchedulerCache, binder: FakeBinder, clock: Clock, queues: bool = False
) -> Any:
    """`test_a_move_onto_gpus_a_reclaim_frees_...`'s first cycle: for `wide`, v evicted from
    a100-0's GPUs 0-3 and long moved onto them; the scheduler and v's pod."""

    def decide(snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
        if not any(g.id == "ns/wide" for g in pending):
            return place(snapshot, pending, policy)
        l4 = GangPlacement("ns/wide", "L4", (ReplicaPlacement("l4-0", (0, 1, 2, 3)),))
        a100 = GangPlacement("ns/long", "A100-80GB", (ReplicaPlacement("a100-0", (0, 1, 2, 3)),))
        return Decision(
            placements=(l4,),
            preemptions=(Preemption("ns/v", "ns/wide", reclaim=True),),
            moves=(Move("ns/long", "L4", a100, -60.0, for_gang="ns/wide"),),
        )

    victim = PodBuilder("v-0", "ns").gang("v", 1, 0).gpus(4).annotate(names.GPU_TYPES, TYPES)
    victim = victim.bound("a100-0", "0,1,2,3").annotate(names.ASSIGNED_TYPE, "A100-80GB")
    if queues:
        victim = victim.annotate(names.QUEUE, "ones")
    v = victim.obj()
    v["metadata"]["uid"] = "v1"
    charged = {names.QUEUE: "keeper"} if queues else {}
    load(cache, nodes(), [long_pod(**charged), v, _wide()])
    sched = scheduler(cache, binder, clock=clock, decide=decide)
    report = sched.run_cycle()
    assert report.moved == ["ns/long"] and report.preempted == ["ns/v"]
    # The watch shows long's and v's pods deleting.
    old = long_pod(**charged)
    for pod in (old, v):
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    load(cache, nodes(), [old, v, _wide()])
    clock.t += 1
    sched.run_cycle()
    return sched, v


def _wide() -> dict[str, Any]:
    wide = PodBuilder("wide-0", "ns").gang("wide", 1, 0).gpus(4).annotate(names.GPU_TYPES, "L4")
    return wide.obj()


def test_a_higher_priority_gang_may_take_the_gpus_a_moves_victim_frees() -> None:
    # As above, but while v's pod exits (long's recreated, waiting for it), `hi` (priority 10,
    # the whole A100 node) arrives. v, exiting, is shown at long's priority with nothing left
    # to lose: hi may evict it again and is given its GPUs; long's reservation is dropped at
    # once (it would never be bound there) and says why; once v is gone hi is bound on the
    # whole node and long is not: no GPU given twice. Before, v was shown not preemptible:
    # hi fit nowhere and long was bound there.
    cache, binder, clock = SchedulerCache(), FakeBinder(), Clock()
    sched, v = _reclaim_with_a_move(cache, binder, clock)
    hi = PodBuilder("hi-0", "ns").gang("hi", 1, 0).gpus(8).annotate(names.GPU_TYPES, TYPES)
    hi = hi.annotate(names.PRIORITY, "10").obj()
    load(cache, nodes(), [v, _wide(), long_pod(uid="u2", bound=False), hi])
    clock.t += 1
    report = sched.run_cycle()
    assert report.preempted == ["ns/v"], report.pending.get("ns/hi")
    assert "ns/long" not in sched.mover.reserved
    assert sched.mover.dropped["ns/long"] == (
        "its move's reservation on a100-0 was dropped: gang ns/hi preempted ns/v, exiting from "
        "them, for itself"
    )
    assert "ns/long-0" not in binder.bound and "ns/hi-0" not in binder.bound
    load(cache, nodes(), [_wide(), long_pod(uid="u2", bound=False), hi])
    clock.t += 1
    report = sched.run_cycle()
    bound = binder.bound["ns/hi-0"]
    assert (bound.node, bound.annotations[names.ASSIGNED_GPUS]) == ("a100-0", "0,1,2,3,4,5,6,7")
    assert "ns/long-0" not in binder.bound, report.bound
    assert "was dropped: gang ns/hi preempted ns/v" in report.pending["ns/long"]
    # long's job is given priority 10 (its pods recreated): long is to preempt wide, and says
    # that alone (the dropped reservation no longer explains its wait). Before, the text stayed.
    running = [
        _as_bound(_wide(), "l4-0", "0,1,2,3", "L4"),
        _as_bound(hi, "a100-0", "0,1,2,3,4,5,6,7", "A100-80GB"),
    ]
    load(cache, nodes(), [*running, long_pod(uid="u3", bound=False, **{names.PRIORITY: "10"})])
    clock.t += 1
    report = sched.run_cycle()
    assert report.preempted == ["ns/wide"], report.pending
    assert report.pending["ns/long"].startswith("WaitingForPreemption"), report.pending
    assert "was dropped" not in report.pending["ns/long"] and "ns/long" not in sched.mover.dropped


def _as_bound(pod: dict[str, Any], node: str, gpus: str, gpu_type: str) -> dict[str, Any]:
    """`pod` as bound to `gpus` of `node`, running."""
    out = copy.deepcopy(pod)
    out["spec"]["nodeName"] = node
    out["status"]["phase"] = "Running"
    out["metadata"]["annotations"].update(
        {names.ASSIGNED_GPUS: gpus, names.ASSIGNED_TYPE: gpu_type}
    )
    return out


def test_a_gang_of_the_moves_priority_is_not_given_the_gpus_its_victim_frees() -> None:
    # The same, `hi` at long's priority (0): it may not evict v again, nor take the move's
    # reservation; long is bound once v is gone.
    cache, binder, clock = SchedulerCache(), FakeBinder(), Clock()
    sched, v = _reclaim_with_a_move(cache, binder, clock)
    peer = PodBuilder("peer-0", "ns").gang("peer", 1, 0).gpus(8).annotate(names.GPU_TYPES, TYPES)
    load(cache, nodes(), [v, _wide(), long_pod(uid="u2", bound=False), peer.obj()])
    clock.t += 1
    report = sched.run_cycle()
    assert report.preempted == [] and "ns/long" in sched.mover.reserved
    load(cache, nodes(), [_wide(), long_pod(uid="u2", bound=False), peer.obj()])
    clock.t += 1
    sched.run_cycle()
    assert binder.bound["ns/long-0"].node == "a100-0" and "ns/peer-0" not in binder.bound


def test_a_moves_exiting_victim_is_charged_to_the_moved_gangs_queue_but_counted_in_its_own() -> (
    None
):
    # While v exits, it stands for long on the reserved GPUs: charged to long's queue in the
    # core's view (a gang that could not preempt long is not given its GPUs, nor does long's
    # queue look short of them), counted in its own queue in the GPUQueue status.
    cache, binder, clock = SchedulerCache(), FakeBinder(), Clock()
    sched, v = _reclaim_with_a_move(cache, binder, clock, queues=True)
    load(cache, nodes(), [v, _wide(), long_pod(uid="u2", bound=False)])
    view = sched.views.build(cache.state().nodes, cache.state().pods, {})
    shown = sched.mover.hold(view)
    by_id = {g.id: g for g in shown.snapshot.running}
    assert by_id["ns/v"].queue == "keeper" and by_id["ns/v"].progress == NOTHING_RUNS
    counted = {g.id: g for g in sched.mover.as_charged(shown.snapshot).running}
    assert counted["ns/v"].queue == "ones"


def test_a_dropped_reservations_text_is_added_while_the_reason_it_was_added_to_holds() -> None:
    # What the admin API's what-if adds too (`with_dropped` with the mover's `said`): a gang
    # given another reason since the text was first added no longer says it; one never seen
    # pending yet does.
    pending = {
        "ns/a": "InsufficientFreeGpus: needs 4 x L4; 1 free",
        "ns/b": "WaitingForPreemption: waiting for ns/x to exit",
        "ns/c": "InsufficientFreeGpus: needs 4 x L4; 0 free",
    }
    dropped = dict.fromkeys(pending, "its move's reservation on n0 was dropped: expired")
    said = dict.fromkeys(["ns/a", "ns/b"], reason_of("InsufficientFreeGpus: needs 4 x L4; 0 free"))
    out = with_dropped(pending, dropped, said)
    assert out["ns/a"].endswith("; its move's reservation on n0 was dropped: expired")
    assert out["ns/b"] == pending["ns/b"]
    assert out["ns/c"].endswith("was dropped: expired")
