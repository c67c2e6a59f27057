"""gpufleet's node healer on the sandbox when every node goes NotReady at once, as after an API
server or etcd outage long enough for every heartbeat to lapse: no gang is restarted (without
the zone rule the operator's 2 s node-failure grace would restart the running gang within
seconds), the scheduler posts NodeHealingPaused on its Lease, and once the nodes are Ready again
it posts NodeHealingResumed and the gang still runs on the same pods.

The outage's effect is made directly (as bench/chaos.py's notready fault does, for every node):
kwok stops heart-beating a node without its annotation, and its Ready condition is set False."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gpufleet.scheduler.heal import HEALING_PAUSED, HEALING_RESUMED
from gpufleet.scheduler.lease import DEFAULT_LEASE_NAME, DEFAULT_LEASE_NAMESPACE
from gpufleet.testing.node_faults import break_nodes, restore_nodes
from gpufleet.testing.operator import Kube, training_job, wait_for

OUTAGE_S = 10.0  # five times the operator's node-failure grace in the tests (2 s)


def _nodes(kube: Kube) -> list[str]:
    return sorted(n.metadata.name for n in kube.core.list_node().items)


def _taints(kube: Kube) -> dict[str, list[tuple[str, str]]]:
    return {
        n.metadata.name: sorted((t.key, t.effect) for t in n.spec.taints or [])
        for n in kube.core.list_node().items
    }


def _all_ready(kube: Kube, taints: dict[str, list[tuple[str, str]]]) -> bool:
    """Every node Ready, with the taints it had before (the node-lifecycle controller's
    not-ready and unreachable taints gone): later modules share the sandbox."""
    for node in kube.core.list_node().items:
        conditions = node.status.conditions or []
        if not any(c.type == "Ready" and c.status == "True" for c in conditions):
            return False
    return _taints(kube) == taints


def _lease_events(kube: Kube, reason: str) -> set[str]:
    events = kube.core.list_namespaced_event(
        DEFAULT_LEASE_NAMESPACE,
        field_selector=f"involvedObject.name={DEFAULT_LEASE_NAME},reason={reason}",
    )
    return {e.metadata.name for e in events.items}


def _same_pods(kube: Kube, ns: str, before: dict[str, str]) -> Callable[[], None]:
    def check() -> None:
        pods = kube.pods(ns)
        now = {p["metadata"]["uid"]: p["spec"].get("nodeName") for p in pods}
        assert now == before, f"the gang's pods changed: {before} -> {now}"
        assert not any(p["metadata"].get("deletionTimestamp") for p in pods)

    return check


def test_every_node_not_ready_at_once_restarts_no_gang(kube: Kube, ns: str) -> None:
    kube.create_job(ns, training_job("steady", 2, 4, "L4"))
    wait_for(lambda: kube.phase(ns, "steady") == "Running", "Running")
    pods: list[dict[str, Any]] = kube.pods(ns)
    before = {p["metadata"]["uid"]: p["spec"]["nodeName"] for p in pods}
    same = _same_pods(kube, ns, before)
    paused_before = _lease_events(kube, HEALING_PAUSED)
    resumed_before = _lease_events(kube, HEALING_RESUMED)
    nodes, taints = _nodes(kube), _taints(kube)
    gang_nodes = sorted(set(before.values()))
    try:
        break_nodes(kube.core, nodes, "outage")
        deadline = time.monotonic() + OUTAGE_S
        while time.monotonic() < deadline:
            same()
            time.sleep(1.0)
        assert _lease_events(kube, HEALING_PAUSED) - paused_before
    finally:
        # The gang's nodes first: the others coming back first would end the pause while
        # the gang's stayed NotReady (a fresh grace then, but the test should not race it).
        order = [*gang_nodes, *(n for n in nodes if n not in gang_nodes)]
        restore_nodes(kube.core, order, report_ready=True)
    wait_for(lambda: _all_ready(kube, taints), "every node Ready and untainted again", 90)
    wait_for(
        lambda: bool(_lease_events(kube, HEALING_RESUMED) - resumed_before),
        "NodeHealingResumed posted",
        30,
    )
    for _ in range(5):  # and still the same pods a few cycles later
        same()
        time.sleep(1.0)
    assert kube.phase(ns, "steady") == "Running"
