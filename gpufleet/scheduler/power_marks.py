"""Phase 9 of the cycle: idle-node power-down on the live cluster (opt-in, `placement.power_down`).

The core's `plan_power` (the simulator's own) decides, after each decision, which empty GPU nodes
go off, which switched-off nodes the pending gangs (or moves of running ones) need back and
which woken nodes have booted; this phase writes its plan as node marks
(`gpufleet.model.contract.power`): a node going off is cordoned and labelled `off`, a woken one
labelled `waking` (still cordoned) and, `boot_s` after its wake, uncordoned with its mark
removed. The marks are the durable state: a restarted
scheduler reads them back, times included. What is not durable is since when a node has been
empty: a restarted scheduler starts counting idle time afresh (a node goes off late, never
early).

A node holds something while any pod other than a DaemonSet's or a mirror pod is bound to it
and not finished (as cluster autoscalers count), whoever scheduled it. A node cordoned by
anyone else, or not Ready, is never switched off (the core sees it unschedulable); a node
carrying gpufleet's mark is gpufleet's to uncordon.

Marks just written are applied to the next cycles' view until the watch shows them
(`hide_marked`), so no cycle places a gang on a node whose cordon is on its way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from gpufleet.core.decision import Decision
from gpufleet.core.demand import Gang
from gpufleet.core.policy import Policy
from gpufleet.core.power_down import NodePower, PowerPlan, PowerState, boot_waits, plan_power
from gpufleet.model.contract.power import PowerMark, mark_patch
from gpufleet.model.contract.reasons import SchedulerReason, pending_text
from gpufleet.scheduler.cluster_view import ClusterView, closed_to_new_pods
from gpufleet.scheduler.pods import is_terminal, node_name

log = logging.getLogger("gpufleet.scheduler")

Obj = Mapping[str, Any]


class NodePatcher(Protocol):
    """The one API call this phase makes (CoreV1Api has it)."""

    def patch_node(self, name: str, body: Any) -> object: ...


@dataclass
class PowerReport:
    """What the phase wrote this cycle, and the gangs waiting for booting nodes."""

    power_off: list[str] = field(default_factory=list)
    wake: list[str] = field(default_factory=list)
    booted: list[str] = field(default_factory=list)
    waiting_for: dict[str, tuple[str, ...]] = field(default_factory=dict)


def counts_as_load(pod: Obj) -> bool:
    """Whether a bound pod keeps its node from going off: not finished, and neither a
    DaemonSet's (one runs on every node) nor a mirror pod (the kubelet's static pods)."""
    meta = pod.get("metadata") or {}
    if is_terminal(pod) or "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return False
    return not any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or ())


class PowerMarks:
    """The marks gpufleet keeps on nodes, and since when each unmarked node has been empty."""

    def __init__(self, api: NodePatcher, clock: Callable[[], float] = time.time) -> None:
        self.api = api
        self.clock = clock  # wall clock: marks carry their times across restarts
        self._written: dict[str, PowerMark] = {}  # until the watch shows them
        self._empty_since: dict[str, float] = {}

    def marks(self, nodes: Sequence[Obj]) -> dict[str, PowerMark]:
        """Each node's mark: as the watch shows it, or as written this process if newer."""
        out: dict[str, PowerMark] = {}
        for node in nodes:
            meta = node.get("metadata") or {}
            name = meta["name"]
            shown = PowerMark.read(meta.get("labels") or {}, meta.get("annotations") or {})
            written = self._written.get(name)
            if written is not None and written.state is shown.state:
                del self._written[name]  # the watch caught up
            out[name] = shown if written is None or written.state is shown.state else written
        return out

    def hide_marked(
        self, view: ClusterView, marks: Mapping[str, PowerMark], policy: Policy
    ) -> ClusterView:
        """The view with every node marked off or waking unschedulable, and listed with the
        time it would take to boot (the core weighs waiting for it, boot_wait.py)."""
        down = {n for n, m in marks.items() if m.state is not PowerState.ON}
        known = {n.name for n in view.snapshot.nodes}
        if not down & known:
            return view
        now = self.clock()
        power: dict[str, NodePower] = {}
        for name in down & known:
            since = marks[name].since
            power[name] = NodePower(marks[name].state, now if since is None else since)
        closed = closed_to_new_pods(view, down)
        waits = boot_waits(power, now, policy.power_down)
        return replace(closed, snapshot=replace(closed.snapshot, boot_wait_s=waits))

    def act(
        self,
        nodes: Sequence[Obj],
        pods: Sequence[Obj],
        view: ClusterView,
        decision: Decision,
        pending: Sequence[Gang],
        policy: Policy,
    ) -> PowerReport:
        """Plan with the core and write the plan's marks; a failed write is logged and tried
        again by a later cycle."""
        report = PowerReport()
        marks = self.marks(nodes)
        if not policy.power_down.enabled and all(m.state is PowerState.ON for m in marks.values()):
            return report  # off, and no node left marked by an earlier setting
        now = self.clock()
        loaded = {node_name(p) for p in pods if node_name(p) and counts_as_load(p)}
        power: dict[str, NodePower] = {}
        for node in view.snapshot.nodes:
            mark = marks.get(node.name, PowerMark())
            if mark.state is not PowerState.ON or node.name in loaded:
                self._empty_since.pop(node.name, None)
                empty = None
            else:
                empty = self._empty_since.setdefault(node.name, now)
            since = now if mark.since is None else mark.since
            power[node.name] = NodePower(mark.state, since, empty)
        plan = plan_power(view.snapshot, pending, power, now, policy, decision)
        self._write(plan, now, report)
        report.waiting_for = dict(plan.waiting_for)
        return report

    def _write(self, plan: PowerPlan, now: float, report: PowerReport) -> None:
        steps = (
            (plan.power_off, PowerMark(PowerState.OFF, now), report.power_off),
            (plan.wake, PowerMark(PowerState.WAKING, now), report.wake),
            (plan.booted, PowerMark(), report.booted),
        )
        for names, mark, done in steps:
            for name in names:
                try:
                    self.api.patch_node(name, mark_patch(mark))
                except Exception as exc:
                    log.warning("node %s: cannot mark it %s: %s", name, mark.state.value, exc)
                    continue
                self._written[name] = mark
                if mark.state is PowerState.ON:
                    self._empty_since.pop(name, None)  # idle time counts from its next check
                done.append(name)
        if plan.changes:
            log.info(
                "power-down: off=%s wake=%s booted=%s",
                report.power_off, report.wake, report.booted,
            )  # fmt: skip


def booting_messages(waiting_for: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    """Pending messages of the gangs that wait for switched-off or booting nodes."""
    return {
        gid: pending_text(SchedulerReason.BOOTING, f"node(s) {', '.join(nodes)} switched on")
        for gid, nodes in waiting_for.items()
    }
