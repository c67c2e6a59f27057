"""Preemption through the Eviction API under PodDisruptionBudgets, decided per whole gang:
label selectors as policy/v1 reads them; a budget that cannot cover every pod of the victims
stops the whole preemption (nothing evicted, the preemptor pending with the budget as reason,
the victims offered as not preemptible for a while); budgets shared by two preemptors in one
cycle; an eviction refused midway (the race after the check); the reason the Eviction API
overwrites restored in the cache for pods gpufleet evicted."""

from __future__ import annotations

from typing import Any

import pytest
from scheduler_builders import NodeBuilder, PodBuilder
from test_scheduler_cycle import gang, make

from gpufleet.model.contract import names
from gpufleet.scheduler import pods
from gpufleet.scheduler.disruption import gang_blocked, selector_matches


def budget(name: str, allowed: int, selector: dict[str, Any] | None, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "generation": 1, **meta},
        "spec": {"selector": selector},
        "status": {"disruptionsAllowed": allowed, "observedGeneration": 1},
    }


def low_gang(name: str = "low", node: str = "h0", prio: str = "1") -> list[dict[str, Any]]:
    return [
        PodBuilder(f"{name}-{i}")
        .gpus(4)
        .gang(name, 2, i)
        .bound(node, gpus="0,1,2,3" if i == 0 else "4,5,6,7")
        .annotate(names.PRIORITY, prio)
        .obj()
        for i in range(2)
    ]


GANG_SELECTOR = {"matchLabels": {names.GANG_LABEL: "low"}}
EVICTED_BY_API = "EvictionByEvictionAPI"  # the reason the API server writes as it evicts


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        pytest.param({}, {"a": "1"}, True, id="empty-selects-all"),
        pytest.param(None, {"a": "1"}, False, id="null-selects-none"),
        pytest.param({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True, id="labels"),
        pytest.param({"matchLabels": {"a": "2"}}, {"a": "1"}, False, id="labels-differ"),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]},
            {"a": "2"},
            True,
            id="in",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]},
            {"a": "1"},
            False,
            id="not-in",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {}, False, id="exists"
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]},
            {},
            True,
            id="does-not-exist",
        ),
    ],
)
def test_selector(selector: Any, labels: dict[str, str], matches: bool) -> None:
    assert selector_matches(selector, labels) is matches


@pytest.mark.parametrize(
    ("budgets", "spent", "blocked"),
    [
        pytest.param([], {}, None, id="no-budget"),
        pytest.param([budget("b", 2, GANG_SELECTOR)], {}, None, id="enough"),
        pytest.param([budget("b", 1, GANG_SELECTOR)], {}, "allows 1", id="one-of-two"),
        pytest.param([budget("b", 3, GANG_SELECTOR)], {"default/b": 2}, "allows 1", id="spent"),
        pytest.param([budget("b", 0, {"matchLabels": {"x": "y"}})], {}, None, id="other-pods"),
        pytest.param(
            [budget("b", 5, GANG_SELECTOR, generation=2)], {}, "not yet processed", id="stale"
        ),
        pytest.param(
            [budget("a", 5, GANG_SELECTOR), budget("b", 5, {})], {}, "more than one", id="two"
        ),
    ],
)
def test_gang_blocked(budgets: list[Any], spent: dict[str, int], blocked: str | None) -> None:
    charged = dict(spent)
    why = gang_blocked(low_gang(), budgets, charged)
    if blocked is None:
        assert why is None
    else:
        assert why is not None and blocked in why
        assert charged == spent  # nothing charged for a refused gang


def test_pending_pods_do_not_draw_on_a_budget() -> None:
    pods = [PodBuilder("p").gpus(1).gang("low", 1, 0).obj()]  # Pending
    assert gang_blocked(pods, [budget("b", 0, GANG_SELECTOR)], {}) is None


def test_budget_short_of_the_gang_stops_the_whole_preemption() -> None:
    high = gang("high", 1, 8, **{names.PRIORITY: "10"})
    sched, _, binder, _ = make([NodeBuilder("h0").obj()], low_gang() + high)
    binder.budgets = [budget("keep-one", 1, GANG_SELECTOR)]
    report = sched.run_cycle()
    assert report.preempted == [] and binder.evicted == [] and binder.bound == {}
    message = report.pending["default/high"]
    assert message.startswith("PreemptionBlockedByDisruptionBudget: cannot preempt default/low")
    assert "default/keep-one allows 1 disruption(s), the gang has 2 pod(s)" in message
    assert binder.marked["default/high-0"] == message
    # Next cycle the protected gang is not offered as preemptible: nothing is evicted and the
    # preemptor keeps the budget as its reason.
    report = sched.run_cycle()
    assert binder.evicted == [] and report.pending["default/high"] == message


def test_budget_that_covers_the_gang_lets_it_go() -> None:
    high = gang("high", 1, 8, **{names.PRIORITY: "10"})
    sched, _, binder, _ = make([NodeBuilder("h0").obj()], low_gang() + high)
    binder.budgets = [budget("room", 2, GANG_SELECTOR)]
    assert sched.run_cycle().preempted == ["default/low"]
    assert sorted(k for k, _ in binder.evicted) == ["default/low-0", "default/low-1"]


def test_two_preemptors_share_one_budget() -> None:
    nodes = [NodeBuilder("h0").obj(), NodeBuilder("h1").obj()]
    lows = low_gang("low", "h0") + low_gang("low2", "h1")
    for pod in lows:
        pod["metadata"]["labels"]["app"] = "lows"
    highs = gang("high", 1, 8, **{names.PRIORITY: "10"}) + gang(
        "higher", 1, 8, **{names.PRIORITY: "10"}
    )
    sched, _, binder, _ = make(nodes, lows + highs)
    binder.budgets = [budget("lows", 3, {"matchLabels": {"app": "lows"}})]
    report = sched.run_cycle()
    assert len(report.preempted) == 1 and len(binder.evicted) == 2  # 2 + 2 > 3
    assert sum(m.startswith("PreemptionBlockedByDisruptionBudget") for m in report.pending.values())


def test_eviction_refused_midway_leaves_the_preemptor_waiting_with_the_reason() -> None:
    high = gang("high", 1, 8, **{names.PRIORITY: "10"})
    sched, _, binder, _ = make([NodeBuilder("h0").obj()], low_gang() + high)
    binder.refuse = {"default/low-1": "429 Too Many Requests"}
    report = sched.run_cycle()
    assert binder.evicted == [("default/low-0", names.PREEMPTED_REASON)]
    assert report.pending["default/high"] == (
        "PreemptionBlockedByDisruptionBudget: 1 of 2 evictions refused: 429 Too Many Requests"
    )


def test_gpufleets_reason_outlives_the_eviction_apis_rewrite() -> None:
    pod = PodBuilder("low-0").gpus(4).gang("low", 2, 0).bound("h0").obj()
    assert pods.disruption_reason(pod) is None
    rewritten = {"type": names.DISRUPTION_TARGET, "status": "True", "reason": EVICTED_BY_API}
    evicted = {**pod, "status": {"phase": "Running", "conditions": [rewritten]}}
    # Someone else's eviction: the API server's reason.
    assert pods.disruption_reason(evicted) == EVICTED_BY_API
    # gpufleet's eviction: the annotation it wrote first wins.
    ours = {
        **evicted,
        "metadata": {
            **pod["metadata"],
            "annotations": {**pod["metadata"]["annotations"], names.DISRUPTED_BY: "Preempted"},
        },
    }
    assert pods.disruption_reason(ours) == "Preempted"
