"""The live loop and a gang given GPUs of another gang's victim (`GangPlacement.waits_for`):
two full 8-GPU nodes; `high` (priority 10, 4 GPUs) evicts `low` (priority 1, two workers of 4
GPUs on h0) and the core gives `mid` (priority 5, 4 GPUs) the 4 GPUs high does not need
instead of evicting `other` (priority 2, 8 GPUs on h1). mid is held, unbound, until low's pods
are gone, with its own reason, and bound with high then; when a budget stops low's eviction,
mid is not bound either (its GPUs stay busy)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler_builders import NodeBuilder, PodBuilder
from test_scheduler_cycle import gang, make
from test_scheduler_disruption import budget

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.place import place
from gpufleet.core.policy import Engine, Policy, SolverSettings
from gpufleet.core.snapshot import Snapshot
from gpufleet.model.contract import names


def _low() -> list[dict[str, Any]]:
    return [
        PodBuilder(f"low-{i}")
        .gpus(4)
        .gang("low", 2, i)
        .bound("h0", gpus="0,1,2,3" if i == 0 else "4,5,6,7")
        .annotate(names.PRIORITY, "1")
        .obj()
        for i in range(2)
    ]


def _other() -> dict[str, Any]:
    b = PodBuilder("other-0").gpus(8).gang("other", 1, 0).annotate(names.PRIORITY, "2")
    return b.bound("h1", gpus="0,1,2,3,4,5,6,7").obj()


def _pending() -> list[dict[str, Any]]:
    mid = gang("mid", 1, 4, **{names.PRIORITY: "5"})
    return [_other(), *gang("high", 1, 4, **{names.PRIORITY: "10"}), *mid]


NODES = [NodeBuilder("h0").obj(), NodeBuilder("h1").obj()]


def test_a_gang_given_a_victims_gpus_is_bound_only_once_the_victim_is_gone() -> None:
    low = _low()
    sched, cache, binder, _ = make(NODES, low + _pending())
    report = sched.run_cycle()
    assert report.preempted == ["default/low"]  # low alone: not other for mid
    assert binder.bound == {}
    waits = "WaitingForPreemption: waiting for default/low, preempted for another gang"
    assert report.pending["default/mid"].startswith(waits)
    # Victims still shown: neither gang is offered, bound or evicting.
    binder.evicted.clear()
    report = sched.run_cycle()
    assert report.bound == [] and binder.evicted == []
    assert report.pending["default/mid"].startswith(waits)
    assert report.pending["default/high"].startswith("WaitingForPreemption: waiting for the gangs")
    for pod in low:
        cache.pod_event("DELETED", pod)
    assert sorted(sched.run_cycle().bound) == ["default/high", "default/mid"]


def test_a_gang_waiting_for_a_victim_a_budget_keeps_is_not_bound() -> None:
    sched, cache, binder, _ = make(NODES, _low() + _pending())
    binder.budgets = [budget("keep-one", 1, {"matchLabels": {names.GANG_LABEL: "low"}})]
    report = sched.run_cycle()
    assert report.preempted == [] and binder.evicted == [] and binder.bound == {}
    assert report.pending["default/mid"] == (
        "WaitingForPreemption: it takes the GPUs or the queue quota of default/low, whose "
        "preemption for another gang did not go ahead"
    )
    assert "default/mid" not in cache.state().nominations  # decided again next cycle


def test_a_gang_cpsat_puts_on_a_victims_gpus_is_not_bound_while_they_are_busy() -> None:
    """The default engine, CP-SAT, sees greedy's victims' GPUs free and may give them to any
    gang: here mid (priority 0, no victim of its own) gets the 4 GPUs of low that high does not
    need. Before, the loop bound mid at once onto GPUs low's pods still held."""
    low = _low()
    mid = gang("mid", 1, 4)
    policy = Policy(solver=SolverSettings(engine=Engine.CPSAT))

    def decide(snapshot: Snapshot, pending: Sequence[Gang], _: Policy) -> Decision:
        return place(snapshot, pending, policy)

    sched, cache, binder, _ = make(
        [NodeBuilder("h0").obj()],
        low + gang("high", 1, 4, **{names.PRIORITY: "10"}) + mid,
        decide=decide,
    )
    report = sched.run_cycle()
    assert report.preempted == ["default/low"] and binder.bound == {}
    assert report.pending["default/mid"].startswith("WaitingForPreemption: waiting for default/low")
    for pod in low:
        cache.pod_event("DELETED", pod)
    assert sorted(sched.run_cycle().bound) == ["default/high", "default/mid"]
