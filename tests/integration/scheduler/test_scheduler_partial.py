"""A gang left partly bound (a crash between two bindings), made by hand on the sandbox while
the operator is stopped: binding rank 0 through `pods/binding` the way the scheduler would.
When gpufleet starts it completes the gang, binding the rest where the core finds room beside
the bound pod, and leaves the bound pod alone; when the rest cannot fit, it restarts the gang
(deletes the bound pod) instead of holding GPUs for a gang that cannot run. Raw pods (no
TrainingJob), so nothing recreates what gpufleet deletes."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from gpufleet.model.contract import names
from gpufleet.operator.podtemplate import GPU_TOLERATIONS
from gpufleet.testing import invariants
from gpufleet.testing.operator import Kube, OperatorProcess, wait_for


def gang_pod(name: str, size: int, rank: int) -> Any:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {names.GANG_LABEL: "g", names.RANK_LABEL: str(rank)},
            "annotations": {names.GANG_SIZE: str(size), names.GPU_TYPES: "L4"},
        },
        "spec": {
            "schedulerName": names.SCHEDULER_NAME,
            # The sandbox's GPU nodes carry the GPU Operator's taint.
            "tolerations": list(GPU_TOLERATIONS),
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/x:1",
                    "resources": {"limits": {"nvidia.com/gpu": "4"}},
                }
            ],
        },
    }


def filler(name: str, node: str) -> Any:
    """A 4-GPU pod of another scheduler pinned to `node`."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/x:1",
                    "resources": {"limits": {"nvidia.com/gpu": "4"}},
                }
            ],
        },
    }


def leave_partly_bound(kube: Kube, ns: str, operator: OperatorProcess) -> str:
    """With gpufleet stopped, create a 2-pod gang and bind rank 0 onto l4-0; its uid."""
    operator.stop()
    for rank in range(2):
        kube.core.create_namespaced_pod(ns, gang_pod(f"g-{rank}", 2, rank), _preload_content=False)
    binding: Any = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {
            "name": "g-0",
            "annotations": {names.ASSIGNED_GPUS: "0,1,2,3", names.ASSIGNED_TYPE: "L4"},
        },
        "target": {"apiVersion": "v1", "kind": "Node", "name": "l4-0"},
    }
    kube.core.create_namespaced_pod_binding("g-0", ns, binding, _preload_content=False)
    pod: client.V1Pod = kube.core.read_namespaced_pod("g-0", ns)
    assert pod.spec.node_name == "l4-0"
    return str(pod.metadata.uid)


def by_name(kube: Kube, ns: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in kube.pods(ns)}


def test_partly_bound_gang_is_completed_beside_its_bound_pod(
    kube: Kube, ns: str, operator: OperatorProcess
) -> None:
    uid = leave_partly_bound(kube, ns, operator)
    operator.start()

    def completed() -> bool:
        pods = by_name(kube, ns)
        return bool(pods["g-1"]["spec"].get("nodeName"))

    wait_for(completed, "rank 1 bound", 30)
    pods = by_name(kube, ns)
    assert pods["g-0"]["metadata"]["uid"] == uid and not pods["g-0"]["metadata"].get(
        "deletionTimestamp"
    )
    rest = pods["g-1"]
    assert rest["spec"]["nodeName"].startswith("l4-") and rest["spec"]["nodeName"] != "l4-0"
    assert rest["metadata"]["annotations"][names.ASSIGNED_GPUS] == "0,1,2,3"
    assert invariants.check(kube.core) == []


def test_partly_bound_gang_whose_rest_cannot_fit_restarts(
    kube: Kube, ns: str, operator: OperatorProcess
) -> None:
    for i in (1, 2, 3):  # every other L4 GPU is taken by another scheduler's pods
        kube.core.create_namespaced_pod(ns, filler(f"f-{i}", f"l4-{i}"), _preload_content=False)
    leave_partly_bound(kube, ns, operator)
    operator.start()

    def restarted() -> bool:
        pod = by_name(kube, ns).get("g-0")
        return pod is None or bool(pod["metadata"].get("deletionTimestamp"))

    wait_for(restarted, "the bound rank deleted", 30)
    assert not by_name(kube, ns)["g-1"]["spec"].get("nodeName")
    assert invariants.check(kube.core) == []
