"""Node failures made on the sandbox, for tests and the chaos benchmark: kwok, the sandbox's
kubelet, stops heart-beating a node that no longer carries its annotation, and the node is
reported NotReady as a kubelet that died would leave it.

A kwok heartbeat already in flight when the annotation goes can still write Ready=True over
the NotReady condition; the node would then go NotReady only when the node-lifecycle
controller's grace (40 s) runs out. So the condition is written again until it holds across a
pause longer than such a write takes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from kubernetes import client

from gpufleet.sandbox.node_manifests import KWOK_ANNOTATION

HOLD_S = 1.0  # how long NotReady must stay before a node counts as broken
TIMEOUT_S = 20.0


def _not_ready(core: client.CoreV1Api, node: str) -> bool:
    status = core.read_node_status(node).status
    conditions = (status.conditions if status else None) or []
    return any(c.type == "Ready" and c.status == "False" for c in conditions)


def break_nodes(core: client.CoreV1Api, nodes: Iterable[str], message: str) -> None:
    """Stop kwok heart-beating `nodes` and report each NotReady (reason KubeletDown) until the
    condition holds on all of them; raises TimeoutError if it does not within TIMEOUT_S."""
    pending = sorted(set(nodes))
    down = {"type": "Ready", "status": "False", "reason": "KubeletDown", "message": message}
    for node in pending:
        core.patch_node(node, {"metadata": {"annotations": {KWOK_ANNOTATION: None}}})
    deadline = time.monotonic() + TIMEOUT_S
    while pending:
        if time.monotonic() > deadline:
            raise TimeoutError(f"nodes {pending} did not stay NotReady in {TIMEOUT_S:g} s")
        for node in pending:
            core.patch_node_status(node, {"status": {"conditions": [down]}})
        time.sleep(HOLD_S)
        pending = [n for n in pending if not _not_ready(core, n)]


def restore_nodes(core: client.CoreV1Api, nodes: Iterable[str], report_ready: bool) -> None:
    """Give `nodes` back to kwok; with `report_ready`, also report them Ready at once, as their
    kubelet would on its first heartbeat (otherwise kwok's next heartbeat does)."""
    ready: dict[str, Any] = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "",
    }
    for node in nodes:
        core.patch_node(node, {"metadata": {"annotations": {KWOK_ANNOTATION: "fake"}}})
        if report_ready:
            core.patch_node_status(node, {"status": {"conditions": [ready]}})
