"""Creating a sandbox fleet's nodes, and waiting until kwok reports them Ready, at any size.

`kubectl apply` sends one request after another, so nodes are created with parallel POSTs on
kept-alive connections (`ApiWriter`; bench/scale_bench.py reports the time); a node's status is
written with it (the API server keeps the status of a created node). A node that already exists
is left as it is: the MIG manager may have changed its layout since, which the fleet file would
undo.

kwok keeps every node Ready by renewing a Lease per node; the node-lifecycle controller marks a
node NotReady when its Lease is older than its grace period. kwok renews at a quarter of the
lease duration: 5,000 Leases of 40 s would be 500 writes a second, and on two shared cores
renewals then fall behind and nodes flap NotReady. Large fleets therefore get longer leases and
grace periods in proportion to their size (`heartbeat_factor`, as kwokctl's
`--heartbeat-factor` does): about 25 renewals a second at any size, and small fleets (up to
250 nodes, the tests') keep the defaults.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gpufleet.scheduler.apiwriter import ApiWriter
from gpufleet.scheduler.nodes import node_ready
from gpufleet.scheduler.runtime import api_client

NODES_PER_HEARTBEAT_STEP = 250  # one more multiple of the default lease per this many nodes
NODE_LEASE_S = 40  # kwok's node lease at factor 1 (the kubelet's default)
NODE_GRACE_S = 40  # the node-lifecycle controller's grace at factor 1
CREATE_CONNECTIONS = 32
NOT_READY_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def heartbeat_factor(nodes: int) -> int:
    """How many times the default node lease and grace period a fleet of `nodes` gets."""
    return max(1, math.ceil(nodes / NODES_PER_HEARTBEAT_STEP))


def create_nodes(kubeconfig: Path, docs: Sequence[dict[str, Any]]) -> int:
    """Create every node of `docs` that does not exist yet; returns how many were created.
    Raises RuntimeError naming the first node the API server refused."""
    return create_all(kubeconfig, "/api/v1/nodes", docs, "node")


def create_all(kubeconfig: Path, path: str, docs: Sequence[dict[str, Any]], kind: str) -> int:
    """POST every object of `docs` to `path` in parallel; returns how many were created (one
    that exists already counts as not created). Raises RuntimeError naming the first `kind`
    object the API server refused."""
    writer = ApiWriter(api_client(str(kubeconfig)).configuration, connections=CREATE_CONNECTIONS)
    try:
        answers = writer.run(_post_all(writer, path, docs))
    finally:
        writer.close()
    refused = [(doc, status, error) for doc, (status, error) in zip(docs, answers, strict=True)
               if status not in (201, 409)]  # fmt: skip
    if refused:
        doc, _, error = refused[0]
        raise RuntimeError(
            f"creating {kind} {doc['metadata']['name']} failed ({len(refused)} refused): {error}"
        )
    return sum(1 for status, _ in answers if status == 201)


async def _post_all(
    writer: ApiWriter, path: str, docs: Sequence[dict[str, Any]]
) -> list[tuple[int, str]]:
    return await asyncio.gather(*(writer.post(path, doc) for doc in docs))


def usable(node: dict[str, Any]) -> bool:
    """Ready and without the not-ready or unreachable taint (pods that do not tolerate those
    taints, i.e. most, cannot land on the node until the taint is gone)."""
    taints = (node.get("spec") or {}).get("taints") or []
    return node_ready(node) and not any(t.get("key") in NOT_READY_TAINTS for t in taints)


def ready_count(core: Any, selector: str) -> tuple[int, int]:
    """(nodes matching `selector`, those that are Ready and untainted as such)."""
    raw = core.list_node(label_selector=selector, _preload_content=False)
    nodes = json.loads(raw.data)["items"]
    return len(nodes), sum(usable(n) for n in nodes)


def wait_ready(
    kubeconfig: Path,
    expected: int,
    selector: str,
    timeout: float,
    progress: Callable[[str], None] = lambda _: None,
) -> None:
    """Wait until `expected` nodes matching `selector` are Ready; TimeoutError otherwise."""
    from kubernetes import client

    core = client.CoreV1Api(api_client(str(kubeconfig)))
    deadline = time.monotonic() + timeout
    last = (0, 0)
    while time.monotonic() < deadline:
        last = ready_count(core, selector)
        if last[1] >= expected:
            return
        time.sleep(1.0 if expected > 100 else 0.2)
    progress(f"{last[1]} of {expected} nodes Ready")
    raise TimeoutError(f"{last[1]} of {expected} nodes Ready after {timeout:.0f}s")
