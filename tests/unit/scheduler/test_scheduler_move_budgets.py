"""Moves in the live loop under PodDisruptionBudgets (mover.py), over an in-memory cache, the
fake binder's budgets and the real greedy core.

Aspects: a checkpointing gang that a budget at disruptionsAllowed 0 selects is shown to the core
as not disruptable and is not moved, while the same gang without a budget, under a budget that
allows its pod to go, or under a budget of another namespace or selector, moves; budgets that
cannot be read move nothing; a budget that appears between the snapshot and the deletion stops
the move right before it (no pod deleted, nothing reserved, a log line and an Event); two moves
drawing on one budget that allows one disruption: only the first goes; an evacuation (a move
for a waiting gang) is held back the same way; budgets are not read when no gang could move.
The skipped move's Event goes to the job that owns the pods (the real Event body, as the API
server takes it; the pod itself for a bare pod) as well as to the Lease, and a failing post
stops nothing. A higher-priority gang whose only victim is such a protected gang waits with
the budget as its reason (the core's `PreemptionBlockedByDisruptionBudget`), as it does when
the victims path finds the budget.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

import pytest
from kubernetes import client

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import MoveRule, Policy
from gpufleet.core.snapshot import Snapshot
from gpufleet.model.contract import names
from gpufleet.model.contract.timestamps import format_time
from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.scheduler.lease_events import object_events
from gpufleet.scheduler.mover import MOVE_BLOCKED, job_reference
from tests.unit.scheduler.scheduler_builders import NodeBuilder, PodBuilder
from tests.unit.scheduler.scheduler_fakes import Clock, FakeBinder, load, scheduler

TYPES = "A100-80GB=0.5,L4=0.1"


def nodes() -> list[dict[str, Any]]:
    return [
        NodeBuilder("l4-0", "L4", 4).obj(),
        NodeBuilder("l4-1", "L4", 4).obj(),
        NodeBuilder("a100-0", "A100-80GB", 8).obj(),
    ]


def long_pod(gang: str = "long", node: str = "l4-0", namespace: str = "ns") -> dict[str, Any]:
    """One 4-GPU worker on an L4 node for 10 minutes, checkpointing on a signal: worth moving
    to the free A100s."""
    pod = (
        PodBuilder(f"{gang}-0", namespace)
        .gang(gang, 1, 0)
        .gpus(4)
        .annotate(names.GPU_TYPES, TYPES)
        .annotate(names.CHECKPOINT, "signal=2")
        .bound(node, "0,1,2,3")
        .annotate(names.ASSIGNED_TYPE, "L4")
        .obj()
    )
    pod["metadata"]["uid"] = f"uid-{gang}"
    pod["status"]["startTime"] = format_time(datetime.now(UTC) - timedelta(seconds=600))
    return pod


def budget(
    allowed: int, gang: str = "long", namespace: str = "ns", name: str = "pdb"
) -> dict[str, Any]:
    """A processed budget over the gang's pods (or, with gang "*", every pod of the
    namespace) that allows `allowed` disruptions."""
    selector: dict[str, Any] = {} if gang == "*" else {"matchLabels": {names.GANG_LABEL: gang}}
    return {
        "metadata": {"name": name, "namespace": namespace, "generation": 1},
        "spec": {"selector": selector},
        "status": {"disruptionsAllowed": allowed, "observedGeneration": 1},
    }


class CountingBinder(FakeBinder):
    """The fake binder, counting budget reads; `unreadable` makes them fail."""

    def __init__(self) -> None:
        super().__init__()
        self.budget_reads = 0
        self.unreadable = False

    def list_budgets(self, namespaces: Iterable[str]) -> list[dict[str, Any]]:
        self.budget_reads += 1
        if self.unreadable:
            raise ConnectionError("connection refused")
        return super().list_budgets(namespaces)


def run(
    pods: list[dict[str, Any]], budgets: Sequence[dict[str, Any]] = (), **options: Any
) -> tuple[list[str], CountingBinder]:
    """One cycle over `pods`; the gangs it moved and the binder."""
    cache, binder = SchedulerCache(), CountingBinder()
    binder.budgets = list(budgets)
    load(cache, nodes(), pods)
    return scheduler(cache, binder, clock=Clock(), **options).run_cycle().moved, binder


@pytest.mark.parametrize(
    ("budgets", "moved"),
    [
        pytest.param([], ["ns/long"], id="no-budget"),
        pytest.param([budget(0)], [], id="budget-allows-none"),
        pytest.param([budget(0, gang="*")], [], id="empty-selector-takes-every-pod"),
        pytest.param([budget(1)], ["ns/long"], id="budget-allows-the-pod"),
        pytest.param([budget(0, namespace="other")], ["ns/long"], id="other-namespace"),
        pytest.param([budget(0, gang="someone")], ["ns/long"], id="other-selector"),
    ],
)
def test_a_budget_at_zero_keeps_a_gang_where_it_runs(
    budgets: list[dict[str, Any]], moved: list[str]
) -> None:
    got, binder = run([long_pod()], budgets)
    assert got == moved
    assert [k for k, _ in binder.moved] == [f"{g}-0" for g in moved]


def test_the_core_sees_the_protected_gang_as_not_disruptable() -> None:
    cache, binder = SchedulerCache(), CountingBinder()
    binder.budgets = [budget(0)]
    load(cache, nodes(), [long_pod(), long_pod("free", "l4-1")])
    sched = scheduler(cache, binder, clock=Clock())
    view = sched.progress.attach(sched.views.build(cache.state().nodes, cache.state().pods, {}))
    shown = {g.id: g for g in sched.mover.protect(view, 1).snapshot.running}
    assert not shown["ns/long"].disruptable and shown["ns/long"].preemptible
    assert shown["ns/free"].disruptable


def test_unreadable_budgets_move_nothing(caplog: pytest.LogCaptureFixture) -> None:
    cache, binder = SchedulerCache(), CountingBinder()
    binder.unreadable = True
    load(cache, nodes(), [long_pod()])
    with caplog.at_level(logging.WARNING, "gpufleet.scheduler"):
        assert scheduler(cache, binder, clock=Clock()).run_cycle().moved == []
    assert binder.moved == []
    assert "cannot read PodDisruptionBudgets, no move" in caplog.text


def test_a_budget_created_after_the_snapshot_stops_the_move_before_the_deletion(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache, binder = SchedulerCache(), CountingBinder()
    events: list[tuple[str, str, str]] = []

    def decide_then_budget(snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
        decision = place(snapshot, pending, policy)
        binder.budgets.append(budget(0))  # someone protects the job while the core decides
        return decision

    load(cache, nodes(), [long_pod()])
    sched = scheduler(
        cache,
        binder,
        clock=Clock(),
        decide=decide_then_budget,
        notify=lambda *event: events.append(event),
    )
    with caplog.at_level(logging.INFO, "gpufleet.scheduler"):
        report = sched.run_cycle()
    assert report.moved == [] and binder.moved == []
    assert sched.mover.reserved == {}
    ((kind, reason, message),) = events
    assert (kind, reason) == ("Normal", MOVE_BLOCKED)
    assert message.startswith("gang ns/long: move to A100-80GB skipped: PodDisruptionBudget ns/pdb")
    assert "allows 0 disruption(s), the gang has 1 pod(s)" in message
    assert message in caplog.text


def test_two_moves_share_a_budget_that_allows_one() -> None:
    # Each gang alone may go, so the core moves both; the second deletion would break the budget.
    moved, binder = run([long_pod(), long_pod("two", "l4-1")], [budget(1, gang="*")])
    assert len(moved) == 1 and [k for k, _ in binder.moved] == [f"{moved[0]}-0"]
    both, _ = run([long_pod(), long_pod("two", "l4-1")])
    assert sorted(both) == ["ns/long", "ns/two"]


def test_budgets_are_not_read_when_no_gang_could_move() -> None:
    unmovable = long_pod()
    del unmovable["metadata"]["annotations"][names.CHECKPOINT]  # no checkpoint: never moved
    assert run([unmovable])[1].budget_reads == 0
    cache, binder = SchedulerCache(), CountingBinder()
    load(cache, nodes(), [long_pod()])
    sched = scheduler(cache, binder, clock=Clock())
    sched.policy = replace(sched.policy, moves=MoveRule(enabled=False))
    assert sched.run_cycle().moved == [] and binder.budget_reads == 0
    # With a move: read once for the snapshot and once more right before the deletion.
    assert run([long_pod()])[1].budget_reads == 2


def test_an_evacuation_is_held_back_by_a_budget_too() -> None:
    # The core's moves turned into evacuations for a waiting gang (as test_scheduler_moves
    # does): a protected gang is not among them, so nothing is deleted.
    def evacuate(snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
        decision = place(snapshot, pending, policy)
        moves = tuple(replace(m, for_gang="ns/wide", gain_s=-75.0) for m in decision.moves)
        return replace(decision, moves=moves)

    assert run([long_pod()], decide=evacuate)[0] == ["ns/long"]
    moved, binder = run([long_pod()], [budget(0)], decide=evacuate)
    assert moved == [] and binder.moved == []


def owned(pod: dict[str, Any], job: str = "long") -> dict[str, Any]:
    """`pod` as a worker of TrainingJob `job`, which the operator makes its controller."""
    pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "gpufleet.io/v1alpha1",
            "kind": "TrainingJob",
            "name": job,
            "uid": f"uid-job-{job}",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    return pod


Event = tuple[Any, ...]


def race(
    pods: list[dict[str, Any]], on_job: Any = None
) -> tuple[list[Event], list[Event], CountingBinder]:
    """One cycle in which a budget at 0 over `long` appears while the core decides; the Events
    posted on the Lease and on objects."""
    cache, binder = SchedulerCache(), CountingBinder()
    lease: list[Event] = []
    objects: list[Event] = []

    def decide_then_budget(snapshot: Snapshot, pending: Sequence[Gang], policy: Policy) -> Decision:
        decision = place(snapshot, pending, policy)
        binder.budgets.append(budget(0))
        return decision

    load(cache, nodes(), pods)
    sched = scheduler(
        cache,
        binder,
        clock=Clock(),
        decide=decide_then_budget,
        notify=lambda *event: lease.append(event),
        notify_on=on_job or (lambda *event: objects.append(event)),
    )
    assert sched.run_cycle().moved == []
    return lease, objects, binder


def test_the_skipped_move_is_reported_on_the_job_too() -> None:
    lease, objects, _ = race([owned(long_pod())])
    ((involved, kind, reason, message),) = objects
    assert involved == {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "TrainingJob",
        "name": "long",
        "namespace": "ns",
        "uid": "uid-job-long",
    }
    assert (kind, reason) == ("Normal", MOVE_BLOCKED)
    assert message.startswith("gang ns/long: move to A100-80GB skipped: PodDisruptionBudget")
    assert lease == [(kind, reason, message)]
    # A gang of bare pods: the Event goes to its first pod.
    _, bare, _ = race([long_pod()])
    assert bare[0][0] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "long-0",
        "namespace": "ns",
        "uid": "uid-long",
    }


def test_a_failing_event_post_stops_nothing(caplog: pytest.LogCaptureFixture) -> None:
    def refuse(*_: Any) -> None:
        raise ConnectionError("connection refused")

    with caplog.at_level(logging.ERROR, "gpufleet.scheduler"):
        lease, _, binder = race([owned(long_pod())], on_job=refuse)
    assert len(lease) == 1 and binder.moved == []  # the Lease still hears of it
    assert f"posting the {MOVE_BLOCKED} Event failed" in caplog.text


def test_the_job_event_is_a_core_v1_event_on_the_job() -> None:
    core = mock.MagicMock()
    job = job_reference(owned(long_pod()))
    object_events(core)(job, "Normal", MOVE_BLOCKED, "gang ns/long: move to A100-80GB skipped")
    namespace, body = core.create_namespaced_event.call_args[0]
    assert namespace == "ns" and body["metadata"]["namespace"] == "ns"
    assert body["metadata"]["name"].startswith("long.")
    # kubectl describe finds an object's Events by involvedObject kind, name, namespace, uid.
    assert body["involvedObject"] == job
    # The generated client reads the body as the API's Event (all required fields set).
    event = client.ApiClient()._ApiClient__deserialize(body, "CoreV1Event")  # type: ignore[attr-defined]
    assert isinstance(event, client.CoreV1Event)
    assert (event.involved_object.kind, event.involved_object.uid) == (
        "TrainingJob",
        "uid-job-long",
    )
    assert (event.type, event.reason, event.count) == ("Normal", MOVE_BLOCKED, 1)
    core.create_namespaced_event.return_value.release_conn.assert_called_once()


def test_a_preemptor_blocked_by_a_protected_checkpointing_victim_says_so() -> None:
    # `low` (priority 0, checkpointing, L4 only) fills l4-0, `busy` (priority 20) fills l4-1;
    # `high` (priority 10) needs 4 L4s. Protected from moves by the budget, `low` is never
    # a victim the victims path could check: the core names the budget itself.
    low = long_pod("low")
    low["metadata"]["annotations"][names.GPU_TYPES] = "L4"
    busy = (
        PodBuilder("busy-0", "ns")
        .gang("busy", 1, 0)
        .gpus(4)
        .annotate(names.GPU_TYPES, "L4")
        .annotate(names.PRIORITY, "20")
        .bound("l4-1", "0,1,2,3")
        .obj()
    )
    high = (
        PodBuilder("high-0", "ns")
        .gang("high", 1, 0)
        .gpus(4)
        .annotate(names.GPU_TYPES, "L4")
        .annotate(names.PRIORITY, "10")
        .obj()
    )

    def cycle(budgets: list[dict[str, Any]]) -> tuple[str, list[str]]:
        cache, binder = SchedulerCache(), CountingBinder()
        binder.budgets = budgets
        load(cache, nodes(), [low, busy, high])
        report = scheduler(cache, binder, clock=Clock()).run_cycle()
        return report.pending.get("ns/high", ""), report.preempted

    assert cycle([])[1] == ["ns/low"]
    message, preempted = cycle([budget(0, gang="low")])
    assert preempted == []
    assert message == (
        "PreemptionBlockedByDisruptionBudget: cannot preempt ns/low: a PodDisruptionBudget "
        "forbids stopping it now"
    )
