"""Idle-node power-down in the scheduling cycle (phase 9), against an in-memory cluster whose
node patches the test applies like the API server and its watch would.

Aspects: empty nodes beyond the warm one are cordoned and labelled `off` after the idle time,
where DaemonSet pods do not count as load and any other pod does; a node cordoned by someone
else is left alone; a gang that fits on a powered node is bound there and wakes nothing; a gang
that fits only on a switched-off node wakes one, waits with its reason for the boot time and is
bound there once it is uncordoned; a mark written but not yet shown by the watch already keeps
gangs off the node; the rule switched off wakes and uncordons every marked node; with the rule
off and nothing marked, no node is ever patched.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from scheduler_builders import NodeBuilder, PodBuilder
from scheduler_fakes import GREEDY, Clock, FakeBinder, FakeMig, load

from gpufleet.core.policy import PowerDownRule
from gpufleet.model.contract import names
from gpufleet.model.contract.power import PowerMark, PowerState
from gpufleet.model.contract.reasons import PendingNote, SchedulerReason
from gpufleet.model.gpus import load_catalog
from gpufleet.scheduler.cache import SchedulerCache
from gpufleet.scheduler.loop import Scheduler
from gpufleet.scheduler.loop_settings import SchedulerSettings
from gpufleet.scheduler.power_marks import PowerMarks

RULE = PowerDownRule(enabled=True, idle_s=60.0, warm_nodes_per_type=1, boot_s=120.0)


class FakeNodes:
    """Records node patches; with `show`, applies them to the cache as the watch would."""

    def __init__(self, cache: SchedulerCache) -> None:
        self.cache = cache
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.show = True

    def patch_node(self, name: str, body: Any) -> object:
        self.patches.append((name, body))
        if self.show:
            node = copy.deepcopy(
                next(n for n in self.cache.state().nodes if n["metadata"]["name"] == name)
            )
            node["spec"].update(body["spec"])
            for part in ("labels", "annotations"):
                values = node["metadata"].setdefault(part, {})
                for k, v in body["metadata"][part].items():
                    if v is None:
                        values.pop(k, None)
                    else:
                        values[k] = v
            self.cache.node_event("MODIFIED", node)
        return None


class Cluster:
    def __init__(
        self, nodes: list[dict[str, Any]], pods: list[dict[str, Any]], rule: PowerDownRule = RULE
    ) -> None:
        self.cache = SchedulerCache()
        load(self.cache, nodes, pods)
        self.binder = FakeBinder()
        self.nodes = FakeNodes(self.cache)
        self.wall = Clock()
        self.wall.t = 1_780_000_000.0
        settings = SchedulerSettings(explain_delay_s=0.0, busy_explain_delay_s=0.0)
        self.sched = Scheduler(
            self.cache,
            self.binder,  # type: ignore[arg-type]
            FakeMig(),  # type: ignore[arg-type]
            load_catalog(),
            replace(GREEDY, power_down=rule),
            settings,
            power=PowerMarks(self.nodes, self.wall),
        )

    def mark(self, node: str) -> PowerMark:
        obj = next(n for n in self.cache.state().nodes if n["metadata"]["name"] == node)
        meta = obj["metadata"]
        return PowerMark.read(meta.get("labels") or {}, meta.get("annotations") or {})

    def cordoned(self, node: str) -> bool:
        obj = next(n for n in self.cache.state().nodes if n["metadata"]["name"] == node)
        return bool(obj["spec"].get("unschedulable"))

    def add(self, pods: list[dict[str, Any]]) -> None:
        for pod in pods:
            self.cache.pod_event("ADDED", pod)


def gang(name: str, size: int, gpus: int) -> list[dict[str, Any]]:
    return [PodBuilder(f"{name}-{i}").gpus(gpus).gang(name, size, i).obj() for i in range(size)]


def daemon_pod(name: str, node: str) -> dict[str, Any]:
    pod = PodBuilder(name).bound(node).obj()
    pod["spec"]["schedulerName"] = "default-scheduler"
    pod["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "agent", "uid": "d"}]
    return pod


def plain_pod(name: str, node: str) -> dict[str, Any]:
    pod = PodBuilder(name).bound(node).obj()
    pod["spec"]["schedulerName"] = "default-scheduler"
    return pod


def test_empty_nodes_go_off_after_idle_time_keeping_one_warm() -> None:
    nodes = [NodeBuilder(f"h{i}").obj() for i in range(4)] + [NodeBuilder("admin").cordoned().obj()]
    pods = [daemon_pod("ds-h0", "h0"), daemon_pod("ds-h1", "h1"), plain_pod("web", "h3")]
    c = Cluster(nodes, pods)
    c.sched.run_cycle()  # idle time starts counting
    assert c.nodes.patches == []
    c.wall.t += 59
    c.sched.run_cycle()
    assert c.nodes.patches == []
    c.wall.t += 1
    report = c.sched.run_cycle()
    # h0-h2 hold only DaemonSet pods or nothing: two go off, one stays warm; h3 runs a pod;
    # the node someone else cordoned is not gpufleet's to switch.
    assert len(report.power.power_off) == 2
    off = set(report.power.power_off)
    assert off < {"h0", "h1", "h2"}
    for name in off:
        assert c.mark(name) == PowerMark(PowerState.OFF, c.wall.t)
        assert c.cordoned(name)
    assert c.mark("h3").state is PowerState.ON and not c.cordoned("h3")
    assert c.mark("admin").state is PowerState.ON


def test_gang_fits_on_the_warm_node_or_wakes_one_and_waits_for_its_boot() -> None:
    c = Cluster([NodeBuilder(f"h{i}").obj() for i in range(3)], [])
    c.sched.run_cycle()
    c.wall.t += 60
    c.sched.run_cycle()
    (warm,) = {"h0", "h1", "h2"} - {n for n in ("h0", "h1", "h2") if c.cordoned(n)}
    c.add(gang("small", 1, 8))
    report = c.sched.run_cycle()
    assert report.sent == 1
    assert c.binder.bound["default/small-0"].node == warm
    assert report.power.wake == []
    # Every powered node is now full: an 8-GPU gang wakes exactly one switched-off node.
    c.add(gang("big", 1, 8))
    report = c.sched.run_cycle()
    (woken,) = report.power.wake
    assert c.mark(woken) == PowerMark(PowerState.WAKING, c.wall.t)
    assert c.cordoned(woken)
    note = PendingNote.parse(report.pending["default/big"])
    assert note.reason is SchedulerReason.BOOTING and woken in note.detail
    assert c.binder.marked["default/big-0"] == report.pending["default/big"]
    c.wall.t += 119
    report = c.sched.run_cycle()
    assert "default/big-0" not in c.binder.bound and report.power.wake == []
    c.wall.t += 1
    report = c.sched.run_cycle()
    assert report.power.booted == [woken]
    assert c.mark(woken).state is PowerState.ON and not c.cordoned(woken)
    c.sched.run_cycle()
    assert c.binder.bound["default/big-0"].node == woken


def test_mark_not_yet_shown_by_the_watch_keeps_gangs_off_the_node() -> None:
    c = Cluster(
        [NodeBuilder("h0").obj(), NodeBuilder("h1").obj()],
        [],
        replace(RULE, warm_nodes_per_type=0, idle_s=0.0),
    )
    c.nodes.show = False
    report = c.sched.run_cycle()
    assert sorted(report.power.power_off) == ["h0", "h1"]
    assert not c.cordoned("h0")  # the watch has not shown the cordon yet
    c.add(gang("g", 1, 1))
    report = c.sched.run_cycle()
    assert "default/g-0" not in c.binder.bound
    assert len(report.power.wake) == 1  # woken for it instead


def test_rule_switched_off_wakes_and_uncordons_every_marked_node() -> None:
    off = NodeBuilder("h1").cordoned().obj()
    off["metadata"]["labels"][names.POWER_STATE_LABEL] = "off"
    c = Cluster([NodeBuilder("h0").obj(), off], [], replace(RULE, enabled=False))
    report = c.sched.run_cycle()
    assert report.power.wake == ["h1"] and c.cordoned("h1")
    c.wall.t += 120
    report = c.sched.run_cycle()
    assert report.power.booted == ["h1"] and not c.cordoned("h1")
    assert c.mark("h1") == PowerMark()
    patches = len(c.nodes.patches)
    c.wall.t += 10_000
    c.sched.run_cycle()
    assert len(c.nodes.patches) == patches  # off and nothing marked: no more writes


def test_rule_off_never_patches_a_node() -> None:
    c = Cluster(
        [NodeBuilder("h0").obj(), NodeBuilder("h1").obj()], [], replace(RULE, enabled=False)
    )
    for _ in range(3):
        c.wall.t += 10_000
        c.sched.run_cycle()
    assert c.nodes.patches == []


def test_gang_waits_for_a_switched_off_fast_node_rather_than_start_on_a_slow_one() -> None:
    # The core's boot wait (boot_wait.py) live: the H100 node is marked off, a T4 node is
    # powered and free; a 4-GPU gang 5x faster on the H100 wakes it and waits for its boot.
    off = NodeBuilder("h100", "H100-80GB").cordoned().obj()
    off["metadata"]["labels"][names.POWER_STATE_LABEL] = "off"
    c = Cluster([off, NodeBuilder("t4", "T4", 4).obj()], [], replace(RULE, warm_nodes_per_type=1))
    types = "H100-80GB=1.0,T4=0.2"
    c.add([PodBuilder("fast-0").gpus(4).gang("fast", 1, 0).annotate(names.GPU_TYPES, types).obj()])
    report = c.sched.run_cycle()
    assert report.power.wake == ["h100"]
    assert "default/fast-0" not in c.binder.bound
    note = PendingNote.parse(report.pending["default/fast"])
    assert note.reason is SchedulerReason.BOOTING and "h100" in note.detail
    c.wall.t += RULE.boot_s
    c.sched.run_cycle()  # booted: uncordoned
    c.sched.run_cycle()
    assert c.binder.bound["default/fast-0"].node == "h100"
