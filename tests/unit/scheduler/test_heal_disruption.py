"""The node healer's zone rule (Kubernetes' node-lifecycle controller's): no gang restarts while
every node of every zone is NotReady (a control-plane outage, most likely), and the nodes still
NotReady when one comes back get a full grace period from then; in a zone past the unhealthy
threshold restarts slow to one node per interval (large zones) or stop (small ones); a fully
disrupted zone beside a healthy one heals as usual. The pure rule, then whole cycles with the
real core over an in-memory cache."""

from __future__ import annotations

from typing import Any
from unittest import mock

from scheduler_builders import NodeBuilder, PodBuilder
from scheduler_fakes import Clock, FakeBinder, load, scheduler

from gpufleet.model.contract import names
from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.scheduler.heal import (
    EXCLUDE_DISRUPTION_LABEL,
    HEALING_PAUSED,
    HEALING_RESUMED,
    HEALING_SLOWED,
    ZONE_LABEL,
    DisruptionRule,
    Zone,
    ZoneState,
    plan_healing,
    zones,
)
from gpufleet.scheduler.lease_events import lease_events

RULE = DisruptionRule(unhealthy_zone_threshold=0.55, partial_interval_s=100, large_zone_nodes=50)


def node(name: str, zone: str = "", ready: bool = True, **labels: str) -> dict[str, Any]:
    b = NodeBuilder(name)
    if not ready:
        b.not_ready()
    out = b.obj()
    if zone:
        out["metadata"]["labels"][ZONE_LABEL] = zone
    out["metadata"]["labels"].update(labels)
    return out


def test_zone_states_follow_the_controllers_thresholds() -> None:
    assert Zone(10, 10).state(RULE) is ZoneState.FULL
    assert Zone(10, 6).state(RULE) is ZoneState.PARTIAL  # 60 % >= 55 %
    assert Zone(10, 5).state(RULE) is ZoneState.NORMAL
    assert Zone(4, 2).state(RULE) is ZoneState.NORMAL  # 50 %, and two nodes are not enough
    assert Zone(3, 2).state(RULE) is ZoneState.NORMAL  # 67 %, but only two nodes down
    assert Zone(1, 1).state(RULE) is ZoneState.FULL


def test_switched_off_and_excluded_nodes_do_not_count() -> None:
    nodes = [
        node("a", "z1", ready=False),
        node("b", "z1", ready=False, **{names.POWER_STATE_LABEL: "off"}),
        node("c", "z1", ready=False, **{EXCLUDE_DISRUPTION_LABEL: ""}),
        node("d", "z1"),
        node("e"),
    ]
    assert zones(nodes) == {"z1": Zone(2, 1), "": Zone(1, 0)}


def test_every_zone_fully_disrupted_restarts_nothing() -> None:
    counts = {"z1": Zone(3, 3), "z2": Zone(2, 2)}
    failed = {"a": ("z1", 0.0), "b": ("z2", 0.0)}
    plan = plan_healing(counts, failed, {}, 100.0, RULE)
    assert plan.paused and plan.heal == frozenset()
    assert plan.held == {"a", "b"}


def test_a_fully_disrupted_zone_beside_a_healthy_one_heals() -> None:
    counts = {"z1": Zone(3, 3), "z2": Zone(5, 0)}
    plan = plan_healing(counts, {"a": ("z1", 0.0), "b": ("z1", 0.0)}, {}, 100.0, RULE)
    assert not plan.paused and plan.heal == {"a", "b"}


def test_a_normal_zone_heals_every_failed_node() -> None:
    counts = {"": Zone(10, 2)}
    plan = plan_healing(counts, {"a": ("", 0.0), "b": ("", 5.0)}, {}, 100.0, RULE)
    assert plan.heal == {"a", "b"} and plan.slowed == ()


def test_a_small_zone_in_partial_disruption_heals_none() -> None:
    counts = {"z1": Zone(10, 6), "z2": Zone(10, 1)}
    failed = {"a": ("z1", 0.0), "b": ("z1", 0.0), "c": ("z2", 0.0)}
    plan = plan_healing(counts, failed, {}, 1000.0, RULE)
    assert plan.slowed == ("z1",)
    assert plan.heal == {"c"} and plan.held == {"a", "b"}


def test_a_large_zone_in_partial_disruption_heals_one_node_per_interval() -> None:
    counts = {"z1": Zone(100, 60)}
    failed = {"a": ("z1", 5.0), "b": ("z1", 1.0), "c": ("z1", 3.0)}
    first = plan_healing(counts, failed, {}, 10.0, RULE)
    assert first.heal == {"b"}  # the one NotReady longest
    # b done at t=10: nothing new before 110, then the next longest.
    assert plan_healing(counts, failed, {"z1": 10.0}, 109.0, RULE, done={"b"}).heal == {"b"}
    assert plan_healing(counts, failed, {"z1": 10.0}, 110.0, RULE, done={"b"}).heal == {"b", "c"}


# --- whole cycles -----------------------------------------------------------------------------


class Events:
    def __init__(self) -> None:
        self.posted: list[tuple[str, str, str]] = []

    def __call__(self, kind: str, reason: str, message: str) -> None:
        self.posted.append((kind, reason, message))

    def reasons(self) -> list[str]:
        return [r for _, r, _ in self.posted]


def fleet(ready: dict[str, bool]) -> list[dict[str, Any]]:
    return [node(name, ready=up) for name, up in ready.items()]


def test_an_outage_that_makes_every_node_not_ready_restarts_no_gang() -> None:
    clock, events = Clock(), Events()
    cache = SchedulerCache(clock=clock)
    pods = [
        PodBuilder("g-0").gpus(1).gang("g", 2, 0).bound("h0", gpus="0").obj(),
        PodBuilder("g-1").gpus(1).gang("g", 2, 1).bound("h1", gpus="0").obj(),
    ]
    load(cache, fleet({"h0": False, "h1": False, "h2": False}), pods)
    binder = FakeBinder()
    sched = scheduler(cache, binder, node_failure_grace_s=10, clock=clock, notify=events)
    assert sched.run_cycle().restarted == []
    clock.t = 300  # long past the grace: without the rule the gang restarts here
    assert sched.run_cycle().restarted == []
    assert binder.deleted == []
    assert events.reasons() == [HEALING_PAUSED]
    assert events.posted[0][0] == "Warning" and "all 3 nodes are NotReady" in events.posted[0][2]
    # h2 heartbeats again: healing resumes, and h0 and h1 get a full grace from now.
    cache.node_event("MODIFIED", node("h2"))
    clock.t = 301
    assert sched.run_cycle().restarted == []
    assert events.reasons() == [HEALING_PAUSED, HEALING_RESUMED]
    cache.node_event("MODIFIED", node("h0"))  # h0 back within that grace; h1 is not
    clock.t = 310
    assert sched.run_cycle().restarted == []
    clock.t = 311
    assert sched.run_cycle().restarted == ["default/g"]
    assert sorted(d[0] for d in binder.deleted) == ["default/g-0", "default/g-1"]


def test_most_nodes_of_a_small_fleet_not_ready_restarts_no_gang_until_fewer_are() -> None:
    clock, events = Clock(), Events()
    cache = SchedulerCache(clock=clock)
    pods = [PodBuilder("p").gpus(1).bound("h0", gpus="0").obj()]
    ready = {f"h{i}": i >= 3 for i in range(5)}  # 3 of 5 NotReady: partial disruption
    load(cache, fleet(ready), pods)
    binder = FakeBinder()
    sched = scheduler(cache, binder, node_failure_grace_s=10, clock=clock, notify=events)
    sched.run_cycle()
    clock.t = 100
    assert sched.run_cycle().restarted == []
    assert events.reasons() == [HEALING_SLOWED]
    cache.node_event("MODIFIED", node("h2"))  # 2 of 5: normal again
    clock.t = 101
    assert sched.run_cycle().restarted == ["default/pod:p"]
    assert events.reasons() == [HEALING_SLOWED, HEALING_RESUMED]


def test_a_failing_event_post_does_not_stop_the_cycle() -> None:
    def broken(kind: str, reason: str, message: str) -> None:
        raise RuntimeError("API server down")

    clock = Clock()
    cache = SchedulerCache(clock=clock)
    load(cache, fleet({"h0": False}), [PodBuilder("p").gpus(1).bound("h0", gpus="0").obj()])
    sched = scheduler(cache, FakeBinder(), node_failure_grace_s=0, clock=clock, notify=broken)
    report = sched.run_cycle()
    assert report.error is None and report.restarted == []


def test_reports_are_posted_as_events_on_the_lease() -> None:
    core = mock.MagicMock()
    lease_events(core, "gpufleet-system", "gpufleet-scheduler")("Warning", HEALING_PAUSED, "why")
    namespace, body = core.create_namespaced_event.call_args[0]
    assert namespace == "gpufleet-system"
    assert body["involvedObject"] == {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "name": "gpufleet-scheduler",
        "namespace": "gpufleet-system",
    }
    assert (body["type"], body["reason"], body["message"]) == ("Warning", HEALING_PAUSED, "why")
    core.create_namespaced_event.return_value.release_conn.assert_called_once()
