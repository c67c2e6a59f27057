"""The live loop and a reclaim with moves (core/evacuation.py): the core places a gang owed its
queue's nominal quota in the decision that evicts reclaim victims and moves another gang off the
node. The gang waits for the moved gang's deleted pods as well as for its victims' pods, and is
bound where the decision put it once all of them are gone; when the move does not go ahead, it
does not wait for the moved gang's pods.

The fleet is that of tests/unit/admin/test_whatif_moves.py, as operator-made pods: three A100
nodes. a0: six one-GPU jobs of `ones` (nominal 0, all borrowed) and two of `keeper` (nominal 1:
a reclaim may take one of them, then must stop); a1: an 8-GPU job of `full`; a2: a 4-GPU job of
`full` and four free GPUs. Every job checkpoints on a signal and has run for two hours. An 8-GPU
job of `lender` (nominal 8) is owed its quota: the core reclaims the six `ones` jobs and one
`keeper` job, moves the other `keeper` job to a2 and places the lender on a0, in one decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Policy
from gpufleet.core.snapshot import Snapshot
from gpufleet.model.contract import names
from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.scheduler.loop import Scheduler
from tests.unit.admin.admin_fakes import bind, job_pods, training_job
from tests.unit.scheduler.scheduler_builders import NodeBuilder
from tests.unit.scheduler.scheduler_fakes import FakeBinder, scheduler
from tests.unit.scheduler.test_scheduler_disruption import budget

A100 = "A100-80GB"
NS = "team-a"
LENDER = f"{NS}/lender"
NOMINAL = {"lender": 8, "ones": 0, "keeper": 1, "full": 12}


def _running(name: str, queue: str, node: str, gpus: tuple[int, ...]) -> dict[str, Any]:
    """The pod of a running one-replica job of `queue` on `gpus` of `node`, checkpointing on a
    signal, started two hours ago."""
    job = training_job(name, NS, gpus=len(gpus), gpu_type=A100, queue=queue, phase="Running")
    job["spec"]["checkpoint"] = {"onSignal": True, "gracePeriodSeconds": 2}
    (pod,) = job_pods(job)
    pod = bind(pod, node, ",".join(map(str, gpus)), A100)
    started = datetime.now(UTC) - timedelta(hours=2)
    pod["status"]["startTime"] = started.strftime("%Y-%m-%dT%H:%M:%SZ")
    return pod


def _lender() -> list[dict[str, Any]]:
    job = training_job("lender", NS, gpus=8, gpu_type=A100, queue="lender")
    return job_pods(job)


def _cache() -> SchedulerCache:
    cache = SchedulerCache()
    cache.replace_nodes([NodeBuilder(f"a{i}", A100, 8).obj() for i in range(3)])
    pods = [_running(f"one-{k}", "ones", "a0", (k,)) for k in range(6)]
    pods += [_running("keep-0", "keeper", "a0", (6,)), _running("keep-1", "keeper", "a0", (7,))]
    pods += [_running("full-a1", "full", "a1", tuple(range(8)))]
    pods += [_running("full-a2", "full", "a2", (0, 1, 2, 3))]
    cache.replace_pods([*pods, *_lender()])
    cache.replace_queues(
        [
            {
                "apiVersion": "gpufleet.io/v1alpha1",
                "kind": "GPUQueue",
                "metadata": {"name": q},
                "spec": {"quotas": [{"gpuType": A100, "nominal": n}]},
            }
            for q, n in NOMINAL.items()
        ]
    )
    cache.replace_namespaces([{"metadata": {"name": NS}}])
    return cache


@dataclass
class _Decided:
    """What the loop asked the core: the gangs offered, and its decision, each time."""

    offered: list[set[str]] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)


def _loop(
    cache: SchedulerCache, binder: FakeBinder, budget_on: str | None = None
) -> tuple[Scheduler, _Decided]:
    """The loop over `cache`, with what it asked the core recorded. `budget_on` ("moved", or a
    job's name): right after the first decision, a PodDisruptionBudget that allows no
    disruption is created over the pods of that job (of the gang the decision moves): the
    snapshot did not see it, the evictions and the moves that follow read it."""
    decided = _Decided()
    decisions = decided.decisions

    def decide(snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
        decided.offered.append({g.id for g in pending})
        decisions.append(place(snapshot, pending, policy))
        if budget_on is not None and len(decisions) == 1:
            moved = [m.gang_id.split("/")[1] for m in decisions[0].moves]
            job = moved[0] if budget_on == "moved" else budget_on
            selector = {"matchLabels": {names.GANG_LABEL: job}}
            binder.budgets = [budget("keep-" + job, 0, selector, namespace=NS)]
        return decisions[-1]

    return scheduler(cache, binder, decide=decide), decided


def _terminating(cache: SchedulerCache, key: str) -> dict[str, Any]:
    """The pod `key` as the API shows it once deleted while a finalizer (or its grace period)
    keeps it: with a deletionTimestamp."""
    pod = cache.pod(key)
    assert pod is not None
    pod = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    cache.pod_event("MODIFIED", pod)
    return pod


def test_the_gang_waits_for_the_moved_pods_and_is_bound_where_the_decision_put_it() -> None:
    cache, binder = _cache(), FakeBinder()
    sched, decided = _loop(cache, binder)
    decisions = decided.decisions
    report = sched.run_cycle()
    (move,) = decisions[0].moves
    assert move.for_gang == LENDER
    (planned,) = [p for p in decisions[0].placements if p.gang_id == LENDER]
    assert {r.node for r in planned.replicas} == {"a0"}
    assert report.moved == [move.gang_id] and len(report.preempted) == 7
    assert binder.bound == {}
    moved_pod = f"{move.gang_id}-worker-0"
    assert [k for k, _ in binder.moved] == [moved_pod]
    waits = report.pending[LENDER]
    assert waits.startswith("WaitingForPreemption: waiting for") and move.gang_id in waits

    # The victims are gone; the moved gang's pod is not (its finalizer, its grace period): the
    # lender stays nominated, unbound and not decided again, with the same reason.
    nomination = cache.state().nominations[LENDER]
    assert moved_pod in {k for k, _ in nomination.victims}
    lingering = _terminating(cache, moved_pod)
    for victim in report.preempted:
        pod = cache.pod(f"{victim}-worker-0")
        assert pod is not None
        cache.pod_event("DELETED", pod)
    for _ in range(2):
        report = sched.run_cycle()
        assert binder.bound == {}
        assert LENDER in cache.state().nominations
        assert report.pending[LENDER] == waits
    assert all(LENDER not in offered for offered in decided.offered[1:])

    # The moved pod is gone: the lender is bound on the GPUs the first decision gave it.
    cache.pod_event("DELETED", lingering)
    report = sched.run_cycle()
    assert report.bound == [LENDER]
    by_node = {(b.node, b.annotations[names.ASSIGNED_GPUS]) for b in binder.bound.values()}
    assert by_node == {(r.node, ",".join(map(str, r.gpus))) for r in planned.replicas}


def test_when_the_move_is_refused_the_gang_does_not_wait_for_the_moved_gang() -> None:
    # A budget created since the snapshot forbids the move: the mover skips it; the victims
    # are evicted, and the lender waits for them only, then is decided again.
    cache, binder = _cache(), FakeBinder()
    sched, decided = _loop(cache, binder, budget_on="moved")
    report = sched.run_cycle()
    (move,) = decided.decisions[0].moves
    assert report.moved == [] and binder.moved == [] and len(report.preempted) == 7
    assert binder.bound == {}
    assert report.pending[LENDER] == (
        f"WaitingForPreemption: its GPUs are {move.gang_id}'s, whose move to make room for it "
        "did not go ahead; it is decided again once the pods it waits for are gone"
    )
    nomination = cache.state().nominations[LENDER]
    assert {k for k, _ in nomination.victims} == {f"{v}-worker-0" for v in report.preempted}
    for victim in report.preempted:
        pod = cache.pod(f"{victim}-worker-0")
        assert pod is not None
        cache.pod_event("DELETED", pod)
    # The moved gang's pod was never deleted: the lender does not wait for it.
    assert LENDER not in cache.state().nominations
    sched.run_cycle()
    assert LENDER in decided.offered[1]


def test_when_the_reclaim_is_stopped_the_gang_is_not_moved_for() -> None:
    # A budget created since the snapshot keeps one of the victims: no victim is evicted, the
    # lender is decided again, and the gang the decision moved for it stays where it runs.
    cache, binder = _cache(), FakeBinder()
    sched, _ = _loop(cache, binder, budget_on="one-0")
    report = sched.run_cycle()
    assert report.preempted == [] and binder.evicted == []
    assert report.moved == [] and binder.moved == [] and binder.bound == {}
    assert report.pending[LENDER].startswith("PreemptionBlockedByDisruptionBudget: cannot preempt")
    assert LENDER not in cache.state().nominations
