"""Node eligibility on the sandbox: gpufleet's scheduler honours taints, nodeSelector, required
node affinity and CPU requests before it places a gang, and the job's condition says which
filter left out how many nodes.

Aspects under test (each against the real API server, operator and scheduler):
- a tainted pool: a job without the toleration waits naming the taint and the node count; with
  the toleration in its template it runs there;
- a job pinned to one pool by `nodeSelector` runs there although another acceptable type is
  worth more;
- required node affinity `NotIn`: the gang avoids the named nodes;
- a node without CPU to spare: a job that can only use it waits naming `NodeResourcesFit`,
  and runs once the pod holding the CPU is gone.
Node changes (taints) are undone after each test: the sandbox is shared by the session.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.operator.podtemplate import GPU_TOLERATIONS
from gpufleet.sandbox.control_plane import Sandbox
from gpufleet.testing.operator import Kube, training_job, wait_for

L4_NODES = [f"l4-{i}" for i in range(4)]


def job(name: str, gpus: int, gpu_types: list[str], **pod_spec: Any) -> dict[str, Any]:
    manifest = training_job(name, 1, gpus=gpus)
    manifest["spec"]["gpuTypes"] = [{"name": t} for t in gpu_types]
    manifest["spec"]["template"]["spec"].update(pod_spec)
    return manifest


def nodes_of(kube: Kube, ns: str, name: str) -> set[str]:
    pods = kube.pods(ns, f"gpufleet.io/gang={name}")
    return {p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}


def waiting_message(kube: Kube, ns: str, name: str) -> str | None:
    condition = kube.condition(ns, name, "Admitted")
    if condition is None or condition["status"] != "False":
        return None
    return str(condition.get("message", ""))


@pytest.fixture
def tainted_l4(sandbox: Sandbox) -> Iterator[list[str]]:
    """The L4 pool with an extra taint, removed afterwards."""
    sandbox.kubectl("taint", "nodes", *L4_NODES, "dedicated=inference:NoSchedule")
    try:
        yield L4_NODES
    finally:
        sandbox.kubectl("taint", "nodes", *L4_NODES, "dedicated=inference:NoSchedule-")


def test_tainted_pool_needs_the_toleration(kube: Kube, ns: str, tainted_l4: list[str]) -> None:
    kube.create_job(ns, job("plain", 4, ["L4"]))
    message = wait_for(
        lambda: (m := waiting_message(kube, ns, "plain")) and "TaintToleration" in m and m,
        "the untolerated taint as the reason",
        60,
    )
    assert "NoEligibleNode" in message
    assert (
        "TaintToleration: 4 nodes have a taint the job does not tolerate: "
        "dedicated=inference:NoSchedule" in message
    )
    tolerant = [
        *GPU_TOLERATIONS,
        {"key": "dedicated", "operator": "Equal", "value": "inference", "effect": "NoSchedule"},
    ]
    kube.create_job(ns, job("tolerant", 4, ["L4"], tolerations=tolerant))
    wait_for(lambda: kube.phase(ns, "tolerant") == "Running", "the tolerant job running", 60)
    assert nodes_of(kube, ns, "tolerant") <= set(tainted_l4)
    assert kube.phase(ns, "plain") == "Queued"


def test_node_selector_pins_a_job_to_one_pool(kube: Kube, ns: str) -> None:
    # H100 is worth more per GPU than A100; the selector still keeps the job on A100 nodes.
    pinned = job(
        "pinned", 2, ["H100-80GB", "A100-80GB"], nodeSelector={"gpufleet.io/node-pool": "a100"}
    )
    kube.create_job(ns, pinned)
    wait_for(lambda: kube.phase(ns, "pinned") == "Running", "the pinned job running", 60)
    [node] = nodes_of(kube, ns, "pinned")
    assert node.startswith("a100-") and not node.startswith("a100-mig")


def test_affinity_not_in_avoids_the_named_nodes(kube: Kube, ns: str) -> None:
    avoid = L4_NODES[:3]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": avoid}
                        ]
                    }
                ]
            }
        }
    }
    kube.create_job(ns, job("elsewhere", 4, ["L4"], affinity=affinity))
    wait_for(lambda: kube.phase(ns, "elsewhere") == "Running", "the job running", 60)
    assert nodes_of(kube, ns, "elsewhere") == {L4_NODES[3]}


def test_a_node_without_cpu_to_spare_is_skipped(kube: Kube, ns: str) -> None:
    # A pod bound straight to t4-0 takes all but one of its 128 cores.
    filler = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cpu-hog"},
        "spec": {
            "nodeName": "t4-0",
            "tolerations": list(GPU_TOLERATIONS),
            "containers": [
                {
                    "name": "m",
                    "image": "registry.example/x:1",
                    "resources": {"requests": {"cpu": "127"}},
                }
            ],
        },
    }
    kube.core.create_namespaced_pod(ns, json.loads(json.dumps(filler)))
    pinned = job(
        "needs-cpu",
        1,
        ["T4"],
        nodeSelector={"kubernetes.io/hostname": "t4-0"},
    )
    pinned["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "2"}}
    kube.create_job(ns, pinned)
    message = wait_for(
        lambda: (m := waiting_message(kube, ns, "needs-cpu")) and "NodeResourcesFit" in m and m,
        "NodeResourcesFit as the reason",
        60,
    )
    assert "NodeResourcesFit: 1 node does not have the cpu to spare" in message
    assert "NodeAffinity: 15 nodes do not match the job's nodeSelector" in message
    kube.core.delete_namespaced_pod("cpu-hog", ns, grace_period_seconds=0)
    wait_for(lambda: kube.phase(ns, "needs-cpu") == "Running", "the job running on t4-0", 60)
    assert nodes_of(kube, ns, "needs-cpu") == {"t4-0"}
